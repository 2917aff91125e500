// The ONNX translation table: expressions (parser and evaluator) and the table's loader.
#include "graph/onnx_rules.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tofu {
namespace onnxrules {

std::string Value::text() const {
  switch (kind) {
  case Kind::Undef:
    return "undefined";
  case Kind::Num:
    return fmt::format("{}", num);
  case Kind::List:
    return fmt::format("[{}]", fmt::join(list, ", "));
  case Kind::Str:
    return "'" + str + "'";
  }
  return "";
}

class Expr {
public:
  enum class Kind { Num, Str, Name, Call, List, Index, Unary, Binary, Cond };
  Kind kind;
  double num = 0;
  std::string text; ///< Str's value, Name's and Call's identifier, Unary's and Binary's operator
  std::vector<ExprPtr> args;
  explicit Expr(Kind k) : kind(k) {}
};

namespace {

llvm::Error error(const std::string &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

class Parser {
public:
  explicit Parser(const std::string &s) : s_(s) {}

  llvm::Expected<ExprPtr> all() {
    auto e = cond();
    if (!e)
      return e.takeError();
    skip();
    if (pos_ != s_.size())
      return fail("unexpected '" + s_.substr(pos_, 1) + "'");
    return e;
  }

private:
  const std::string &s_;
  size_t pos_ = 0;

  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_])))
      ++pos_;
  }
  bool eat(const std::string &tok) {
    skip();
    if (s_.compare(pos_, tok.size(), tok) != 0)
      return false;
    // '<' must not eat the start of '<=', '?' not '??', '!' not '!=', '=' needs '=='.
    std::string next = s_.substr(pos_ + tok.size(), 1);
    if ((tok == "<" || tok == ">" || tok == "!") && next == "=")
      return false;
    if (tok == "?" && next == "?")
      return false;
    pos_ += tok.size();
    return true;
  }
  llvm::Error fail(const std::string &msg) {
    return error(fmt::format("column {}: {}", pos_ + 1, msg));
  }
  static ExprPtr make(Expr::Kind k, std::string text, std::vector<ExprPtr> args) {
    auto e = std::make_shared<Expr>(k);
    e->text = std::move(text);
    e->args = std::move(args);
    return e;
  }

  llvm::Expected<ExprPtr> cond() {
    auto c = binary(0);
    if (!c)
      return c;
    if (!eat("?"))
      return c;
    auto a = cond();
    if (!a)
      return a;
    if (!eat(":"))
      return fail("expected ':'");
    auto b = cond();
    if (!b)
      return b;
    return make(Expr::Kind::Cond, "", {*c, *a, *b});
  }

  // Binary operators by precedence level, loosest first.
  llvm::Expected<ExprPtr> binary(unsigned level) {
    static const std::vector<std::vector<std::string>> levels = {
        {"??"}, {"||"}, {"&&"}, {"==", "!=", "<=", ">=", "<", ">"}, {"+", "-"}, {"*", "/", "%"}};
    if (level == levels.size())
      return unary();
    auto lhs = binary(level + 1);
    if (!lhs)
      return lhs;
    for (;;) {
      std::string op;
      for (const std::string &o : levels[level])
        if (eat(o)) {
          op = o;
          break;
        }
      if (op.empty())
        return lhs;
      auto rhs = binary(level + 1);
      if (!rhs)
        return rhs;
      lhs = make(Expr::Kind::Binary, op, {*lhs, *rhs});
    }
  }

  llvm::Expected<ExprPtr> unary() {
    if (eat("-") || eat("!")) {
      std::string op = s_.substr(pos_ - 1, 1);
      auto a = unary();
      if (!a)
        return a;
      return make(Expr::Kind::Unary, op, {*a});
    }
    auto e = primary();
    if (!e)
      return e;
    while (eat("[")) {
      auto i = cond();
      if (!i)
        return i;
      if (!eat("]"))
        return fail("expected ']'");
      e = make(Expr::Kind::Index, "", {*e, *i});
    }
    return e;
  }

  llvm::Expected<std::vector<ExprPtr>> list(const std::string &close) {
    std::vector<ExprPtr> items;
    if (eat(close))
      return items;
    for (;;) {
      auto e = cond();
      if (!e)
        return e.takeError();
      items.push_back(*e);
      if (eat(close))
        return items;
      if (!eat(","))
        return fail("expected ',' or '" + close + "'");
    }
  }

  llvm::Expected<ExprPtr> primary() {
    skip();
    if (pos_ >= s_.size())
      return fail("unexpected end of expression");
    char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      size_t used = 0;
      double v;
      try {
        v = std::stod(s_.substr(pos_), &used);
      } catch (const std::exception &) {
        return fail("bad number");
      }
      pos_ += used;
      auto e = std::make_shared<Expr>(Expr::Kind::Num);
      e->num = v;
      return e;
    }
    if (c == '\'') {
      size_t end = s_.find('\'', pos_ + 1);
      if (end == std::string::npos)
        return fail("unterminated string");
      std::string text = s_.substr(pos_ + 1, end - pos_ - 1);
      pos_ = end + 1;
      return make(Expr::Kind::Str, text, {});
    }
    if (eat("(")) {
      auto e = cond();
      if (!e)
        return e;
      if (!eat(")"))
        return fail("expected ')'");
      return e;
    }
    if (eat("[")) {
      auto items = list("]");
      if (!items)
        return items.takeError();
      return make(Expr::Kind::List, "", std::move(*items));
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() &&
             (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_'))
        ++pos_;
      std::string id = s_.substr(start, pos_ - start);
      if (eat("(")) {
        auto args = list(")");
        if (!args)
          return args.takeError();
        return make(Expr::Kind::Call, id, std::move(*args));
      }
      return make(Expr::Kind::Name, id, {});
    }
    return fail(std::string("unexpected '") + c + "'");
  }
};

