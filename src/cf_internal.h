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
/* *bytes = the elements of t at dims times elem_size; CF_ERR_SHAPE naming t and
 * its dims when a dim is not positive or the product overflows size_t. */
cf_status cf_tensor_bytes(const cf_graph *g, cf_tensor_info t, const int64_t *dims, size_t elem_size,
                          size_t *bytes, cf_error *err);
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
    CF_ARG_GEMM2_B,      /* W2 of a B2B GEMM, or the second weight of a dual GEMM */
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
    int arg;             /* BCAST (not const), STORE, MATMUL: index into A;
                            ACC of a dual GEMM: its weight's (GEMM_B or GEMM2_B), else -1 */
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
    bool dual;               /* two GEMMs over one X (f(X*W1) (.) g(X*W2)): n_gemms 1,
                                GEMM2_B is W2 (shaped like GEMM_B), and epilogue 0
                                enters with two accumulators                   */
    cf_ir_spec *epi[2];      /* the epilogue after each GEMM                   */
    int n_stages[2];
    cf_ir_arg *args;         /* A                                              */
    int n_args;
    int n_nodes;             /* ids are 0..n_nodes-1                           */
    cf_dim dim_m, dim_k, dim_n, dim_n2;  /* dim_n2 < 0 unless B2B           */
};

/* The shape of a compute node over operands of shapes a and b: the lattice
 * SCALAR < VEC_N, VEC_M < TILE (VEC_N joined with VEC_M is TILE). */
cf_shape cf_shape_join(cf_shape a, cf_shape b);
const char *cf_ir_kind_name(cf_ir_kind k);
const char *cf_shape_name(cf_shape s);
const char *cf_arg_kind_name(cf_arg_kind k);
/* Whether n is the accumulator of X*W2 in a dual GEMM (the second accumulator). */
bool cf_ir_acc_second(const cf_ir *ir, const cf_ir_node *n);
/* A readable, stable name for a node: its graph name with the id, e.g. "x.7". */
const char *cf_ir_node_label(const cf_ir_node *n, char *buf, size_t len);
/* Structural checks (edges stay inside their stage, one terminal, shapes
 * consistent); returns CF_ERR_INTERNAL with a message on a malformed IR. */
cf_status cf_ir_verify(const cf_ir *ir, cf_error *err);
/* The bytes of the fused kernel's parameter block (cf_gemm_args: TMA descriptors, output
 * pointers and pitches, then cf_epi_params), as kernel.c lays it out for a launch. */
size_t cf_ir_param_bytes(const cf_ir *ir, int *tile_outputs);
/* What a launch passes (kernel.c): the classic limit, which every driver takes. */
#define CF_KERNEL_PARAM_BYTES 4096
/* Φ's limits on one fused kernel (cf_lower rejects more, CF_ERR_UNSUPPORTED): code
 * generation is quadratic in a stage's nodes (2.6 s at 8000), NVRTC superlinear in the
 * reductions and the epilogue's inputs. */
#define CF_IR_MAX_NODES 4096
#define CF_IR_MAX_REDUCTIONS 32
#define CF_IR_MAX_INPUTS 64   /* epilogue inputs; NVRTC: 18 s at 64, 187 s at 128 */
/* Deterministic text form (used by cf_ir_print and tests). */
void cf_ir_format(const cf_ir *ir, cf_strbuf *sb);

/* ---- plan.c: every launch decision, between Φ and Ψ ------------------------ */

/* What the plan needs to know of the GPU.  cf_device_facts_h200() when no driver is asked
 * (kernels are planned, and their source generated, without a GPU); cf_device_facts_query
 * reads the current device's. */
typedef struct cf_device_facts {
    int sm_count;          /* 132 on the H200                                       */
    int smem_per_block;    /* dynamic + static shared memory a CTA may opt in to     */
    int smem_per_sm;
    int regs_per_sm;
} cf_device_facts;

/* Shared memory per CTA on sm_90 with the opt-in attribute. */
#define CF_SMEM_OPTIN 232448
/* The most slices of K a plan takes (each a copy of the grid, all co-resident). */
#define CF_SPLIT_K_MAX 16

cf_device_facts cf_device_facts_h200(void);
cf_status cf_device_facts_query(cf_device_facts *dev, cf_error *err);

/* What a caller asks of a plan: the public cf_options and the schedule internals the CLI's
 * flags and --plan reach.  0 in a field: the plan chooses. */
typedef struct cf_plan_request {
    int block_m, block_n, stages, cluster_n, reduce_mode, schedule;
    int sync_finish;     /* 1 every tile finishes at once, -1 late (when it can)        */
    int pair_tiles;      /* 1 two column tiles per CTA, -1 one                          */
    int multicast;       /* 1 pairs of a row group's CTAs multicast X, -1 not           */
    int split_k;         /* K in this many slices on copies of the grid (1: none)        */
} cf_plan_request;

/* A plan's shared memory: the static part (the DSMEM exchange's buffers), the dynamic part
 * (operand ring, staging, barriers; what the launch passes) with the staging chunks chosen,
 * and whether both fit the device's limit.  The one formula: Ψ emits its choices and the
 * device header checks that its layout adds up to the same bytes. */
typedef struct cf_plan_smem {
    int static_bytes;
    long dynamic_bytes;
    int stg_chunks;
    bool fits;
} cf_plan_smem;

/* The whole launch.  The first block is what Ψ renders (see the device header for the
 * meaning); cf_plan_make fills the rest from it, the IR, the shape and the device. */
