// OpenAI-style sampling fields of a JSON request body -> SamplingParams.
// Shared by the HTTP server and the offline batch mode. Wrong types and
// out-of-range values throw FieldError naming the field. parse_sampling
// itself does not look at fields it does not read; the HTTP endpoints refuse
// them (server/openai_request.cc), using kSamplingFields.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "engine/sampling_params.h"
#include "kv/kv_policy.h"

namespace tessera::server {

struct SamplingDefaults {
  float temperature = 1.0f;
  int32_t max_tokens = 16;
  kv::KvPolicy kv_policy{};  // the server's --kv-policy; a request's "kv_policy" replaces it
};

// The field a value came from, for error messages: param() of the Error.
class FieldError : public std::runtime_error {
 public:
  FieldError(std::string field, const std::string& message)
      : std::runtime_error(message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

engine::SamplingParams parse_sampling(const nlohmann::json& body, const SamplingDefaults& defaults);

// Every top-level field parse_sampling reads (keep in step with it: a field
// read but not listed is refused by the HTTP endpoints, server_test checks
// each one is accepted).
inline constexpr std::string_view kSamplingFields[] = {
    "temperature", "top_p",      "top_k",          "min_p",       "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "max_tokens",     "max_completion_tokens", "n", "ignore_eos",
    "stop",        "stop_token_ids", "speculative", "kv_policy",
};

// An integer value within [lo, hi] (floats with an integral value accepted,
// as Python servers do); throws FieldError naming `field` otherwise.
int64_t integer_value(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi);

}  // namespace tessera::server
