// Structured output (spec/json_schema.h): what the compiler refuses and where; the byte automaton
// with a schema against an independent validator of parsed values on random texts (valid values
// the schema generates, and corruptions of them); random walks that never reach a state without
// a next byte (no dead ends) and whose finished texts the validator accepts; the row mask over a
// small vocabulary; and on the shipped model, schema-constrained outputs that validate and are
// identical with MTP k = 1 and 3.
#include "spec/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "spec/json_test_support.h"

namespace tandem {
namespace {

using namespace testing;
using Json = nlohmann::ordered_json;

// ---- an independent validator of parsed values, for the supported subset ----

const Json& deref(const Json& root, const Json& s) {
  if (s.is_object() && s.contains("$ref")) {
    return deref(root, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))));
  }
  if (s.is_object() && s.contains("allOf")) return deref(root, s["allOf"][0]);
  return s;
}

bool type_ok(const std::string& t, const Json& v) {
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

int64_t characters(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// An array schema's schema for item i: prefixItems (or draft 7's items array), then the rest.
Json item_schema(const Json& s, size_t i) {
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

bool valid(const Json& root, const Json& schema, const Json& v) {
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
  }
  return true;
}

// ---- texts through the automaton ----

// Blank space outside strings as the schema mode allows it: each run one space, or a newline and
// at most kMaxIndent spaces or tabs.
bool blank_runs_ok(const std::string& text) {
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

bool accepts(const JsonSchema& schema, const std::string& text) {
  JsonAutomaton a(&schema, 0);
  return refused_at(a, text) == -1 && a.can_end();
}

std::string compile_error(const Json& s) {
  try {
    JsonSchema::compile(s);
  } catch (const JsonSchemaError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, RefusesWhatItCannotEnforceAndSaysWhere) {
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "object", "properties": {"a": {"type":
            "number", "minimum": 0}}})")),
            "at '#/properties/a': 'minimum' on a number that may have a fraction is not supported "
            "(on \"integer\" it is)");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "multipleOf": 3})")),
            "at '#': 'multipleOf' is not supported (structured output cannot enforce it)");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "minimum": 5, "maximum": 4})")),
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "enum": [1, 9], "maximum": 0})")),
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "string", "pattern": "^a"})")),
            "at '#': 'pattern' is not supported (structured output cannot enforce it)");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "strin"})")), "at '#': unknown type \"strin\"");
  EXPECT_EQ(compile_error(Json::parse(R"({"$ref": "#/$defs/Missing"})")),
            "at '#': '$ref' #/$defs/Missing does not resolve");
  EXPECT_EQ(compile_error(Json::parse(R"({"$ref": "http://x/y.json"})")),
            "at '#': '$ref' http://x/y.json: only references within the schema ('#...') are "
            "supported");
  EXPECT_EQ(compile_error(Json::parse(R"({"enum": [[1]]})")),
            "at '#': enum and const members that are objects or arrays are not supported");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "enum": ["a", 1.5]})")),
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "object", "properties": {"a": {}},
            "required": ["b"]})")),
            "at '#': required property 'b' is not allowed by the schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})")),
            "at '#': 'allOf' is supported with exactly one member");
  EXPECT_EQ(compile_error(Json::parse(R"({"$defs": {"a": {"$ref": "#/$defs/a"}},
            "$ref": "#/$defs/a"})")),
            "at '#/$ref/$ref': a $ref cycle that never reaches a schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"properties": {"a\"b": {}}})")),
            "at '#/properties/a\"b': property names with quotes, backslashes or control "
            "characters are not supported");
  EXPECT_EQ(compile_error(Json::parse(R"({"minLength": 4, "maxLength": 2})")),
            "at '#': 'minLength' is above 'maxLength'");
  EXPECT_EQ(compile_error(false), "at '#': no JSON value satisfies this schema");
  // Annotations and unknown keywords are ignored; recursion through $ref is fine.
  EXPECT_EQ(compile_error(Json::parse(R"({"title": "T", "description": "d", "format": "date",
            "x-vendor": 1, "type": "string", "default": "a", "examples": ["b"]})")),
            "");
  EXPECT_EQ(compile_error(Json::parse(R"({"$defs": {"node": {"type": "object", "properties":
            {"next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}}},
            "$ref": "#/$defs/node"})")),
            "");
}

