// Instantiation: attribute folding, group expansion and op-call inlining.
#include "analysis/instantiate.h"

#include <algorithm>
#include <set>

#include "analysis/index_eval.h"
#include "fmt/format.h"

namespace tofu {
namespace {

using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;

struct Frame;
bool passedWhole(const ir::OpDef &op, unsigned i);

/// How an input of a frame's op is bound. A view of a root input fixes some of the root's
/// dimensions to expressions (from slicing, `f(x[b, :, :])`) and leaves the others free,
/// in order; a call binding is the (unindexed) result of an op call in the parent frame.
struct Binding {
  enum class Kind { View, Call };
  Kind kind = Kind::View;
  unsigned root = 0;
  std::vector<ir::ExprPtr> fixed; ///< per root dimension: an expression, or null if free
  const ir::OpCall *call = nullptr;
  Frame *callFrame = nullptr;
  unsigned callRank = 0;

  unsigned rank() const {
    if (kind == Kind::Call)
      return callRank;
    return static_cast<unsigned>(std::count(fixed.begin(), fixed.end(), nullptr));
  }
};

/// One op being instantiated: the root op, or an op inlined into it.
struct Frame {
  const ir::OpDef *op = nullptr;
  std::vector<int64_t> attrs;
  std::map<unsigned, int64_t> groupLen;
  std::map<unsigned, int64_t> groupHints;            ///< lengths to use instead of the default
  std::map<unsigned, std::vector<ir::ExprPtr>> vars; ///< var id -> its expressions
  std::vector<Binding> inputs;
};

template <typename T> std::unique_ptr<T> make(SourceLoc loc) {
  auto e = std::make_unique<T>();
  e->loc = loc;
  return e;
}

ir::ExprPtr intConst(int64_t v, SourceLoc loc = {}) {
  auto c = make<ir::Const>(loc);
  c->isInt = true;
  c->intValue = v;
  c->value = static_cast<double>(v);
  return c;
}

ir::Coord cloneCoord(const ir::Coord &c) {
  ir::Coord out;
  out.kind = c.kind;
  out.loc = c.loc;
  out.var = c.var;
  if (c.expr)
    out.expr = cloneExpr(*c.expr);
  return out;
}

bool readsTensor(const ir::Expr &e) {
  bool found = false;
  ir::walk(e, [&](const ir::Expr &s) { found |= isa<ir::Read>(s) || isa<ir::OpaqueCall>(s); });
  return found;
}

ir::Coord coordOf(ir::ExprPtr e) {
  ir::Coord c;
  c.loc = e->loc;
  c.kind = readsTensor(*e) ? ir::Coord::Kind::DataDependent : ir::Coord::Kind::Affine;
  c.expr = std::move(e);
  return c;
}

class Instantiator {
public:
  explicit Instantiator(InstOp &out) : out_(out) {}

  llvm::Error run(const ir::OpDef &op, const Instantiation &inst);

private:
  llvm::Error fail(std::string msg) { return stringError(msg); }
  void error(std::string msg) {
    if (error_.empty())
      error_ = std::move(msg);
  }

  ir::ExprPtr inst(const ir::Expr &e, Frame &f);
  bool expandCoords(const std::vector<ir::Coord> &coords, Frame &f,
                    std::vector<ir::ExprPtr> &exprs);
  ir::ExprPtr readInput(Frame &f, unsigned input, std::vector<ir::ExprPtr> coords, SourceLoc loc);
  bool sliceBinding(const ir::Expr &arg, Frame &f, Binding &out);
  bool setupCallee(const ir::OpCall &c, Frame &caller, Frame &callee,
                   std::optional<unsigned> outRank);
  ir::ExprPtr inlineCall(const ir::OpCall &c, Frame &caller, std::vector<ir::ExprPtr> coords);
  bool inferGroups(Frame &f, const std::vector<std::optional<unsigned>> &inputRanks,
                   std::optional<unsigned> outRank);
  unsigned newVar(const std::string &name, ir::IndexVar::Role role);
  std::optional<int64_t> constantIn(const ir::Expr &e, Frame &f, const char *what);

