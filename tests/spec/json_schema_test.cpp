// Structured output (spec/json_schema.h): what the compiler refuses and where; hand-picked texts
// accepted or refused at their first wrong byte; the row mask over a small vocabulary and on the
// shipped vocabulary; and on the shipped model, schema-constrained outputs that validate and are
// identical with MTP k = 1 and 3. The random tests are json_schema_random_test.cpp.
#include "spec/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "spec/json_schema_validator.h"
#include "spec/json_test_support.h"

namespace tandem {
namespace {

using namespace testing;

std::string compile_error(const Json& s) {
  try {
    JsonSchema::compile(s);
  } catch (const JsonSchemaError& e) {
    return e.what();
  }
  return "";
}

// `pattern` (json_pattern.h): texts accepted whole, and refused at their first byte that no
// match can follow (a backslash anywhere: such strings are written without escapes); the pattern
// in an object's property, and in one branch of an anyOf.
TEST(JsonSchema, PatternStringsMatchTheirRegex) {
  const auto phone = JsonSchema::compile(Json::parse(R"({"type": "object", "properties":
      {"phone": {"type": "string", "pattern": "^\\d{3}-\\d{4}$"}}, "required": ["phone"]})"));
  EXPECT_TRUE(accepts(*phone, R"({"phone": "555-1234"})"));
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {R"({"phone": "55-1234"})", 13},     // '-' where a third digit must come
           {R"({"phone": "555-12345"})", 19},   // a fifth digit
           {R"({"phone": "555-123"})", 18},     // the closing quote before the match is whole
           {R"({"phone": "5\u0035"})", 12}}) {  // an escape
    JsonAutomaton a(phone.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  const auto search = JsonSchema::compile(Json::parse(R"({"pattern": "ab+c"})"));  // unanchored
  EXPECT_TRUE(accepts(*search, R"("xxabbbcyy")"));
  EXPECT_FALSE(accepts(*search, R"("xxacyy")"));
  const auto either = JsonSchema::compile(Json::parse(
      R"({"anyOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "integer"}]})"));
  EXPECT_TRUE(accepts(*either, R"("hello")"));
  EXPECT_TRUE(accepts(*either, "42"));
  JsonAutomaton a(either.get(), 0);
  EXPECT_EQ(refused_at(a, R"("hello world")"), 6);
}

// `pattern` beside minLength / maxLength: a string grows only where a match of an allowed length
// can still follow, so the cursor refuses the byte that would leave none (not only the closing
// quote), and a pattern no allowed length matches is refused at compile time.
TEST(JsonSchema, PatternBesideLengthBoundsNeverDeadEnds) {
  const auto code =
      JsonSchema::compile(Json::parse(R"({"type": "string", "pattern": "^a+b$", "maxLength": 3})"));
  EXPECT_TRUE(accepts(*code, R"("aab")"));
  EXPECT_TRUE(accepts(*code, R"("ab")"));
  JsonAutomaton a(code.get(), 0);
  EXPECT_EQ(refused_at(a, R"("aaab")"), 3);  // a third 'a' leaves no room for the 'b'
  const auto pairs = JsonSchema::compile(
      Json::parse(R"({"type": "string", "pattern": "^(ab)+$", "minLength": 3, "maxLength": 6})"));
  EXPECT_TRUE(accepts(*pairs, R"("abab")"));
  EXPECT_TRUE(accepts(*pairs, R"("ababab")"));
  JsonAutomaton b(pairs.get(), 0);
  EXPECT_EQ(refused_at(b, R"("ab")"), 3);  // the closing quote: 2 characters < minLength
  JsonAutomaton c(pairs.get(), 0);
  EXPECT_EQ(refused_at(c, R"("abababa")"), 7);  // a seventh character: above maxLength
  // An unanchored pattern with a minimum: any characters pad it.
  const auto search =
      JsonSchema::compile(Json::parse(R"({"type": "string", "pattern": "x", "minLength": 4})"));
  EXPECT_TRUE(accepts(*search, R"("abxd")"));
  EXPECT_FALSE(accepts(*search, R"("x")"));
  // Characters, not bytes: an e-acute is one character of two bytes.
  const auto chars = JsonSchema::compile(
      Json::parse(R"({"type": "string", "pattern": "^.+$", "minLength": 2, "maxLength": 2})"));
  EXPECT_TRUE(accepts(*chars, "\"\u00e9\u00e9\""));
  EXPECT_FALSE(accepts(*chars, "\"\u00e9\""));
}

