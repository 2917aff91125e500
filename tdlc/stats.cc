// Library statistics and ONNX coverage.
#include "tdlc/stats.h"

#include <fstream>
#include <set>

#include "analysis/sema.h"
#include "analysis/strategy.h"
#include "analysis/verify.h"
#include "fmt/format.h"
#include "graph/onnx_schema.h"
#include "nlohmann/json.hpp"

namespace tofu {

llvm::Expected<LibraryStats> computeStats(const std::string &dir, int opset) {
  LibraryStats s;
  std::set<std::string> opNames;
  for (const std::string &file : findTdlFiles({dir})) {
    SourceManager sources;
    DiagnosticEngine diags(sources);
    auto module = loadModule(file, diags);
    if (!module) {
      std::string msg;
      for (const Diagnostic &d : diags.diagnostics())
        msg += d.str() + "\n";
      llvm::consumeError(module.takeError());
      return stringError(msg + file + " does not check");
    }
    ++s.files;
    for (const ir::OpDef *op : module->opsInFile(file)) {
      ++s.ops;
      opNames.insert(op->name);
      s.withGrad += !op->grads.empty();
      auto table = analyzeOp(*op, completeForVerification(*op, {}, nullptr));
      if (!table) {
        llvm::consumeError(table.takeError());
        ++s.uninstantiable;
        continue;
      }
      s.elementwise += table->elementwise;
      s.opaque += table->opaque;
      bool reduction = false;
      for (const Strategy &st : table->strategies)
        reduction |= st.kind == Strategy::Kind::Reduction;
      s.withReduction += reduction;
    }
  }

  std::string mappingPath = dir + "/onnx_mapping.json";
  std::ifstream in(mappingPath);
  if (!in)
    return stringError("cannot open " + mappingPath);
  nlohmann::json mapping;
  try {
    in >> mapping;
  } catch (const nlohmann::json::exception &e) {
    return stringError(mappingPath + ": " + e.what());
  }
  if (!mapping.contains("ops") || !mapping["ops"].is_object())
    return stringError(mappingPath + ": no \"ops\" object");
  const nlohmann::json &ops = mapping["ops"];
  std::vector<std::string> names = onnxOperatorNames(opset);
  s.onnxTotal = static_cast<unsigned>(names.size());
  std::set<std::string> known(names.begin(), names.end());
  for (const std::string &name : names) {
    if (!ops.contains(name)) {
      s.missing.push_back(name + " (no mapping entry)");
      continue;
    }
    const nlohmann::json &e = ops[name];
    if (e.contains("tdl") && e["tdl"].is_array()) {
      bool ok = true;
      for (const auto &t : e["tdl"])
        if (!t.is_string() || !opNames.count(t.get<std::string>())) {
          s.problems.push_back(
              fmt::format("{}: maps to '{}', which {} does not describe", name, t.dump(), dir));
          ok = false;
        }
      if (ok)
        s.described.push_back(name);
      else
        s.missing.push_back(name + " (mapped to a missing op)");
    } else if (e.contains("importer")) {
      s.folded.push_back(name);
    } else if (e.contains("not_describable") && e["not_describable"].is_string()) {
      s.notDescribable[name] = e["not_describable"].get<std::string>();
    } else if (e.contains("missing")) {
      s.missing.push_back(name);
    } else {
      s.problems.push_back(name + ": the mapping entry has none of tdl, importer, "
                                  "not_describable, missing");
      s.missing.push_back(name);
    }
  }
  for (const auto &[name, entry] : ops.items()) {
    if (known.count(name))
      continue;
    if (entry.contains("domain") && entry["domain"].is_string())
      s.beyond.push_back(fmt::format("{} ({})", name, entry["domain"].get<std::string>()));
    else if (entry.contains("opset") && entry["opset"].is_number_integer() &&
             entry["opset"].get<int>() < opset)
      s.beyond.push_back(fmt::format("{} (opset {})", name, entry["opset"].get<int>()));
    else
      s.problems.push_back(fmt::format("{}: not an ONNX operator at opset {}", name, opset));
  }
  return s;
}

void printStats(llvm::raw_ostream &os, const LibraryStats &s) {
  os << fmt::format("| library | count |\n| --- | ---: |\n");
  os << fmt::format("| files | {} |\n| ops | {} |\n", s.files, s.ops);
  os << fmt::format("| element-wise ops | {} |\n", s.elementwise);
  os << fmt::format("| ops with reduction strategies | {} |\n", s.withReduction);
  os << fmt::format("| opaque ops | {} |\n", s.opaque);
  os << fmt::format("| ops with grad clauses | {} |\n", s.withGrad);
  if (s.uninstantiable)
    os << fmt::format("| ops that do not instantiate with defaults | {} |\n", s.uninstantiable);
  os << "\n";
  os << fmt::format("| ONNX operators (default domain, opset 17) | {} |\n| --- | ---: |\n",
                    s.onnxTotal);
  os << fmt::format("| described in TDL | {} |\n", s.described.size());
  os << fmt::format("| folded or expanded by the importer (static shapes, constants, control "
                    "flow, sequences) | {} |\n",
                    s.folded.size());
  os << fmt::format("| not describable | {} |\n", s.notDescribable.size());
  os << fmt::format("| missing (describable, not written yet) | {} |\n", s.missing.size());
  if (!s.beyond.empty()) {
    std::string list;
    for (const std::string &n : s.beyond)
      list += (list.empty() ? "" : ", ") + n;
    os << "\nTranslated beyond the default domain at opset 17: " << list << "\n";
  }
  std::map<std::string, std::vector<std::string>> byReason;
  for (const auto &[name, reason] : s.notDescribable)
    byReason[reason].push_back(name);
  if (!byReason.empty()) {
    os << "\nNot describable:\n";
    for (const auto &[reason, names] : byReason) {
      std::string list;
      for (const std::string &n : names)
        list += (list.empty() ? "" : ", ") + n;
      os << "  " << reason << ": " << list << "\n";
    }
  }
  if (!s.missing.empty()) {
    std::string list;
    for (const std::string &n : s.missing)
      list += (list.empty() ? "" : ", ") + n;
    os << "\nMissing: " << list << "\n";
  }
  for (const std::string &p : s.problems)
    os << "problem: " << p << "\n";
}

} // namespace tofu
