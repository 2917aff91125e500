// Errors that say whose fault they are. A tool exits 2 on bad usage (an option, a file or
// a setting the user gave that cannot work) and 1 on a failure of the run; a library that
// finds bad usage deep inside (a checkpoint's metadata, a data set that fits no input)
// returns a UsageError, and the tool's driver turns any error into its message and status.
#ifndef TOFU_SUPPORT_ERRORS_H
#define TOFU_SUPPORT_ERRORS_H

#include <string>

#include "llvm/Support/Error.h"

namespace tofu {

class UsageError : public llvm::ErrorInfo<UsageError> {
public:
  static char ID;
  explicit UsageError(std::string message) : message_(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;
  std::string message() const override { return message_; }

private:
  std::string message_;
};

/// An error of bad usage (exit status 2).
llvm::Error usageError(std::string message);

/// `value`, or its error made bad usage (the same message): for what reads the user's input.
template <class T> llvm::Expected<T> asUsage(llvm::Expected<T> value) {
  if (!value)
    return usageError(llvm::toString(value.takeError()));
  return value;
}

/// A tool's llvm::ExitOnError: prints "TOOL: message" and exits with the error's status (2
/// for a UsageError, else 1).
llvm::ExitOnError exitOnError(const std::string &tool);

/// How a library's messages name the settings its caller gave. A library names a setting by
/// its field, spelled as a tool's options spell it ("feed", "lr-schedule", "weight-decay"),
/// and never knows the tool's flags; the caller says how the names read. By default as the
/// fields ("feed 'x=y': ..."); a tool whose flags are the fields' names gives flags() ("--feed
/// 'x=y': ...").
class SettingNames {
public:
  SettingNames() = default;
  /// Every name as the field's, after `prefix`.
  explicit SettingNames(std::string prefix) : prefix_(std::move(prefix)) {}
  /// A tool's flags: "--" and the field's name.
  static SettingNames flags() { return SettingNames("--"); }

  /// How setting `field` reads in a message.
  std::string operator()(const std::string &field) const { return prefix_ + field; }

private:
  std::string prefix_;
};

/// The message of `e`, and the status a tool exits with: 2 for a UsageError, else 1.
/// Consumes `e`, which must hold an error.
int exitStatusOf(llvm::Error e, std::string &message);

} // namespace tofu

#endif // TOFU_SUPPORT_ERRORS_H
