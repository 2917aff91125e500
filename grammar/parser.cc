// The ANTLR-generated parser driven behind a typed AST builder; ANTLR types stay here.
#include "grammar/parser.h"

#include <charconv>
#include <cmath>
#include <regex>

#include "TdlLexer.h"
#include "TdlParser.h"
#include "antlr4-runtime.h"
#include "fmt/format.h"
#include "llvm/Support/ConvertUTF.h"

namespace tofu {
namespace {

using tofu_antlr::TdlLexer;
using tofu_antlr::TdlParser;

SourceLoc locOf(const antlr4::Token *t) {
  if (!t)
    return {};
  return {static_cast<uint32_t>(t->getLine()),
          static_cast<uint32_t>(t->getCharPositionInLine() + 1)};
}

/// ANTLR's messages name tokens by their grammar names; say them in words instead.
std::string friendlySyntaxMessage(std::string msg) {
  static const std::pair<std::regex, const char *> renames[] = {
      {std::regex("\\bID\\b"), "identifier"},
      {std::regex("\\bINT\\b"), "integer"},
      {std::regex("\\bFLOAT\\b"), "float"},
      {std::regex("\\bSTRING\\b"), "string"},
      {std::regex("\\bUNKNOWN_CHAR\\b"), "character"},
      {std::regex("<EOF>"), "end of file"},
  };
  for (const auto &[re, word] : renames)
    msg = std::regex_replace(msg, re, word);
  return msg;
}

/// Routes ANTLR's syntax errors to our diagnostics (replacing the console listener).
class SyntaxErrorReporter : public antlr4::BaseErrorListener {
public:
  SyntaxErrorReporter(DiagnosticEngine &diags, std::string path)
      : diags_(diags), path_(std::move(path)) {}

  void syntaxError(antlr4::Recognizer *, antlr4::Token *offending, size_t line,
                   size_t charPositionInLine, const std::string &msg, std::exception_ptr) override {
    SourceLoc loc{static_cast<uint32_t>(line), static_cast<uint32_t>(charPositionInLine + 1)};
    if (offending && offending->getType() == TdlLexer::UNKNOWN_CHAR) {
      diags_.error(path_, loc, fmt::format("unexpected character '{}'", offending->getText()));
      return;
    }
    diags_.error(path_, loc, friendlySyntaxMessage(msg));
  }

private:
  DiagnosticEngine &diags_;
  std::string path_;
};

/// Builds the AST from a parse tree that had no syntax errors. Each function handles one
/// grammar rule; its comment quotes the production.
class AstBuilder {
public:
  AstBuilder(DiagnosticEngine &diags, std::string path, antlr4::CharStream &stream)
      : diags_(diags), path_(std::move(path)), stream_(stream) {}

  bool failed() const { return failed_; }

  // file_ : decl* EOF ;
  ast::File buildFile(TdlParser::File_Context *ctx) {
    ast::File file;
    file.path = path_;
    for (auto *d : ctx->decl())
      buildDecl(d, file);
    return file;
  }

private:
  // decl : importDecl | opaqueDecl | opDecl ;
  void buildDecl(TdlParser::DeclContext *ctx, ast::File &file) {
    if (auto *i = ctx->importDecl())
      file.imports.push_back(buildImport(i));
    else if (auto *o = ctx->opaqueDecl())
      buildOpaque(o, file.opaques);
    else if (auto *op = ctx->opDecl())
      file.ops.push_back(buildOp(op));
  }

  // importDecl : IMPORT STRING ';' ;
  ast::ImportDecl buildImport(TdlParser::ImportDeclContext *ctx) {
    ast::ImportDecl d;
    d.loc = locOf(ctx->STRING()->getSymbol());
    d.path = unquote(ctx->STRING()->getSymbol());
    if (d.path.empty())
      error(d.loc, "import path is empty");
    return d;
  }

