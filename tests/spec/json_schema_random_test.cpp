// Structured output against an independent validator (json_schema_validator.h), at random: the
// byte automaton with a schema on random texts (valid values the schema generates, and
// corruptions of them), random walks over bytes that never reach a state without a next byte (no
// dead ends) and whose finished texts the validator accepts, over hand-written schemas and over
// random schemas of every supported keyword.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "spec/json_schema.h"
#include "spec/json_schema_validator.h"

namespace tandem {
namespace {

using namespace testing;

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
    if (type == "number" && !bounded(s)) {
      return std::ldexp(static_cast<double>(rng_() % 20001) - 10000, -5);
    }
    if (type == "number") return bounded_number(s);
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
        Json v = make(item, depth + 1);
        for (int tries = 0; s.value("uniqueItems", false) && tries < 16 &&
                            std::find(a.begin(), a.end(), v) != a.end();
             ++tries) {
          v = make(item, depth + 1);  // a value not taken yet
        }
        a.push_back(std::move(v));
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
    const Json sub = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
    const auto add_extra = [&] {
      Json value = make(sub.is_boolean() ? Json(true) : sub, depth + 1);  // then the name's draw
      std::string key = "x";  // (not "x" + ...: GCC 12's -Wrestrict misfires on it here)
      key += std::to_string(rng_() % 100);
      o[key] = std::move(value);
    };
    if (extra && depth <= 3 && rng_() % 2 == 0) add_extra();
    // minProperties / maxProperties: optional members dropped or added to fit (mostly).
    const auto is_required = [&](const std::string& k) {
      return s.contains("required") &&
             std::find(s["required"].begin(), s["required"].end(), k) != s["required"].end();
    };
    const auto hi = static_cast<size_t>(s.value("maxProperties", int64_t{1} << 20));
    for (auto it = o.begin(); it != o.end() && o.size() > hi;) {
      it = is_required(it.key()) ? std::next(it) : o.erase(it);
    }
    const auto lo = static_cast<size_t>(s.value("minProperties", int64_t{0}));
    for (const auto& [k, psub] : props.items()) {
      if (o.size() < lo && !o.contains(k)) o[k] = make(psub, depth + 1);
    }
    for (int tries = 0; extra && o.size() < lo && tries < 8; ++tries) add_extra();
    return o;
  }

 private:
  static bool bounded(const Json& s) {
    return s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
           s.contains("exclusiveMaximum");
  }
  // A number within the schema's bounds, written as a bounded number must be (a few decimals,
  // no exponent), found by drawing in a window of the bounds until one fits.
  Json bounded_number(const Json& s) {
    const auto get = [&](const char* k) { return s.contains(k) ? s[k].get<double>() : NAN; };
    const double lo = std::isnan(get("minimum")) ? get("exclusiveMinimum") : get("minimum");
    const double hi = std::isnan(get("maximum")) ? get("exclusiveMaximum") : get("maximum");
    const double a = std::isnan(lo) ? hi - 100 : lo, b = std::isnan(hi) ? lo + 100 : hi;
    for (int tries = 0; tries < 64; ++tries) {
      const double x = std::round((a + (b - a) * (rng_() % 1001) / 1000.0) * 1000) / 1000;
      const Json v = Json::parse(fmt::format("{:.3f}", x));
      if (valid(s, s, v)) return v;
    }
    return Json::parse(fmt::format("{:.3f}", a));  // (out of bounds: a rare corrupt value)
  }
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
    // minProperties / maxProperties (last: the texts of the schemas above keep their seeds).
    R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
        "c": {"type": "null"}}, "required": ["a"], "additionalProperties": {"type": "string",
        "maxLength": 3}, "minProperties": 2, "maxProperties": 3})",
    // uniqueItems on an enum's items (appended last, as above).
    R"({"type": "array", "items": {"enum": ["red", "green", "re", 7, null, true]},
        "uniqueItems": true, "minItems": 1})",
    // Bounds on numbers with fractions (appended last, as above).
    R"({"type": "object", "properties": {"p": {"type": "number", "minimum": 0, "maximum": 1},
        "t": {"type": "number", "exclusiveMinimum": -2.5, "exclusiveMaximum": 37.25},
        "n": {"type": ["number", "null"], "maximum": -0.1}}, "required": ["p", "t"]})",
    // uniqueItems on strings and on integers (appended last, as above).
    R"({"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
        "uniqueItems": true, "maxItems": 6}, "ids": {"type": "array", "items": {"type": "integer"},
        "uniqueItems": true, "minItems": 2}}, "required": ["tags", "ids"]})",
};