bool truthy(const Value &v) {
  switch (v.kind) {
  case Value::Kind::Num:
    return v.num != 0;
  case Value::Kind::List:
    return !v.list.empty();
  case Value::Kind::Str:
    return !v.str.empty();
  default:
    return false;
  }
}

llvm::Expected<double> number(const Value &v, const std::string &what) {
  if (v.kind != Value::Kind::Num)
    return error(fmt::format("{} needs a number, not {}", what, v.text()));
  return v.num;
}

llvm::Expected<std::vector<double>> numbers(const Value &v, const std::string &what) {
  if (v.kind == Value::Kind::Num)
    return std::vector<double>{v.num};
  if (v.kind != Value::Kind::List)
    return error(fmt::format("{} needs a list, not {}", what, v.text()));
  return v.list;
}

llvm::Expected<Value> builtin(const std::string &fn, const std::vector<Value> &a) {
  auto arity = [&](size_t n) -> llvm::Error {
    if (a.size() != n)
      return error(fmt::format("{}() takes {} arguments, not {}", fn, n, a.size()));
    return llvm::Error::success();
  };
  if (fn == "defined") {
    if (auto e = arity(1))
      return e;
    return Value::number(a[0].defined());
  }
  for (const Value &v : a)
    if (!v.defined())
      return Value(); // undefined in, undefined out
  if (fn == "len") {
    if (auto e = arity(1))
      return e;
    if (a[0].kind == Value::Kind::Str)
      return Value::number(double(a[0].str.size()));
    auto l = numbers(a[0], "len()");
    if (!l)
      return l.takeError();
    return Value::number(double(l->size()));
  }
  if (fn == "min" || fn == "max" || fn == "sum" || fn == "prod") {
    std::vector<double> all;
    for (const Value &v : a) {
      auto l = numbers(v, fn + "()");
      if (!l)
        return l.takeError();
      all.insert(all.end(), l->begin(), l->end());
    }
    if (fn == "sum" || fn == "prod") {
      double r = fn == "sum" ? 0 : 1;
      for (double x : all)
        r = fn == "sum" ? r + x : r * x;
      return Value::number(r);
    }
    if (all.empty())
      return Value();
    return Value::number(fn == "min" ? *std::min_element(all.begin(), all.end())
                                     : *std::max_element(all.begin(), all.end()));
  }
  if (fn == "floor" || fn == "ceil" || fn == "abs" || fn == "int") {
    if (auto e = arity(1))
      return e;
    auto l = numbers(a[0], fn + "()");
    if (!l)
      return l.takeError();
    for (double &x : *l)
      x = fn == "floor"  ? std::floor(x)
          : fn == "ceil" ? std::ceil(x)
          : fn == "abs"  ? std::fabs(x)
                         : std::trunc(x);
    return a[0].kind == Value::Kind::Num ? Value::number((*l)[0]) : Value::ofList(*l);
  }
  if (fn == "range") {
    if (auto e = arity(1))
      return e;
    auto n = number(a[0], "range()");
    if (!n)
      return n.takeError();
    std::vector<double> r;
    for (int64_t k = 0; k < int64_t(*n); ++k)
      r.push_back(double(k));
    return Value::ofList(r);
  }
  if (fn == "take" || fn == "drop") {
    if (auto e = arity(2))
      return e;
    auto l = numbers(a[0], fn + "()");
    auto n = number(a[1], fn + "()");
    if (!l || !n)
      return error(l ? llvm::toString(n.takeError()) : llvm::toString(l.takeError()));
    size_t k = size_t(std::clamp<double>(*n, 0, double(l->size())));
    return Value::ofList(fn == "take" ? std::vector<double>(l->begin(), l->begin() + k)
                                      : std::vector<double>(l->begin() + k, l->end()));
  }
  if (fn == "contains") {
    if (auto e = arity(2))
      return e;
    auto l = numbers(a[0], "contains()");
    auto x = number(a[1], "contains()");
    if (!l || !x)
      return error(l ? llvm::toString(x.takeError()) : llvm::toString(l.takeError()));
    return Value::number(std::count(l->begin(), l->end(), *x) > 0);
  }
  if (fn == "without") { // the entries of a list that a second list does not hold, in order
    if (auto e = arity(2))
      return e;
    auto l = numbers(a[0], "without()");
    auto drop = numbers(a[1], "without()");
    if (!l || !drop)
      return error(l ? llvm::toString(drop.takeError()) : llvm::toString(l.takeError()));
    std::vector<double> r;
    for (double x : *l)
      if (std::count(drop->begin(), drop->end(), x) == 0)
        r.push_back(x);
    return Value::ofList(r);
  }
  if (fn == "sorted") {
    if (auto e = arity(1))
      return e;
    auto l = numbers(a[0], "sorted()");
    if (!l)
      return l.takeError();
    std::sort(l->begin(), l->end());
    return Value::ofList(*l);
  }
  return error(fmt::format("unknown function {}()", fn));
}

} // namespace

