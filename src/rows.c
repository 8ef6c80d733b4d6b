/* rows.c — the unfused path's epilogue kernel: what a user runs today after a
 * GEMM, as one standalone memory-bound kernel, cf_rows_kernel.
 *
 * It reads the GEMM output C [M,N] back from global memory and runs epilogue
 * 0 of the IR over it.  It is also the fused kernel's path for rows wider than
 * a row group (vocabularies), so it is written for bandwidth, not to mimic eager.
 *
 * A cluster of CTAs owns a row at a time (grid-stride over rows), each CTA a
 * contiguous share of its columns: with fewer rows than the GPU holds CTAs (a
 * decode batch of 64 over a 128k vocabulary) one CTA a row would leave most
 * SMs idle and too few loads in flight.  The stages run in order, each as one
 * loop over the CTA's columns (thread t takes columns t, t + blockDim.x, ...:
 * coalesced), unrolled so that each thread has several loads in flight.  A
 * REDUCE folds a partial per thread, then warp shuffles, then one value per
 * warp through shared memory, then (a cluster of more than one CTA) one value
 * per CTA through distributed shared memory; every thread gets the same result,
 * so VEC_M values (computed between the column loops) are uniform.  TILE values
 * a later stage uses are recomputed from C and the inputs, not stored: reading
 * C again costs less than writing a scratch plane and reading it back.  Where
 * the rows in flight outgrow L2 (each later loop would read C from DRAM again),
 * the launch gives each CTA its share of the row in shared memory (cf_cache):
 * the first loop copies each column there as it reads it, later loops read it
 * back.  A thread reads back only the columns it wrote, so no barrier is needed.
 *
 * Ops use codegen.c's templates and helpers (cf_cg_*), so the fused and the
 * unfused kernels compute every elementwise op identically.  The source has
 * no includes: NVRTC compiles it with no include path, 16-bit values are
 * unsigned short with inline-PTX conversions. */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

#define ROWS_MIN_THREADS 128
#define ROWS_MAX_THREADS 512
#define ROWS_COLS_PER_THREAD 16 /* wider rows get more threads, up to the max */
#define ROWS_UNROLL 8           /* columns a thread has in flight per loop trip   */
#define ROWS_MAX_SPLIT 8        /* CTAs a row (a portable cluster)               */
#define ROWS_CACHE_BYTES 65536  /* a CTA's share of the row in shared memory: 3 CTAs an SM */
#define ROWS_L2_BYTES (40 << 20) /* rows in flight that stay in the H200's 50 MB L2 between loops */

/* How many clusters of a launch's shape the device holds at once (n 0: not asked yet) and the
 * shared memory a CTA was asked with. */
typedef struct rows_resident {
    int smem, n;
} rows_resident;

struct cf_rows {
    const cf_ir *ir;
    cf_strbuf src;
    cf_rt_cubin cubin;
    bool compiled;
    /* loaded on the first launch */
    cf_rt_module module;
    cf_rt_func func;
    /* clusters of 1, 2, 4, 8 CTAs of 128, 256, 512 threads, without and with the row in
     * shared memory */
    rows_resident resident[3][4][2];
};

/* ---- generation ----------------------------------------------------------- */

typedef struct rows_gen {
    const cf_ir *ir;
    cf_strbuf *sb;
    int indent;
    bool *emitted;            /* by id: defined in the current column loop     */
    bool c_cached;            /* an earlier loop has copied C to cf_row        */
} rows_gen;

__attribute__((format(printf, 2, 3)))
static void line(rows_gen *g, const char *fmt, ...)
{
    for (int i = 0; i < g->indent; i++)
        cf_sb_puts(g->sb, "    ");
    va_list ap;
    va_start(ap, fmt);
    cf_sb_vprintf(g->sb, fmt, ap);
    va_end(ap);
    cf_sb_puts(g->sb, "\n");
}

static const char *id_of(const cf_ir_node *n, char *buf, size_t len) { return cf_cg_ident(n, buf, len); }

/* A C identifier from an A entry's name plus a suffix (_in, _out, _prm).
 * Node identifiers end in digits (cf_cg_ident) and every name made here ends
 * in a word, so the two never collide. */
static const char *arg_ident(const char *suffix, const cf_ir_arg *a, char *buf, size_t len)
{
    size_t j = 0;
    for (const char *p = a->name ? a->name : "arg"; *p && j + 16 < len; p++)
        buf[j++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ? *p : '_');
    snprintf(buf + j, len - j, "%s", suffix);
    return buf;
}

static const char *store_fn(cf_dtype t)
{
    return t == CF_F32 ? "store_f32" : t == CF_BF16 ? "store_bf16" : "store_f16";
}

/* Rows-kernel helpers, emitted only when the kernel calls them (after the
 * shared codegen.c helpers they use). */
