// Typed, validated reads of a request body's fields (json_fields.h).
#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace tandem::server {

void check_shape(std::string_view body) {
  std::vector<std::pair<char, int64_t>> open;  // bracket, keys seen (objects)
  bool in_string = false, escape = false;
  for (char c : body) {
    if (in_string) {
      if (escape) {
        escape = false;
      } else if (c == '\\') {
        escape = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        open.emplace_back(c, 0);
        if (static_cast<int>(open.size()) > kMaxJsonDepth) {
          throw bad_request(
              {}, fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
        }
        break;
      case '}':
      case ']':
        if (!open.empty()) open.pop_back();
        break;
      case ':':
        if (!open.empty() && open.back().first == '{' && ++open.back().second > kMaxObjectKeys) {
          throw bad_request(
              {}, fmt::format("a JSON object of the body has more than {} keys", kMaxObjectKeys));
        }
        break;
      default:
        break;
    }
  }
}

const Json* find_field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v) {
  throw bad_request(param, fmt::format("'{}' must be {}, got {}", param, expected, v.type_name()));
}

bool get_bool(const Json& body, const char* name, bool fallback) {
  const Json* v = find_field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

double as_number(const Json& v, const std::string& param) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw bad_request(param, fmt::format("'{}' must be finite", param));
  return d;
}

int64_t as_int(const Json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw bad_request(param, fmt::format("'{}' is out of range, got {}", param, u));
    }
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
    throw bad_request(param, fmt::format("'{}' must be an integer, got {}", param, v.dump()));
  }
  wrong_type(param, "an integer", v);
}

std::optional<double> get_number(const Json& body, const char* name) {
  const Json* v = find_field(body, name);
  if (!v) return std::nullopt;
  return as_number(*v, name);
}

std::optional<int64_t> get_int(const Json& body, const char* name) {
  const Json* v = find_field(body, name);
  if (!v) return std::nullopt;
  return as_int(*v, name);
}

double in_range(std::optional<double> v, double fallback, double lo, double hi, bool lo_open,
                const char* name) {
  if (!v) return fallback;
  if (*v > hi || *v < lo || (lo_open && *v == lo)) {
    throw bad_request(name, fmt::format("'{}' must be in {}{}, {}], got {}", name,
                                        lo_open ? "(" : "[", lo, hi, *v));
  }
  return *v;
}

int32_t token_id(const Json& v, const std::string& param, int32_t vocab) {
  const int64_t id = as_int(v, param);
  if (id < 0 || id >= vocab) {
    throw bad_request(param,
                      fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab));
  }
  return static_cast<int32_t>(id);
}

std::vector<int32_t> token_ids(const Json& v, const std::string& param, int32_t vocab) {
  if (!v.is_array()) wrong_type(param, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(token_id(v[i], fmt::format("{}[{}]", param, i), vocab));
  return ids;
}

}  // namespace tandem::server