typedef struct cf_plan {
    int bm, bn;          /* rows / columns of one consumer warpgroup's tile    */
    int stages;          /* shared-memory pipeline depth                        */
    int cluster_n;       /* CTAs per hardware cluster along N                   */
    int row_ctas;        /* CTAs that share a row block (a multiple of cluster_n) */
    bool red_leader;     /* leader-follower cluster reductions (else peer-to-peer) */
    bool red_global;     /* row partials through L2 between row_ctas CTAs      */
    bool sync_finish;    /* no late finish: every tile waits for its row's partials
                            before the next mainloop                            */
    bool cooperative;    /* both consumer warpgroups on one 2*bm x bn tile      */
    bool finisher;       /* a fourth warpgroup finishes late tiles (when they are) */
    bool pair_tiles;     /* each CTA takes two adjacent column tiles of a row block, one per
                            warpgroup, and posts their combined partials (cf_cg_can_pair) */
    int split_k;         /* slices of K, each on its own copy of the grid; slice 0 adds the
                            others' partial accumulators (through L2) and runs the epilogue */
    int smem_limit;      /* the device's shared memory per CTA (0: CF_SMEM_OPTIN) */
    /* derived by cf_plan_make */
    cf_plan_request req; /* the request with every field chosen                */
    int schedule;        /* CF_SCHEDULE_* the kernel runs                       */
    int reduce_mode;     /* CF_REDUCE_*, 0 without row reductions              */
    int reductions;      /* row reductions of the epilogue                      */
    int exchanges;       /* their exchanges through L2 a tile (a merged pair is one) */
    bool multicast;      /* pairs of a row group's CTAs multicast X (cluster of 2) */
    bool late_finish;    /* tiles finish after the next mainloop                */
    bool gather_early;   /* a parked tile's late gather loads as the next mainloop ends */
    bool has_finisher;   /* the fourth warpgroup is there (finisher and late tiles) */
    int gelu_at_store;   /* 16-bit outputs whose GELU the store computes        */
    int threads;         /* per CTA                                             */
    cf_plan_smem smem;
    /* with a shape (m > 0) */
    int64_t m, n, k;
    int64_t tiles_m, tiles_n, group_tiles;  /* row tiles, column tiles, row-group tiles */
    int resident_ctas;   /* CTAs the device holds at once (the model's estimate)  */
    int64_t grid_ctas;   /* the persistent grid                                  */
    double waves;        /* row-group tiles per co-resident row group              */
    bool wide;           /* rows wider than the row group: the wide-row path       */
    char fallback[160];  /* why a launch leaves the fused kernel, or ""           */
    double predicted_us; /* the cost model's time (cf_plan_predict)              */
    double rules_us;     /* where the model's choice replaced the rules' plan: the
                            rules' predicted time; 0 where the rules' plan stands */
    /* [M,N] epilogue inputs fetched through the operand ring (cf_cg_tile_inputs): a bit per
     * argument number, and their names for explain */
    unsigned tin_args;
    char tin_names[96];
} cf_plan;

/* The plan's own choices at this GEMM size (m, n, k 0 when unknown): cf_options_for, with
 * the schedule internals. */
cf_plan_request cf_plan_defaults(const cf_ir *ir, int64_t m, int64_t n, int64_t k);
/* Sets the 0 fields of r from def, keeping what was given consistent (a schedule given
 * against the default takes its own cluster, a tile given turns the pair off, ...). */
void cf_plan_fill(cf_plan_request *r, cf_plan_request def);
/* The request a public cf_options makes: a field equal to the plan's own choice at opt's
 * shape counts as not given, so cf_options_for's result plans what the CLI plans. */
cf_plan_request cf_plan_request_of(const cf_ir *ir, const cf_options *opt);
/* Plans the kernel for ir at M, N, K (0: unknown) on dev (NULL: the H200) from req (NULL:
 * all chosen).  CF_ERR_INVALID_ARG naming the field for a request the kernel cannot take. */
cf_status cf_plan_make(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                       const cf_plan_request *req, cf_plan *out, cf_error *err);
/* Fills the shape-dependent part of p (tiles, grid, waves, wide, fallback, predicted_us)
 * for M, N, K with resident_ctas CTAs held at once (0: the model's estimate). */
void cf_plan_shape(const cf_ir *ir, cf_plan *p, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                   int resident_ctas);
/* The cost model: predicted microseconds of p at its shape on the H200 (0 without one). */
double cf_plan_predict(const cf_ir *ir, const cf_plan *p, const cf_device_facts *dev);
/* The [M,N] epilogue inputs Ψ can fetch through the operand ring for plan p and that pay their
 * way there (cf_plan_ring_inputs_pay): a bit per argument number.  The plan decides with it
 * (tin_args); Ψ renders what the plan says. */
unsigned cf_cg_tile_inputs(const cf_ir *ir, const cf_plan *p);
/* Whether [M,N] epilogue inputs pay their way through the operand ring (cf_tin_* in the device
 * header): a warpgroup holds their tin_stages stages through its epilogue up to stage depth
 * last_depth, and the producer, which fills the ring in order, stalls the other warpgroup's
 * mainloop once that outlasts the k-blocks the rest of the ring holds (unless a tile has no more
 * k-blocks than that).  Else they are loaded element by element. */
bool cf_plan_ring_inputs_pay(const cf_ir *ir, const cf_plan *p, int last_depth, int tin_stages);
/* The shared memory of p (the one formula; see cf_plan_smem). */
cf_plan_smem cf_plan_smem_of(const cf_ir *ir, const cf_plan *p);
/* Overrides one field of r from "key=value" (the CLI's --plan); CF_ERR_INVALID_ARG naming
 * the key and what it takes. */
cf_status cf_plan_override(cf_plan_request *r, const char *key, const char *value, cf_error *err);
/* The candidate the cost model ranks first among tile shapes, one or two tiles per CTA (with
 * reductions) and slices of K, each at the deepest ring that fits: cf_plan_make takes it outside
 * the class the rules were fitted to where it predicts a clear gain; `explain` prints it beside
 * the plan otherwise.  CF_ERR_INVALID_ARG when no candidate fits in one row group. */
