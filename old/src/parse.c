/* parse.c — recursive-descent parser for .cf specs (grammar: docs/spec.md).
 *
 * The parser drives the public builder (cf_graph_*), so a spec and the same
 * program written against the API give the same graph.  Before each builder
 * call it stamps the location of the operator or call token, so shape errors
 * the graph detects come back as file:line:col diagnostics too.  It stops at
 * the first error and frees the partial graph. */
#include "cf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum sym_kind { SYM_VAR, SYM_INPUT, SYM_PARAM, SYM_OUTPUT } sym_kind;

/* A name bound by a statement.  The text stays in the source buffer. */
typedef struct sym {
    size_t off;
    uint32_t len;        /* 0: empty slot                                     */
    sym_kind kind;
    cf_value v;
    int line, col;
} sym;

typedef struct parser {
    cf_lexer lx;
    cf_token tok;        /* the current token                                 */
    cf_token prev;       /* the one before it (where an unfinished spec ends)  */
    cf_graph *g;
    cf_error *err;
    const char *file;    /* owned by the graph's arena: nodes keep pointing at it */
    int depth;
    sym *syms;           /* open-addressing hash table                        */
    size_t cap, count;
} parser;

#define TRY(x)                           \
    do {                                 \
        cf_status st_ = (x);             \
        if (st_ != CF_OK)                \
            return st_;                  \
    } while (0)

/* ---- tokens --------------------------------------------------------------------- */

static cf_status advance(parser *p)
{
    p->prev = p->tok;
    return cf_lex_next(&p->lx, &p->tok, p->err);
}

/* The token after the current one, without consuming anything.  A lexical
 * error there shows up as EOF here and is reported when the parser gets to it. */
static cf_token peek(const parser *p)
{
    cf_lexer copy = p->lx;
    cf_token t;
    if (cf_lex_next(&copy, &t, NULL) != CF_OK)
        t.kind = CF_TOK_EOF;
    return t;
}

static const char *tok_text(const parser *p, const cf_token *t, char *buf, size_t n)
{
    size_t len = t->len < n - 1 ? t->len : n - 1;
    memcpy(buf, p->lx.src + t->off, len);
    buf[len] = '\0';
    return buf;
}

static bool tok_eq(const parser *p, const cf_token *t, const char *s)
{
    return t->kind == CF_TOK_IDENT && strlen(s) == t->len && memcmp(p->lx.src + t->off, s, t->len) == 0;
}

/* How the current token reads in "expected X near Y". */
static const char *tok_desc(const parser *p, const cf_token *t, char *buf, size_t n)
{
    if (t->kind == CF_TOK_IDENT || t->kind == CF_TOK_NUMBER) {
        char text[40];
        tok_text(p, t, text, sizeof text);
        snprintf(buf, n, "'%s%s'", text, t->len >= sizeof text ? "..." : "");
    } else if (t->kind == CF_TOK_END) {
        snprintf(buf, n, "%s", p->lx.src[t->off] == ';' ? "';'" : "end of line");
    } else {
        snprintf(buf, n, "%s", cf_tok_kind_name(t->kind));
    }
    return buf;
}

__attribute__((format(printf, 3, 4)))
static cf_status error_at(parser *p, const cf_token *t, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cf_lex_errorf(&p->lx, CF_ERR_PARSE, t->line, t->col, p->err, "%s", msg);
}

static cf_status error_expected(parser *p, const char *what)
{
    char near[64];
    if (p->tok.kind == CF_TOK_EOF && p->prev.len > 0) {
        /* Point just past the last token, not at the empty line after it. */
        cf_token at = p->prev;
        at.col += (int)at.len;
        return error_at(p, &at, "expected %s after %s, at the end of the input", what,
                        tok_desc(p, &p->prev, near, sizeof near));
    }
    return error_at(p, &p->tok, "expected %s near %s", what, tok_desc(p, &p->tok, near, sizeof near));
}

static cf_status expect(parser *p, cf_tok_kind k)
{
    if (p->tok.kind != k)
        return error_expected(p, cf_tok_kind_name(k));
    return advance(p);
}