static const struct {
    const char *name;
    const char *def;
} row_helpers[] = {
    {"cf_combine",
     "/* Row reductions: sum (and mean), max, min; max/min propagate NaN like the reference. */\n"
     "enum { CF_SUM, CF_MAX, CF_MIN };\n"
     "template <int OP>\n"
     "static __device__ __forceinline__ float cf_combine(float a, float b)\n"
     "{\n"
     "    return OP == CF_SUM ? a + b : OP == CF_MAX ? op_max(a, b) : op_min(a, b);\n"
     "}"},
    {"cf_block_reduce",
     "/* Combines one partial per thread across the CTA: warp shuffles, then one\n"
     " * value per warp through shared memory.  Every thread gets the same result\n"
     " * (the xor butterfly combines commutatively).  Ends with a barrier so red\n"
     " * can be reused by the next reduction. */\n"
     "template <int OP>\n"
     "static __device__ __forceinline__ float cf_block_reduce(float v, float *red)\n"
     "{\n"
     "    const float identity = OP == CF_SUM ? 0.0f : OP == CF_MAX ? __int_as_float((int)0xff800000)\n"
     "                                                             : __int_as_float(0x7f800000);\n"
     "    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;\n"
     "#pragma unroll\n"
     "    for (int o = 16; o > 0; o >>= 1)\n"
     "        v = cf_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
     "    if (lane == 0)\n"
     "        red[warp] = v;\n"
     "    __syncthreads();\n"
     "    v = lane < n_warps ? red[lane] : identity;\n"
     "#pragma unroll\n"
     "    for (int o = 16; o > 0; o >>= 1)\n"
     "        v = cf_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));\n"
     "    __syncthreads();\n"
     "    return v;\n"
     "}"},
    {"cf_cluster_size",
     "/* The cluster this CTA belongs to (1 CTA without a cluster launch). */\n"
     "static __device__ __forceinline__ unsigned cf_cluster_size()\n"
     "{\n"
     "    unsigned n;\n"
     "    asm volatile(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(n));\n"
     "    return n;\n"
     "}\n"
     "static __device__ __forceinline__ unsigned cf_cluster_rank()\n"
     "{\n"
     "    unsigned r;\n"
     "    asm volatile(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(r));\n"
     "    return r;\n"
     "}\n"
     "/* Every thread of every CTA of the cluster; orders shared-memory writes before it\n"
     " * with peers' reads after it. */\n"
     "static __device__ __forceinline__ void cf_cluster_sync()\n"
     "{\n"
     "    asm volatile(\"barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n"
     "}\n"
     "/* A float at shared address local in CTA rank's shared memory. */\n"
     "static __device__ __forceinline__ float cf_peer_load(unsigned local, unsigned rank)\n"
     "{\n"
     "    unsigned remote;\n"
     "    float v;\n"
     "    asm volatile(\"mapa.shared::cluster.u32 %0, %1, %2;\" : \"=r\"(remote) : \"r\"(local), \"r\"(rank));\n"
     "    asm volatile(\"ld.shared::cluster.f32 %0, [%1];\" : \"=f\"(v) : \"r\"(remote) : \"memory\");\n"
     "    return v;\n"
     "}"},
    {"cf_row_reduce",
     "/* A row's reduction: the CTA's (cf_block_reduce), then, when a cluster of\n"
     " * CTAs shares the row, one value per CTA through distributed shared memory.\n"
     " * xred holds two slots, used in turns: a CTA writes a slot again only after\n"
     " * the next cluster barrier, which its peers reach after reading it.  Every\n"
     " * CTA combines the values in rank order, so all get the same result. */\n"
     "template <int OP>\n"
     "static __device__ __forceinline__ float cf_row_reduce(float v, float *red, float *xred, int &turn)\n"
     "{\n"
     "    v = cf_block_reduce<OP>(v, red);\n"
     "    const unsigned split = cf_cluster_size();\n"
     "    if (split == 1)\n"
     "        return v;\n"
     "    float *slot = xred + turn;\n"
     "    turn ^= 1;\n"
     "    if (threadIdx.x == 0)\n"
     "        *slot = v;\n"
     "    cf_cluster_sync();\n"
     "    const unsigned local = (unsigned)__cvta_generic_to_shared(slot);\n"
     "    float r = cf_peer_load(local, 0);\n"
     "    for (unsigned p = 1; p < split; ++p)\n"
     "        r = cf_combine<OP>(r, cf_peer_load(local, p));\n"
     "    return r;\n"
     "}"},
};

/* Whether text calls (or instantiates) name. */
static bool uses(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; p && (p = strstr(p, name)) != NULL; p += len) {
        char before = p == text ? ' ' : p[-1];
        bool ident_before = before == '_' || (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') ||
                            (before >= '0' && before <= '9');
        if (!ident_before && (p[len] == '(' || p[len] == '<'))
            return true;
    }
    return false;
}

