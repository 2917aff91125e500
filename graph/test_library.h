// Tests' access to the repository's operator library (ops/, a data dependency).
#ifndef TOFU_GRAPH_TEST_LIBRARY_H
#define TOFU_GRAPH_TEST_LIBRARY_H

#include "graph/library.h"

namespace tofu {

/// ops/ loaded once per test binary; aborts the test program if it does not load.
const OpLibrary &testLibrary();

} // namespace tofu

#endif // TOFU_GRAPH_TEST_LIBRARY_H