  // opaqueDecl : OPAQUE ID (',' ID)* ';' ;
  void buildOpaque(TdlParser::OpaqueDeclContext *ctx, std::vector<ast::OpaqueName> &out) {
    for (auto *id : ctx->ID())
      out.push_back({id->getText(), locOf(id->getSymbol())});
  }

  // opDecl : OP ID attrParams? '(' inputParams? ')' shapeClause? '=' expr gradClause? ';' ;
  ast::OpDecl buildOp(TdlParser::OpDeclContext *ctx) {
    ast::OpDecl op;
    op.name = ctx->ID()->getText();
    op.loc = locOf(ctx->ID()->getSymbol());
    if (auto *attrs = ctx->attrParams())
      for (auto *a : attrs->attrParam())
        op.attrs.push_back(buildAttrParam(a));
    if (auto *ins = ctx->inputParams())
      for (auto *id : ins->ID())
        op.inputs.push_back({id->getText(), locOf(id->getSymbol())});
    if (auto *shape = ctx->shapeClause()) {
      op.hasShape = true;
      for (auto *d : shape->shapeDim())
        op.shape.push_back(buildShapeDim(d));
    }
    op.body = buildExpr(ctx->expr());
    if (auto *grads = ctx->gradClause())
      for (auto *g : grads->gradItem())
        op.grads.push_back(buildGradItem(g));
    return op;
  }

  // attrParam : ID ('=' signedInt)? ;
  ast::AttrParam buildAttrParam(TdlParser::AttrParamContext *ctx) {
    ast::AttrParam a;
    a.name = ctx->ID()->getText();
    a.loc = locOf(ctx->ID()->getSymbol());
    if (auto *s = ctx->signedInt())
      a.defaultValue = buildSignedInt(s);
    return a;
  }

  // signedInt : '-'? INT ;
  int64_t buildSignedInt(TdlParser::SignedIntContext *ctx) {
    int64_t v = parseInt(ctx->INT()->getSymbol());
    return ctx->getStart()->getText() == "-" ? -v : v;
  }

  // shapeDim : '*' ID # groupShapeDim | addExpr # exprShapeDim ;
  ast::ShapeDim buildShapeDim(TdlParser::ShapeDimContext *ctx) {
    ast::ShapeDim d;
    d.loc = locOf(ctx->getStart());
    if (auto *g = dynamic_cast<TdlParser::GroupShapeDimContext *>(ctx)) {
      d.isGroup = true;
      d.group = g->ID()->getText();
    } else {
      d.expr = buildAddExpr(static_cast<TdlParser::ExprShapeDimContext *>(ctx)->addExpr());
    }
    return d;
  }

  // gradItem : GRAD ID '=' expr ;
  ast::GradItem buildGradItem(TdlParser::GradItemContext *ctx) {
    ast::GradItem g;
    g.input = ctx->ID()->getText();
    g.loc = locOf(ctx->ID()->getSymbol());
    g.value = buildExpr(ctx->expr());
    return g;
  }

  // expr : LAMBDA lambdaParams? ':' expr # lambdaExpr | cmpExpr # valueExpr ;
  ast::ExprPtr buildExpr(TdlParser::ExprContext *ctx) {
    if (auto *v = dynamic_cast<TdlParser::ValueExprContext *>(ctx))
      return buildCmpExpr(v->cmpExpr());
    auto *l = static_cast<TdlParser::LambdaExprContext *>(ctx);
    auto lam = std::make_unique<ast::Lambda>();
    setSpan(*lam, ctx);
    if (auto *params = l->lambdaParams())
      for (auto *p : params->lambdaParam())
        lam->params.push_back(buildLambdaParam(p));
    lam->body = buildExpr(l->expr());
    return lam;
  }