// Hand-picked texts: accepted whole, or refused at the first byte no valid text has.
TEST(JsonSchema, AcceptsWhatTheSchemaAllowsAndRefusesAtTheFirstWrongByte) {
  const Json person = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 4},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "ab", "b"]}, "maxItems": 2},
      "kind": {"const": "cat"},
      "nick": {"type": ["string", "null"]}
    },
    "required": ["name", "kind"]})");
  const auto schema = JsonSchema::compile(person);
  for (const std::string ok :
       {R"({"name": "Jo", "kind": "cat"})", R"({"kind":"cat","name":"\u00e9","age":-12})",
        R"({"name": "Anna", "kind": "cat", "tags": ["ab", "a"], "nick": null})",
        R"({"name": "Zo\u00e9", "kind": "cat", "tags": [], "nick": "z"})"}) {
    EXPECT_TRUE(accepts(*schema, ok)) << ok;
    EXPECT_TRUE(valid(person, person, Json::parse(ok))) << ok;
  }
  const std::pair<std::string, int64_t> bad[] = {
      {R"([])", 0},                                            // not an object
      {R"({"nam)", -1},                                        // a prefix: no refusal yet
      {R"({"nme": 1})", 3},                                    // no property starts "nm"
      {R"({"name": "", "kind": "cat"})", 10},                  // minLength 1: the quote
      {R"({"name": "Annie"})", 14},                            // maxLength 4: the fifth character
      {R"({"name": "A", "age": 1.5})", 22},                    // an integer has no fraction
      {R"({"name": "A", "age": 1e3})", 22},                    // nor an exponent
      {R"({"name": "A", "kind": "dog"})", 23},                 // const "cat"
      {R"({"name": "A", "kind": "cat", "tags": ["c"]})", 39},  // enum a, ab, b
      {R"({"name": "A", "kind": "cat", "tags": ["a", "b", "a"]})", 46},  // maxItems 2: the comma
      {R"({"name": "A"})", 12},               // "kind" required: the brace
      {R"({"name": "A", "name": "B"})", 16},  // a duplicate: "na" is only "name"
      {R"({"name": "A", "nick": 1})", 22},    // string or null
      {R"({"name": "A", "zz": 1})", 15},      // no other property
      {R"({"na\u006de": "A"})", 4}};          // declared names as written
  for (const auto& [text, at] : bad) {
    JsonAutomaton a(schema.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
    if (at == -1) {
      EXPECT_FALSE(a.can_end()) << text;
    }
  }
  // Every property used: no ',' may follow; all required present: '}' may.
  const auto tight = JsonSchema::compile(Json::parse(
      R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})"));
  JsonAutomaton t(tight.get(), 0);
  ASSERT_EQ(refused_at(t, R"({"a": true)"), -1);
  JsonAutomaton comma = t;
  EXPECT_FALSE(comma.feed(','));
  EXPECT_TRUE(t.feed('}'));
  EXPECT_TRUE(t.complete());
  // Roots of every type, numbers ending at the text's end (a stop token may follow them).
  for (const auto& [s, text] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type": "integer"})", "42"},
           {R"({"type": "number"})", "-0.5e3"},
           {R"({"enum": [1, 12, "x"]})", "12"},
           {R"({"type": "array", "items": {"type": "integer"}, "minItems": 2})", "[1, 2]"},
           {R"({"type": "boolean"})", "false"},
           {R"({})", R"({"any": [1, {"b": null}]})"},
           {R"({"type": "object"})", R"({"free": "form"})"}}) {
    const Json sj = Json::parse(s);
    EXPECT_TRUE(accepts(*JsonSchema::compile(sj), text)) << s << " " << text;
  }
  // Bounded integers, digit by digit: a prefix is taken while some completion is in bounds.
  const auto dozen = JsonSchema::compile(
      Json::parse(R"({"type": "integer", "minimum": 3, "exclusiveMaximum": 13})"));
  for (const std::string ok : {"3", "9", "10", "12"}) EXPECT_TRUE(accepts(*dozen, ok)) << ok;
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {"0", 0}, {"-", 0}, {"2", 0}, {"13", 1}, {"120", 2}, {"1", -1}}) {
    JsonAutomaton a(dozen.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  JsonAutomaton one(dozen.get(), 0);
  ASSERT_EQ(refused_at(one, "1"), -1);
  EXPECT_FALSE(one.can_end());  // 1 < 3: a digit must follow
  const auto negative =
      JsonSchema::compile(Json::parse(R"({"type": "integer", "minimum": -250, "maximum": -7.5})"));
  for (const std::string ok : {"-8", "-250", "-99", "-20"})
    EXPECT_TRUE(accepts(*negative, ok)) << ok;
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {"0", 0}, {"-0", 1}, {"-3", -1}, {"-7", -1}, {"-251", 3}, {"-2500", 4}}) {
    JsonAutomaton a(negative.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
    if (at == -1) {
      EXPECT_FALSE(a.can_end()) << text;  // -3, -7: above -7.5; -30.., -70.. may follow
    }
  }
  const auto huge = JsonSchema::compile(Json::parse(R"({"type": "integer", "minimum": 0})"));
  EXPECT_TRUE(accepts(*huge, "123456789012345678901234567890"));
  EXPECT_FALSE(accepts(*huge, "-1"));
  // Tuples: each position its schema, then the rest (none here).
  const auto pair = JsonSchema::compile(
      Json::parse(R"({"prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false})"));
  for (const std::string ok : {"[]", "[1]", "[1, \"a\"]"}) EXPECT_TRUE(accepts(*pair, ok)) << ok;
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {"[\"a\"]", 1}, {"[1, 2]", 4}, {"[1, \"a\", 3]", 7}}) {
    JsonAutomaton a(pair.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  EXPECT_EQ(compile_error(Json::parse(R"({"prefixItems": [{}], "items": false, "minItems": 2})")),
            "at '#': 'minItems' is above 'maxItems' (or 'items' is false)");
  const auto one_or_twelve = JsonSchema::compile(Json::parse(R"({"enum": [1, 12]})"));
  EXPECT_FALSE(accepts(*one_or_twelve, "13"));
  JsonAutomaton e(one_or_twelve.get(), 0);
  EXPECT_EQ(refused_at(e, "1"), -1);
  EXPECT_TRUE(e.can_end());  // "1" may end here, or go on to "12"
}

// A random value the schema accepts (depth-limited: optional members are skipped deep down).
class ValueMaker {
 public:
  ValueMaker(const Json& root, std::mt19937& rng) : root_(root), rng_(rng) {}

  Json make(const Json& schema, int depth) {
    const Json& s = deref(root_, schema);
    if (s.is_boolean() || s.empty() || (s.size() == 1 && s.contains("title"))) return any(depth);
    for (const char* u : {"anyOf", "oneOf"}) {
      if (s.contains(u)) return make(s[u][rng_() % s[u].size()], depth);
    }
    if (s.contains("const")) return s["const"];
    if (s.contains("enum")) return s["enum"][rng_() % s["enum"].size()];
    std::string type = "object";
    if (s.contains("type")) {
      const Json& t = s["type"];
      type = t.is_array() ? t[rng_() % t.size()].get<std::string>() : t.get<std::string>();
    } else if (s.contains("items") || s.contains("prefixItems")) {
      type = "array";
    }
    if (type == "null") return nullptr;
    if (type == "boolean") return rng_() % 2 == 0;
    if (type == "integer") return static_cast<int64_t>(rng_() % 2001) - 1000;
    if (type == "number") return std::ldexp(static_cast<double>(rng_() % 20001) - 10000, -5);
    if (type == "string") {
      const int64_t lo = s.value("minLength", int64_t{0});
      const int64_t hi = std::min<int64_t>(s.value("maxLength", lo + 6), lo + 6);
      static const std::vector<std::string> pieces = {"a", "Z", " ", "\xc3\xa9", "\"", "\n", "/"};
      std::string out;
      for (int64_t i = 0, n = lo + static_cast<int64_t>(rng_() % (hi - lo + 1)); i < n; ++i)
        out += pieces[rng_() % pieces.size()];
      return out;
    }
    if (type == "array") {
      const int64_t lo = s.value("minItems", int64_t{0});
      const int64_t hi = std::min<int64_t>(s.value("maxItems", lo + 3), lo + 3);
      Json a = Json::array();
      for (int64_t i = 0, n = depth > 3 ? lo : lo + static_cast<int64_t>(rng_() % (hi - lo + 1));
           i < n; ++i) {
        const Json item = item_schema(s, static_cast<size_t>(i));
        if (item == false) break;  // (no more items)
        a.push_back(make(item, depth + 1));
      }
      return a;
    }
    Json o = Json::object();
    const Json props = s.contains("properties") ? s["properties"] : Json::object();
    for (const auto& [k, sub] : props.items()) {
      bool required = false;
      if (s.contains("required")) {
        for (const Json& r : s["required"]) required = required || r == k;
      }
      if (required || (depth <= 3 && rng_() % 2 == 0)) o[k] = make(sub, depth + 1);
    }
    const bool extra = s.contains("additionalProperties") ? s["additionalProperties"] != false
                                                          : !s.contains("properties");
    if (extra && depth <= 3 && rng_() % 2 == 0) {
      const Json sub = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
      o["x" + std::to_string(rng_() % 100)] = make(sub.is_boolean() ? Json(true) : sub, depth + 1);
    }
    return o;
  }

 private:
  Json any(int depth) {
    switch (rng_() % (depth > 3 ? 4 : 6)) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<int64_t>(rng_() % 50);
      case 2:
        return "s";
      case 3:
        return true;
      case 4:
        return Json::array({any(depth + 1)});
      default:
        return Json::object({{"k", any(depth + 1)}});
    }
  }
  const Json& root_;
  std::mt19937& rng_;
};

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
        "age": {"type": "integer"}, "score": {"type": "number"},
        "ok": {"type": "boolean"}, "none": {"type": "null"}}, "required": ["name", "ok"]})",
    R"({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"enum": ["x", "xy", 2.5,
        true, null]}]}, "minItems": 1, "maxItems": 4})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"anyOf": [{"type": "object", "properties": {"kind": {"const": "a"},
        "x": {"type": "integer"}}, "required": ["kind", "x"]}, {"type": "object",
        "properties": {"kind": {"const": "b"}, "x": {"type": "string"}},
        "required": ["kind", "x"]}]})",
    R"({"type": "object", "properties": {"fixed": {"type": "string", "minLength": 2}},
        "additionalProperties": {"type": "integer"}})",
    R"({"type": "array", "items": {"type": "integer", "minimum": -40, "maximum": 1500},
        "maxItems": 5})",
    R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"enum": [1, 2]},
        {"type": "boolean"}], "items": false, "minItems": 2})",
    R"({"type": "array", "items": [{"type": "null"}, {"type": "integer"}],
        "additionalItems": {"type": "string"}})",
    R"({"type": "object", "properties": {"free": {}, "dict": {"type": "object"},
        "list": {"type": "array"}}, "required": ["free"]})",
};

