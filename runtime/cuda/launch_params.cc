// Copy, scatter and kernel-argument parameters, and their host runners.
#include "runtime/cuda/launch_params.h"

#include <algorithm>
#include <cstring>

#include "fmt/format.h"

namespace tofu::cuda {

int32_t copyCombine(const ir::Reducer *reducer) {
  if (!reducer)
    return kOverwrite;
  switch (*reducer) {
  case ir::Reducer::Sum:
    return kSum;
  case ir::Reducer::Prod:
    return kProd;
  case ir::Reducer::Max:
    return kMax;
  case ir::Reducer::Min:
    return kMin;
  }
  return kOverwrite;
}

BoxCopyParams boxCopyParams(const Box &dstHeld, int64_t dstOffset, const Box &srcHeld,
                            int64_t srcOffset, const Box &box, int32_t combine,
                            loops::Element dstElement, loops::Element srcElement) {
  BoxCopyParams p;
  p.combine = combine;
  p.dstBf16 = dstElement == loops::Element::BF16 ? 1 : 0;
  p.srcBf16 = srcElement == loops::Element::BF16 ? 1 : 0;
  const std::vector<int64_t> ds = rowMajorStrides(dstHeld), ss = rowMajorStrides(srcHeld);
  p.srcOffset = srcOffset, p.dstOffset = dstOffset;
  struct Dim {
    int64_t n, s, d;
  };
  std::vector<Dim> dims;
  for (size_t k = 0; k < box.size(); ++k) {
    p.srcOffset += (box[k].lo - srcHeld[k].lo) * ss[k];
    p.dstOffset += (box[k].lo - dstHeld[k].lo) * ds[k];
    p.elements *= box[k].size();
    if (box[k].size() != 1)
      dims.push_back({box[k].size(), ss[k], ds[k]});
  }
  if (p.elements == 0)
    return p;
  // Merge a dimension into the next inner one where it steps over exactly that one in both
  // buffers.
  std::vector<Dim> merged;
  for (const Dim &d : dims) {
    if (!merged.empty()) {
      Dim &outer = merged.back();
      if (outer.s == d.s * d.n && outer.d == d.d * d.n) {
        outer = {outer.n * d.n, d.s, d.d};
        continue;
      }
    }
    merged.push_back(d);
  }
  p.rank = static_cast<int32_t>(merged.size());
  for (size_t k = 0; k < merged.size(); ++k) {
    p.extent[k] = merged[k].n;
    p.srcStride[k] = merged[k].s;
    p.dstStride[k] = merged[k].d;
  }
  return p;
}

bool isContiguousCopy(const BoxCopyParams &p) {
  return p.combine == kOverwrite && p.srcBf16 == p.dstBf16 &&
         (p.rank == 0 || (p.rank == 1 && p.srcStride[0] == 1 && p.dstStride[0] == 1));
}

int64_t copyElementBytes(const BoxCopyParams &p) { return p.srcBf16 ? 2 : 4; }

void runBoxCopyOnHost(const BoxCopyParams &p, void *dst, const void *src) {
  for (int64_t e = 0; e < p.elements; ++e)
    boxCopyElement(p, e, dst, src);
}

ScatterParams scatterParams(const ScatterPlan &plan) {
  ScatterParams p;
  p.qRank = static_cast<int32_t>(plan.qs.size());
  p.rRank = static_cast<int32_t>(plan.rest.size());
  for (size_t k = 0; k < plan.qs.size(); ++k) {
    p.qExtent[k] = plan.qs[k].n, p.qIdxStride[k] = plan.qs[k].sIdx, p.qDyStride[k] = plan.qs[k].sDy;
    p.qCount *= plan.qs[k].n;
  }
  for (size_t k = 0; k < plan.rest.size(); ++k) {
    p.rExtent[k] = plan.rest[k].n, p.rDyStride[k] = plan.rest[k].sDy;
    p.rOutStride[k] = plan.rest[k].sOut;
    p.rCount *= plan.rest[k].n;
  }
  p.idxOffset = plan.idxOff, p.dyOffset = plan.dyOff;
  p.kLo = plan.kLo, p.kHi = plan.kHi, p.kStride = plan.kStride;
  return p;
}

BoxCopyParams scatterZeroTerm(const ScatterPlan &plan) {
  BoxCopyParams p;
  p.combine = kProd;
  p.srcOffset = plan.zeroOff;
  p.rank = static_cast<int32_t>(plan.outExtents.size());
  int64_t s = 1;
  for (size_t k = plan.outExtents.size(); k-- > 0;) {
    p.extent[k] = plan.outExtents[k];
    p.srcStride[k] = plan.zeroStrides[k];
    p.dstStride[k] = s;
    s *= plan.outExtents[k];
  }
  p.elements = s;
  return p;
}

void runScatterOnHost(const ScatterPlan &plan, const float *const *in, float *out) {
  std::fill(out, out + plan.outElems, 0.0f);
  if (plan.zeroIn >= 0)
    runBoxCopyOnHost(scatterZeroTerm(plan), out, in[plan.zeroIn]);
  const ScatterParams p = scatterParams(plan);
  for (int64_t q = 0; q < p.qCount; ++q)
    for (int64_t r = 0; r < p.rCount; ++r)
      scatterElement(p, q, r, out, in[plan.idxIn], in[plan.dyIn],
                     [](float *at, float v) { *at += v; });
}

std::vector<unsigned char> kernelArgBlock(const std::vector<int64_t> &ints,
                                          const std::vector<const float *> &inputs, float *out,
                                          bool fast, float *scratch, int64_t parts) {
  const size_t nInts = std::max<size_t>(1, ints.size());
  const size_t nIn = std::max<size_t>(1, inputs.size());
  // i64 ints[nInts]; const float *in[nIn]; float *out; int fast; int threads;
  // float *scratch; i64 parts;
  std::vector<unsigned char> block(8 * nInts + 8 * nIn + 8 + 4 + 4 + 8 + 8, 0);
  unsigned char *at = block.data();
  if (!ints.empty())
    std::memcpy(at, ints.data(), 8 * ints.size());
  at += 8 * nInts;
  for (const float *p : inputs) {
    std::memcpy(at, &p, 8);
    at += 8;
  }
  at = block.data() + 8 * nInts + 8 * nIn;
  std::memcpy(at, &out, 8);
  const int32_t f = fast ? 1 : 0, threads = 1;
  std::memcpy(at + 8, &f, 4);
  std::memcpy(at + 12, &threads, 4);
  std::memcpy(at + 16, &scratch, 8);
  std::memcpy(at + 24, &parts, 8);
  return block;
}

namespace {
/// The values `vars` take together over `ranges`.
int64_t rangeProduct(const std::vector<unsigned> &vars, const std::vector<Range> &ranges) {
  int64_t n = 1;
  for (unsigned v : vars)
    n *= ranges[v].size();
  return n;
}

int64_t firstExtent(const CudaTemporaryPass &t, const std::vector<Range> &ranges) {
  return t.vars.empty() ? 1 : ranges[t.vars.front()].size();
}
} // namespace

int64_t temporaryParts(int64_t values, int64_t firstExtent, int64_t terms) {
  constexpr int64_t kBlocks = 1024, kTermsPerPart = 2048;
  if (values <= 0 || values >= kBlocks)
    return 1;
  const int64_t wanted = (kBlocks + values - 1) / values;
  const int64_t worth = std::max<int64_t>(1, terms / kTermsPerPart);
  return std::max<int64_t>(1, std::min({wanted, worth, firstExtent}));
}

int64_t temporaryTerms(const CudaTemporaryPass &t, const std::vector<Range> &ranges) {
  int64_t perTerm = 1;
  for (const std::vector<unsigned> &n : t.nested)
    perTerm += rangeProduct(n, ranges);
  return rangeProduct(t.vars, ranges) * perTerm;
}

int64_t temporaryParts(const CudaTemporaryPass &t, const std::vector<Range> &ranges) {
  return temporaryParts(rangeProduct(t.depends, ranges), firstExtent(t, ranges),
                        temporaryTerms(t, ranges));
}

int64_t cudaPassesScratchBytes(const std::vector<CudaTemporaryPass> &passes,
                               const std::vector<Range> &ranges) {
  int64_t floats = 0, partials = 0;
  for (const CudaTemporaryPass &t : passes) {
    const int64_t values = rangeProduct(t.depends, ranges);
    floats += values;
    const int64_t parts = temporaryParts(t, ranges);
    if (parts > 1)
      partials = std::max(partials, values * parts);
  }
  return (floats + partials) * static_cast<int64_t>(sizeof(float));
}

GeneratedLaunch planGeneratedLaunch(const KernelSource &k, const InstOp &op,
                                    const std::vector<Range> &ranges) {
  GeneratedLaunch g;
  g.multi = !k.passes.empty();
  const auto &blockReductions = g.multi ? k.passesBlockReductions : k.blockReductions;
  const auto &blockOutputVars = g.multi ? k.passesBlockOutputVars : k.blockOutputVars;
  g.outputs = rangeProduct(op.outputVars, ranges);
  for (const std::vector<unsigned> &vars : blockReductions)
    g.reduced += rangeProduct(vars, ranges);
  g.groups = rangeProduct(blockOutputVars, ranges);
  g.perBlock =
      g.reduced >= 64 && (g.outputs < 32768 || g.reduced >= 2048 || g.outputs >= 8 * g.groups);
  g.blocks = static_cast<unsigned>(
      g.perBlock ? std::clamp<int64_t>(g.groups, 1, 4 * kKernelMaxBlocks)
                 : std::clamp<int64_t>((g.outputs + kKernelThreads - 1) / kKernelThreads, 1,
                                       kKernelMaxBlocks));
  const std::string base = g.multi ? passesKernelName(k.name) : k.name;
  g.entry = g.perBlock ? blockKernelName(base) : base;
  for (const CudaTemporaryPass &t : k.passes) {
    GeneratedLaunch::Pass p;
    p.temporary = &t;
    p.values = rangeProduct(t.depends, ranges);
    p.terms = temporaryTerms(t, ranges);
    p.parts = temporaryParts(p.values, firstExtent(t, ranges), p.terms);
    p.blocks =
        static_cast<unsigned>(std::clamp<int64_t>(p.values * p.parts, 1, 4 * kKernelMaxBlocks));
    p.combineBlocks = static_cast<unsigned>(
        std::clamp<int64_t>((p.values + kKernelThreads - 1) / kKernelThreads, 1, kKernelMaxBlocks));
    g.passes.push_back(p);
  }
  return g;
}

std::string GeneratedLaunch::describe() const {
  std::string out = !perBlock ? std::string("generated")
                    : groups == outputs
                        ? fmt::format("generated, a block per output ({} terms)", reduced)
                        : fmt::format("generated, a block per {} outputs ({} terms)",
                                      outputs / std::max<int64_t>(1, groups), reduced);
  if (!multi)
    return out;
  std::string split;
  for (const Pass &p : passes) {
    split += fmt::format("{}{} x {}", split.empty() ? "" : ", ", p.values, p.terms);
    if (p.parts > 1)
      split += fmt::format(" in {} parts", p.parts);
  }
  return out + fmt::format(" after {} temporar{} ({})", passes.size(),
                           passes.size() == 1 ? "y" : "ies", split);
}

} // namespace tofu::cuda