  // lambdaParam : ID # plainParam | '(' ID ':' addExpr ')' # extentParam | '*' ID # groupParam ;
  ast::LambdaParam buildLambdaParam(TdlParser::LambdaParamContext *ctx) {
    ast::LambdaParam p;
    if (auto *plain = dynamic_cast<TdlParser::PlainParamContext *>(ctx)) {
      p.kind = ast::LambdaParam::Kind::Plain;
      p.name = plain->ID()->getText();
      p.loc = locOf(plain->ID()->getSymbol());
    } else if (auto *ext = dynamic_cast<TdlParser::ExtentParamContext *>(ctx)) {
      p.kind = ast::LambdaParam::Kind::Extent;
      p.name = ext->ID()->getText();
      p.loc = locOf(ext->ID()->getSymbol());
      p.extent = buildAddExpr(ext->addExpr());
    } else {
      auto *g = static_cast<TdlParser::GroupParamContext *>(ctx);
      p.kind = ast::LambdaParam::Kind::Group;
      p.name = g->ID()->getText();
      p.loc = locOf(g->ID()->getSymbol());
    }
    return p;
  }

  // cmpExpr : addExpr (cmpOp addExpr)? ;
  ast::ExprPtr buildCmpExpr(TdlParser::CmpExprContext *ctx) {
    ast::ExprPtr lhs = buildAddExpr(ctx->addExpr(0));
    auto *op = ctx->cmpOp();
    if (!op)
      return lhs;
    static const std::pair<const char *, ast::BinaryOp> ops[] = {
        {"==", ast::BinaryOp::Eq}, {"!=", ast::BinaryOp::Ne}, {"<", ast::BinaryOp::Lt},
        {"<=", ast::BinaryOp::Le}, {">", ast::BinaryOp::Gt},  {">=", ast::BinaryOp::Ge}};
    ast::BinaryOp kind = ast::BinaryOp::Eq;
    for (const auto &[spelling, k] : ops)
      if (op->getText() == spelling)
        kind = k;
    return makeBinary(ctx, op->getStart(), kind, std::move(lhs), buildAddExpr(ctx->addExpr(1)));
  }

  // addExpr : mulExpr (addOp mulExpr)* ;
  ast::ExprPtr buildAddExpr(TdlParser::AddExprContext *ctx) {
    ast::ExprPtr e = buildMulExpr(ctx->mulExpr(0));
    for (size_t i = 0; i < ctx->addOp().size(); ++i) {
      auto *op = ctx->addOp(i);
      auto kind = op->getText() == "+" ? ast::BinaryOp::Add : ast::BinaryOp::Sub;
      e = makeBinary(ctx->mulExpr(0), ctx->mulExpr(i + 1), op->getStart(), kind, std::move(e),
                     buildMulExpr(ctx->mulExpr(i + 1)));
    }
    return e;
  }

  // mulExpr : unaryExpr (mulOp unaryExpr)* ;
  ast::ExprPtr buildMulExpr(TdlParser::MulExprContext *ctx) {
    ast::ExprPtr e = buildUnaryExpr(ctx->unaryExpr(0));
    for (size_t i = 0; i < ctx->mulOp().size(); ++i) {
      auto *op = ctx->mulOp(i);
      std::string s = op->getText();
      auto kind = s == "*"   ? ast::BinaryOp::Mul
                  : s == "/" ? ast::BinaryOp::Div
                             : ast::BinaryOp::Mod;
      e = makeBinary(ctx->unaryExpr(0), ctx->unaryExpr(i + 1), op->getStart(), kind, std::move(e),
                     buildUnaryExpr(ctx->unaryExpr(i + 1)));
    }
    return e;
  }

  // unaryExpr : '-' unaryExpr # negExpr | postfixExpr # plainUnaryExpr ;
  ast::ExprPtr buildUnaryExpr(TdlParser::UnaryExprContext *ctx) {
    if (auto *plain = dynamic_cast<TdlParser::PlainUnaryExprContext *>(ctx))
      return buildPostfixExpr(plain->postfixExpr());
    auto *neg = static_cast<TdlParser::NegExprContext *>(ctx);
    auto e = std::make_unique<ast::Neg>();
    setSpan(*e, ctx);
    e->operand = buildUnaryExpr(neg->unaryExpr());
    return e;
  }

