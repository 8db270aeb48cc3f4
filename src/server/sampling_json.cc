#include "server/sampling_json.h"

#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

namespace tessera::server {
namespace {

using nlohmann::json;

[[noreturn]] void field_error(const std::string& field, const std::string& msg) { throw FieldError(field, msg); }

const json* get(const json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number(const json& body, const char* field, double lo, double hi) {
  const json* v = get(body, field);
  if (!v->is_number()) field_error(field, fmt::format("'{}' must be a number", field));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) field_error(field, fmt::format("'{}' must be between {} and {}", field, lo, hi));
  return d;
}

int64_t integer(const json& body, const char* field, int64_t lo, int64_t hi) {
  return integer_value(*get(body, field), field, lo, hi);
}

// "kv_policy": "sink" (the server's budget and sinks), or an object
// {"type": "h2o", "budget": 256, "sinks": 4, "recent": 128} whose absent
// fields are the server's (docs/SERVER.md).
kv::KvPolicy parse_kv_policy_field(const json& v, const kv::KvPolicy& server) {
  kv::KvPolicy p = server;
  auto set_type = [&](const json& t, const char* name) {
    if (!t.is_string()) field_error(name, fmt::format("'{}' must be a string", name));
    const std::optional<kv::KvPolicyKind> k = kv::parse_kv_policy(t.get<std::string>());
    if (!k) {
      field_error(name, fmt::format("'{}' must be one of dense, window, sink, recompute, h2o, spatten (got '{}')", name,
                                    t.get<std::string>()));
    }
    p.kind = *k;
  };
  if (v.is_string()) {
    set_type(v, "kv_policy");
  } else if (v.is_object()) {
    for (const auto& [key, x] : v.items()) {
      if (key == "type") {
        set_type(x, "kv_policy.type");
      } else if (key == "budget") {
        p.budget = integer_value(x, "kv_policy.budget", 1, std::numeric_limits<int32_t>::max());
      } else if (key == "sinks") {
        p.sinks = static_cast<int32_t>(integer_value(x, "kv_policy.sinks", 0, 1 << 20));
      } else if (key == "recent") {
        p.recent = static_cast<int32_t>(integer_value(x, "kv_policy.recent", 0, std::numeric_limits<int32_t>::max()));
      } else {
        field_error("kv_policy." + key,
                    fmt::format("unknown field 'kv_policy.{}' (known: type, budget, sinks, recent)", key));
      }
    }
  } else {
    field_error("kv_policy", "'kv_policy' must be a string or an object {\"type\", \"budget\", \"sinks\", \"recent\"}");
  }
  const std::string bad = kv::check_kv_policy(p);
  if (!bad.empty()) field_error("kv_policy", fmt::format("'kv_policy': {}", bad));
  return p;
}

}  // namespace

int64_t integer_value(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  auto out_of_range = [&] { field_error(field, fmt::format("'{}' must be between {} and {}", field, lo, hi)); };
  // Each representation is compared in its own type: a double outside the
  // int64 range must not be converted (undefined behaviour), and an int64
  // must not go through a double (a seed would lose its low bits).
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) out_of_range();
    return i;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d) field_error(field, fmt::format("'{}' must be an integer", field));
    // [-2^63, 2^63) is exactly the doubles that convert to int64.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) out_of_range();
    const int64_t i = static_cast<int64_t>(d);
    if (i < lo || i > hi) out_of_range();
    return i;
  }
  field_error(field, fmt::format("'{}' must be an integer", field));
}