// Valid values (as written, compact or indented) and corruptions of them: the automaton takes a
// whole text exactly when the validator accepts what nlohmann parses from it.
TEST(JsonSchema, AgreesWithAValidatorOnRandomTexts) {
  std::mt19937 rng(23);
  const std::string noise = "{}[]:,\"\\ 0123456789.-eE\x01xtrufalsn";
  int agreed = 0, trials = 0, valid_texts = 0;
  for (const char* source : kSchemas) {
    const Json sj = Json::parse(source);
    const auto schema = JsonSchema::compile(sj);
    ValueMaker maker(sj, rng);
    for (int trial = 0; trial < 600; ++trial, ++trials) {
      const Json v = maker.make(sj, 0);
      std::string text = v.dump(trial % 3 == 0 ? 2 : -1);
      if (trial % 2 == 1) {
        const size_t at = rng() % (text.size() + 1);
        const char c = noise[rng() % noise.size()];
        switch (rng() % 3) {
          case 0:
            text.insert(at, 1, c);
            break;
          case 1:
            if (at < text.size()) text.erase(at, 1);
            break;
          default:
            if (at < text.size()) text[at] = c;
        }
      }
      const bool mine = accepts(*schema, text);
      const Json parsed = Json::parse(text, nullptr, false);
      // (keys written twice: nlohmann keeps one, the automaton refuses the second)
      const bool twice = text.find("\"v\"", text.find("\"v\"") + 1) != std::string::npos &&
                         text.find("\"kids\"") == std::string::npos;
      const bool theirs = !parsed.is_discarded() && !text.empty() && text[0] != ' ' &&
                          text[0] != '\n' && valid(sj, sj, parsed) && !twice && blank_runs_ok(text);
      EXPECT_EQ(mine, theirs) << source << "\n" << text;
      agreed += mine == theirs;
      valid_texts += theirs;
    }
  }
  EXPECT_EQ(agreed, trials);
  EXPECT_GT(valid_texts, trials / 2);  // both kinds of text are well represented
  std::printf("[json schema] %d texts, %d valid, all agreed: %s\n", trials, valid_texts,
              agreed == trials ? "yes" : "no");
}

