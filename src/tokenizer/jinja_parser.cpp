// Recursive-descent parser for the chat-template Jinja subset, following jinja2's grammar and
// operator precedence (condexpr < or < and < not < compare < + - < ~ < * / // % < ** < unary <
// postfix/filters/tests). Statements: if/elif/else, for (with else and inline if), set (incl.
// namespace attributes and block set), macro, break/continue, generation. Anything else is a
// tandem::Error naming the construct and line.
#include <set>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lexer.h"

namespace tandem::tok::jinja {
namespace {

// Filters and tests the evaluator implements (jinja_builtins.cpp); checked at parse time so an
// unsupported one is reported before rendering starts.
const std::set<std::string> kFilters = {
    "abs",     "attr",    "capitalize", "count",  "d",      "default",    "dictsort", "e",
    "escape",  "first",   "float",      "indent", "int",    "items",      "join",     "last",
    "length",  "list",    "lower",      "map",    "max",    "min",        "reject",   "rejectattr",
    "replace", "reverse", "round",      "safe",   "select", "selectattr", "sort",     "string",
    "sum",     "title",   "tojson",     "trim",   "unique", "upper",      "wordcount"};
const std::set<std::string> kTests = {
    "boolean",  "callable", "defined", "divisibleby", "eq",      "equalto", "escaped",
    "even",     "false",    "float",   "ge",          "gt",      "in",      "integer",
    "iterable", "le",       "lower",   "lt",          "mapping", "ne",      "none",
    "number",   "odd",      "sameas",  "sequence",    "string",  "true",    "undefined",
    "upper",    "==",       "!=",      "<",           "<=",      ">",       ">="};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse_all() {
    std::string end;
    Body b = parse_body({}, &end);
    return b;
  }

 private:
  // ---- statements ------------------------------------------------------------------------
  // Parses nodes until a block tag whose keyword is in `ends` (consumed; its keyword in *end).
  Body parse_body(const std::set<std::string>& ends, std::string* end) {
    Body body;
    while (seg_ < segs_.size()) {
      Segment& s = segs_[seg_];
      if (s.type == Segment::Type::kText) {
        auto n = node(Node::Type::kText, s.line);
        n->text = s.text;
        body.push_back(std::move(n));
        ++seg_;
        continue;
      }
      toks_ = &s.tokens;
      tok_ = 0;
      ++seg_;
      if (s.type == Segment::Type::kVar) {
        auto n = node(Node::Type::kOutput, s.line);
        n->expr = parse_expr();
        expect_end();
        body.push_back(std::move(n));
        continue;
      }
      const Token& kw = peek();
      TANDEM_CHECK(kw.type == Token::Type::kName, "chat template line {}: empty block tag", s.line);
      if (ends.count(kw.text)) {
        *end = kw.text;
        next();
        return body;
      }
      body.push_back(parse_statement());
    }
    TANDEM_CHECK(ends.empty(), "chat template: missing '{{% {} %}}' at end of template",
                 *ends.begin());
    return body;
  }

  NodePtr parse_statement() {
    Token kw = next();
    int line = kw.line;
    const std::string& k = kw.text;
    if (k == "if") {
      auto n = node(Node::Type::kIf, line);
      n->conds.push_back(parse_expr());
      expect_end();
      std::string end;
      while (true) {
        n->bodies.push_back(parse_body({"elif", "else", "endif"}, &end));
        if (end == "elif") {
          n->conds.push_back(parse_expr());
          expect_end();
        } else if (end == "else") {
          expect_end();
          n->bodies.push_back(parse_body({"endif"}, &end));
          expect_end();
          break;
        } else {
          expect_end();
          break;
        }
      }
      return n;
    }
    if (k == "for") {
      auto n = node(Node::Type::kFor, line);
      n->targets = parse_targets();
      expect_name("in");
      n->expr = parse_expr(/*allow_cond=*/false);
      if (peek().type == Token::Type::kName && peek().text == "if") {
        next();
        n->cond = parse_expr(false);
      }
      TANDEM_CHECK(!(peek().type == Token::Type::kName && peek().text == "recursive"),
                   "chat template line {}: unsupported construct 'for ... recursive'", line);
      expect_end();
      std::string end;
      n->bodies.push_back(parse_body({"else", "endfor"}, &end));
      expect_end();
      if (end == "else") {
        n->bodies.push_back(parse_body({"endfor"}, &end));
        expect_end();
      }
      return n;
    }
    if (k == "set") {
      auto n = node(Node::Type::kSet, line);
      n->targets = parse_targets();
      if (n->targets.size() == 1 && is_op(".")) {
        next();
        n->attr = expect_name_any();
      }
      if (is_op("=")) {
        next();
        n->expr = parse_tuple_or_expr();
        expect_end();
      } else {  // block set: {% set x %}...{% endset %}
        expect_end();
        std::string end;
        n->bodies.push_back(parse_body({"endset"}, &end));
        expect_end();
      }
      return n;
    }
    if (k == "macro") {
      auto n = node(Node::Type::kMacro, line);
      n->text = expect_name_any();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name_any();
        ExprPtr def;
        if (is_op("=")) {
          next();
          def = parse_expr();
        }
        n->params.emplace_back(p, std::move(def));
        if (!is_op(")")) expect_op(",");
      }
      next();
      expect_end();
      std::string end;
      n->bodies.push_back(parse_body({"endmacro"}, &end));
      expect_end();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = node(k == "break" ? Node::Type::kBreak : Node::Type::kContinue, line);
      expect_end();
      return n;
    }
    if (k == "generation") {  // transformers' AssistantTracker: renders its body unchanged
      auto n = node(Node::Type::kBlockWrap, line);
      expect_end();
      std::string end;
      n->bodies.push_back(parse_body({"endgeneration"}, &end));
      expect_end();
      return n;
    }
    fail("chat template line {}: unsupported construct '{{% {} %}}'", line, k);
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> t;
    bool paren = is_op("(");
    if (paren) next();
    t.push_back(expect_name_any());
    while (is_op(",")) {
      next();
      t.push_back(expect_name_any());
    }
    if (paren) expect_op(")");
    return t;
  }

