/* cf_internal.h — the one internal header: a section per source file. */
#ifndef CF_INTERNAL_H
#define CF_INTERNAL_H

#include "comfuse.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CF_ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Internal bugs only; user errors are cf_error values. */
#define CF_ASSERT(c) ((c) ? (void)0 : cf_abort(__FILE__, __LINE__, #c))
_Noreturn void cf_abort(const char *file, int line, const char *what);

/* ---- arena.c ------------------------------------------------------------ */

/* A bump allocator: everything in it is freed at once. */
typedef struct cf_arena_block cf_arena_block;
typedef struct cf_arena {
    cf_arena_block *head;
    size_t used_total;
    size_t limit;        /* 0 = unlimited; exceeding it makes allocation fail */
} cf_arena;

void *cf_arena_alloc(cf_arena *a, size_t size);   /* zeroed; NULL when out of memory */
char *cf_arena_strdup(cf_arena *a, const char *s);
char *cf_arena_strndup(cf_arena *a, const char *s, size_t n);
void cf_arena_free(cf_arena *a);

/* ---- strbuf.c ----------------------------------------------------------- */

/* A growable string; on allocation failure it sets oom and stops growing. */
typedef struct cf_strbuf {
    char *data;
    size_t len, cap;
    bool oom;
} cf_strbuf;

