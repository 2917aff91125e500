// Tdl.g4 — the grammar of TDL, the Tensor Description Language (shared/docs/TDL.md).
//
// Only syntax lives here; name resolution, ranks, extents and affinity are checked by
// analysis/sema. The generated parser is used only through grammar/parser.h.
grammar Tdl;

file_ : decl* EOF ;

decl
    : importDecl
    | opaqueDecl
    | opDecl
    ;

importDecl : IMPORT STRING ';' ;

opaqueDecl : OPAQUE ID (',' ID)* ';' ;

opDecl
    : OP ID attrParams? '(' inputParams? ')' shapeClause? '=' expr gradClause? ';'
    ;

attrParams : '<' attrParam (',' attrParam)* '>' ;

attrParam : ID ('=' signedInt)? ;

signedInt : '-'? INT ;

inputParams : ID (',' ID)* ;

shapeClause : '->' '[' (shapeDim (',' shapeDim)*)? ']' ;

// An extension of TDL.md: '*g' stands for the extents of the output group g.
shapeDim
    : '*' ID                                    # groupShapeDim
    | addExpr                                   # exprShapeDim
    ;

gradClause : gradItem (',' gradItem)* ;

gradItem : GRAD ID '=' expr ;

expr
    : LAMBDA lambdaParams? ':' expr             # lambdaExpr
    | cmpExpr                                   # valueExpr
    ;

lambdaParams : lambdaParam (',' lambdaParam)* ;

lambdaParam
    : ID                                        # plainParam
    | '(' ID ':' addExpr ')'                    # extentParam
    | '*' ID                                    # groupParam
    ;

// Comparisons do not chain: 'a < b < c' is a syntax error.
cmpExpr : addExpr (cmpOp addExpr)? ;

cmpOp : '==' | '!=' | '<' | '<=' | '>' | '>=' ;

addExpr : mulExpr (addOp mulExpr)* ;

addOp : '+' | '-' ;

mulExpr : unaryExpr (mulOp unaryExpr)* ;

mulOp : '*' | '/' | '%' ;

unaryExpr
    : '-' unaryExpr                             # negExpr
    | postfixExpr                               # plainUnaryExpr
    ;

postfixExpr : primary postfix* ;

postfix
    : '[' indexList? ']'                        # indexPostfix
    | '.' INT                                   # extentPostfix
    ;

indexList : indexItem (',' indexItem)* ;

indexItem
    : ':'                                       # sliceItem
    | '*' ID                                    # groupItem
    | expr                                      # exprItem
    ;

primary
    : INT                                       # intPrimary
    | FLOAT                                     # floatPrimary
    | ID callSuffix                             # callPrimary
    | ID                                        # namePrimary
    | '(' expr ')'                              # parenPrimary
    ;

// Attribute arguments '<a = 1>' and (an extension) group lengths '{g = 2}'.
callSuffix : attrArgs? groupArgs? '(' (expr (',' expr)*)? ')' ;

attrArgs : '<' attrArg (',' attrArg)* '>' ;

attrArg : ID '=' addExpr ;

groupArgs : '{' groupArg (',' groupArg)* '}' ;

groupArg : ID '=' INT ;

IMPORT : 'import' ;
OPAQUE : 'opaque' ;
OP : 'op' ;
LAMBDA : 'lambda' ;
GRAD : 'grad' ;

ID : [A-Za-z_] [A-Za-z0-9_]* ;

FLOAT
    : DIGITS '.' DIGITS? EXPONENT?
    | DIGITS EXPONENT
    ;

INT : DIGITS ;

STRING : '"' (~["\\\r\n] | '\\' ~[\r\n])* '"' ;

fragment DIGITS : [0-9]+ ;
fragment EXPONENT : [eE] [+-]? DIGITS ;

COMMENT : '#' ~[\r\n]* -> skip ;
WS : [ \t\r\n]+ -> skip ;

// Anything else becomes one token, so the parser (not the lexer) reports it with our
// diagnostics and recovery.
UNKNOWN_CHAR : . ;