// A text with a number a bounded number may not be written as (an exponent, or more than 15
// digits): a validator takes it where the automaton refuses (json_number_bounds.h).
bool has_unbounded_number_form(const std::string& text) {
  static const std::regex number(R"(-?\d+(\.\d+)?([eE][+-]?\d+)?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it) {
    const std::string n = it->str();
    const std::string digits =
        std::regex_replace(n.substr(0, n.find_first_of("eE")), std::regex(R"(^-?0?\.?|[.-])"), "");
    if (n.find_first_of("eE") != std::string::npos || digits.size() > 15) return true;
  }
  return false;
}

// Valid values (as written, compact or indented) and corruptions of them: the automaton takes a
// whole text exactly when the validator accepts what nlohmann parses from it.
TEST(JsonSchema, AgreesWithAValidatorOnRandomTexts) {
  std::mt19937 rng(23);
  const std::string noise = "{}[]:,\"\\ 0123456789.-eE\x01xtrufalsn";
  int agreed = 0, trials = 0, valid_texts = 0, skipped = 0;
  for (const char* source : kSchemas) {
    const Json sj = Json::parse(source);
    const auto schema = JsonSchema::compile(sj);
    ValueMaker maker(sj, rng);
    for (int trial = 0; trial < 600; ++trial, ++trials) {
      const Json v = maker.make(sj, 0);
      std::string text = v.dump(trial % 3 == 0 ? 2 : -1);
      if (trial % 2 == 1) corrupt(text, rng, noise);  // one corruption
      const bool mine = accepts(*schema, text);
      const Json parsed = Json::parse(text, nullptr, false);
      // (keys written twice: nlohmann keeps one, the automaton refuses the second)
      const bool twice = text.find("\"v\"", text.find("\"v\"") + 1) != std::string::npos &&
                         text.find("\"kids\"") == std::string::npos;
      const bool theirs = !parsed.is_discarded() && !text.empty() && text[0] != ' ' &&
                          text[0] != '\n' && valid(sj, sj, parsed) && !twice && blank_runs_ok(text);
      // (a validator also takes numbers in forms the bounded ones refuse)
      const bool restricted = theirs && !mine && has_unbounded_number_form(text) &&
                              std::string(source).find("exclusiveMaximum") != std::string::npos;
      if (restricted) {
        ++skipped;
        continue;
      }
      EXPECT_EQ(mine, theirs) << source << "\n" << text;
      agreed += mine == theirs;
      valid_texts += theirs;
    }
  }
  EXPECT_EQ(agreed, trials - skipped);
  EXPECT_LT(skipped, trials / 100);
  EXPECT_GT(valid_texts, trials / 2);  // both kinds of text are well represented
  std::printf(
      "[json schema] %d texts, %d valid, all agreed: %s (%d with a number in a form "
      "bounded numbers refuse)\n",
      trials - skipped, valid_texts, agreed == trials - skipped ? "yes" : "no", skipped);
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
      if (pick(3) == 0) {  // a number with fractional bounds instead (0.1: no double)
        t = {{"type", "number"}};
        const double a = (pick(4000) - 2000) / 10.0, b = a + std::pow(10.0, -pick(12));
        if (side != 1) t[pick(2) ? "minimum" : "exclusiveMinimum"] = a;
        if (side != 0) t[pick(2) ? "maximum" : "exclusiveMaximum"] = side == 2 ? b : a;
      }
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
      // Sizes some object of these properties has (required ones, at most what may appear).
      const int room = o.contains("additionalProperties") ? 6 : static_cast<int>(props.size());
      if (pick(4) == 0) o["maxProperties"] = static_cast<int>(required.size()) + pick(3);
      if (pick(4) == 0) {
        const int cap = o.contains("maxProperties") ? o["maxProperties"].get<int>() : room;
        o["minProperties"] = pick(std::min(cap, room) + 1);
      }
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
      if (a["items"].contains("enum") && pick(2)) a["uniqueItems"] = true;
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

}  // namespace
}  // namespace tandem
