// Test scaffolding: a model's training step as a search problem.
#ifndef TOFU_TESTING_TEST_PROBLEM_H
#define TOFU_TESTING_TEST_PROBLEM_H

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/training.h"
#include "partition/plan.h"
#include "partition/problem.h"

namespace tofu {

/// The training step of forward graph `g` as a search problem, through the pipeline
/// (planner/pipeline.h) with testLibrary(): `g` checked, its output the loss (or given one),
/// `optimizer`'s updates added. A step that fails
/// is a test failure (gtest EXPECT) quoting the error. `outputs`, when given, receives the
/// training graph's outputs. `precision`: the policy applied to the training graph.
Problem trainingProblem(llvm::Expected<Graph> g, Optimizer optimizer = Optimizer::SGD,
                        std::vector<std::string> *outputs = nullptr,
                        Precision precision = Precision::FP32);

/// Random choices for every node and tensor of every step of `parts` (any strategy, any
/// dimension, or none). `fitting`: none where a variable or dimension would be cut into
/// more parts than it has elements (the same draws, so the same plan where none is).
std::vector<StepChoice> randomSteps(const Problem &p, const std::vector<unsigned> &parts,
                                    std::mt19937 &rng, bool fitting = false);

/// The plan tofu's search finds for `k` workers; a search that fails is a test failure
/// quoting the error, and gives none.
std::optional<PartitionPlan> searchedPlan(const Problem &p, unsigned k);

/// The bytes `plan` moves by the cost model's brute-force oracle (search/cost_model.h):
/// what an execution of it must move.
int64_t predictedBytes(const Problem &p, const PartitionPlan &plan);

} // namespace tofu

#endif // TOFU_TESTING_TEST_PROBLEM_H
