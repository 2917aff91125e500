// Finite-difference checks of backward ops.
#include "analysis/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "analysis/printer.h"
#include "analysis/verify.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;

/// The instantiated forward op with concrete shapes, inputs and the output's gradient.
struct Forward {
  const InstOp *op = nullptr;
  Shapes shapes;
  std::vector<Tensor> inputs;
  Tensor out, dOut;
};

double lossOf(const Forward &f, const std::vector<Tensor> &inputs, const OpaqueRegistry &opaques,
              bool &failed) {
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : inputs)
    ptrs.push_back(&t);
  auto out = evaluate(*f.op, f.shapes, ptrs, fullRanges(f.shapes), opaques);
  if (!out) {
    llvm::consumeError(out.takeError());
    failed = true;
    return 0;
  }
  double l = 0;
  for (int64_t k = 0; k < out->size(); ++k)
    l += out->data[k] * f.dOut.data[k];
  return l;
}

/// Every clause of `def`, not checked, for the same reason.
std::vector<GradCheck> skippedAll(const ir::OpDef &def, const std::string &why) {
  std::vector<GradCheck> out;
  for (const ir::Grad &g : def.grads) {
    GradCheck c;
    c.input = def.inputs[g.input].name;
    c.call = g.call->callee->name;
    c.skipped = true;
    c.problem = why;
    out.push_back(std::move(c));
  }
  return out;
}

/// The result of `g`'s backward op for the forward `f` (its inputs, output and dOut).
llvm::Expected<Tensor> clauseResult(const ir::Grad &g, const Forward &f,
                                    const OpaqueRegistry &opaques) {
  const ir::OpCall &call = *g.call;
  auto tensorOf = [&](const ir::TensorRef &t) -> const Tensor & {
    return t.source == ir::TensorRef::Source::Input ? f.inputs[t.input]
           : t.source == ir::TensorRef::Source::Out ? f.out
                                                    : f.dOut;
  };
  auto calleeInst =
      gradCallInstantiation(call, *f.op, f.shapes.inputs, [&](const ir::TensorRef &t) {
        return static_cast<unsigned>(tensorOf(t).shape.size());
      });
  if (!calleeInst)
    return llvm::make_error<llvm::StringError>("the clause cannot be evaluated here: " +
                                                   llvm::toString(calleeInst.takeError()),
                                               llvm::inconvertibleErrorCode());
  std::vector<const Tensor *> args;
  std::vector<std::vector<int64_t>> argShapes;
  for (const ir::ExprPtr &arg : call.args) {
    args.push_back(&tensorOf(llvm::cast<ir::TensorRef>(*arg)));
    argShapes.push_back(args.back()->shape);
  }
  auto grad = instantiate(*call.callee, *calleeInst);
  if (!grad)
    return llvm::make_error<llvm::StringError>("the backward op does not instantiate: " +
                                                   llvm::toString(grad.takeError()),
                                               llvm::inconvertibleErrorCode());
  auto gshapes = concreteShapes(*grad, argShapes, f.inputs[g.input].shape);
  if (!gshapes)
    return llvm::make_error<llvm::StringError>("the backward op's shapes: " +
                                                   llvm::toString(gshapes.takeError()),
                                               llvm::inconvertibleErrorCode());
  auto analytic = evaluate(*grad, *gshapes, args, fullRanges(*gshapes), opaques);
  if (!analytic)
    return analytic.takeError();
  if (analytic->shape != f.inputs[g.input].shape)
    return llvm::make_error<llvm::StringError>(
        "the backward op's result does not have the input's shape", llvm::inconvertibleErrorCode());
  return analytic;
}

std::vector<GradCheck> checkOnRange(const ir::OpDef &def, const Forward &base,
                                    std::pair<double, double> range,
                                    const GradCheckOptions &options,
                                    const OpaqueRegistry &opaques) {
  std::vector<GradCheck> results;
  auto skipAll = [&](const std::string &why) { return skippedAll(def, why); };
  Forward f = base;
  f.inputs = randomInputs(*f.op, f.shapes, options.seed, range);
  {
    std::vector<const Tensor *> ptrs;
    for (const Tensor &t : f.inputs)
      ptrs.push_back(&t);
    auto out = evaluate(*f.op, f.shapes, ptrs, fullRanges(f.shapes), opaques);
    if (!out)
      return skipAll(llvm::toString(out.takeError()));
    if (!std::all_of(out->data.begin(), out->data.end(), [](double v) { return std::isfinite(v); }))
      return skipAll("the forward op is not finite on random inputs");
    f.out = std::move(*out);
  }
  f.dOut = Tensor(f.out.shape);
  std::mt19937 rng(options.seed + 1);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (double &x : f.dOut.data)
    x = unit(rng);

  for (const ir::Grad &g : def.grads) {
    GradCheck c;
    c.input = def.inputs[g.input].name;
    c.call = g.call->callee->name;
    auto analytic = clauseResult(g, f, opaques);
    if (!analytic) {
      c.problem = llvm::toString(analytic.takeError());
      c.skipped = c.problem.rfind("the clause cannot be evaluated here", 0) == 0;
      results.push_back(std::move(c));
      continue;
    }
    // Central differences at up to maxElements elements spread over the input.
    int64_t n = f.inputs[g.input].size();
    int64_t stride = std::max<int64_t>(1, n / options.maxElements);
    bool failed = false, anyNonZero = false;
    for (int64_t k = 0; k < n && !failed; k += stride) {
      std::vector<Tensor> plus = f.inputs, minus = f.inputs;
      double x = f.inputs[g.input].data[k];
      double h = 1e-5 * std::max(1.0, std::fabs(x));
      plus[g.input].data[k] = x + h;
      minus[g.input].data[k] = x - h;
      double numeric =
          (lossOf(f, plus, opaques, failed) - lossOf(f, minus, opaques, failed)) / (2 * h);
      double err = std::fabs(numeric - analytic->data[k]) / std::max(1.0, std::fabs(numeric));
      if (std::isnan(err))
        err = INFINITY;
      c.maxError = std::max(c.maxError, err);
      anyNonZero |= std::fabs(numeric) > 1e-9 || std::fabs(analytic->data[k]) > 1e-9;
    }
    if (failed) {
      c.problem = "the forward op failed on perturbed inputs";
    } else if (!anyNonZero) {
      // Both zero everywhere checked: nothing was tested (shapes that read nothing?).
      c.skipped = true;
      c.problem = "the gradient is zero at every element checked; give the op an example "
                  "in verify_examples.json";
      results.push_back(std::move(c));
      continue;
    } else if (c.maxError > options.tolerance)
      c.problem = fmt::format("analytic and numeric gradients differ by {:.3g}", c.maxError);
    c.ok = c.problem.empty();
    results.push_back(std::move(c));
  }
  return results;
}

} // namespace