cf_status cf_plan_model_choice(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                               cf_plan *best, cf_error *err);
/* Every field of p, one "name: value" line each, then "predicted: X us". */
void cf_plan_format(const cf_plan *p, cf_strbuf *sb);

/* ---- kernel.c ----------------------------------------------------------- */

const cf_ir *cf_kernel_ir(const cf_kernel *k);
/* The request the kernel was planned from, every field chosen (stages as it fits). */
const cf_plan_request *cf_kernel_options(const cf_kernel *k);
const cf_plan *cf_kernel_plan(const cf_kernel *k);
/* cf_kernel_build from a request at a shape (m, n, k 0 when unknown): what the CLI calls. */
cf_status cf_kernel_build_req(const cf_graph *g, const cf_plan_request *req, int64_t m, int64_t n, int64_t k,
                              const char *title, cf_kernel **out, cf_error *err);
/* cf_kernel_build_req at a launch's dims (indexed by cf_dim; NULL: unknown), which also size a
 * B2B graph's second GEMM (N2). */
cf_status cf_kernel_build_dims(const cf_graph *g, const cf_plan_request *req, const int64_t *dims,
                               const char *title, cf_kernel **out, cf_error *err);
typedef struct cf_b2b cf_b2b;
/* A B2B graph's kernel is two fused kernels (b2b.c); NULL for any other.  Its plan and
 * resources are its first kernel's, its source and PTX both kernels'. */
const cf_b2b *cf_kernel_b2b(const cf_kernel *k);
/* The cost model's time for a launch at M, N, K, in microseconds (0 for a B2B kernel): on the device and with the
 * residency the driver gives once the kernel is loaded, else the H200's estimate. */
double cf_kernel_predict_us(const cf_kernel *k, int64_t M, int64_t N, int64_t K);
/* Whether a launch with N columns takes the wide-row path (rows wider than one
 * cluster: GEMM to f32 in device memory, then the row kernel of rows.c). */
bool cf_kernel_wide(const cf_kernel *k, int64_t n);
struct cf_rt_cubin;
/* Reads the int array `symbol` of a compiled PTX (a byte-initialised .global array) into v[n]. */
cf_status cf_ptx_ints(const char *ptx, const char *symbol, int *v, int n, cf_error *err);
/* k as a phase of another kernel (the one B2B kernel): its configuration is owner's PTX array
 * `symbol`, its resources owner's (which must outlive k's use of it); cf_kernel_pack then fills
 * its parameter block without compiling it alone. */
cf_status cf_kernel_adopt(cf_kernel *k, const struct cf_rt_cubin *owner, const char *symbol, cf_error *err);
/* k's parameter block (cf_gemm_args) for a into block (CF_KERNEL_PARAM_BYTES), *size its bytes:
 * TMA maps (operands TMA cannot address copied on a->stream first), outputs, the epilogue's, the
 * L2 exchange prepared.  After the launch, cf_kernel_unpad_outputs copies outputs written into
 * padded copies to a's tensors. */
cf_status cf_kernel_pack(cf_kernel *k, const cf_launch_args *a, unsigned char *block, size_t *size, cf_error *err);
cf_status cf_kernel_unpad_outputs(cf_kernel *k, const cf_launch_args *a, cf_error *err);

/* ---- codegen.c: Ψ ----------------------------------------------------- */

/* Ψ renders a cf_plan; the predicates below say what it can render for a candidate plan
 * (structural questions about the epilogue), which cf_plan_make asks. */

/* CF_ERR_UNSUPPORTED when the IR uses what the code generator cannot emit yet. */
cf_status cf_cg_check(const cf_ir *ir, cf_error *err);
/* Offsets (indexed like ir->args; 0 for args not in the struct), size and
 * alignment of the generated cf_epi_params, for packing it on the host. */
void cf_cg_epi_layout(const cf_ir *ir, size_t *offsets, size_t *size, size_t *align);
/* Whether Ψ finishes the tiles of this IR late with this plan (the park
 * fits, the last stage qualifies, few enough exchanges; docs/design.md). */
bool cf_cg_finishes_late(const cf_ir *ir, const cf_plan *opt);
/* Whether the pair of column tiles per CTA (opt->pair_tiles) applies: tiles finish late on
 * their own consumer (no finisher), through L2, after the epilogue's only exchange. */
bool cf_cg_can_pair(const cf_ir *ir, const cf_plan *opt);
/* Partials a lane of a tile's gathers loads over all its exchanges through L2 (a merged
 * exchange's pair is two). */
int cf_cg_gather_words(const cf_ir *ir, const cf_plan *opt);
/* Exchanges a tile's epilogue makes through L2, a merged pair counted once (reductions
 * otherwise). */
int cf_cg_exchanges(const cf_ir *ir, const cf_plan *opt);
/* Whether a parked tile's late gather loads its words as the next mainloop ends (one round,
 * one late exchange, a first part without vectors; CF_GATHER_EARLY). */
bool cf_cg_gathers_early(const cf_ir *ir, const cf_plan *opt);
/* Whether the kernel has a finisher warpgroup (opt->finisher, and tiles finish late). */
bool cf_cg_has_finisher(const cf_ir *ir, const cf_plan *opt);
/* Tile outputs whose GELU their 16-bit store computes in packed 16-bit math. */
int cf_cg_gelu_stores(const cf_ir *ir);
/* Appends the CUDA source of the fused kernel to out; title names the spec. */
cf_status cf_codegen(const cf_ir *ir, const cf_plan *opt, const char *title, cf_strbuf *out,
                     cf_error *err);

/* ---- the runtime: rt_nvrtc.c over cache.c / sha256.c ---------------------- */

/* SHA-256 (sha256.c): the cache key and entry checksums. */
typedef struct cf_sha256_ctx {
    uint32_t h[8];
    uint64_t nbytes;
    unsigned char buf[64];
    size_t fill;
} cf_sha256_ctx;