// A random walk over bytes from the schema's start, biased toward closing what is open (and
// away from exponents: a random one overflows a double, which nlohmann refuses). It fails the
// test at a state that takes no byte and cannot end (a dead end); the text, once it may end (or
// at the step limit), and whether it may end there.
bool random_walk(const JsonSchema& schema, std::mt19937& rng, const std::string& what,
                 std::string& text) {
  static const std::string closers = "\"}]0 ";
  JsonAutomaton a(&schema, 0);
  text.clear();
  for (int step = 0; step < 400 && !a.complete(); ++step) {
    std::vector<unsigned char> next;
    for (int c = 0; c < 256; ++c) {
      JsonAutomaton b = a;
      if (b.feed(static_cast<unsigned char>(c))) next.push_back(static_cast<unsigned char>(c));
    }
    EXPECT_TRUE(!next.empty() || a.can_end()) << what << "\ndead end after: " << text;
    if (next.empty() || (a.can_end() && rng() % 8 == 0)) break;
    std::vector<unsigned char> pick;
    for (unsigned char k : next) {
      if (k != 'e' && k != 'E') pick.push_back(k);
    }
    if (pick.empty()) pick = next;
    unsigned char c = pick[rng() % pick.size()];
    if (step > 40 && rng() % 2 == 0) {  // a closer when one is allowed
      for (unsigned char k : closers) {
        if (std::find(next.begin(), next.end(), k) != next.end()) {
          c = k;
          break;
        }
      }
    }
    EXPECT_TRUE(a.feed(c));
    text += static_cast<char>(c);
  }
  return a.can_end();
}

