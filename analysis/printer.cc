// Canonical TDL printing of the checked IR: binary expressions fully parenthesised,
// explicit extents kept, inferred ones left to be inferred again.
#include "analysis/printer.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <functional>

namespace tofu {
namespace {

using llvm::cast;

/// How the printer names what expressions refer to, so that it serves both the checked
/// IR (an OpDef) and instantiated ops (an InstOp).
struct Names {
  std::function<std::string(unsigned)> attr, input, var;
  /// Prints a lambda parameter: `v`, `*g` or `(v : K)`.
  std::function<void(llvm::raw_ostream &, unsigned)> param;
};

class Printer {
public:
  Printer(llvm::raw_ostream &os, const ir::OpDef &op) : os_(os), op_(&op) {
    names_.attr = [&op](unsigned i) { return op.attrs[i].name; };
    names_.input = [&op](unsigned i) { return op.inputs[i].name; };
    names_.var = [&op](unsigned i) { return op.vars[i].name; };
    names_.param = [this, &op](llvm::raw_ostream &os, unsigned i) {
      const ir::IndexVar &v = op.vars[i];
      if (v.isGroup)
        os << "*" << v.name;
      else if (v.extent) {
        os << "(" << v.name << " : ";
        expr(*v.extent);
        os << ")";
      } else
        os << v.name;
    };
  }

  Printer(llvm::raw_ostream &os, const InstOp &op) : os_(os), op_(nullptr) {
    names_.attr = [](unsigned i) { return "attr" + std::to_string(i); };
    names_.input = [&op](unsigned i) { return op.inputs[i].name; };
    names_.var = [&op](unsigned i) { return op.vars[i].name; };
    names_.param = [&op](llvm::raw_ostream &os, unsigned i) {
      const InstVar &v = op.vars[i];
      if (v.fixedExtent)
        os << "(" << v.name << " : " << *v.fixedExtent << ")";
      else
        os << v.name;
    };
  }

  void expr(const ir::Expr &e) {
    switch (e.kind()) {
    case ir::ExprKind::Const:
      constant(cast<ir::Const>(e));
      return;
    case ir::ExprKind::AttrRef:
      os_ << names_.attr(cast<ir::AttrRef>(e).attr);
      return;
    case ir::ExprKind::ExtentRef: {
      const auto &x = cast<ir::ExtentRef>(e);
      os_ << names_.input(x.input) << "." << x.dim;
      return;
    }
    case ir::ExprKind::VarRef:
      os_ << names_.var(cast<ir::VarRef>(e).var);
      return;
    case ir::ExprKind::TensorRef: {
      const auto &t = cast<ir::TensorRef>(e);
      switch (t.source) {
      case ir::TensorRef::Source::Input:
        os_ << names_.input(t.input);
        return;
      case ir::TensorRef::Source::Out:
        os_ << "out";
        return;
      case ir::TensorRef::Source::DOut:
        os_ << "dOut";
        return;
      }
      return;
    }
    case ir::ExprKind::Read: {
      const auto &r = cast<ir::Read>(e);
      os_ << names_.input(r.input);
      coords(r.coords);
      return;
    }
    case ir::ExprKind::OpaqueCall: {
      const auto &c = cast<ir::OpaqueCall>(e);
      os_ << c.function;
      args(c.args);
      coords(c.coords);
      return;
    }
    case ir::ExprKind::OpCall: {
      const auto &c = cast<ir::OpCall>(e);
      os_ << c.callee->name;
      if (!c.attrs.empty()) {
        os_ << "<";
        for (size_t i = 0; i < c.attrs.size(); ++i) {
          os_ << (i ? ", " : "") << c.callee->attrs[c.attrs[i].attr].name << " = ";
          expr(*c.attrs[i].value);
        }
        os_ << ">";
      }
      if (!c.groups.empty()) {
        os_ << "{";
        for (size_t i = 0; i < c.groups.size(); ++i)
          os_ << (i ? ", " : "") << c.callee->vars[c.groups[i].var].name << " = "
              << c.groups[i].length;
        os_ << "}";
      }
      args(c.args);
      if (c.indexed)
        coords(c.coords);
      return;
    }
    case ir::ExprKind::Reduce: {
      const auto &r = cast<ir::Reduce>(e);
      os_ << ir::reducerName(r.reducer) << "(";
      lambda(r.vars, *r.body);
      os_ << ")";
      return;
    }
    case ir::ExprKind::Apply: {
      const auto &a = cast<ir::Apply>(e);
      os_ << ir::builtinName(a.fn);
      args(a.args);
      return;
    }
    case ir::ExprKind::Neg:
      os_ << "-";
      expr(*cast<ir::Neg>(e).operand);
      return;
    case ir::ExprKind::Binary: {
      const auto &b = cast<ir::Binary>(e);
      os_ << "(";
      expr(*b.lhs);
      os_ << " " << ast::binaryOpSpelling(b.op) << " ";
      expr(*b.rhs);
      os_ << ")";
      return;
    }
    }
  }