static const char *reduce_tag(cf_op op)
{
    return op == CF_OP_RMAX ? "CF_MAX" : op == CF_OP_RMIN ? "CF_MIN" : "CF_SUM";
}

/* The expression of a leaf (ACC or BCAST) at the current row / column. */
static void leaf_expr(rows_gen *g, const cf_ir_node *n, char *buf, size_t len)
{
    char an[96];
    const cf_ir_arg *a = n->kind == CF_IR_BCAST && n->src != CF_BC_CONST ? &g->ir->args[n->arg] : NULL;
    if (n->kind == CF_IR_ACC) {
        snprintf(buf, len, "cf_c");   /* emit_column's read of C */
        return;
    }
    switch (n->src) {
    case CF_BC_CONST: cf_cg_float_literal(n->cval, buf, len); break;
    case CF_BC_PARAM: snprintf(buf, len, "%s", arg_ident("_prm", a, an, sizeof an)); break;
    case CF_BC_VEC_N: snprintf(buf, len, "%s(%s, col)", cf_cg_load_fn(a->dtype), arg_ident("_in", a, an, sizeof an)); break;
    case CF_BC_VEC_M: snprintf(buf, len, "%s(%s, row)", cf_cg_load_fn(a->dtype), arg_ident("_in", a, an, sizeof an)); break;
    default: snprintf(buf, len, "%s(%s, idx)", cf_cg_load_fn(a->dtype), arg_ident("_in", a, an, sizeof an)); break;
    }
}

static void ensure_in_loop(rows_gen *g, const cf_ir_node *n);

/* The value of r (a node of an earlier stage) inside the current scope: the
 * variable of a row-level value, a leaf re-read, or a VEC_N or TILE value
 * recomputed in this loop from what it depends on. */
static void carried_expr(rows_gen *g, const cf_ir_node *r, char *buf, size_t len)
{
    char rn[96];
    id_of(r, rn, sizeof rn);
    if (r->kind == CF_IR_REDUCE || r->shape == CF_SHAPE_SCALAR || r->shape == CF_SHAPE_VEC_M) {
        snprintf(buf, len, "%s", rn);
    } else if (r->kind == CF_IR_ACC || r->kind == CF_IR_BCAST) {
        leaf_expr(g, r, buf, len);
    } else if (r->kind == CF_IR_PLACEHOLDER) {
        carried_expr(g, r->ref, buf, len); /* a statistic or a value carried further */
    } else {
        ensure_in_loop(g, r);
        snprintf(buf, len, "%s", rn);
    }
}

/* Emits the definition of one value node in the current scope. */
static void emit_value(rows_gen *g, const cf_ir_node *n)
{
    char id[96], expr[512];
    id_of(n, id, sizeof id);
    switch (n->kind) {
    case CF_IR_ACC:
    case CF_IR_BCAST:
        leaf_expr(g, n, expr, sizeof expr);
        line(g, "const float %s = %s;", id, expr);
        break;
    case CF_IR_COMPUTE: {
        char a0[96], a1[96];
        for (int i = 0; i < n->nargs; i++)
            if (n->args[i]->shape == CF_SHAPE_VEC_N && n->shape != CF_SHAPE_SCALAR)
                ensure_in_loop(g, n->args[i]);
        id_of(n->args[0], a0, sizeof a0);
        if (n->nargs == 2)
            id_of(n->args[1], a1, sizeof a1);
        cf_strbuf e = {0};
        cf_cg_expand_op(n->op, a0, n->nargs == 2 ? a1 : NULL, &e);
        line(g, "const float %s = %s;", id, e.data ? e.data : "0.0f");
        if (e.oom)
            g->sb->oom = true;
        cf_sb_free(&e);
        break;
    }
    case CF_IR_PLACEHOLDER:
        carried_expr(g, n->ref, expr, sizeof expr);
        line(g, "const float %s = %s;  /* %s of %s */", id, expr, n->is_stat ? "statistic" : "bypass",
             cf_ir_node_label(n->ref, (char[96]){0}, 96));
        break;
    default:
        CF_ASSERT(!"rows: emit_value on a node without a value");
    }
}

/* Makes the VEC_N (or TILE) node n available in the current column loop,
 * emitting what it needs first: a VEC_N value of an earlier stage is a pure
 * function of the column, so it is recomputed here rather than stored. */
static void ensure_in_loop(rows_gen *g, const cf_ir_node *n)
{
    if (n->shape == CF_SHAPE_SCALAR || n->shape == CF_SHAPE_VEC_M || g->emitted[n->id])
        return;
    g->emitted[n->id] = true;
    for (int i = 0; i < n->nargs; i++)
        ensure_in_loop(g, n->args[i]);
    emit_value(g, n);
}