  // postfixExpr : primary postfix* ;
  // postfix : '[' indexList? ']' # indexPostfix | '.' INT # extentPostfix ;
  ast::ExprPtr buildPostfixExpr(TdlParser::PostfixExprContext *ctx) {
    ast::ExprPtr e = buildPrimary(ctx->primary());
    for (auto *pf : ctx->postfix()) {
      if (auto *ext = dynamic_cast<TdlParser::ExtentPostfixContext *>(pf)) {
        auto x = std::make_unique<ast::ExtentOf>();
        setSpan(*x, ctx->getStart(), pf->getStop());
        x->loc = e->loc;
        x->dim = parseInt(ext->INT()->getSymbol());
        x->base = std::move(e);
        e = std::move(x);
        continue;
      }
      auto *ip = static_cast<TdlParser::IndexPostfixContext *>(pf);
      auto x = std::make_unique<ast::Index>();
      setSpan(*x, ctx->getStart(), pf->getStop());
      x->loc = e->loc;
      if (auto *list = ip->indexList())
        for (auto *item : list->indexItem())
          x->items.push_back(buildIndexItem(item));
      x->base = std::move(e);
      e = std::move(x);
    }
    return e;
  }

  // indexItem : ':' # sliceItem | '*' ID # groupItem | expr # exprItem ;
  ast::IndexItem buildIndexItem(TdlParser::IndexItemContext *ctx) {
    ast::IndexItem item;
    item.loc = locOf(ctx->getStart());
    if (dynamic_cast<TdlParser::SliceItemContext *>(ctx)) {
      item.kind = ast::IndexItem::Kind::Slice;
    } else if (auto *g = dynamic_cast<TdlParser::GroupItemContext *>(ctx)) {
      item.kind = ast::IndexItem::Kind::Group;
      item.group = g->ID()->getText();
    } else {
      item.kind = ast::IndexItem::Kind::Expr;
      item.expr = buildExpr(static_cast<TdlParser::ExprItemContext *>(ctx)->expr());
    }
    return item;
  }

  // primary : INT | FLOAT | ID callSuffix | ID | '(' expr ')' ;
  ast::ExprPtr buildPrimary(TdlParser::PrimaryContext *ctx) {
    if (auto *i = dynamic_cast<TdlParser::IntPrimaryContext *>(ctx)) {
      auto e = std::make_unique<ast::IntLit>();
      setSpan(*e, ctx);
      e->value = parseInt(i->INT()->getSymbol());
      return e;
    }
    if (auto *f = dynamic_cast<TdlParser::FloatPrimaryContext *>(ctx)) {
      auto e = std::make_unique<ast::FloatLit>();
      setSpan(*e, ctx);
      e->value = parseFloat(f->FLOAT()->getSymbol());
      return e;
    }
    if (auto *n = dynamic_cast<TdlParser::NamePrimaryContext *>(ctx)) {
      auto e = std::make_unique<ast::Name>();
      setSpan(*e, ctx);
      e->name = n->ID()->getText();
      return e;
    }
    if (auto *c = dynamic_cast<TdlParser::CallPrimaryContext *>(ctx))
      return buildCall(c);
    auto *p = static_cast<TdlParser::ParenPrimaryContext *>(ctx);
    return buildExpr(p->expr());
  }

  // callSuffix : attrArgs? groupArgs? '(' (expr (',' expr)*)? ')' ;
  // attrArg : ID '=' addExpr ;   groupArg : ID '=' INT ;
  ast::ExprPtr buildCall(TdlParser::CallPrimaryContext *ctx) {
    auto call = std::make_unique<ast::Call>();
    setSpan(*call, ctx);
    call->callee = ctx->ID()->getText();
    call->calleeLoc = locOf(ctx->ID()->getSymbol());
    auto *suffix = ctx->callSuffix();
    if (auto *attrs = suffix->attrArgs()) {
      call->hasAttrList = true;
      for (auto *a : attrs->attrArg())
        call->attrs.push_back(
            {a->ID()->getText(), locOf(a->ID()->getSymbol()), buildAddExpr(a->addExpr())});
    }
    if (auto *groups = suffix->groupArgs())
      for (auto *g : groups->groupArg())
        call->groups.push_back(
            {g->ID()->getText(), locOf(g->ID()->getSymbol()), parseInt(g->INT()->getSymbol())});
    for (auto *arg : suffix->expr())
      call->args.push_back(buildExpr(arg));
    return call;
  }

