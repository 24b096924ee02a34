// Typed, validated reads of a request body's fields: a wrong type, a value out of range or a
// token id outside the vocabulary is a 400 naming the field (api_error.h). Also the body's shape
// check (depth and keys) before it is parsed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/protocol.h"  // Json, kMaxJsonDepth, kMaxObjectKeys

namespace tandem::server {

// Depth and widest object of a JSON text, outside strings (at most kMaxJsonDepth levels and
// kMaxObjectKeys keys an object, protocol.h); malformed structure is left to the parser. Linear in
// the body, no recursion.
void check_shape(std::string_view body);
// A field that is present and not null, else nullptr (null means absent, as in OpenAI).
const Json* find_field(const Json& body, const char* name);
[[noreturn]] void wrong_type(const std::string& param, const char* expected, const Json& v);
bool get_bool(const Json& body, const char* name, bool fallback);
// A finite number.
double as_number(const Json& v, const std::string& param);
// Integers, or floats with an integral value (as pydantic accepts them), within int64.
int64_t as_int(const Json& v, const std::string& param);
std::optional<double> get_number(const Json& body, const char* name);
std::optional<int64_t> get_int(const Json& body, const char* name);
// v within [lo, hi] ((lo, hi] when lo_open), or fallback when absent.
double in_range(std::optional<double> v, double fallback, double lo, double hi, bool lo_open,
                const char* name);
int32_t token_id(const Json& v, const std::string& param, int32_t vocab);
std::vector<int32_t> token_ids(const Json& v, const std::string& param, int32_t vocab);

}  // namespace tandem::server