static void emit_store(rows_gen *g, const cf_ir_node *n)
{
    char on[96], vn[96];
    const cf_ir_arg *a = &g->ir->args[n->arg];
    arg_ident("_out", a, on, sizeof on);
    id_of(n->args[0], vn, sizeof vn);
    switch (n->shape) {
    case CF_SHAPE_TILE:
        line(g, "%s(%s, idx, %s);  /* output %s: %s [M,N] */", store_fn(a->dtype), on, vn, a->name,
             cf_dtype_name(a->dtype));
        break;
    case CF_SHAPE_VEC_N:
        line(g, "if (row == 0)  /* output %s: %s [N], written once */", a->name, cf_dtype_name(a->dtype));
        line(g, "    %s(%s, col, %s);", store_fn(a->dtype), on, vn);
        break;
    case CF_SHAPE_VEC_M:
        line(g, "if (threadIdx.x == 0)  /* output %s: %s [M], one per row */", a->name, cf_dtype_name(a->dtype));
        line(g, "    %s(%s, row, %s);", store_fn(a->dtype), on, vn);
        break;
    default:
        line(g, "if (blockIdx.x == 0 && threadIdx.x == 0)  /* output %s: %s scalar */", a->name,
             cf_dtype_name(a->dtype));
        line(g, "    %s(%s, 0, %s);", store_fn(a->dtype), on, vn);
        break;
    }
}

static bool stage_needs_loop(const cf_ir_spec *s)
{
    for (int i = 0; i < s->n_nodes; i++) {
        const cf_ir_node *n = s->nodes[i];
        if (n->kind == CF_IR_REDUCE || n->shape == CF_SHAPE_TILE ||
            (n->kind == CF_IR_STORE && n->shape == CF_SHAPE_VEC_N))
            return true;
    }
    return false;
}

/* One column of stage s's loop (col in scope): its values, reduction partial and stores. */
static void emit_column(rows_gen *g, const cf_ir_spec *s, int n_nodes)
{
    char id[96];
    memset(g->emitted, 0, (size_t)n_nodes * sizeof *g->emitted);
    line(g, "const long long idx = row_base + col;");
    if (!g->c_cached) {
        line(g, "const float cf_c = C[idx];");
        line(g, "if (cf_cache)");
        line(g, "    cf_row[col - col0] = cf_c;  /* for the later loops */");
    } else {
        line(g, "const float cf_c = cf_cache ? cf_row[col - col0] : C[idx];");
    }
    for (int i = 0; i < s->n_nodes; i++) {
        const cf_ir_node *n = s->nodes[i];
        if (n->kind == CF_IR_REDUCE) {
            char a0[96];
            ensure_in_loop(g, n->args[0]);
            line(g, "%s_part = cf_combine<%s>(%s_part, %s);", id_of(n, id, sizeof id), reduce_tag(n->op), id,
                 id_of(n->args[0], a0, sizeof a0));
        } else if (n->kind == CF_IR_STORE) {
            if (n->shape == CF_SHAPE_TILE || n->shape == CF_SHAPE_VEC_N) {
                ensure_in_loop(g, n->args[0]);
                emit_store(g, n);
            }
        } else if (n->shape == CF_SHAPE_TILE || n->shape == CF_SHAPE_VEC_N) {
            ensure_in_loop(g, n);
        }
    }
}

static void emit_stage(rows_gen *g, const cf_ir_spec *s, int n_nodes)
{
    const cf_ir_node *red = s->terminal && s->terminal->kind == CF_IR_REDUCE ? s->terminal : NULL;
    char id[96], lbl[96], an[96];
    line(g, "/* ---- stage %d: %d nodes%s%s ---- */", s->depth, s->n_nodes, red ? ", then " : "",
         red ? cf_op_name(red->op) : "");
    if (red)
        line(g, "/*      reduces %s over the row into %s */", cf_ir_node_label(red->args[0], lbl, sizeof lbl),
             cf_ir_node_label(red, an, sizeof an));
    /* per-row values: statistics of the previous stage and what they feed */
    for (int i = 0; i < s->n_nodes; i++) {
        const cf_ir_node *n = s->nodes[i];
        if (n->shape != CF_SHAPE_VEC_M || n->kind == CF_IR_REDUCE)
            continue;
        if (n->kind == CF_IR_STORE)
            emit_store(g, n);
        else
            emit_value(g, n);
    }
    if (!stage_needs_loop(s))
        return;
    if (red)
        line(g, "float %s_part = %s;  /* this thread's partial, from the identity */", id_of(red, id, sizeof id),
             red->op == CF_OP_RMAX   ? "__int_as_float((int)0xff800000)"
             : red->op == CF_OP_RMIN ? "__int_as_float(0x7f800000)"
                                     : "0.0f");
    /* whole trips of ROWS_UNROLL columns without a bounds test (their loads issue together),
     * then the rest one column at a time */
    line(g, "{");
    g->indent++;
    line(g, "int base = col0 + threadIdx.x;");
    line(g, "for (; base + %d * (int)blockDim.x < col1; base += %d * blockDim.x) {", ROWS_UNROLL - 1, ROWS_UNROLL);
    g->indent++;
    line(g, "#pragma unroll");
    line(g, "for (int j = 0; j < %d; ++j) {", ROWS_UNROLL);
    g->indent++;
    line(g, "const int col = base + j * blockDim.x;");
    emit_column(g, s, n_nodes);
    g->indent--;
    line(g, "}");
    g->indent--;
    line(g, "}");
    line(g, "for (int col = base; col < col1; col += blockDim.x) {");
    g->indent++;
    emit_column(g, s, n_nodes);
    g->indent--;
    line(g, "}");
    g->indent--;
    line(g, "}");
    g->c_cached = true;
    if (red)
        line(g, "const float %s = cf_row_reduce<%s>(%s_part, cf_red, cf_xred, cf_turn)%s;  /* %s over the row */", id,
             reduce_tag(red->op), id, red->op == CF_OP_MEAN ? " / (float)N" : "", cf_op_name(red->op));
}

