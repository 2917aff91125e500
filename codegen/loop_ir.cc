// The loop IR's printer: one walk for both targets, which differ only in how a loop binds
// (its header and pragma), how an entry point receives its arguments, and the block's
// combine, which only CUDA has.
#include "codegen/loop_ir.h"

#include "fmt/format.h"

namespace tofu::loops {
namespace {

/// The OpenMP reduction identifier of a reducer (Max and Min: the prelude's declared
/// NaN-propagating reductions).
const char *simdReducer(ir::Reducer r) {
  switch (r) {
  case ir::Reducer::Sum:
    return "+";
  case ir::Reducer::Prod:
    return "*";
  case ir::Reducer::Max:
    return "tofu_maxr";
  case ir::Reducer::Min:
    return "tofu_minr";
  }
  return "+";
}

/// tofu_block_reduce's code of a reducer (the prelude's tofu_combine).
int combineCode(ir::Reducer r) {
  switch (r) {
  case ir::Reducer::Sum:
    return 0;
  case ir::Reducer::Prod:
    return 1;
  case ir::Reducer::Max:
    return 2;
  case ir::Reducer::Min:
    return 3;
  }
  return 0;
}

std::string combineText(ir::Reducer r, const std::string &acc, const std::string &x) {
  switch (r) {
  case ir::Reducer::Sum:
    return fmt::format("{} += {};", acc, x);
  case ir::Reducer::Prod:
    return fmt::format("{} *= {};", acc, x);
  case ir::Reducer::Max:
    return fmt::format("{0} = tofu_max({0}, {1});", acc, x);
  case ir::Reducer::Min:
    return fmt::format("{0} = tofu_min({0}, {1});", acc, x);
  }
  return "";
}

class Printer {
public:
  Printer(Target target, std::string &out, std::string &error)
      : target_(target), out_(out), error_(error) {}

  void block(const Block &b, unsigned indent) {
    for (const Node &n : b)
      node(n, indent);
  }

  void function(const Kernel &k, const Function &f) {
    const bool cpp = target_ == Target::Cpp;
    if (f.kind == Function::Kind::Helper) {
      line(0, fmt::format("{} float {}({}) {{",
                          cpp ? "static inline" : "static __device__ __forceinline__", f.name,
                          f.params));
    } else if (cpp) {
      line(0, fmt::format("extern \"C\" void {}(const TofuKernelArgs *a) {{", f.name));
    } else {
      line(0, fmt::format("extern \"C\" __global__ void {}(const {} args) {{", f.name, k.argsType));
      line(1, fmt::format("const {} *a = &args;", k.argsType));
    }
    block(f.body, 1);
    line(0, "}");
  }

private:
  void line(unsigned indent, const std::string &s) {
    out_ += std::string(indent * 2, ' ') + s + "\n";
  }

  void fail(const std::string &msg) {
    if (error_.empty())
      error_ = msg;
  }

  /// A single statement's text (Assign, Combine, Store, BlockCombine, Return, Use).
  std::string simple(const Node &n) {
    switch (n.kind) {
    case Node::Kind::Assign:
      return fmt::format("{} {} {};", n.target, n.op, n.value);
    case Node::Kind::Combine:
      return combineText(n.reducer, n.target, n.value);
    case Node::Kind::Store:
      if (n.element == Element::BF16)
        return fmt::format("{}[{}] = tofu_to_bf16({});", n.target, n.offset, n.value);
      return fmt::format("{}[{}] = {};", n.target, n.offset, n.value);
    case Node::Kind::BlockCombine:
      if (target_ != Target::Cuda)
        fail("a block combine outside CUDA");
      return fmt::format("{0} = tofu_block_reduce({0}, {1});", n.target, combineCode(n.reducer));
    case Node::Kind::Return:
      return n.value.empty() ? "return;" : "return " + n.value + ";";
    case Node::Kind::Use:
      return fmt::format("(void){};", n.target);
    case Node::Kind::Decl: {
      std::string s = n.type + (n.type.back() == '*' ? "" : " ");
      for (size_t i = 0; i < n.decls.size(); ++i) {
        s += (i ? ", " : "") + n.decls[i].first;
        if (!n.decls[i].second.empty())
          s += " = " + n.decls[i].second;
      }
      return s + ";";
    }
    default:
      break;
    }
    fail("a compound statement where one statement was expected");
    return "";
  }