static bool is_keyword(const parser *p, const cf_token *t)
{
    return tok_eq(p, t, "input") || tok_eq(p, t, "param") || tok_eq(p, t, "output");
}

/* ---- the builder, with locations ---------------------------------------------- */

static void at(parser *p, const cf_token *t) { cf_graph_set_loc(p->g, (cf_loc){p->file, t->line, t->col}); }

/* After a builder call: on failure the graph holds the (located) error. */
static cf_status built(parser *p, cf_value v)
{
    const cf_error *ge = cf_graph_error(p->g);
    if (v >= 0 && ge->status == CF_OK)
        return CF_OK;
    if (ge->status == CF_OK)
        return cf_errorf(p->err, CF_ERR_INTERNAL, (cf_loc){0}, "builder failed without an error");
    if (p->err) {
        *p->err = *ge;
        if (ge->line > 0)
            cf_lex_append_context(&p->lx, ge->line, ge->col, p->err);
    }
    return ge->status;
}

/* ---- symbols ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static sym *sym_find(const parser *p, const cf_token *t)
{
    if (!p->cap)
        return NULL;
    const char *name = p->lx.src + t->off;
    for (size_t i = hash_bytes(name, t->len) & (p->cap - 1);; i = (i + 1) & (p->cap - 1)) {
        sym *s = &p->syms[i];
        if (!s->len)
            return NULL;
        if (s->len == t->len && memcmp(p->lx.src + s->off, name, t->len) == 0)
            return s;
    }
}

static cf_status sym_add(parser *p, const cf_token *t, sym_kind kind, cf_value v)
{
    if (p->count >= CF_GRAPH_MAX_NODES)
        return error_at(p, t, "too many names (at most %d)", CF_GRAPH_MAX_NODES);
    if (2 * (p->count + 1) > p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        sym *ns = calloc(nc, sizeof *ns);
        if (!ns)
            return cf_errorf(p->err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
        for (size_t i = 0; i < p->cap; i++) {
            if (!p->syms[i].len)
                continue;
            size_t j = hash_bytes(p->lx.src + p->syms[i].off, p->syms[i].len) & (nc - 1);
            while (ns[j].len)
                j = (j + 1) & (nc - 1);
            ns[j] = p->syms[i];
        }
        free(p->syms);
        p->syms = ns;
        p->cap = nc;
    }
    size_t j = hash_bytes(p->lx.src + t->off, t->len) & (p->cap - 1);
    while (p->syms[j].len)
        j = (j + 1) & (p->cap - 1);
    p->syms[j] = (sym){.off = t->off, .len = (uint32_t)t->len, .kind = kind, .v = v,
                       .line = t->line, .col = t->col};
    p->count++;
    return CF_OK;
}

/* A name being defined must be new and not a keyword. */
static cf_status check_new_name(parser *p, const cf_token *t)
{
    char name[CF_MAX_NAME];
    tok_text(p, t, name, sizeof name);
    if (is_keyword(p, t))
        return error_at(p, t, "'%s' is a keyword and cannot be used as a name", name);
    const sym *s = sym_find(p, t);
    if (s) {
        static const char *const what[] = {"variable", "input", "param", "output"};
        return error_at(p, t, "redefinition of '%s' (%s defined at %s:%d:%d)", name, what[s->kind],
                        p->file, s->line, s->col);
    }
    return CF_OK;
}

/* ---- expressions ------------------------------------------------------------------ */

static cf_status parse_expr(parser *p, cf_value *out);
static cf_status parse_unary(parser *p, cf_value *out);

/* "neg/1 abs/1 ... max/1,2 ...": every callable name with its arities. */
static void function_list(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < CF_OP_COUNT; i++) {
        const char *kw = cf_op_name((cf_op)i);
        int a1 = cf_op_lookup(kw, 1), a2 = cf_op_lookup(kw, 2);
        int first = a1 >= 0 && (a2 < 0 || a1 < a2) ? a1 : a2;
        if (first != i)
            continue; /* a leaf, or listed already under its other arity */
        int w = snprintf(buf + k, n - k, "%s%s/%s", k ? " " : "", kw,
                         a1 >= 0 && a2 >= 0 ? "1,2" : a1 >= 0 ? "1" : "2");
        if (w < 0 || (size_t)w >= n - k)
            return;
        k += (size_t)w;
    }
}