void cf_sha256_init(cf_sha256_ctx *s);
void cf_sha256_update(cf_sha256_ctx *s, const void *data, size_t len);
void cf_sha256_final(cf_sha256_ctx *s, unsigned char out[32]);
void cf_sha256(const void *data, size_t len, unsigned char out[32]);
void cf_sha256_hex(const unsigned char digest[32], char hex[65]);

/* The device headers (every .cuh in src/device/), embedded at build time by
 * tools/embed.c into build/gen/device_headers.c.  NVRTC sees each one under its file name
 * (`#include "cf_sm90.cuh"`); texts are NUL-terminated, sizes exclude the NUL. */
extern const int cf_rt_n_device_headers;
extern const char *const cf_rt_device_header_names[];
extern const char *const cf_rt_device_header_texts[];
extern const size_t cf_rt_device_header_sizes[];

/* What the kernel cache did for one cf_rt_compile. */
typedef enum cf_rt_cache_result {
    CF_RT_CACHE_DISABLED,    /* no usable cache dir (see cache_note): compiled, not stored */
    CF_RT_CACHE_MISS,        /* compiled; stored when `stored`                              */
    CF_RT_CACHE_HIT_MEMORY,  /* from the in-process table                                   */
    CF_RT_CACHE_HIT_DISK,    /* read from cache_path                                        */
    CF_RT_CACHE_REBUILT,     /* a corrupt entry was removed and rebuilt (see cache_note)     */
    CF_RT_CACHE_RESULT_COUNT
} cf_rt_cache_result;

const char *cf_rt_cache_result_name(cf_rt_cache_result r);

/* A compiled kernel: the CUBIN, its PTX and the NVRTC log with ptxas -v
 * figures.  All pointers are malloc'd and owned; free with cf_rt_cubin_free. */
typedef struct cf_rt_cubin {
    unsigned char *cubin;
    size_t cubin_size;
    char *ptx;                 /* NUL-terminated                                   */
    size_t ptx_size;           /* without the NUL                                  */
    char *log;                 /* NVRTC log; embedded NULs replaced by '\n'        */
    size_t log_size;
    /* From the ptxas -v report for the entry named like `name` (else the max
     * over all entries); -1 when the log does not say. */
    int registers, spill_store_bytes, spill_load_bytes, stack_bytes, smem_bytes, barriers;
    /* ptxas C7515: it serialised the wgmma pipeline (every wgmma waits for the previous
     * one) because other instructions define accumulator registers inside it */
    bool wgmma_serialized;
    cf_rt_cache_result cache;
    bool stored;               /* an entry for key is now on disk                  */
    char key[65];              /* hex SHA-256 cache key                            */
    char cache_path[1024];     /* the entry file ("" when caching is disabled)     */
    char cache_note[512];      /* why the cache was bypassed/rebuilt, or ""        */
    double compile_ms;         /* NVRTC time (0 on a hit)                          */
    double total_ms;           /* wall time of the whole cf_rt_compile call        */
} cf_rt_cubin;

/* Base NVRTC options; extra_opts are appended (and hashed into the key). */
#define CF_RT_ARCH_OPT "--gpu-architecture=sm_90a"

typedef struct cf_rt_compile_opts {
    const char *const *extra_opts;   /* appended after the base options        */
    int n_extra;
    /* Named headers besides the embedded ones (same include-name rules). */
    const char *const *header_names;
    const char *const *header_texts;
    int n_headers;
    bool no_cache;                   /* neither read nor write any cache        */
} cf_rt_compile_opts;

/* Compiles src (kernel/program `name`) for sm_90a through the cache:
 * --gpu-architecture=sm_90a -std=c++17 --ptxas-options=-v + extra options,
 * with every embedded device header.  CF_ERR_NVRTC with the log on a failed
 * compile (out->log then holds the full log); env CF_CACHE_DIR,
 * CF_ASSERT_CACHED=1 (a miss is CF_ERR_IO).  out is zeroed first. */
cf_status cf_rt_compile(const char *src, const char *name, const char *const *extra_opts,
                        int n_extra, cf_rt_cubin *out, cf_error *err);
cf_status cf_rt_compile_ex(const char *src, const char *name, const cf_rt_compile_opts *opts,
                           cf_rt_cubin *out, cf_error *err);
void cf_rt_cubin_free(cf_rt_cubin *c);

/* NVRTC itself: loaded on first use ($CF_NVRTC_PATH, libnvrtc.so.13, .12,
 * .so, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64).  CF_ERR_NVRTC when
 * it cannot be found.  *path (optional) gets the library that was loaded. */
cf_status cf_rt_nvrtc_load(int *major, int *minor, const char **path, cf_error *err);

/* Kernel cache (cache.c): byte strings under a hex key, on disk and in an
 * in-process table; it knows nothing of what they are (rt_nvrtc.c keeps a
 * CUBIN, its PTX and the NVRTC log).  The cache dir: $CF_CACHE_DIR, else
 * $XDG_CACHE_HOME/comfuse, else $HOME/.cache/comfuse, created like mkdir -p.
 * Returns false (with a reason in note) when no usable dir exists; else
 * *writable says whether entries may be stored there (not: why in note; a
 * read-only dir, or CF_CACHE_READONLY=1, is still read). */
bool cf_cache_dir(char *dir, size_t n, bool *writable, char *note, size_t note_n);
/* The key over everything that determines a compile's output (see cache.c): the
 * source without its comments, which name where it came from (a spec's path). */
void cf_cache_key(const char *src, const char *name, int nvrtc_major, int nvrtc_minor,
                  const char *const *opts, int n_opts, const char *const *hdr_names,
                  const char *const *hdr_texts, int n_hdrs, char hex[65]);
enum { CF_CACHE_PARTS = 3 };
/* One entry: CF_CACHE_PARTS byte strings.  What the cache returns is malloc'd
 * and owned (free with cf_cache_entry_free), each part followed by a NUL that
 * size does not count; what it is given is only read (a NULL part is empty). */