const std::set<std::string> &builtinFunctions() {
  static const std::set<std::string> names = {
      "defined", "len", "min",   "max",  "sum",  "prod",     "floor",  "ceil",
      "abs",     "int", "range", "take", "drop", "contains", "sorted", "without"};
  return names;
}

llvm::Expected<ExprPtr> parse(const std::string &text) {
  Parser p(text);
  return p.all();
}

llvm::Expected<Value> eval(const Expr &e, Env &env) {
  switch (e.kind) {
  case Expr::Kind::Num:
    return Value::number(e.num);
  case Expr::Kind::Str:
    return Value::string(e.text);
  case Expr::Kind::Name:
    return env.name(e.text);
  case Expr::Kind::List: {
    std::vector<double> items;
    for (const ExprPtr &a : e.args) {
      auto v = eval(*a, env);
      if (!v)
        return v;
      if (!v->defined())
        return Value();
      auto l = numbers(*v, "a list item");
      if (!l)
        return l.takeError();
      items.insert(items.end(), l->begin(), l->end()); // lists in a list are spliced
    }
    return Value::ofList(items);
  }
  case Expr::Kind::Call: {
    std::vector<Value> args;
    for (const ExprPtr &a : e.args) {
      auto v = eval(*a, env);
      if (!v)
        return v;
      args.push_back(std::move(*v));
    }
    if (auto r = env.call(e.text, args))
      return std::move(*r);
    return builtin(e.text, args);
  }
  case Expr::Kind::Index: {
    auto base = eval(*e.args[0], env);
    if (!base)
      return base;
    auto i = eval(*e.args[1], env);
    if (!i)
      return i;
    if (!base->defined() || !i->defined())
      return Value();
    auto l = numbers(*base, "indexing");
    auto k = number(*i, "an index");
    if (!l || !k)
      return error(l ? llvm::toString(k.takeError()) : llvm::toString(l.takeError()));
    int64_t n = int64_t(l->size()), at = int64_t(*k);
    if (at < 0)
      at += n; // negative indices count from the end
    if (at < 0 || at >= n)
      return Value();
    return Value::number((*l)[size_t(at)]);
  }
  case Expr::Kind::Unary: {
    auto a = eval(*e.args[0], env);
    if (!a || !a->defined())
      return a;
    if (e.text == "!")
      return Value::number(!truthy(*a));
    auto l = numbers(*a, "'-'");
    if (!l)
      return l.takeError();
    for (double &x : *l)
      x = -x;
    return a->kind == Value::Kind::Num ? Value::number((*l)[0]) : Value::ofList(*l);
  }
  case Expr::Kind::Cond: {
    auto c = eval(*e.args[0], env);
    if (!c)
      return c;
    if (!c->defined())
      return Value();
    return eval(*e.args[truthy(*c) ? 1 : 2], env);
  }
  case Expr::Kind::Binary: {
    const std::string &op = e.text;
    auto a = eval(*e.args[0], env);
    if (!a)
      return a;
    if (op == "??") {
      if (a->defined())
        return a;
      return eval(*e.args[1], env);
    }
    if (op == "&&" && a->defined() && !truthy(*a))
      return Value::number(0);
    if (op == "||" && a->defined() && truthy(*a))
      return Value::number(1);
    auto b = eval(*e.args[1], env);
    if (!b)
      return b;
    if (!a->defined() || !b->defined())
      return Value();
    if (op == "&&" || op == "||")
      return Value::number(truthy(*b));
    if (op == "==" || op == "!=") {
      bool same = a->kind == b->kind && (a->kind == Value::Kind::Str   ? a->str == b->str
                                         : a->kind == Value::Kind::Num ? a->num == b->num
                                                                       : a->list == b->list);
      return Value::number(op == "==" ? same : !same);
    }
    // Arithmetic and ordering: numbers, or a list with a number element-wise.
    auto fn = [&](double x, double y) -> double {
      if (op == "+")
        return x + y;
      if (op == "-")
        return x - y;
      if (op == "*")
        return x * y;
      if (op == "/")
        return x / y;
      if (op == "%")
        return y == 0 ? 0 : x - y * std::floor(x / y);
      if (op == "<")
        return x < y;
      if (op == "<=")
        return x <= y;
      if (op == ">")
        return x > y;
      return x >= y;
    };
    if (a->kind == Value::Kind::Num && b->kind == Value::Kind::Num)
      return Value::number(fn(a->num, b->num));
    bool ordering = op == "<" || op == "<=" || op == ">" || op == ">=";
    if (!ordering && (a->kind == Value::Kind::List || b->kind == Value::Kind::List) &&
        a->kind != Value::Kind::Str && b->kind != Value::Kind::Str) {
      if (a->kind == Value::Kind::List && b->kind == Value::Kind::List) {
        if (op != "+")
          return error(fmt::format("'{}' of two lists", op));
        std::vector<double> r = a->list;
        r.insert(r.end(), b->list.begin(), b->list.end()); // concatenation
        return Value::ofList(r);
      }
      std::vector<double> r = a->kind == Value::Kind::List ? a->list : b->list;
      for (double &x : r)
        x = a->kind == Value::Kind::List ? fn(x, b->num) : fn(a->num, x);
      return Value::ofList(r);
    }
    return error(fmt::format("'{}' of {} and {}", op, a->text(), b->text()));
  }
  }
  return Value();
}