/* CF_OK when the row kernel can run ir's epilogue: one GEMM's, with no MATMUL inside. */
static cf_status check_rows_ir(const cf_ir *ir, cf_error *err)
{
    if (ir->n_gemms != 1 || !ir->epi[0])
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "the unfused row kernel runs the epilogue of one GEMM; a B2B IR (F(X*W1)*W2) needs "
                         "the second GEMM between its two epilogues: cf_unfused cuts the graph into one "
                         "row kernel per GEMM");
    if (ir->dual)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "the unfused row kernel reads one GEMM output; a dual GEMM's epilogue reads two: "
                         "cf_unfused runs it with the second GEMM's output as an input");
    for (const cf_ir_spec *s = ir->epi[0]; s; s = s->post)
        for (int i = 0; i < s->n_nodes; i++)
            if (s->nodes[i]->kind == CF_IR_MATMUL)
                return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                                 "the unfused row kernel cannot run a MATMUL node (B2B)");
    return CF_OK;
}

/* The kernel's signature: C, its dtype, M, N, then A's epilogue entries. */
static void emit_signature(rows_gen *g)
{
    const cf_ir *ir = g->ir;
    line(g, "extern \"C\" __global__ void __launch_bounds__(%d)", ROWS_MAX_THREADS);
    int last = -1; /* the last A entry passed to the kernel */
    for (int i = 0; i < ir->n_args; i++)
        if (ir->args[i].kind != CF_ARG_GEMM_A && ir->args[i].kind != CF_ARG_GEMM_B &&
            ir->args[i].kind != CF_ARG_GEMM2_B)
            last = i;
    line(g, "cf_rows_kernel(const float *__restrict__ C, long long M, int N, int cf_cache%s", last >= 0 ? "," : ")");
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        char an[96], decl[160];
        const char *sep = i == last ? ")" : ",";
        switch (a->kind) {
        case CF_ARG_SCALAR:
            snprintf(decl, sizeof decl, "float %s", arg_ident("_prm", a, an, sizeof an));
            break;
        case CF_ARG_VEC_N:
        case CF_ARG_VEC_M:
        case CF_ARG_TENSOR:
            snprintf(decl, sizeof decl, "const %s *__restrict__ %s", a->dtype == CF_F32 ? "float" : "unsigned short",
                     arg_ident("_in", a, an, sizeof an));
            break;
        case CF_ARG_OUTPUT:
            snprintf(decl, sizeof decl, "%s *__restrict__ %s", a->dtype == CF_F32 ? "float" : "unsigned short",
                     arg_ident("_out", a, an, sizeof an));
            break;
        default:
            continue;
        }
        line(g, "               %s%s  /* a%d: %s %s */", decl, sep, i, cf_arg_kind_name(a->kind),
             cf_dtype_name(a->dtype));
    }
}

/* Before the row loop: the reduction buffers, this CTA's share of a row, the scalars (once per thread). */
static void emit_prologue(rows_gen *g, int n_red)
{
    const cf_ir *ir = g->ir;
    if (n_red > 0) {
        line(g, "__shared__ float cf_red[32];  /* one partial per warp */");
        line(g, "__shared__ float cf_xred[2];  /* this CTA's partial, read by the cluster's others */");
        line(g, "int cf_turn = 0;  /* which cf_xred slot the next reduction posts to */");
    }
    line(g, "/* the CTAs of a cluster share a row: rank r takes its r-th share of the columns */");
    line(g, "const unsigned cf_split = cf_cluster_size(), cf_rank = cf_cluster_rank();");
    line(g, "const int share = (int)((N + cf_split - 1) / cf_split + 31) / 32 * 32;  /* whole warps of columns */");
    line(g, "const int col0 = (int)min((long long)cf_rank * share, (long long)N), col1 = min(col0 + share, N);");
    line(g, "extern __shared__ float cf_row[];  /* cf_cache: this CTA's share of the row */");
    bool any_scalar = false;
    for (const cf_ir_spec *s = ir->epi[0]; s; s = s->post)
        for (int i = 0; i < s->n_nodes; i++) {
            const cf_ir_node *n = s->nodes[i];
            if (n->shape != CF_SHAPE_SCALAR)
                continue;
            if (!any_scalar)
                line(g, "/* scalars: once per thread */");
            any_scalar = true;
            if (n->kind == CF_IR_STORE)
                emit_store(g, n);
            else
                emit_value(g, n);
        }
}

