// Syntax tree of the Jinja subset that chat templates use, produced by jinja_parser.cpp and walked
// by jinja_eval.cpp. Every node keeps its template line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace tandem::tok::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kLiteral,  // value
    kName,     // name
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null parts are absent)
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..]); negate
    kUnary,    // op args[0]: "not", "-", "+"
    kBinary,   // args[0] op args[1]: or and == != < <= > >= in notin + - * / // % ** ~
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
    kList,     // [args...]
    kTuple,    // (args...)
    kDict,     // {args[0]: args[1], ...}
  };
  Type type;
  int line = 0;
  std::string name;  // name, attribute, filter, test or operator
  Value value;
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Type {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // conds[k] -> bodies[k]; bodies.back() is else when bodies.size() > conds.size()
    kFor,     // for targets in expr [if cond]: bodies[0], else bodies[1]
    kSet,     // set targets (or target.attr) = expr; or block set when expr is null
    kMacro,   // macro name(params): bodies[0]
    kBreak,
    kContinue,
    kBlockWrap,  // {% generation %} ... : bodies[0] rendered as is
  };
  Type type;
  int line = 0;
  std::string text;                  // kText; kMacro / kSet name
  std::string attr;                  // kSet: namespace attribute
  std::vector<std::string> targets;  // kFor / kSet names
  ExprPtr expr;                      // kOutput, kFor iterable, kSet value
  ExprPtr cond;                      // kFor filter
  std::vector<ExprPtr> conds;        // kIf
  std::vector<Body> bodies;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
};

// Parses template source; an unsupported construct is a tandem::Error naming it and its line.
Body parse_template(const std::string& source);

}  // namespace tandem::tok::jinja