std::vector<GradCheck> checkGradients(const ir::OpDef &def, const GradCheckOptions &options,
                                      const OpaqueRegistry &opaques) {
  std::vector<GradCheck> results;
  if (def.grads.empty())
    return results;
  if (options.example && !options.example->straightThrough.empty())
    return skippedAll(def, "straight through a rounding (" + options.example->straightThrough +
                               "): not checked by finite differences");
  Instantiation inst = completeForVerification(
      def, options.example ? options.example->inst : Instantiation{}, nullptr);
  auto skipAll = [&](const std::string &why) { return skippedAll(def, why); };
  auto op = instantiate(def, inst);
  if (!op)
    return skipAll(llvm::toString(op.takeError()));
  Forward f;
  f.op = &*op;
  f.shapes = randomShapes(*f.op, options.seed, 2, 4);
  std::optional<std::vector<int64_t>> outShape;
  if (options.example) {
    f.shapes.inputs = options.example->inputShapes; // the output follows the shape clause
  } else {
    outShape.emplace();
    for (unsigned v : f.op->outputVars)
      outShape->push_back(f.shapes.vars[v]);
  }
  auto shapes = concreteShapes(*f.op, f.shapes.inputs, outShape);
  if (!shapes)
    return skipAll(llvm::toString(shapes.takeError()));
  f.shapes = std::move(*shapes);

  // Each clause is checked on the value ranges in turn (those where the forward op is
  // finite) until a range exercises it: a clipped or thresholded gradient is zero on some.
  std::vector<GradCheck> best(def.grads.size());
  std::vector<bool> settled(def.grads.size(), false);
  unsigned attemptNo = 0;
  std::vector<std::pair<double, double>> ranges;
  for (int round = 0; round < 3; ++round) // each range with three different draws
    ranges.insert(ranges.end(), std::begin(kValueRanges), std::end(kValueRanges));
  for (const auto &range : ranges) {
    GradCheckOptions varied = options; // a new draw too: orderings (lo < hi) change with it
    varied.seed = options.seed + 101 * attemptNo++;
    std::vector<GradCheck> attempt = checkOnRange(def, f, range, varied, opaques);
    for (size_t i = 0; i < attempt.size() && i < best.size(); ++i) {
      if (settled[i])
        continue;
      if (best[i].input.empty() || !attempt[i].skipped || best[i].skipped)
        best[i] = attempt[i];
      settled[i] = !attempt[i].skipped;
    }
    if (std::all_of(settled.begin(), settled.end(), [](bool b) { return b; }))
      break;
  }
  for (GradCheck &c : best)
    if (!c.input.empty())
      results.push_back(std::move(c));
  return results;
}

llvm::Expected<OpValues> evaluateWithGradients(const ir::OpDef &def, const Instantiation &inst,
                                               std::vector<Tensor> inputs, const Tensor *dOut,
                                               const OpaqueRegistry &opaques) {
  auto op = instantiate(def, inst);
  if (!op)
    return op.takeError();
  if (inputs.size() != def.inputs.size())
    return llvm::make_error<llvm::StringError>(
        fmt::format("op '{}' has {} inputs; {} given", def.name, def.inputs.size(), inputs.size()),
        llvm::inconvertibleErrorCode());
  Forward f;
  f.op = &*op;
  std::vector<std::vector<int64_t>> inputShapes;
  for (const Tensor &t : inputs)
    inputShapes.push_back(t.shape);
  std::optional<std::vector<int64_t>> outShape;
  if (dOut)
    outShape = dOut->shape;
  auto shapes = concreteShapes(*f.op, inputShapes, outShape);
  if (!shapes)
    return shapes.takeError();
  f.shapes = std::move(*shapes);
  f.inputs = std::move(inputs);
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : f.inputs)
    ptrs.push_back(&t);
  auto out = evaluate(*f.op, f.shapes, ptrs, fullRanges(f.shapes), opaques);
  if (!out)
    return out.takeError();
  OpValues values;
  values.out = *out;
  if (!dOut)
    return values;
  f.out = std::move(*out);
  f.dOut = *dOut;
  for (const ir::Grad &g : def.grads) {
    auto r = clauseResult(g, f, opaques);
    if (!r)
      return llvm::make_error<llvm::StringError>(
          fmt::format("grad {} = {}(...): {}", def.inputs[g.input].name, g.call->callee->name,
                      llvm::toString(r.takeError())),
          llvm::inconvertibleErrorCode());
    values.grads[def.inputs[g.input].name] = std::move(*r);
  }
  return values;
}

} // namespace tofu