/* axis_arg = "axis" "=" [ "-" ] NUMBER */
static cf_status parse_axis(parser *p, int *axis)
{
    TRY(advance(p)); /* axis */
    TRY(advance(p)); /* = */
    cf_token start = p->tok;
    bool neg = false;
    if (p->tok.kind == CF_TOK_MINUS) {
        neg = true;
        TRY(advance(p));
    }
    if (p->tok.kind != CF_TOK_NUMBER)
        return error_expected(p, "an axis (0, 1 or -1)");
    char text[40];
    tok_text(p, &p->tok, text, sizeof text);
    bool integral = strspn(text, "0123456789") == p->tok.len;
    double v = neg ? -p->tok.num : p->tok.num;
    if (!integral || !(v == 0 || v == 1 || v == -1))
        return error_at(p, &start, "bad axis %s%s: expected 0, 1 or -1", neg ? "-" : "", text);
    *axis = (int)v;
    return advance(p);
}

/* call = NAME "(" [ arg { "," arg } ] ")"
 * arg  = expr | axis_arg */
static cf_status parse_call(parser *p, const cf_token *name_tok, cf_value *out)
{
    char name[CF_MAX_NAME];
    tok_text(p, name_tok, name, sizeof name);
    bool known = cf_op_lookup(name, 1) >= 0 || cf_op_lookup(name, 2) >= 0;
    if (!known && sym_find(p, name_tok))
        return error_at(p, name_tok, "'%s' is a value, not a function", name);
    TRY(advance(p)); /* ( */
    cf_value args[2] = {-1, -1};
    int nargs = 0, axis = -1;
    bool have_axis = false;
    cf_token axis_tok = {0};
    if (p->tok.kind != CF_TOK_RPAREN) {
        for (;;) {
            cf_token t = p->tok;
            if (t.kind == CF_TOK_IDENT && peek(p).kind == CF_TOK_EQUAL) {
                char kw[CF_MAX_NAME];
                tok_text(p, &t, kw, sizeof kw);
                if (strcmp(kw, "axis") != 0)
                    return error_at(p, &t, "unknown keyword argument '%s' (only axis= is accepted)", kw);
                if (have_axis)
                    return error_at(p, &t, "axis= given twice");
                have_axis = true;
                axis_tok = t;
                TRY(parse_axis(p, &axis));
            } else {
                if (have_axis)
                    return error_at(p, &t, "positional argument after axis=");
                cf_value v;
                TRY(parse_expr(p, &v));
                if (nargs < 2)
                    args[nargs] = v;
                nargs++;
            }
            if (p->tok.kind != CF_TOK_COMMA)
                break;
            TRY(advance(p));
        }
    }
    if (p->tok.kind != CF_TOK_RPAREN)
        return error_expected(p, "')'");
    TRY(advance(p));

    if (!known) {
        char list[512];
        function_list(list, sizeof list);
        return error_at(p, name_tok, "unknown function '%s' with %d argument%s (functions: %s)", name,
                        nargs, nargs == 1 ? "" : "s", list);
    }
    int op = cf_op_lookup(name, nargs);
    if (op < 0) {
        int a1 = cf_op_lookup(name, 1), a2 = cf_op_lookup(name, 2);
        if (a1 >= 0 && a2 >= 0)
            return error_at(p, name_tok, "'%s' takes 1 argument (a reduction) or 2 (elementwise), got %d",
                            name, nargs);
        return error_at(p, name_tok, "'%s' takes %d argument%s, got %d", name, a1 >= 0 ? 1 : 2,
                        a1 >= 0 ? "" : "s", nargs);
    }
    cf_op_class cls = cf_op_class_of((cf_op)op);
    if (have_axis && cls != CF_OPC_REDUCE)
        return error_at(p, &axis_tok, "'%s' takes no axis= argument (only reductions do)", name);
    at(p, name_tok);
    cf_value v = -1;
    switch (cls) {
    case CF_OPC_MATMUL: v = cf_graph_matmul(p->g, args[0], args[1]); break;
    case CF_OPC_UNARY: v = cf_graph_unary(p->g, (cf_op)op, args[0]); break;
    case CF_OPC_BINARY: v = cf_graph_binary(p->g, (cf_op)op, args[0], args[1]); break;
    case CF_OPC_REDUCE: v = cf_graph_reduce(p->g, (cf_op)op, args[0], axis); break;
    case CF_OPC_LAYOUT: v = cf_graph_transpose(p->g, args[0]); break;
    case CF_OPC_LEAF: break; /* cf_op_lookup never returns leaves */
    }
    TRY(built(p, v));
    *out = v;
    return CF_OK;
}

