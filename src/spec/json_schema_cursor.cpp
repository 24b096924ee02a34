// Structured output: the cursor that follows a text through a compiled schema (json_schema.h).
#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "spec/json_schema.h"

namespace tandem {

namespace {

// Narrows [lo, hi) of sorted texts sharing their first pos bytes to those whose byte pos is c.
bool narrow(const std::vector<std::string>& texts, int32_t& lo, int32_t& hi, int32_t& pos,
            unsigned char c) {
  const auto has = [&](int32_t i) {
    const std::string& t = texts[static_cast<size_t>(i)];
    return t.size() > static_cast<size_t>(pos) &&
           static_cast<unsigned char>(t[static_cast<size_t>(pos)]) == c;
  };
  while (lo < hi && !has(lo)) ++lo;
  int32_t h = lo;
  while (h < hi && has(h)) ++h;
  hi = h;
  ++pos;
  return lo < hi;
}

// Whether a text of [lo, hi) has exactly pos bytes (it sorts first).
bool whole(const std::vector<std::string>& texts, int32_t lo, int32_t hi, int32_t pos) {
  return lo < hi && texts[static_cast<size_t>(lo)].size() == static_cast<size_t>(pos);
}

// Room in an object of `count` members, `seen` of the declared ones, for one more member (a
// required one or not): the required ones still missing after it must fit under maxProperties.
bool room_for(const JsonSchema::Node& n, int64_t count, uint64_t seen, bool required) {
  if (n.max_props == JsonSchema::kUnbounded) return true;
  const int64_t missing = std::popcount(n.required & ~seen) - (required ? 1 : 0);
  return count + 1 + missing <= n.max_props;
}

// Whether a key can still be added whose name is one of names [lo, hi) not seen yet, or (with
// additionalProperties) any other name, with room for it.
bool key_fits(const JsonSchema::Node& n, int64_t count, uint64_t seen, int32_t lo, int32_t hi) {
  if (n.additional >= 0 && room_for(n, count, seen, false)) return true;
  for (int32_t i = lo; i < hi; ++i) {
    if (!((seen >> i) & 1u) && room_for(n, count, seen, (n.required >> i) & 1u)) return true;
  }
  return false;
}

constexpr uint64_t kSaturated = UINT64_MAX;
constexpr __int128 kInfinite = static_cast<__int128>(1) << 100;

// A bounded integer's text so far (sign, digits of value m, kSaturated beyond 19 digits): whether
// some completion of it (it, or more digits after it) lies in the node's bounds.
bool integer_feasible(const JsonSchema::Node& n, bool negative, bool digits, uint64_t m) {
  const __int128 lo = n.has_min ? n.min_int : -kInfinite, hi = n.has_max ? n.max_int : kInfinite;
  if (!digits) return (lo <= 0 && 0 <= hi) || lo <= -1;  // "-": -0, or any negative integer
  if (m == 0) return lo <= 0 && 0 <= hi;                 // "0" or "-0": nothing may follow
  const __int128 plo = negative ? -hi : lo, phi = negative ? -lo : hi;  // on magnitudes
  if (m == kSaturated) return phi == kInfinite;                         // beyond int64 either way
  for (__int128 p = 1;; p *= 10) {  // the completions with j more digits: [m p, (m + 1) p - 1]
    if (static_cast<__int128>(m) * p > phi) return false;
    if ((static_cast<__int128>(m) + 1) * p - 1 >= plo) return true;
  }
}

bool integer_in_bounds(const JsonSchema::Node& n, const bool negative, uint64_t m) {
  if (m == kSaturated) return negative ? !n.has_min : !n.has_max;
  const __int128 v = negative ? -static_cast<__int128>(m) : static_cast<__int128>(m);
  return (!n.has_min || v >= n.min_int) && (!n.has_max || v <= n.max_int);
}

bool bounded(const JsonSchema::Node& n) { return n.has_min || n.has_max; }

// The next digit of a bounded integer.
void add_digit(uint64_t& m, unsigned char c) {
  const uint64_t d = c - '0';
  m = m == kSaturated || m > (kSaturated - 1 - d) / 10 ? kSaturated : m * 10 + d;
}

bool another_key_possible(const JsonSchema::Node& n, int64_t count, uint64_t seen) {
  return key_fits(n, count, seen, 0, static_cast<int32_t>(n.names.size()));
}

// An item of a uniqueItems array: whether a literal of [lo, hi) is not among the used ones.
bool unused_literal(int32_t lo, int32_t hi, uint64_t used) {
  for (int32_t i = lo; i < hi; ++i) {
    if (((used >> i) & 1u) == 0) return true;
  }
  return false;
}

// The value an item of a uniqueItems array of strings or integers (Node::unique_values) is
// compared by: "s" and the string with its escapes decoded (its text holds every byte after the
// opening quote, the closing one included), or "i" and the integer's digits (-0 is 0).
std::string value_key(uint8_t kind, const std::string& text) {
  std::string key(1, kind == JsonSchema::kString ? 's' : 'i');
  if (kind != JsonSchema::kString) {
    key += text == "-0" ? std::string_view("0") : std::string_view(text);
    return key;
  }
  std::string quoted(1, '"');
  quoted += text;
  const nlohmann::json v = nlohmann::json::parse(quoted, nullptr, false);
  if (v.is_string()) {
    key += v.get_ref<const std::string&>();
  } else {  // (a lone surrogate escape: compared as written)
    key[0] = 'r';
    key += text;
  }
  return key;
}

}  // namespace

bool SchemaCursor::UsedValues::contains(const std::string& key) const {
  return values != nullptr && std::find(values->begin(), values->end(), key) != values->end();
}

SchemaCursor::UsedValues SchemaCursor::UsedValues::with(std::string key) const {
  auto next = std::make_shared<std::vector<std::string>>();
  if (values != nullptr) *next = *values;
  next->push_back(std::move(key));
  return {std::move(next)};
}

bool SchemaCursor::UsedValues::operator==(const UsedValues& o) const {
  if (values == o.values) return true;
  const size_t n = values == nullptr ? 0 : values->size();
  const size_t m = o.values == nullptr ? 0 : o.values->size();
  return n == m && (n == 0 || *values == *o.values);
}

SchemaCursor::SchemaCursor(const JsonSchema* schema) : schema_(schema) {
  if (schema_ != nullptr) configs_.emplace_back();
}

template <class F>
bool SchemaCursor::keep_if(F&& f) {
  std::erase_if(configs_, [&](Config& c) { return c.empty() || !f(c.back()); });
  return !configs_.empty();
}

void SchemaCursor::dedupe() {
  for (size_t i = 0; i < configs_.size(); ++i) {
    for (size_t j = configs_.size(); j-- > i + 1;) {
      if (configs_[j] == configs_[i]) configs_.erase(configs_.begin() + static_cast<long>(j));
    }
  }
  if (configs_.size() > kMaxConfigs) configs_.resize(kMaxConfigs);
}

bool SchemaCursor::begin(unsigned char c) {
  if (schema_ == nullptr) return true;
  const uint8_t kind = JsonSchema::type_of_start(c);
  std::vector<Config> next;
  for (Config& cfg : configs_) {
    int32_t expected = schema_->root();
    bool unique = false;  // an item of a uniqueItems array, which has used these literals:
    uint64_t used = 0;
    bool unique_value = false;  // an item of a uniqueItems array of strings or integers
    UsedValues used_values;
    if (!cfg.empty()) {
      Frame& parent = cfg.back();
      if (parent.kind == JsonSchema::kArray) {
        const JsonSchema::Node& a = node_of(parent);
        if (parent.count >= a.max_items) continue;
        unique = a.unique_items;
        used = parent.seen;
        unique_value = a.unique_values;
        used_values = parent.used;
        const auto at = static_cast<size_t>(parent.count++);
        expected = at < a.prefix_items.size() ? a.prefix_items[at] : a.items;
      } else if (parent.kind == JsonSchema::kObject && parent.value >= 0) {
        expected = parent.value;
      } else {
        continue;
      }
    }
    // The alternatives the value may take (anyOf, nested), each a frame if its type fits c.
    std::vector<int32_t> todo{expected}, leaves;
    for (size_t i = 0; i < todo.size() && todo.size() < 256; ++i) {
      const JsonSchema::Node& n = schema_->node(todo[i]);
      if (n.any_of.empty()) {
        if (std::find(leaves.begin(), leaves.end(), todo[i]) == leaves.end()) {
          leaves.push_back(todo[i]);
        }
      } else {
        for (int32_t m : n.any_of) {
          if (std::find(todo.begin(), todo.end(), m) == todo.end()) todo.push_back(m);
        }
      }
    }
    for (int32_t leaf : leaves) {
      const JsonSchema::Node& n = schema_->node(leaf);
      const uint8_t fits = kind == JsonSchema::kInteger
                               ? static_cast<uint8_t>(JsonSchema::kInteger | JsonSchema::kNumber)
                               : kind;
      if ((n.types & fits) == 0) continue;
      Frame f;
      f.node = leaf;
      f.kind = kind;
      f.int_only = kind == JsonSchema::kInteger && !(n.types & JsonSchema::kNumber);
      if (n.has_literals) {
        f.hi = static_cast<int32_t>(n.literals.size());
        if (!narrow(n.literals, f.lo, f.hi, f.pos, c)) continue;
        f.unique = unique;
        f.seen = used;
        if (unique && !unused_literal(f.lo, f.hi, f.seen)) continue;
      }
      if (kind == JsonSchema::kInteger && bounded(n)) {
        f.negative = c == '-';
        f.digits = c != '-';
        if (f.digits) add_digit(f.magnitude, c);
        if (!integer_feasible(n, f.negative, f.digits, f.magnitude)) continue;
      }
      if (kind == JsonSchema::kInteger && n.decimal) {
        if (!json_number::add(f.number, c) || !json_number::feasible(n.number, f.number)) continue;
      }
      if (kind == JsonSchema::kString && n.pattern >= 0) f.re = schema_->pattern(n.pattern).start();
      if (unique_value) {  // a string's text starts after its quote; "0" grows no further
        f.unique_value = true;
        f.used = used_values;
        if (kind == JsonSchema::kInteger) f.text.push_back(static_cast<char>(c));
        if (f.text == "0" && f.used.contains("i0")) continue;
      }
      Config branch = cfg;
      branch.push_back(f);
      next.push_back(std::move(branch));
    }
  }
  configs_ = std::move(next);
  dedupe();
  return !configs_.empty();
}

bool SchemaCursor::scalar(unsigned char c, bool starts_char) {
  if (schema_ == nullptr) return true;
  return keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    if (f.int_only && (c == '.' || c == 'e' || c == 'E')) return false;
    if (n.has_literals && !narrow(n.literals, f.lo, f.hi, f.pos, c)) return false;
    if (f.unique && !unused_literal(f.lo, f.hi, f.seen)) return false;
    if (f.kind == JsonSchema::kInteger && bounded(n) && c >= '0' && c <= '9') {
      add_digit(f.magnitude, c);
      f.digits = true;
      if (!integer_feasible(n, f.negative, f.digits, f.magnitude)) return false;
    }
    if (f.kind == JsonSchema::kInteger && n.decimal) {  // no exponent; the digits within bounds
      if (!json_number::add(f.number, c) || !json_number::feasible(n.number, f.number)) {
        return false;
      }
    }
    if (starts_char && f.kind == JsonSchema::kString) {
      if (f.count >= n.max_length) return false;
      ++f.count;
    }
    if (f.unique_value) {
      f.text.push_back(static_cast<char>(c));
      if (f.text == "-0" && f.used.contains("i0")) return false;  // -0 grows no further
    }
    if (f.kind == JsonSchema::kString && n.pattern >= 0 && c != '"') {  // '"': the closing quote
      if (c == '\\') return false;                                      // written without escapes
      const json_pattern::Pattern& re = schema_->pattern(n.pattern);
      f.re = re.step(f.re, c);
      // Beside length bounds: a match must still be reachable with an allowed count of
      // characters (bound_lengths' table; without bounds, any live state can finish).
      const int64_t most =
          n.max_length == JsonSchema::kUnbounded ? JsonSchema::kUnbounded : n.max_length - f.count;
      if (!re.can_match(f.re, n.min_length - f.count, most)) return false;
    }
    return true;
  });
}

