// Structured output: the schema compiler (json_schema.h); the cursor is json_schema_cursor.cpp.
#include "spec/json_schema.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <utility>

namespace tandem {

using Json = nlohmann::ordered_json;

namespace {

// Keywords that constrain a value in ways this module does not enforce: an error, never ignored.
const std::set<std::string>& unsupported_keywords() {
  static const std::set<std::string> k = {"patternProperties",
                                          "multipleOf",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "not",
                                          "if",
                                          "then",
                                          "else",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "dependencies",
                                          "propertyNames",
                                          "unevaluatedProperties",
                                          "unevaluatedItems",
                                          "$dynamicRef",
                                          "$recursiveRef",
                                          "contentSchema"};
  return k;
}

// Keywords that constrain (the rest are annotations or containers of definitions).
const std::set<std::string>& constraint_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "prefixItems",
                                          "additionalItems",
                                          "items",
                                          "minItems",
                                          "maxItems",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "minProperties",
                                          "maxProperties",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "uniqueItems"};
  return k;
}

uint8_t type_bit(const std::string& name) {
  if (name == "object") return JsonSchema::kObject;
  if (name == "array") return JsonSchema::kArray;
  if (name == "string") return JsonSchema::kString;
  if (name == "integer") return JsonSchema::kInteger;
  if (name == "number") return JsonSchema::kNumber | JsonSchema::kInteger;
  if (name == "boolean") return JsonSchema::kBoolean;
  if (name == "null") return JsonSchema::kNull;
  return 0;
}

// The types a compact JSON text has (enum and const members are scalars): a number without
// fraction or exponent is an integer too.
uint8_t literal_type(const std::string& text) {
  const uint8_t t = JsonSchema::type_of_start(static_cast<unsigned char>(text[0]));
  if (t != JsonSchema::kInteger) return t;
  return text.find_first_of(".eE") == std::string::npos
             ? static_cast<uint8_t>(JsonSchema::kInteger | JsonSchema::kNumber)
             : static_cast<uint8_t>(JsonSchema::kNumber);
}

// A property name the model writes as it is (no escape needed).
bool plain_name(const std::string& name) {
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
}

}  // namespace