typedef struct cf_cache_entry {
    unsigned char *part[CF_CACHE_PARTS];
    size_t size[CF_CACHE_PARTS];
} cf_cache_entry;
void cf_cache_entry_free(cf_cache_entry *e);
typedef enum cf_cache_lookup {
    CF_CACHE_ABSENT,       /* no entry                                            */
    CF_CACHE_FOUND,        /* out filled                                          */
    CF_CACHE_CORRUPT,      /* bad magic, length or checksum: removed; why in note */
} cf_cache_lookup;
/* Reads <dir>/<key>.cubin into out.  Anything but a regular file there (a FIFO,
 * a device, a dir) is a miss, opened without blocking, never removed. */
cf_cache_lookup cf_cache_load(const char *dir, const char *key, cf_cache_entry *out, char *note,
                              size_t note_n);
/* Writes the entry atomically (mkstemp in dir, fsync, rename).  false with a
 * reason in note on failure; never leaves a temp file behind. */
bool cf_cache_store(const char *dir, const char *key, const cf_cache_entry *e, char *note,
                    size_t note_n);
/* The path of the entry for key in dir. */
void cf_cache_entry_path(const char *dir, const char *key, char *path, size_t n);
/* The in-process table in front of the disk (thread-safe; get copies out). */
bool cf_cache_mem_get(const char *key, cf_cache_entry *out);
void cf_cache_mem_put(const char *key, const cf_cache_entry *e);
void cf_cache_mem_clear(void);
/* Parses the ptxas -v report in c->log into c's register/spill/smem fields. */
void cf_rt_parse_ptxas(cf_rt_cubin *c, const char *name);

/* ---- the CUDA driver (rt_driver.c), loaded from libcuda.so.1 at run time -- */

typedef uint64_t cf_rt_devptr;     /* CUdeviceptr                                */
typedef void *cf_rt_module;        /* CUmodule                                   */
typedef void *cf_rt_func;          /* CUfunction                                 */
typedef void *cf_rt_stream;        /* CUstream; NULL = the default stream        */
typedef void *cf_rt_event;         /* CUevent                                    */

/* Loads the driver, cuInit, and makes the primary context of device 0 (or
 * $CF_DEVICE) current on the calling thread.  Every cf_rt_ driver wrapper
 * calls it.  CF_ERR_NO_DEVICE without libcuda.so.1 or without a GPU. */
cf_status cf_rt_init(cf_error *err);

typedef struct cf_rt_device_info {
    char name[256];
    int ordinal;
    int cc_major, cc_minor;
    int sm_count;
    int smem_optin;            /* max dynamic smem per block with opt-in, bytes */
    int smem_per_sm;
    int l2_bytes;
    int clock_khz;
    size_t total_mem;
    int driver_version;        /* e.g. 13000                                     */
} cf_rt_device_info;

cf_status cf_rt_device_info_get(cf_rt_device_info *info, cf_error *err);

cf_status cf_rt_module_load(const void *cubin, cf_rt_module *mod, cf_error *err);
cf_status cf_rt_module_unload(cf_rt_module mod, cf_error *err);
cf_status cf_rt_module_get_func(cf_rt_module mod, const char *name, cf_rt_func *f, cf_error *err);
/* Address and size of a __device__ variable of the module. */
cf_status cf_rt_module_get_global(cf_rt_module mod, const char *name, cf_rt_devptr *p, size_t *bytes,
                                  cf_error *err);
/* A __device__ variable of the loaded kernel module (e.g. cf_trace with CF_TRACE=1). */
cf_status cf_kernel_global(const cf_kernel *k, const char *name, cf_rt_devptr *p, size_t *bytes, cf_error *err);

typedef struct cf_rt_func_attrs {
    int registers, static_smem, const_bytes, local_bytes, max_threads;
    int ptx_version, binary_version;
    int max_dynamic_smem;
} cf_rt_func_attrs;

cf_status cf_rt_func_get_attrs(cf_rt_func f, cf_rt_func_attrs *a, cf_error *err);
/* Sets MAX_DYNAMIC_SHARED_SIZE_BYTES to dyn_smem and, for clusters > 8,
 * NON_PORTABLE_CLUSTER_SIZE_ALLOWED.  Call once per function and config. */
cf_status cf_rt_func_prepare(cf_rt_func f, int dyn_smem, int cluster, cf_error *err);
/* How many clusters of `cluster` CTAs (block threads, dyn_smem bytes each)
 * can be co-resident (cuOccupancyMaxActiveClusters; cluster 1 = CTAs). */
cf_status cf_rt_max_active_clusters(cf_rt_func f, int cluster, int block, int dyn_smem,
                                    int *n, cf_error *err);

typedef struct cf_rt_launch_cfg {
    unsigned grid[3], block[3];
    unsigned cluster[3];       /* {0,0,0} or {1,1,1}: no cluster attribute          */
    unsigned dyn_smem;
    cf_rt_stream stream;
    bool cooperative;          /* all CTAs resident at once, or the launch fails     */
} cf_rt_launch_cfg;

/* cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION. */
cf_status cf_rt_launch(cf_rt_func f, const cf_rt_launch_cfg *cfg, void **args, cf_error *err);

cf_status cf_rt_malloc(cf_rt_devptr *p, size_t bytes, cf_error *err);
cf_status cf_rt_free(cf_rt_devptr p, cf_error *err);
cf_status cf_rt_memcpy_htod(cf_rt_devptr dst, const void *src, size_t bytes, cf_error *err);
cf_status cf_rt_memcpy_dtoh(void *dst, cf_rt_devptr src, size_t bytes, cf_error *err);
cf_status cf_rt_memcpy_dtod(cf_rt_devptr dst, cf_rt_devptr src, size_t bytes, cf_error *err);
/* rows of width_bytes from one pitch to another, device to device, on stream s */
cf_status cf_rt_memcpy_2d_async(cf_rt_devptr dst, size_t dst_pitch, cf_rt_devptr src, size_t src_pitch,
                                size_t width_bytes, size_t rows, cf_rt_stream s, cf_error *err);