  /// The pragma (C++) and header of a loop, without its brace; false (and nothing printed)
  /// where the target cannot run the loop's kind.
  bool loopHeader(const Node &n, unsigned indent) {
    const bool cpp = target_ == Target::Cpp;
    const std::string step = n.step.empty() ? "++" + n.var : fmt::format("{} += {}", n.var, n.step);
    const std::string serial =
        fmt::format("for (i64 {0} = {1}; {0} < {2}; {3})", n.var, n.from, n.to, step);
    const std::string threads = "num_threads(a->threads)";
    const std::string sched = n.chunk > 0 ? fmt::format("schedule(static, {})", n.chunk)
                                          : std::string("schedule(static)");
    switch (n.loop) {
    case LoopKind::Serial:
      line(indent, serial);
      return true;
    case LoopKind::Vector:
      if (cpp) {
        std::string accs;
        for (const std::string &a : n.accumulators)
          accs += (accs.empty() ? "" : ", ") + a;
        line(indent, accs.empty() ? std::string("#pragma omp simd")
                                  : fmt::format("#pragma omp simd reduction({}:{})",
                                                simdReducer(n.reducer), accs));
      }
      line(indent, serial);
      return true;
    case LoopKind::Parallel:
    case LoopKind::ParallelVector:
      if (!cpp)
        return fail("a loop across OpenMP threads in a CUDA kernel"), false;
      line(indent, fmt::format("#pragma omp parallel for{} {} {} if (a->threads > 1)",
                               n.loop == LoopKind::ParallelVector ? " simd" : "", threads, sched));
      line(indent, serial);
      return true;
    case LoopKind::Shared:
      if (!cpp)
        return fail("a loop across OpenMP threads in a CUDA kernel"), false;
      line(indent, "#pragma omp for " + sched);
      line(indent, serial);
      return true;
    case LoopKind::GridThreads:
    case LoopKind::GridBlocks:
    case LoopKind::BlockThreads:
      if (cpp)
        return fail("a GPU loop in a C++ kernel"), false;
      if (n.loop == LoopKind::GridThreads)
        line(indent, fmt::format("for (i64 {0} = (i64)blockIdx.x * blockDim.x + threadIdx.x; "
                                 "{0} < {1}; {0} += (i64)gridDim.x * blockDim.x)",
                                 n.var, n.to));
      else if (n.loop == LoopKind::GridBlocks)
        line(indent,
             fmt::format("for (i64 {0} = blockIdx.x; {0} < {1}; {0} += gridDim.x)", n.var, n.to));
      else
        line(indent,
             fmt::format("for (i64 {0} = threadIdx.x; {0} < {1}; {0} += blockDim.x)", n.var, n.to));
      return true;
    }
    return false;
  }

  /// A compound statement's body: one statement on the next line (compact), or braces.
  void body(const Block &b, unsigned indent, bool compact) {
    if (compact && b.size() == 1) {
      line(indent + 1, simple(b[0]));
      return;
    }
    out_.insert(out_.size() - 1, " {"); // after the header, on its line
    block(b, indent + 1);
    line(indent, "}");
  }

  void node(const Node &n, unsigned indent) {
    switch (n.kind) {
    case Node::Kind::Loop: {
      if (loopHeader(n, indent))
        body(n.body, indent, n.compact);
      return;
    }
    case Node::Kind::If:
      if (n.compact && n.body.size() == 1 && n.orElse.size() <= 1) {
        line(indent, fmt::format("if ({}) {}", n.cond, simple(n.body[0])));
        if (!n.orElse.empty())
          line(indent, "else " + simple(n.orElse[0]));
        return;
      }
      line(indent, fmt::format("if ({})", n.cond));
      body(n.body, indent, false);
      if (!n.orElse.empty()) {
        out_.pop_back(); // "}" then " else {"
        out_ += " else {\n";
        block(n.orElse, indent + 1);
        line(indent, "}");
      }
      return;
    case Node::Kind::Scope:
      line(indent, "{");
      block(n.body, indent + 1);
      line(indent, "}");
      return;
    case Node::Kind::Region:
      if (target_ != Target::Cpp)
        return fail("a parallel region in a CUDA kernel");
      line(indent, "#pragma omp parallel num_threads(a->threads) if (a->threads > 1)");
      line(indent, "{");
      block(n.body, indent + 1);
      line(indent, "}");
      return;
    default:
      line(indent, simple(n));
      return;
    }
  }

