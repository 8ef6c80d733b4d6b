/*
 * comfuse.h — fuse a GEMM with the memory-intensive subgraph that follows it.
 *
 * The only public header.  A tour, building GEMM -> bias -> LayerNorm:
 *
 *     cf_graph *g = cf_graph_new();
 *     cf_dim M = cf_graph_dim(g, "M"), N = cf_graph_dim(g, "N"), K = cf_graph_dim(g, "K");
 *     cf_value X    = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){M, K});
 *     cf_value W    = cf_graph_input(g, "W", CF_BF16, 2, (cf_dim[]){K, N});
 *     cf_value bias = cf_graph_input(g, "bias", CF_F32, 1, (cf_dim[]){N});
 *     cf_value x    = cf_graph_binary(g, CF_OP_ADD, cf_graph_matmul(g, X, W), bias);
 *     cf_value mu   = cf_graph_reduce(g, CF_OP_MEAN, x, -1);        // [M]
 *     cf_value d    = cf_graph_binary(g, CF_OP_SUB, x, mu);          // broadcast over N
 *     cf_value var  = cf_graph_reduce(g, CF_OP_MEAN, cf_graph_unary(g, CF_OP_SQUARE, d), -1);
 *     cf_value y    = cf_graph_binary(g, CF_OP_MUL, d,
 *                         cf_graph_unary(g, CF_OP_RSQRT,
 *                             cf_graph_binary(g, CF_OP_ADD, var, cf_graph_const(g, 1e-5))));
 *     cf_graph_output(g, "Y", y, CF_BF16);
 *     if (cf_graph_error(g)->status != CF_OK) ... // every builder error is sticky: check once
 *
 * Building is lazy: constructors check shapes and record the op, nothing runs.
 * Shapes are symbolic (cf_dim); sizes are bound only when a graph is run.
 * cf_lower() maps the graph to the Fusion Spec IR (one nested stage per row
 * reduction), or rejects it with CF_ERR_UNSUPPORTED and a diagnostic so the
 * caller can fall back to unfused execution (cf_unfused_build).  The same graph comes from a .cf
 * spec through cf_spec_parse().
 *
 * The library never exits and never prints: every function that can fail
 * returns a cf_status and fills a cf_error.
 */
#ifndef COMFUSE_H
#define COMFUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CF_API __attribute__((visibility("default")))
#else
#define CF_API
#endif

#define CF_VERSION "0.1.0"

/* ---- status and errors ------------------------------------------------ */

typedef enum cf_status {
    CF_OK = 0,
    CF_ERR_INVALID_ARG,  /* a bad argument to an API call                     */
    CF_ERR_SHAPE,        /* shapes that do not match or broadcast             */
    CF_ERR_DTYPE,        /* a dtype the operation does not take               */
    CF_ERR_PARSE,        /* a .cf spec that does not parse                    */
    CF_ERR_UNSUPPORTED,  /* outside the fusion domain: fall back              */
    CF_ERR_NO_MEMORY,
    CF_ERR_IO,
    CF_ERR_ALIGNMENT,    /* a pointer, pitch or size TMA cannot take          */
    CF_ERR_NO_DEVICE,    /* no CUDA driver or no GPU on this machine          */
    CF_ERR_CUDA,         /* a CUDA driver call failed                         */
    CF_ERR_NVRTC,        /* run-time compilation failed (log in the message)  */
    CF_ERR_CHECK,        /* a result differs from the reference              */
    CF_ERR_INTERNAL,     /* a bug in comfuse                                  */
    CF_STATUS_COUNT
} cf_status;

/* One error: the status, where (file:line:col for specs, else empty/0) and
 * a complete human-readable message, already prefixed with the location. */
typedef struct cf_error {
    cf_status status;
    char file[256];
    int line, col;
    char msg[2048];
} cf_error;

CF_API const char *cf_status_name(cf_status s);

/* ---- dtypes and ops ----------------------------------------------------- */