/* count elements of 1, 2 or 4 bytes. */
cf_status cf_rt_memset_d8(cf_rt_devptr dst, uint8_t v, size_t count, cf_error *err);
cf_status cf_rt_memset_d8_async(cf_rt_devptr dst, uint8_t v, size_t count, cf_rt_stream s, cf_error *err);
cf_status cf_rt_memset_d16(cf_rt_devptr dst, uint16_t v, size_t count, cf_error *err);
cf_status cf_rt_memset_d32(cf_rt_devptr dst, uint32_t v, size_t count, cf_error *err);
cf_status cf_rt_ctx_sync(cf_error *err);
cf_status cf_rt_stream_create(cf_rt_stream *s, cf_error *err);
cf_status cf_rt_stream_destroy(cf_rt_stream s, cf_error *err);
/* Whether s is being captured into a CUDA graph (its work is recorded, not run). */
cf_status cf_rt_stream_capturing(cf_rt_stream s, bool *capturing, cf_error *err);
cf_status cf_rt_stream_sync(cf_rt_stream s, cf_error *err);
cf_status cf_rt_event_create(cf_rt_event *e, cf_error *err);
cf_status cf_rt_event_destroy(cf_rt_event e, cf_error *err);
cf_status cf_rt_event_record(cf_rt_event e, cf_rt_stream s, cf_error *err);
cf_status cf_rt_event_sync(cf_rt_event e, cf_error *err);
cf_status cf_rt_event_elapsed_ms(cf_rt_event start, cf_rt_event end, float *ms, cf_error *err);

/* TMA (rt_tma.c, cuTensorMapEncodeTiled) for a row-major [rows, cols] tensor with a
 * row pitch in elements.  cf_rt_tma_check is the pure validation (no GPU):
 * CF_ERR_ALIGNMENT naming the constraint and value for what TMA cannot take,
 * CF_ERR_INVALID_ARG for nonsense (zero sizes, pitch < cols, bad swizzle). */
cf_status cf_rt_tma_check(const char *name, cf_dtype t, const void *dev_ptr, uint64_t rows,
                          uint64_t cols, uint64_t row_pitch_elems, uint32_t box_rows,
                          uint32_t box_cols, int swizzle_bytes, cf_error *err);
/* desc128: 128 bytes, 64-byte aligned (what the kernel takes by value). */
cf_status cf_rt_tensor_map_2d(void *desc128, cf_dtype t, const void *dev_ptr, uint64_t rows,
                              uint64_t cols, uint64_t row_pitch_elems, uint32_t box_rows,
                              uint32_t box_cols, int swizzle_bytes, cf_error *err);
cf_status cf_rt_tensor_map_2d_named(void *desc128, const char *name, cf_dtype t,
                                    const void *dev_ptr, uint64_t rows, uint64_t cols,
                                    uint64_t row_pitch_elems, uint32_t box_rows,
                                    uint32_t box_cols, int swizzle_bytes, cf_error *err);

/* cuBLASLt (rt_blas.c; libcublasLt.so.13/.12 loaded at run time): row-major
 * C[M,N] = A[M,K] * B, B [K,N] or (b_is_nk) [N,K], t = CF_BF16 or CF_F16 for
 * A and B, c_t for C (t, or CF_F32 for the unfused path), fp32 accumulate.  A plan keeps the layouts, the chosen algorithm
 * and a workspace so timed runs only launch.  CF_ERR_NO_DEVICE without cuBLASLt. */
typedef struct cf_rt_cublas_plan cf_rt_cublas_plan;
cf_status cf_rt_cublas_plan_create(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                                   cf_rt_cublas_plan **plan, cf_error *err);
/* The same over a workspace the caller owns (ws_size bytes, cf_rt_cublas_workspace_bytes() is
 * what a plan of its own allocates): no device allocation, so plans for many shapes can share one. */
cf_status cf_rt_cublas_plan_create_ws(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                                      cf_rt_devptr ws, size_t ws_size, cf_rt_cublas_plan **plan, cf_error *err);
size_t cf_rt_cublas_workspace_bytes(void);
cf_status cf_rt_cublas_plan_run(cf_rt_cublas_plan *plan, cf_rt_devptr A, cf_rt_devptr B,
                                cf_rt_devptr C, cf_rt_stream s, cf_error *err);
void cf_rt_cublas_plan_free(cf_rt_cublas_plan *plan);
/* One-shot: plan, run, free. */
cf_status cf_rt_cublas_gemm(cf_dtype t, int64_t M, int64_t N, int64_t K, cf_rt_devptr A,
                            cf_rt_devptr B, bool b_is_nk, cf_rt_devptr C, cf_rt_stream s,
                            cf_error *err);

/* ---- timing.c: timing GPU work, and the cuBLAS baseline ------------------ */

/* One thing to time: enqueues one run of it on stream s (NULL: the default stream). */
typedef cf_status (*cf_time_fn)(void *ctx, cf_rt_stream s, cf_error *err);
typedef struct cf_time_job {
    cf_time_fn fn;
    void *ctx;
} cf_time_job;
typedef struct cf_time_result {
    float median_ms;
    float ratio;               /* median over turns of this job's time over job 0's */
} cf_time_result;

/* Two CUDA events and an L2 flush buffer of flush_bytes (0: no flush; bench uses
 * 256 MiB, several times the H200's 50 MiB L2). */