  InstOp &out_;
  std::string error_;
  std::set<std::string> names_;
};

unsigned Instantiator::newVar(const std::string &name, ir::IndexVar::Role role) {
  std::string n = name;
  for (int k = 2; names_.count(n); ++k)
    n = fmt::format("{}_{}", name, k);
  names_.insert(n);
  InstVar v;
  v.name = n;
  v.role = role;
  out_.vars.push_back(std::move(v));
  return static_cast<unsigned>(out_.vars.size() - 1);
}

std::optional<int64_t> Instantiator::constantIn(const ir::Expr &e, Frame &f, const char *what) {
  ir::ExprPtr folded = inst(e, f);
  if (!folded)
    return std::nullopt;
  auto v = evalConstant(*folded, nullptr);
  if (!v)
    error(fmt::format("op '{}': {} is not a constant once attributes are fixed (or it divides "
                      "by zero)",
                      f.op->name, what));
  return v;
}

/// Solves group lengths from `fixed + sum(len(g)) == rank` constraints: every form in
/// which an input is read must have the input's rank (when known, from `inputRanks`, or
/// once one of its forms is fully known), and the output must have `outRank`. Groups no
/// constraint fixes get length 1, one at a time. Reports constraints that cannot hold.
bool Instantiator::inferGroups(Frame &f, const std::vector<std::optional<unsigned>> &inputRanks,
                               std::optional<unsigned> outRank) {
  const ir::OpDef &op = *f.op;
  auto lengthOf = [&](const ir::Rank &form) -> std::optional<int64_t> {
    int64_t r = form.fixed;
    for (unsigned g : form.groups) {
      auto it = f.groupLen.find(g);
      if (it == f.groupLen.end())
        return std::nullopt;
      r += it->second;
    }
    return r;
  };
  // Solves `form == rank` when exactly one distinct group of `form` is unknown.
  auto solve = [&](const ir::Rank &form, int64_t rank) {
    std::set<unsigned> unknown;
    int64_t known = form.fixed;
    for (unsigned g : form.groups) {
      if (f.groupLen.count(g))
        known += f.groupLen[g];
      else
        unknown.insert(g);
    }
    if (unknown.size() != 1)
      return false;
    unsigned g = *unknown.begin();
    int64_t times = std::count(form.groups.begin(), form.groups.end(), g);
    int64_t rest = rank - known;
    if (rest < 0 || rest % times != 0)
      return false; // reported below
    f.groupLen[g] = rest / times;
    return true;
  };
  std::vector<std::optional<int64_t>> rankOf(op.inputs.size());
  for (unsigned i = 0; i < op.inputs.size(); ++i)
    if (i < inputRanks.size() && inputRanks[i])
      rankOf[i] = *inputRanks[i];
  for (;;) {
    bool progress = false;
    for (unsigned i = 0; i < op.inputs.size(); ++i) {
      if (!op.inputs[i].rank)
        continue;
      if (!rankOf[i])
        rankOf[i] = lengthOf(*op.inputs[i].rank);
      for (const ir::Rank &form : op.inputs[i].otherRanks)
        if (!rankOf[i])
          rankOf[i] = lengthOf(form);
      if (!rankOf[i])
        continue;
      progress |= solve(*op.inputs[i].rank, *rankOf[i]);
      for (const ir::Rank &form : op.inputs[i].otherRanks)
        progress |= solve(form, *rankOf[i]);
    }
    if (outRank)
      progress |= solve(op.outputRank(), *outRank);
    if (progress)
      continue;
    // Nothing more follows: give the first unknown group its hint, or the default length.
    bool defaulted = false;
    for (unsigned v = 0; v < op.vars.size() && !defaulted; ++v)
      if (op.vars[v].isGroup && !f.groupLen.count(v)) {
        auto hint = f.groupHints.find(v);
        f.groupLen[v] = hint != f.groupHints.end() ? hint->second : 1;
        defaulted = true;
      }
    if (!defaulted)
      break;
  }
  auto check = [&](const ir::Rank &form, int64_t rank, const std::string &what) {
    int64_t r = *lengthOf(form);
    if (r == rank)
      return true;
    error(fmt::format("op '{}': {} has rank {} but the op uses it with rank {}", op.name, what,
                      rank, r));
    return false;
  };
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    if (!op.inputs[i].rank || !rankOf[i])
      continue;
    std::string what = fmt::format("input '{}'", op.inputs[i].name);
    if (!check(*op.inputs[i].rank, *rankOf[i], what))
      return false;
    for (const ir::Rank &form : op.inputs[i].otherRanks)
      if (!check(form, *rankOf[i], what))
        return false;
  }
  if (outRank && !check(op.outputRank(), *outRank, "the output"))
    return false;
  return true;
}

llvm::Error Instantiator::run(const ir::OpDef &op, const Instantiation &in) {
  out_.def = &op;
  out_.name = op.name;
  Frame root;
  root.op = &op;
  for (const auto &[name, value] : in.attrs)
    if (!op.findAttr(name))
      return fail(fmt::format("op '{}' has no attribute '{}'", op.name, name));
  for (const ir::Attr &a : op.attrs) {
    auto it = in.attrs.find(a.name);
    if (it == in.attrs.end() && !a.defaultValue)
      return fail(
          fmt::format("op '{}': attribute '{}' has no default; give its value", op.name, a.name));
    root.attrs.push_back(it != in.attrs.end() ? it->second : *a.defaultValue);
    out_.attrs.push_back({a.name, root.attrs.back()});
  }
  for (const auto &[name, len] : in.groups) {
    std::optional<unsigned> var;
    for (unsigned v = 0; v < op.vars.size(); ++v)
      if (op.vars[v].isGroup && op.vars[v].name == name)
        var = v;
    if (!var)
      return fail(fmt::format("op '{}' has no variadic group '{}'", op.name, name));
    if (len < 0 || len > 16)
      return fail(
          fmt::format("op '{}': group '{}' length {} is out of range [0, 16]", op.name, name, len));
    root.groupLen[*var] = len;
  }
  for (const auto &[name, len] : in.groupHints)
    for (unsigned v = 0; v < op.vars.size(); ++v)
      if (op.vars[v].isGroup && op.vars[v].name == name)
        root.groupHints[v] = len;
  if (!in.inputRanks.empty() && in.inputRanks.size() != op.inputs.size())
    return fail(fmt::format("op '{}' takes {} inputs but {} ranks were given", op.name,
                            op.inputs.size(), in.inputRanks.size()));
  if (!inferGroups(root, in.inputRanks, std::nullopt))
    return fail(error_);
  for (unsigned v = 0; v < op.vars.size(); ++v)
    if (op.vars[v].isGroup)
      out_.groups.push_back({op.vars[v].name, root.groupLen[v]});

  // Root inputs: whole views of themselves.
  for (unsigned i = 0; i < op.inputs.size(); ++i) {
    unsigned rank = 0;
    if (const auto &form = op.inputs[i].rank) {
      rank = form->fixed;
      for (unsigned g : form->groups)
        rank += static_cast<unsigned>(root.groupLen[g]);
    } else if (i < in.inputRanks.size() && in.inputRanks[i]) {
      rank = *in.inputRanks[i];
    } else if (passedWhole(op, i)) {
      return fail(fmt::format("op '{}': the rank of input '{}' is unknown (the op only passes it "
                              "whole to calls); give the input ranks",
                              op.name, op.inputs[i].name));
    }
    out_.inputs.push_back({op.inputs[i].name, rank});
    Binding b;
    b.root = i;
    b.fixed.resize(rank);
    root.inputs.push_back(std::move(b));
  }
  for (const ir::Input &input : op.inputs)
    names_.insert(input.name);

  // Output coordinates.
  for (unsigned v : op.outputVars) {
    const ir::IndexVar &var = op.vars[v];
    std::vector<ir::ExprPtr> exprs;
    int64_t n = var.isGroup ? root.groupLen[v] : 1;
    for (int64_t k = 0; k < n; ++k) {
      unsigned id = newVar(var.isGroup ? fmt::format("{}{}", var.name, k) : var.name,
                           ir::IndexVar::Role::Output);
      out_.outputVars.push_back(id);
      auto ref = make<ir::VarRef>(var.loc);
      ref->var = id;
      exprs.push_back(std::move(ref));
    }
    root.vars[v] = std::move(exprs);
  }

  out_.body = inst(*op.body, root);
  if (!out_.body)
    return fail(error_.empty() ? "instantiation failed" : error_);

  if (op.shape) {
    std::vector<ir::ExprPtr> dims;
    for (const ir::ShapeDim &d : *op.shape) {
      if (!d.isGroup && !d.isVar) {
        dims.push_back(inst(*d.expr, root));
        out_.shapeNamesVar.push_back(false);
        if (!dims.back())
          return fail(error_);
        continue;
      }
      for (const ir::ExprPtr &e : root.vars[d.var]) {
        dims.push_back(cloneExpr(*e)); // resolved to extents below
        out_.shapeNamesVar.push_back(true);
      }
    }
    out_.shape = std::move(dims);
  }

  // Extents: each variable's first input dimension that it indexes alone.
  ir::walk(*out_.body, [&](const ir::Expr &e) {
    const auto *read = dyn_cast<ir::Read>(&e);
    if (!read)
      return;
    for (unsigned d = 0; d < read->coords.size(); ++d) {
      const ir::Coord &c = read->coords[d];
      if (c.kind != ir::Coord::Kind::Affine)
        continue;
      const ir::Expr *x = c.expr.get();
      // TDL.md: a reduction variable's extent may come from `v + c`; an output
      // coordinate's only from a dimension it indexes exactly (pad1d reads x[i, j - P]).
      if (const auto *ref = dyn_cast<ir::VarRef>(x)) {
        InstVar &v = out_.vars[ref->var];
        if (!v.extentDim)
          v.extentDim = {{read->input, d}};
        continue;
      }
      if (const auto *b = dyn_cast<ir::Binary>(x);
          b && (b->op == ast::BinaryOp::Add || b->op == ast::BinaryOp::Sub) &&
          isa<ir::VarRef>(*b->lhs) && evalConstant(*b->rhs, nullptr))
        x = b->lhs.get();
      else if (b && b->op == ast::BinaryOp::Add && isa<ir::VarRef>(*b->rhs) &&
               evalConstant(*b->lhs, nullptr))
        x = b->rhs.get();
      if (const auto *ref = dyn_cast<ir::VarRef>(x); ref && x != c.expr.get()) {
        InstVar &v = out_.vars[ref->var];
        if (!v.extentDim && v.role == ir::IndexVar::Role::Reduction)
          v.extentDim = {{read->input, d}};
      }
    }
  });
  for (const InstVar &v : out_.vars)
    if (v.role == ir::IndexVar::Role::Reduction && !v.fixedExtent && !v.extentDim)
      return fail(fmt::format("op '{}': once inlined, reduction variable '{}' indexes no input "
                              "dimension alone; give its extent explicitly",
                              op.name, v.name));
  if (out_.shape)
    for (ir::ExprPtr &d : *out_.shape)
      if (const auto *ref = dyn_cast<ir::VarRef>(d.get())) {
        const InstVar &v = out_.vars[ref->var];
        if (!v.extentDim)
          return fail(fmt::format("op '{}': the shape clause names output coordinate '{}', "
                                  "which indexes no input dimension exactly",
                                  op.name, v.name));
        auto x = make<ir::ExtentRef>(d->loc);
        x->input = v.extentDim->first;
        x->dim = v.extentDim->second;
        d = std::move(x);
      }
  return llvm::Error::success();
}

bool Instantiator::expandCoords(const std::vector<ir::Coord> &coords, Frame &f,
                                std::vector<ir::ExprPtr> &exprs) {
  for (const ir::Coord &c : coords) {
    switch (c.kind) {
    case ir::Coord::Kind::Splat:
      for (const ir::ExprPtr &e : f.vars[c.var])
        exprs.push_back(cloneExpr(*e));
      break;
    case ir::Coord::Kind::Slice:
      exprs.push_back(nullptr); // a slice
      break;
    case ir::Coord::Kind::Affine:
    case ir::Coord::Kind::DataDependent: {
      ir::ExprPtr e = inst(*c.expr, f);
      if (!e)
        return false;
      exprs.push_back(std::move(e));
      break;
    }
    }
  }
  return true;
}

/// Reads input `input` of frame `f` at `coords` (null entries are slices).
ir::ExprPtr Instantiator::readInput(Frame &f, unsigned input, std::vector<ir::ExprPtr> coords,
                                    SourceLoc loc) {
  Binding &b = f.inputs[input];
  if (b.kind == Binding::Kind::Call) {
    if (std::find(coords.begin(), coords.end(), nullptr) != coords.end()) {
      error(fmt::format("op '{}': slicing the result of op '{}' passed as an argument is not "
                        "supported",
                        f.op->name, b.call->callee->name));
      return nullptr;
    }
    return inlineCall(*b.call, *b.callFrame, std::move(coords));
  }
  if (coords.size() != b.rank()) {
    error(fmt::format("op '{}': input '{}' has rank {} but is read with {} coordinates", f.op->name,
                      f.op->inputs[input].name, b.rank(), coords.size()));
    return nullptr;
  }
  auto read = make<ir::Read>(loc);
  read->input = b.root;
  size_t next = 0;
  for (const ir::ExprPtr &fixed : b.fixed) {
    if (fixed) {
      read->coords.push_back(coordOf(cloneExpr(*fixed)));
      continue;
    }
    ir::ExprPtr &c = coords[next++];
    if (!c) {
      ir::Coord slice;
      slice.kind = ir::Coord::Kind::Slice;
      read->coords.push_back(std::move(slice));
    } else {
      read->coords.push_back(coordOf(std::move(c)));
    }
  }
  return read;
}

/// Binds an argument expression (a whole input, a slice of one, or an op call) of a call
/// written in frame `f`.
bool Instantiator::sliceBinding(const ir::Expr &arg, Frame &f, Binding &out) {
  if (const auto *t = dyn_cast<ir::TensorRef>(&arg)) {
    if (t->source != ir::TensorRef::Source::Input) {
      error(fmt::format("op '{}': 'out' and 'dOut' exist only in grad clauses", f.op->name));
      return false;
    }
    const Binding &b = f.inputs[t->input];
    out.kind = b.kind;
    out.root = b.root;
    out.call = b.call;
    out.callFrame = b.callFrame;
    out.callRank = b.callRank;
    for (const ir::ExprPtr &e : b.fixed)
      out.fixed.push_back(e ? cloneExpr(*e) : nullptr);
    return true;
  }
  if (const auto *r = dyn_cast<ir::Read>(&arg)) {
    const Binding &b = f.inputs[r->input];
    if (b.kind == Binding::Kind::Call) {
      error(fmt::format("op '{}': slicing the result of op '{}' passed as an argument is not "
                        "supported",
                        f.op->name, b.call->callee->name));
      return false;
    }
    std::vector<ir::ExprPtr> coords;
    if (!expandCoords(r->coords, f, coords))
      return false;
    if (coords.size() != b.rank()) {
      error(fmt::format("op '{}': input '{}' has rank {} but is sliced with {} coordinates",
                        f.op->name, f.op->inputs[r->input].name, b.rank(), coords.size()));
      return false;
    }
    out.kind = Binding::Kind::View;
    out.root = b.root;
    size_t next = 0;
    for (const ir::ExprPtr &e : b.fixed)
      out.fixed.push_back(e ? cloneExpr(*e) : std::move(coords[next++]));
    return true;
  }
  const auto &call = cast<ir::OpCall>(arg);
  Frame probe;
  if (!setupCallee(call, f, probe, std::nullopt))
    return false;
  unsigned rank = 0;
  for (unsigned v : call.callee->outputVars)
    rank += call.callee->vars[v].isGroup ? static_cast<unsigned>(probe.groupLen[v]) : 1;
  out.kind = Binding::Kind::Call;
  out.call = &call;
  out.callFrame = &f;
  out.callRank = rank;
  return true;
}

bool Instantiator::setupCallee(const ir::OpCall &c, Frame &caller, Frame &callee,
                               std::optional<unsigned> outRank) {
  const ir::OpDef &op = *c.callee;
  callee.op = &op;
  for (const ir::Attr &a : op.attrs)
    callee.attrs.push_back(a.defaultValue.value_or(0));
  for (const ir::AttrBinding &a : c.attrs) {
    auto v = constantIn(*a.value, caller, "attribute value");
    if (!v)
      return false;
    callee.attrs[a.attr] = *v;
  }
  for (const ir::GroupBinding &g : c.groups)
    callee.groupLen[g.var] = g.length;
  // Coordinates written as the caller's groups, one per output variable of the callee
  // (`layer_norm_xhat(x, eps)[*p, *g]` of an output [*p, *f]), give the callee's groups
  // those lengths: the ranks of its inputs alone may leave the split open (x of rank 3 read
  // as [*p, *f]), and the default would then differ from the caller's.
  if (c.indexed && c.coords.size() == op.outputVars.size())
    for (size_t i = 0; i < c.coords.size(); ++i) {
      const unsigned v = op.outputVars[i];
      if (c.coords[i].kind == ir::Coord::Kind::Splat && op.vars[v].isGroup &&
          !callee.groupLen.count(v))
        callee.groupLen[v] = static_cast<int64_t>(caller.vars[c.coords[i].var].size());
    }
  std::vector<std::optional<unsigned>> ranks;
  for (const ir::ExprPtr &arg : c.args) {
    Binding b;
    if (!sliceBinding(*arg, caller, b))
      return false;
    ranks.push_back(b.rank());
    callee.inputs.push_back(std::move(b));
  }
  return inferGroups(callee, ranks, outRank);
}

ir::ExprPtr Instantiator::inlineCall(const ir::OpCall &c, Frame &caller,
                                     std::vector<ir::ExprPtr> coords) {
  Frame callee;
  if (!setupCallee(c, caller, callee, static_cast<unsigned>(coords.size())))
    return nullptr;
  size_t next = 0;
  for (unsigned v : c.callee->outputVars) {
    const ir::IndexVar &var = c.callee->vars[v];
    int64_t n = var.isGroup ? callee.groupLen[v] : 1;
    std::vector<ir::ExprPtr> exprs;
    for (int64_t k = 0; k < n; ++k)
      exprs.push_back(std::move(coords[next++]));
    callee.vars[v] = std::move(exprs);
  }
  return inst(*c.callee->body, callee);
}

ir::ExprPtr Instantiator::inst(const ir::Expr &e, Frame &f) {
  if (!error_.empty())
    return nullptr;
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return cloneExpr(e);
  case ir::ExprKind::AttrRef:
    return intConst(f.attrs[cast<ir::AttrRef>(e).attr], e.loc);
  case ir::ExprKind::ExtentRef: {
    const auto &x = cast<ir::ExtentRef>(e);
    const Binding &b = f.inputs[x.input];
    if (b.kind == Binding::Kind::Call) {
      error(fmt::format("op '{}': the extent '{}.{}' of an op-call argument is not supported",
                        f.op->name, f.op->inputs[x.input].name, x.dim));
      return nullptr;
    }
    unsigned free = 0;
    for (unsigned d = 0; d < b.fixed.size(); ++d) {
      if (b.fixed[d])
        continue;
      if (free++ == x.dim) {
        auto r = make<ir::ExtentRef>(e.loc);
        r->input = b.root;
        r->dim = d;
        return r;
      }
    }
    error(fmt::format("op '{}': input '{}' has rank {}; it has no dimension {}", f.op->name,
                      f.op->inputs[x.input].name, b.rank(), x.dim));
    return nullptr;
  }
  case ir::ExprKind::VarRef:
    return cloneExpr(*f.vars[cast<ir::VarRef>(e).var].at(0));
  case ir::ExprKind::TensorRef:
    error(fmt::format("op '{}': a whole tensor cannot be a value", f.op->name));
    return nullptr;
  case ir::ExprKind::Read: {
    const auto &r = cast<ir::Read>(e);
    std::vector<ir::ExprPtr> coords;
    if (!expandCoords(r.coords, f, coords))
      return nullptr;
    return readInput(f, r.input, std::move(coords), e.loc);
  }
  case ir::ExprKind::OpaqueCall: {
    const auto &c = cast<ir::OpaqueCall>(e);
    auto out = make<ir::OpaqueCall>(e.loc);
    out->function = c.function;
    for (const ir::ExprPtr &arg : c.args) {
      Binding b;
      if (!sliceBinding(*arg, f, b))
        return nullptr;
      if (b.kind == Binding::Kind::Call) {
        error(fmt::format("op '{}': passing the result of op '{}' to opaque function '{}' is "
                          "not supported",
                          f.op->name, b.call->callee->name, c.function));
        return nullptr;
      }
      auto read = make<ir::Read>(arg->loc);
      read->input = b.root;
      for (ir::ExprPtr &fixed : b.fixed) {
        if (fixed) {
          read->coords.push_back(coordOf(std::move(fixed)));
        } else {
          ir::Coord slice;
          slice.kind = ir::Coord::Kind::Slice;
          read->coords.push_back(std::move(slice));
        }
      }
      out->args.push_back(std::move(read));
    }
    std::vector<ir::ExprPtr> coords;
    if (!expandCoords(c.coords, f, coords))
      return nullptr;
    for (ir::ExprPtr &co : coords)
      out->coords.push_back(coordOf(std::move(co)));
    return out;
  }
  case ir::ExprKind::OpCall: {
    const auto &c = cast<ir::OpCall>(e);
    std::vector<ir::ExprPtr> coords;
    if (!expandCoords(c.coords, f, coords))
      return nullptr;
    return inlineCall(c, f, std::move(coords));
  }
  case ir::ExprKind::Reduce: {
    const auto &r = cast<ir::Reduce>(e);
    auto out = make<ir::Reduce>(e.loc);
    out->reducer = r.reducer;
    for (unsigned v : r.vars) {
      const ir::IndexVar &var = f.op->vars[v];
      std::optional<int64_t> extent;
      if (var.extent) {
        extent = constantIn(*var.extent, f, "extent");
        if (!extent)
          return nullptr;
        if (*extent <= 0) {
          error(fmt::format("op '{}': reduction variable '{}' has extent {}; it must be "
                            "positive",
                            f.op->name, var.name, *extent));
          return nullptr;
        }
      }
      int64_t n = var.isGroup ? f.groupLen[v] : 1;
      std::vector<ir::ExprPtr> exprs;
      for (int64_t k = 0; k < n; ++k) {
        unsigned id = newVar(var.isGroup ? fmt::format("{}{}", var.name, k) : var.name,
                             ir::IndexVar::Role::Reduction);
        out_.vars[id].fixedExtent = extent;
        out->vars.push_back(id);
        auto ref = make<ir::VarRef>(var.loc);
        ref->var = id;
        exprs.push_back(std::move(ref));
      }
      f.vars[v] = std::move(exprs);
    }
    if (out->vars.empty()) { // a reduction over an empty group: the identity of one element
      error(fmt::format("op '{}': reduction over an empty group", f.op->name));
      return nullptr;
    }
    out->body = inst(*r.body, f);
    if (!out->body)
      return nullptr;
    return out;
  }
  case ir::ExprKind::Apply: {
    const auto &a = cast<ir::Apply>(e);
    auto out = make<ir::Apply>(e.loc);
    out->fn = a.fn;
    for (const ir::ExprPtr &arg : a.args) {
      out->args.push_back(inst(*arg, f));
      if (!out->args.back())
        return nullptr;
    }
    return out;
  }
  case ir::ExprKind::Neg: {
    auto operand = inst(*cast<ir::Neg>(e).operand, f);
    if (!operand)
      return nullptr;
    auto out = make<ir::Neg>(e.loc);
    out->operand = std::move(operand);
    return out;
  }
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    auto lhs = inst(*b.lhs, f);
    auto rhs = inst(*b.rhs, f);
    if (!lhs || !rhs)
      return nullptr;
    auto out = make<ir::Binary>(e.loc);
    out->op = b.op;
    out->lhs = std::move(lhs);
    out->rhs = std::move(rhs);
    return out;
  }
  }
  return nullptr;
}

