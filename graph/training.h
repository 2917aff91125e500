// The training rewrites of a forward graph (training.cc): the optimisers, the backward pass
// and the update (buildTrainingGraph), the loss a prediction trains against (addLoss), and
// the graph evaluation runs (evaluationGraph).
#ifndef TOFU_GRAPH_TRAINING_H
#define TOFU_GRAPH_TRAINING_H

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/library.h"
#include "llvm/Support/Error.h"

namespace tofu {

/// How the training graph updates weights (PyTorch's torch.optim forms): plain SGD, SGD with
/// momentum (no dampening), SGD with Nesterov momentum, Adam, and AdamW (decoupled decay).
enum class Optimizer { SGD, Momentum, Nesterov, Adam, AdamW };
/// Its command-line name ("sgd", "momentum", "nesterov", "adam", "adamw").
const char *optimizerName(Optimizer o);
/// The optimiser of that name, if there is one.
std::optional<Optimizer> optimizerNamed(const std::string &name);
/// The rank-0 hyper-parameter inputs of a training graph with optimiser `o`, in order:
/// `lr`; `momentum` (Momentum, Nesterov); `adam_b1`, `adam_b2`, `adam_c1`, `adam_c2`,
/// `adam_eps` (Adam, AdamW; c1 and c2 are the step's bias corrections 1 - b^t); and
/// `weight_decay` (AdamW, and any optimiser built with weight decay).
std::vector<std::string> optimizerHyperParameters(Optimizer o, bool weightDecay);

/// Builds a training graph from a checked forward graph and its scalar loss: backward
/// nodes from the ops' grad clauses (in reverse topological order; a gradient with several
/// contributions is summed, the sum in that tensor's group), then an optimiser update for
/// every weight (ops/optim/optim.tdl). Hyper-parameters are rank-0 input tensors
/// (optimizerHyperParameters); the state is a velocity `momentum_v_<weight>` (Momentum,
/// Nesterov) or the moments `adam_m_<weight>`, `adam_v_<weight>` (Adam, AdamW). With
/// `weightDecay`, SGD, Momentum, Nesterov and Adam add `weight_decay * w` to the gradient
/// (PyTorch's weight_decay); AdamW always decays, decoupled. The loss gradient seed is the
/// input `d_<loss>`. Errors name the node whose op lacks a needed grad clause.
llvm::Expected<Graph> buildTrainingGraph(const Graph &forward, const std::string &loss,
                                         const OpLibrary &lib, Optimizer optimizer,
                                         bool weightDecay = false);

/// Whether `op` updates state from step to step: one of the optimiser updates
/// buildTrainingGraph adds (sgd_update, sgd_weight_decay_update, momentum_velocity,
/// momentum_update, nesterov_update, adam_m, adam_v, adam_update, adamw_update), or a batch
/// norm's running statistic (bn_running_mean, bn_running_var, bn_running_var_unbiased). Where
/// its first input is a weight or state (not data), its result replaces that input for the
/// next step (Problem::carriesState).
bool isStateUpdate(const std::string &op);

/// Whether node `n` of `g` carries state: a state update (isStateUpdate) whose first input is
/// a weight or state (role Weight or OptimizerState, produced by no node).
bool carriesState(const Graph &g, const Node &n);

/// Whether `node` names a node buildTrainingGraph adds to sum two contributions to a
/// gradient (`sum_d_<tensor>`).
bool isGradientSumName(const std::string &node);

/// Whether `op` is a batch norm's running statistic (bn_running_mean, bn_running_var,
/// bn_running_var_unbiased).
bool isRunningStatistic(const std::string &op);

/// How evaluation normalises where training normalised with the batch's statistics.
enum class EvalNorm {
  Running, ///< with the running statistics, as PyTorch's model.eval() does
  Batch,   ///< with the batch's own, as in training
};

/// The graph that evaluation and inference run, from one imported for training (the same
/// names throughout, so that a training plan restricts to it): every running-statistic
/// update that carries state and whose result nothing reads is dropped (evaluation leaves
/// the statistics as they are), and under EvalNorm::Running the batch_norm_train whose
/// statistics those were becomes BatchNormalization on them, under the same node name.
/// Returns how many batch norms changed.
llvm::Expected<unsigned> evaluationGraph(Graph &g, const OpLibrary &lib, EvalNorm norm);

/// Which loss addLoss gives an output that is not a scalar.
enum class LossKind {
  Auto,         ///< softmax cross-entropy for a rank-2 output, else the mean squared error
  CrossEntropy, ///< softmax cross-entropy over the last axis: rank 2 [batch, classes], or
                ///< rank 3 [batch, positions, classes] with a class per position
  Mse,          ///< the mean squared error
};
/// Whether `op` is one of the softmax cross-entropy losses addLoss adds (its second input
/// the labels: one per row, or one per position).
bool isCrossEntropyLoss(const std::string &op);

/// Gives a checked graph whose single output is not a scalar a loss to train against, as
/// `kind` says: softmax cross-entropy against a new integer input `labels` of the output's
/// shape without its last axis (`softmax_cross_entropy` on [batch, classes] logits,
/// `softmax_cross_entropy_seq` on [batch, positions, classes]: a language model's mean
/// per-token loss), or the mean squared error against a new input `target` of the output's
/// shape. The loss becomes the graph's output; returns its name. Cross-entropy on an output
/// of another rank is an error that says so.
llvm::Expected<std::string> addLoss(Graph &g, const OpLibrary &lib, LossKind kind = LossKind::Auto);

/// addLoss for one output of a graph of any number of outputs, which stay as they are: the
/// loss's name (the output itself when it is a scalar). Inputs and nodes are named as
/// addLoss names them, or after the output where those names are taken (`mel_target`).
llvm::Expected<std::string> addLossOf(Graph &g, const OpLibrary &lib, const std::string &output,
                                      LossKind kind = LossKind::Auto);

/// The scalar sum of `terms` (scalar tensors, each times its weight: a constant), added to
/// the graph in order by Mul and Add nodes of group `name`; returns its name (the one term
/// itself when there is one of weight 1).
llvm::Expected<std::string> addWeightedSum(Graph &g, const OpLibrary &lib,
                                           const std::vector<std::pair<std::string, double>> &terms,
                                           const std::string &name);

/// The weights from which no path of nodes leads to `loss` become inputs that keep their
/// values (as PyTorch leaves a parameter no loss reaches, with no gradient): the weights a
/// graph of several outputs reads only for the outputs it does not train on. Returns them.
std::vector<std::string> freezeWeightsNotReaching(Graph &g, const std::string &loss);

} // namespace tofu

#endif // TOFU_GRAPH_TRAINING_H