typedef enum cf_dtype { CF_BF16, CF_F16, CF_F32, CF_DTYPE_COUNT } cf_dtype;

CF_API const char *cf_dtype_name(cf_dtype t);
CF_API size_t cf_dtype_size(cf_dtype t);

/* The one op table: enum, spelling in .cf specs, arity and class, as
 * X(ENUM, keyword, arity, class).  Order matters only for the enum values;
 * append new ops at the end of their class (docs/design.md: adding an op). */
#define CF_OPS(X) \
    X(INPUT,        "input",        0, CF_OPC_LEAF)  /* declared tensor input       */   \
    X(CONST,        "const",        0, CF_OPC_LEAF)  /* scalar literal              */   \
    X(PARAM,        "param",        0, CF_OPC_LEAF)  /* named f32 runtime scalar    */   \
    X(MATMUL,       "matmul",       2, CF_OPC_MATMUL) /* [M,K] x ([K,N] | [N,K])     */  \
    X(NEG,          "neg",          1, CF_OPC_UNARY)                                     \
    X(ABS,          "abs",          1, CF_OPC_UNARY)                                     \
    X(EXP,          "exp",          1, CF_OPC_UNARY)                                     \
    X(LOG,          "log",          1, CF_OPC_UNARY)                                     \
    X(SQRT,         "sqrt",         1, CF_OPC_UNARY)                                     \
    X(RSQRT,        "rsqrt",        1, CF_OPC_UNARY)                                     \
    X(SQUARE,       "square",       1, CF_OPC_UNARY)                                     \
    X(RECIP,        "reciprocal",   1, CF_OPC_UNARY)                                     \
    X(RELU,         "relu",         1, CF_OPC_UNARY)                                     \
    X(GELU,         "gelu",         1, CF_OPC_UNARY) /* tanh approximation          */   \
    X(GELU_ERF,     "gelu_erf",     1, CF_OPC_UNARY) /* exact, erf form             */   \
    X(SILU,         "silu",         1, CF_OPC_UNARY)                                     \
    X(SIGMOID,      "sigmoid",      1, CF_OPC_UNARY)                                     \
    X(TANH,         "tanh",         1, CF_OPC_UNARY)                                     \
    X(ADD,          "add",          2, CF_OPC_BINARY)                                    \
    X(SUB,          "sub",          2, CF_OPC_BINARY)                                    \
    X(MUL,          "mul",          2, CF_OPC_BINARY)                                    \
    X(DIV,          "div",          2, CF_OPC_BINARY)                                    \
    X(MAX,          "max",          2, CF_OPC_BINARY) /* NaN-propagating, as torch   */  \
    X(MIN,          "min",          2, CF_OPC_BINARY)                                    \
    X(POW,          "pow",          2, CF_OPC_BINARY) /* exponent must be a scalar   */  \
    X(SUM,          "sum",          1, CF_OPC_REDUCE)                                    \
    X(MEAN,         "mean",         1, CF_OPC_REDUCE)                                    \
    X(RMAX,         "max",          1, CF_OPC_REDUCE) /* one argument: a reduction   */  \
    X(RMIN,         "min",          1, CF_OPC_REDUCE)                                    \
    X(TRANSPOSE,    "transpose",    1, CF_OPC_LAYOUT) /* representable; Φ rejects    */

typedef enum cf_op {
#define CF_OP_ENUM_(e, kw, arity, cls) CF_OP_##e,
    CF_OPS(CF_OP_ENUM_)
#undef CF_OP_ENUM_
    CF_OP_COUNT
} cf_op;

typedef enum cf_op_class {
    CF_OPC_LEAF, CF_OPC_MATMUL, CF_OPC_UNARY, CF_OPC_BINARY, CF_OPC_REDUCE, CF_OPC_LAYOUT
} cf_op_class;

CF_API const char *cf_op_name(cf_op op);   /* the .cf keyword          */
CF_API cf_op_class cf_op_class_of(cf_op op);

/* ---- graph capture ------------------------------------------------------ */