typedef struct cf_timer cf_timer;
cf_status cf_time_open(size_t flush_bytes, cf_timer **t, cf_error *err);
void cf_time_close(cf_timer *t);
/* Overwrites the flush buffer with pattern (a new one each time, so no write is elided). */
cf_status cf_time_flush_l2(cf_timer *t, uint32_t pattern, cf_error *err);
/* One timed run of job: flush, event, the job, event, wait. */
cf_status cf_time_once(cf_timer *t, const cf_time_job *job, uint32_t pattern, float *ms, cf_error *err);
/* warmup untimed rounds of every job, then iters turns of one timed run of each, in
 * job order; out[j] gets job j's median and its paired ratio to job 0.  samples
 * (optional, n * iters) gets every time, job by job, each in turn order. */
cf_status cf_time_paired(cf_timer *t, const cf_time_job *jobs, int n, int warmup, int iters, float *samples,
                         cf_time_result *out, cf_error *err);
/* The statistics of cf_time_paired (no GPU): samples as it fills them. */
cf_status cf_time_summarize(const float *samples, int n, int iters, cf_time_result *out, cf_error *err);
/* The element at n / 2 after sorting v (in place); 0 for n <= 0. */
float cf_time_median(float *v, int n);

/* The baseline: cuBLASLt doing GEMMs alone, back to back, each writing its
 * output in the operands' dtype t.  a == 0: a zeroed left operand of its own (a
 * computed one, like B2B's S; the time does not depend on the values); b == 0: a
 * zeroed weight of its own (a dual GEMM's two weights side by side, [K, 2N]). */
enum { CF_TIME_MAX_GEMMS = 4 };
typedef struct cf_time_cublas cf_time_cublas;
cf_time_cublas *cf_time_cublas_new(void);
void cf_time_cublas_free(cf_time_cublas *c);
cf_status cf_time_cublas_add(cf_time_cublas *c, cf_dtype t, int64_t M, int64_t N, int64_t K, cf_rt_devptr a,
                             cf_rt_devptr b, bool b_is_nk, cf_error *err);
/* A cf_time_fn: ctx is the cf_time_cublas. */
cf_status cf_time_cublas_run(void *ctx, cf_rt_stream s, cf_error *err);
int cf_time_cublas_count(const cf_time_cublas *c);
double cf_time_cublas_flops(const cf_time_cublas *c);

/* ---- rows.c: the unfused path's row kernel ------------------------------ */

/* Pieces of codegen.c shared with rows.c so both kernels spell every op the
 * same way: the C identifier of a node, a float literal, the load helper for
 * a dtype, an op's expression over operand texts a0/a1 (false for a
 * non-elementwise op), and the definitions of the helpers `text` calls
 * (appended to out; returns how many). */
const char *cf_cg_ident(const cf_ir_node *n, char *buf, size_t len);
void cf_cg_float_literal(double v, char *buf, size_t len);
const char *cf_cg_load_fn(cf_dtype t);
bool cf_cg_expand_op(cf_op op, const char *a0, const char *a1, cf_strbuf *out);
int cf_cg_emit_helpers(const char *text, cf_strbuf *out);

/* The unfused epilogue: one standalone kernel, cf_rows_kernel, that reads the
 * GEMM output C [M,N] (f32, row-major, pitch N) from global memory
 * and runs epilogue 0 of a single-GEMM IR over it, a cluster of CTAs per row
 * (grid-stride; each CTA a share of the columns), one column loop per stage,
 * each REDUCE as thread partials -> warp shuffles -> shared memory -> the
 * cluster's CTAs through distributed shared memory; TILE values a later stage
 * uses are recomputed there (C is read again), never stored.
 *
 * Kernel parameters (plain scalars and pointers, in this order):
 *   const float *C, long long M, int N, then one per
 *   entry of A that is not a GEMM operand, in A order: an input pointer (VEC_N,
 *   VEC_M, TENSOR), a float (SCALAR), or an output pointer (OUTPUT). */
typedef struct cf_rows cf_rows;

/* Generates the source only (no NVRTC).  CF_ERR_UNSUPPORTED for B2B IRs
 * (unfused.c cuts a B2B graph into two single-GEMM pieces first). */
cf_status cf_rows_generate(const cf_ir *ir, const char *title, cf_strbuf *out, cf_error *err);
/* Generates and compiles (NVRTC through the cache; no GPU needed).  The IR
 * (and its graph) must outlive the object. */
cf_status cf_rows_build(const cf_ir *ir, const char *title, cf_rows **out, cf_error *err);
const char *cf_rows_source(const cf_rows *r);
const cf_rt_cubin *cf_rows_cubin(const cf_rows *r);
/* Threads per CTA the launch uses for rows of N columns. */
int cf_rows_threads(int64_t N);
/* CTAs (a cluster, 1..8) that share each of M rows of N columns when resident_ctas
 * CTAs fit on the device at once: few rows are split so that every SM has work. */
int cf_rows_split(int64_t M, int64_t N, int resident_ctas);
/* Where the rows in flight (min(M, resident_ctas) of them) outgrow L2, the CTAs of a row keep
 * their shares in shared memory: the split (split or more) that fits them, 0 for none (C
 * stays in L2, or a share does not fit even in 8 CTAs). */
int cf_rows_cache_split(int64_t M, int64_t N, int split, int resident_ctas);
/* Runs the epilogue over C on stream s.  a gives the dims (checked against
 * M and N), the epilogue inputs, params and outputs indexed as for
 * cf_kernel_launch (GEMM operands are not read; a->stream is ignored).  The
 * first launch loads the module.  Allocates nothing: safe under CUDA-graph capture. */
cf_status cf_rows_launch(cf_rows *r, cf_rt_devptr C, int64_t M, int64_t N, const cf_launch_args *a,
                         cf_rt_stream s, cf_error *err);
void cf_rows_free(cf_rows *r);

/* ---- unfused.c: the unfused path (cf_unfused in comfuse.h) ---------------- */