/// True when input `i` of `op` is passed whole to a call anywhere in its body.
bool passedWhole(const ir::OpDef &op, unsigned i) {
  bool found = false;
  ir::walk(*op.body, [&](const ir::Expr &e) {
    if (const auto *t = dyn_cast<ir::TensorRef>(&e))
      found |= t->source == ir::TensorRef::Source::Input && t->input == i;
  });
  return found;
}

bool sameVarCoords(const std::vector<ir::Coord> &coords, const std::vector<unsigned> &vars) {
  if (coords.size() != vars.size())
    return false;
  for (size_t i = 0; i < coords.size(); ++i)
    if (ir::exactVar(coords[i]) != vars[i])
      return false;
  return true;
}

} // namespace

ir::ExprPtr cloneExpr(const ir::Expr &e) {
  switch (e.kind()) {
  case ir::ExprKind::Const:
    return std::make_unique<ir::Const>(cast<ir::Const>(e));
  case ir::ExprKind::AttrRef:
    return std::make_unique<ir::AttrRef>(cast<ir::AttrRef>(e));
  case ir::ExprKind::ExtentRef:
    return std::make_unique<ir::ExtentRef>(cast<ir::ExtentRef>(e));
  case ir::ExprKind::VarRef:
    return std::make_unique<ir::VarRef>(cast<ir::VarRef>(e));
  case ir::ExprKind::TensorRef:
    return std::make_unique<ir::TensorRef>(cast<ir::TensorRef>(e));
  case ir::ExprKind::Read: {
    const auto &r = cast<ir::Read>(e);
    auto out = make<ir::Read>(e.loc);
    out->input = r.input;
    for (const ir::Coord &c : r.coords)
      out->coords.push_back(cloneCoord(c));
    return out;
  }
  case ir::ExprKind::OpaqueCall: {
    const auto &c = cast<ir::OpaqueCall>(e);
    auto out = make<ir::OpaqueCall>(e.loc);
    out->function = c.function;
    for (const ir::ExprPtr &a : c.args)
      out->args.push_back(cloneExpr(*a));
    for (const ir::Coord &co : c.coords)
      out->coords.push_back(cloneCoord(co));
    return out;
  }
  case ir::ExprKind::OpCall: {
    const auto &c = cast<ir::OpCall>(e);
    auto out = make<ir::OpCall>(e.loc);
    out->callee = c.callee;
    for (const ir::AttrBinding &a : c.attrs)
      out->attrs.push_back({a.attr, cloneExpr(*a.value)});
    out->groups = c.groups;
    for (const ir::ExprPtr &a : c.args)
      out->args.push_back(cloneExpr(*a));
    out->indexed = c.indexed;
    for (const ir::Coord &co : c.coords)
      out->coords.push_back(cloneCoord(co));
    return out;
  }
  case ir::ExprKind::Reduce: {
    const auto &r = cast<ir::Reduce>(e);
    auto out = make<ir::Reduce>(e.loc);
    out->reducer = r.reducer;
    out->vars = r.vars;
    out->body = cloneExpr(*r.body);
    return out;
  }
  case ir::ExprKind::Apply: {
    const auto &a = cast<ir::Apply>(e);
    auto out = make<ir::Apply>(e.loc);
    out->fn = a.fn;
    for (const ir::ExprPtr &x : a.args)
      out->args.push_back(cloneExpr(*x));
    return out;
  }
  case ir::ExprKind::Neg: {
    auto out = make<ir::Neg>(e.loc);
    out->operand = cloneExpr(*cast<ir::Neg>(e).operand);
    return out;
  }
  case ir::ExprKind::Binary: {
    const auto &b = cast<ir::Binary>(e);
    auto out = make<ir::Binary>(e.loc);
    out->op = b.op;
    out->lhs = cloneExpr(*b.lhs);
    out->rhs = cloneExpr(*b.rhs);
    return out;
  }
  }
  return nullptr;
}