engine::SamplingParams parse_sampling(const json& body, const SamplingDefaults& defaults) {
  if (!body.is_object()) field_error("", "the request body must be a JSON object");
  engine::SamplingParams p;
  p.temperature = defaults.temperature;
  p.max_tokens = defaults.max_tokens;
  p.kv_policy = defaults.kv_policy;
  if (get(body, "temperature")) p.temperature = static_cast<float>(number(body, "temperature", 0.0, 2.0));
  if (get(body, "top_p")) p.top_p = static_cast<float>(number(body, "top_p", 0.0, 1.0));
  if (p.top_p <= 0.0f) field_error("top_p", "'top_p' must be greater than 0");
  if (get(body, "top_k")) {
    const int64_t k = integer(body, "top_k", -1, std::numeric_limits<int32_t>::max());
    p.top_k = k < 0 ? 0 : static_cast<int32_t>(k);  // -1 means off, as in vLLM
  }
  if (get(body, "min_p")) p.min_p = static_cast<float>(number(body, "min_p", 0.0, 1.0));
  if (get(body, "presence_penalty")) p.presence_penalty = static_cast<float>(number(body, "presence_penalty", -2.0, 2.0));
  if (get(body, "frequency_penalty")) p.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", -2.0, 2.0));
  if (get(body, "repetition_penalty")) {
    p.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 0.0, 10.0));
    if (p.repetition_penalty <= 0.0f) field_error("repetition_penalty", "'repetition_penalty' must be greater than 0");
  }
  if (get(body, "seed")) p.seed = static_cast<uint64_t>(integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  // max_completion_tokens is the chat API's newer name for max_tokens.
  for (const char* f : {"max_tokens", "max_completion_tokens"}) {
    if (get(body, f)) p.max_tokens = static_cast<int32_t>(integer(body, f, 1, std::numeric_limits<int32_t>::max()));
  }
  if (get(body, "n")) p.n = static_cast<int32_t>(integer(body, "n", 1, 128));
  if (get(body, "ignore_eos")) {
    if (!body["ignore_eos"].is_boolean()) field_error("ignore_eos", "'ignore_eos' must be a boolean");
    p.ignore_eos = body["ignore_eos"].get<bool>();
  }
  if (const json* s = get(body, "stop")) {
    if (s->is_string()) {
      p.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > 4) field_error("stop", "'stop' holds at most 4 sequences");
      for (const json& e : *s) {
        if (!e.is_string()) field_error("stop", "'stop' must be a string or an array of strings");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      field_error("stop", "'stop' must be a string or an array of strings");
    }
    for (const std::string& st : p.stop) {
      if (st.empty()) field_error("stop", "stop strings must not be empty");
    }
  }
  if (const json* s = get(body, "stop_token_ids")) {
    if (!s->is_array()) field_error("stop_token_ids", "'stop_token_ids' must be an array of integers");
    for (const json& e : *s) {
      if (!e.is_number_integer()) field_error("stop_token_ids", "'stop_token_ids' must be an array of integers");
      p.stop_token_ids.push_back(static_cast<int32_t>(integer_value(e, "stop_token_ids", 0, std::numeric_limits<int32_t>::max())));
    }
  }
  // Speculative decoding (docs/SERVER.md): false turns it off for this
  // request; an object may name the method (the server's, or "none") and the
  // longest draft k. Outputs are the same either way.
  if (const json* s = get(body, "speculative")) {
    if (s->is_boolean()) {
      p.speculative = s->get<bool>();
    } else if (s->is_object()) {
      for (const auto& [key, v] : s->items()) {
        if (key == "method") {
          if (!v.is_string()) field_error("speculative.method", "'speculative.method' must be a string");
          p.speculative_method = v.get<std::string>();
          if (p.speculative_method.empty()) field_error("speculative.method", "'speculative.method' must not be empty");
        } else if (key == "k") {
          p.speculative_k = static_cast<int32_t>(integer_value(v, "speculative.k", 1, 64));
        } else {
          field_error("speculative." + key, fmt::format("unknown field 'speculative.{}' (known: method, k)", key));
        }
      }
    } else {
      field_error("speculative", "'speculative' must be a boolean or an object {\"method\", \"k\"}");
    }
  }
  if (const json* k = get(body, "kv_policy")) p.kv_policy = parse_kv_policy_field(*k, defaults.kv_policy);
  return p;
}

}  // namespace tessera::server