namespace {

/// The importer's functions while Table::load runs (its `functions`): a field calling a
/// function that is neither one of them nor built in is an error when the table loads, not
/// when a model first reaches it.
thread_local const std::set<std::string> *tImporterFunctions = nullptr;

/// The first function `e` calls that nobody provides, or "".
std::string unknownCall(const Expr &e) {
  if (e.kind == Expr::Kind::Call && !builtinFunctions().count(e.text) &&
      !(tImporterFunctions && tImporterFunctions->count(e.text)))
    return e.text;
  for (const ExprPtr &a : e.args)
    if (a)
      if (std::string bad = unknownCall(*a); !bad.empty())
        return bad;
  return "";
}

llvm::Expected<ExprPtr> parseField(const nlohmann::json &j, const std::string &what) {
  std::string text;
  if (j.is_string())
    text = j.get<std::string>();
  else if (j.is_number() || j.is_boolean())
    text = j.is_boolean() ? (j.get<bool>() ? "1" : "0") : j.dump();
  else
    return error(
        fmt::format("{}: an expression must be a string or a number, not {}", what, j.dump()));
  auto e = parse(text);
  if (!e)
    return error(fmt::format("{}: '{}': {}", what, text, llvm::toString(e.takeError())));
  if (tImporterFunctions)
    if (std::string bad = unknownCall(**e); !bad.empty())
      return error(fmt::format("{}: '{}': unknown function {}()", what, text, bad));
  return e;
}

llvm::Expected<InputRef> parseInput(const nlohmann::json &j, const std::string &what) {
  InputRef r;
  if (j.is_number_integer()) {
    r.index = j.get<int>();
    if (r.index < 0)
      return error(what + ": a negative input index");
    return r;
  }
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    if (s == "prev") {
      r.kind = InputRef::Kind::Prev;
      return r;
    }
    if (s.rfind("step", 0) == 0 && s.size() > 4 && std::all_of(s.begin() + 4, s.end(), ::isdigit)) {
      r.kind = InputRef::Kind::Step;
      r.index = std::stoi(s.substr(4));
      return r;
    }
    if (s == "k") { // a chain's current input
      r.kind = InputRef::Kind::Onnx;
      r.index = -1;
      return r;
    }
    return error(fmt::format("{}: unknown input '{}' (an input index, 'prev', 'stepN', 'k', "
                             "or an object)",
                             what, s));
  }
  if (!j.is_object())
    return error(what + ": an input must be an index, a string or an object");
  for (const auto &[key, value] : j.items())
    if (key != "input" && key != "else" && key != "scalar" && key != "fill" && key != "shape" &&
        key != "int" && key != "frozen" && key != "state" && key != "new_input" && key != "keep" &&
        key != "uniform" && key != "normal" && key != "as_scalar")
      return error(fmt::format("{}: unknown input field '{}'", what, key));
  r.integer = j.value("int", false);
  r.frozen = j.value("frozen", false);
  r.state = j.value("state", false);
  r.asScalar = j.value("as_scalar", false);
  if (j.contains("new_input")) {
    r.kind = InputRef::Kind::NewInput;
    if (!j["new_input"].is_string() || !j.contains("shape"))
      return error(what + ": 'new_input' needs a label and 'shape'");
    r.label = j["new_input"].get<std::string>();
    auto s = parseField(j["shape"], what);
    if (!s)
      return s.takeError();
    r.shape = *s;
    if (j.contains("keep")) {
      auto k = parseField(j["keep"], what);
      if (!k)
        return k.takeError();
      r.random = "mask";
      r.randomA = *k;
    }
    for (const char *kind : {"uniform", "normal"}) {
      if (!j.contains(kind))
        continue;
      if (!r.random.empty() || !j[kind].is_array() || j[kind].size() != 2)
        return error(
            fmt::format("{}: '{}' needs two expressions (and no other distribution)", what, kind));
      auto a = parseField(j[kind][0], what), b = parseField(j[kind][1], what);
      if (!a || !b)
        return a ? b.takeError() : a.takeError();
      r.random = kind;
      r.randomA = *a;
      r.randomB = *b;
    }
    return r;
  }
  if (j.contains("input")) {
    if (!j["input"].is_number_integer())
      return error(what + ": 'input' must be an index");
    r.index = j["input"].get<int>();
    if (j.contains("else")) {
      auto e = parseInput(j["else"], what + " (else)");
      if (!e)
        return e.takeError();
      r.orElse = std::make_shared<InputRef>(std::move(*e));
    }
    return r;
  }
  if (!j.contains("scalar") && !j.contains("fill"))
    return error(what + ": an input object needs 'input', 'scalar' or 'fill'");
  // A scalar is a value; a fill is a value and a shape.
  bool fill = j.contains("fill");
  r.kind = fill ? InputRef::Kind::Fill : InputRef::Kind::Scalar;
  auto v = parseField(j[fill ? "fill" : "scalar"], what);
  if (!v)
    return v.takeError();
  r.value = *v;
  if (!fill)
    return r;
  if (!j.contains("shape"))
    return error(what + ": 'fill' needs 'shape'");
  auto shape = parseField(j["shape"], what);
  if (!shape)
    return shape.takeError();
  r.shape = *shape;
  return r;
}

