// Values of the chat-template interpreter: the Python objects a Jinja template sees (None, bool,
// int, float, str, list, dict, namespace, callables, Undefined) with Python's str(), repr(),
// json.dumps, truthiness and comparison rules. Not the evaluator (jinja_eval.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tandem::tok::jinja {

struct Value;
using List = std::vector<Value>;

// Insertion-ordered mapping with string keys (Python dicts keep insertion order).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* kw(const std::string& name) const;
};
using Function = std::function<Value(CallArgs&)>;

enum class Kind {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,
  kFunction
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool tuple = false;  // a kList that Python would print as a tuple
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value, or the name of an undefined variable
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // also the attributes of a namespace
  std::shared_ptr<Function> fn;

  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value real(double v);
  static Value string(std::string v);
  static Value new_list(List v = {});
  static Value new_dict(Dict v = {});
  static Value function(Function f);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }
  bool is_list() const { return kind == Kind::kList; }
  double as_double() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }
};

const char* kind_name(Kind k);

Value from_json(const nlohmann::ordered_json& j);

bool truthy(const Value& v);
// Python ==, and <; the latter throws tandem::Error for types Python cannot order.
bool equals(const Value& a, const Value& b);
bool less(const Value& a, const Value& b);

// Python str(): what {{ x }} prints (Undefined prints nothing).
std::string to_str(const Value& v);
// Python repr(), used inside str() of lists and dicts.
std::string repr(const Value& v);
// Python repr() of a float (shortest round-trip, "1.0", "1e-05", "inf").
std::string float_repr(double d);
// json.dumps(v, ensure_ascii=..., indent=..., sort_keys=...) with Python's default separators.
std::string to_json(const Value& v, bool ensure_ascii, int indent, bool sort_keys);

// Python str.isspace() for one code point.
bool is_py_space(char32_t c);

}  // namespace tandem::tok::jinja
