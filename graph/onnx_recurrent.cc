// LSTM, GRU and RNN, unrolled over the static sequence: one cell per timestep and
// direction, built of library ops with grad clauses (lstm_gates is the affine map
// x W^T + h R^T + b of any gate count). The cells of one direction share coalesce keys,
// so the search gives every timestep one strategy, as the paper does for its RNN.
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

llvm::Error Importer::recurrentOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string &op = n.op_type();
  const int gatesPer = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  auto X = tensorInput(n, 0), W = tensorInput(n, 1), R = tensorInput(n, 2);
  if (!X)
    return X.takeError();
  if (!W)
    return W.takeError();
  if (!R)
    return R.takeError();
  const int64_t layout = intAttr(n, "layout").value_or(0);
  if (layout != 0 && layout != 1)
    return where(n, fmt::format("layout {} is not 0 or 1", layout));
  std::string direction = "forward";
  std::vector<std::string> activations;
  for (const onnx::AttributeProto &a : n.attribute()) {
    if (a.name() == "direction")
      direction = a.s();
    else if (a.name() == "activations")
      activations.assign(a.strings().begin(), a.strings().end());
    else if (a.name() == "clip")
      return where(n, "cell clipping (clip) is not translated");
    else if (a.name() == "activation_alpha" || a.name() == "activation_beta")
      return where(n, "activations with parameters (activation_alpha/beta) are not translated");
  }
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    return where(n,
                 fmt::format("direction '{}' is not forward, reverse or bidirectional", direction));
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (intAttr(n, "input_forget").value_or(0) != 0)
    return where(n, "coupled input and forget gates (input_forget) are not translated");
  // The activations, per direction: the defaults, or RNN's Tanh/Relu/Sigmoid.
  std::vector<std::string> defaults = op == "LSTM"
                                          ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                      : op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                    : std::vector<std::string>{"Tanh"};
  std::vector<std::string> act(dirs, "Tanh");
  if (!activations.empty()) {
    if (activations.size() != defaults.size() * size_t(dirs))
      return where(n, fmt::format("{} activations for {} direction(s); {} expects {} per direction",
                                  activations.size(), dirs, op, defaults.size()));
    for (int64_t d = 0; d < dirs; ++d)
      for (size_t k = 0; k < defaults.size(); ++k) {
        const std::string &a = activations[d * defaults.size() + k];
        bool ok = op == "RNN" ? (a == "Tanh" || a == "Relu" || a == "Sigmoid") : a == defaults[k];
        if (!ok)
          return where(n, fmt::format("activation '{}' is not translated (the {} cell uses {})", a,
                                      op, op == "RNN" ? "Tanh, Relu or Sigmoid" : defaults[k]));
        if (op == "RNN")
          act[d] = a;
      }
  }
  const std::vector<int64_t> xs = shapeOf(*X), ws = shapeOf(*W), rs = shapeOf(*R);
  if (xs.size() != 3 || ws.size() != 3 || rs.size() != 3)
    return where(n, "X, W and R must be of rank 3");
  const int64_t T = xs[layout == 0 ? 0 : 1], B = xs[layout == 0 ? 1 : 0], I = xs[2];
  const int64_t H = rs[2];
  if (auto h = intAttr(n, "hidden_size"); h && *h != H)
    return where(n, fmt::format("hidden_size is {} but R's last axis is {}", *h, H));
  if (ws != std::vector<int64_t>{dirs, gatesPer * H, I} ||
      rs != std::vector<int64_t>{dirs, gatesPer * H, H})
    return where(n, fmt::format("W and R must be [{}, {}, {}] and [{}, {}, {}]", dirs, gatesPer * H,
                                I, dirs, gatesPer * H, H));
  if (env.present(4)) { // sequence_lens: every sequence of the full length, or refused
    auto lens = ints(env.input(4), "sequence_lens");
    if (!lens)
      return where(n, "variable sequence lengths are not translated: " +
                          llvm::toString(lens.takeError()));
    for (int64_t l : *lens)
      if (l != T)
        return where(n, fmt::format("a sequence of length {} in a batch of length {}: variable "
                                    "sequence lengths are not translated",
                                    l, T));
  }
  std::optional<std::string> B8, H0, C0, P;
  for (auto [k, slot] :
       {std::pair<int, std::optional<std::string> *>{3, &B8}, {5, &H0}, {6, &C0}, {7, &P}}) {
    if (k >= 6 && op != "LSTM")
      continue;
    if (!env.present(k))
      continue;
    auto t = tensorInput(n, k);
    if (!t)
      return t.takeError();
    *slot = *t;
  }
  const std::vector<int64_t> stateShape =
      layout == 0 ? std::vector<int64_t>{dirs, B, H} : std::vector<int64_t>{B, dirs, H};
  if (B8 && shapeOf(*B8) != std::vector<int64_t>{dirs, 2 * gatesPer * H})
    return where(n, fmt::format("B must be [{}, {}]", dirs, 2 * gatesPer * H));
  if (P && shapeOf(*P) != std::vector<int64_t>{dirs, 3 * H})
    return where(n, fmt::format("P must be [{}, {}]", dirs, 3 * H));
  for (const auto *s : {&H0, &C0})
    if (*s && shapeOf(**s) != stateShape)
      return where(n, fmt::format("initial states must be [{}, {}, {}]", stateShape[0],
                                  stateShape[1], stateShape[2]));
  const std::string name = nameOf(n);
  const int64_t G = gatesPer * H;
  // The input at every timestep, [B, I]; both directions read them.
  std::vector<std::string> xt(T);
  const int64_t seqAxis = layout == 0 ? 0 : 1;
  for (int64_t t = 0; t < T; ++t) {
    b_->group = fmt::format("{}_t{}", name, t + 1);
    b_->coalesce = name + "/x";
    TOFU_TRY(xt[t], b_->sliceAxis(fmt::format("{}_x_t{}", name, t + 1), *X, seqAxis, t, 1));
    b_->coalesce.clear(); // a reshape may be several ops: not keyed
    TOFU_TRY(xt[t], b_->reshaped(fmt::format("{}_x_t{}_flat", name, t + 1), xt[t], {B, I}));
  }
  b_->coalesce.clear();
  b_->group = name;
  // The state of direction d from an initial state tensor, [B, H].
  auto initial = [&](const std::optional<std::string> &s, int64_t d,
                     const std::string &what) -> llvm::Expected<std::string> {
    std::string tag = fmt::format("{}_d{}_{}0", name, d, what);
    if (!s)
      return b_->constant(tag, {B, H}, std::vector<double>(size_t(B * H), 0.0), false);
    std::string slice;
    TOFU_TRY(slice, b_->sliceAxis(tag, *s, layout == 0 ? 0 : 1, d, 1));
    return b_->reshaped(tag + "_flat", slice, {B, H});
  };
  // Entry d of axis 0 of `x`, flattened to `to`.
  auto entry = [&](const std::string &tag, const std::string &x, int64_t d,
                   const std::vector<int64_t> &to) -> llvm::Expected<std::string> {
    std::string slice;
    TOFU_TRY(slice, b_->sliceAxis(tag, x, 0, d, 1));
    return b_->reshaped(tag + "_flat", slice, to);
  };
  std::vector<std::vector<std::string>> hs(dirs, std::vector<std::string>(T)); // h per t
  std::vector<std::string> hLast(dirs), cLast(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string dn = fmt::format("{}_d{}", name, d);
    // Direction d's weights: W [G, I], R [G, H], biases Wb, Rb [G] (zeros when B is absent).
    std::string Wd, Rd, Wb, Rb;
    TOFU_TRY(Wd, entry(dn + "_W", *W, d, {G, I}));
    TOFU_TRY(Rd, entry(dn + "_R", *R, d, {G, H}));
    if (B8) {
      std::string Bd;
      TOFU_TRY(Bd, entry(dn + "_B", *B8, d, {2 * G}));
      TOFU_TRY(Wb, b_->sliceAxis(dn + "_Wb", Bd, 0, 0, G));
      TOFU_TRY(Rb, b_->sliceAxis(dn + "_Rb", Bd, 0, G, G));
    }
    auto zeros = [&](const std::string &tag, int64_t size) {
      return b_->constant(dn + "_" + tag, {size}, std::vector<double>(size_t(size), 0.0), false);
    };
    auto biasSum = [&](const std::string &tag, int64_t start,
                       int64_t count) -> llvm::Expected<std::string> {
      if (!B8)
        return zeros(tag, count);
      std::string a = Wb, b = Rb;
      if (count != G) {
        TOFU_TRY(a, b_->sliceAxis(dn + "_Wb_" + tag, Wb, 0, start, count));
        TOFU_TRY(b, b_->sliceAxis(dn + "_Rb_" + tag, Rb, 0, start, count));
      }
      return b_->node(dn + "_" + tag, "Add", {a, b});
    };
    // ONNX orders LSTM gates [i, o, f, c] and peepholes [i, o, f]; lstm_cell_c/h read
    // [i, f, o, g] and lstm_peephole_* [i, f, o]: the second and third blocks swap (on W, R,
    // the bias and P, once per direction, not per step). `gates` is 4, or 3 for P.
    auto lstmOrder = [&](const std::string &tag, const std::string &x,
                         size_t gates = 4) -> llvm::Expected<std::string> {
      std::vector<std::string> blocks;
      for (int64_t q : std::vector<int64_t>{0, 2, 1, 3}) {
        if (blocks.size() == gates)
          break;
        std::string block;
        TOFU_TRY(block, b_->sliceAxis(fmt::format("{}_{}_gate{}", dn, tag, q), x, 0, q * H, H));
        blocks.push_back(block);
      }
      return b_->concatAll(dn + "_" + tag + "_" + std::string("ifog", gates), blocks, 0, "");
    };
    std::string h, c;
    TOFU_TRY(h, initial(H0, d, "h"));
    std::string Wg, Rg, bg, Wh, Rh, bh, Wbh, Rbh, one, peep;
    if (P) {
      std::string Pd;
      TOFU_TRY(Pd, entry(dn + "_P", *P, d, {3 * H}));
      TOFU_TRY(peep, lstmOrder("P", Pd, 3));
    }
    const bool lbr = op == "GRU" && intAttr(n, "linear_before_reset").value_or(0) != 0;
    if (op == "LSTM") {
      TOFU_TRY(c, initial(C0, d, "c"));
      TOFU_TRY(Wg, lstmOrder("W", Wd));
      TOFU_TRY(Rg, lstmOrder("R", Rd));
      std::string bias;
      TOFU_TRY(bias, biasSum("b", 0, G));
      TOFU_TRY(bg, lstmOrder("b", bias));
    } else if (op == "GRU") { // gates [z, r, h]: z and r together, the candidate apart
      TOFU_TRY(Wg, b_->sliceAxis(dn + "_Wzr", Wd, 0, 0, 2 * H));
      TOFU_TRY(Rg, b_->sliceAxis(dn + "_Rzr", Rd, 0, 0, 2 * H));
      TOFU_TRY(bg, biasSum("bzr", 0, 2 * H));
      TOFU_TRY(Wh, b_->sliceAxis(dn + "_Wh", Wd, 0, 2 * H, H));
      TOFU_TRY(Rh, b_->sliceAxis(dn + "_Rh", Rd, 0, 2 * H, H));
      if (lbr) { // h~ = tanh(x Wh^T + Wbh + r * (h Rh^T + Rbh)): two products with biases
        auto bias = [&](const std::string &tag,
                        const std::string &b) -> llvm::Expected<std::string> {
          std::string v;
          if (B8)
            TOFU_TRY(v, b_->sliceAxis(dn + "_" + tag, b, 0, 2 * H, H));
          else
            TOFU_TRY(v, zeros(tag, H));
          return b_->broadcastTo(dn + "_" + tag + "_rows", v, {B, H});
        };
        TOFU_TRY(Wbh, bias("Wbh", Wb));
        TOFU_TRY(Rbh, bias("Rbh", Rb));
        TOFU_TRY(one, b_->constant(dn + "_one", {}, {1.0}, false));
      } else {
        TOFU_TRY(bh, biasSum("bh", 2 * H, H));
      }
    } else {
      Wg = Wd;
      Rg = Rd;
      TOFU_TRY(bg, biasSum("b", 0, G));
    }
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = d == 0 && direction != "reverse" ? s : T - 1 - s;
      b_->group = fmt::format("{}_t{}", dn, t + 1);
      const std::string cell = fmt::format("{}_t{}", dn, t + 1);
      // A node of the cell, keyed by its role: the same role at every step coalesces.
      auto keyed = [&](const std::string &role, const std::string &o, std::vector<std::string> in,
                       std::map<std::string, int64_t> attrs = {},
                       std::map<std::string, int64_t> groups = {}) {
        b_->coalesce = dn + "/" + role;
        auto r = b_->node(cell + "_" + role, o, std::move(in), std::move(attrs), std::move(groups));
        b_->coalesce.clear();
        return r;
      };
      const std::string &x = xt[t];
      if (op == "LSTM") {
        std::string gates;
        TOFU_TRY(gates, keyed("gates", "lstm_gates", {x, h, Wg, Rg, bg}));
        if (P)
          TOFU_TRY(gates, keyed("peep_if", "lstm_peephole_if", {gates, c, peep}));
        TOFU_TRY(c, keyed("c", "lstm_cell_c", {gates, c}));
        if (P)
          TOFU_TRY(gates, keyed("peep_o", "lstm_peephole_o", {gates, c, peep}));
        TOFU_TRY(h, keyed("h", "lstm_cell_h", {gates, c}));
      } else if (op == "GRU") {
        std::string zrPre, zr, z, r, pre, cand, diff, zdiff;
        TOFU_TRY(zrPre, keyed("zr_pre", "lstm_gates", {x, h, Wg, Rg, bg}));
        TOFU_TRY(zr, keyed("zr", "Sigmoid", {zrPre}));
        TOFU_TRY(z, keyed("z", "Slice", {zr}, {{"start", 0}, {"n", H}, {"step", 1}, {"m", 2 * H}},
                          {{"pre", 1}, {"post", 0}}));
        TOFU_TRY(r, keyed("r", "Slice", {zr}, {{"start", H}, {"n", H}, {"step", 1}, {"m", 2 * H}},
                          {{"pre", 1}, {"post", 0}}));
        if (lbr) {
          std::string xh, hh, rhh;
          TOFU_TRY(xh, keyed("xh", "GemmNT", {x, Wh, Wbh, one, one}));
          TOFU_TRY(hh, keyed("hh", "GemmNT", {h, Rh, Rbh, one, one}));
          TOFU_TRY(rhh, keyed("rhh", "Mul", {r, hh}));
          TOFU_TRY(pre, keyed("cand_pre", "Add", {xh, rhh}));
        } else {
          std::string rh;
          TOFU_TRY(rh, keyed("rh", "Mul", {r, h}));
          TOFU_TRY(pre, keyed("cand_pre", "lstm_gates", {x, rh, Wh, Rh, bh}));
        }
        TOFU_TRY(cand, keyed("cand", "Tanh", {pre}));
        // h' = (1 - z) h~ + z h = h~ + z (h - h~)
        TOFU_TRY(diff, keyed("diff", "Sub", {h, cand}));
        TOFU_TRY(zdiff, keyed("zdiff", "Mul", {z, diff}));
        TOFU_TRY(h, keyed("h", "Add", {cand, zdiff}));
      } else {
        std::string pre;
        TOFU_TRY(pre, keyed("pre", "lstm_gates", {x, h, Wg, Rg, bg}));
        TOFU_TRY(h, keyed("h", act[d], {pre}));
      }
      hs[d][t] = h;
    }
    b_->group = name;
    hLast[d] = h;
    cLast[d] = c;
  }
  // Y: [T, dirs, B, H] (layout 0) or [B, T, dirs, H]; Y_h and Y_c: the state shape.
  auto used = [&](int k) {
    return k < n.output_size() && !n.output(k).empty() && consumed_.count(n.output(k));
  };
  if (used(0)) {
    std::vector<std::string> steps;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::string> perDir(dirs);
      for (int64_t d = 0; d < dirs; ++d)
        TOFU_TRY(perDir[d], b_->reshaped(fmt::format("{}_y_t{}_d{}", name, t + 1, d), hs[d][t],
                                         layout == 0 ? std::vector<int64_t>{1, 1, B, H}
                                                     : std::vector<int64_t>{B, 1, 1, H}));
      std::string y = perDir[0];
      if (dirs > 1)
        TOFU_TRY(y, b_->concatAll(fmt::format("{}_y_t{}", name, t + 1), perDir, layout == 0 ? 1 : 2,
                                  ""));
      steps.push_back(y);
    }
    TOFU_CHECK(b_->concatAll(name + "_y", steps, layout == 0 ? 0 : 1, n.output(0)));
  }
  for (int k : {1, 2}) {
    if (!used(k))
      continue;
    if (k == 2 && op != "LSTM")
      return where(n, "has no output 2");
    std::vector<std::string> parts(dirs);
    for (int64_t d = 0; d < dirs; ++d)
      TOFU_TRY(parts[d],
               b_->reshaped(fmt::format("{}_last{}_d{}", name, k, d), k == 1 ? hLast[d] : cLast[d],
                            layout == 0 ? std::vector<int64_t>{1, B, H}
                                        : std::vector<int64_t>{B, 1, H}));
    TOFU_CHECK(
        b_->concatAll(fmt::format("{}_last{}", name, k), parts, layout == 0 ? 0 : 1, n.output(k)));
  }
  return llvm::Error::success();
}

} // namespace onnximport
} // namespace tofu
