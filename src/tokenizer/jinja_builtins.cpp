// Filters, tests, str/dict methods and globals for chat templates, each with the behaviour of its
// jinja2 or Python counterpart as transformers configures them (tojson = json.dumps with
// ensure_ascii=False). Names outside this file are rejected by the parser.
#include "tokenizer/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tandem::tok::jinja {
namespace {

Value arg(CallArgs& a, size_t pos, const char* name, const Value& def) {
  if (const Value* v = a.kw(name)) return *v;
  return pos < a.positional.size() ? a.positional[pos] : def;
}

const std::string& need_str(const Value& v, const char* what) {
  TANDEM_CHECK(v.is_string(), "{} expects a string, got {}", what, kind_name(v.kind));
  return v.s;
}

// Python str.strip family; chars == Undefined/None means whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = to_u32(s);
  std::u32string set = chars.is_string() ? to_u32(chars.s) : std::u32string();
  auto drop = [&](char32_t c) {
    return chars.is_string() ? set.find(c) != std::u32string::npos : is_py_space(c);
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && drop(u[b])) ++b;
  }
  if (right) {
    while (e > b && drop(u[e - 1])) --e;
  }
  return to_utf8(u.substr(b, e - b));
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  std::string out;
  bool word_start = true;
  size_t idx = 0;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<utf8proc_int32_t>(next_code_point(s, i));
    bool alpha = utf8proc_category(c) <= UTF8PROC_CATEGORY_LO &&
                 utf8proc_category(c) >= UTF8PROC_CATEGORY_LU;
    bool up = mode == 1 || (mode == 2 && word_start) || (mode == 3 && idx == 0);
    append_utf8(static_cast<char32_t>(up ? utf8proc_toupper(c) : utf8proc_tolower(c)), out);
    word_start = !alpha;
    ++idx;
  }
  return out;
}

Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (!sep.is_string()) {  // whitespace split, runs collapsed, no empty strings
    std::u32string u = to_u32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && is_py_space(u[e - 1])) --e;
        out.push_back(Value::string(to_utf8(u.substr(i, e - i))));
        break;
      }
      size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      out.push_back(Value::string(to_utf8(u.substr(i, j - i))));
      i = j;
    }
    return Value::new_list(std::move(out));
  }
  TANDEM_CHECK(!sep.s.empty(), "split: empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t at = s.find(sep.s, pos);
    if (at == std::string::npos) break;
    out.push_back(Value::string(s.substr(pos, at - pos)));
    pos = at + sep.s.size();
  }
  out.push_back(Value::string(s.substr(pos)));
  return Value::new_list(std::move(out));
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  auto one = [&](const std::string& p) {
    return p.size() <= s.size() && (start ? s.compare(0, p.size(), p) == 0
                                          : s.compare(s.size() - p.size(), p.size(), p) == 0);
  };
  if (what.is_list()) {
    for (const auto& p : *what.list) {
      if (one(need_str(p, "startswith/endswith"))) return true;
    }
    return false;
  }
  return one(need_str(what, "startswith/endswith"));
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    int64_t count) {
  std::string out;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t at = from.empty() ? (pos <= s.size() ? pos : std::string::npos) : s.find(from, pos);
    if (at == std::string::npos) break;
    out += s.substr(pos, at - pos) + to;
    if (from.empty()) {
      if (at == s.size()) return out;
      size_t next = at;
      next_code_point(s, next);
      out += s.substr(at, next - at);
      pos = next;
    } else {
      pos = at + from.size();
    }
  }
  return out + s.substr(pos);
}