// Random walks: at every state some byte is taken (or the value can end), and a finished walk
// is a text the validator accepts.
TEST(JsonSchema, RandomWalksNeverReachADeadEnd) {
  std::mt19937 rng(29);
  int finished = 0, walks = 0;
  for (const char* source : kSchemas) {
    const Json sj = Json::parse(source);
    const auto schema = JsonSchema::compile(sj);
    for (int w = 0; w < 60; ++w, ++walks) {
      std::string text;
      if (!random_walk(*schema, rng, source, text)) continue;
      ++finished;
      const Json parsed = Json::parse(text, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << text;
      EXPECT_TRUE(valid(sj, sj, parsed)) << source << "\n" << text;
      EXPECT_TRUE(blank_runs_ok(text)) << text;
    }
  }
  EXPECT_GT(finished, walks / 2);
  std::printf("[json schema] %d random walks, %d finished as valid values, none stuck\n", walks,
              finished);
}

// A random schema of the supported keywords (no recursion), depth-limited.
Json random_schema(std::mt19937& rng, int depth) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  static const char* kScalars[] = {"string", "integer", "number", "boolean", "null"};
  switch (pick(depth >= 2 ? 4 : 7)) {
    case 0:
      return {{"type", kScalars[pick(5)]}};
    case 1: {
      Json e = Json::array();
      for (int i = 0, n = 1 + pick(4); i < n; ++i) {
        const int k = pick(4);
        e.push_back(k == 0   ? Json(std::string(1 + pick(3), static_cast<char>('a' + pick(3))))
                    : k == 1 ? Json(pick(30) - 10)
                    : k == 2 ? Json(pick(2) == 0)
                             : Json(nullptr));
      }
      return {{"enum", e}};
    }
    case 2: {
      Json t = {{"type", "string"}};
      const int lo = pick(3);
      if (pick(2)) t["minLength"] = lo;
      if (pick(2)) t["maxLength"] = lo + pick(4);
      return t;
    }
    case 3: {
      if (pick(2)) return {{"type", Json::array({kScalars[pick(5)], kScalars[pick(5)]})}};
      Json t = {{"type", "integer"}};  // bounded: [lo, lo + 0..120], maybe one side only
      const int lo = pick(400) - 200, side = pick(3);
      if (side != 1) t[pick(2) ? "minimum" : "exclusiveMinimum"] = lo;
      if (side != 0) t[pick(2) ? "maximum" : "exclusiveMaximum"] = lo + 2 + pick(120);
      return t;
    }
    case 4: {
      Json props = Json::object(), required = Json::array();
      for (int i = 0, n = pick(4); i < n; ++i) {
        const std::string name = std::string(1, static_cast<char>('p' + i)) + (pick(2) ? "x" : "");
        props[name] = random_schema(rng, depth + 1);
        if (pick(2)) required.push_back(name);
      }
      Json o = {{"type", "object"}, {"properties", props}, {"required", required}};
      if (pick(3) == 0) o["additionalProperties"] = pick(2) ? Json(true) : random_schema(rng, 2);
      return o;
    }
    case 5: {
      if (pick(3) == 0) {  // a tuple
        Json pre = Json::array();
        for (int i = 0, n = 1 + pick(3); i < n; ++i) pre.push_back(random_schema(rng, depth + 1));
        Json t = {{"type", "array"}, {"prefixItems", pre}};
        if (pick(2)) t["items"] = pick(2) ? Json(false) : random_schema(rng, depth + 1);
        if (pick(2)) t["minItems"] = pick(static_cast<int>(pre.size()) + 1);
        return t;
      }
      Json a = {{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      const int lo = pick(3);
      if (pick(2)) a["minItems"] = lo;
      if (pick(2)) a["maxItems"] = lo + pick(3);
      return a;
    }
    default: {
      Json any = Json::array();
      for (int i = 0, n = 2 + pick(2); i < n; ++i) any.push_back(random_schema(rng, depth + 1));
      return {{"anyOf", any}};
    }
  }
}

// Random schemas: every state a random walk reaches takes a next byte (or may end), and every
// finished walk is a text the validator accepts.
TEST(JsonSchema, RandomSchemasHaveNoDeadEnds) {
  std::mt19937 rng(31);
  int schemas = 0, finished = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Json sj = random_schema(rng, 0);
    std::shared_ptr<const JsonSchema> schema;
    try {
      schema = JsonSchema::compile(sj);
    } catch (const JsonSchemaError&) {
      continue;  // (an unsatisfiable draw)
    }
    ++schemas;
    std::string text;
    if (!random_walk(*schema, rng, sj.dump(), text)) continue;
    ++finished;
    const Json parsed = Json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << sj.dump() << "\n" << text;
    EXPECT_TRUE(valid(sj, sj, parsed)) << sj.dump() << "\n" << text;
  }
  EXPECT_GT(schemas, 200);
  EXPECT_GT(finished, schemas / 2);
  std::printf("[json schema] %d random schemas, %d walks finished as valid values, none stuck\n",
              schemas, finished);
}

std::vector<int> allowed_ids(const JsonConstraint& c, int vocab, std::span<const int32_t> pending) {
  std::vector<float> row(static_cast<size_t>(vocab), 0.f);
  c.apply(row.data(), vocab, pending);
  std::vector<int> ids;
  for (int i = 0; i < vocab; ++i) {
    if (!std::isinf(row[static_cast<size_t>(i)])) ids.push_back(i);
  }
  return ids;
}

TEST(JsonSchema, MaskFollowsTheSchema) {
  // Token 9 is the stop token.
  auto bytes = std::make_shared<const std::vector<std::string>>(std::vector<std::string>{
      "{", "}", "\"n\"", ":", "1", " ", "\"x\"", "[", "2", "", "{\"n\":", "\"a"});
  const auto schema = JsonSchema::compile(Json::parse(
      R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})"));
  JsonConstraint c(bytes, {9}, false, schema);
  const auto allowed = [&](std::span<const int32_t> pending) {
    return allowed_ids(c, 12, pending);
  };
  EXPECT_EQ(allowed({}), (std::vector<int>{0, 10}));
  const std::vector<int32_t> open{0};
  EXPECT_EQ(allowed(open), (std::vector<int>{2, 5}));  // the key "n" or blank; no "}" yet
  const std::vector<int32_t> key{10};
  EXPECT_EQ(allowed(key), (std::vector<int>{4, 5, 8}));  // an integer or blank
  const std::vector<int32_t> value{10, 4};
  EXPECT_EQ(allowed(value), (std::vector<int>{1, 4, 5, 8}));  // "}", more digits, blank
  const std::vector<int32_t> whole{10, 4, 1};
  EXPECT_EQ(allowed(whole), (std::vector<int>{9}));
  // A root integer may stop where it stands.
  const auto number = JsonSchema::compile(Json::parse(R"({"type": "integer"})"));
  JsonConstraint n(bytes, {9}, false, number);
  const std::vector<int32_t> digits{4, 8};
  EXPECT_EQ(allowed_ids(n, 12, digits), (std::vector<int>{4, 5, 8, 9}));  // blank ends it too
  n.add(4);
  EXPECT_TRUE(n.complete());
}

// A schema no text completes (a union that only refers to itself): the row keeps the stop
// tokens rather than nothing at all.
TEST(JsonSchema, ARowWithNothingAllowedKeepsTheStopTokens) {
  auto bytes = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"{", "}", "1", "", "[", "\"a\""});
  const auto endless = JsonSchema::compile(Json::parse(R"({"anyOf": [{"$ref": "#"}]})"));
  JsonConstraint c(bytes, {3}, false, endless);
  EXPECT_EQ(allowed_ids(c, 6, {}), (std::vector<int>{3}));
}

// The mask's shortcuts with a schema (plain text within a string's remaining length, the first
// byte, the byte after a leading space) refuse exactly what walking every token's bytes refuses,
// on the shipped vocabulary, from states of every kind.
TEST(JsonSchema, ShortcutsMaskExactlyWhatAWalkWould) {
  const auto schema = JsonSchema::compile(Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 6}, "level": {"enum": ["low", "high"]},
      "tags": {"type": "array", "items": {"type": "string"}}, "n": {"type": ["integer", "null"]},
      "extra": {"type": "object"}}, "required": ["name"]})"));
  expect_mask_is_the_walk(
      schema, {"", "{", "{\"na", "{\"name\": \"Jo", "{\"name\": \"Jo\u00e9", "{\"name\": \"",
               "{\"name\": \"Jo\", \"level\": \"hi", "{\"tags\": [\"a b", "{\"n\": 1",
               "{\"extra\": {\"fr", "{\"name\": \"a\"}", "{\"name\":\n  "});
}