  ast::ExprPtr makeBinary(antlr4::ParserRuleContext *span, antlr4::Token *opTok, ast::BinaryOp op,
                          ast::ExprPtr lhs, ast::ExprPtr rhs) {
    return makeBinary(span, span, opTok, op, std::move(lhs), std::move(rhs));
  }

  ast::ExprPtr makeBinary(antlr4::ParserRuleContext *first, antlr4::ParserRuleContext *last,
                          antlr4::Token *opTok, ast::BinaryOp op, ast::ExprPtr lhs,
                          ast::ExprPtr rhs) {
    auto e = std::make_unique<ast::Binary>();
    setSpan(*e, first->getStart(), last->getStop());
    e->loc = locOf(opTok);
    e->op = op;
    e->lhs = std::move(lhs);
    e->rhs = std::move(rhs);
    return e;
  }

  void setSpan(ast::Expr &e, antlr4::ParserRuleContext *ctx) {
    setSpan(e, ctx->getStart(), ctx->getStop());
  }

  /// Records the location of `first` and the source text from `first` to `last`, with
  /// runs of whitespace and comments collapsed to one space.
  void setSpan(ast::Expr &e, antlr4::Token *first, antlr4::Token *last) {
    e.loc = locOf(first);
    e.begin = e.loc;
    if (!first || !last || last->getStopIndex() < first->getStartIndex())
      return;
    std::string raw =
        stream_.getText(antlr4::misc::Interval(first->getStartIndex(), last->getStopIndex()));
    std::string out;
    bool inComment = false, pendingSpace = false;
    for (char c : raw) {
      if (inComment) {
        if (c == '\n')
          inComment = false;
        continue;
      }
      if (c == '#') {
        inComment = true;
        pendingSpace = true;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        pendingSpace = true;
        continue;
      }
      if (pendingSpace && !out.empty())
        out += ' ';
      pendingSpace = false;
      out += c;
    }
    e.text = std::move(out);
  }

  int64_t parseInt(antlr4::Token *tok) {
    std::string s = tok->getText();
    int64_t v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      error(locOf(tok), fmt::format("integer literal '{}' is out of range", s));
      return 0;
    }
    return v;
  }

  double parseFloat(antlr4::Token *tok) {
    std::string s = tok->getText();
    double v = std::strtod(s.c_str(), nullptr);
    if (!std::isfinite(v))
      error(locOf(tok), fmt::format("float literal '{}' is out of range", s));
    return v;
  }

  std::string unquote(antlr4::Token *tok) {
    std::string s = tok->getText();
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      char c = s[++i];
      switch (c) {
      case '\\':
      case '"':
        out += c;
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      default: {
        SourceLoc loc = locOf(tok);
        loc.col += static_cast<uint32_t>(i - 1);
        error(loc, fmt::format("unknown escape sequence '\\{}' in string", c));
      }
      }
    }
    return out;
  }

  void error(SourceLoc loc, std::string msg) {
    diags_.error(path_, loc, std::move(msg));
    failed_ = true;
  }

  DiagnosticEngine &diags_;
  std::string path_;
  antlr4::CharStream &stream_;
  bool failed_ = false;
};