llvm::Expected<std::vector<std::pair<std::string, ExprPtr>>> parseMap(const nlohmann::json &j,
                                                                      const std::string &what) {
  std::vector<std::pair<std::string, ExprPtr>> r;
  if (!j.is_object())
    return error(what + " must be an object");
  for (const auto &[key, value] : j.items()) {
    auto e = parseField(value, what + "." + key);
    if (!e)
      return e.takeError();
    r.emplace_back(key, *e);
  }
  return r;
}

/// The fields of a rule that are not its (single) step's.
const std::set<std::string> ruleFields = {"when", "refuse", "steps", "each_output", "chain"};

llvm::Expected<Step> parseStep(const nlohmann::json &j, const std::string &what) {
  static const std::set<std::string> fields = {"op",           "inputs", "attrs",     "groups",
                                               "if",           "output", "broadcast", "trailing_op",
                                               "broadcast_to", "shape",  "perm"};
  Step s;
  if (!j.is_object())
    return error(what + ": a step must be an object");
  for (const auto &[key, value] : j.items())
    if (!fields.count(key))
      return error(fmt::format("{}: unknown step field '{}'", what, key));
  if (!j.contains("op") || !j["op"].is_string())
    return error(what + ": a step needs \"op\"");
  s.op = j["op"].get<std::string>();
  s.text = j.dump();
  std::string here = what + " (" + s.op + ")";
  if (j.contains("inputs")) {
    if (!j["inputs"].is_array())
      return error(here + ": 'inputs' must be a list");
    for (const auto &i : j["inputs"]) {
      auto r = parseInput(i, here);
      if (!r)
        return r.takeError();
      s.inputs.push_back(std::move(*r));
    }
  } else {
    s.inputs.push_back(InputRef{}); // ONNX input 0
  }
  for (const char *key : {"attrs", "groups"})
    if (j.contains(key)) {
      auto m = parseMap(j[key], here + "." + key);
      if (!m)
        return m.takeError();
      (std::string(key) == "attrs" ? s.attrs : s.groups) = std::move(*m);
    }
  for (const char *key : {"if", "output", "broadcast_to", "shape", "perm"})
    if (j.contains(key)) {
      auto e = parseField(j[key], here + "." + key);
      if (!e)
        return e.takeError();
      std::string k = key;
      (k == "if"       ? s.cond
       : k == "output" ? s.output
       : k == "shape"  ? s.shape
       : k == "perm"   ? s.perm
                       : s.broadcastTo) = *e;
    }
  if ((s.op == "@reshape") != bool(s.shape))
    return error(here + ": 'shape' goes with the op \"@reshape\" and it needs one");
  if ((s.op == "@transpose") != bool(s.perm))
    return error(here + ": 'perm' goes with the op \"@transpose\" and it needs one");
  if (j.contains("broadcast")) {
    if (!j["broadcast"].is_array())
      return error(here + ": 'broadcast' must be a list of input positions");
    for (const auto &b : j["broadcast"]) {
      if (!b.is_number_integer() || b.get<int>() < 0 || b.get<size_t>() >= s.inputs.size())
        return error(here + ": 'broadcast' lists " + b.dump() + ", not an input position");
      s.broadcast.push_back(b.get<int>());
    }
  }
  s.trailingOp = j.value("trailing_op", "");
  return s;
}