typedef struct cf_graph cf_graph;
typedef int32_t cf_value;   /* a node of the graph; < 0 after an error        */
typedef int32_t cf_dim;     /* a symbolic dimension; < 0 after an error       */

#define CF_MAX_DIMS 16
#define CF_MAX_NAME 64

CF_API cf_graph *cf_graph_new(void);            /* NULL when out of memory  */
CF_API void cf_graph_free(cf_graph *g);
/* The first error any builder call met (status CF_OK if none).  Builders that
 * get an invalid cf_value return one without adding a new error. */
CF_API const cf_error *cf_graph_error(const cf_graph *g);

/* Finds or creates the symbolic dimension called name. */
CF_API cf_dim cf_graph_dim(cf_graph *g, const char *name);
/* A tensor input of rank 1 or 2 over the given dims, row-major.
 * Matrices X [M,K], weights [K,N] or [N,K] (nn.Linear), row vectors [N],
 * column vectors [M] and full epilogue tensors [M,N] are all inputs. */
CF_API cf_value cf_graph_input(cf_graph *g, const char *name, cf_dtype t, int rank,
                               const cf_dim *dims);
/* A constant, kept as the f32 value v rounds to (the kernels compute in f32; the float64
 * reference takes the same value): 1e39 is inf, 7e-46 is 0. */
CF_API cf_value cf_graph_const(cf_graph *g, double v);
/* A named f32 scalar whose value is given at run time. */
CF_API cf_value cf_graph_param(cf_graph *g, const char *name);
/* a [M,K] times b, where b is [K,N] or, nn.Linear-style, [N,K]. */
CF_API cf_value cf_graph_matmul(cf_graph *g, cf_value a, cf_value b);
CF_API cf_value cf_graph_unary(cf_graph *g, cf_op op, cf_value x);
/* Elementwise with broadcasting: scalars, [N] row vectors and [M] column
 * vectors broadcast against [M,N].  CF_OP_POW needs a scalar exponent. */
CF_API cf_value cf_graph_binary(cf_graph *g, cf_op op, cf_value a, cf_value b);
/* Reduction of a rank-2 value over one axis (0 = rows M, 1 or -1 = the last
 * dim N); the result has the remaining dim.  Only row reductions (over N)
 * can be fused; the others are captured so Φ can reject them by name. */
CF_API cf_value cf_graph_reduce(cf_graph *g, cf_op op, cf_value x, int axis);
CF_API cf_value cf_graph_transpose(cf_graph *g, cf_value x);
/* Marks v as an output called name, stored as dtype t. */
CF_API cf_status cf_graph_output(cf_graph *g, const char *name, cf_value v, cf_dtype t);
/* Names a node (used by the IR printer and in diagnostics). */
CF_API cf_status cf_graph_set_name(cf_graph *g, cf_value v, const char *name);

/* Introspection: inputs, params and outputs in declaration order. */
CF_API int cf_graph_num_dims(const cf_graph *g);
CF_API const char *cf_graph_dim_name(const cf_graph *g, cf_dim d);
CF_API int cf_graph_num_inputs(const cf_graph *g);
CF_API int cf_graph_num_params(const cf_graph *g);
CF_API int cf_graph_num_outputs(const cf_graph *g);

typedef struct cf_tensor_info {
    const char *name;
    cf_dtype dtype;
    int rank;            /* 0 for params                                   */
    cf_dim dims[2];
} cf_tensor_info;

CF_API cf_tensor_info cf_graph_input_info(const cf_graph *g, int i);
CF_API const char *cf_graph_param_name(const cf_graph *g, int i);
CF_API cf_tensor_info cf_graph_output_info(const cf_graph *g, int i);

/* ---- the .cf spec language (docs/spec.md) ------------------------------- */

/* Parses a spec into a new graph.  filename is used in diagnostics only. */
CF_API cf_status cf_spec_parse(const char *src, size_t len, const char *filename,
                               cf_graph **out, cf_error *err);
