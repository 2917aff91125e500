// Errors that say whose fault they are (errors.h).
#include "support/errors.h"

#include "llvm/Support/raw_ostream.h"

namespace tofu {

char UsageError::ID = 0;

void UsageError::log(llvm::raw_ostream &os) const { os << message_; }

std::error_code UsageError::convertToErrorCode() const {
  return std::make_error_code(std::errc::invalid_argument);
}

llvm::Error usageError(std::string message) {
  return llvm::make_error<UsageError>(std::move(message));
}

llvm::ExitOnError exitOnError(const std::string &tool) {
  llvm::ExitOnError e(tool + ": ");
  e.setExitCodeMapper([](const llvm::Error &err) { return err.isA<UsageError>() ? 2 : 1; });
  return e;
}

int exitStatusOf(llvm::Error e, std::string &message) {
  int status = 1;
  message.clear();
  llvm::handleAllErrors(
      std::move(e),
      [&](const UsageError &u) {
        status = 2;
        message = u.message();
      },
      [&](const llvm::ErrorInfoBase &other) {
        if (!message.empty())
          message += "; ";
        message += other.message();
      });
  return status;
}

} // namespace tofu