bool SchemaCursor::end() {
  if (schema_ == nullptr) return true;
  const bool any = keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    switch (f.kind) {
      case JsonSchema::kObject:
        return (n.required & ~f.seen) == 0 && f.count >= n.min_props;
      case JsonSchema::kArray:
        return f.count >= n.min_items;
      case JsonSchema::kString:
        if (f.count < n.min_length) return false;
        if (n.pattern >= 0 && !schema_->pattern(n.pattern).accepts(f.re)) return false;
        break;
      case JsonSchema::kInteger:
        if (bounded(n) && !integer_in_bounds(n, f.negative, f.magnitude)) return false;
        if (n.decimal && !json_number::within(n.number, f.number)) return false;
        break;
      default:
        break;
    }
    if (f.unique && ((f.seen >> f.lo) & 1u) != 0) return false;  // (whole: literal lo)
    if (f.unique_value && f.used.contains(value_key(f.kind, f.text))) return false;
    return !n.has_literals || whole(n.literals, f.lo, f.hi, f.pos);
  });
  for (Config& c : configs_) {
    const Frame item = c.back();
    c.pop_back();
    if (item.unique && !c.empty()) c.back().seen |= uint64_t{1} << item.lo;  // its literal
    if (item.unique_value && !c.empty())
      c.back().used = c.back().used.with(value_key(item.kind, item.text));
  }
  dedupe();
  return any;
}

