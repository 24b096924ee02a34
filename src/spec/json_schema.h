// Structured output (OpenAI's response_format {"type": "json_schema"}): a JSON Schema compiled
// into nodes, and the cursor that the JSON byte automaton (json_constraint.h) consults at every
// structural event, so that the generated text is a JSON value the schema accepts.
//
// Supported (JSON Schema draft 2020-12 and the subset OpenAI's strict mode and pydantic emit):
// type (a name or a list), properties, required, additionalProperties (a boolean or a schema),
// items, prefixItems (tuples; draft 7's items array with additionalItems too), minItems,
// maxItems, minLength, maxLength, minimum / maximum / exclusiveMinimum / exclusiveMaximum
// (checked digit by digit: on integers exactly, on numbers with at most 15 digits and no exponent,
// json_number_bounds.h), minProperties, maxProperties, uniqueItems (on arrays whose items are
// an enum or const, strings without pattern or maxLength, or integers without bounds: pydantic's
// set[Literal[...]], set[str], set[int]; an item's last byte is refused where its value would
// repeat one, and such items always have another value to grow into), enum and const (of strings,
// numbers, booleans and null, matched as their compact JSON text), pattern (json_pattern.h: the
// ECMA-262 subset it names; such a string is written without escapes; beside minLength /
// maxLength a string grows only where a match of an allowed length can follow; not beside enum or
// const), anyOf and oneOf (oneOf is taken
// as anyOf: exclusivity is not enforced), allOf with one member, $ref to "#", "#/$defs/..." and
// "#/definitions/..." (recursion allowed), and the boolean schemas true and false. Annotations
// (title, description, default, examples, format, ...) are ignored, as JSON Schema lets a validator
// do. A constraint this module cannot enforce (patternProperties, multipleOf, uniqueItems on other
// items, not, if/then/else, ...) is an error naming it, never ignored.
// As vLLM's default (xgrammar's strict mode), an object schema that lists properties allows no
// other property unless additionalProperties says so; one without properties allows any.
// A schema without "type" takes the type its keywords imply (properties: object, items: array,
// minLength: string), else any.
//
// The cursor follows every configuration the text is consistent with (anyOf branches fork it; at
// most kMaxConfigs are kept, the first ones: the output still conforms, a later alternative may
// be lost). Every prefix it accepts can still be completed: a key, a literal or a string is
// refused at the first byte that no allowed completion has, and a ',' only where another member
// may follow.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "spec/json_number_bounds.h"
#include "spec/json_pattern.h"

namespace tandem {

// A schema this module refuses: the JSON pointer of the offending part and why.
class JsonSchemaError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class JsonSchema {
 public:
  enum Type : uint8_t {
    kObject = 1,
    kArray = 2,
    kString = 4,
    kInteger = 8,
    kNumber = 16,  // any number (integers too)
    kBoolean = 32,
    kNull = 64,
    kAnyType = 127,
  };
  static constexpr int kMaxNodes = 4096;
  static constexpr int kMaxProperties = 64;  // per object schema (a 64-bit set of seen ones)
  static constexpr int64_t kUnbounded = INT64_MAX;

  struct Node {
    std::vector<int32_t> any_of;  // non-empty: the value matches one of these (nothing else here)
    uint8_t types = kAnyType;
    bool has_literals = false;          // enum / const: the value's compact text is one of these
    std::vector<std::string> literals;  // sorted
    std::vector<std::string> names;     // object: declared property names (as written), sorted
    std::vector<int32_t> name_nodes;    // their schemas
    uint64_t required = 0;              // bit i: names[i] is required
    int32_t additional = -1;            // other properties' schema; -1: none allowed
    int64_t min_props = 0, max_props = kUnbounded;  // members of an object
    std::vector<int32_t> prefix_items;  // arrays: the schemas of the first items, in order
    int32_t items = 0;                  // array items' schema (after the prefix items)
    int64_t min_items = 0, max_items = kUnbounded;
    bool unique_items = false;  // items (an enum or const: its literals) each at most once
    // Items (strings without pattern or maxLength, or integers without bounds) of distinct values.
    bool unique_values = false;
    int64_t min_length = 0, max_length = kUnbounded;  // strings, in characters
    int32_t pattern = -1;  // strings: the index of their `pattern`'s automaton, or none
    // Integers: minimum / maximum (exclusive ones made inclusive), when given.
    bool has_min = false, has_max = false;
    int64_t min_int = 0, max_int = 0;
    // Numbers that may have a fraction (kNumber), bounded: written without an exponent and with
    // at most 15 digits, within these bounds (json_number_bounds.h).
    bool decimal = false;
    json_number::Bounds number;
  };