CF_API cf_status cf_spec_parse_file(const char *path, cf_graph **out, cf_error *err);

/* ---- Φ: lowering to the Fusion Spec IR ---------------------------------- */

typedef struct cf_ir cf_ir;

/* CF_ERR_UNSUPPORTED means the graph is outside the fusion domain; err names
 * the node and the reason, and the caller should fall back. */
CF_API cf_status cf_lower(const cf_graph *g, cf_ir **out, cf_error *err);
CF_API void cf_ir_free(cf_ir *ir);
/* Writes the IR readably (what `comfuse explain` shows). */
CF_API void cf_ir_print(const cf_ir *ir, FILE *f);
CF_API int cf_ir_num_stages(const cf_ir *ir);  /* of the first epilogue    */

/* ---- running a graph on the CPU ------------------------------------------ */

/* Sizes for every dim (indexed by cf_dim), host pointers to every input in
 * its declared dtype and layout (indexed like cf_graph_input_info), and the
 * runtime scalars (indexed like cf_graph_param_name). */
typedef struct cf_bindings {
    const int64_t *dims;
    const void *const *inputs;
    const double *params;
} cf_bindings;

/* The float64 reference: runs the original graph.  outputs[i] receives the
 * row-major values of output i. */
CF_API cf_status cf_reference_run(const cf_graph *g, const cf_bindings *b, double *const *outputs,
                                  cf_error *err);
/* Runs the lowered IR the way the kernel does: stage by stage, row by row,
 * reducing tile-sized fragments and then combining the partials. */
CF_API cf_status cf_ir_interpret(const cf_ir *ir, const cf_bindings *b, double *const *outputs,
                                 cf_error *err);

/* ---- fused kernels -------------------------------------------------------- */

/* What a user chooses of the kernel; 0 in a field lets comfuse choose.  The rest of the
 * launch (how the schedule finishes tiles, pairs them, multicasts operands, lays out shared
 * memory) is planned inside the library for the GEMM size m, n, k given here. */
typedef struct cf_options {
    int block_m;         /* rows of a consumer warpgroup's tile: 64 or 128     */
    int block_n;         /* columns of a tile: 64, 128, 192 or 256             */
    int stages;          /* shared-memory pipeline depth: the deepest wanted; a
                            kernel is built with the deepest that fits in shared
                            memory (cf_resources.stages says which)            */
    int cluster_n;       /* CTAs along N that share a row block: a thread-block
                            cluster, except with CF_REDUCE_GLOBAL              */
    int reduce_mode;     /* how those CTAs combine row partials: 0 auto,
                            CF_REDUCE_PEER (DSMEM all-to-all), CF_REDUCE_LEADER
                            (DSMEM via rank 0) or CF_REDUCE_GLOBAL (through L2,
                            no cluster; the kernel launches cooperatively)     */
    int schedule;        /* how the two consumer warpgroups share the work: 0
                            auto, CF_SCHEDULE_PINGPONG (each its own tile, one's
                            epilogue under the other's mainloop),
                            CF_SCHEDULE_COOPERATIVE (both on one 2*block_m x
                            block_n tile: fewer operand bytes per FLOP, the
                            epilogue not hidden; elementwise epilogues only) or
                            CF_SCHEDULE_FINISHER (PingPong, and a fourth
                            warpgroup finishes the tiles that finish late;
                            PingPong where no tile finishes late)              */
    int64_t m, n, k;     /* the GEMM size the kernel is planned for (launches may
                            use others); 0 when not known                      */
} cf_options;

enum { CF_REDUCE_AUTO = 0, CF_REDUCE_PEER = 1, CF_REDUCE_LEADER = 2, CF_REDUCE_GLOBAL = 3 };
enum { CF_SCHEDULE_AUTO = 0, CF_SCHEDULE_PINGPONG = 1, CF_SCHEDULE_COOPERATIVE = 2, CF_SCHEDULE_FINISHER = 3 };

