// Semantic checks of one op (analysis/sema_internal.h): its declaration and body, the
// ranks its inputs are used with, and its grad clauses.
#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "analysis/sema_internal.h"
#include "fmt/format.h"

namespace tofu {
namespace semaimpl {

// =====================================================================================
// Ops
// =====================================================================================

void OpChecker::error(SourceLoc loc, std::string msg) {
  mc_.diags().error(op_.file, loc, std::move(msg));
  failed_ = true;
}

void OpChecker::note(SourceLoc loc, std::string msg) {
  mc_.diags().note(op_.file, loc, std::move(msg));
}

bool OpChecker::run() {
  rankLoc_.assign(op_.inputs.size(), {});
  used_.assign(op_.inputs.size(), false);
  passedWhole_.assign(op_.inputs.size(), false);

  // Attributes and inputs share one namespace.
  std::map<std::string, SourceLoc> seen;
  auto declareName = [&](const std::string &name, SourceLoc loc, const char *what) {
    if (name == "inf" || name == "nan") {
      error(loc, fmt::format("'{}' is reserved and cannot name {}", name, what));
      return;
    }
    auto [it, fresh] = seen.emplace(name, loc);
    if (!fresh) {
      error(loc, fmt::format("duplicate name '{}' in op '{}'", name, op_.name));
      note(it->second, "first declared here");
    }
  };
  for (const ir::Attr &a : op_.attrs)
    declareName(a.name, a.loc, "an attribute");
  for (const ir::Input &in : op_.inputs)
    declareName(in.name, in.loc, "an input");

  // The body: a lambda over the output coordinates.
  const auto *top = dyn_cast<ast::Lambda>(decl_.body.get());
  if (!top) {
    error(
        decl_.body->begin,
        fmt::format("the body of op '{}' must be a lambda over the output coordinates", op_.name));
    return false;
  }
  for (const ast::LambdaParam &p : top->params)
    if (p.kind == ast::LambdaParam::Kind::Extent)
      error(p.loc, fmt::format("output coordinate '{}' cannot have an explicit extent; only "
                               "reduction variables can",
                               p.name));
  if (!bindParams(top->params, ir::IndexVar::Role::Output, op_.outputVars))
    return false;
  op_.body = value(*top->body);

  // The output-shape clause.
  if (decl_.hasShape) {
    std::vector<ir::ShapeDim> dims;
    ir::Rank stated;
    bool ok = true;
    for (const ast::ShapeDim &d : decl_.shape) {
      ir::ShapeDim dim;
      dim.loc = d.loc;
      if (d.isGroup) {
        auto v = lookupVar(d.group);
        if (!v || !op_.vars[*v].isGroup) {
          error(d.loc, fmt::format("'*{}' in the shape clause is not an output group of op '{}'",
                                   d.group, op_.name));
          ok = false;
          continue;
        }
        dim.isGroup = true;
        dim.var = *v;
        stated.groups.push_back(*v);
      } else if (const auto *name = dyn_cast<ast::Name>(d.expr.get());
                 name && lookupVar(name->name) && !op_.vars[*lookupVar(name->name)].isGroup) {
        dim.isVar = true; // an output coordinate: the extent of the dimension it indexes
        dim.var = *lookupVar(name->name);
        ++stated.fixed;
      } else {
        dim.expr = constant(*d.expr, "an output extent");
        if (!dim.expr) {
          ok = false;
          continue;
        }
        ++stated.fixed;
      }
      dims.push_back(std::move(dim));
    }
    std::sort(stated.groups.begin(), stated.groups.end());
    if (ok && stated != op_.outputRank()) {
      error(decl_.shape.empty() ? top->begin : decl_.shape.front().loc,
            fmt::format("the shape clause gives rank {} but the lambda of op '{}' has rank {}",
                        describeRank(stated), op_.name, describeRank(op_.outputRank())));
    }
    op_.shape = std::move(dims);
  }
  scope_.clear();

  // Extents `x.d` name existing dimensions.
  for (const ExtentUse &use : extents_) {
    const ir::Input &in = op_.inputs[use.input];
    if (!in.rank) {
      // Passed whole to an opaque function: the rank is only known at instantiation.
      if (!passedWhole_[use.input])
        error(use.loc, fmt::format("'{}.{}' names a dimension of input '{}', which the op "
                                   "never indexes, so its rank is unknown",
                                   in.name, use.dim, in.name));
      continue;
    }
    if (in.rank->groups.empty() && use.dim >= in.rank->fixed)
      error(use.loc, fmt::format("input '{}' has rank {}; it has no dimension {}", in.name,
                                 in.rank->fixed, use.dim));
  }

  // After an error the op was not read to its end: "never used" could be wrong.
  for (unsigned i = 0; i < op_.inputs.size() && !failed_; ++i)
    if (!used_[i])
      mc_.diags().warning(
          op_.file, op_.inputs[i].loc,
          fmt::format("input '{}' of op '{}' is never used", op_.inputs[i].name, op_.name));
  return !failed_;
}

bool OpChecker::bindParams(const std::vector<ast::LambdaParam> &params, ir::IndexVar::Role role,
                           std::vector<unsigned> &ids) {
  bool ok = true;
  size_t scopeStart = scope_.size();
  for (const ast::LambdaParam &p : params) {
    if (p.name == "inf" || p.name == "nan") {
      error(p.loc, fmt::format("'{}' is reserved and cannot name an index variable", p.name));
      ok = false;
      continue;
    }
    if (op_.findAttr(p.name) || op_.findInput(p.name)) {
      error(p.loc, fmt::format("index variable '{}' has the name of an {} of op '{}'", p.name,
                               op_.findAttr(p.name) ? "attribute" : "input", op_.name));
      ok = false;
      continue;
    }
    if (auto prev = lookupVar(p.name)) {
      bool sameLambda = false;
      for (size_t i = scopeStart; i < scope_.size(); ++i)
        sameLambda |= scope_[i].first == p.name;
      if (sameLambda)
        error(p.loc, fmt::format("index variable '{}' is bound twice in one lambda", p.name));
      else
        error(p.loc,
              fmt::format("index variable '{}' is already bound by an enclosing lambda", p.name));
      note(op_.vars[*prev].loc, "bound here");
      ok = false;
      continue;
    }
    ir::IndexVar v;
    v.name = p.name;
    v.loc = p.loc;
    v.role = role;
    v.isGroup = p.kind == ast::LambdaParam::Kind::Group;
    if (p.kind == ast::LambdaParam::Kind::Extent && role == ir::IndexVar::Role::Reduction) {
      v.extent = constant(*p.extent, "an extent");
      if (!v.extent)
        ok = false;
    }
    unsigned id = static_cast<unsigned>(op_.vars.size());
    op_.vars.push_back(std::move(v));
    scope_.push_back({p.name, id});
    ids.push_back(id);
  }
  return ok;
}

std::string OpChecker::describeRank(const ir::Rank &r) const {
  std::string s;
  for (unsigned g : r.groups)
    s += fmt::format("|{}| + ", op_.vars[g].name);
  if (s.empty() || r.fixed != 0)
    s += std::to_string(r.fixed);
  else
    s.resize(s.size() - 3);
  return s;
}

bool OpChecker::runGrads() {
  used_.assign(op_.inputs.size(), true);
  passedWhole_.assign(op_.inputs.size(), false);
  rankLoc_.assign(op_.inputs.size(), op_.loc);
  std::map<unsigned, SourceLoc> gradSeen;
  inGrad_ = true;
  for (const ast::GradItem &g : decl_.grads) {
    auto input = op_.findInput(g.input);
    if (!input) {
      error(g.loc, fmt::format("'{}' is not an input of op '{}'", g.input, op_.name));
      continue;
    }
    if (auto [it, fresh] = gradSeen.emplace(*input, g.loc); !fresh) {
      error(g.loc, fmt::format("input '{}' has two grad clauses", g.input));
      note(it->second, "the first is here");
      continue;
    }
    const auto *call = dyn_cast<ast::Call>(g.value.get());
    if (!call) {
      error(g.value->begin, fmt::format("the gradient of '{}' must be a call of an op, like "
                                        "'grad {} = some_op(dOut, ...)'",
                                        g.input, g.input));
      continue;
    }
    if (!mc_.hasOp(call->callee)) {
      if (ir::lookupBuiltin(call->callee) || ir::lookupReducer(call->callee) ||
          mc_.isOpaque(call->callee))
        error(call->calleeLoc,
              fmt::format("a grad clause must call an op; '{}' is not an op", call->callee));
      else
        error(call->calleeLoc, fmt::format("unknown op '{}'", call->callee));
      continue;
    }
    bool calleeFailed = false;
    const ir::OpDef *callee = mc_.requireOp(call->callee, call->calleeLoc, calleeFailed);
    if (calleeFailed) {
      failed_ = true;
      continue;
    }
    auto irCall = opCall(*call, *callee);
    if (!irCall)
      continue;
    const ir::Input &in = op_.inputs[*input];
    ir::Rank gradRank = callee->outputRank();
    if (in.rank && in.rank->groups.empty() && gradRank.groups.empty() &&
        in.rank->fixed != gradRank.fixed)
      error(call->calleeLoc, fmt::format("the gradient of '{}' has rank {} but '{}' has rank {}",
                                         g.input, gradRank.fixed, g.input, in.rank->fixed));
    op_.grads.push_back({*input, g.loc, std::move(irCall)});
  }
  inGrad_ = false;

  return !failed_;
}

/// Whether some lengths of the groups make the two ranks equal: after cancelling the groups
/// they share, a side left without groups must not exceed the other's fixed part (or must
/// equal it, when neither has groups left).
namespace {

bool ranksCompatible(const ir::Rank &a, const ir::Rank &b) {
  std::vector<unsigned> onlyA, onlyB;
  std::set_difference(a.groups.begin(), a.groups.end(), b.groups.begin(), b.groups.end(),
                      std::back_inserter(onlyA));
  std::set_difference(b.groups.begin(), b.groups.end(), a.groups.begin(), a.groups.end(),
                      std::back_inserter(onlyB));
  if (onlyA.empty() && onlyB.empty())
    return a.fixed == b.fixed;
  if (onlyA.empty())
    return a.fixed >= b.fixed;
  if (onlyB.empty())
    return b.fixed >= a.fixed;
  return true;
}

} // namespace

void OpChecker::recordRank(unsigned input, const ir::Rank &rank, SourceLoc loc) {
  ir::Input &in = op_.inputs[input];
  if (!in.rank) {
    in.rank = rank;
    rankLoc_[input] = loc;
    return;
  }
  if (*in.rank != rank && ranksCompatible(*in.rank, rank)) {
    // Another group (a sibling lambda's) reads the input: its length is solved when the
    // op is instantiated.
    if (std::find(in.otherRanks.begin(), in.otherRanks.end(), rank) == in.otherRanks.end())
      in.otherRanks.push_back(rank);
    return;
  }
  if (*in.rank != rank) {
    error(loc, fmt::format("input '{}' is used with rank {} here but with rank {} at {}:{}",
                           in.name, describeRank(rank), describeRank(*in.rank),
                           rankLoc_[input].line, rankLoc_[input].col));
  }
}

} // namespace semaimpl
} // namespace tofu