std::optional<int64_t> evalConstant(const ir::Expr &e,
                                    const std::vector<std::vector<int64_t>> *shapes) {
  PointDomain d;
  d.shapes = shapes;
  return evalIndex(e, d);
}

bool InstOp::isElementwise() const {
  bool ok = true;
  ir::walk(*body, [&](const ir::Expr &e) {
    if (const auto *r = dyn_cast<ir::Read>(&e))
      ok &= sameVarCoords(r->coords, outputVars) && inputs[r->input].rank == outputVars.size();
    ok &= !isa<ir::OpaqueCall>(e) && !isa<ir::Reduce>(e);
  });
  bool readsAll = true;
  for (unsigned i = 0; i < inputs.size(); ++i) {
    bool read = false;
    ir::walk(*body, [&](const ir::Expr &e) {
      if (const auto *r = dyn_cast<ir::Read>(&e))
        read |= r->input == i;
    });
    readsAll &= read;
  }
  return ok && readsAll && !inputs.empty();
}

bool InstOp::mapsInputElementwise(unsigned input) const {
  bool ok = input < inputs.size() && inputs[input].rank == outputVars.size();
  ir::walk(*body, [&](const ir::Expr &e) {
    if (const auto *r = dyn_cast<ir::Read>(&e))
      ok &= r->input != input || sameVarCoords(r->coords, outputVars);
    ok &= !isa<ir::OpaqueCall>(e) && !isa<ir::Reduce>(e);
  });
  return ok;
}