/* primary = NUMBER | NAME | call | "(" expr ")" */
static cf_status parse_primary(parser *p, cf_value *out)
{
    cf_token t = p->tok;
    switch (t.kind) {
    case CF_TOK_NUMBER:
        at(p, &t);
        *out = cf_graph_const(p->g, t.num);
        TRY(built(p, *out));
        return advance(p);
    case CF_TOK_LPAREN:
        TRY(advance(p));
        TRY(parse_expr(p, out));
        if (p->tok.kind != CF_TOK_RPAREN)
            return error_expected(p, "')'");
        return advance(p);
    case CF_TOK_IDENT: {
        TRY(advance(p));
        if (p->tok.kind == CF_TOK_LPAREN)
            return parse_call(p, &t, out);
        char name[CF_MAX_NAME];
        tok_text(p, &t, name, sizeof name);
        const sym *s = sym_find(p, &t);
        if (s) {
            *out = s->v;
            return CF_OK;
        }
        if (is_keyword(p, &t))
            return error_at(p, &t, "'%s' is a keyword; it starts a statement", name);
        if (cf_op_lookup(name, 1) >= 0 || cf_op_lookup(name, 2) >= 0)
            return error_at(p, &t, "undefined name '%s' (a function: call it as %s(...))", name, name);
        return error_at(p, &t, "undefined name '%s'", name);
    }
    default:
        return error_expected(p, "an expression");
    }
}

/* power = primary [ "**" unary ]      (right-associative; binds tighter than unary minus) */
static cf_status parse_power(parser *p, cf_value *out)
{
    cf_value base;
    TRY(parse_primary(p, &base));
    if (p->tok.kind != CF_TOK_POW) {
        *out = base;
        return CF_OK;
    }
    cf_token op = p->tok;
    TRY(advance(p));
    cf_value e;
    TRY(parse_unary(p, &e));
    at(p, &op);
    *out = cf_graph_binary(p->g, CF_OP_POW, base, e);
    return built(p, *out);
}

/* unary = "-" unary | power
 * Every level of nesting passes through here, so this is where depth is bounded. */
static cf_status parse_unary(parser *p, cf_value *out)
{
    if (p->depth >= CF_PARSE_MAX_DEPTH)
        return error_at(p, &p->tok, "expression nested too deeply (more than %d levels)",
                        CF_PARSE_MAX_DEPTH);
    p->depth++;
    cf_status st;
    if (p->tok.kind == CF_TOK_MINUS) {
        cf_token op = p->tok;
        TRY(advance(p));
        cf_token next = peek(p);
        if (p->tok.kind == CF_TOK_NUMBER && next.kind != CF_TOK_POW) {
            /* "-1" is the constant -1, not neg(1); "-2**2" stays -(2**2) */
            at(p, &op);
            *out = cf_graph_const(p->g, -p->tok.num);
            st = built(p, *out);
            if (st == CF_OK)
                st = advance(p);
        } else {
            cf_value x;
            st = parse_unary(p, &x);
            if (st == CF_OK) {
                at(p, &op);
                *out = cf_graph_unary(p->g, CF_OP_NEG, x);
                st = built(p, *out);
            }
        }
    } else {
        st = parse_power(p, out);
    }
    p->depth--;
    return st;
}