/* The kernel: signature, prologue, a cluster of CTAs per row running every stage. */
static void emit_kernel(rows_gen *g, int n_red, int nn)
{
    emit_signature(g);
    line(g, "{");
    g->indent++;
    emit_prologue(g, n_red);
    line(g, "for (long long row = blockIdx.x / cf_split; row < M; row += gridDim.x / cf_split) {  /* a cluster a row */");
    g->indent++;
    line(g, "const long long row_base = row * N;");
    line(g, "(void)row_base;");
    for (const cf_ir_spec *s = g->ir->epi[0]; s; s = s->post)
        emit_stage(g, s, nn);
    g->indent--;
    line(g, "}");
    if (n_red > 0) {
        line(g, "if (cf_split > 1)");
        line(g, "    cf_cluster_sync();  /* peers may still read this CTA's last partial */");
    }
    g->indent--;
    line(g, "}");
}

/* The helpers body calls: the shared ones (codegen.c's, into shared) and the rows kernel's own
 * that the shared ones do not define already (into own). */
static void gather_helpers(const char *body, cf_strbuf *own, cf_strbuf *shared)
{
    bool wanted[CF_ARRAY_LEN(row_helpers)];
    cf_strbuf scan = {0};
    /* a helper calls only those before it in the table: one pass from the end finds them all */
    for (int i = CF_ARRAY_LEN(row_helpers) - 1; i >= 0; i--) {
        wanted[i] = uses(body, row_helpers[i].name);
        for (int j = i + 1; j < CF_ARRAY_LEN(row_helpers) && !wanted[i]; j++)
            wanted[i] = wanted[j] && uses(row_helpers[j].def, row_helpers[i].name);
    }
    for (int i = 0; i < CF_ARRAY_LEN(row_helpers); i++)
        if (wanted[i]) {
            cf_sb_puts(&scan, row_helpers[i].def);
            cf_sb_puts(&scan, "\n");
        }
    cf_sb_puts(&scan, body ? body : "");
    cf_cg_emit_helpers(scan.data, shared);
    if (scan.oom)
        shared->oom = true;
    cf_sb_free(&scan);
    for (int i = 0; i < CF_ARRAY_LEN(row_helpers); i++)
        if (wanted[i] && !uses(shared->data, row_helpers[i].name)) {
            cf_sb_puts(own, row_helpers[i].def);
            cf_sb_puts(own, "\n");
        }
}