// The shipped model with a schema: each output, when a stop token ended it, is a value the
// validator accepts (and always a prefix the automaton takes); the same tokens with MTP k = 1 and
// 3, batched with JSON-mode and plain requests, as alone without speculation.
TEST(JsonSchema, ShippedModelOutputsFollowTheSchemaAlsoUnderSpeculation) {
  auto model = load_fixture(kTrainedModel, 256);
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(fixture_dir(kTrainedModel));
  const auto bytes = token_texts(tokenizer, model->config().vocab_size);
  const std::vector<int32_t> stops = model->config().eos_token_ids;
  const Json cmd = Json::parse(R"({"type": "object", "properties": {
      "command": {"type": "string", "maxLength": 12}, "flags": {"type": "array", "items":
      {"type": "string", "maxLength": 8}, "maxItems": 3}, "root": {"type": "boolean"}},
      "required": ["command", "flags", "root"]})");
  const Json level = Json::parse(R"({"enum": ["low", "medium", "high"]})");
  std::vector<std::pair<Json, std::shared_ptr<const JsonSchema>>> schemas = {
      {cmd, JsonSchema::compile(cmd)}, {level, JsonSchema::compile(level)}};
  std::vector<Request> reqs = json_prompt_requests(tokenizer, stops, 48);
  for (size_t i = 0; i < 5; ++i) {  // one plain request shares the batch; request 4 is JSON mode
    reqs[i].json_object = true;
    if (i < 4) reqs[i].json_schema = schemas[i == 1 ? 1 : 0].second;
  }
  const std::vector<std::vector<int32_t>> solo = expect_batched_is_solo(*model, bytes, reqs);
  int values = 0;
  for (int i = 0; i < 4; ++i) {
    const Json& sj = i == 1 ? level : cmd;
    JsonAutomaton a(reqs[static_cast<size_t>(i)].json_schema.get(), 0);
    bool stopped = false;
    const std::string text = text_until_stop(solo[static_cast<size_t>(i)], *bytes, stops, stopped);
    EXPECT_EQ(refused_at(a, text), -1) << text;
    if (i == 1) {
      EXPECT_TRUE(stopped) << text;  // an enum's value closes within a few tokens
    }
    if (stopped) {
      EXPECT_TRUE(a.can_end()) << text;
      EXPECT_TRUE(valid(sj, sj, Json::parse(text))) << text;
      ++values;
    }
    std::printf("[json schema] request %d (%s): %zu tokens, %s: %s\n", i,
                reqs[static_cast<size_t>(i)].sampling.greedy() ? "greedy" : "sampled",
                solo[static_cast<size_t>(i)].size(),
                stopped ? "a whole value" : "cut at max_tokens", text.c_str());
  }
  std::printf("[json schema] %d of 4 outputs closed their value before max_tokens\n", values);
}

}  // namespace
}  // namespace tandem