/* One GEMM of the graph as the unfused path runs it. */
typedef struct cf_unfused_gemm {
    cf_value node;           /* the matmul                                          */
    cf_dim dim_m, dim_n, dim_k;
    cf_dtype dtype;          /* of both operands (a computed A is stored in it)     */
    bool b_is_nk;
    int a_input;             /* graph input index of A; -1: an earlier piece's value */
    int b_input;
    int piece;               /* the piece that runs right after it, or -1            */
} cf_unfused_gemm;

/* Cuts g at its GEMMs into pieces and lowers each with Φ (no NVRTC, no GPU):
 * piece i runs after GEMM cf_unfused_piece_gemm(u, i) over its f32 output. */
cf_status cf_unfused_plan(const cf_graph *g, cf_unfused **out, cf_error *err);
int cf_unfused_num_gemms(const cf_unfused *u);
const cf_unfused_gemm *cf_unfused_gemm_at(const cf_unfused *u, int j);
int cf_unfused_num_pieces(const cf_unfused *u);
int cf_unfused_piece_gemm(const cf_unfused *u, int i);
/* The piece's IR (its graph: the piece over buffers) and, after cf_unfused_build, its row kernel. */
const cf_ir *cf_unfused_piece_ir(const cf_unfused *u, int i);
const cf_rows *cf_unfused_piece_rows(const cf_unfused *u, int i);
/* For b2b.c, which runs each piece as a fused kernel over its own GEMM (piece i's graph: that
 * GEMM a matmul over inputs bound to its operands, the rest as in the original, dims numbered
 * alike).  cf_unfused_piece_reads_gemm: the GEMM whose f32 output piece i reads from a buffer
 * (a value it recomputes from it), which only the unfused path keeps; -1 for none.
 * cf_unfused_piece_args: piece i's launch arguments for a (pa's tables are u's, valid until the
 * next call): the caller's tensors, the GEMM's operands, and u's buffers for computed operands
 * (S) and row values, (re)allocated for a's dims (CF_ERR_INVALID_ARG while a->stream is captured
 * into a CUDA graph and they must grow).  Only for a piece that reads no GEMM output. */
const cf_graph *cf_unfused_piece_graph(const cf_unfused *u, int i);
cf_value cf_unfused_piece_reads_gemm(const cf_unfused *u, int i);
/* What piece i's output o is: "output" (the graph's), "operand" (a later GEMM's left operand,
 * in its dtype) or "row value" (an f32 [M] value a later piece reads). */
const char *cf_unfused_piece_output_role(const cf_unfused *u, int i, int o);

cf_status cf_unfused_piece_args(cf_unfused *u, int i, const cf_launch_args *a, cf_launch_args *pa, cf_error *err);
/* The plan run on the CPU with the same decomposition and bindings as a launch:
 * each GEMM in f64 kept as f32, each piece by cf_ir_interpret (which computes
 * its own GEMM in f64), computed operands rounded to their GEMM's dtype.
 * Host pointers and outputs as for cf_reference_run.  For tests. */
cf_status cf_unfused_run_host(cf_unfused *u, const cf_bindings *b, double *const *outputs, cf_error *err);

/* ---- b2b.c: a B2B graph as two fused kernels, S through global memory ------- */

/* O = G(F(X*W1)*W2) without an on-chip B2B kernel: unfused.c's cut gives two single-GEMM
 * graphs, each a fused kernel (Φ, plan, Ψ, NVRTC).  Launch 1 runs X*W1 and F and stores S
 * [M, N1] in W2's dtype (and the per-row values of F the second epilogue reads, f32 [M]) into
 * buffers the object owns; launch 2 runs S*W2 and the second epilogue.  kernel.c wraps it: a
 * cf_kernel of a B2B graph is one of these (cf_b2b is declared in kernel.c's section). */
/* Whether unfused.c cuts g into a B2B's two pieces (Φ may still decline g as one B2B IR: a
 * second epilogue that reads per-row values of the first, which the split stores). */
bool cf_b2b_shaped(const cf_graph *g);
/* Builds both kernels' sources (no NVRTC), each planned from req at its own GEMM's size read
 * from dims (indexed by cf_dim), or when dims is NULL from mnk, the first GEMM's M, N, K (NULL
 * or 0: unknown).  CF_ERR_UNSUPPORTED naming the reason when the split does not apply (the
 * unfused path may still run g).  g must outlive the object. */
cf_status cf_b2b_build(const cf_graph *g, const cf_plan_request *req, const int64_t *dims, const int64_t *mnk,
                       const char *title, cf_b2b **out, cf_error *err);
void cf_b2b_free(cf_b2b *b);
/* Kernel i (0: X*W1 and F, 1: S*W2 and the second epilogue); its graph is a piece's. */
cf_kernel *cf_b2b_part(const cf_b2b *b, int i);
/* Both kernels' sources (PTX after compiling), one after the other under a comment line. */
const char *cf_b2b_source(const cf_b2b *b);
const char *cf_b2b_ptx(const cf_b2b *b);
cf_status cf_b2b_compile(cf_b2b *b, cf_error *err);
cf_status cf_b2b_prepare(cf_b2b *b, const int64_t *dims, cf_error *err);
/* Whether the pieces are one kernel (else two, and cf_b2b_describe says why). */
bool cf_b2b_one_kernel(const cf_b2b *b);
/* The launch(es) on a->stream (a as for cf_kernel_launch on the B2B graph). */
cf_status cf_b2b_launch(cf_b2b *b, const cf_launch_args *a, cf_error *err);
/* The cost model's time of both launches at dims, in microseconds. */
double cf_b2b_predict_us(const cf_b2b *b, const int64_t *dims);
/* "B2B: two fused kernels, S [M,N1] bf16 through global memory ..." and a line per kernel. */
void cf_b2b_describe(const cf_b2b *b, cf_strbuf *sb);

#endif /* CF_INTERNAL_H */
