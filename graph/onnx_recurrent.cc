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
  if (op == "LSTM" && env.present(7))
    return where(n, "peephole connections (input P) are not translated");
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
  std::optional<std::string> B8, H0, C0;
  for (auto [k, slot] :
       {std::pair<int, std::optional<std::string> *>{3, &B8}, {5, &H0}, {6, &C0}}) {
    if (k == 6 && op != "LSTM")
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
    group_ = fmt::format("{}_t{}", name, t + 1);
    coalesce_ = name + "/x";
    xt[t] = sliceAxis(fmt::format("{}_x_t{}", name, t + 1), *X, seqAxis, t, 1);
    coalesce_.clear(); // a reshape may be several ops: not keyed
    xt[t] = reshaped(fmt::format("{}_x_t{}_flat", name, t + 1), xt[t], {B, I});
  }
  coalesce_.clear();
  group_ = name;
  // The state of direction d from an initial state tensor, [B, H].
  auto initial = [&](const std::optional<std::string> &s, int64_t d, const std::string &what) {
    std::string tag = fmt::format("{}_d{}_{}0", name, d, what);
    if (!s)
      return constant(tag, {B, H}, std::vector<double>(size_t(B * H), 0.0), false);
    return reshaped(tag + "_flat", sliceAxis(tag, *s, layout == 0 ? 0 : 1, d, 1), {B, H});
  };
  std::vector<std::vector<std::string>> hs(dirs, std::vector<std::string>(T)); // h per t
  std::vector<std::string> hLast(dirs), cLast(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const std::string dn = fmt::format("{}_d{}", name, d);
    // Direction d's weights: W [G, I], R [G, H], biases Wb, Rb [G] (zeros when B is absent).
    std::string Wd = reshaped(dn + "_W_flat", sliceAxis(dn + "_W", *W, 0, d, 1), {G, I});
    std::string Rd = reshaped(dn + "_R_flat", sliceAxis(dn + "_R", *R, 0, d, 1), {G, H});
    std::string Wb, Rb;
    if (B8) {
      std::string Bd = reshaped(dn + "_B_flat", sliceAxis(dn + "_B", *B8, 0, d, 1), {2 * G});
      Wb = sliceAxis(dn + "_Wb", Bd, 0, 0, G);
      Rb = sliceAxis(dn + "_Rb", Bd, 0, G, G);
    }
    auto zeros = [&](const std::string &tag, int64_t size) {
      return constant(dn + "_" + tag, {size}, std::vector<double>(size_t(size), 0.0), false);
    };
    auto biasSum = [&](const std::string &tag, int64_t start, int64_t count) {
      if (!B8)
        return zeros(tag, count);
      std::string a = count == G ? Wb : sliceAxis(dn + "_Wb_" + tag, Wb, 0, start, count);
      std::string b = count == G ? Rb : sliceAxis(dn + "_Rb_" + tag, Rb, 0, start, count);
      return node(dn + "_" + tag, "Add", {a, b});
    };
    // ONNX orders LSTM gates [i, o, f, c]; lstm_cell_c/h read [i, f, o, g]: the middle
    // two blocks swap (on W, R and the bias, once per direction, not per step).
    auto lstmOrder = [&](const std::string &tag, const std::string &x) {
      std::vector<std::string> blocks;
      for (int64_t q : {0, 2, 1, 3})
        blocks.push_back(sliceAxis(fmt::format("{}_{}_gate{}", dn, tag, q), x, 0, q * H, H));
      return concatAll(dn + "_" + tag + "_ifog", blocks, 0, "");
    };
    std::string h = initial(H0, d, "h"), c;
    std::string Wg, Rg, bg, Wh, Rh, bh, Wbh, Rbh, one;
    const bool lbr = op == "GRU" && intAttr(n, "linear_before_reset").value_or(0) != 0;
    if (op == "LSTM") {
      c = initial(C0, d, "c");
      Wg = lstmOrder("W", Wd);
      Rg = lstmOrder("R", Rd);
      bg = lstmOrder("b", biasSum("b", 0, G));
    } else if (op == "GRU") { // gates [z, r, h]: z and r together, the candidate apart
      Wg = sliceAxis(dn + "_Wzr", Wd, 0, 0, 2 * H);
      Rg = sliceAxis(dn + "_Rzr", Rd, 0, 0, 2 * H);
      bg = biasSum("bzr", 0, 2 * H);
      Wh = sliceAxis(dn + "_Wh", Wd, 0, 2 * H, H);
      Rh = sliceAxis(dn + "_Rh", Rd, 0, 2 * H, H);
      if (lbr) { // h~ = tanh(x Wh^T + Wbh + r * (h Rh^T + Rbh)): two products with biases
        auto bias = [&](const std::string &tag, const std::string &b) {
          std::string v = B8 ? sliceAxis(dn + "_" + tag, b, 0, 2 * H, H) : zeros(tag, H);
          return broadcastTo(dn + "_" + tag + "_rows", v, {B, H});
        };
        Wbh = bias("Wbh", Wb);
        Rbh = bias("Rbh", Rb);
        one = constant(dn + "_one", {}, {1.0}, false);
      } else {
        bh = biasSum("bh", 2 * H, H);
      }
    } else {
      Wg = Wd;
      Rg = Rd;
      bg = biasSum("b", 0, G);
    }
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = d == 0 && direction != "reverse" ? s : T - 1 - s;
      group_ = fmt::format("{}_t{}", dn, t + 1);
      const std::string cell = fmt::format("{}_t{}", dn, t + 1);
      auto keyed = [&](const std::string &role, const std::string &nodeName, const std::string &o,
                       std::vector<std::string> in, std::map<std::string, int64_t> attrs = {},
                       std::map<std::string, int64_t> groups = {}) {
        coalesce_ = dn + "/" + role;
        std::string r = node(nodeName, o, std::move(in), std::move(attrs), std::move(groups));
        coalesce_.clear();
        return r;
      };
      const std::string &x = xt[t];
      if (op == "LSTM") {
        std::string gates = keyed("gates", cell + "_gates", "lstm_gates", {x, h, Wg, Rg, bg});
        c = keyed("c", cell + "_c", "lstm_cell_c", {gates, c});
        h = keyed("h", cell + "_h", "lstm_cell_h", {gates, c});
      } else if (op == "GRU") {
        std::string zr =
            keyed("zr", cell + "_zr", "Sigmoid",
                  {keyed("zr_pre", cell + "_zr_pre", "lstm_gates", {x, h, Wg, Rg, bg})});
        std::string z =
            keyed("z", cell + "_z", "Slice", {zr},
                  {{"start", 0}, {"n", H}, {"step", 1}, {"m", 2 * H}}, {{"pre", 1}, {"post", 0}});
        std::string r =
            keyed("r", cell + "_r", "Slice", {zr},
                  {{"start", H}, {"n", H}, {"step", 1}, {"m", 2 * H}}, {{"pre", 1}, {"post", 0}});
        std::string pre;
        if (lbr) {
          std::string xh = keyed("xh", cell + "_xh", "GemmNT", {x, Wh, Wbh, one, one});
          std::string hh = keyed("hh", cell + "_hh", "GemmNT", {h, Rh, Rbh, one, one});
          pre = keyed("cand_pre", cell + "_cand_pre", "Add",
                      {xh, keyed("rhh", cell + "_rhh", "Mul", {r, hh})});
        } else {
          std::string rh = keyed("rh", cell + "_rh", "Mul", {r, h});
          pre = keyed("cand_pre", cell + "_cand_pre", "lstm_gates", {x, rh, Wh, Rh, bh});
        }
        std::string cand = keyed("cand", cell + "_cand", "Tanh", {pre});
        // h' = (1 - z) h~ + z h = h~ + z (h - h~)
        std::string diff = keyed("diff", cell + "_diff", "Sub", {h, cand});
        h = keyed("h", cell + "_h", "Add",
                  {cand, keyed("zdiff", cell + "_zdiff", "Mul", {z, diff})});
      } else {
        h = keyed("h", cell + "_h", act[d],
                  {keyed("pre", cell + "_pre", "lstm_gates", {x, h, Wg, Rg, bg})});
      }
      hs[d][t] = h;
    }
    group_ = name;
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
      std::vector<std::string> perDir;
      for (int64_t d = 0; d < dirs; ++d)
        perDir.push_back(reshaped(fmt::format("{}_y_t{}_d{}", name, t + 1, d), hs[d][t],
                                  layout == 0 ? std::vector<int64_t>{1, 1, B, H}
                                              : std::vector<int64_t>{B, 1, 1, H}));
      steps.push_back(dirs == 1 ? perDir[0]
                                : concatAll(fmt::format("{}_y_t{}", name, t + 1), perDir,
                                            layout == 0 ? 1 : 2, ""));
    }
    concatAll(name + "_y", steps, layout == 0 ? 0 : 1, n.output(0));
  }
  for (int k : {1, 2}) {
    if (!used(k))
      continue;
    if (k == 2 && op != "LSTM")
      return where(n, "has no output 2");
    std::vector<std::string> parts;
    for (int64_t d = 0; d < dirs; ++d)
      parts.push_back(
          reshaped(fmt::format("{}_last{}_d{}", name, k, d), k == 1 ? hLast[d] : cLast[d],
                   layout == 0 ? std::vector<int64_t>{1, B, H} : std::vector<int64_t>{B, 1, H}));
    concatAll(fmt::format("{}_last{}", name, k), parts, layout == 0 ? 0 : 1, n.output(k));
  }
  return llvm::Error::success();
}

} // namespace onnximport
} // namespace tofu
