// Jinja filters for chat templates (jinja2 semantics; tojson as transformers overrides it:
// json.dumps with ensure_ascii=False, no HTML escaping). The parser rejects any other name.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja_builtins.h"

namespace tandem::tok::jinja {
namespace {

Value arg(CallArgs& a, size_t pos, const char* name, const Value& def) {
  if (const Value* v = a.kw(name)) return *v;
  return pos < a.positional.size() ? a.positional[pos] : def;
}

Value item_attr(const Value& item, const Value& attr) {
  if (attr.kind == Kind::kInt) return get_item(item, attr);
  return get_attr(item, to_str(attr));
}

// select/reject/selectattr/rejectattr: keep items whose test result equals `keep`.
Value filter_items(const Value& v, CallArgs& a, bool keep, bool by_attr) {
  List out;
  size_t first = by_attr ? 1 : 0;
  std::string test = a.positional.size() > first ? to_str(a.positional[first]) : "";
  CallArgs test_args;
  for (size_t k = first + 1; k < a.positional.size(); ++k)
    test_args.positional.push_back(a.positional[k]);
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? item_attr(item, a.positional.at(0)) : item;
    bool ok = test.empty() ? truthy(x) : apply_test(test, x, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value::new_list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  static const Value kNone = Value::none();
  static const Value kUndef;
  if (name == "length" || name == "count") return Value::integer(py_len(v));
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
  if (name == "e" || name == "escape") return Value::string(html_escape(to_str(v)));
  if (name == "tojson") {
    const Value& indent = arg(a, 1, "indent", kNone);
    return Value::string(to_json(v, truthy(arg(a, 0, "ensure_ascii", Value::boolean(false))),
                                 indent.kind == Kind::kInt ? static_cast<int>(indent.i) : -1,
                                 truthy(arg(a, 3, "sort_keys", Value::boolean(false)))));
  }
  if (name == "trim") {
    CallArgs m;
    m.positional.push_back(arg(a, 0, "chars", kNone));
    TANDEM_CHECK(v.is_string(), "trim expects a string, got {}", kind_name(v.kind));
    return (*get_attr(v, "strip").fn)(m);
  }
  if (name == "items") {
    TANDEM_CHECK(v.is_mapping() || v.is_undefined(), "items expects a mapping, got {}",
                 kind_name(v.kind));
    List out;
    if (v.is_mapping()) {
      for (const auto& [k, x] : v.dict->items) {
        out.push_back(Value::new_list({Value::string(k), x}));
        out.back().tuple = true;
      }
    }
    return Value::new_list(std::move(out));
  }
  if (name == "dictsort") {
    Value items = apply_filter("items", v, a);
    std::stable_sort(items.list->begin(), items.list->end(), [](const Value& x, const Value& y) {
      return less((*x.list)[0], (*y.list)[0]);
    });
    return items;
  }
  if (name == "d" || name == "default") {
    const Value& def = arg(a, 0, "default_value", Value::string(""));
    bool boolean = truthy(arg(a, 1, "boolean", Value::boolean(false)));
    return (v.is_undefined() || (boolean && !truthy(v))) ? def : v;
  }
  if (name == "first" || name == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    std::string sep = to_str(arg(a, 0, "d", Value::string(""))), out;
    const Value& attr = arg(a, 1, "attribute", kNone);
    List items = iterate(v);
    for (size_t k = 0; k < items.size(); ++k) {
      out += (k ? sep : "") + to_str(attr.is_none() ? items[k] : item_attr(items[k], attr));
    }
    return Value::string(out);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    CallArgs none;
    return (*get_attr(Value::string(to_str(v)), name).fn)(none);
  }
  if (name == "replace") {
    CallArgs m;
    m.positional = {arg(a, 0, "old", kUndef), arg(a, 1, "new", kUndef),
                    arg(a, 2, "count", Value::integer(-1))};
    return (*get_attr(Value::string(to_str(v)), "replace").fn)(m);
  }
  if (name == "list") return Value::new_list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      return get_slice(v, kUndef, kUndef, Value::integer(-1));
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::new_list(std::move(items));
  }
  if (name == "unique") {
    List out;
    for (const auto& x : iterate(v)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equals(x, y); }))
        out.push_back(x);
    }
    return Value::new_list(std::move(out));
  }
  if (name == "sort" || name == "min" || name == "max") {
    List items = iterate(v);
    const Value& attr = arg(a, name == "sort" ? 2 : 1, "attribute", kNone);
    auto key = [&](const Value& x) { return attr.is_none() ? x : item_attr(x, attr); };
    std::stable_sort(items.begin(), items.end(),
                     [&](const Value& x, const Value& y) { return less(key(x), key(y)); });
    if (name == "sort") {
      if (truthy(arg(a, 0, "reverse", Value::boolean(false))))
        std::reverse(items.begin(), items.end());
      return Value::new_list(std::move(items));
    }
    if (items.empty()) return Value::undefined();
    return name == "min" ? items.front() : items.back();
  }
  if (name == "sum") {
    Value total = Value::integer(0);
    for (const auto& x : iterate(v)) {
      if (x.kind == Kind::kFloat || total.kind == Kind::kFloat)
        total = Value::real(total.as_double() + x.as_double());
      else
        total = Value::integer(total.i + (x.kind == Kind::kBool ? x.b : x.i));
    }
    return total;
  }
  if (name == "int") {
    if (v.kind == Kind::kInt) return v;
    if (v.is_number()) return Value::integer(static_cast<int64_t>(v.as_double()));
    try {
      return Value::integer(std::stoll(to_str(v)));
    } catch (const std::exception&) {
      return arg(a, 0, "default", Value::integer(0));
    }
  }
  if (name == "float") {
    if (v.is_number()) return Value::real(v.as_double());
    try {
      return Value::real(std::stod(to_str(v)));
    } catch (const std::exception&) {
      return arg(a, 0, "default", Value::real(0));
    }
  }
  if (name == "abs") {
    return v.kind == Kind::kFloat ? Value::real(std::fabs(v.f)) : Value::integer(std::llabs(v.i));
  }
  if (name == "round") {
    int64_t prec = arg(a, 0, "precision", Value::integer(0)).i;
    double scale = std::pow(10.0, static_cast<double>(prec));
    return Value::real(std::round(v.as_double() * scale) / scale);
  }
  if (name == "map") {
    List out;
    const Value* attr = a.kw("attribute");
    for (const auto& x : iterate(v)) {
      if (attr) {
        out.push_back(item_attr(x, *attr));
      } else {
        CallArgs rest;
        for (size_t k = 1; k < a.positional.size(); ++k) rest.positional.push_back(a.positional[k]);
        out.push_back(apply_filter(to_str(a.positional.at(0)), x, rest));
      }
    }
    return Value::new_list(std::move(out));
  }
  if (name == "select") return filter_items(v, a, true, false);
  if (name == "reject") return filter_items(v, a, false, false);
  if (name == "selectattr") return filter_items(v, a, true, true);
  if (name == "rejectattr") return filter_items(v, a, false, true);
  if (name == "attr") return get_attr(v, to_str(a.positional.at(0)));
  if (name == "wordcount") {
    CallArgs none;
    return Value::integer(py_len((*get_attr(Value::string(to_str(v)), "split").fn)(none)));
  }
  if (name == "indent") {
    int64_t width = arg(a, 0, "width", Value::integer(4)).i;
    bool first = truthy(arg(a, 1, "first", Value::boolean(false)));
    std::string pad(static_cast<size_t>(width), ' '), s = to_str(v), out;
    bool line_start = first;
    for (char c : s) {
      if (line_start && c != '\n') out += pad;
      line_start = false;
      out += c;
      if (c == '\n') line_start = true;
    }
    return Value::string(out);
  }
  fail("unsupported filter '{}'", name);
}

}  // namespace tandem::tok::jinja