const ir::Reduce *InstOp::topReduce() const { return dyn_cast<ir::Reduce>(body.get()); }

std::vector<unsigned> InstOp::topReductionVars() const {
  if (const ir::Reduce *r = topReduce())
    return r->vars;
  return {};
}

std::optional<std::vector<int64_t>>
InstOp::outputShape(const std::vector<std::vector<int64_t>> &inputShapes) const {
  if (!shape)
    return std::nullopt;
  std::vector<int64_t> out;
  for (const ir::ExprPtr &d : *shape) {
    auto v = evalConstant(*d, &inputShapes);
    if (!v)
      return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

llvm::Expected<Instantiation>
gradCallInstantiation(const ir::OpCall &call, const InstOp &fwd,
                      const std::vector<std::vector<int64_t>> &fwdInputShapes,
                      const std::function<unsigned(const ir::TensorRef &)> &argRank) {
  std::vector<int64_t> attrValues;
  for (const auto &[name, value] : fwd.attrs)
    attrValues.push_back(value);
  PointDomain d;
  d.shapes = &fwdInputShapes;
  d.attrs = &attrValues;
  Instantiation inst;
  for (const ir::AttrBinding &a : call.attrs) {
    auto v = evalIndex(*a.value, d);
    if (!v)
      return stringError("an attribute value is not a constant");
    inst.attrs[call.callee->attrs[a.attr].name] = *v;
  }
  for (const ir::GroupBinding &g : call.groups)
    inst.groups[call.callee->vars[g.var].name] = g.length;
  for (const auto &[name, len] : fwd.groups)
    inst.groupHints.emplace(name, len);
  for (const ir::ExprPtr &arg : call.args) {
    const auto *t = dyn_cast<ir::TensorRef>(arg.get());
    if (!t)
      return stringError("an argument is a slice or a call, not a whole tensor");
    inst.inputRanks.push_back(argRank(*t));
  }
  return inst;
}

llvm::Expected<InstOp> instantiate(const ir::OpDef &op, const Instantiation &inst) {
  InstOp out;
  Instantiator in(out);
  if (llvm::Error e = in.run(op, inst))
    return llvm::Expected<InstOp>(std::move(e));
  return llvm::Expected<InstOp>(std::move(out));
}

} // namespace tofu
