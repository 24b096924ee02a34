// The structured-output tests' independent reference (json_schema_test.cpp,
// json_schema_random_test.cpp): a validator of parsed values for the subset spec/json_schema.h
// enforces, written from JSON Schema's definitions rather than from the cursor, and texts through
// the byte automaton.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "spec/json_constraint.h"
#include "spec/json_schema.h"
#include "spec/json_test_support.h"

namespace tandem::testing {

using Json = nlohmann::ordered_json;

// ---- an independent validator of parsed values, for the supported subset ----

inline const Json& deref(const Json& root, const Json& s) {
  if (s.is_object() && s.contains("$ref")) {
    return deref(root, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))));
  }
  if (s.is_object() && s.contains("allOf")) return deref(root, s["allOf"][0]);
  return s;
}

inline bool type_ok(const std::string& t, const Json& v) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") {  // as written: no fraction, no exponent (beyond 64 bits nlohmann has a
    // double: integral there)
    return v.is_number_integer() || (v.is_number_float() && std::fabs(v.get<double>()) >= 0x1p63 &&
                                     std::floor(v.get<double>()) == v.get<double>());
  }
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  return t == "null" && v.is_null();
}

inline int64_t characters(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// An array schema's schema for item i: prefixItems (or draft 7's items array), then the rest.
inline Json item_schema(const Json& s, size_t i) {
  if (s.contains("prefixItems")) {
    if (i < s["prefixItems"].size()) return s["prefixItems"][i];
    return s.contains("items") ? s["items"] : Json(true);
  }
  if (s.contains("items") && s["items"].is_array()) {
    if (i < s["items"].size()) return s["items"][i];
    return s.contains("additionalItems") ? s["additionalItems"] : Json(true);
  }
  return s.contains("items") ? s["items"] : Json(true);
}

inline bool valid(const Json& root, const Json& schema, const Json& v) {
  const Json& s = deref(root, schema);
  if (s.is_boolean()) return s.get<bool>();
  for (const char* u : {"anyOf", "oneOf"}) {
    if (s.contains(u)) {
      for (const Json& m : s[u]) {
        if (valid(root, m, v)) return true;
      }
      return false;
    }
  }
  if (s.contains("type")) {
    const Json& t = s["type"];
    bool any = false;
    if (t.is_array()) {
      for (const Json& n : t) any = any || type_ok(n.get<std::string>(), v);
    } else {
      any = type_ok(t.get<std::string>(), v);
    }
    if (!any) return false;
  } else if (s.contains("properties") && !v.is_object()) {
    return false;
  } else if ((s.contains("items") || s.contains("prefixItems")) && !v.is_array()) {
    return false;
  }
  if (s.contains("enum") || s.contains("const")) {  // compared as compact text
    bool hit = s.contains("const") && s["const"].dump() == v.dump();
    if (s.contains("enum")) {
      for (const Json& e : s["enum"]) hit = hit || e.dump() == v.dump();
    }
    if (!hit) return false;
  }
  if (v.is_number()) {  // (bounds only on integers here)
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
  }
  if (v.is_string()) {
    const int64_t n = characters(v.get<std::string>());
    if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
  }
  if (v.is_array()) {
    const auto n = static_cast<int64_t>(v.size());
    if (s.contains("minItems") && n < s["minItems"].get<int64_t>()) return false;
    if (s.contains("maxItems") && n > s["maxItems"].get<int64_t>()) return false;
    if (s.value("uniqueItems", false)) {  // (compared as compact text, as the literals are)
      for (size_t i = 0; i < v.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (v[i].dump() == v[j].dump()) return false;
        }
      }
    }
    for (size_t i = 0; i < v.size(); ++i) {
      if (!valid(root, item_schema(s, i), v[i])) return false;
    }
  }
  if (v.is_object()) {
    const Json props = s.contains("properties") ? s["properties"] : Json::object();
    const Json extra = s.contains("additionalProperties") ? s["additionalProperties"]
                                                          : Json(!s.contains("properties"));
    if (s.contains("required")) {
      for (const Json& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) return false;
      }
    }
    for (const auto& [k, e] : v.items()) {
      if (!valid(root, props.contains(k) ? props[k] : extra, e)) return false;
    }
    const auto n = static_cast<int64_t>(v.size());
    if (s.contains("minProperties") && n < s["minProperties"].get<int64_t>()) return false;
    if (s.contains("maxProperties") && n > s["maxProperties"].get<int64_t>()) return false;
  }
  return true;
}

// ---- texts through the automaton ----

// Blank space outside strings as the schema mode allows it: each run one space, or a newline and
// at most kMaxIndent spaces or tabs.
inline bool blank_runs_ok(const std::string& text) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') continue;
    size_t j = i + 1;
    while (j < text.size() &&
           (text[j] == ' ' || text[j] == '\n' || text[j] == '\t' || text[j] == '\r'))
      ++j;
    const std::string run = text.substr(i, j - i);
    const bool ok = run == " " || (run[0] == '\n' && run.size() <= JsonAutomaton::kMaxIndent + 1 &&
                                   run.find_first_of("\n\r", 1) == std::string::npos);
    if (!ok) return false;
    i = j - 1;
  }
  return true;
}

inline bool accepts(const JsonSchema& schema, const std::string& text) {
  JsonAutomaton a(&schema, 0);
  return refused_at(a, text) == -1 && a.can_end();
}

}  // namespace tandem::testing