bool SchemaCursor::key_begin() {
  if (schema_ == nullptr) return true;
  return keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    f.lo = 0;
    f.hi = static_cast<int32_t>(n.names.size());
    f.pos = 0;
    f.value = -1;
    return another_key_possible(n, f.count, f.seen);
  });
}

bool SchemaCursor::key_byte(unsigned char c) {
  if (schema_ == nullptr) return true;
  return keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    if (c == '\\' && !n.names.empty()) return false;  // declared names are matched as written
    narrow(n.names, f.lo, f.hi, f.pos, c);
    return key_fits(n, f.count, f.seen, f.lo, f.hi);
  });
}

bool SchemaCursor::key_end() {
  if (schema_ == nullptr) return true;
  const bool any = keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    if (whole(n.names, f.lo, f.hi, f.pos)) {
      const uint64_t bit = uint64_t{1} << f.lo;
      if (f.seen & bit) return false;  // a duplicate
      if (!room_for(n, f.count, f.seen, (n.required & bit) != 0)) return false;
      f.seen |= bit;
      ++f.count;
      f.value = n.name_nodes[static_cast<size_t>(f.lo)];
      return true;
    }
    f.value = n.additional;
    if (n.additional < 0 || !room_for(n, f.count, f.seen, false)) return false;
    ++f.count;
    return true;
  });
  dedupe();
  return any;
}

bool SchemaCursor::comma() {
  if (schema_ == nullptr) return true;
  return keep_if([&](Frame& f) {
    const JsonSchema::Node& n = node_of(f);
    if (f.kind == JsonSchema::kObject) return another_key_possible(n, f.count, f.seen);
    return f.count < n.max_items;
  });
}

int64_t SchemaCursor::string_room() const {
  if (schema_ == nullptr) return JsonSchema::kUnbounded;
  int64_t room = -1;
  for (const Config& c : configs_) {
    if (c.empty()) return -1;
    const Frame& f = c.back();
    const JsonSchema::Node& n = node_of(f);
    int64_t r = -1;
    if (f.kind == JsonSchema::kObject) {  // inside a key
      r = n.additional >= 0 ? JsonSchema::kUnbounded : -1;
    } else if (f.kind == JsonSchema::kString && !n.has_literals && n.pattern < 0) {
      r = n.max_length == JsonSchema::kUnbounded ? JsonSchema::kUnbounded : n.max_length - f.count;
    }
    if (r < 0) return -1;
    room = std::max(room, r);
  }
  return room;
}

}  // namespace tandem