class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(const Json& root) : root_(root) {}

  std::shared_ptr<const JsonSchema> run() {
    JsonSchema::Node any;
    any.additional = JsonSchema::kAny;
    any.items = JsonSchema::kAny;
    out_.nodes_.push_back(any);
    out_.root_ = compile(root_, "", 0);
    return std::make_shared<const JsonSchema>(std::move(out_));
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& why) {
    throw JsonSchemaError("at '" + (path.empty() ? std::string("#") : "#" + path) + "': " + why);
  }

  static int64_t count(const Json& s, const char* key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      fail(path, std::string("'") + key + "' must be a non-negative integer");
    }
    return v.get<int64_t>();
  }

  // A node index for schema s (memoised by address: $ref targets resolve once, and recursion
  // refers back to the node in progress).
  int32_t compile(const Json& s, const std::string& path, int depth) {
    if (depth > 512) fail(path, "schema nested too deeply");
    if (s.is_boolean()) return s.get<bool>() ? JsonSchema::kAny : unsatisfiable(path);
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    if (const auto it = memo_.find(&s); it != memo_.end()) {
      if (it->second < 0) fail(path, "a $ref cycle that never reaches a schema");
      return it->second;
    }
    for (const auto& [key, value] : s.items()) {
      if (unsupported_keywords().count(key) != 0) {
        fail(path, "'" + key + "' is not supported (structured output cannot enforce it)");
      }
    }
    const auto only_annotations_beside = [&](const char* keyword) {
      for (const auto& [key, value] : s.items()) {
        if (key != keyword && constraint_keywords().count(key) != 0) {
          fail(path, "'" + key + "' beside '" + keyword + "' is not supported");
        }
      }
    };
    if (s.contains("$ref")) {
      only_annotations_beside("$ref");
      memo_[&s] = -1;
      const int32_t target = compile(resolve(s["$ref"], path), path + "/$ref", depth + 1);
      memo_[&s] = target;
      return target;
    }
    if (s.contains("allOf")) {
      only_annotations_beside("allOf");
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        fail(path, "'allOf' is supported with exactly one member");
      }
      memo_[&s] = -1;
      const int32_t member = compile(all[0], path + "/allOf/0", depth + 1);
      memo_[&s] = member;
      return member;
    }
    if (out_.nodes_.size() >= JsonSchema::kMaxNodes) fail(path, "schema too large");
    const auto index = static_cast<int32_t>(out_.nodes_.size());
    out_.nodes_.emplace_back();
    memo_[&s] = index;
    JsonSchema::Node n;
    for (const char* union_key : {"anyOf", "oneOf"}) {
      if (!s.contains(union_key)) continue;
      only_annotations_beside(union_key);
      const Json& members = s[union_key];
      if (!members.is_array() || members.empty()) {
        fail(path, std::string("'") + union_key + "' must be a non-empty array");
      }
      for (size_t i = 0; i < members.size(); ++i) {
        const std::string at = path + "/" + union_key + "/" + std::to_string(i);
        if (members[i].is_boolean() && !members[i].get<bool>()) continue;  // matches nothing
        n.any_of.push_back(compile(members[i], at, depth + 1));
      }
      if (n.any_of.empty()) unsatisfiable(path);
      out_.nodes_[static_cast<size_t>(index)] = std::move(n);
      return index;
    }
    n.types = types_of(s, path);
    bounds(s, path, n);
    literals(s, path, n);
    object(s, path, depth, n);
    array(s, path, depth, n);
    n.min_length = count(s, "minLength", path, 0);
    n.max_length = count(s, "maxLength", path, JsonSchema::kUnbounded);
    if (n.min_length > n.max_length) fail(path, "'minLength' is above 'maxLength'");
    pattern(s, path, n);
    if (n.types == 0) unsatisfiable(path);
    out_.nodes_[static_cast<size_t>(index)] = std::move(n);
    return index;
  }

  // `pattern`: its automaton (json_pattern.h); beside minLength / maxLength with the table of the
  // lengths its states can still match with, so that the cursor never lets a string grow where no
  // match of an allowed length follows. Not beside a literal list (whose joint completions the
  // cursor does not follow).
  void pattern(const Json& s, const std::string& path, JsonSchema::Node& n) {
    if (!s.contains("pattern")) return;
    const Json& p = s["pattern"];
    if (!p.is_string()) fail(path, "'pattern' must be a string");
    if (n.has_literals) fail(path, "'pattern' beside enum or const is not supported");
    try {
      json_pattern::Pattern compiled = json_pattern::Pattern::compile(p.get<std::string>());
      if (n.min_length > 0 || n.max_length != JsonSchema::kUnbounded) {
        compiled.bound_lengths(n.min_length);
        if (!compiled.can_match(compiled.start(), n.min_length, n.max_length)) {
          const std::string lengths =
              n.max_length == JsonSchema::kUnbounded ? "at least " + std::to_string(n.min_length)
              : n.min_length == n.max_length
                  ? std::to_string(n.min_length)
                  : std::to_string(n.min_length) + " to " + std::to_string(n.max_length);
          fail(path, "'pattern' " + p.dump() + " matches no string of " + lengths +
                         " characters (minLength, maxLength)");
        }
      }
      out_.patterns_.push_back(std::move(compiled));
    } catch (const json_pattern::PatternError& e) {
      fail(path, "'pattern' " + p.dump() + " is not supported: " + e.what());
    }
    n.pattern = static_cast<int32_t>(out_.patterns_.size()) - 1;
  }

  [[noreturn]] int32_t unsatisfiable(const std::string& path) {
    fail(path, "no JSON value satisfies this schema");
  }

  // "#", "#/$defs/NAME", "#/definitions/NAME", or any JSON pointer into the document.
  const Json& resolve(const Json& ref, const std::string& path) {
    if (!ref.is_string()) fail(path, "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      fail(path, "'$ref' " + r + ": only references within the schema ('#...') are supported");
    }
    try {
      return root_.at(Json::json_pointer(r.substr(1)));
    } catch (const nlohmann::json::exception&) {
      fail(path, "'$ref' " + r + " does not resolve");
    }
  }

  static uint8_t types_of(const Json& s, const std::string& path) {
    if (!s.contains("type")) {  // the type the keywords imply, else any
      if (s.contains("properties") || s.contains("required") ||
          s.contains("additionalProperties") || s.contains("minProperties") ||
          s.contains("maxProperties")) {
        return JsonSchema::kObject;
      }
      if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
          s.contains("maxItems")) {
        return JsonSchema::kArray;
      }
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
        return JsonSchema::kString;
      }
      return JsonSchema::kAnyType;
    }
    const Json& t = s["type"];
    uint8_t types = 0;
    const auto add = [&](const Json& name) {
      const uint8_t bit = name.is_string() ? type_bit(name.get<std::string>()) : 0;
      if (bit == 0) fail(path, "unknown type " + name.dump());
      types |= bit;
    };
    if (t.is_array()) {
      for (const Json& name : t) add(name);
    } else {
      add(t);
    }
    return types;
  }

  // minimum / maximum and the exclusive forms: inclusive int64 bounds on integers, decimal ones
  // (json_number_bounds.h) on numbers that may have a fraction.
  static void bounds(const Json& s, const std::string& path, JsonSchema::Node& n) {
    constexpr double kTop = 9.2e18;  // within int64
    bool any = false;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) fail(path, std::string("'") + key + "' must be a number");
      any = true;
    }
    if (!any) return;
    if (n.types & JsonSchema::kNumber) {  // the schema's numbers as their shortest decimal text
      using json_number::Side;
      const std::pair<const char*, Side> sides[] = {{"minimum", Side::kMinimum},
                                                    {"exclusiveMinimum", Side::kExclusiveMinimum},
                                                    {"maximum", Side::kMaximum},
                                                    {"exclusiveMaximum", Side::kExclusiveMaximum}};
      for (const auto& [key, side] : sides) {
        if (s.contains(key)) json_number::narrow(n.number, side, s[key].dump());
      }
      n.decimal = json_number::satisfiable(n.number);
      if (!n.decimal) n.types &= ~(JsonSchema::kNumber | JsonSchema::kInteger);
      return;
    }
    double lo = -kTop, hi = kTop;  // as doubles: integral values, exact up to 2^53
    const auto at = [&](const char* key) { return s[key].get<double>(); };
    if (s.contains("minimum")) lo = std::max(lo, std::ceil(at("minimum")));
    if (s.contains("exclusiveMinimum")) lo = std::max(lo, std::floor(at("exclusiveMinimum")) + 1);
    if (s.contains("maximum")) hi = std::min(hi, std::floor(at("maximum")));
    if (s.contains("exclusiveMaximum")) hi = std::min(hi, std::ceil(at("exclusiveMaximum")) - 1);
    n.has_min = s.contains("minimum") || s.contains("exclusiveMinimum");
    n.has_max = s.contains("maximum") || s.contains("exclusiveMaximum");
    if (lo > hi) {
      n.types &= ~JsonSchema::kInteger;
      return;
    }
    n.min_int = static_cast<int64_t>(std::max(lo, -kTop));
    n.max_int = static_cast<int64_t>(std::min(hi, kTop));
  }

  static void literals(const Json& s, const std::string& path, JsonSchema::Node& n) {
    if (!s.contains("enum") && !s.contains("const")) return;
    std::vector<Json> members;
    if (s.contains("const")) members.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) fail(path, "'enum' must be an array");
      for (const Json& v : s["enum"]) members.push_back(v);
    }
    uint8_t types = 0;
    for (const Json& v : members) {
      if (v.is_object() || v.is_array()) {
        fail(path, "enum and const members that are objects or arrays are not supported");
      }
      std::string text = v.dump();
      uint8_t t = literal_type(text);
      if ((t & n.types) == 0) continue;  // not of the schema's type: never valid
      if (!(n.types & JsonSchema::kNumber)) t &= ~JsonSchema::kNumber;
      if (s.contains("const") && s.contains("enum") && text != s["const"].dump()) continue;
      if (v.is_number_integer()) {
        const __int128 x = v.is_number_unsigned() ? static_cast<__int128>(v.get<uint64_t>())
                                                  : static_cast<__int128>(v.get<int64_t>());
        if ((n.has_min && x < n.min_int) || (n.has_max && x > n.max_int)) continue;  // outside
      }
      types |= t;
      n.literals.push_back(std::move(text));
    }
    std::sort(n.literals.begin(), n.literals.end());
    n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    n.has_literals = true;
    n.types &= types;
  }

  void object(const Json& s, const std::string& path, int depth, JsonSchema::Node& n) {
    const bool has_props = s.contains("properties");
    std::vector<std::pair<std::string, int32_t>> props;
    std::vector<std::string> excluded;  // properties whose schema is false
    if (has_props) {
      const Json& p = s["properties"];
      if (!p.is_object()) fail(path, "'properties' must be an object");
      for (const auto& [name, sub] : p.items()) {
        const std::string at = (Json::json_pointer(path + "/properties") / name).to_string();
        if (!plain_name(name)) {
          fail(at,
               "property names with quotes, backslashes or control characters are not "
               "supported");
        }
        if (sub.is_boolean() && !sub.get<bool>()) {  // the property may not appear
          excluded.push_back(name);
          continue;
        }
        props.emplace_back(name, compile(sub, at, depth + 1));
      }
    }
    n.additional = has_props ? -1 : JsonSchema::kAny;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      n.additional = a.is_boolean() ? (a.get<bool>() ? JsonSchema::kAny : -1)
                                    : compile(a, path + "/additionalProperties", depth + 1);
    }
    std::vector<std::string> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) fail(path, "'required' must be an array of strings");
      for (const Json& name : r) {
        if (!name.is_string()) fail(path, "'required' must be an array of strings");
        required.push_back(name.get<std::string>());
      }
    }
    for (const std::string& name : required) {  // required but not declared: the additional schema
      const bool declared =
          std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == name; });
      if (declared) continue;
      const bool is_excluded = std::find(excluded.begin(), excluded.end(), name) != excluded.end();
      if (n.additional < 0 || is_excluded || !plain_name(name)) {
        fail(path, "required property '" + name + "' is not allowed by the schema");
      }
      props.emplace_back(name, n.additional);
    }
    if (props.size() > JsonSchema::kMaxProperties) {
      fail(path, "more than " + std::to_string(JsonSchema::kMaxProperties) +
                     " properties in one object schema");
    }
    std::sort(props.begin(), props.end());
    for (size_t i = 0; i < props.size(); ++i) {
      n.names.push_back(props[i].first);
      n.name_nodes.push_back(props[i].second);
      if (std::find(required.begin(), required.end(), props[i].first) != required.end()) {
        n.required |= uint64_t{1} << i;
      }
    }
    n.min_props = count(s, "minProperties", path, 0);
    n.max_props = count(s, "maxProperties", path, JsonSchema::kUnbounded);
    const auto n_required = static_cast<int64_t>(std::popcount(n.required));
    const bool closed = n.additional < 0;  // only the declared names
    if (n.min_props > n.max_props || n_required > n.max_props ||
        (closed && static_cast<int64_t>(n.names.size()) < n.min_props)) {
      n.types &= ~JsonSchema::kObject;
      if (n.types == 0) {
        fail(path,
             "no object has 'minProperties' .. 'maxProperties' members with these "
             "'required' and allowed properties");
      }
    }
  }

  void array(const Json& s, const std::string& path, int depth, JsonSchema::Node& n) {
    n.items = JsonSchema::kAny;
    n.min_items = count(s, "minItems", path, 0);
    n.max_items = count(s, "maxItems", path, JsonSchema::kUnbounded);
    // Tuples: prefixItems (2020-12, the rest under items) or items as an array (draft 7, the
    // rest under additionalItems).
    const bool tuple_2020 = s.contains("prefixItems");
    const bool tuple_7 = !tuple_2020 && s.contains("items") && s["items"].is_array();
    const char* prefix_key = tuple_2020 ? "prefixItems" : "items";
    const char* rest_key = tuple_7 ? "additionalItems" : "items";
    if (tuple_2020 || tuple_7) {
      const Json& pre = s[prefix_key];
      if (!pre.is_array()) fail(path, std::string("'") + prefix_key + "' must be an array");
      for (size_t i = 0; i < pre.size(); ++i) {
        if (pre[i].is_boolean() && !pre[i].get<bool>()) {  // no item may stand here
          n.max_items = std::min<int64_t>(n.max_items, static_cast<int64_t>(i));
          break;
        }
        n.prefix_items.push_back(
            compile(pre[i], path + "/" + prefix_key + "/" + std::to_string(i), depth + 1));
      }
    }
    if (s.contains(rest_key)) {
      const Json& it = s[rest_key];
      if (it.is_boolean() && !it.get<bool>()) {
        n.max_items = std::min<int64_t>(n.max_items, static_cast<int64_t>(n.prefix_items.size()));
      } else {
        n.items = compile(it, path + "/" + rest_key, depth + 1);
      }
    }
    unique_items(s, path, n);
    if (n.min_items > n.max_items) {
      n.types &= ~JsonSchema::kArray;
      if (n.types == 0) {
        fail(path,
             "'minItems' is above 'maxItems' (or 'items' is false, or 'uniqueItems' leaves "
             "fewer distinct items)");
      }
    }
  }

  // uniqueItems on arrays whose items are an enum or const (pydantic's set[Literal[...]] and
  // set[SomeEnum]): each value at most once, so at most as many items as values. And on strings
  // without pattern or maxLength and integers without bounds (set[str], set[int]): a value that
  // repeats one is refused at its last byte, and a refused item can always grow into another
  // value (a string by more characters, an integer by more digits; "0" and "-0" are refused at
  // their '0' once 0 is used, since nothing may follow it).
  void unique_items(const Json& s, const std::string& path, JsonSchema::Node& n) {
    if (!s.contains("uniqueItems")) return;
    if (!s["uniqueItems"].is_boolean()) fail(path, "'uniqueItems' must be a boolean");
    if (!s["uniqueItems"].get<bool>() || (n.types & JsonSchema::kArray) == 0) return;
    const JsonSchema::Node& item = out_.nodes_[static_cast<size_t>(n.items)];
    const bool plain = n.prefix_items.empty() && item.any_of.empty() && !item.has_literals;
    const bool strings = plain && item.types == JsonSchema::kString && item.pattern < 0 &&
                         item.max_length == JsonSchema::kUnbounded;
    const bool integers = plain && item.types == JsonSchema::kInteger && !item.has_min &&
                          !item.has_max && !item.decimal;
    if (strings || integers) {
      n.unique_values = true;
      return;
    }
    if (!n.prefix_items.empty() || !item.has_literals || !item.any_of.empty() ||
        item.literals.size() > 64) {
      fail(path,
           "'uniqueItems' is supported on arrays whose items are an enum or const of at most 64 "
           "values, strings without pattern or maxLength, or integers without bounds "
           "(structured output cannot enforce it on others)");
    }
    // Distinct texts of equal values (1 and 1.0) would be one value twice to a validator.
    for (size_t i = 0; i < item.literals.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (Json::parse(item.literals[i]) == Json::parse(item.literals[j])) {
          fail(path, "'uniqueItems' over an enum with two texts of one value (" + item.literals[j] +
                         ", " + item.literals[i] + ") is not supported");
        }
      }
    }
    n.unique_items = true;
    n.max_items = std::min<int64_t>(n.max_items, static_cast<int64_t>(item.literals.size()));
  }

  const Json& root_;
  JsonSchema out_;
  std::map<const Json*, int32_t> memo_;
};

uint8_t JsonSchema::type_of_start(unsigned char c) {
  switch (c) {
    case '{':
      return kObject;
    case '[':
      return kArray;
    case '"':
      return kString;
    case 't':
    case 'f':
      return kBoolean;
    case 'n':
      return kNull;
    default:
      return kInteger;  // '-' or a digit
  }
}

std::shared_ptr<const JsonSchema> JsonSchema::compile(const Json& schema) {
  return JsonSchemaCompiler(schema).run();
}

}  // namespace tandem