  // Throws JsonSchemaError for a schema outside the supported set or one no value satisfies.
  static std::shared_ptr<const JsonSchema> compile(const nlohmann::ordered_json& schema);
  // Any JSON value (node 0 of every schema).
  static constexpr int32_t kAny = 0;

  // The type of a JSON value that starts with byte c (kInteger for a number: '-' or a digit).
  static uint8_t type_of_start(unsigned char c);

  const Node& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const json_pattern::Pattern& pattern(int32_t i) const {
    return patterns_[static_cast<size_t>(i)];
  }
  int32_t root() const { return root_; }
  size_t size() const { return nodes_.size(); }

 private:
  friend class JsonSchemaCompiler;
  std::vector<Node> nodes_;
  std::vector<json_pattern::Pattern> patterns_;
  int32_t root_ = 0;
};

// Where a text stands against a schema: for each configuration, a stack of frames, one per value
// being read (containers and the scalar in progress). The JSON automaton calls the hooks below
// after it has checked the byte's syntax; a hook that returns false refuses the byte (the cursor
// is then spoilt: the automaton's callers copy before they try). Without a schema every hook
// accepts.
class SchemaCursor {
 public:
  static constexpr size_t kMaxConfigs = 16;
  SchemaCursor() = default;
  explicit SchemaCursor(const JsonSchema* schema);
  bool active() const { return schema_ != nullptr; }

  bool begin(unsigned char c);                     // a value starts with byte c
  bool scalar(unsigned char c, bool starts_char);  // a later byte of a string, number or literal
  bool end();                                      // the value in progress ended
  bool key_begin();                                // a key's opening quote
  bool key_byte(unsigned char c);                  // a byte inside a key (escapes as written)
  bool key_end();                                  // a key's closing quote
  bool comma();                                    // ',' in the container in progress
  // Inside a string (a value or a key) that every configuration leaves free but for its length:
  // the most characters of plain text one of them still takes (kUnbounded without a maximum);
  // -1 where a literal or a declared key must be matched.
  int64_t string_room() const;

  bool operator==(const SchemaCursor&) const = default;

 private:
  // The values a uniqueItems array of strings or integers has taken ("s" and the decoded string,
  // "i" and the integer's digits): shared, since every copy of a cursor carries them; equal by
  // content.
  struct UsedValues {
    std::shared_ptr<const std::vector<std::string>> values;
    bool contains(const std::string& key) const;
    UsedValues with(std::string key) const;
    bool operator==(const UsedValues& o) const;
  };
  struct Frame {
    int32_t node = 0;
    uint8_t kind = 0;  // a Type bit: kObject, kArray, kString, kNumber (with kInteger), ...
    bool int_only = false;
    bool key_free = false;            // the key in progress matches no declared name
    int32_t lo = 0, hi = 0, pos = 0;  // literals (scalars) or names (keys) with this prefix
    int64_t count = 0;                // characters (strings), items (arrays), members (objects)
    bool negative = false, digits = false;  // bounded integers: the sign, any digit yet
    uint64_t magnitude = 0;                 // and the digits' value (kSaturated beyond)
    json_number::Text number;               // bounded numbers (Node::decimal): the text so far
    uint64_t seen = 0;  // declared properties present (objects); literals used (unique arrays, and
                        // their items: the array's as the item began)
    json_pattern::States re{};  // strings with a pattern: the automaton's states
    bool unique = false;        // an item of a uniqueItems array
    bool unique_value = false;  // an item of a uniqueItems array of strings or integers (Node::
    std::string text;           // unique_values): its text so far, as written
    UsedValues used;     // such an array's items' values; such an item: its array's as it began
    int32_t value = -1;  // the schema of the value after the key (objects)
    bool operator==(const Frame&) const = default;
  };
  using Config = std::vector<Frame>;
  template <class F>
  bool keep_if(F&& f);
  void dedupe();
  const JsonSchema::Node& node_of(const Frame& f) const { return schema_->node(f.node); }

  const JsonSchema* schema_ = nullptr;
  std::vector<Config> configs_;
};

}  // namespace tandem
