// Built-in filters, tests, methods of str/dict/list and global functions of the chat-template
// interpreter, with jinja2 / Python semantics. The set of names is fixed and checked by the parser.
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace tandem::tok::jinja {

Value apply_filter(const std::string& name, const Value& v, CallArgs& args);
bool apply_test(const std::string& name, const Value& v, CallArgs& args);
// obj.name: a mapping key, a bound method of str/dict/list, or Undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key] with Python indexing (negative list indices, missing keys give Undefined).
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; null parts are passed as Undefined.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Global functions: namespace, range, dict, raise_exception, strftime_now.
Value make_global(const std::string& name);
// Length in Python terms (code points for strings).
int64_t py_len(const Value& v);
// Items a for loop iterates (dict keys, string characters, list items).
List iterate(const Value& v);

}  // namespace tandem::tok::jinja
