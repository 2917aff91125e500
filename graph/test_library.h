// Tests' access to the repository's operator library (ops/, a data dependency).
#ifndef TOFU_GRAPH_TEST_LIBRARY_H
#define TOFU_GRAPH_TEST_LIBRARY_H

#include <map>
#include <string>
#include <vector>

#include "analysis/instantiate.h"
#include "graph/graph.h"
#include "graph/library.h"

namespace tofu {

/// ops/ loaded once per test binary; aborts the test program if it does not load.
const OpLibrary &testLibrary();

/// The library's op `opName` instantiated with input ranks `ranks` and group ranks
/// `groups`; aborts the test program when there is no such op or it does not instantiate.
InstOp testInstance(const std::string &opName, const std::vector<unsigned> &ranks,
                    std::map<std::string, int64_t> groups = {});

/// A tensor of known shape, for building test graphs.
TensorInfo testTensor(const std::string &name, std::vector<int64_t> shape,
                      TensorRole role = TensorRole::Input);

} // namespace tofu

#endif // TOFU_GRAPH_TEST_LIBRARY_H