/* term = unary { ( "*" | "/" | "@" ) unary } */
static cf_status parse_term(parser *p, cf_value *out)
{
    cf_value lhs;
    TRY(parse_unary(p, &lhs));
    while (p->tok.kind == CF_TOK_STAR || p->tok.kind == CF_TOK_SLASH || p->tok.kind == CF_TOK_AT) {
        cf_token op = p->tok;
        TRY(advance(p));
        cf_value rhs;
        TRY(parse_unary(p, &rhs));
        at(p, &op);
        if (op.kind == CF_TOK_AT)
            lhs = cf_graph_matmul(p->g, lhs, rhs);
        else
            lhs = cf_graph_binary(p->g, op.kind == CF_TOK_STAR ? CF_OP_MUL : CF_OP_DIV, lhs, rhs);
        TRY(built(p, lhs));
    }
    *out = lhs;
    return CF_OK;
}

/* expr = term { ( "+" | "-" ) term } */
static cf_status parse_expr(parser *p, cf_value *out)
{
    cf_value lhs;
    TRY(parse_term(p, &lhs));
    while (p->tok.kind == CF_TOK_PLUS || p->tok.kind == CF_TOK_MINUS) {
        cf_token op = p->tok;
        TRY(advance(p));
        cf_value rhs;
        TRY(parse_term(p, &rhs));
        at(p, &op);
        lhs = cf_graph_binary(p->g, op.kind == CF_TOK_PLUS ? CF_OP_ADD : CF_OP_SUB, lhs, rhs);
        TRY(built(p, lhs));
    }
    *out = lhs;
    return CF_OK;
}

/* ---- statements ------------------------------------------------------------------- */

/* dtype = "bf16" | "f16" | "f32" */
static cf_status parse_dtype(parser *p, cf_dtype *t)
{
    if (p->tok.kind != CF_TOK_IDENT)
        return error_expected(p, "a dtype (bf16, f16 or f32)");
    for (int i = 0; i < CF_DTYPE_COUNT; i++)
        if (tok_eq(p, &p->tok, cf_dtype_name((cf_dtype)i))) {
            *t = (cf_dtype)i;
            return advance(p);
        }
    char name[CF_MAX_NAME];
    return error_at(p, &p->tok, "unknown dtype '%s' (expected bf16, f16 or f32)",
                    tok_text(p, &p->tok, name, sizeof name));
}

static cf_status expect_name(parser *p, const char *what)
{
    if (p->tok.kind != CF_TOK_IDENT)
        return error_expected(p, what);
    return check_new_name(p, &p->tok);
}

/* input_decl = "input" NAME ":" dtype "[" dim { "," dim } "]"
 * dim        = NAME */
static cf_status parse_input(parser *p)
{
    TRY(advance(p));
    TRY(expect_name(p, "an input name"));
    cf_token name_tok = p->tok;
    char name[CF_MAX_NAME];
    tok_text(p, &name_tok, name, sizeof name);
    TRY(advance(p));
    if (p->tok.kind != CF_TOK_COLON)
        return error_expected(p, "':' and a type, e.g. 'input X: bf16[M, K]',");
    TRY(advance(p));
    cf_dtype t;
    TRY(parse_dtype(p, &t));
    if (p->tok.kind != CF_TOK_LBRACKET)
        return error_expected(p, "'[' and the input's dims, e.g. bf16[M, K],");
    cf_token open = p->tok;
    TRY(advance(p));
    cf_token dims[2];
    int rank = 0;
    cf_token extra = {0};
    if (p->tok.kind != CF_TOK_RBRACKET) {
        for (;;) {
            if (p->tok.kind != CF_TOK_IDENT)
                return p->tok.kind == CF_TOK_NUMBER
                           ? error_at(p, &p->tok, "expected a dim name near %s: dims are symbols, "
                                      "their sizes are bound at run time",
                                      tok_desc(p, &p->tok, name, sizeof name))
                           : error_expected(p, "a dim name");
            if (rank < 2)
                dims[rank] = p->tok;
            else if (rank == 2)
                extra = p->tok;
            rank++;
            TRY(advance(p));
            if (p->tok.kind != CF_TOK_COMMA)
                break;
            TRY(advance(p));
        }
    }
    if (p->tok.kind != CF_TOK_RBRACKET)
        return error_expected(p, "',' or ']'");
    if (rank == 0)
        return error_at(p, &open, "input '%s' has rank 0; inputs have rank 1 or 2 (use param for a scalar)",
                        name);
    if (rank > 2)
        return error_at(p, &extra, "input '%s' has rank %d; inputs have rank 1 or 2", name, rank);
    TRY(advance(p));
    cf_dim d[2];
    for (int i = 0; i < rank; i++) {
        char dn[CF_MAX_NAME];
        at(p, &dims[i]);
        d[i] = cf_graph_dim(p->g, tok_text(p, &dims[i], dn, sizeof dn));
        TRY(built(p, d[i]));
    }
    at(p, &name_tok);
    cf_value v = cf_graph_input(p->g, name, t, rank, d);
    TRY(built(p, v));
    return sym_add(p, &name_tok, SYM_INPUT, v);
}

