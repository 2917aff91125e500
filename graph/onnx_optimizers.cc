// ONNX's training-preview optimisers (domain ai.onnx.preview.training, opset 1): Adagrad,
// Momentum and Adam. Each node updates n tensors at once: its inputs are the rate R and the
// step count T (rank 0), then n tensors X, n gradients G and n of each history (Adagrad's
// H; Momentum's V; Adam's V then H); its outputs are the n new X, then the n new of each
// history. Every result is one library op of ops/optim/optim.tdl, as ONNX's reference
// (onnx/backend/test/case/node/{adagrad,momentum,adam}.py) computes it.
#include "graph/onnx_import_internal.h"

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tofu {
namespace onnximport {

llvm::Error Importer::optimizerOp(const onnx::NodeProto &n, NodeEnv &env) {
  const std::string &op = n.op_type();
  const int histories = op == "Adam" ? 2 : 1, per = 2 + histories;
  const int count = env.inputs() - 2;
  if (count < per || count % per != 0)
    return where(n, fmt::format("{} inputs after R and T; {} takes X, G and {} per tensor updated",
                                count, op,
                                op == "Adam"      ? "V and H"
                                : op == "Adagrad" ? "H"
                                                  : "V"));
  const int tensors = count / per;
  if (n.output_size() != tensors * (1 + histories))
    return where(n, fmt::format("{} outputs for {} tensors updated; {} gives {} per tensor",
                                n.output_size(), tensors, op, 1 + histories));
  const std::string name = nameOf(n);
  std::string rate, step;
  TOFU_TRY(rate, tensorInput(n, 0));
  TOFU_TRY(step, tensorInput(n, 1));
  for (const std::string &s : {rate, step})
    if (!shapeOf(s).empty())
      return where(n, fmt::format("'{}' has shape [{}]; R and T are scalars (rank 0)", s,
                                  fmt::join(shapeOf(s), ", ")));
  // The attributes, with the schema's defaults, as rank-0 constants.
  auto scalar = [&](const std::string &attr, float dflt) -> llvm::Expected<std::string> {
    return b_->constant(fmt::format("{}_{}", name, attr), {},
                        {double(floatAttr(n, attr).value_or(dflt))}, false);
  };
  std::string norm;
  TOFU_TRY(norm, scalar("norm_coefficient", 0.0f));
  const std::string mode = stringAttr(n, "mode", "standard");
  if (op == "Momentum" && mode != "standard" && mode != "nesterov")
    return where(n, fmt::format("mode '{}': Momentum's modes are 'standard' and 'nesterov'", mode));

  // What the tensors share: Adagrad's rate and epsilon; Momentum's alpha and its gradient
  // coefficient; Adam's corrected rate, alpha, beta, epsilon and norm_coefficient_post.
  std::string adjustedRate, alpha, beta, eps, post;
  if (op == "Adagrad") {
    std::string decay;
    TOFU_TRY(decay, scalar("decay_factor", 0.0f));
    TOFU_TRY(eps, scalar("epsilon", 1e-6f));
    TOFU_TRY(adjustedRate, b_->node(name + "_rate", "onnx_adagrad_rate", {rate, step, decay}));
  } else if (op == "Momentum") {
    // ONNX's checker has made sure alpha, beta, mode and norm_coefficient are given.
    std::string givenBeta;
    TOFU_TRY(alpha, scalar("alpha", 0.0f));
    TOFU_TRY(givenBeta, scalar("beta", 0.0f));
    TOFU_TRY(beta, b_->node(name + "_beta", "onnx_momentum_beta", {step, givenBeta}));
  } else {
    TOFU_TRY(alpha, scalar("alpha", 0.9f));
    TOFU_TRY(beta, scalar("beta", 0.999f));
    TOFU_TRY(eps, scalar("epsilon", 1e-6f));
    TOFU_TRY(post, scalar("norm_coefficient_post", 0.0f));
    TOFU_TRY(adjustedRate, b_->node(name + "_rate", "onnx_adam_rate", {rate, step, alpha, beta}));
  }

  for (int k = 0; k < tensors; ++k) {
    std::vector<std::string> in; // X, G, then the histories
    for (int j = 0; j < per; ++j) {
      std::string t;
      TOFU_TRY(t, tensorInput(n, 2 + j * tensors + k));
      if (j > 0 && shapeOf(t) != shapeOf(in[0]))
        return where(n, fmt::format("'{}' has shape [{}] and '{}' [{}]; they must agree", t,
                                    fmt::join(shapeOf(t), ", "), in[0],
                                    fmt::join(shapeOf(in[0]), ", ")));
      in.push_back(t);
    }
    const std::string part = fmt::format("{}_{}", name, k);
    const std::string &x = in[0], &xNew = n.output(k);
    auto history = [&](int j) -> const std::string & { return n.output((1 + j) * tensors + k); };
    std::string g;
    TOFU_TRY(g, b_->node(part + "_grad", "weight_decay_grad", {in[1], x, norm}));
    if (op == "Adagrad") {
      std::string h;
      TOFU_TRY(h, b_->node(part + "_h", "adagrad_history", {in[2], g}, {}, {}, history(0)));
      TOFU_CHECK(
          b_->node(part + "_x", "adagrad_update", {x, g, h, adjustedRate, eps}, {}, {}, xNew));
    } else if (op == "Momentum") {
      std::string v;
      TOFU_TRY(v, b_->node(part + "_v", "onnx_momentum_velocity", {in[2], g, alpha, beta}, {}, {},
                           history(0)));
      if (mode == "standard")
        TOFU_CHECK(b_->node(part + "_x", "momentum_update", {x, v, rate}, {}, {}, xNew));
      else
        TOFU_CHECK(b_->node(part + "_x", "nesterov_update", {x, g, v, rate, alpha}, {}, {}, xNew));
    } else {
      std::string v, h;
      TOFU_TRY(v, b_->node(part + "_v", "adam_m", {in[2], g, alpha}, {}, {}, history(0)));
      TOFU_TRY(h, b_->node(part + "_h", "adam_v", {in[3], g, beta}, {}, {}, history(1)));
      TOFU_CHECK(b_->node(part + "_x", "onnx_adam_update", {x, v, h, adjustedRate, eps, post}, {},
                          {}, xNew));
    }
  }
  return llvm::Error::success();
}

} // namespace onnximport
} // namespace tofu
