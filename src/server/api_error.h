// A request-level error as a value (DESIGN.md / STYLE.md rule 8): the HTTP status and the fields
// of OpenAI's error body. Thrown by parsing and validation, caught by the handlers, never past
// them.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace tandem::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type, std::string param = {},
           nlohmann::json code = nullptr)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error, authentication_error, ...
  std::string param;  // the field at fault; empty: null
  nlohmann::json code;
};

// 400 invalid_request_error naming the field.
inline ApiError bad_request(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

// {"error": {"message", "type", "param", "code"}}
inline nlohmann::ordered_json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
            {"code", e.code}}}};
}

}  // namespace tandem::server
