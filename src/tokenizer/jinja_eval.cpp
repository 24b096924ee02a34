// Tree-walking evaluator for parsed chat templates: scopes (a for loop opens one, macros see the
// template globals), loop.* variables, namespaces, macros, break/continue, and Python operator
// semantics. Errors carry the template line of the node being evaluated.
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/jinja.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_builtins.h"

namespace tandem::tok::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(const Value& context) {
    scopes_.emplace_back();
    for (const auto& [k, v] : context.dict->items) scopes_.back()[k] = v;
  }

  Flow render(const Body& body, std::string& out) {
    for (const auto& n : body) {
      Flow f = exec(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  Flow exec(const Node& n, std::string& out) {
    line_ = n.line;
    switch (n.type) {
      case Node::Type::kText:
        out += n.text;
        return Flow::kNormal;
      case Node::Type::kOutput:
        out += to_str(eval(*n.expr));
        return Flow::kNormal;
      case Node::Type::kIf:
        for (size_t k = 0; k < n.conds.size(); ++k) {
          if (truthy(eval(*n.conds[k]))) return render(n.bodies[k], out);
        }
        if (n.bodies.size() > n.conds.size()) return render(n.bodies.back(), out);
        return Flow::kNormal;
      case Node::Type::kFor:
        return exec_for(n, out);
      case Node::Type::kSet:
        exec_set(n);
        return Flow::kNormal;
      case Node::Type::kMacro:
        define_macro(n);
        return Flow::kNormal;
      case Node::Type::kBreak:
        return Flow::kBreak;
      case Node::Type::kContinue:
        return Flow::kContinue;
      case Node::Type::kBlockWrap:
        return render(n.bodies[0], out);
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    List items = iterate(v);
    TANDEM_CHECK(items.size() == targets.size(),
                 "chat template line {}: cannot unpack {} values into {} names", line_,
                 items.size(), targets.size());
    for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = items[k];
  }

  Flow exec_for(const Node& n, std::string& out) {
    Value seq = eval(*n.expr);
    TANDEM_CHECK(!seq.is_none(), "chat template line {}: 'NoneType' object is not iterable",
                 n.line);
    List items = iterate(seq);
    scopes_.emplace_back();
    if (n.cond) {  // `for x in xs if cond`: loop.* counts only the kept items
      List kept;
      for (const auto& it : items) {
        assign(n.targets, it);
        if (truthy(eval(*n.cond))) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      Dict loop;
      loop.set("index0", Value::integer(k));
      loop.set("index", Value::integer(k + 1));
      loop.set("revindex", Value::integer(len - k));
      loop.set("revindex0", Value::integer(len - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == len - 1));
      loop.set("length", Value::integer(len));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[k - 1] : Value::undefined("loop.previtem"));
      loop.set("nextitem", k + 1 < len ? items[k + 1] : Value::undefined("loop.nextitem"));
      Value lv = Value::new_dict(std::move(loop));
      lv.kind = Kind::kNamespace;  // attribute access only, no dict methods
      scopes_.back()["loop"] = lv;
      assign(n.targets, items[k]);
      Flow f = render(n.bodies[0], out);
      if (f == Flow::kBreak) break;
    }
    if (len == 0 && n.bodies.size() > 1) render(n.bodies[1], out);
    scopes_.pop_back();
    return Flow::kNormal;
  }

  void exec_set(const Node& n) {
    Value v;
    if (n.expr) {
      v = eval(*n.expr);
    } else {
      std::string captured;
      render(n.bodies[0], captured);
      v = Value::string(captured);
    }
    if (!n.attr.empty()) {
      Value target = lookup(n.targets[0]);
      TANDEM_CHECK(target.kind == Kind::kNamespace,
                   "chat template line {}: cannot assign attribute '{}' on {} (only a namespace)",
                   n.line, n.attr, kind_name(target.kind));
      target.dict->set(n.attr, v);
      return;
    }
    assign(n.targets, v);
  }

  void define_macro(const Node& n) {
    const Node* node = &n;
    Value fn = Value::function([this, node](CallArgs& a) -> Value {
      // Macros see the template globals plus their own arguments, not the caller's locals.
      std::vector<Scope> saved(scopes_.begin() + 1, scopes_.end());
      scopes_.resize(1);
      scopes_.emplace_back();
      TANDEM_CHECK(a.positional.size() <= node->params.size(),
                   "chat template line {}: macro '{}' takes {} arguments, got {}", node->line,
                   node->text, node->params.size(), a.positional.size());
      for (size_t k = 0; k < node->params.size(); ++k) {
        const auto& [pname, def] = node->params[k];
        const Value* kw = a.kw(pname);
        Value v = k < a.positional.size() ? a.positional[k]
                  : kw                    ? *kw
                  : def                   ? eval(*def)
                                          : Value::undefined(pname);
        scopes_.back()[pname] = v;
      }
      std::string out;
      int line = line_;
      render(node->bodies[0], out);
      line_ = line;
      scopes_.resize(1);
      scopes_.insert(scopes_.end(), saved.begin(), saved.end());
      return Value::string(out);
    });
    scopes_.back()[n.text] = fn;
  }

  Value lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return make_global(name);
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const Error& err) {
      std::string msg = err.what();
      if (msg.rfind("chat template", 0) == 0) throw;
      fail("chat template line {}: {}", e.line, msg);
    }
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
    for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v));
    return a;
  }

  Value eval_inner(const Expr& e) {
    switch (e.type) {
      case Expr::Type::kLiteral:
        return e.value;
      case Expr::Type::kName: {
        Value v = lookup(e.name);
        if (v.is_undefined()) v.s = e.name;
        return v;
      }
      case Expr::Type::kAttr:
        return get_attr(eval(*e.args[0]), e.name);
      case Expr::Type::kItem:
        return get_item(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Type::kSlice: {
        Value parts[3];
        for (int k = 0; k < 3; ++k) {
          if (e.args[k + 1]) parts[k] = eval(*e.args[k + 1]);
        }
        return get_slice(eval(*e.args[0]), parts[0], parts[1], parts[2]);
      }
      case Expr::Type::kCall: {
        Value f = eval(*e.args[0]);
        TANDEM_CHECK(f.kind == Kind::kFunction, "'{}' is not callable ({})",
                     e.args[0]->type == Expr::Type::kName ? e.args[0]->name : e.args[0]->name,
                     f.is_undefined() ? "undefined" : kind_name(f.kind));
        CallArgs a = eval_args(e, 1);
        return (*f.fn)(a);
      }
      case Expr::Type::kFilter: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        return apply_filter(e.name, v, a);
      }
      case Expr::Type::kTest: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        return Value::boolean(apply_test(e.name, v, a) != e.negate);
      }
      case Expr::Type::kUnary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        TANDEM_CHECK(v.is_number(), "bad operand type for unary {}: {}", e.name, kind_name(v.kind));
        if (e.name == "+") return v;
        return v.kind == Kind::kFloat ? Value::real(-v.f)
                                      : Value::integer(-(v.kind == Kind::kBool ? v.b : v.i));
      }
      case Expr::Type::kBinary:
        return eval_binary(e);
      case Expr::Type::kCond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
      case Expr::Type::kList:
      case Expr::Type::kTuple: {
        List l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        Value v = Value::new_list(std::move(l));
        v.tuple = e.type == Expr::Type::kTuple;
        return v;
      }
      case Expr::Type::kDict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          TANDEM_CHECK(key.is_string(), "dict literal keys must be strings");
          d.set(key.s, eval(*e.args[k + 1]));
        }
        return Value::new_dict(std::move(d));
      }
    }
    fail("unknown expression");
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    Value a = eval(*e.args[0]);
    if (op == "and") return truthy(a) ? eval(*e.args[1]) : a;
    if (op == "or") return truthy(a) ? a : eval(*e.args[1]);
    Value b = eval(*e.args[1]);
    if (op == "==") return Value::boolean(equals(a, b));
    if (op == "!=") return Value::boolean(!equals(a, b));
    if (op == "<") return Value::boolean(less(a, b));
    if (op == ">") return Value::boolean(less(b, a));
    if (op == "<=") return Value::boolean(!less(b, a));
    if (op == ">=") return Value::boolean(!less(a, b));
    if (op == "in" || op == "notin") {
      CallArgs args;
      args.positional.push_back(b);
      return Value::boolean(apply_test("in", a, args) == (op == "in"));
    }
    if (op == "~") return Value::string(to_str(a) + to_str(b));
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
      if (a.is_list() && b.is_list()) {
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::new_list(std::move(l));
      }
    }
    if (op == "*" && a.is_string() && b.kind == Kind::kInt) {
      std::string s;
      for (int64_t k = 0; k < b.i; ++k) s += a.s;
      return Value::string(s);
    }
    TANDEM_CHECK(a.is_number() && b.is_number(), "unsupported operand types for {}: {} and {}", op,
                 kind_name(a.kind), kind_name(b.kind));
    bool real = a.kind == Kind::kFloat || b.kind == Kind::kFloat || op == "/";
    double x = a.as_double(), y = b.as_double();
    int64_t p = a.kind == Kind::kBool ? a.b : a.i, q = b.kind == Kind::kBool ? b.b : b.i;
    if ((op == "/" || op == "//" || op == "%") && y == 0) fail("division by zero");
    if (op == "+") return real ? Value::real(x + y) : Value::integer(p + q);
    if (op == "-") return real ? Value::real(x - y) : Value::integer(p - q);
    if (op == "*") return real ? Value::real(x * y) : Value::integer(p * q);
    if (op == "/") return Value::real(x / y);
    if (op == "//") {
      if (real) return Value::real(std::floor(x / y));
      int64_t d = p / q;
      return Value::integer((p % q != 0 && ((p < 0) != (q < 0))) ? d - 1 : d);
    }
    if (op == "%") {
      if (real) return Value::real(x - std::floor(x / y) * y);
      int64_t m = p % q;
      return Value::integer((m != 0 && ((m < 0) != (q < 0))) ? m + q : m);
    }
    if (op == "**") {
      if (real || q < 0) return Value::real(std::pow(x, y));
      int64_t r = 1;
      for (int64_t k = 0; k < q; ++k) r *= p;
      return Value::integer(r);
    }
    fail("unsupported operator '{}'", op);
  }

  std::vector<Scope> scopes_;
  int line_ = 0;
};

}  // namespace

struct Template::Impl {
  Body body;
};

Template::Template(const std::string& source) : impl_(std::make_unique<Impl>()) {
  impl_->body = parse_template(source);
}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& context) const {
  TANDEM_CHECK(context.kind == Kind::kDict, "chat template context must be a dict");
  Interpreter in(context);
  std::string out;
  in.render(impl_->body, out);
  return out;
}

}  // namespace tandem::tok::jinja