/* The plan's choices for g at this GEMM size (every field filled, m, n, k set; n <= 0 when
 * the size is not known yet).  Graphs with row reductions need all of a row's column tiles
 * resident at once, so N picks cluster_n.  Passed to cf_kernel_build as it is, or with some
 * fields changed, it plans the kernel the CLI plans for the same choices; a field equal to
 * the plan's own choice counts as not chosen. */
CF_API cf_options cf_options_for(const cf_graph *g, int64_t m, int64_t n, int64_t k);

typedef struct cf_kernel cf_kernel;

/* Lowers g and generates the kernel's CUDA source (no GPU, no NVRTC).  The
 * graph must outlive the kernel.  CF_ERR_UNSUPPORTED: run g on the unfused
 * path instead (cf_unfused_build, below).  A B2B graph (O = G(F(X*W1)*W2))
 * builds as one kernel of two phases where F has no row reduction, else as two
 * fused kernels that one cf_kernel_launch runs back to back; S = F(X*W1) goes
 * through a device buffer the object owns (allocated by a launch, as are the
 * one kernel's counters: launch once at the largest M before capturing into a
 * CUDA graph); opt's m, n, k are the first GEMM's. */
CF_API cf_status cf_kernel_build(const cf_graph *g, const cf_options *opt, const char *title,
                                 cf_kernel **out, cf_error *err);
CF_API const char *cf_kernel_source(const cf_kernel *k);
/* Compiles the source with NVRTC for sm_90a into a cubin, through the on-disk
 * cache.  Needs NVRTC, not a GPU. */
CF_API cf_status cf_kernel_compile(cf_kernel *k, cf_error *err);
/* Compiles every kernel that a launch with these dims (indexed like cf_launch_args.dims) will
 * run: the kernel itself and, for rows wider than its row group, the wide-row path's GEMM and
 * row kernel.  Needs NVRTC, not a GPU; a launch after it compiles nothing.  dims' M is also
 * the largest M the kernel is prepared for: with reductions through L2, the first launch
 * allocates the exchange slots for it, so launches at any M up to it allocate nothing and never
 * synchronise (pass an M bucket's upper bound; a larger M grows the slots by doubling). */
CF_API cf_status cf_kernel_prepare(cf_kernel *k, const int64_t *dims, cf_error *err);
/* PTX of the compiled kernel (NULL before cf_kernel_compile). */
CF_API const char *cf_kernel_ptx(const cf_kernel *k);

typedef struct cf_resources {
    int threads;              /* per CTA                                          */
    int registers;            /* per thread (ptxas)                               */
    int spill_bytes;          /* stores + loads to local memory (ptxas)            */
    int stack_bytes;          /* local-memory stack frame (ptxas): an array indexed
                                 at run time, a cost not counted as spills          */
    int smem_bytes;           /* dynamic shared memory per CTA                     */
    int static_smem_bytes;    /* static shared memory (the reduction exchange)     */
    int cluster_n;
    int block_m, block_n, stages;
    int schedule;             /* CF_SCHEDULE_PINGPONG, _COOPERATIVE or _FINISHER   */
    int resident_ctas;        /* CTAs the GPU holds at once (0 before the first launch) */
    int row_ctas;             /* CTAs that share a row block (cluster_n unless reductions
                                 go through L2, which needs no cluster)           */
    int reduce_mode;          /* CF_REDUCE_*, 0 without row reductions             */
    bool late_finish;         /* tiles finish after the next mainloop (not --sync-finish) */
    bool pair_tiles;          /* each CTA takes two column tiles of a row block (the plan's) */
    bool gather_early;        /* a parked tile's late gather loads its words as the next
                                 mainloop ends (Psi's choice; docs/design.md)       */
    bool wgmma_serialized;    /* ptxas serialised the mainloop's wgmma pipeline (its warning
                                 C7515): a kernel-source defect that costs tens of percent */
    int gelu_at_store;        /* 16-bit outputs whose GELU the store computes on packed
                                 pairs in the output's type (bf16: rel. error ~2.8e-3) */
    int split_k;              /* slices of K, each on its own copy of the grid (1: none) */
    bool cache_hit;
    double compile_ms;
    char cache_path[1024];    /* the cache entry holding the cubin; "" when not stored */
    char cache_note[512];     /* why it is not stored (or was rebuilt), or ""      */
} cf_resources;