llvm::Expected<Rule> parseRule(const nlohmann::json &j, const std::string &what) {
  Rule r;
  if (!j.is_object())
    return error(what + ": a rule must be an object");
  if (j.contains("when")) {
    auto e = parseField(j["when"], what + ".when");
    if (!e)
      return e.takeError();
    r.when = *e;
  }
  if (j.contains("refuse")) {
    if (!j["refuse"].is_array())
      return error(what + ": 'refuse' must be a list of [condition, reason]");
    for (const auto &p : j["refuse"]) {
      if (!p.is_array() || p.size() != 2 || !p[1].is_string())
        return error(what + ": 'refuse' must be a list of [condition, reason]");
      auto e = parseField(p[0], what + ".refuse");
      if (!e)
        return e.takeError();
      r.refuse.emplace_back(*e, p[1].get<std::string>());
    }
  }
  r.eachOutput = j.value("each_output", false);
  r.chain = j.value("chain", false);
  if (j.contains("steps")) {
    for (const auto &[key, value] : j.items())
      if (!ruleFields.count(key))
        return error(fmt::format("{}: unknown rule field '{}' (a rule with 'steps' has only {})",
                                 what, key, fmt::join(ruleFields, ", ")));
    if (!j["steps"].is_array() || j["steps"].empty())
      return error(what + ": 'steps' must be a non-empty list");
    for (size_t k = 0; k < j["steps"].size(); ++k) {
      auto s = parseStep(j["steps"][k], fmt::format("{} step {}", what, k));
      if (!s)
        return s.takeError();
      r.steps.push_back(std::move(*s));
    }
  } else {
    // One step written in the rule itself: the other fields are the step's (parseStep
    // refuses unknown ones).
    nlohmann::json step = nlohmann::json::object();
    for (const auto &[key, value] : j.items())
      if (!ruleFields.count(key))
        step[key] = value;
    auto s = parseStep(step, what);
    if (!s)
      return s.takeError();
    r.steps.push_back(std::move(*s));
  }
  return r;
}

} // namespace

