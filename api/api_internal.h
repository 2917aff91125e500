// What the public API's handles hold (include/tofu/plan.h's Impl types), for the C++ API
// and the C API built on it.
#ifndef TOFU_API_API_INTERNAL_H
#define TOFU_API_API_INTERNAL_H

#include <string>

#include "graph/graph.h"
#include "graph/library.h"
#include "tofu/plan.h"

namespace tofu {
namespace api {

struct Graph::Impl {
  ::tofu::Graph graph;
};

struct Planner::Impl {
  std::string dir;
  OpLibrary library;
};

} // namespace api
} // namespace tofu

#endif // TOFU_API_API_INTERNAL_H
