#include "core/api_error.h"

#include <utility>

namespace tessera {

using json = nlohmann::json;

ApiError::ApiError(int status, std::string message, std::string param, std::string code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string ApiError::type() const {
  // OpenAI's vocabulary: a wrong key and an unknown model are
  // invalid_request_errors too, told apart by `code`.
  if (status_ == 429) return "requests";
  return status_ >= 500 ? "server_error" : "invalid_request_error";
}

json ApiError::to_json() const {
  json e = {{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (!param_.empty()) e["param"] = param_;
  if (!code_.empty()) e["code"] = code_;
  return {{"error", std::move(e)}};
}

}  // namespace tessera
