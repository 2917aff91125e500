// Whether this build has AddressSanitizer: GCC says so by __SANITIZE_ADDRESS__, clang (the
// ASan suite's compiler, .bazelrc's --config=asan) only by __has_feature.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TOFU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TOFU_ASAN 1
#endif
#endif
#ifndef TOFU_ASAN
#define TOFU_ASAN 0
#endif
