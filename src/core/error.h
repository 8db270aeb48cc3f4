// Errors: bad input is reported by throwing tessera::Error with a precise,
// one-line message; the boundary (CLI, HTTP) turns it into an exit code or a
// 4xx response. Internal invariants use TESSERA_ASSERT, which stays on in
// debug and sanitizer builds.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tessera {

enum class ErrorCode {
  kInvalidArgument,   // a caller passed something malformed (HTTP 400)
  kNotFound,          // a named thing does not exist (HTTP 404)
  kCorruptFile,       // a model/data file violates its format
  kOutOfRange,        // a value is outside what the model/engine supports (HTTP 400)
  kResourceExhausted, // out of KV blocks, queue full (HTTP 429/503)
  kIo,                // the OS refused (open, mmap, write)
  kInternal,          // a bug
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

template <class... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assertion_failed(const char* expr, const char* file, int line);

}  // namespace tessera

// Checks user-controlled input; throws tessera::Error(code, message).
#define TESSERA_CHECK(cond, code, ...)                                   \
  do {                                                                   \
    if (!(cond)) ::tessera::fail(::tessera::ErrorCode::code, __VA_ARGS__); \
  } while (0)

// Internal invariant. Kept in debug and sanitizer builds, compiled out in
// Release (where the hot path must not pay for it).
#if !defined(NDEBUG) || defined(TESSERA_SANITIZE)
#define TESSERA_ASSERT(cond) \
  do {                       \
    if (!(cond)) ::tessera::assertion_failed(#cond, __FILE__, __LINE__); \
  } while (0)
#else
#define TESSERA_ASSERT(cond) ((void)0)
#endif
