// The error a client sees: an HTTP status, a message, and the request field
// it concerns ({"error": {"message", "type", "param", "code"}} in the OpenAI
// API's shape). Thrown by the server's request mapping and by the adapter
// registry, which both answer requests.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace tessera {

// An error the client sees: {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "");
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's error type for the status ("invalid_request_error", ...).
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

}  // namespace tessera