/* param_decl = "param" NAME [ ":" "f32" ] */
static cf_status parse_param(parser *p)
{
    TRY(advance(p));
    TRY(expect_name(p, "a param name"));
    cf_token name_tok = p->tok;
    char name[CF_MAX_NAME];
    tok_text(p, &name_tok, name, sizeof name);
    TRY(advance(p));
    if (p->tok.kind == CF_TOK_COLON) {
        TRY(advance(p));
        cf_token type_tok = p->tok;
        cf_dtype t;
        TRY(parse_dtype(p, &t));
        if (t != CF_F32)
            return error_at(p, &type_tok, "param '%s' must be f32 (params are f32 runtime scalars)", name);
    }
    at(p, &name_tok);
    cf_value v = cf_graph_param(p->g, name);
    TRY(built(p, v));
    return sym_add(p, &name_tok, SYM_PARAM, v);
}

/* A value gets the first name it is bound to: "y = x" keeps x's name. */
static cf_status name_value(parser *p, const cf_token *t, cf_value v)
{
    const cf_node *n = cf_graph_node(p->g, v);
    if (!n || n->name)
        return CF_OK;
    char name[CF_MAX_NAME];
    at(p, t);
    cf_status st = cf_graph_set_name(p->g, v, tok_text(p, t, name, sizeof name));
    return st == CF_OK ? CF_OK : built(p, -1);
}

/* output_decl = "output" NAME [ ":" dtype ] "=" expr */
static cf_status parse_output(parser *p)
{
    TRY(advance(p));
    TRY(expect_name(p, "an output name"));
    cf_token name_tok = p->tok;
    char name[CF_MAX_NAME];
    tok_text(p, &name_tok, name, sizeof name);
    TRY(advance(p));
    cf_dtype t = CF_BF16;
    if (p->tok.kind == CF_TOK_COLON) {
        TRY(advance(p));
        TRY(parse_dtype(p, &t));
    }
    TRY(expect(p, CF_TOK_EQUAL));
    cf_value v;
    TRY(parse_expr(p, &v));
    TRY(name_value(p, &name_tok, v));
    at(p, &name_tok);
    if (cf_graph_output(p->g, name, v, t) != CF_OK)
        return built(p, -1);
    return sym_add(p, &name_tok, SYM_OUTPUT, v);
}

/* assignment = NAME "=" expr */
static cf_status parse_assignment(parser *p)
{
    cf_token name_tok = p->tok;
    TRY(advance(p));
    if (p->tok.kind != CF_TOK_EQUAL) {
        char near[64];
        return error_at(p, &p->tok, "expected '=' near %s (a statement is input, param, output "
                        "or NAME = expr)", tok_desc(p, &p->tok, near, sizeof near));
    }
    TRY(check_new_name(p, &name_tok));
    TRY(advance(p));
    cf_value v;
    TRY(parse_expr(p, &v));
    TRY(name_value(p, &name_tok, v));
    return sym_add(p, &name_tok, SYM_VAR, v);
}

