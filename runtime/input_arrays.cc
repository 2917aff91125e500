// A tool's --input arrays, read and told to the ONNX importer (input_arrays.h).
#include "runtime/input_arrays.h"

#include <algorithm>
#include <sstream>

#include "fmt/format.h"
#include "grammar/diagnostics.h"

namespace tofu {

std::map<std::string, OnnxGivenInput> InputArrays::forImport() const {
  std::map<std::string, OnnxGivenInput> given;
  for (const auto &[name, a] : arrays) {
    OnnxGivenInput &g = given[name];
    g.shape = a.shape;
    g.elementType = a.onnxType;
    int64_t n = 1;
    for (int64_t d : a.shape)
      n *= d;
    if (n <= kMaxKnownInputValues) {
      g.values.reserve(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        g.values.push_back(a.at(i));
      g.hasValues = true;
    }
  }
  for (const std::string &name : empty)
    given[name + "[]"] = OnnxGivenInput();
  return given;
}

llvm::Expected<InputArrays> readInputArrays(const std::string &list, const SettingNames &names) {
  const std::string option = names("input");
  InputArrays r;
  std::stringstream items(list);
  std::string item;
  while (std::getline(items, item, ',')) {
    // NAME[]: an empty sequence, or an optional holding nothing.
    if (item.size() > 2 && item.compare(item.size() - 2, 2, "[]") == 0 &&
        item.find('=') == std::string::npos) {
      const std::string name = item.substr(0, item.size() - 2);
      if (std::find(r.empty.begin(), r.empty.end(), name) != r.empty.end())
        return stringError(fmt::format("{}: '{}' is given twice", option, item));
      r.empty.push_back(name);
      continue;
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return stringError(fmt::format("{} '{}': '{}' is not NAME=FILE", option, list, item));
    const std::string name = item.substr(0, eq), file = item.substr(eq + 1);
    for (const auto &given : r.arrays)
      if (given.first == name)
        return stringError(fmt::format("{}: '{}' is given twice", option, name));
    auto a = readDataArray(file);
    if (!a)
      return a.takeError();
    r.arrays.emplace_back(name, std::move(*a));
  }
  return r;
}

} // namespace tofu