  void lambda(const std::vector<unsigned> &vars, const ir::Expr &body) {
    os_ << "lambda";
    for (size_t i = 0; i < vars.size(); ++i) {
      os_ << (i ? ", " : " ");
      names_.param(os_, vars[i]);
    }
    os_ << ": ";
    expr(body);
  }

  void op() {
    assert(op_ && "declarations are printed from the checked IR");
    const ir::OpDef &op_ = *this->op_;
    os_ << "op " << op_.name;
    if (!op_.attrs.empty()) {
      os_ << "<";
      for (size_t i = 0; i < op_.attrs.size(); ++i) {
        os_ << (i ? ", " : "") << op_.attrs[i].name;
        if (op_.attrs[i].defaultValue)
          os_ << " = " << *op_.attrs[i].defaultValue;
      }
      os_ << ">";
    }
    os_ << "(";
    for (size_t i = 0; i < op_.inputs.size(); ++i)
      os_ << (i ? ", " : "") << op_.inputs[i].name;
    os_ << ")";
    if (op_.shape) {
      os_ << " -> [";
      for (size_t i = 0; i < op_.shape->size(); ++i) {
        const ir::ShapeDim &d = (*op_.shape)[i];
        os_ << (i ? ", " : "");
        if (d.isGroup)
          os_ << "*" << op_.vars[d.var].name;
        else if (d.isVar)
          os_ << op_.vars[d.var].name;
        else
          expr(*d.expr);
      }
      os_ << "]";
    }
    os_ << " =\n    ";
    lambda(op_.outputVars, *op_.body);
    for (size_t i = 0; i < op_.grads.size(); ++i) {
      os_ << (i ? ",\n    " : "\n    ") << "grad " << op_.inputs[op_.grads[i].input].name << " = ";
      expr(*op_.grads[i].call);
    }
    os_ << ";\n";
  }

private:
  void constant(const ir::Const &c) {
    if (c.isInt) {
      os_ << c.intValue;
      return;
    }
    if (std::isnan(c.value)) {
      os_ << "nan";
      return;
    }
    if (std::isinf(c.value)) {
      os_ << (c.value < 0 ? "-inf" : "inf");
      return;
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), c.value);
    std::string s(buf, res.ptr);
    if (s.find_first_of(".e") == std::string::npos)
      s += ".";
    os_ << s;
  }

  void args(const std::vector<ir::ExprPtr> &as) {
    os_ << "(";
    for (size_t i = 0; i < as.size(); ++i) {
      os_ << (i ? ", " : "");
      expr(*as[i]);
    }
    os_ << ")";
  }

  void coords(const std::vector<ir::Coord> &cs) {
    os_ << "[";
    for (size_t i = 0; i < cs.size(); ++i) {
      os_ << (i ? ", " : "");
      switch (cs[i].kind) {
      case ir::Coord::Kind::Affine:
      case ir::Coord::Kind::DataDependent:
        expr(*cs[i].expr);
        break;
      case ir::Coord::Kind::Slice:
        os_ << ":";
        break;
      case ir::Coord::Kind::Splat:
        os_ << "*" << names_.var(cs[i].var);
        break;
      }
    }
    os_ << "]";
  }

  llvm::raw_ostream &os_;
  const ir::OpDef *op_;
  Names names_;
};

} // namespace

void printOp(llvm::raw_ostream &os, const ir::OpDef &op) { Printer(os, op).op(); }

std::string printInst(const InstOp &op, const ir::Expr &e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  Printer(os, op).expr(e);
  return os.str();
}

std::string printExpr(const ir::OpDef &op, const ir::Expr &e) {
  std::string s;
  llvm::raw_string_ostream os(s);
  Printer(os, op).expr(e);
  return os.str();
}

void printFile(llvm::raw_ostream &os, const ir::Module &m, const std::string &file) {
  for (const auto &[f, imports] : m.importsByFile)
    if (f == file)
      for (const std::string &imp : imports) {
        os << "import \"";
        for (char c : imp) {
          if (c == '"' || c == '\\')
            os << '\\';
          if (c == '\n')
            os << "\\n";
          else if (c == '\t')
            os << "\\t";
          else
            os << c;
        }
        os << "\";\n";
      }
  for (const auto &[f, names] : m.opaquesByFile)
    if (f == file && !names.empty()) {
      os << "opaque ";
      for (size_t i = 0; i < names.size(); ++i)
        os << (i ? ", " : "") << names[i];
      os << ";\n";
    }
  for (const ir::OpDef *op : m.opsInFile(file))
    printOp(os, *op);
}

} // namespace tofu
