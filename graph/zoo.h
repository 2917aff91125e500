// The model zoo: forward graphs of the paper's benchmarks (and an MLP), by name.
#ifndef TOFU_GRAPH_ZOO_H
#define TOFU_GRAPH_ZOO_H

#include <string>
#include <vector>

#include "graph/graph.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// A multi-layer perceptron: dims[0] inputs, ReLU hidden layers, softmax cross-entropy over
/// dims.back() classes.
llvm::Expected<Graph> buildMlp(const std::vector<int64_t> &dims, int64_t batch);

/// WResNet-depth-W (depth 50, 101 or 152: bottleneck blocks 3/4/6/3, 3/4/23/3, 3/8/36/3) on
/// 224x224 ImageNet images, 1000 classes. Widening, as in the paper: every convolution's
/// input and output channels are multiplied by W (the image's 3 channels excepted), so the
/// stem has 64W channels, stage s has bottleneck width 64*2^s*W and output 256*2^s*W; batch
/// normalisation follows the channels; the classifier takes 2048W features. Batch
/// normalisation uses batch statistics (training mode). `image`, `base` (the stem's width,
/// 64 in the paper) and `classes` make small variants for tests.
llvm::Expected<Graph> buildWResNet(int depth, int64_t widen, int64_t batch, int64_t image = 224,
                                   int64_t base = 64, int64_t classes = 1000);

/// RNN-L-H: L stacked LSTM layers of hidden size H (input size H), unrolled over `steps`
/// timesteps (20 in the paper); the loss is the mean squared error of the top layer's output
/// against a target at every step, summed. Weights are shared across timesteps; each
/// (layer, step) cell is one coarsening group.
llvm::Expected<Graph> buildRnn(int layers, int64_t hidden, int64_t batch, int steps = 20);

/// A GPT-style decoder: token and position embeddings (vocabulary `vocab`), `layers`
/// pre-norm blocks of causal multi-head attention (`heads` heads of hidden/heads) and a
/// ReLU feed-forward of 4*hidden, a final layer norm and a vocabulary projection, with
/// softmax cross-entropy over every position. Attention and projections carry no biases
/// except the feed-forward's.
llvm::Expected<Graph> buildTransformer(int layers, int64_t hidden, int64_t heads, int64_t seq,
                                       int64_t batch, int64_t vocab = 32000);

/// A zoo model by name: "mlp", "wresnet-<50|101|152>-<W>", "rnn-<L>-<H>" (H may end in K,
/// e.g. rnn-10-8K), "gpt-<layers>-<hidden>-<heads>-<seq>" (e.g. gpt-12-768-12-1024). Its
/// graph's single output is the scalar loss.
/// The largest batch a zoo model takes (each of its tensors' extents stays far inside
/// int64; checkGraph bounds the bytes).
inline constexpr int64_t kMaxZooExtent = int64_t(1) << 31;

/// A zoo model's name, read: which family, and the family's numbers in its order (wresnet:
/// depth, widening, image, stem width, classes; rnn: layers, hidden size; gpt: layers,
/// hidden size, heads, sequence length), absent optional ones at their defaults.
struct ModelName {
  enum Family { Mlp, WResNet, Rnn, Gpt } family = Mlp;
  std::string text;
  std::vector<int64_t> numbers;
};

/// Reads a name (zooHelp); each number is read with a range check, and an error names the
/// one out of range. Builds nothing.
llvm::Expected<ModelName> parseModelName(const std::string &name);

/// The model a parsed name names, at `batch`.
llvm::Expected<Graph> buildModel(const ModelName &name, int64_t batch);

/// parseModelName, then buildModel.
llvm::Expected<Graph> buildModel(const std::string &name, int64_t batch);

/// The names buildModel accepts, for help texts.
std::string zooHelp();

} // namespace tofu

#endif // TOFU_GRAPH_ZOO_H
