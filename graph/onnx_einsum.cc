// Einsum of one or two operands: letters only one operand has and the output lacks are
// summed first; then (two operands) the operands are permuted to [batch, kept, summed]
// and [batch, summed, kept], merged to three axes, multiplied by MatMul, split and
// permuted to the output's order. A letter repeated in one operand takes its diagonal
// first. Three or more operands are refused.
#include "graph/onnx_import_internal.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <sstream>

#include "analysis/checked.h"
#include "analysis/interpreter.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "graph/onnx_rules.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"

namespace tofu {
namespace onnximport {

llvm::Error Importer::einsumOp(const onnx::NodeProto &n, NodeEnv &env) {
  std::string eq = stringAttr(n, "equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const int count = env.inputs();
  if (count < 1 || count > 2)
    return where(n, fmt::format("{} operands: only einsums of one or two are translated", count));
  std::vector<std::string> in;
  for (int k = 0; k < count; ++k) {
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    in.push_back(*t);
  }
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    size_t e = lhs.find(',', b);
    terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos)
      break;
    b = e + 1;
  }
  if (int(terms.size()) != count)
    return where(n, fmt::format("equation '{}' has {} operand terms for {} inputs", eq,
                                terms.size(), count));
  // '...' becomes one placeholder letter per broadcast axis ('0', '1', ...).
  int ellipsisRank = -1;
  auto placeholders = [&] {
    std::string fill;
    for (int k = 0; k < std::max(ellipsisRank, 0); ++k)
      fill += char('0' + k);
    return fill;
  };
  auto withPlaceholders = [&](const std::string &term) {
    size_t dots = term.find("...");
    return dots == std::string::npos
               ? term
               : term.substr(0, dots) + placeholders() + term.substr(dots + 3);
  };
  auto expand = [&](const std::string &term, int64_t rank, std::string *err) {
    if (term.find("...") == std::string::npos)
      return term;
    int64_t e = rank - (int64_t(term.size()) - 3);
    if (e < 0) {
      *err = "has more letters than its operand has axes";
      return term;
    }
    if (ellipsisRank >= 0 && ellipsisRank != e) {
      *err = "'...' stands for different numbers of axes in the operands (broadcasting is not "
             "translated)";
      return term;
    }
    ellipsisRank = int(e);
    return withPlaceholders(term);
  };
  std::map<char, int64_t> extent;
  for (int k = 0; k < count; ++k) {
    std::string err;
    terms[k] = expand(terms[k], int64_t(shapeOf(in[k]).size()), &err);
    if (!err.empty())
      return where(n, fmt::format("equation '{}': operand {} {}", eq, k, err));
    const std::vector<int64_t> &shape = shapeOf(in[k]);
    if (terms[k].size() != shape.size())
      return where(n, fmt::format("equation '{}': operand {} has {} letters for rank {}", eq, k,
                                  terms[k].size(), shape.size()));
    for (size_t d = 0; d < shape.size(); ++d) {
      char c = terms[k][d];
      if (!std::isalpha(static_cast<unsigned char>(c)) &&
          !std::isdigit(static_cast<unsigned char>(c)))
        return where(n, fmt::format("equation '{}': '{}' is not a letter", eq, c));
      auto [it, fresh] = extent.emplace(c, shape[d]);
      if (!fresh && it->second != shape[d])
        return where(
            n, fmt::format("equation '{}': letter '{}' is {} in one operand and {} in another "
                           "(broadcasting is not translated)",
                           eq, c, it->second, shape[d]));
    }
  }
  // A letter repeated in one operand takes that operand's diagonal: the two axes moved last,
  // then DiagonalLast, until no letter repeats. The implicit output counts the letters as
  // written (a repeated letter is summed: 'ii' is the trace).
  const std::vector<std::string> written = terms;
  for (int k = 0; k < count; ++k)
    for (;;) {
      std::string &t = terms[k];
      size_t a = 0, b = std::string::npos;
      for (; a < t.size() && b == std::string::npos; ++a)
        b = t.find(t[a], a + 1);
      if (b == std::string::npos)
        break;
      --a;
      const char c = t[a];
      std::vector<int64_t> perm;
      std::string rest;
      for (size_t d = 0; d < t.size(); ++d)
        if (d != a && d != b) {
          perm.push_back(int64_t(d));
          rest += t[d];
        }
      perm.push_back(int64_t(a));
      perm.push_back(int64_t(b));
      const std::string part = fmt::format("{}_diag{}{}", nameOf(n), k, c);
      std::string moved = in[k];
      if (a + 2 != t.size() || b + 1 != t.size())
        TOFU_TRY(moved, b_->transpose(part + "_move", in[k], perm, ""));
      TOFU_TRY(in[k], b_->node(part, "DiagonalLast", {moved}));
      t = rest + c;
    }
  std::string outTerm;
  if (arrow == std::string::npos) { // implicit: broadcast axes, then letters seen once, sorted
    outTerm = placeholders();
    std::string once;
    for (auto [c, e] : extent) {
      int seen = 0;
      for (const std::string &t : written)
        seen += int(std::count(t.begin(), t.end(), c));
      if (seen == 1 && std::isalpha(static_cast<unsigned char>(c)))
        once += c;
    }
    outTerm += once;
  } else {
    outTerm = withPlaceholders(eq.substr(arrow + 2));
    for (char c : outTerm) {
      if (!extent.count(c))
        return where(n, fmt::format("equation '{}': output letter '{}' is in no operand", eq, c));
      if (std::count(outTerm.begin(), outTerm.end(), c) > 1)
        return where(n, fmt::format("equation '{}': output letter '{}' repeats", eq, c));
    }
  }
  const std::string name = nameOf(n), out = n.output(0);
  auto has = [](const std::string &s, char c) { return s.find(c) != std::string::npos; };
  // Sum away what only one operand has and the output lacks.
  for (int k = 0; k < count; ++k) {
    for (size_t d = terms[k].size(); d-- > 0;) {
      char c = terms[k][d];
      if (has(outTerm, c) || (count == 2 && has(terms[1 - k], c)))
        continue;
      int64_t r = int64_t(terms[k].size());
      TOFU_TRY(in[k], b_->node(fmt::format("{}_sum{}_{}", name, k, c), "ReduceSum", {in[k]}, {},
                               {{"pre", int64_t(d)}, {"r", 1}, {"post", r - int64_t(d) - 1}}));
      terms[k].erase(d, 1);
    }
  }
  auto permuteTo = [&](const std::string &tag, const std::string &x, const std::string &from,
                       const std::string &to, const std::string &o) -> llvm::Expected<std::string> {
    std::vector<int64_t> perm;
    for (char c : to)
      perm.push_back(int64_t(from.find(c)));
    bool identity = true;
    for (size_t d = 0; d < perm.size(); ++d)
      identity &= perm[d] == int64_t(d);
    if (identity && o.empty())
      return x;
    if (identity)
      return b_->node(tag, "Identity", {x}, {}, {}, o);
    return b_->transpose(tag, x, perm, o);
  };
  auto dims = [&](const std::string &letters) {
    std::vector<int64_t> v;
    for (char c : letters)
      v.push_back(extent[c]);
    return v;
  };
  auto product = [&](const std::string &letters) {
    int64_t p = 1;
    for (char c : letters)
      p *= extent[c];
    return p;
  };
  if (count == 1) {
    return permuteTo(name, in[0], terms[0], outTerm, out).takeError();
  }
  std::string batch, left, right, summed;
  for (char c : terms[0]) {
    if (has(terms[1], c))
      (has(outTerm, c) ? batch : summed) += c;
    else
      left += c;
  }
  for (char c : terms[1])
    if (!has(terms[0], c))
      right += c;
  std::string a, b;
  TOFU_TRY(a, permuteTo(name + "_a", in[0], terms[0], batch + left + summed, ""));
  TOFU_TRY(b, permuteTo(name + "_b", in[1], terms[1], batch + summed + right, ""));
  std::vector<int64_t> a3 = {product(left), product(summed)},
                       b3 = {product(summed), product(right)};
  if (!batch.empty()) {
    a3.insert(a3.begin(), product(batch));
    b3.insert(b3.begin(), product(batch));
  }
  TOFU_TRY(a, b_->reshaped(name + "_a3", a, a3));
  TOFU_TRY(b, b_->reshaped(name + "_b3", b, b3));
  std::string y;
  TOFU_TRY(y, b_->node(name + "_matmul", "MatMul", {a, b}, {}, {{"b", batch.empty() ? 0 : 1}}));
  std::string produced = batch + left + right;
  std::vector<int64_t> full = dims(produced);
  if (produced == outTerm) {
    TOFU_CHECK(b_->reshape(name + "_split", y, shapeOf(y), full, out));
    return llvm::Error::success();
  }
  TOFU_TRY(y, b_->reshaped(name + "_split", y, full));
  return permuteTo(name, y, produced, outTerm, out).takeError();
}

} // namespace onnximport
} // namespace tofu