  Target target_;
  std::string &out_;
  std::string &error_;
};

void outlineInto(const Block &b, unsigned indent, std::string &out) {
  const std::string pad(indent * 2, ' ');
  for (const Node &n : b)
    switch (n.kind) {
    case Node::Kind::Loop:
      out += fmt::format("{}{} {} < {}{}\n", pad, loopKindName(n.loop), n.var, n.to,
                         n.step.empty() ? "" : " step " + n.step);
      outlineInto(n.body, indent + 1, out);
      break;
    case Node::Kind::If:
      if (n.body.size() == 1 && n.body[0].kind == Node::Kind::Return && n.orElse.empty())
        break; // an early exit
      out += fmt::format("{}if {}\n", pad, n.cond);
      outlineInto(n.body, indent + 1, out);
      if (!n.orElse.empty()) {
        out += pad + "else\n";
        outlineInto(n.orElse, indent + 1, out);
      }
      break;
    case Node::Kind::Scope:
      outlineInto(n.body, indent, out);
      break;
    case Node::Kind::Region:
      out += pad + "region\n";
      outlineInto(n.body, indent + 1, out);
      break;
    case Node::Kind::Store:
      out +=
          fmt::format("{}store {}{}\n", pad, n.target,
                      n.element == Element::F32 ? "" : std::string(" ") + elementName(n.element));
      break;
    case Node::Kind::Combine:
      out += fmt::format("{}combine {} {}\n", pad, n.target, ir::reducerName(n.reducer));
      break;
    case Node::Kind::BlockCombine:
      out += fmt::format("{}block-combine {}\n", pad, n.target);
      break;
    default:
      break;
    }
}

} // namespace

Node loopNode(LoopKind kind, std::string var, std::string from, std::string to, std::string step,
              bool compact) {
  Node n;
  n.kind = Node::Kind::Loop;
  n.loop = kind;
  n.var = std::move(var);
  n.from = std::move(from);
  n.to = std::move(to);
  n.step = std::move(step);
  n.compact = compact;
  return n;
}

Node declNode(std::string type, std::vector<std::pair<std::string, std::string>> decls) {
  Node n;
  n.kind = Node::Kind::Decl;
  n.type = std::move(type);
  n.decls = std::move(decls);
  return n;
}

Node assignNode(std::string target, std::string op, std::string value) {
  Node n;
  n.kind = Node::Kind::Assign;
  n.target = std::move(target);
  n.op = std::move(op);
  n.value = std::move(value);
  return n;
}

Node combineNode(ir::Reducer reducer, std::string accumulator, std::string value) {
  Node n = assignNode(std::move(accumulator), "", std::move(value));
  n.kind = Node::Kind::Combine;
  n.reducer = reducer;
  return n;
}

Node storeNode(std::string buffer, std::string offset, std::string value, Element element) {
  Node n = assignNode(std::move(buffer), "", std::move(value));
  n.kind = Node::Kind::Store;
  n.offset = std::move(offset);
  n.element = element;
  return n;
}

const char *elementName(Element e) { return e == Element::BF16 ? "bf16" : "f32"; }
const char *elementCType(Element e) { return e == Element::BF16 ? "tofu_bf16" : "float"; }

Node ifNode(std::string cond, bool compact) {
  Node n;
  n.kind = Node::Kind::If;
  n.cond = std::move(cond);
  n.compact = compact;
  return n;
}

Node returnNode(std::string value) {
  Node n;
  n.kind = Node::Kind::Return;
  n.value = std::move(value);
  return n;
}

Node useNode(std::string local) {
  Node n;
  n.kind = Node::Kind::Use;
  n.target = std::move(local);
  return n;
}

Node blockCombineNode(ir::Reducer reducer, std::string accumulator) {
  Node n = useNode(std::move(accumulator));
  n.kind = Node::Kind::BlockCombine;
  n.reducer = reducer;
  return n;
}

const char *loopKindName(LoopKind k) {
  switch (k) {
  case LoopKind::Serial:
    return "serial";
  case LoopKind::Vector:
    return "vector";
  case LoopKind::Parallel:
    return "parallel";
  case LoopKind::ParallelVector:
    return "parallel-vector";
  case LoopKind::Shared:
    return "shared";
  case LoopKind::GridThreads:
    return "grid-threads";
  case LoopKind::GridBlocks:
    return "grid-blocks";
  case LoopKind::BlockThreads:
    return "block-threads";
  }
  return "?";
}

bool printBlock(const Block &b, Target target, unsigned indent, std::string &out,
                std::string &error) {
  Printer(target, out, error).block(b, indent);
  return error.empty();
}

bool printFunction(const Kernel &k, const Function &f, Target target, std::string &out,
                   std::string &error) {
  Printer(target, out, error).function(k, f);
  return error.empty();
}

std::string outline(const Block &b, unsigned indent) {
  std::string out;
  outlineInto(b, indent, out);
  return out;
}

std::string outline(const Kernel &k, const std::string &prefix) {
  std::string out;
  for (const Function &f : k.functions) {
    if (f.kind != Function::Kind::Entry)
      continue;
    std::string name = f.name;
    if (name.compare(0, prefix.size(), prefix) == 0)
      name = name.substr(prefix.size());
    out += "entry" + (name.empty() ? std::string() : " " + name) + "\n" + outline(f.body, 1);
  }
  return out;
}

} // namespace tofu::loops
