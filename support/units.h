// Byte counts as people write and read them.
#ifndef TOFU_SUPPORT_UNITS_H
#define TOFU_SUPPORT_UNITS_H

#include <cstdint>
#include <optional>
#include <string>

#include "llvm/Support/Error.h"

namespace tofu {

/// A quantity as written: a decimal number (digits, a point, an exponent; no sign, hex,
/// inf or nan) and the text after it, spaces around it dropped (`12.5 GB/s` -> 12.5,
/// "GB/s"). None where the text does not start with such a number.
struct Quantity {
  double value = 0;
  std::string unit;
};
std::optional<Quantity> readQuantity(const std::string &text);

/// `80GB`, `16GiB`, `12e9`, `512 MiB`: a positive number of bytes (at most 9e18). Units:
/// B, KB, MB, GB, TB (powers of 1000) and KiB, MiB, GiB, TiB (of 1024), any case.
llvm::Expected<int64_t> parseBytes(const std::string &text);

/// `1.50 GiB`: bytes in the largest binary unit (up to PiB) that leaves at least 1.
std::string humanBytes(double bytes);

} // namespace tofu

#endif // TOFU_SUPPORT_UNITS_H