/* statement = input_decl | param_decl | output_decl | assignment */
static cf_status parse_statement(parser *p)
{
    if (p->tok.kind != CF_TOK_IDENT)
        return error_expected(p, "a statement (input, param, output or NAME = expr)");
    if (tok_eq(p, &p->tok, "input"))
        return parse_input(p);
    if (tok_eq(p, &p->tok, "param"))
        return parse_param(p);
    if (tok_eq(p, &p->tok, "output"))
        return parse_output(p);
    return parse_assignment(p);
}

/* spec = { [ statement ] END } [ statement ] EOF
 * END is a newline (outside brackets) or ';'. */
static cf_status parse_spec(parser *p)
{
    TRY(advance(p));
    for (;;) {
        if (p->tok.kind == CF_TOK_EOF)
            break;
        if (p->tok.kind == CF_TOK_END) {
            TRY(advance(p));
            continue;
        }
        TRY(parse_statement(p));
        if (p->tok.kind != CF_TOK_END && p->tok.kind != CF_TOK_EOF)
            return error_expected(p, "end of statement");
    }
    if (cf_graph_num_outputs(p->g) == 0)
        return error_at(p, &p->tok, "spec declares no output (add e.g. 'output Y = ...')");
    return CF_OK;
}

/* ---- entry points -------------------------------------------------------------------- */

cf_status cf_spec_parse(const char *src, size_t len, const char *filename, cf_graph **out, cf_error *err)
{
    cf_error_clear(err);
    if (!out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_spec_parse: out is NULL");
    *out = NULL;
    if (!src && len)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_spec_parse: src is NULL");
    if (!filename)
        filename = "<spec>";
    if (len > CF_SPEC_MAX_BYTES)
        return cf_errorf(err, CF_ERR_PARSE, (cf_loc){0}, "%s: spec is too large (%zu bytes; at most %zu)",
                         filename, len, CF_SPEC_MAX_BYTES);
    cf_graph *g = cf_graph_new();
    const char *file = g ? cf_arena_strdup(&g->arena, filename) : NULL;
    if (!file) {
        cf_graph_free(g);
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    }
    parser p = {.g = g, .err = err, .file = file};
    cf_lex_init(&p.lx, src ? src : "", len, file);
    cf_status st = parse_spec(&p);
    free(p.syms);
    if (st != CF_OK) {
        if (err && err->status == CF_OK) /* every failing path fills err; be safe */
            cf_errorf(err, st, (cf_loc){0}, "%s: parse failed", filename);
        cf_graph_free(g);
        return st;
    }
    cf_graph_set_loc(g, (cf_loc){0}); /* later API calls are not from the spec */
    *out = g;
    return CF_OK;
}

cf_status cf_spec_parse_file(const char *path, cf_graph **out, cf_error *err)
{
    cf_error_clear(err);
    if (out)
        *out = NULL;
    if (!path || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_spec_parse_file: %s is NULL",
                         path ? "out" : "path");
    FILE *f = fopen(path, "rb");
    if (!f)
        return cf_errorf(err, CF_ERR_IO, (cf_loc){0}, "cannot open '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    cf_status st = CF_OK;
    for (;;) {
        if (len == cap) {
            if (cap > CF_SPEC_MAX_BYTES) {
                st = cf_errorf(err, CF_ERR_PARSE, (cf_loc){0},
                               "%s: spec is too large (more than %zu bytes)", path, CF_SPEC_MAX_BYTES);
                break;
            }
            size_t nc = cap ? 2 * cap : 64 * 1024;
            if (nc > CF_SPEC_MAX_BYTES + 1)
                nc = CF_SPEC_MAX_BYTES + 1; /* one byte over the limit detects "too large" */
            char *nb = realloc(buf, nc);
            if (!nb) {
                st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory reading '%s'", path);
                break;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f))
                st = cf_errorf(err, CF_ERR_IO, (cf_loc){0}, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (st == CF_OK)
        st = cf_spec_parse(buf, len, path, out, err);
    free(buf);
    return st;
}
