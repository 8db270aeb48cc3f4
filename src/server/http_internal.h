// Shared by the HTTP server's translation units; not part of its interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::server {

// The numbers of the one log line each HTTP request gets (written by its
// handler, printed by the server's logger after the response is sent).
struct RequestLog {
  std::chrono::steady_clock::time_point start;
  std::string id;  // cmpl-... / chatcmpl-...
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  std::string note;  // e.g. "client disconnected"
};

// This worker thread's current request.
RequestLog& current_request_log();

}  // namespace tessera::server