Value bound(Value self, const std::string& name) {
  return Value::function([self, name](CallArgs& a) -> Value {
    static const Value kNone = Value::none();
    static const Value kUndef;
    if (self.is_string()) {
      const std::string& s = self.s;
      if (name == "startswith" || name == "endswith") {
        return Value::boolean(starts_or_ends(s, arg(a, 0, "prefix", kNone), name == "startswith"));
      }
      if (name == "strip") return Value::string(strip(s, arg(a, 0, "chars", kNone), true, true));
      if (name == "lstrip") return Value::string(strip(s, arg(a, 0, "chars", kNone), true, false));
      if (name == "rstrip") return Value::string(strip(s, arg(a, 0, "chars", kNone), false, true));
      if (name == "split") {
        const Value& m = arg(a, 1, "maxsplit", Value::integer(-1));
        return split(s, arg(a, 0, "sep", kNone), m.i);
      }
      if (name == "upper") return Value::string(map_case(s, 1));
      if (name == "lower") return Value::string(map_case(s, 0));
      if (name == "title") return Value::string(map_case(s, 2));
      if (name == "capitalize") return Value::string(map_case(s, 3));
      if (name == "replace") {
        return Value::string(replace(s, need_str(arg(a, 0, "old", kUndef), "replace"),
                                     need_str(arg(a, 1, "new", kUndef), "replace"),
                                     arg(a, 2, "count", Value::integer(-1)).i));
      }
      if (name == "find") {
        size_t at = s.find(need_str(arg(a, 0, "sub", kUndef), "find"));
        return Value::integer(at == std::string::npos ? -1
                                                      : py_len(Value::string(s.substr(0, at))));
      }
      if (name == "count") {
        const std::string& sub = need_str(arg(a, 0, "sub", kUndef), "count");
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos && !sub.empty();
             at = s.find(sub, at + sub.size()))
          ++n;
        return Value::integer(n);
      }
      if (name == "join") {
        std::string out;
        List items = iterate(arg(a, 0, "iterable", kUndef));
        for (size_t k = 0; k < items.size(); ++k) out += (k ? s : "") + need_str(items[k], "join");
        return Value::string(out);
      }
      if (name == "isdigit" || name == "isspace" || name == "isalpha") {
        std::u32string u = to_u32(s);
        bool ok = !u.empty();
        for (char32_t c : u) {
          auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
          if (name == "isspace")
            ok = ok && is_py_space(c);
          else if (name == "isdigit")
            ok = ok && cat == UTF8PROC_CATEGORY_ND;
          else
            ok = ok && cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        }
        return Value::boolean(ok);
      }
    } else if (self.kind == Kind::kDict) {
      if (name == "items") return apply_filter("items", self, a);
      if (name == "keys" || name == "values") {
        List out;
        for (const auto& [k, v] : self.dict->items)
          out.push_back(name == "keys" ? Value::string(k) : v);
        return Value::new_list(std::move(out));
      }
      if (name == "get") {
        const Value* v = self.dict->find(need_str(arg(a, 0, "key", kUndef), "get"));
        return v ? *v : arg(a, 1, "default", kNone);
      }
    }
    fail("unsupported method '{}' of {}", name, kind_name(self.kind));
  });
}