CF_API cf_status cf_kernel_resources(const cf_kernel *k, cf_resources *r, cf_error *err);

/* Device pointers (CUdeviceptr values) for a launch, indexed like
 * cf_graph_input_info / cf_graph_output_info; params like cf_bindings. */
typedef struct cf_launch_args {
    const int64_t *dims;
    const uint64_t *inputs;
    const double *params;
    const uint64_t *outputs;
    void *stream;             /* CUstream; NULL for the default stream            */
} cf_launch_args;

/* Checks the shapes and alignments against what the kernel and TMA can take
 * (CF_ERR_ALIGNMENT / CF_ERR_SHAPE naming the constraint), then launches.
 * The first launch loads the module (needs a GPU: CF_ERR_NO_DEVICE). */
/* With reductions through L2 (CF_REDUCE_GLOBAL) the launch is cooperative
 * (every CTA resident at once) and uses the kernel object's exchange slots,
 * allocated on the first launch: launches of one kernel object must not
 * overlap in time (use one object per concurrent stream, as with a cuBLAS
 * workspace).  The epoch that tags the slots lives on the device, so CUDA-graph
 * replays are correct; capture after one launch at the largest M (or at any M
 * after cf_kernel_prepare for the largest), since the slots are allocated (and
 * grown) by a launch: a captured launch that would allocate fails, naming this.
 * A launch at a smaller M than the last zeroes, on its stream, the slots it does
 * not reach (every such launch once one was captured), so replays and direct
 * launches at different M may be mixed. */
CF_API cf_status cf_kernel_launch(cf_kernel *k, const cf_launch_args *a, cf_error *err);
CF_API void cf_kernel_free(cf_kernel *k);

/* ---- the unfused path ------------------------------------------------------ */

/* What runs a graph the fused kernel does not take (cf_kernel_build or
 * cf_lower gave CF_ERR_UNSUPPORTED), or a baseline for one it does: cuBLASLt
 * for each GEMM, writing f32 to a buffer the object owns, and between and
 * after them row kernels (one CTA per row) that run the elementwise ops and
 * row reductions.  It takes every graph with one or two GEMMs whose weights
 * are bf16/f16 inputs: an epilogue, B2B (O = F(X*W1)*W2; S = F(X*W1) is stored
 * in W2's dtype), two GEMMs combined (SwiGLU: silu(X*Wg) * (X*Wu)).  Outside
 * that (a third GEMM, GEMMs over different M, a transpose, a reduction over
 * M, a computed weight, a computed left operand of the first GEMM)
 * CF_ERR_UNSUPPORTED names the node.
 *
 * cf_unfused_build plans and compiles the row kernels (NVRTC through the
 * cache; no GPU).  title names the spec in the generated sources' first line
 * (which is not part of the cache key).  The graph must outlive the object. */
typedef struct cf_unfused cf_unfused;

CF_API cf_status cf_unfused_build(const cf_graph *g, const char *title, cf_unfused **out, cf_error *err);
/* Runs the graph on a->stream with the same arguments as cf_kernel_launch.
 * Buffers and cuBLASLt plans are made by the first launch at a shape (and a
 * larger M): launches of one object must not overlap in time. */
CF_API cf_status cf_unfused_launch(cf_unfused *u, const cf_launch_args *a, cf_error *err);
CF_API void cf_unfused_free(cf_unfused *u);

/* Host conversions used to make inputs and read outputs. */
CF_API uint16_t cf_f32_to_bf16(float f);   /* round to nearest even */
CF_API float cf_bf16_to_f32(uint16_t h);
CF_API uint16_t cf_f32_to_f16(float f);
CF_API float cf_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* COMFUSE_H */