llvm::Expected<Table> Table::load(const std::string &path, const OpLibrary &lib,
                                  const std::set<std::string> &handlers,
                                  const std::set<std::string> &functions) {
  struct Scope {
    explicit Scope(const std::set<std::string> *f) { tImporterFunctions = f; }
    ~Scope() { tImporterFunctions = nullptr; }
  } scope(&functions);
  std::ifstream in(path);
  if (!in)
    return error(fmt::format("cannot open the ONNX translation table '{}'", path));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception &e) {
    return error(fmt::format("{}: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("ops") || !j["ops"].is_object())
    return error(path + ": no \"ops\" object");
  Table t;
  t.opset_ = j.value("opset", 0);
  for (const auto &[name, e] : j["ops"].items()) {
    std::string what = fmt::format("{}: {}", path, name);
    if (!e.is_object())
      return error(what + ": an entry must be an object");
    Entry entry;
    entry.onnxOp = name;
    if (e.contains("tdl")) {
      if (!e["tdl"].is_array())
        return error(what + ": 'tdl' must be a list of op names");
      for (const auto &op : e["tdl"]) {
        if (!op.is_string())
          return error(what + ": 'tdl' must be a list of op names");
        entry.tdl.push_back(op.get<std::string>());
      }
    }
    entry.handler = e.value("handler", "");
    entry.domain = e.value("domain", "");
    entry.folded = e.value("importer", "");
    entry.notDescribable = e.value("not_describable", "");
    entry.missing = e.value("missing", "");
    if (e.contains("tests"))
      entry.tests = e["tests"];
    if (e.contains("let")) {
      if (!e["let"].is_object())
        return error(what + ": 'let' must be an object of name: expression");
      auto lets = parseMap(e["let"], what + ".let");
      if (!lets)
        return lets.takeError();
      // nlohmann's objects are sorted by key; "let" names are bound in that order.
      entry.lets = std::move(*lets);
    }
    if (!entry.handler.empty() && !handlers.count(entry.handler))
      return error(fmt::format("{}: no importer handler '{}'", what, entry.handler));
    if (e.contains("translate")) {
      const nlohmann::json &rules = e["translate"];
      std::vector<nlohmann::json> list;
      if (rules.is_array())
        list.assign(rules.begin(), rules.end());
      else
        list.push_back(rules);
      for (size_t k = 0; k < list.size(); ++k) {
        auto r = parseRule(list[k], fmt::format("{} rule {}", what, k));
        if (!r)
          return r.takeError();
        for (const Step &s : r->steps) {
          if (s.op == "@reshape" || s.op == "@transpose")
            continue;
          if (!lib.find(s.op))
            return error(fmt::format("{}: the rule uses op '{}', which the library does not "
                                     "describe",
                                     what, s.op));
          if (std::find(entry.tdl.begin(), entry.tdl.end(), s.op) == entry.tdl.end())
            return error(
                fmt::format("{}: the rule uses op '{}', which 'tdl' does not list", what, s.op));
          if (!s.trailingOp.empty() && !lib.find(s.trailingOp))
            return error(
                fmt::format("{}: trailing_op '{}' is not in the library", what, s.trailingOp));
        }
        entry.rules.push_back(std::move(*r));
      }
    }
    if (!entry.tdl.empty() && entry.rules.empty() && entry.handler.empty())
      return error(what + ": lists TDL ops but has neither 'translate' rules nor a 'handler'");
    t.entries_[name] = std::move(entry);
  }
  return t;
}

const Entry *Table::find(const std::string &onnxOp) const {
  auto it = entries_.find(onnxOp);
  return it == entries_.end() ? nullptr : &it->second;
}

} // namespace onnxrules
} // namespace tofu
