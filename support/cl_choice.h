// A command-line option that takes one of a set of names (llvm::cl with cl::values), whose
// error names every choice: "for the --kernels option: must be compiled, generated or interp,
// not 'gpu'" where llvm's own parser says only "Cannot find option named 'gpu'!".
//
//   cl::opt<Kernels, false, tofu::ChoiceParser<Kernels>> kernels(
//       "kernels", cl::values(clEnumValN(Kernels::Compiled, "compiled", "..."), ...));
#ifndef TOFU_SUPPORT_CL_CHOICE_H
#define TOFU_SUPPORT_CL_CHOICE_H

#include <string>

#include "llvm/Support/CommandLine.h"

namespace tofu {

template <class T> class ChoiceParser : public llvm::cl::parser<T> {
public:
  using llvm::cl::parser<T>::parser;

  /// True on error, as llvm::cl's parsers.
  bool parse(llvm::cl::Option &o, llvm::StringRef argName, llvm::StringRef arg, T &value) {
    const llvm::StringRef given = this->Owner.hasArgStr() ? arg : argName;
    for (const auto &choice : this->Values)
      if (choice.Name == given) {
        value = choice.V.getValue();
        return false;
      }
    std::string names;
    for (size_t i = 0; i < this->Values.size(); ++i)
      names += (i == 0                         ? ""
                : i + 1 == this->Values.size() ? " or "
                                               : ", ") +
               this->Values[i].Name.str();
    return o.error("must be " + names + ", not '" + given + "'");
  }
};

} // namespace tofu

#endif // TOFU_SUPPORT_CL_CHOICE_H
