// Library forms: contraction, convolution and scatter-add matching and share geometry.
#include "codegen/library_plans.h"

#include <algorithm>
#include <map>

#include "llvm/Support/Casting.h"

namespace tofu {
namespace {

using llvm::dyn_cast;

/// An integer-affine index expression: sum(coef[v] * v) + constant.
struct Linear {
  std::map<unsigned, int64_t> coef;
  int64_t constant = 0;
  bool operator==(const Linear &o) const { return coef == o.coef && constant == o.constant; }
};

bool linearOf(const ir::Expr &e, int64_t scale, Linear &out) {
  if (const auto *c = dyn_cast<ir::Const>(&e)) {
    if (!c->isInt)
      return false;
    out.constant += scale * c->intValue;
    return true;
  }
  if (const auto *v = dyn_cast<ir::VarRef>(&e)) {
    out.coef[v->var] += scale;
    if (out.coef[v->var] == 0)
      out.coef.erase(v->var);
    return true;
  }
  if (const auto *n = dyn_cast<ir::Neg>(&e))
    return linearOf(*n->operand, -scale, out);
  if (const auto *b = dyn_cast<ir::Binary>(&e)) {
    switch (b->op) {
    case ir::BinaryOp::Add:
      return linearOf(*b->lhs, scale, out) && linearOf(*b->rhs, scale, out);
    case ir::BinaryOp::Sub:
      return linearOf(*b->lhs, scale, out) && linearOf(*b->rhs, -scale, out);
    case ir::BinaryOp::Mul: {
      const auto *lc = dyn_cast<ir::Const>(b->lhs.get());
      const auto *rc = dyn_cast<ir::Const>(b->rhs.get());
      if (lc && lc->isInt)
        return linearOf(*b->rhs, scale * lc->intValue, out);
      if (rc && rc->isInt)
        return linearOf(*b->lhs, scale * rc->intValue, out);
      return false;
    }
    default:
      return false;
    }
  }
  return false;
}

std::optional<Linear> linear(const ir::Expr &e) {
  Linear l;
  if (!linearOf(e, 1, l))
    return std::nullopt;
  return l;
}

const ir::Read *asRead(const ir::Expr *e) { return e ? dyn_cast<ir::Read>(e) : nullptr; }

bool isZero(const ir::Expr &e) {
  const auto *c = dyn_cast<ir::Const>(&e);
  return c && c->value == 0;
}

/// The top of a body `[alpha[] *] Reduce`: the reduction and the rank-0 input scaling it.
struct Scaled {
  const ir::Reduce *reduce = nullptr;
  int alphaInput = -1;
};

std::optional<Scaled> scaledReduce(const InstOp &op) {
  const ir::Expr *e = op.body.get();
  Scaled s;
  if (const auto *b = dyn_cast<ir::Binary>(e); b && b->op == ir::BinaryOp::Mul) {
    const ir::Read *alpha = asRead(b->lhs.get());
    const ir::Expr *rest = b->rhs.get();
    if (!alpha || !alpha->coords.empty()) {
      alpha = asRead(b->rhs.get());
      rest = b->lhs.get();
    }
    if (!alpha || !alpha->coords.empty() || op.inputs[alpha->input].rank != 0)
      return std::nullopt;
    s.alphaInput = static_cast<int>(alpha->input);
    e = rest;
  }
  s.reduce = dyn_cast<ir::Reduce>(e);
  if (!s.reduce || s.reduce->reducer != ir::Reducer::Sum)
    return std::nullopt;
  return s;
}

/// The two reads of a product `A * B`.
std::optional<std::pair<const ir::Read *, const ir::Read *>> product(const ir::Expr &e) {
  const auto *b = dyn_cast<ir::Binary>(&e);
  if (!b || b->op != ir::BinaryOp::Mul)
    return std::nullopt;
  const ir::Read *x = asRead(b->lhs.get()), *y = asRead(b->rhs.get());
  if (!x || !y)
    return std::nullopt;
  return std::make_pair(x, y);
}
/// A variable of a contraction: its share's extent and its stride in A, B and C (0 where
/// it does not index that tensor).
struct GemmVar {
  int64_t n = 1;
  int64_t sa = 0, sb = 0, sc = 0;
  enum Class { Batch, M, N, K } cls = Batch;
};
/// The contraction's reads and variable classes, when the body is one.
struct Contraction {
  Scaled top;
  const ir::Read *x = nullptr, *y = nullptr;
};

std::optional<Contraction> contraction(const InstOp &op) {
  auto top = scaledReduce(op);
  if (!top)
    return std::nullopt;
  auto pr = product(*top->reduce->body);
  if (!pr)
    return std::nullopt;
  Contraction c{*top, pr->first, pr->second};
  for (const ir::Read *r : {c.x, c.y}) {
    std::vector<bool> seen(op.vars.size(), false);
    for (const ir::Coord &co : r->coords) {
      auto v = ir::exactVar(co);
      if (!v || seen[*v])
        return std::nullopt;
      seen[*v] = true;
    }
  }
  return c;
}

std::optional<GemmPlan> gemmPlanOf(const InstOp &op, const Contraction &c,
                                   const std::vector<Range> &ranges, const std::vector<Box> &held) {
  const size_t nv = op.vars.size();
  std::vector<GemmVar> vars(nv);
  std::vector<bool> inA(nv, false), inB(nv, false), inC(nv, false), red(nv, false);
  for (unsigned v : c.top.reduce->vars)
    red[v] = true;
  int64_t offA = 0, offB = 0;
  auto place = [&](const ir::Read *r, std::vector<bool> &in, int64_t GemmVar::*s, int64_t &off) {
    std::vector<int64_t> st = rowMajorStrides(held[r->input]);
    for (size_t d = 0; d < r->coords.size(); ++d) {
      unsigned v = *ir::exactVar(r->coords[d]);
      in[v] = true;
      vars[v].*s = st[d];
      if (ranges[v].lo < held[r->input][d].lo || ranges[v].hi > held[r->input][d].hi)
        return false;
      off += (ranges[v].lo - held[r->input][d].lo) * st[d];
    }
    return true;
  };
  if (!place(c.x, inA, &GemmVar::sa, offA) || !place(c.y, inB, &GemmVar::sb, offB))
    return std::nullopt;
  {
    int64_t s = 1;
    for (size_t d = op.outputVars.size(); d-- > 0;) {
      unsigned v = op.outputVars[d];
      inC[v] = true;
      vars[v].sc = s;
      s *= ranges[v].size();
    }
  }
  std::vector<GemmVar> cls[4];
  for (size_t v = 0; v < nv; ++v) {
    GemmVar &g = vars[v];
    if (!red[v] && !inC[v] && !inA[v] && !inB[v])
      continue; // another term's variable (a sum of products: AffineGemmPlan)
    g.n = ranges[v].size();
    if (g.n <= 0)
      return std::nullopt;
    if (red[v] == inC[v])
      return std::nullopt; // a variable must be an output or a reduction, not both or neither
    if (red[v] && !(inA[v] && inB[v]))
      return std::nullopt; // summed in one operand only: not a product of matrices
    if (!red[v] && !inA[v] && !inB[v])
      return std::nullopt; // broadcast along an output variable
    g.cls = red[v]             ? GemmVar::K
            : inA[v] && inB[v] ? GemmVar::Batch
            : inA[v]           ? GemmVar::M
                               : GemmVar::N;
    if (g.n == 1)
      continue; // offsets only
    cls[g.cls].push_back(g);
  }
  // Merge variables of one class that are contiguous in every tensor (`a` just outside `b`).
  for (auto &list : cls) {
    bool merged = true;
    while (merged) {
      merged = false;
      for (size_t i = 0; i < list.size() && !merged; ++i)
        for (size_t j = 0; j < list.size() && !merged; ++j) {
          if (i == j)
            continue;
          GemmVar &o = list[i], &in = list[j];
          if (o.sa == in.sa * in.n && o.sb == in.sb * in.n && o.sc == in.sc * in.n) {
            in.n *= o.n;
            list.erase(list.begin() + static_cast<long>(i));
            merged = true;
          }
        }
    }
  }
  // Choose m, n, k (each a variable of its class, or none: extent 1) so that every matrix
  // has a unit stride along one of its dimensions and C's is along n (else swap A and B).
  struct Pick {
    const GemmVar *m, *n, *k;
    bool swap;
    int64_t work;
  };
  std::optional<Pick> best;
  GemmVar none;
  none.n = 1;
  auto unit = [](int64_t n, int64_t s) { return n == 1 || s == 1; };
  std::vector<const GemmVar *> ms{&none}, ns{&none}, ks{&none};
  for (const GemmVar &g : cls[GemmVar::M])
    ms.push_back(&g);
  for (const GemmVar &g : cls[GemmVar::N])
    ns.push_back(&g);
  for (const GemmVar &g : cls[GemmVar::K])
    ks.push_back(&g);
  for (bool swap : {false, true})
    for (const GemmVar *m : ms)
      for (const GemmVar *n : ns)
        for (const GemmVar *k : ks) {
          // In the swapped problem C^T = B^T A^T: rows of the product run along n.
          const GemmVar *rm = swap ? n : m, *rn = swap ? m : n;
          int64_t scN = rn->sc;
          if (!unit(rn->n, scN))
            continue;
          auto sA = [&](const GemmVar *g) { return swap ? g->sb : g->sa; };
          auto sB = [&](const GemmVar *g) { return swap ? g->sa : g->sb; };
          bool aOk = unit(k->n, sA(k)) || unit(rm->n, sA(rm));
          bool bOk = unit(rn->n, sB(rn)) || unit(k->n, sB(k));
          if (!aOk || !bOk)
            continue;
          int64_t work = m->n * n->n * k->n;
          if (!best || work > best->work)
            best = Pick{m, n, k, swap, work};
        }
  if (!best || (best->m->n == 1 && best->n->n == 1))
    return std::nullopt; // no product at all, or dot products: the generated kernel does better
  GemmPlan plan;
  GemmPlan *g = &plan;
  const bool swap = best->swap;
  const GemmVar *rm = swap ? best->n : best->m, *rn = swap ? best->m : best->n, *k = best->k;
  auto sA = [&](const GemmVar *v) { return swap ? v->sb : v->sa; };
  auto sB = [&](const GemmVar *v) { return swap ? v->sa : v->sb; };
  g->M = rm->n, g->N = rn->n, g->K = k->n;
  g->a = swap ? c.y->input : c.x->input;
  g->b = swap ? c.x->input : c.y->input;
  g->offA = swap ? offB : offA;
  g->offB = swap ? offA : offB;
  // A: M x K.
  if (unit(k->n, sA(k)) && (rm->n == 1 || sA(rm) >= g->K)) {
    g->transA = false;
    g->lda = rm->n == 1 ? std::max<int64_t>(1, g->K) : sA(rm);
  } else if (unit(rm->n, sA(rm)) && (k->n == 1 || sA(k) >= g->M)) {
    g->transA = true;
    g->lda = k->n == 1 ? std::max<int64_t>(1, g->M) : sA(k);
  } else {
    return std::nullopt;
  }
  // B: K x N.
  if (unit(rn->n, sB(rn)) && (k->n == 1 || sB(k) >= g->N)) {
    g->transB = false;
    g->ldb = k->n == 1 ? std::max<int64_t>(1, g->N) : sB(k);
  } else if (unit(k->n, sB(k)) && (rn->n == 1 || sB(rn) >= g->K)) {
    g->transB = true;
    g->ldb = rn->n == 1 ? std::max<int64_t>(1, g->K) : sB(rn);
  } else {
    return std::nullopt;
  }
  g->ldc = rm->n == 1 ? std::max<int64_t>(1, g->N) : rm->sc;
  if (g->ldc < g->N)
    return std::nullopt;
  g->alphaInput = c.top.alphaInput;
  for (int cl = 0; cl < 4; ++cl)
    for (const GemmVar &v : cls[cl]) {
      if (&v == best->m || &v == best->n || &v == best->k)
        continue;
      GemmLoop loop{v.n, swap ? v.sb : v.sa, swap ? v.sa : v.sb, v.sc};
      (cl == GemmVar::K ? g->inner : g->outer).push_back(loop);
    }
  return plan;
}
// ---------------------------------------------------------------------------------------
// Convolutions as oneDNN convolution primitives.

/// One spatial dimension: input index i = o * s + k * d - p.
struct SpatialDim {
  unsigned o = 0, k = 0; ///< variables
  int64_t s = 1, d = 1, p = 0;
};

struct ConvForm {
  ConvKind kind = ConvKind::Forward;
  // Variables: batch, input channel, output channel; per spatial dim its (o, k).
  unsigned n = 0, ci = 0, co = 0;
  std::vector<SpatialDim> sp;
  unsigned data = 0, w = 0, dy = 0; ///< inputs (those the form reads)
  /// The data gradient's dense output variable per spatial dim (i).
  std::vector<unsigned> x;
};

/// `data[n, ci, s*o + d*k - p, ...]` read with spatial coordinates affine in one output
/// and one kernel variable each.
bool dataRead(const ir::Read &r, unsigned rank, ConvForm &f, bool kernelIsOutput,
              const std::vector<bool> &reduced) {
  if (r.coords.size() != rank || rank < 3 || rank > 5)
    return false;
  auto n = ir::exactVar(r.coords[0]), ci = ir::exactVar(r.coords[1]);
  if (!n || !ci)
    return false;
  f.n = *n, f.ci = *ci, f.data = r.input;
  f.sp.clear();
  for (unsigned d = 2; d < rank; ++d) {
    if (r.coords[d].kind != ir::Coord::Kind::Affine)
      return false;
    auto l = linear(*r.coords[d].expr);
    if (!l || l->coef.size() != 2)
      return false;
    SpatialDim s;
    bool haveO = false, haveK = false;
    for (auto [v, c] : l->coef) {
      if (c <= 0)
        return false;
      // The kernel variable is reduced in the forward form and an output of the filter
      // gradient; the output position the other way round.
      bool isKernel = reduced[v] != kernelIsOutput;
      if (isKernel && !haveK)
        s.k = v, s.d = c, haveK = true;
      else if (!isKernel && !haveO)
        s.o = v, s.s = c, haveO = true;
      else
        return false;
    }
    if (!haveO || !haveK)
      return false;
    s.p = -l->constant;
    f.sp.push_back(s);
  }
  return true;
}

bool exactCoords(const ir::Read &r, const std::vector<unsigned> &vars) {
  if (r.coords.size() != vars.size())
    return false;
  for (size_t d = 0; d < vars.size(); ++d) {
    auto v = ir::exactVar(r.coords[d]);
    if (!v || *v != vars[d])
      return false;
  }
  return true;
}

std::optional<ConvForm> convForm(const InstOp &op) {
  auto top = scaledReduce(op);
  if (!top || top->alphaInput >= 0)
    return std::nullopt;
  std::vector<bool> reduced(op.vars.size(), false);
  for (unsigned v : top->reduce->vars)
    reduced[v] = true;
  const std::vector<unsigned> &ov = op.outputVars;
  const ir::Expr *body = top->reduce->body.get();
  ConvForm f;
  // Forward and filter gradient: a product of two reads.
  if (auto pr = product(*body)) {
    for (auto [dr, other] : {*pr, std::make_pair(pr->second, pr->first)}) {
      unsigned rank = static_cast<unsigned>(dr->coords.size());
      if (ov.size() != rank || other->coords.size() != rank)
        continue;
      // Forward: out [n, co, o...], w [co, ci, k...].
      if (dataRead(*dr, rank, f, false, reduced) && !reduced[f.n] && reduced[f.ci]) {
        std::vector<unsigned> out{f.n, ov[1]}, w{ov[1], f.ci};
        bool ok = ov[0] == f.n && !reduced[ov[1]];
        for (const SpatialDim &s : f.sp)
          out.push_back(s.o), w.push_back(s.k), ok = ok && !reduced[s.o] && reduced[s.k];
        if (ok && out == ov && exactCoords(*other, w)) {
          f.kind = ConvKind::Forward, f.co = ov[1], f.w = other->input;
          return f;
        }
      }
      // Filter gradient: out [co, ci, k...], dy [n, co, o...].
      if (dataRead(*dr, rank, f, true, reduced) && reduced[f.n] && !reduced[f.ci]) {
        std::vector<unsigned> out{ov[0], f.ci}, dy{f.n, ov[0]};
        bool ok = !reduced[ov[0]];
        for (const SpatialDim &s : f.sp)
          out.push_back(s.k), dy.push_back(s.o), ok = ok && reduced[s.o] && !reduced[s.k];
        if (ok && out == ov && exactCoords(*other, dy)) {
          f.kind = ConvKind::Filter, f.co = ov[0], f.dy = other->input;
          return f;
        }
      }
    }
    return std::nullopt;
  }
  // Data gradient: select(divisible, dy[n, co, (x + p - d*k) / s, ...] * w[co, ci, k...], 0).
  const auto *sel = dyn_cast<ir::Apply>(body);
  if (!sel || sel->fn != ir::Builtin::Select || sel->args.size() != 3 || !isZero(*sel->args[2]))
    return std::nullopt;
  auto pr = product(*sel->args[1]);
  if (!pr)
    return std::nullopt;
  const unsigned rank = static_cast<unsigned>(ov.size());
  if (rank < 3 || rank > 5)
    return std::nullopt;
  for (auto [dyr, wr] : {*pr, std::make_pair(pr->second, pr->first)}) {
    if (dyr->coords.size() != rank || wr->coords.size() != rank)
      continue;
    auto n = ir::exactVar(dyr->coords[0]), co = ir::exactVar(dyr->coords[1]);
    if (!n || !co || *n != ov[0] || !reduced[*co] || reduced[ov[1]])
      continue;
    f.kind = ConvKind::Data, f.n = *n, f.co = *co, f.ci = ov[1];
    f.dy = dyr->input, f.w = wr->input;
    f.sp.clear(), f.x.clear();
    std::vector<unsigned> w{f.co, f.ci};
    std::vector<Linear> numerators;
    bool ok = true;
    for (unsigned d = 2; d < rank && ok; ++d) {
      const ir::Coord &c = dyr->coords[d];
      if (c.kind != ir::Coord::Kind::Affine) {
        ok = false;
        break;
      }
      const ir::Expr *num = c.expr.get();
      int64_t s = 1;
      if (const auto *b = dyn_cast<ir::Binary>(num); b && b->op == ir::BinaryOp::Div) {
        const auto *k = dyn_cast<ir::Const>(b->rhs.get());
        if (!k || !k->isInt || k->intValue <= 0) {
          ok = false;
          break;
        }
        s = k->intValue, num = b->lhs.get();
      }
      auto l = linear(*num);
      if (!l || l->coef.size() != 2) {
        ok = false;
        break;
      }
      SpatialDim sd;
      sd.s = s;
      unsigned xv = ov[d];
      bool haveX = false, haveK = false;
      for (auto [v, cf] : l->coef) {
        if (v == xv && cf == 1)
          haveX = true;
        else if (reduced[v] && cf < 0)
          sd.k = v, sd.d = -cf, haveK = true;
        else
          ok = false;
      }
      if (!haveX || !haveK)
        ok = false;
      sd.p = l->constant;
      sd.o = xv; // the dense output variable stands in for o (see convPlanOf)
      f.sp.push_back(sd);
      f.x.push_back(xv);
      w.push_back(sd.k);
      numerators.push_back(*l);
    }
    if (!ok || !exactCoords(*wr, w))
      continue;
    // The condition: a product of `num % s == 0` for strided dims; nothing else.
    std::vector<const ir::Expr *> fs;
    ir::operandsOf(*sel->args[0], ir::BinaryOp::Mul, fs); // a product of conditions
    std::vector<bool> covered(f.sp.size(), false);
    for (const ir::Expr *e : fs) {
      const auto *eq = dyn_cast<ir::Binary>(e);
      const auto *mod =
          eq && eq->op == ir::BinaryOp::Eq ? dyn_cast<ir::Binary>(eq->lhs.get()) : nullptr;
      if (!mod || mod->op != ir::BinaryOp::Mod || !isZero(*eq->rhs)) {
        ok = false;
        break;
      }
      const auto *m = dyn_cast<ir::Const>(mod->rhs.get());
      auto l = linear(*mod->lhs);
      if (!m || !m->isInt || !l) {
        ok = false;
        break;
      }
      if (m->intValue == 1)
        continue;
      bool matched = false;
      for (size_t d = 0; d < f.sp.size(); ++d)
        if (numerators[d] == *l && f.sp[d].s == m->intValue)
          covered[d] = matched = true;
      if (!matched) {
        ok = false;
        break;
      }
    }
    for (size_t d = 0; d < f.sp.size() && ok; ++d)
      if (f.sp[d].s > 1 && !covered[d])
        ok = false;
    if (ok)
      return f;
  }
  return std::nullopt;
}
int64_t floorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceilDiv(int64_t a, int64_t b) { return -floorDiv(-a, b); }
std::optional<ConvPlan> convPlanOf(const InstOp &op, const ConvForm &f, const Shapes &shapes,
                                   const std::vector<Range> &ranges, const std::vector<Box> &held) {
  ConvPlan plan;
  plan.kind = f.kind;
  const size_t nsp = f.sp.size();
  plan.outputElements = 1;
  for (unsigned v : op.outputVars)
    plan.outputElements *= ranges[v].size();
  auto zeros = [&] {
    plan.zeros = true;
    return plan;
  };
  Box srcBox{ranges[f.n], ranges[f.ci]}, wBox{ranges[f.co], ranges[f.ci]},
      dstBox{ranges[f.n], ranges[f.co]};
  for (size_t d = 0; d < nsp; ++d) {
    const SpatialDim &s = f.sp[d];
    const Range kr = ranges[s.k];
    const int64_t nk = kr.size(), ext = (nk - 1) * s.d + 1;
    wBox.push_back(kr);
    int64_t pl = 0, pr = 0;
    if (f.kind != ConvKind::Data) {
      // The data view: the input rows the share reads, clipped to the tensor.
      const int64_t inExtent = shapes.inputs[f.data][2 + d];
      const Range orr = ranges[s.o];
      const int64_t base = orr.lo * s.s + kr.lo * s.d - s.p;
      const int64_t end = base + (orr.size() - 1) * s.s + ext;
      const int64_t r0 = std::clamp<int64_t>(base, 0, inExtent);
      int64_t r1 = std::clamp<int64_t>(end, 0, inExtent);
      if (r1 <= r0)
        return zeros(); // the share reads only padding
      pl = r0 - base, pr = end - r1;
      // Take the held rows past the last one read (a strided window skips them) when the
      // output size stays the same: a view as long as the buffer is often dense, and
      // oneDNN's fast convolutions want dense views.
      const int64_t heldHi = held[f.data][2 + d].hi, no = orr.size();
      if (heldHi > r1 && heldHi - r0 + pl - ext <= no * s.s - 1) {
        r1 = heldHi;
        pr = std::max<int64_t>(0, (no - 1) * s.s + ext - (r1 - r0) - pl);
      }
      srcBox.push_back({r0, r1});
      dstBox.push_back(orr);
    } else {
      // The dense output range and the dy rows that reach it, clipped to dy.
      const Range xr = ranges[s.o];
      const int64_t outExtent = shapes.inputs[f.dy][2 + d];
      int64_t oLo = ceilDiv(xr.lo + s.p - s.d * (kr.hi - 1), s.s);
      int64_t oHi = floorDiv(xr.hi - 1 + s.p - s.d * kr.lo, s.s); // inclusive
      oLo = std::max<int64_t>(oLo, 0);
      oHi = std::min<int64_t>(oHi, outExtent - 1);
      if (oHi < oLo)
        return zeros(); // no dy row reaches the share
      pl = s.p + xr.lo - oLo * s.s - kr.lo * s.d;
      if (pl < 0) { // start the view earlier: the extra rows only reach rows before xr
        int64_t back = ceilDiv(-pl, s.s);
        if (oLo - back < 0)
          return std::nullopt;
        oLo -= back;
        pl += back * s.s;
      }
      // Likewise take the held dy rows past the last one that reaches the share (they only
      // reach rows after it; right padding grows to match).
      oHi = std::max<int64_t>(oHi, std::min<int64_t>(held[f.dy][2 + d].hi, outExtent) - 1);
      const int64_t no = oHi - oLo + 1, ni = xr.size();
      pr = std::max<int64_t>(0, (no - 1) * s.s + ext - ni - pl);
      if (floorDiv(ni + pl + pr - ext, s.s) + 1 != no)
        return std::nullopt;
      srcBox.push_back(xr);
      dstBox.push_back({oLo, oHi + 1});
    }
    plan.strides.push_back(s.s);
    plan.dilations.push_back(s.d);
    plan.padBefore.push_back(pl);
    plan.padAfter.push_back(pr);
  }
  for (const Box *b : {&srcBox, &wBox, &dstBox})
    for (const Range &r : *b)
      if (r.size() <= 0)
        return std::nullopt;
  plan.src = std::move(srcBox), plan.weights = std::move(wBox), plan.dst = std::move(dstBox);
  switch (f.kind) {
  case ConvKind::Forward:
    plan.srcIn = static_cast<int>(f.data), plan.wIn = static_cast<int>(f.w);
    break;
  case ConvKind::Filter:
    plan.srcIn = static_cast<int>(f.data), plan.dstIn = static_cast<int>(f.dy);
    break;
  case ConvKind::Data:
    plan.dstIn = static_cast<int>(f.dy), plan.wIn = static_cast<int>(f.w);
    break;
  }
  for (int in : {plan.srcIn, plan.wIn, plan.dstIn}) // the views lie inside the held regions
    if (in >= 0) {
      const Box &view = in == plan.srcIn ? plan.src : in == plan.wIn ? plan.weights : plan.dst;
      if (!boxContains(held[static_cast<size_t>(in)], view))
        return std::nullopt;
    }
  return plan;
}

// ---------------------------------------------------------------------------------------
// Scatter-adds: `[0 * Z[...] +] Sum(lambda q...: select(idx[q...] == k, dy[...], 0))` (the
// gradient of a gather, e.g. of an embedding), where the sum over every q of a test against
// the output variable k is an O(K x Q) loop: instead each q adds into the one k it names.

struct ScatterForm {
  const ir::Read *idx = nullptr, *dy = nullptr, *zero = nullptr;
  unsigned k = 0;
  std::vector<unsigned> q; ///< the reduction variables, in the sum's order
};

std::optional<ScatterForm> scatterForm(const InstOp &op) {
  ScatterForm f;
  const ir::Expr *e = op.body.get();
  if (const auto *add = dyn_cast<ir::Binary>(e); add && add->op == ir::BinaryOp::Add) {
    const auto *mul = dyn_cast<ir::Binary>(add->lhs.get());
    if (!mul || mul->op != ir::BinaryOp::Mul || !isZero(*mul->lhs) || !asRead(mul->rhs.get()))
      return std::nullopt;
    f.zero = asRead(mul->rhs.get());
    e = add->rhs.get();
  }
  const auto *red = dyn_cast<ir::Reduce>(e);
  if (!red || red->reducer != ir::Reducer::Sum)
    return std::nullopt;
  const auto *sel = dyn_cast<ir::Apply>(red->body.get());
  if (!sel || sel->fn != ir::Builtin::Select || sel->args.size() != 3 || !isZero(*sel->args[2]))
    return std::nullopt;
  const auto *eq = dyn_cast<ir::Binary>(sel->args[0].get());
  f.dy = asRead(sel->args[1].get());
  if (!eq || eq->op != ir::BinaryOp::Eq || !f.dy)
    return std::nullopt;
  const ir::VarRef *kv = dyn_cast<ir::VarRef>(eq->rhs.get());
  f.idx = asRead(eq->lhs.get());
  if (!kv || !f.idx) {
    kv = dyn_cast<ir::VarRef>(eq->lhs.get());
    f.idx = asRead(eq->rhs.get());
  }
  if (!kv || !f.idx)
    return std::nullopt;
  f.k = kv->var;
  f.q = red->vars;
  std::vector<bool> isQ(op.vars.size(), false), isOut(op.vars.size(), false);
  for (unsigned v : f.q)
    isQ[v] = true;
  for (unsigned v : op.outputVars)
    isOut[v] = true;
  if (!isOut[f.k])
    return std::nullopt;
  // idx is indexed by the q variables, each once; dy by the output variables but k and by
  // the q variables, each once; the zero term by the output variables.
  std::vector<int> inIdx(op.vars.size(), 0), inDy(op.vars.size(), 0);
  for (const ir::Coord &c : f.idx->coords) {
    auto v = ir::exactVar(c);
    if (!v || !isQ[*v] || inIdx[*v]++)
      return std::nullopt;
  }
  for (const ir::Coord &c : f.dy->coords) {
    auto v = ir::exactVar(c);
    if (!v || *v == f.k || inDy[*v]++)
      return std::nullopt;
  }
  for (unsigned v = 0; v < op.vars.size(); ++v)
    if ((isQ[v] && (!inIdx[v] || !inDy[v])) || (isOut[v] && v != f.k && !inDy[v]))
      return std::nullopt;
  if (f.zero) {
    if (f.zero->coords.size() != op.outputVars.size())
      return std::nullopt;
    for (size_t d = 0; d < op.outputVars.size(); ++d) {
      auto v = ir::exactVar(f.zero->coords[d]);
      if (!v || *v != op.outputVars[d])
        return std::nullopt;
    }
  }
  return f;
}

std::optional<ScatterPlan> scatterPlanOf(const InstOp &op, const ScatterForm &f,
                                         const std::vector<Range> &ranges,
                                         const std::vector<Box> &held) {
  ScatterPlan plan;
  ScatterPlan *k = &plan;
  const size_t nv = op.vars.size();
  std::vector<int64_t> sIdx(nv, 0), sDy(nv, 0), sOut(nv, 0);
  auto place = [&](const ir::Read *r, std::vector<int64_t> &st, int64_t &off) {
    std::vector<int64_t> bs = rowMajorStrides(held[r->input]);
    for (size_t d = 0; d < r->coords.size(); ++d) {
      unsigned v = *ir::exactVar(r->coords[d]);
      if (ranges[v].lo < held[r->input][d].lo || ranges[v].hi > held[r->input][d].hi)
        return false;
      st[v] = bs[d];
      off += (ranges[v].lo - held[r->input][d].lo) * bs[d];
    }
    return true;
  };
  if (!place(f.idx, sIdx, k->idxOff) || !place(f.dy, sDy, k->dyOff))
    return std::nullopt;
  int64_t s = 1;
  for (size_t d = op.outputVars.size(); d-- > 0;) {
    unsigned v = op.outputVars[d];
    sOut[v] = s;
    s *= ranges[v].size();
  }
  k->outElems = s;
  k->idxIn = f.idx->input, k->dyIn = f.dy->input;
  k->kLo = ranges[f.k].lo, k->kHi = ranges[f.k].hi, k->kStride = sOut[f.k];
  for (unsigned v : f.q)
    k->qs.push_back({ranges[v].size(), sIdx[v], sDy[v], 0});
  for (unsigned v : op.outputVars)
    if (v != f.k)
      k->rest.push_back({ranges[v].size(), 0, sDy[v], sOut[v]});
  if (f.zero) {
    std::vector<int64_t> zs(nv, 0);
    if (!place(f.zero, zs, k->zeroOff))
      return std::nullopt;
    k->zeroIn = static_cast<int>(f.zero->input);
    for (unsigned v : op.outputVars) {
      k->zeroStrides.push_back(zs[v]);
      k->outExtents.push_back(ranges[v].size());
    }
  }
  return plan;
}

bool validRanges(const std::vector<Range> &ranges) {
  for (const Range &r : ranges)
    if (r.size() <= 0)
      return false;
  return true;
}

} // namespace

std::vector<int64_t> rowMajorStrides(const Box &box) {
  std::vector<int64_t> s(box.size(), 1);
  for (size_t d = box.size(); d-- > 1;)
    s[d - 1] = s[d] * box[d].size();
  return s;
}

int64_t gemmLoopCount(const std::vector<GemmLoop> &loops) {
  int64_t n = 1;
  for (const GemmLoop &l : loops)
    n *= l.n;
  return n;
}

int64_t GemmPlan::outerCount() const { return gemmLoopCount(outer); }
int64_t GemmPlan::innerCount() const { return gemmLoopCount(inner); }

GemmOffsets gemmLoopOffsets(const std::vector<GemmLoop> &loops, int64_t it) {
  GemmOffsets o;
  for (size_t d = loops.size(); d-- > 0;) {
    const int64_t c = it % loops[d].n;
    it /= loops[d].n;
    o.a += c * loops[d].sa, o.b += c * loops[d].sb, o.c += c * loops[d].sc;
  }
  return o;
}

bool hasGemmForm(const InstOp &op) { return contraction(op).has_value(); }

std::optional<GemmPlan> gemmPlan(const InstOp &op, const std::vector<Range> &ranges,
                                 const std::vector<Box> &held) {
  auto c = contraction(op);
  if (!c || !validRanges(ranges))
    return std::nullopt;
  return gemmPlanOf(op, *c, ranges, held);
}

namespace {
/// A sum of products and at most one bias (AffineGemmPlan).
struct AffineForm {
  std::vector<Contraction> products;
  const ir::Read *rest = nullptr;
};

/// Whether every coordinate of `r` is a distinct variable of `allowed`.
bool readsVars(const ir::Read &r, const std::vector<unsigned> &allowed) {
  std::vector<unsigned> seen;
  for (const ir::Coord &co : r.coords) {
    auto v = ir::exactVar(co);
    if (!v || std::find(allowed.begin(), allowed.end(), *v) == allowed.end() ||
        std::find(seen.begin(), seen.end(), *v) != seen.end())
      return false;
    seen.push_back(*v);
  }
  return true;
}

std::optional<AffineForm> affineForm(const InstOp &op) {
  if (contraction(op))
    return std::nullopt; // one product alone: gemmPlan's
  std::vector<const ir::Expr *> terms;
  ir::operandsOf(*op.body, ir::BinaryOp::Add, terms);
  AffineForm f;
  for (const ir::Expr *t : terms) {
    if (const auto *r = dyn_cast<ir::Reduce>(t)) {
      auto pr = r->reducer == ir::Reducer::Sum ? product(*r->body) : std::nullopt;
      if (!pr)
        return std::nullopt;
      std::vector<unsigned> vars(op.outputVars.begin(), op.outputVars.end());
      vars.insert(vars.end(), r->vars.begin(), r->vars.end());
      if (!readsVars(*pr->first, vars) || !readsVars(*pr->second, vars))
        return std::nullopt;
      f.products.push_back(Contraction{Scaled{r, -1}, pr->first, pr->second});
    } else if (const auto *r = dyn_cast<ir::Read>(t); r && !f.rest) {
      if (!readsVars(*r, op.outputVars))
        return std::nullopt;
      f.rest = r;
    } else {
      return std::nullopt;
    }
  }
  if (f.products.size() + (f.rest ? 1 : 0) < 2 || f.products.empty())
    return std::nullopt;
  return f;
}
} // namespace

bool hasAffineGemmForm(const InstOp &op) { return affineForm(op).has_value(); }

std::optional<AffineGemmPlan> affineGemmPlan(const InstOp &op, const std::vector<Range> &ranges,
                                             const std::vector<Box> &held) {
  auto f = affineForm(op);
  if (!f || !validRanges(ranges))
    return std::nullopt;
  AffineGemmPlan plan;
  for (const Contraction &c : f->products) {
    auto g = gemmPlanOf(op, c, ranges, held);
    if (!g)
      return std::nullopt;
    plan.products.push_back(std::move(*g));
  }
  for (unsigned v : op.outputVars)
    plan.outputExtents.push_back(ranges[v].size());
  if (f->rest) {
    const ir::Read &r = *f->rest;
    const Box &box = held[r.input];
    const std::vector<int64_t> st = rowMajorStrides(box);
    plan.restInput = static_cast<int>(r.input);
    plan.restStrides.assign(op.outputVars.size(), 0);
    for (size_t d = 0; d < r.coords.size(); ++d) {
      const unsigned v = *ir::exactVar(r.coords[d]);
      if (ranges[v].lo < box[d].lo || ranges[v].hi > box[d].hi)
        return std::nullopt; // outside the held region: the checked kernel's
      plan.restOffset += (ranges[v].lo - box[d].lo) * st[d];
      for (size_t k = 0; k < op.outputVars.size(); ++k)
        if (op.outputVars[k] == v)
          plan.restStrides[k] = st[d];
    }
  }
  return plan;
}

bool hasConvForm(const InstOp &op) { return convForm(op).has_value(); }

std::optional<ConvPlan> convPlan(const InstOp &op, const Shapes &shapes,
                                 const std::vector<Range> &ranges, const std::vector<Box> &held) {
  auto f = convForm(op);
  if (!f || !validRanges(ranges))
    return std::nullopt;
  return convPlanOf(op, *f, shapes, ranges, held);
}

bool hasScatterForm(const InstOp &op) { return scatterForm(op).has_value(); }

std::optional<ScatterPlan> scatterPlan(const InstOp &op, const std::vector<Range> &ranges,
                                       const std::vector<Box> &held) {
  auto f = scatterForm(op);
  if (!f || !validRanges(ranges))
    return std::nullopt;
  return scatterPlanOf(op, *f, ranges, held);
}

} // namespace tofu