void cf_sb_printf(cf_strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cf_sb_vprintf(cf_strbuf *sb, const char *fmt, va_list ap);
void cf_sb_puts(cf_strbuf *sb, const char *s);
void cf_sb_free(cf_strbuf *sb);

/* ---- error.c ------------------------------------------------------------ */

typedef struct cf_loc {
    const char *file;   /* NULL when the node came from the builder API */
    int line, col;
} cf_loc;

/* Fills err (if not NULL) and returns status.  With a location, the message
 * is prefixed "file:line:col: ". */
cf_status cf_errorf(cf_error *err, cf_status status, cf_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void cf_error_clear(cf_error *err);

/* ---- graph.c ------------------------------------------------------------ */

typedef struct cf_node {
    cf_op op;
    int rank;            /* 0 scalar, 1 vector, 2 matrix                    */
    cf_dim dims[2];
    cf_dtype dtype;      /* inputs and outputs; computed values are f32/f64 */
    cf_value src[2];
    double cval;         /* CONST                                            */
    int index;           /* INPUT: input index; PARAM: param index          */
    int axis;            /* reductions: axis reduced, 0 (M) or 1 (N);
                            MATMUL: 1 when the weight is [N,K] (nn.Linear)  */
    const char *name;    /* user-given name or NULL                          */
    cf_loc loc;
} cf_node;

typedef struct cf_output {
    const char *name;
    cf_value value;
    cf_dtype dtype;
    cf_loc loc;
} cf_output;

#define CF_GRAPH_MAX_NODES 65536

struct cf_graph {
    cf_arena arena;      /* names and strings                                */
    cf_node *nodes;
    int n_nodes, cap_nodes;
    const char *dim_names[CF_MAX_DIMS];
    int n_dims;
    cf_value *inputs;    /* input index -> node                              */
    int n_inputs, cap_inputs;
    cf_value *params;    /* param index -> node                              */
    int n_params, cap_params;
    cf_output *outputs;
    int n_outputs, cap_outputs;
    cf_loc cur_loc;      /* location stamped on new nodes (the parser sets it) */
    cf_error err;        /* first error, sticky                              */
};

int cf_op_arity(cf_op op);
/* The op spelled kw with that arity, or -1 (the spec parser's lookup). */
int cf_op_lookup(const char *kw, int arity);
const cf_node *cf_graph_node(const cf_graph *g, cf_value v);
const char *cf_graph_node_name(const cf_graph *g, cf_value v, char *buf, size_t n);
void cf_graph_set_loc(cf_graph *g, cf_loc loc);
/* Scalar semantics shared by the reference, the IR interpreter and tests. */
double cf_eval_unary(cf_op op, double x);
double cf_eval_binary(cf_op op, double a, double b);

/* ---- lex.c / parse.c ---------------------------------------------------- */

/* (see cf_spec_parse in comfuse.h and docs/spec.md) */

#define CF_SPEC_MAX_BYTES ((size_t)16 << 20)  /* larger specs are rejected     */
#define CF_PARSE_MAX_DEPTH 256                /* expression nesting limit       */

typedef enum cf_tok_kind {
    CF_TOK_EOF,
    CF_TOK_END,          /* newline or ';' outside brackets: ends a statement */
    CF_TOK_IDENT,
    CF_TOK_NUMBER,
    CF_TOK_PLUS, CF_TOK_MINUS, CF_TOK_STAR, CF_TOK_SLASH, CF_TOK_AT, CF_TOK_POW,
    CF_TOK_LPAREN, CF_TOK_RPAREN, CF_TOK_LBRACKET, CF_TOK_RBRACKET,
    CF_TOK_COMMA, CF_TOK_COLON, CF_TOK_EQUAL,
    CF_TOK_KIND_COUNT
} cf_tok_kind;

typedef struct cf_token {
    cf_tok_kind kind;
    size_t off, len;     /* the text is src[off, off+len)                     */
    int line, col;       /* 1-based; col counts bytes                         */
    double num;          /* NUMBER                                            */
} cf_token;

typedef struct cf_lexer {
    const char *src;
    size_t len, pos;
    const char *file;    /* for diagnostics; never NULL                      */
    int line;
    size_t line_start;   /* offset of the current line                        */
    int nest;            /* open ( and [: newlines inside them are skipped     */
} cf_lexer;

void cf_lex_init(cf_lexer *lx, const char *src, size_t len, const char *file);
/* Scans the next token; on a lexical error fills err (CF_ERR_PARSE). */
cf_status cf_lex_next(cf_lexer *lx, cf_token *tok, cf_error *err);
const char *cf_tok_kind_name(cf_tok_kind k);
/* "file:line:col: msg" then the source line and a caret under col. */
cf_status cf_lex_errorf(const cf_lexer *lx, cf_status st, int line, int col, cf_error *err,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Appends the source line and caret for line:col to an existing message. */
void cf_lex_append_context(const cf_lexer *lx, int line, int col, cf_error *err);

/* ---- ir.c / lower.c: the Fusion Spec IR S = <N, E, tau, A, C> ----------- */

typedef enum cf_ir_kind {
    CF_IR_ACC,           /* accumulator entry: the GEMM's output fragment     */
    CF_IR_BCAST,         /* an external value broadcast to the tile           */
    CF_IR_COMPUTE,       /* elementwise unary or binary op                    */
    CF_IR_REDUCE,        /* row reduction over N; terminal of its stage       */
    CF_IR_PLACEHOLDER,   /* stage entry: a reduction statistic or a bypass    */
    CF_IR_STORE,         /* writes an output                                   */
    CF_IR_MATMUL,        /* B2B: the value is the A operand of the next GEMM  */
    CF_IR_KIND_COUNT
} cf_ir_kind;

/* What one value spans.  A node of shape VEC_M is computed once per row,
 * VEC_N once per column, SCALAR once; compute nodes broadcast their operands
 * implicitly to the join of the shapes (VEC_M x VEC_N = TILE). */
typedef enum cf_shape {
    CF_SHAPE_SCALAR,
    CF_SHAPE_VEC_N,      /* a row vector [N]: one value per column            */
    CF_SHAPE_VEC_M,      /* a column vector [M]: one value per row            */
    CF_SHAPE_TILE,       /* [M,N]                                              */
    CF_SHAPE_COUNT
} cf_shape;

typedef enum cf_bcast_src {
    CF_BC_CONST,         /* a literal                                          */
    CF_BC_PARAM,         /* a runtime scalar (A entry)                         */
    CF_BC_VEC_N,         /* a [N] input (A entry)                              */
    CF_BC_VEC_M,         /* a [M] input (A entry)                              */
    CF_BC_TENSOR,        /* a [M,N] input (A entry)                            */
    CF_BC_COUNT
} cf_bcast_src;

typedef enum cf_arg_kind {
    CF_ARG_GEMM_A,       /* X [M,K]                                            */
    CF_ARG_GEMM_B,       /* W [K,N] or [N,K]                                   */
    CF_ARG_GEMM2_B,      /* W2 of a B2B GEMM                                   */
    CF_ARG_SCALAR,       /* runtime f32 scalar                                 */
    CF_ARG_VEC_N,
    CF_ARG_VEC_M,
    CF_ARG_TENSOR,
    CF_ARG_OUTPUT,
    CF_ARG_KIND_COUNT
} cf_arg_kind;

/* One entry of the runtime-parameter table A. */
typedef struct cf_ir_arg {
    cf_arg_kind kind;
    const char *name;
    cf_dtype dtype;
    int index;           /* graph input index, param index or output index    */
    bool b_is_nk;        /* GEMM_B / GEMM2_B given as [N,K] (nn.Linear)        */
} cf_ir_arg;

typedef struct cf_ir_node cf_ir_node;
struct cf_ir_node {
    int id;              /* unique in the IR; generated code names values by it */
    cf_ir_kind kind;
    cf_shape shape;
    cf_op op;            /* COMPUTE: the op; REDUCE: SUM, MEAN, RMAX or RMIN    */
    int nargs;
    cf_ir_node *args[2]; /* edges E, always to nodes of the same stage           */
    cf_bcast_src src;    /* BCAST                                              */
    double cval;         /* BCAST of CF_BC_CONST                               */
    int arg;             /* BCAST (not const), STORE, MATMUL: index into A      */
    bool is_stat;        /* PLACEHOLDER: the statistic of ref, else a bypass   */
    cf_ir_node *ref;     /* PLACEHOLDER: the node of the previous stage         */
    const char *name;    /* from the graph, or NULL                             */
    cf_value origin;     /* graph node it came from (-1 for placeholders/stores) */
    int stage;           /* depth of the spec holding it                        */
    int gemm;            /* 0: epilogue of the first GEMM; 1: of the second     */
};

typedef struct cf_ir_spec cf_ir_spec;
struct cf_ir_spec {
    int depth;           /* stage index within its epilogue, from 0            */
    cf_ir_node **nodes;  /* N: topological order                               */
    int n_nodes;
    cf_ir_node *terminal;/* tau: the REDUCE (or MATMUL / last STORE)            */
    cf_ir_spec *post;    /* C: the nested stage (PostOp of the terminal), or NULL */
};

struct cf_ir {
    cf_arena arena;
    const cf_graph *graph;   /* must outlive the IR                            */
    int n_gemms;             /* 1, or 2 for B2B                                */
    cf_ir_spec *epi[2];      /* the epilogue after each GEMM                   */
    int n_stages[2];
    cf_ir_arg *args;         /* A                                              */
    int n_args;
    int n_nodes;             /* ids are 0..n_nodes-1                           */
    cf_dim dim_m, dim_k, dim_n, dim_n2;  /* dim_n2 < 0 unless B2B           */
};

const char *cf_ir_kind_name(cf_ir_kind k);
const char *cf_shape_name(cf_shape s);
const char *cf_arg_kind_name(cf_arg_kind k);
/* A readable, stable name for a node: its graph name with the id, e.g. "x.7". */
const char *cf_ir_node_label(const cf_ir_node *n, char *buf, size_t len);
/* Structural checks (edges stay inside their stage, one terminal, shapes
 * consistent); returns CF_ERR_INTERNAL with a message on a malformed IR. */
cf_status cf_ir_verify(const cf_ir *ir, cf_error *err);
/* Deterministic text form (used by cf_ir_print and tests). */
void cf_ir_format(const cf_ir *ir, cf_strbuf *sb);

#endif /* CF_INTERNAL_H */
