// Strategy tables as text and as JSON.
#include "analysis/report.h"

#include "fmt/format.h"

namespace tofu {

std::string describeStrategy(const StrategyTable &t, const Strategy &s) {
  const std::string &var = t.op.vars[s.var].name;
  if (s.kind == Strategy::Kind::Output)
    return fmt::format("{} (output dim {})", var, s.outputDim);
  return fmt::format("{} (reduction, {})", var, ir::reducerName(s.reducer));
}

nlohmann::ordered_json strategiesJson(const StrategyTable &t) {
  using json = nlohmann::ordered_json;
  json op;
  op["name"] = t.op.name;
  json attrs = json::object();
  for (const auto &[name, value] : t.op.attrs)
    attrs[name] = value;
  op["attrs"] = attrs;
  json groups = json::object();
  for (const auto &[name, len] : t.op.groups)
    groups[name] = len;
  op["groups"] = groups;
  json inputs = json::array();
  for (const InstInput &in : t.op.inputs)
    inputs.push_back({{"name", in.name}, {"rank", in.rank}});
  op["inputs"] = inputs;
  op["output_rank"] = t.op.outputVars.size();
  op["elementwise"] = t.elementwise;
  op["opaque"] = t.opaque;
  json strategies = json::array();
  for (const Strategy &s : t.strategies) {
    json j;
    j["kind"] = s.kind == Strategy::Kind::Output ? "output" : "reduction";
    j["var"] = t.op.vars[s.var].name;
    if (s.kind == Strategy::Kind::Output)
      j["dim"] = s.outputDim;
    else
      j["reducer"] = ir::reducerName(s.reducer);
    json access = json::object();
    json regions = json::array();
    for (unsigned i = 0; i < s.inputs.size(); ++i) {
      json dims = json::array();
      for (Access a : s.inputs[i].access)
        dims.push_back(accessName(a));
      access[t.op.inputs[i].name] = dims;
      regions.push_back(t.regionString(i, s.inputs[i].worker0));
    }
    j["inputs"] = access;
    j["regions"] = regions;
    strategies.push_back(j);
  }
  op["strategies"] = strategies;
  return op;
}

void printStrategyTable(llvm::raw_ostream &os, const StrategyTable &t) {
  os << "op " << t.op.name;
  if (!t.op.attrs.empty()) {
    os << "<";
    for (size_t i = 0; i < t.op.attrs.size(); ++i)
      os << (i ? ", " : "") << t.op.attrs[i].first << " = " << t.op.attrs[i].second;
    os << ">";
  }
  if (!t.op.groups.empty()) {
    os << "{";
    for (size_t i = 0; i < t.op.groups.size(); ++i)
      os << (i ? ", " : "") << t.op.groups[i].first << " = " << t.op.groups[i].second;
    os << "}";
  }
  os << ": inputs";
  for (const InstInput &in : t.op.inputs)
    os << " " << in.name << "(rank " << in.rank << ")";
  os << ", output rank " << t.op.outputVars.size();
  if (t.elementwise)
    os << ", element-wise";
  if (t.opaque)
    os << ", opaque";
  os << "\n";
  size_t width = 10;
  for (const Strategy &s : t.strategies)
    width = std::max(width, describeStrategy(t, s).size());
  for (const Strategy &s : t.strategies) {
    std::string line = fmt::format("  {:<{}}", describeStrategy(t, s), width);
    for (unsigned i = 0; i < s.inputs.size(); ++i) {
      line += "  " + t.op.inputs[i].name + ":";
      for (Access a : s.inputs[i].access)
        line += fmt::format(" {}", accessName(a));
    }
    os << line << "\n";
    std::string regions;
    for (unsigned i = 0; i < s.inputs.size(); ++i)
      regions += (i ? "  " : "") + t.regionString(i, s.inputs[i].worker0);
    os << fmt::format("  {:<{}}  worker 0 reads {}\n", "", width, regions);
  }
  if (t.strategies.empty())
    os << "  (no strategy: the output is a scalar and no reducer is at top level)\n";
}

} // namespace tofu