/// Rejects input whose nesting (brackets, lambdas, runs of unary minus) or declaration
/// length would make the recursive passes run out of stack. Reports the first violation.
bool checkLimits(antlr4::CommonTokenStream &tokens, const std::string &path,
                 DiagnosticEngine &diags) {
  std::vector<unsigned> lambdasAtLevel{0};
  unsigned lambdas = 0, minusRun = 0, declTokens = 0;
  antlr4::Token *declStart = nullptr;
  size_t prevType = antlr4::Token::INVALID_TYPE;
  for (antlr4::Token *t : tokens.getTokens()) {
    size_t type = t->getType();
    if (type == antlr4::Token::EOF)
      break;
    std::string s = type == TdlLexer::ID || type == TdlLexer::INT || type == TdlLexer::FLOAT ||
                            type == TdlLexer::STRING
                        ? std::string()
                        : t->getText();
    if (!declStart)
      declStart = t;
    if (++declTokens > kMaxTokensPerDeclaration) {
      diags.error(path, locOf(declStart),
                  fmt::format("declaration is longer than {} tokens", kMaxTokensPerDeclaration));
      return false;
    }
    bool afterOperand =
        prevType == TdlLexer::ID || prevType == TdlLexer::INT || prevType == TdlLexer::FLOAT;
    if (s == "(" || s == "[" || s == "{") {
      lambdasAtLevel.push_back(0);
      minusRun = 0;
    } else if (s == ")" || s == "]" || s == "}") {
      if (lambdasAtLevel.size() > 1) {
        lambdas -= lambdasAtLevel.back();
        lambdasAtLevel.pop_back();
      }
      afterOperand = true;
    } else if (s == ";") {
      lambdasAtLevel.assign(1, 0);
      lambdas = minusRun = declTokens = 0;
      declStart = nullptr;
    } else if (type == TdlLexer::LAMBDA) {
      ++lambdasAtLevel.back();
      ++lambdas;
    } else if (s == "-" && !afterOperand) {
      ++minusRun;
    } else if (s != "-") {
      minusRun = 0;
    }
    unsigned depth = static_cast<unsigned>(lambdasAtLevel.size() - 1) + lambdas + minusRun;
    if (depth > kMaxNestingDepth) {
      diags.error(path, locOf(t),
                  fmt::format("expression nests deeper than {} levels", kMaxNestingDepth));
      return false;
    }
    prevType = (s == ")" || s == "]" || s == "}") ? static_cast<size_t>(TdlLexer::ID) : type;
  }
  return true;
}

} // namespace

llvm::Expected<ast::File> parseTdl(const std::string &path, const std::string &text,
                                   DiagnosticEngine &diags) {
  diags.sources().addFile(path, text);
  unsigned errorsBefore = diags.errorCount();

  // ANTLR decodes UTF-8 itself and throws on bad bytes: reject them first, located.
  const auto *begin = reinterpret_cast<const llvm::UTF8 *>(text.data());
  const llvm::UTF8 *bad = begin;
  if (!llvm::isLegalUTF8String(&bad, begin + text.size())) {
    SourceLoc loc{1, 1};
    for (const llvm::UTF8 *p = begin; p < bad; ++p) {
      if (*p == '\n') {
        ++loc.line;
        loc.col = 1;
      } else if ((*p & 0xC0) != 0x80) {
        ++loc.col;
      }
    }
    diags.error(path, loc, fmt::format("invalid UTF-8 byte 0x{:02x}", static_cast<unsigned>(*bad)));
    return diags.makeError(path);
  }

  antlr4::ANTLRInputStream input(text);
  TdlLexer lexer(&input);
  SyntaxErrorReporter reporter(diags, path);
  lexer.removeErrorListeners();
  lexer.addErrorListener(&reporter);
  antlr4::CommonTokenStream tokens(&lexer);
  tokens.fill();
  if (!checkLimits(tokens, path, diags))
    return diags.makeError(path);
  TdlParser parser(&tokens);
  parser.removeErrorListeners();
  parser.addErrorListener(&reporter);

  TdlParser::File_Context *tree = parser.file_();
  if (diags.errorCount() != errorsBefore)
    return diags.makeError(path);

  AstBuilder builder(diags, path, input);
  ast::File file = builder.buildFile(tree);
  if (builder.failed())
    return diags.makeError(path);
  return file;
}

} // namespace tofu