cf_status cf_rows_generate(const cf_ir *ir, const char *title, cf_strbuf *out, cf_error *err)
{
    if (!ir || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rows_generate: NULL argument");
    cf_status st = check_rows_ir(ir, err);
    if (st != CF_OK)
        return st;
    int nn = ir->n_nodes > 0 ? ir->n_nodes : 1;
    rows_gen g = {.ir = ir};
    g.emitted = calloc((size_t)nn, sizeof *g.emitted);
    cf_strbuf body = {0}, helpers = {0}, own = {0};
    if (!g.emitted)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory generating the row kernel");
    int n_red = ir->n_stages[0] - 1;
    /* the kernel, into its own buffer so only the helpers it calls precede it */
    g.sb = &body;
    emit_kernel(&g, n_red, nn);
    gather_helpers(body.data, &own, &helpers);

    cf_sb_printf(out, "/* Generated by comfuse %s from %s: do not edit.\n", CF_VERSION, title ? title : "<graph>");
    cf_sb_printf(out, " * The unfused epilogue: reads the GEMM output C [M,N] from global memory and\n"
                      " * runs the %d-stage epilogue over it, a cluster of CTAs per row, one column\n"
                      " * loop per stage, %d row reduction%s; values a later stage uses are recomputed. */\n",
                 ir->n_stages[0], n_red, n_red == 1 ? "" : "s");
    if (helpers.data) {
        cf_sb_puts(out, "/* Helpers shared with the fused kernel (NaN-propagating like the reference). */\n");
        cf_sb_puts(out, helpers.data);
        cf_sb_puts(out, "\n");
    }
    if (own.data) {
        cf_sb_puts(out, own.data);
        cf_sb_puts(out, "\n");
    }
    cf_sb_puts(out, body.data ? body.data : "");
    bool oom = body.oom || own.oom || helpers.oom || out->oom;
    cf_sb_free(&body);
    cf_sb_free(&own);
    cf_sb_free(&helpers);
    free(g.emitted);
    if (oom)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory generating the row kernel");
    return CF_OK;
}

/* ---- the object: build, launch ---------------------------------------------- */

/* Columns a CTA of `split` takes, whole warps of them (as the kernel's `share`). */
static int row_share(int64_t N, int split) { return (int)((N + split - 1) / split + 31) / 32 * 32; }

int cf_rows_threads(int64_t N)
{
    /* enough threads that each takes ~16 columns of the row, within 128..512 */
    int t = ROWS_MIN_THREADS;
    while (t < ROWS_MAX_THREADS && (int64_t)t * ROWS_COLS_PER_THREAD < N)
        t *= 2;
    return t;
}

int cf_rows_cache_split(int64_t M, int64_t N, int split, int resident_ctas)
{
    /* Later loops reread C from L2 while the rows in flight fit there (33 MB did); past that,
     * from DRAM (softmax's three loops at 2048x32000, 67 MB in flight, read C 2.9 times). */
    const int64_t in_flight = M < resident_ctas ? M : resident_ctas;
    if (in_flight * N * 4 <= ROWS_L2_BYTES)
        return 0;
    while (split < ROWS_MAX_SPLIT && row_share(N, split) * 4 > ROWS_CACHE_BYTES)
        split *= 2;
    return row_share(N, split) * 4 <= ROWS_CACHE_BYTES ? split : 0;
}

int cf_rows_split(int64_t M, int64_t N, int resident_ctas)
{
    /* double while the rows still fill the resident CTAs twice over and each CTA keeps a few
     * loop trips of columns */
    const int64_t min_cols = (int64_t)cf_rows_threads(N) * ROWS_UNROLL / 2;
    int split = 1;
    while (split < ROWS_MAX_SPLIT && M * split * 2 <= resident_ctas && N / (split * 2) >= min_cols)
        split *= 2;
    return split;
}

void cf_rows_free(cf_rows *r)
{
    if (!r)
        return;
    if (r->module)
        cf_rt_module_unload(r->module, NULL);
    cf_rt_cubin_free(&r->cubin);
    cf_sb_free(&r->src);
    free(r);
}

cf_status cf_rows_build(const cf_ir *ir, const char *title, cf_rows **out, cf_error *err)
{
    cf_error_clear(err);
    if (!ir || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rows_build: NULL argument");
    *out = NULL;
    cf_rows *r = calloc(1, sizeof *r);
    if (!r)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    r->ir = ir;
    cf_status st = cf_rows_generate(ir, title, &r->src, err);
    if (st == CF_OK)
        st = cf_rt_compile(r->src.data, "cf_rows_kernel", NULL, 0, &r->cubin, err);
    if (st != CF_OK) {
        cf_rows_free(r);
        return st;
    }
    r->compiled = true;
    *out = r;
    return CF_OK;
}

const char *cf_rows_source(const cf_rows *r) { return r ? r->src.data : NULL; }
const cf_rt_cubin *cf_rows_cubin(const cf_rows *r) { return r && r->compiled ? &r->cubin : NULL; }

static cf_status load_module(cf_rows *r, cf_error *err)
{
    cf_status st = cf_rt_init(err);
    if (st == CF_OK)
        st = cf_rt_module_load(r->cubin.cubin, &r->module, err);
    if (st == CF_OK)
        st = cf_rt_module_get_func(r->module, "cf_rows_kernel", &r->func, err);
    if (st == CF_OK)
        st = cf_rt_func_prepare(r->func, ROWS_CACHE_BYTES, 1, err);
    if (st != CF_OK && r->module) {
        cf_rt_module_unload(r->module, NULL);
        r->module = NULL;
    }
    return st;
}

/* A launch's shape: CTAs a row, whether they keep their share in shared memory, and how many
 * clusters are resident at once. */
typedef struct rows_shape {
    int split, smem, clusters;   /* smem > 0: the shares in shared memory */
} rows_shape;

static int split_index(int split) { return split == 1 ? 0 : split == 2 ? 1 : split == 4 ? 2 : 3; }

/* Clusters of `split` CTAs with smem bytes each resident at once, asked once per (threads,
 * split, smem). */
static cf_status resident_clusters(cf_rows *r, int ti, int threads, int split, int smem, int *out, cf_error *err)
{
    rows_resident *c = &r->resident[ti][split_index(split)][smem > 0];
    if (c->n <= 0 || c->smem != smem) {
        cf_status st = cf_rt_max_active_clusters(r->func, split, threads, smem, &c->n, err);
        if (st != CF_OK)
            return st;
        c->smem = smem;
    }
    *out = c->n;
    return CF_OK;
}

static cf_status rows_shape_of(cf_rows *r, int64_t M, int64_t N, int threads, int ti, rows_shape *sh, cf_error *err)
{
    int clusters1;
    cf_status st = resident_clusters(r, ti, threads, 1, 0, &clusters1, err);
    if (st != CF_OK)
        return st;
    *sh = (rows_shape){.split = cf_rows_split(M, N, clusters1), .clusters = clusters1};
    const int split = cf_rows_cache_split(M, N, sh->split, clusters1);
    if (split) {
        sh->split = split;
        sh->smem = row_share(N, split) * 4;
    }
    int c = 0;
    if (sh->split > 1 || sh->smem) {
        if ((st = resident_clusters(r, ti, threads, sh->split, sh->smem, &c, err)) != CF_OK)
            return st;
        if (c > 0)
            sh->clusters = c;
        else   /* no such cluster fits: one CTA a row, C from memory */
            *sh = (rows_shape){.split = 1, .clusters = clusters1};
    }
    if (sh->clusters < 1)
        sh->clusters = 1;
    return CF_OK;
}

/* One kernel argument: every value the parameter array points at. */
typedef union rows_param {
    uint64_t ptr;
    long long ll;
    int i;
    float f;
} rows_param;

cf_status cf_rows_launch(cf_rows *r, cf_rt_devptr C, int64_t M, int64_t N, const cf_launch_args *a,
                         cf_rt_stream s, cf_error *err)
{
    cf_error_clear(err);
    if (!r || !a || !a->dims || !r->compiled)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rows_launch: NULL argument or uncompiled kernel");
    const cf_ir *ir = r->ir;
    const cf_graph *g = ir->graph;
    if (M < 1 || N < 1 || N > INT32_MAX)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "rows kernel: M=%lld N=%lld: need M >= 1 and 1 <= N < 2^31",
                         (long long)M, (long long)N);
    if (a->dims[ir->dim_m] != M || a->dims[ir->dim_n] != N)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0},
                         "rows kernel: C is [%lld, %lld] but the dims bind %s=%lld, %s=%lld", (long long)M,
                         (long long)N, cf_graph_dim_name(g, ir->dim_m), (long long)a->dims[ir->dim_m],
                         cf_graph_dim_name(g, ir->dim_n), (long long)a->dims[ir->dim_n]);
    if (!C || C % 4)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "rows kernel: C (0x%llx) must be a non-NULL device pointer to f32, 4-byte aligned",
                         (unsigned long long)C);

    /* kernel arguments, in the order cf_rows_generate declares them */
    int n_params = 4 + ir->n_args;
    rows_param *vals = calloc((size_t)n_params, sizeof *vals);
    void **params = calloc((size_t)n_params, sizeof *params);
    cf_status st = CF_OK;
    if (!vals || !params) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
        goto done;
    }
    int k = 0;
    vals[k++].ptr = C;
    vals[k++].ll = (long long)M;
    vals[k++].i = (int)N;
    const int cache_at = k++;   /* cf_cache, set with the launch's shape below */
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *x = &ir->args[i];
        switch (x->kind) {
        case CF_ARG_SCALAR:
            if (!a->params) {
                st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "runtime scalar '%s' has no value", x->name);
                goto done;
            }
            vals[k++].f = (float)a->params[x->index];
            break;
        case CF_ARG_VEC_N:
        case CF_ARG_VEC_M:
        case CF_ARG_TENSOR:
        case CF_ARG_OUTPUT: {
            const uint64_t *tab = x->kind == CF_ARG_OUTPUT ? a->outputs : a->inputs;
            uint64_t p = tab ? tab[x->index] : 0;
            if (!p || p % cf_dtype_size(x->dtype)) {
                st = cf_errorf(err, p ? CF_ERR_ALIGNMENT : CF_ERR_INVALID_ARG, (cf_loc){0},
                               "%s '%s': device pointer 0x%llx is NULL or not aligned to its %s elements",
                               x->kind == CF_ARG_OUTPUT ? "output" : "input", x->name, (unsigned long long)p,
                               cf_dtype_name(x->dtype));
                goto done;
            }
            vals[k++].ptr = p;
            break;
        }
        default:
            break;
        }
    }
    for (int i = 0; i < k; i++)
        params[i] = &vals[i];

    if (!r->module && (st = load_module(r, err)) != CF_OK)
        goto done;
    const int threads = cf_rows_threads(N), ti = threads == 128 ? 0 : threads == 256 ? 1 : 2;
    rows_shape sh;
    if ((st = rows_shape_of(r, M, N, threads, ti, &sh, err)) != CF_OK)
        goto done;
    vals[cache_at].i = sh.smem > 0;
    int64_t grid = sh.clusters;
    if (grid > M)
        grid = M;
    cf_rt_launch_cfg cfg = {
        .grid = {(unsigned)(grid * sh.split), 1, 1},
        .block = {(unsigned)threads, 1, 1},
        .cluster = {(unsigned)sh.split, 1, 1},
        .dyn_smem = (unsigned)sh.smem,
        .stream = s,
    };
    st = cf_rt_launch(r->func, &cfg, params, err);
done:
    free(vals);
    free(params);
    return st;
}
