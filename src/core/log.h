// Minimal leveled logging to stderr. Level from TESSERA_LOG=debug|info|warn|error
// (default info). stdout is reserved for program output (generated text, JSON).
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace tessera {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_write(LogLevel level, std::string_view message);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

#define TESSERA_LOG_DEBUG(...) ::tessera::log(::tessera::LogLevel::kDebug, __VA_ARGS__)
#define TESSERA_LOG_INFO(...) ::tessera::log(::tessera::LogLevel::kInfo, __VA_ARGS__)
#define TESSERA_LOG_WARN(...) ::tessera::log(::tessera::LogLevel::kWarn, __VA_ARGS__)
#define TESSERA_LOG_ERROR(...) ::tessera::log(::tessera::LogLevel::kError, __VA_ARGS__)

}  // namespace tessera