TEST(JsonSchema, RefusesWhatItCannotEnforceAndSaysWhere) {
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "object", "properties": {"a": {"type":
            "number", "minimum": 1e16}}})")),  // beyond every number of at most 15 digits
            "at '#/properties/a': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "number", "minimum": 0.12345678901234561,
            "maximum": 0.12345678901234567})")),  // between two 15-digit numbers
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "multipleOf": 3})")),
            "at '#': 'multipleOf' is not supported (structured output cannot enforce it)");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "minimum": 5, "maximum": 4})")),
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "integer", "enum": [1, 9], "maximum": 0})")),
            "at '#': no JSON value satisfies this schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "string", "pattern": "(a)\\1"})")),
            "at '#': 'pattern' \"(a)\\\\1\" is not supported: a back-reference at offset 3");
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "string", "pattern": "^a", "enum": ["a"]})")),
            "at '#': 'pattern' beside enum or const is not supported");
  EXPECT_EQ(compile_error(Json::parse(R"({"pattern": "^a{2}$", "minLength": 3})")),
            "at '#': 'pattern' \"^a{2}$\" matches no string of at least 3 characters "
            "(minLength, maxLength)");
  EXPECT_EQ(compile_error(Json::parse(R"({"pattern": "a", "minLength": 9000})")),
            "at '#': 'pattern' \"a\" is not supported: minLength above 8192 beside a pattern");
  EXPECT_EQ(compile_error(Json::parse(R"({"patternProperties": {"^a": {}}})")),
            "at '#': 'patternProperties' is not supported (structured output cannot enforce it)");
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
  EXPECT_EQ(compile_error(Json::parse(R"({"properties": {"a": false}, "required": ["a"],
            "additionalProperties": true})")),
            "at '#': required property 'a' is not allowed by the schema");
  EXPECT_EQ(compile_error(Json::parse(R"({"properties": {"a/b~": {"type": "strin"}}})")),
            "at '#/properties/a~1b~0': unknown type \"strin\"");
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
  // Bounded numbers with fractions: no exponent, at most 15 digits (a lone leading 0 not
  // counted), each prefix taken while some completion is within the bounds.
  const auto unit =
      JsonSchema::compile(Json::parse(R"({"type": "number", "minimum": 0, "maximum": 1})"));
  for (const std::string ok : {"0", "1", "0.5", "1.0", "-0", "-0.0", "0.999999999999999",
                               "1.00000000000000", "0.000000000000001"}) {
    EXPECT_TRUE(accepts(*unit, ok)) << ok;
  }
  for (const auto& [text, at] :
       std::vector<std::pair<std::string, int64_t>>{{"2", 0},
                                                    {"1.5", 2},
                                                    {"1.0000000000001", 14},
                                                    {"-0.5", 3},
                                                    {"-1", 1},
                                                    {"0e1", 1},
                                                    {"0.1E1", 3},
                                                    {"0.9999999999999999", 17},
                                                    {"10", 1},
                                                    {"0.5", -1}}) {
    JsonAutomaton a(unit.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  // Exclusive bounds at a decimal that is no double: 0.1 < x < 37.25 as a validator's doubles.
  const auto open = JsonSchema::compile(
      Json::parse(R"({"type": "number", "exclusiveMinimum": 0.1, "exclusiveMaximum": 37.25})"));
  for (const std::string ok : {"0.100000000000001", "0.11", "1", "37.24", "37.2499999999999"}) {
    EXPECT_TRUE(accepts(*open, ok)) << ok;
  }
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {"0.1", -1}, {"0.09", 2}, {"37.25", 4}, {"38", 1}, {"37.3", 3}, {"-1", 0}}) {
    JsonAutomaton a(open.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
    if (at == -1) {
      EXPECT_FALSE(a.can_end()) << text;  // on the bound: more digits must follow
    }
  }
  const auto negative_number = JsonSchema::compile(
      Json::parse(R"({"type": ["number", "null"], "minimum": -2.5, "maximum": -0.001})"));
  for (const std::string ok : {"-2.5", "-0.001", "-1", "-0.0011", "null"}) {
    EXPECT_TRUE(accepts(*negative_number, ok)) << ok;
  }
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {"0", 0}, {"-0.0009", 5}, {"-2.6", 3}, {"-3", 1}, {"-0.001", -1}}) {
    JsonAutomaton a(negative_number.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
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
            "at '#': 'minItems' is above 'maxItems' (or 'items' is false, or 'uniqueItems' leaves "
            "fewer distinct items)");
  // uniqueItems on an enum's items (pydantic's set[Literal[...]]): each value once; a value's
  // last byte is refused when it would repeat one, and ',' once every value is used.
  const auto tags = JsonSchema::compile(Json::parse(
      R"({"type": "array", "items": {"enum": ["a", "ab", 1, 12]}, "uniqueItems": true})"));
  for (const std::string ok : {"[]", R"(["a", "ab", 1, 12])", R"([12, 1])", R"(["ab", "a"])"}) {
    EXPECT_TRUE(accepts(*tags, ok)) << ok;
  }
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {R"(["a", "a"])", 8},
           {R"([1, 1])", 5},
           {R"([1, 12, 1])", 8},  // 1 and 12 both used: no value starts with 1
           {R"(["a", "ab", 1, 12,)", 17}}) {
    JsonAutomaton a(tags.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  EXPECT_EQ(compile_error(Json::parse(
                R"({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": true,
                    "minItems": 3})")),
            "at '#': 'minItems' is above 'maxItems' (or 'items' is false, or 'uniqueItems' leaves "
            "fewer distinct items)");
  for (const char* items :
       {R"({"type": "number"})", R"({"type": "string", "maxLength": 3})",
        R"({"type": "string", "pattern": "^a+$"})", R"({"type": "integer", "minimum": 0})",
        R"({"type": ["string", "null"]})", R"({})"}) {
    EXPECT_EQ(
        compile_error(Json::parse(
            std::string(R"({"type": "array", "uniqueItems": true, "items": )") + items + "}")),
        "at '#': 'uniqueItems' is supported on arrays whose items are an enum or const of "
        "at most 64 values, strings without pattern or maxLength, or integers without "
        "bounds (structured output cannot enforce it on others)")
        << items;
  }
  // uniqueItems on strings (pydantic's set[str]): a string equal to an earlier one, by value
  // (escapes decoded), is refused at its closing quote; it may grow into another value instead.
  const auto names = JsonSchema::compile(Json::parse(
      R"({"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": true})"));
  for (const std::string ok : {R"([])", R"(["a", "ab", "b"])", R"(["a", "aa", "\"a\""])",
                               R"(["\\", "\\\\", "a\"", "A"])", R"(["a", "\u00e9", "\u00c9"])"}) {
    EXPECT_TRUE(accepts(*names, ok)) << ok;
  }
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {R"(["a", "a"])", 8},
           {R"(["ab", "b", "ab"])", 15},
           {R"(["A", "\u0041"])", 13},  // the same value, written with an escape
           {R"(["\"", "\""])", 10},
           {R"(["é", "\u00e9"])", 14}}) {
    JsonAutomaton a(names.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  // ... and on integers (set[int]): a repeated value is refused at the byte after it; "0" (and
  // "-0") at its '0' once 0 is used, since no digit may follow a leading 0.
  const auto ids = JsonSchema::compile(
      Json::parse(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})"));
  for (const std::string ok : {R"([])", R"([1, 10, 100, -1, 0])", R"([-0, 7])", R"([0, -10])"}) {
    EXPECT_TRUE(accepts(*ids, ok)) << ok;
  }
  for (const auto& [text, at] :
       std::vector<std::pair<std::string, int64_t>>{{R"([1, 1])", 5},
                                                    {R"([12,3,12 ])", 8},
                                                    {R"([0, 0])", 4},
                                                    {R"([0, -0])", 5},
                                                    {R"([-0, 0])", 5},
                                                    {R"([5, 1.5])", 5}}) {  // (integers only)
    JsonAutomaton a(ids.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "array", "items": {"enum": [1, 1.0]},
                                          "uniqueItems": true})")),
            "at '#': 'uniqueItems' over an enum with two texts of one value (1, 1.0) is not "
            "supported");
  EXPECT_TRUE(accepts(
      *JsonSchema::compile(
          Json::parse(R"({"type": "array", "items": {"type": "string"}, "uniqueItems": false})")),
      R"(["x", "x"])"));
  EXPECT_EQ(compile_error(Json::parse(R"({"$defs": {"e": {"enum": [1]}},
                                          "$ref": "#/$defs/e", "minimum": 3})")),
            "at '#': 'minimum' beside '$ref' is not supported");
  // minProperties / maxProperties: members counted, room kept for the required ones.
  const auto sized = JsonSchema::compile(Json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"},
          "b": {"type": "integer"}}, "required": ["b"], "additionalProperties": true,
          "minProperties": 2, "maxProperties": 2})"));
  for (const std::string ok : {R"({"a": 1, "b": 2})", R"({"b": 2, "x": null})"}) {
    EXPECT_TRUE(accepts(*sized, ok)) << ok;
  }
  for (const auto& [text, at] : std::vector<std::pair<std::string, int64_t>>{
           {R"({"b": 1})", 7},                   // minProperties 2: the brace
           {R"({"b": 1, "a": 2, "c": 3})", 15},  // maxProperties 2: the comma
           {R"({"a": 1, "ab": 2})", 10},         // "b" required: the second key can only be "b"
           {R"({"a": 1, "x": 2})", 10}}) {
    JsonAutomaton a(sized.get(), 0);
    EXPECT_EQ(refused_at(a, text), at) << text;
  }
  const std::string none =
      "at '#': no object has 'minProperties' .. 'maxProperties' members with these 'required' "
      "and allowed properties";
  EXPECT_EQ(compile_error(Json::parse(R"({"type": "object", "properties": {"a": {}},
                "additionalProperties": false, "minProperties": 2})")),
            none);
  EXPECT_EQ(
      compile_error(Json::parse(
          R"({"properties": {"a": {}, "b": {}}, "required": ["a", "b"], "maxProperties": 1})")),
      none);
  EXPECT_EQ(compile_error(Json::parse(R"({"minProperties": 3, "maxProperties": 2})")), none);
  const auto one_or_twelve = JsonSchema::compile(Json::parse(R"({"enum": [1, 12]})"));
  EXPECT_FALSE(accepts(*one_or_twelve, "13"));
  JsonAutomaton e(one_or_twelve.get(), 0);
  EXPECT_EQ(refused_at(e, "1"), -1);
  EXPECT_TRUE(e.can_end());  // "1" may end here, or go on to "12"
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
