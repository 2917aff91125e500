// Files and directories (files.h).
#include "support/files.h"

#include <sys/stat.h>

#include <cerrno>

namespace tofu {

bool makeDirs(const std::string &path) {
  for (size_t at = 1; at <= path.size(); ++at)
    if (at == path.size() || path[at] == '/') {
      std::string prefix = path.substr(0, at);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        return false;
    }
  return true;
}

} // namespace tofu