  // ---- expressions -----------------------------------------------------------------------
  ExprPtr parse_tuple_or_expr() {
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = expr(Expr::Type::kTuple, first->line);
    t->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      t->args.push_back(parse_expr());
    }
    return t;
  }

  ExprPtr parse_expr(bool allow_cond = true) {
    ExprPtr e = parse_or();
    if (!allow_cond) return e;
    while (peek().type == Token::Type::kName && peek().text == "if") {
      auto c = expr(Expr::Type::kCond, next().line);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      if (peek().type == Token::Type::kName && peek().text == "else") {
        next();
        c->args.push_back(parse_expr());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto b = expr(Expr::Type::kBinary, line);
    b->name = op;
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) l = binary("or", std::move(l), (next(), parse_and()), l->line);
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) l = binary("and", std::move(l), (next(), parse_not()), l->line);
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      auto u = expr(Expr::Type::kUnary, next().line);
      u->name = "not";
      u->args.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr l = parse_math1();
    while (true) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op("<=") || is_op(">") || is_op(">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && tok_ + 1 < toks_->size() &&
                 (*toks_)[tok_ + 1].type == Token::Type::kName && (*toks_)[tok_ + 1].text == "in") {
        next();
        next();
        op = "notin";
      } else {
        return l;
      }
      // Chained comparisons (a < b < c) are rare in templates; they evaluate left to right here.
      l = binary(op, std::move(l), parse_math1(), l->line);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = next().text;
      l = binary(op, std::move(l), parse_concat(), l->line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) l = binary("~", std::move(l), (next(), parse_math2()), l->line);
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = next().text;
      l = binary(op, std::move(l), parse_pow(), l->line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary();
    while (is_op("**")) l = binary("**", std::move(l), (next(), parse_unary()), l->line);
    return l;
  }
  ExprPtr parse_unary(bool with_filter = true) {
    if (is_op("-") || is_op("+")) {
      auto u = expr(Expr::Type::kUnary, peek().line);
      u->name = next().text;
      u->args.push_back(parse_unary(false));
      return with_filter ? parse_filters(std::move(u)) : std::move(u);
    }
    ExprPtr e = parse_postfix(parse_primary());
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    Token t = next();
    auto e = expr(Expr::Type::kLiteral, t.line);
    switch (t.type) {
      case Token::Type::kString: {
        std::string s = t.text;
        while (peek().type == Token::Type::kString) s += next().text;  // implicit concatenation
        e->value = Value::string(s);
        return e;
      }
      case Token::Type::kInt:
        e->value = Value::integer(t.i);
        return e;
      case Token::Type::kFloat:
        e->value = Value::real(t.f);
        return e;
      case Token::Type::kName:
        if (t.text == "true" || t.text == "True")
          e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          e->value = Value::none();
        else {
          e->type = Expr::Type::kName;
          e->name = t.text;
        }
        return e;
      case Token::Type::kOp:
        if (t.text == "(") {
          if (is_op(")")) {
            next();
            e->type = Expr::Type::kTuple;
            return e;
          }
          ExprPtr inner = parse_expr();
          if (is_op(",")) {
            e->type = Expr::Type::kTuple;
            e->args.push_back(std::move(inner));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              e->args.push_back(parse_expr());
            }
            inner = std::move(e);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          e->type = Expr::Type::kList;
          while (!is_op("]")) {
            e->args.push_back(parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          next();
          return e;
        }
        if (t.text == "{") {
          e->type = Expr::Type::kDict;
          while (!is_op("}")) {
            e->args.push_back(parse_expr());
            expect_op(":");
            e->args.push_back(parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          next();
          return e;
        }
        break;
      default:
        break;
    }
    fail("chat template line {}: unexpected '{}' in expression", t.line,
         t.type == Token::Type::kEnd ? std::string("end of tag") : t.text);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        auto a = expr(Expr::Type::kAttr, line);
        Token n = next();
        TANDEM_CHECK(n.type == Token::Type::kName || n.type == Token::Type::kInt,
                     "chat template line {}: expected attribute name after '.'", line);
        a->name = n.text;
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        auto c = expr(Expr::Type::kCall, peek().line);
        c->args.push_back(std::move(e));
        parse_call_args(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    int line = next().line;  // '['
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        next();
        slice = true;
        ++part;
        TANDEM_CHECK(part < 3, "chat template line {}: too many ':' in slice", line);
        continue;
      }
      parts[part] = parse_expr();
    }
    next();
    auto e = expr(slice ? Expr::Type::kSlice : Expr::Type::kItem, line);
    e->args.push_back(std::move(target));
    if (slice) {
      for (auto& p : parts) e->args.push_back(std::move(p));
    } else {
      TANDEM_CHECK(parts[0] != nullptr, "chat template line {}: empty subscript", line);
      e->args.push_back(std::move(parts[0]));
    }
    return e;
  }

  void parse_call_args(Expr* call) {
    expect_op("(");
    while (!is_op(")")) {
      TANDEM_CHECK(!is_op("*") && !is_op("**"),
                   "chat template line {}: unsupported construct '*args/**kwargs' in a call",
                   peek().line);
      if (peek().type == Token::Type::kName && tok_ + 1 < toks_->size() &&
          (*toks_)[tok_ + 1].type == Token::Type::kOp && (*toks_)[tok_ + 1].text == "=") {
        std::string k = next().text;
        next();
        call->kwargs.emplace_back(k, parse_expr());
      } else {
        call->args.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    next();
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        int line = next().line;
        auto f = expr(Expr::Type::kFilter, line);
        f->name = expect_name_any();
        TANDEM_CHECK(kFilters.count(f->name), "chat template line {}: unsupported filter '{}'",
                     line, f->name);
        f->args.push_back(std::move(e));
        if (is_op("(")) parse_call_args(f.get());
        e = std::move(f);
      } else if (is_name("is")) {
        int line = next().line;
        auto t = expr(Expr::Type::kTest, line);
        if (is_name("not")) {
          next();
          t->negate = true;
        }
        Token n = next();
        t->name = n.text;
        TANDEM_CHECK(kTests.count(t->name), "chat template line {}: unsupported test '{}'", line,
                     t->name);
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          parse_call_args(t.get());
        } else if (peek().type == Token::Type::kString || peek().type == Token::Type::kInt ||
                   peek().type == Token::Type::kFloat ||
                   (peek().type == Token::Type::kName && !is_name("and") && !is_name("or") &&
                    !is_name("else") && !is_name("if") && !is_name("is") && !is_name("not") &&
                    !is_name("in"))) {
          t->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  // ---- token helpers -----------------------------------------------------------------------
  const Token& peek() const { return (*toks_)[tok_]; }
  Token next() {
    Token t = (*toks_)[tok_];
    if (t.type != Token::Type::kEnd) ++tok_;
    return t;
  }
  bool is_op(const char* op) const { return peek().type == Token::Type::kOp && peek().text == op; }
  bool is_name(const char* n) const {
    return peek().type == Token::Type::kName && peek().text == n;
  }
  void expect_op(const char* op) {
    TANDEM_CHECK(is_op(op), "chat template line {}: expected '{}' but found '{}'", peek().line, op,
                 peek().type == Token::Type::kEnd ? std::string("end of tag") : peek().text);
    next();
  }
  void expect_name(const char* n) {
    TANDEM_CHECK(is_name(n), "chat template line {}: expected '{}'", peek().line, n);
    next();
  }
  std::string expect_name_any() {
    TANDEM_CHECK(peek().type == Token::Type::kName, "chat template line {}: expected a name",
                 peek().line);
    return next().text;
  }
  void expect_end() {
    TANDEM_CHECK(peek().type == Token::Type::kEnd,
                 "chat template line {}: unexpected '{}' before end of tag", peek().line,
                 peek().text);
  }
  static NodePtr node(Node::Type t, int line) {
    auto n = std::make_unique<Node>();
    n->type = t;
    n->line = line;
    return n;
  }
  static ExprPtr expr(Expr::Type t, int line) {
    auto e = std::make_unique<Expr>();
    e->type = t;
    e->line = line;
    return e;
  }

  std::vector<Segment> segs_;
  size_t seg_ = 0;
  std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(lex_template(source)).parse_all(); }

}  // namespace tandem::tok::jinja