bool is_method(const Value& v, const std::string& n) {
  static const std::vector<std::string> kStr = {
      "startswith", "endswith", "strip",   "lstrip",     "rstrip",  "split",
      "upper",      "lower",    "title",   "capitalize", "replace", "find",
      "count",      "join",     "isdigit", "isspace",    "isalpha"};
  static const std::vector<std::string> kDict = {"items", "keys", "values", "get"};
  const auto& names = v.is_string() ? kStr : kDict;
  return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

int64_t py_len(const Value& v) {
  switch (v.kind) {
    case Kind::kString: {
      int64_t n = 0;
      for (char c : v.s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
      return n;
    }
    case Kind::kList:
      return static_cast<int64_t>(v.list->size());
    case Kind::kDict:
    case Kind::kNamespace:
      return static_cast<int64_t>(v.dict->items.size());
    case Kind::kUndefined:
      return 0;
    default:
      fail("object of type {} has no len()", kind_name(v.kind));
  }
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Kind::kList:
      return *v.list;
    case Kind::kDict: {
      List out;
      for (const auto& kv : v.dict->items) out.push_back(Value::string(kv.first));
      return out;
    }
    case Kind::kString: {
      List out;
      for (size_t i = 0; i < v.s.size();) {
        size_t s = i;
        next_code_point(v.s, i);
        out.push_back(Value::string(v.s.substr(s, i - s)));
      }
      return out;
    }
    case Kind::kUndefined:
      return {};
    default:
      fail("{} object is not iterable", kind_name(v.kind));
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::kDict:
      if (is_method(obj, name)) return bound(obj, name);
      [[fallthrough]];
    case Kind::kNamespace: {
      const Value* v = obj.dict->find(name);
      return v ? *v : Value::undefined(name);
    }
    case Kind::kString:
      if (is_method(obj, name)) return bound(obj, name);
      return Value::undefined(name);
    case Kind::kUndefined:
      fail("'{}' is undefined (while reading attribute '{}')",
           obj.s.empty() ? std::string("value") : obj.s, name);
    default:
      return Value::undefined(name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_mapping()) {
    if (!key.is_string()) return Value::undefined();
    const Value* v = obj.dict->find(key.s);
    return v ? *v : Value::undefined(key.s);
  }
  if (obj.is_list() || obj.is_string()) {
    if (key.is_string()) return get_attr(obj, key.s);
    TANDEM_CHECK(key.kind == Kind::kInt, "indices must be integers, not {}", kind_name(key.kind));
    List items = obj.is_list() ? List() : iterate(obj);
    const List& l = obj.is_list() ? *obj.list : items;
    int64_t n = static_cast<int64_t>(l.size()), k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value::undefined();
    return l[k];
  }
  if (obj.is_undefined())
    fail("'{}' is undefined (while indexing it)", obj.s.empty() ? "value" : obj.s);
  return Value::undefined();
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  TANDEM_CHECK(obj.is_list() || obj.is_string(), "cannot slice {}", kind_name(obj.kind));
  List items = obj.is_list() ? *obj.list : iterate(obj);
  int64_t n = static_cast<int64_t>(items.size());
  int64_t st = step.kind == Kind::kInt ? step.i : 1;
  TANDEM_CHECK(st != 0, "slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t def) {
    if (v.kind != Kind::kInt) return def;
    int64_t k = v.i < 0 ? v.i + n : v.i;
    if (st > 0) return std::clamp<int64_t>(k, 0, n);
    return std::clamp<int64_t>(k, -1, n - 1);
  };
  int64_t b = norm(start, st > 0 ? 0 : n - 1), e = norm(stop, st > 0 ? n : -1);
  List out;
  for (int64_t k = b; st > 0 ? k < e : k > e; k += st) out.push_back(items[k]);
  if (obj.is_list()) return Value::new_list(std::move(out));
  std::string s;
  for (const auto& c : out) s += c.s;
  return Value::string(s);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  static const Value kUndef;
  const Value& x = arg(a, 0, "value", kUndef);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "mapping") return v.kind == Kind::kDict;
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "sequence")
    return v.is_list() || v.is_string() || v.kind == Kind::kDict || v.is_undefined();
  if (name == "callable") return v.kind == Kind::kFunction;
  if (name == "odd" || name == "even") {
    TANDEM_CHECK(v.kind == Kind::kInt, "test '{}' needs an integer", name);
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") return x.i != 0 && v.i % x.i == 0;
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, x);
  if (name == "ne" || name == "!=") return !equals(v, x);
  if (name == "lt" || name == "<") return less(v, x);
  if (name == "le" || name == "<=") return !less(x, v);
  if (name == "gt" || name == ">") return less(x, v);
  if (name == "ge" || name == ">=") return !less(v, x);
  if (name == "sameas") return equals(v, x) && v.kind == x.kind;
  if (name == "lower") return v.is_string() && map_case(v.s, 0) == v.s;
  if (name == "upper") return v.is_string() && map_case(v.s, 1) == v.s;
  if (name == "escaped") return false;
  if (name == "in") {
    if (x.is_string()) return v.is_string() && x.s.find(v.s) != std::string::npos;
    if (x.is_mapping()) return v.is_string() && x.dict->find(v.s) != nullptr;
    for (const auto& e : iterate(x)) {
      if (equals(e, v)) return true;
    }
    return false;
  }
  fail("unsupported test '{}'", name);
}

Value make_global(const std::string& name) {
  if (name == "raise_exception") {
    return Value::function([](CallArgs& a) -> Value {
      fail("chat template raised an exception: {}",
           a.positional.empty() ? std::string() : to_str(a.positional[0]));
    });
  }
  if (name == "namespace" || name == "dict") {
    bool ns = name == "namespace";
    return Value::function([ns](CallArgs& a) {
      Dict d;
      for (const auto& p : a.positional) {
        TANDEM_CHECK(p.kind == Kind::kDict, "{}() takes keyword arguments or a dict",
                     ns ? "namespace" : "dict");
        for (const auto& kv : p.dict->items) d.set(kv.first, kv.second);
      }
      for (const auto& [k, v] : a.keyword) d.set(k, v);
      Value v = Value::new_dict(std::move(d));
      if (ns) v.kind = Kind::kNamespace;
      return v;
    });
  }
  if (name == "range") {
    return Value::function([](CallArgs& a) {
      TANDEM_CHECK(!a.positional.empty() && a.positional.size() <= 3,
                   "range() takes 1 to 3 arguments");
      int64_t b = 0, e = 0, s = 1;
      if (a.positional.size() == 1)
        e = a.positional[0].i;
      else
        b = a.positional[0].i, e = a.positional[1].i;
      if (a.positional.size() == 3) s = a.positional[2].i;
      TANDEM_CHECK(s != 0, "range() step must not be zero");
      List out;
      for (int64_t k = b; s > 0 ? k < e : k > e; k += s) out.push_back(Value::integer(k));
      return Value::new_list(std::move(out));
    });
  }
  if (name == "strftime_now") {
    return Value::function([](CallArgs& a) {
      std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      size_t n = std::strftime(buf, sizeof(buf),
                               need_str(a.positional.at(0), "strftime_now").c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }
  return Value::undefined(name);
}

}  // namespace tandem::tok::jinja
