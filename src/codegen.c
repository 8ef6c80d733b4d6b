/* codegen.c — Ψ: Fusion Spec IR -> the CUDA C source of one fused kernel.
 *
 * A structural expansion: the mainloop, tile scheduler and store machinery
 * are hand-written in src/device/cf_sm90.cuh (which declares the epilogue and
 * defines the kernel, cf_gemm_kernel); this file writes what depends on
 * the IR — the epilogue parameter struct and the epilogue itself — by
 * expanding each node with the rule of its category (emit_rules[] below:
 * adding a category means adding a rule).  The epilogue runs per fragment in
 * registers, on the wgmma accumulator layout: one unrolled loop over the
 * CF_ACC_REGS accumulator registers of the thread, values named after IR nodes.
 * Output is deterministic: same IR and options, same bytes.
 */
#include "cf_internal.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- op expansions -------------------------------------------------------- */

/* C expression templates for each elementwise op; %1/%2 are the operands. */
static const char *op_expr(cf_op op)
{
    switch (op) {
    case CF_OP_NEG: return "(-%1)";
    case CF_OP_ABS: return "fabsf(%1)";
    case CF_OP_EXP: return "op_exp(%1)";
    case CF_OP_LOG: return "logf(%1)";
    case CF_OP_SQRT: return "sqrtf(%1)";
    case CF_OP_RSQRT: return "rsqrtf(%1)";
    case CF_OP_SQUARE: return "(%1 * %1)";
    case CF_OP_RECIP: return "op_recip(%1)";
    case CF_OP_RELU: return "op_relu(%1)";
    case CF_OP_GELU: return "op_gelu_tanh(%1)";
    case CF_OP_GELU_ERF: return "op_gelu_erf(%1)";
    case CF_OP_SILU: return "op_silu(%1)";
    case CF_OP_SIGMOID: return "op_sigmoid(%1)";
    case CF_OP_TANH: return "tanhf(%1)";
    case CF_OP_ADD: return "(%1 + %2)";
    case CF_OP_SUB: return "(%1 - %2)";
    case CF_OP_MUL: return "(%1 * %2)";
    case CF_OP_DIV: return "(%1 / %2)";
    case CF_OP_MAX: return "op_max(%1, %2)";
    case CF_OP_MIN: return "op_min(%1, %2)";
    case CF_OP_POW: return "powf(%1, %2)";
    default: return NULL;
    }
}

/* Device definitions of the helpers the templates use, emitted only when used.
 * NaN semantics follow the reference: max/min and relu propagate NaN. */
static const struct {
    const char *name;
    const char *def;
} helpers[] = {
    {"op_exp",
     "/* 2^(x log2 e) on the SFU: relative error ~2^-22, inf/NaN as expf; results\n"
     " * below 2^-126 flush to zero (invisible after the output rounding). */\n"
     "static __device__ __forceinline__ float op_exp(float x)\n"
     "{\n"
     "    float y;\n"
     "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x * 1.44269504f));\n"
     "    return y;\n"
     "}"},
    {"op_exp_sub",
     "/* exp(a - b) for a per-row (or column, or scalar) b: 2^(a log2 e - b log2 e), one FFMA\n"
     " * (b log2 e is computed once per row) where a - b then * log2 e took two FP32 instructions;\n"
     " * 0 exactly at a == b, inf/NaN as exp(a - b). */\n"
     "static __device__ __forceinline__ float op_exp_sub(float a, float b)\n"
     "{\n"
     "    float y;\n"
     "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(fmaf(a, 1.44269504f, -(b * 1.44269504f))));\n"
     "    return y;\n"
     "}"},
    {"op_exp_sub_scaled",
     "/* exp(c a - b) for a constant c > 0 that Psi took out of a max's operand (the max of a,\n"
     " * scaled by c after the loop, is b): the same FFMA as op_exp_sub, c a folded into it. */\n"
     "static __device__ __forceinline__ float op_exp_sub_scaled(float a, float b, float c)\n"
     "{\n"
     "    float y;\n"
     "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(fmaf(a, c * 1.44269504f, -(b * 1.44269504f))));\n"
     "    return y;\n"
     "}"},
    {"op_recip",
     "/* 1 / x within 1 ulp, subnormals and inf/NaN as IEEE; an IEEE division calls a slow path,\n"
     " * and ptxas spilled the registers live across those calls. */\n"
     "static __device__ __forceinline__ float op_recip(float x)\n"
     "{\n"
     "    float d;\n"
     "    asm(\"rcp.approx.f32 %0, %1;\" : \"=f\"(d) : \"f\"(x));\n"
     "    return d;\n"
     "}"},
    {"op_relu", "static __device__ __forceinline__ float op_relu(float x) { return x < 0.0f ? 0.0f : x; }"},
    {"op_gelu_tanh",
     "static __device__ __forceinline__ float op_gelu_tanh(float x)\n"
     "{\n"
     "    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); tanh.approx is exact to\n"
     "     * 2^-11 relative, below bf16 output rounding, and far cheaper than tanhf. */\n"
     "    const float u = x * fmaf(0.0356774081f, x * x, 0.7978845608f);  /* 3 ops, not 5 */\n"
     "    float th;\n"
     "    asm(\"tanh.approx.f32 %0, %1;\" : \"=f\"(th) : \"f\"(u));\n"
     "    const float h = 0.5f * x;\n"
     "    return fmaf(h, th, h);\n"
     "}"},
    {"op_gelu_erf",
     "/* x Phi(x), Phi the normal CDF, as x erfc(-x / sqrt 2) / 2: erfc keeps Phi's relative\n"
     " * accuracy all the way down the negative tail, where 1 + erf cancels and a short fit of\n"
     " * Phi's log-odds (1.4e-3) compounds past an f32 output's tolerance once squared or\n"
     " * divided.  Branch-free; a 16-bit output's GELU is computed by its store instead\n"
     " * (cf_gelu_erf_x2), where the cost is.  -inf gives NaN, as x Phi(x) does. */\n"
     "static __device__ __forceinline__ float op_gelu_erf(float x) { return 0.5f * x * erfcf(-0.70710678118654752f * x); }"},
    /* An IEEE division here, not op_recip: through rcp.approx SwiGLU ran 5 % slower (1.055 -> 1.110
     * of cuBLAS at 2048x11008x4096), though a division of tiles gained (docs/performance.md). */
    {"op_silu", "static __device__ __forceinline__ float op_silu(float x) { return x / (1.0f + op_exp(-x)); }"},
    {"op_sigmoid", "static __device__ __forceinline__ float op_sigmoid(float x) { return 1.0f / (1.0f + op_exp(-x)); }"},
    {"op_max",
     "/* max.NaN: one instruction, NaN if either operand is NaN (torch semantics). */\n"
     "static __device__ __forceinline__ float op_max(float a, float b)\n"
     "{\n"
     "    float d;\n"
     "    asm(\"max.NaN.f32 %0, %1, %2;\" : \"=f\"(d) : \"f\"(a), \"f\"(b));\n"
     "    return d;\n"
     "}"},
    {"load_f32", "static __device__ __forceinline__ float load_f32(const float *p, long long i) { return __ldg(p + i); }"},
    /* Self-contained (not cf_sm90.cuh's cf_f32_of16): the row kernel (rows.c) uses them too
     * and does not include the fused kernel's header. */
    {"load_bf16",
     "static __device__ __forceinline__ float load_bf16(const unsigned short *p, long long i)\n"
     "{\n"
     "    return __uint_as_float((unsigned)__ldg(p + i) << 16);\n"
     "}"},
    {"load_f16",
     "static __device__ __forceinline__ float load_f16(const unsigned short *p, long long i)\n"
     "{\n"
     "    float f;\n"
     "    asm(\"{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }\" : \"=f\"(f) : \"h\"(__ldg(p + i)));\n"
     "    return f;\n"
     "}"},
    {"store_f32", "static __device__ __forceinline__ void store_f32(float *p, long long i, float v) { p[i] = v; }"},
    {"store_bf16",
     "static __device__ __forceinline__ void store_bf16(unsigned short *p, long long i, float v)\n"
     "{\n"
     "    unsigned short h;\n"
     "    asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v));\n"
     "    p[i] = h;\n"
     "}"},
    {"store_f16",
     "static __device__ __forceinline__ void store_f16(unsigned short *p, long long i, float v)\n"
     "{\n"
     "    unsigned short h;\n"
     "    asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v));\n"
     "    p[i] = h;\n"
     "}"},
    {"op_min",
     "static __device__ __forceinline__ float op_min(float a, float b)\n"
     "{\n"
     "    float d;\n"
     "    asm(\"min.NaN.f32 %0, %1, %2;\" : \"=f\"(d) : \"f\"(a), \"f\"(b));\n"
     "    return d;\n"
     "}"},
};

/* ---- emission context ------------------------------------------------------ */

/* Where a value lives from one fragment loop to the next: tile arrays T<k>
 * (T0 is the accumulator itself) for TILE and VEC_N values, row arrays R<k>
 * (one value per row the thread holds) for VEC_M values, S_<id> for scalars. */
enum { CLS_TILE, CLS_ROW, CLS_SCALAR };
#define CG_MAX_ARRAYS 32

typedef struct cg_ctx {
    const cf_ir *ir;
    const cf_plan *opt;
    cf_strbuf *sb;
    int indent;
    int *arr;            /* by node id: its array, or -1 when it needs none    */
    bool *pass;          /* by node id: a bypass that keeps its array          */
    int n_arrays[2];     /* tile and row arrays used                            */
    bool arrays_full;    /* more values live at once than CG_MAX_ARRAYS: declined */
    int n_red;           /* reductions emitted so far (each has its own exchange slots) */
    const cf_ir_node **shifted_by; /* by node id: the reduction whose tile statistic shifted
                                      this carried value (merged exchange), else NULL */
    int merge_next;      /* the stage being emitted starts a merged exchange (MERGE_*) */
    int merge_prev;      /* ... ends the one its predecessor started                */
    const cf_ir_node *merge_r1; /* that predecessor's reduction, and its exchange slots */
    int merge_index;
    int *merge_of;       /* by stage depth: the merged exchange it starts (MERGE_*) */
    const cf_ir_spec *late;      /* the last stage when it finishes late, else NULL */
    const cf_ir_node *late_r1;   /* the merged exchange's first reduction: its tile
                                    statistics wait in cf_late for the late finish */
    const cf_ir_node *late_parked; /* the value the late stage gets from the park */
    bool in_late;        /* emitting the late stage (parked tile in, 8 registers at a time) */
    const cf_ir_spec *mid;       /* the stage after the first merged exchange when the finisher
                                    warpgroup runs it and the next (cf_sched::mid), else NULL */
    const cf_ir_node *mid_parked; /* that stage's value from the park (the shifted one) */
    int in_mid;          /* emitting the mid part: 1 its first pass, 2 its second */
    bool prev_finished;  /* post first: the previous tile's finish is already emitted, between
                            a synchronous exchange's post and its gather */
    int trc_sec;         /* CF_TRACE sections of the first part marked so far    */
    int n_unpark;        /* cf_unpark_stream variables declared so far           */
    bool *at_store;      /* by node id: a GELU its 16-bit store computes (gelu_at_store) */
    int *tin;            /* by arg index: its number among the tile inputs (num_tin: [M,N]
                            inputs fetched through the operand ring), or -1 */
    int n_tin;
    int tin_first, tin_last; /* the depths of the first and last stage that read one */
    bool deciding_tin;   /* cf_cg_tile_inputs: choose them; else render the plan's tin_args */
} cg_ctx;

enum { MERGE_NONE, MERGE_VAR, MERGE_SOFTMAX };
enum { PARK_NONE = -1, PARK_BF16, PARK_F16 }; /* a parked tile's 16-bit type (CF_PARK_* in cf_sm90.cuh) */

__attribute__((format(printf, 2, 3)))
static void line(cg_ctx *c, const char *fmt, ...)
{
    for (int i = 0; i < c->indent; i++)
        cf_sb_puts(c->sb, "    ");
    va_list ap;
    va_start(ap, fmt);
    cf_sb_vprintf(c->sb, fmt, ap);
    va_end(ap);
    cf_sb_puts(c->sb, "\n");
}

static void blank(cg_ctx *c) { cf_sb_puts(c->sb, "\n"); }

/* A C identifier for a node: its graph name and id, e.g. "x_4" or "v7". */
static const char *ident(const cf_ir_node *n, char *buf, size_t len)
{
    if (!n->name) {
        snprintf(buf, len, "v%d", n->id);
        return buf;
    }
    size_t j = 0;
    for (const char *p = n->name; *p && j + 12 < len; p++)
        buf[j++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')
                              ? *p : '_');
    snprintf(buf + j, len - j, "_%d", n->id);
    return buf;
}

/* v as the f32 the kernel computes with: what f32 rounds it to (inf past FLT_MAX, 0 below
 * half the least subnormal), never a literal out of f32's range, which NVRTC rejects;
 * subnormals by their bits (a decimal one may be flushed or rejected). */
static void float_literal(double v, char *buf, size_t len)
{
    const float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (isnan(f))
        snprintf(buf, len, "__int_as_float(0x7fffffff)");
    else if (isinf(f))
        snprintf(buf, len, "__int_as_float(%s)", f > 0 ? "0x7f800000" : "(int)0xff800000");
    else if (f != 0 && fabsf(f) < FLT_MIN)
        snprintf(buf, len, "__int_as_float((int)0x%08xu)", (unsigned)bits);
    else {
        for (int digits = 6; digits <= 9; digits++) {   /* the shortest text that reads back as f */
            snprintf(buf, len, "%.*g", digits, (double)f);
            if (strtof(buf, NULL) == f)
                break;
        }
        if (!strpbrk(buf, ".eE"))
            strncat(buf, ".0", len - strlen(buf) - 1);
        strncat(buf, "f", len - strlen(buf) - 1);
    }
}

static const char *ptr_type(cf_dtype t)
{
    return t == CF_F32 ? "const float *" : "const unsigned short *";
}

/* The load helper of the device header for an element of dtype t. */
static const char *load_fn(cf_dtype t)
{
    return t == CF_F32 ? "load_f32" : t == CF_BF16 ? "load_bf16" : "load_f16";
}

/* ---- per-category rules ------------------------------------------------------ */

typedef void (*emit_rule)(cg_ctx *c, const cf_ir_node *n);

static void emit_acc(cg_ctx *c, const cf_ir_node *n)
{
    char id[96];
    if (cf_ir_acc_second(c->ir, n))
        line(c, "const float %s = acc2[r];  /* accumulator entry of X x %s */", ident(n, id, sizeof id),
             c->ir->args[n->arg].name);
    else
        line(c, "const float %s = acc[r];  /* accumulator entry */", ident(n, id, sizeof id));
}

/* The accumulator cf_epilogue's first array (T0) is: a dual GEMM's second one is a value like
 * any other, which takes an array of its own where it must outlive its loop. */
static bool first_acc(const cg_ctx *c, const cf_ir_node *n)
{
    return n->kind == CF_IR_ACC && !cf_ir_acc_second(c->ir, n);
}

static void emit_bcast(cg_ctx *c, const cf_ir_node *n)
{
    char id[96], lit[64];
    const cf_ir_arg *a = n->arg >= 0 ? &c->ir->args[n->arg] : NULL;
    ident(n, id, sizeof id);
    switch (n->src) {
    case CF_BC_CONST:
        float_literal(n->cval, lit, sizeof lit);
        line(c, "const float %s = %s;  /* scalar broadcast */", id, lit);
        break;
    case CF_BC_PARAM:
        line(c, "const float %s = p.%s;  /* runtime scalar */", id, a->name);
        break;
    case CF_BC_VEC_N:
        line(c, "const float %s = cv_%s[cf_col_slot(r)];  /* row-vector broadcast */", id, id);
        break;
    case CF_BC_VEC_M:
        line(c, "const float %s = row < t.M ? %s(p.%s, row) : 0.0f;  /* column-vector broadcast */", id,
             load_fn(a->dtype), a->name);
        break;
    case CF_BC_TENSOR:
        if (c->tin[n->arg] >= 0)
            line(c, "const float %s = tv_%s[r %% 8];  /* [M,N] tensor, through the ring */", id, id);
        else
            line(c, "const float %s = (row < t.M && col < t.N) ? %s(p.%s, (long long)row * t.N + col) : 0.0f;"
                    "  /* [M,N] tensor */", id, load_fn(a->dtype), a->name);
        break;
    default:
        break;
    }
}

/* The a - b of exp(a - b) with a per-row (column, scalar) b, which emit_compute folds into
 * the exponent's FFMA (op_exp_sub: one FP32 instruction an element fewer for softmax's
 * exp(z - max)); NULL when n is no such exp. */
static const cf_ir_node *exp_sub_of(const cf_ir_node *n)
{
    const cf_ir_node *d = n->kind == CF_IR_COMPUTE && n->op == CF_OP_EXP ? n->args[0] : NULL;
    return d && d->kind == CF_IR_COMPUTE && d->op == CF_OP_SUB && d->args[1]->shape != d->shape ? d : NULL;
}

/* A value shifted by its tile's own statistic comes back corrected per row (emit_placeholder):
 * p + corr (mean) or p * corr (max).  Where a multiply or divide by a per-row (column, scalar)
 * value b reads it, emit_compute folds the correction into b: fmaf(p, b, corr * b) or
 * p * (corr * b), the products per row once.  Returns that placeholder (b in *by), else NULL.
 * FP32 instructions run on the pipe the tensor cores also need: each one in an epilogue
 * costs the other warpgroup's k-loop 1-1.5 cycles (docs/performance.md, "Epilogue
 * instructions"). */
static const char *slot_ref(cg_ctx *c, const cf_ir_node *n, char *buf, size_t len);

static const cf_ir_node *corrected_scaled(const cg_ctx *c, const cf_ir_node *n, const cf_ir_node **by)
{
    if (n->kind != CF_IR_COMPUTE || (n->op != CF_OP_MUL && n->op != CF_OP_DIV) || n->nargs != 2)
        return NULL;
    for (int i = 0; i < (n->op == CF_OP_DIV ? 1 : 2); i++) {
        const cf_ir_node *p = n->args[i], *b = n->args[1 - i];
        /* not where its own line writes the corrected value back (c->pass): p's storage would
         * then hold it corrected already */
        if (p->kind == CF_IR_PLACEHOLDER && !p->is_stat && c->shifted_by[p->ref->id] && !c->pass[p->id] &&
            p->shape == n->shape && b->shape != n->shape && b != p) {
            *by = b;
            return p;
        }
    }
    return NULL;
}

static int n_users(const cf_ir_spec *sp, const cf_ir_node *v, const cf_ir_node **user);
static bool carried_out(const cf_ir_spec *sp, const cf_ir_node *v);

static int cls_of(cf_shape s)
{
    return s == CF_SHAPE_VEC_M ? CLS_ROW : s == CF_SHAPE_SCALAR ? CLS_SCALAR : CLS_TILE;
}

/* The stage holding n. */
static const cf_ir_spec *spec_of(const cg_ctx *c, const cf_ir_node *n)
{
    const cf_ir_spec *sp = c->ir->epi[n->gemm];
    while (sp && sp->depth != n->stage)
        sp = sp->post;
    return sp;
}

/* s = k * v for a constant k > 0, where s's stage only takes its max and the next stage only
 * exp(s - max): v is carried instead of s, the max of v scaled by k after the loop (rounding
 * is monotonic, so that is the max of s exactly) and k goes into the exponent's FFMA
 * (op_exp_sub_scaled): one FMUL an element fewer for softmax's 0.125 z.  Returns v (k in *k),
 * else NULL. */
static const cf_ir_node *scale_into_exp(const cg_ctx *c, const cf_ir_node *s, double *k)
{
    if (s->kind != CF_IR_COMPUTE || s->op != CF_OP_MUL || s->nargs != 2 || cls_of(s->shape) != CLS_TILE)
        return NULL;
    const cf_ir_spec *sp = spec_of(c, s);
    const cf_ir_node *u = NULL;
    if (!sp || !sp->post || sp->terminal->kind != CF_IR_REDUCE || sp->terminal->op != CF_OP_RMAX ||
        n_users(sp, s, &u) != 1 || u != sp->terminal)
        return NULL;
    for (int i = 0; i < 2; i++) {
        const cf_ir_node *kn = s->args[i], *v = s->args[1 - i];
        if (kn->kind != CF_IR_BCAST || kn->src != CF_BC_CONST || !(kn->cval > 0 && kn->cval < 1e30) ||
            v->shape != s->shape)
            continue;
        /* the next stage reads s once, as the a of exp(a - max) */
        const cf_ir_spec *next = sp->post;
        int readers = 0;
        for (int j = 0; j < next->n_nodes; j++) {
            const cf_ir_node *p = next->nodes[j], *d = NULL, *e = NULL;
            if (p->kind != CF_IR_PLACEHOLDER || p->is_stat || p->ref != s)
                continue;
            readers++;
            if (carried_out(next, p) || n_users(next, p, &d) != 1 || d->nargs != 2 || d->args[0] != p ||
                !d->args[1]->is_stat ||
                d->args[1]->ref != sp->terminal || n_users(next, d, &e) != 1 || exp_sub_of(e) != d)
                return NULL;
        }
        for (const cf_ir_spec *later = next->post; later; later = later->post)
            for (int j = 0; j < later->n_nodes; j++)
                if (later->nodes[j]->kind == CF_IR_PLACEHOLDER && later->nodes[j]->ref == s)
                    return NULL;
        if (readers != 1)
            return NULL;
        if (k)
            *k = kn->cval;
        return v;
    }
    return NULL;
}

static void emit_compute(cg_ctx *c, const cf_ir_node *n)
{
    char id[96], a0[96], a1[96];
    const cf_ir_node *b = NULL, *par = corrected_scaled(c, n, &b);
    if (par) {
        char where[96], corr[96], ref[96], bb[96], be[128];
        const cf_ir_node *shift = c->shifted_by[par->ref->id];
        ident(b, bb, sizeof bb);
        snprintf(be, sizeof be, n->op == CF_OP_DIV ? "op_recip(%s)" : "%s", bb);
        slot_ref(c, par, where, sizeof where);
        ident(shift, corr, sizeof corr);
        ident(par->ref, ref, sizeof ref);
        if (shift->op == CF_OP_RMAX)
            line(c, "const float %s = %s * (corr_%s[cf_acc_slot(r)] * %s);  /* bypass %s, corrected to the row's "
                    "max, %s %s */", ident(n, id, sizeof id), where, corr, be, ref, n->op == CF_OP_DIV ? "/" : "*", bb);
        else
            line(c, "const float %s = fmaf(%s, %s, corr_%s[cf_acc_slot(r)] * %s);  /* bypass %s, corrected to the "
                    "row's mean, %s %s */", ident(n, id, sizeof id), where, be, corr, be, ref,
                 n->op == CF_OP_DIV ? "/" : "*", bb);
        return;
    }
    const char *tmpl = op_expr(n->op);
    /* A division multiplies by the reciprocal (within 2 ulp; op_recip): by a per-row (or
     * per-column, or scalar) value the unrolled loop computes it once per row, one FMUL an
     * element; by a tile, an IEEE divide's slow-path branch would keep ptxas from
     * interleaving the loop's elements. */
    if (n->op == CF_OP_DIV)
        tmpl = "(%1 * op_recip(%2))";
    const cf_ir_node *d = exp_sub_of(n);   /* emit_nodes leaves out d's line if nothing else reads it */
    double k = 0;
    if (d) {
        ident(d->args[0], a0, sizeof a0);
        ident(d->args[1], a1, sizeof a1);
        if (d->args[0]->kind == CF_IR_PLACEHOLDER && scale_into_exp(c, d->args[0]->ref, &k)) {
            char sid[96], lit[64];
            float_literal(k, lit, sizeof lit);
            line(c, "const float %s = op_exp_sub_scaled(%s, %s, %s);  /* exp(%s - %s), %s = %.9g * %s */",
                 ident(n, id, sizeof id), a0, a1, lit, ident(d->args[0]->ref, sid, sizeof sid), a1, sid, k, a0);
            return;
        }
        tmpl = "op_exp_sub(%1, %2)";
    } else {
        ident(n->args[0], a0, sizeof a0);
        if (n->nargs == 2)
            ident(n->args[1], a1, sizeof a1);
    }
    cf_strbuf e = {0};
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && (p[1] == '1' || p[1] == '2')) {
            cf_sb_puts(&e, p[1] == '1' ? a0 : a1);
            p++;
        } else {
            char ch[2] = {*p, 0};
            cf_sb_puts(&e, ch);
        }
    }
    line(c, "const float %s = %s;", ident(n, id, sizeof id), e.data ? e.data : "0");
    cf_sb_free(&e);
}

/* The reduction whose row statistic n is, through any bypasses of it: that value lives in
 * red_<reduction> from its exchange to the end of the epilogue (after a merged exchange it is
 * the row's, not the tile's, statistic), so it needs no array of its own.  NULL otherwise. */
static const cf_ir_node *stat_source(const cf_ir_node *n)
{
    while (n->kind == CF_IR_PLACEHOLDER && !n->is_stat)
        n = n->ref;
    return n->kind == CF_IR_PLACEHOLDER ? n->ref : NULL;
}

/* "T1[r]", "R0[cf_acc_slot(r)]", "red_m_3[cf_acc_slot(r)]" or "S_7": the storage of node n. */
static const char *slot_ref(cg_ctx *c, const cf_ir_node *n, char *buf, size_t len)
{
    int k = c->arr[n->id];
    if (c->in_mid && cls_of(n->shape) == CLS_TILE) {
        /* only bypasses read storage there: the parked group pk, or the value itself,
         * computed earlier in the same loop */
        const cf_ir_node *v = scale_into_exp(c, n->ref, NULL);   /* s = k * v: v is what is there */
        if (n == c->mid_parked)
            snprintf(buf, len, "pk[r %% 8]");
        else
            ident(v ? v : n->ref, buf, len);
        return buf;
    }
    if (c->in_late && cls_of(n->shape) == CLS_TILE) {
        /* the late stage reads the parked group pk and writes the restaged group y8 */
        snprintf(buf, len, "%s[r %% 8]", n->kind == CF_IR_PLACEHOLDER ? "pk" : "y8");
        return buf;
    }
    const cf_ir_node *red = cls_of(n->shape) == CLS_ROW ? stat_source(n) : NULL;
    char id[96];
    switch (cls_of(n->shape)) {
    case CLS_TILE: snprintf(buf, len, "T%d[r]", k); break;
    case CLS_ROW:
        if (red)
            snprintf(buf, len, "red_%s[cf_acc_slot(r)]", ident(red, id, sizeof id));
        else
            snprintf(buf, len, "R%d[cf_acc_slot(r)]", k);
        break;
    default: snprintf(buf, len, "S_%d", k); break;
    }
    return buf;
}

static const char *red_op(cf_op op)
{
    return op == CF_OP_RMAX ? "CF_RED_MAX" : op == CF_OP_RMIN ? "CF_RED_MIN" : "CF_RED_SUM";
}

static void emit_placeholder(cg_ctx *c, const cf_ir_node *n)
{
    char id[96], ref[96], where[96], by[96];
    const cf_ir_node *shift = n->is_stat ? NULL : c->shifted_by[n->ref->id];
    if (shift) {
        /* shifted by its tile's own statistic in the previous stage: correct it per row,
         * in place too when later stages carry it on */
        ident(n, id, sizeof id);
        line(c, "const float %s = %s %s corr_%s[cf_acc_slot(r)];  /* bypass: %s, corrected to the row's %s */", id,
             slot_ref(c, n, where, sizeof where), shift->op == CF_OP_RMAX ? "*" : "+", ident(shift, by, sizeof by),
             ident(n->ref, ref, sizeof ref), cf_op_name(shift->op));
        if (c->pass[n->id] && !c->in_mid)
            line(c, "%s = %s;", where, id);
    } else if (n->is_stat)
        line(c, "const float %s = red_%s[cf_acc_slot(r)];  /* statistic of the previous stage */",
             ident(n, id, sizeof id), ident(n->ref, ref, sizeof ref));
    else if (scale_into_exp(c, n->ref, NULL))
        line(c, "const float %s = %s;  /* bypass: %s without its constant factor, carried from stage %d */",
             ident(n, id, sizeof id), slot_ref(c, n, where, sizeof where), ident(n->ref, ref, sizeof ref),
             n->ref->stage);
    else
        line(c, "const float %s = %s;  /* bypass: %s, carried from stage %d */", ident(n, id, sizeof id),
             slot_ref(c, n, where, sizeof where), ident(n->ref, ref, sizeof ref), n->ref->stage);
}

static void emit_reduce(cg_ctx *c, const cf_ir_node *n)
{
    char id[96], a0[96];
    if (c->in_mid == 2 && n == c->mid->terminal)
        return; /* the mid part's second pass recomputes this stage; its reduction was the first's */
    ident(n, id, sizeof id);
    const cf_ir_node *v = scale_into_exp(c, n->args[0], NULL);   /* the max of v, scaled after the loop */
    line(c, "if (col < t.N)  /* columns past N hold TMA's zero fill, not data */");
    line(c, "    red_%s[cf_acc_slot(r)] = cf_red_combine<%s>(red_%s[cf_acc_slot(r)], %s);", id, red_op(n->op), id,
         ident(v ? v : n->args[0], a0, sizeof a0));
}

/* Stores happen after the loop, from the value's storage (see emit_stage). */
static void emit_store(cg_ctx *c, const cf_ir_node *n)
{
    (void)c;
    (void)n;
}

static void emit_unsupported(cg_ctx *c, const cf_ir_node *n)
{
    (void)c;
    (void)n;
    CF_ASSERT(!"codegen: node kind reached without a rule (checked before emission)");
}

static const emit_rule emit_rules[] = {
    [CF_IR_ACC] = emit_acc,
    [CF_IR_BCAST] = emit_bcast,
    [CF_IR_COMPUTE] = emit_compute,
    [CF_IR_REDUCE] = emit_reduce,
    [CF_IR_PLACEHOLDER] = emit_placeholder,
    [CF_IR_STORE] = emit_store,
    [CF_IR_MATMUL] = emit_unsupported,
};
_Static_assert(CF_ARRAY_LEN(emit_rules) == CF_IR_KIND_COUNT, "emit_rules out of sync with cf_ir_kind");

/* ---- the translation unit ------------------------------------------------------ */

void cf_cg_epi_layout(const cf_ir *ir, size_t *offsets, size_t *size, size_t *align)
{
    /* Mirrors the cf_epi_params emitted below: scalars are float, inputs and
     * per-row outputs are pointers, in A order; an empty struct gets one int. */
    size_t off = 0, al = 4;
    for (int i = 0; i < ir->n_args; i++) {
        cf_arg_kind k = ir->args[i].kind;
        bool row_out = k == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, ir->args[i].index).rank == 1;
        size_t sz = k == CF_ARG_SCALAR ? 4
                    : (k == CF_ARG_VEC_N || k == CF_ARG_VEC_M || k == CF_ARG_TENSOR || row_out) ? 8
                                                                                               : 0;
        if (offsets)
            offsets[i] = 0;
        if (!sz)
            continue;
        off = (off + sz - 1) / sz * sz;
        if (offsets)
            offsets[i] = off;
        off += sz;
        if (sz > al)
            al = sz;
    }
    if (off == 0)
        off = 4;
    *size = (off + al - 1) / al * al;
    *align = al;
}

/* Whether generated text calls the helper `name`. */
static bool calls(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = text; p && (p = strstr(p, name)) != NULL; p += len)
        if (p[len] == '(' && (p == text || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z'))))
            return true;
    return false;
}

/* ---- stages: storage planning and the fragment loop ------------------------- */

static bool carried_out(const cf_ir_spec *sp, const cf_ir_node *v)
{
    const cf_ir_spec *next = sp->post;
    for (int i = 0; next && i < next->n_nodes; i++)
        if (next->nodes[i]->kind == CF_IR_PLACEHOLDER && !next->nodes[i]->is_stat && next->nodes[i]->ref == v)
            return true;
    return false;
}

/* the value a store writes from its array: a GELU computed by the store takes its input */
static const cf_ir_node *store_src(const cg_ctx *c, const cf_ir_node *st)
{
    const cf_ir_node *v = st->args[0];
    return c->at_store && c->at_store[v->id] ? v->args[0] : v;
}

static bool stored(const cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *v)
{
    for (int i = 0; i < sp->n_nodes; i++)
        if (sp->nodes[i]->kind == CF_IR_STORE && store_src(c, sp->nodes[i]) == v)
            return true;
    return false;
}

/* Gives every value that must outlive its fragment loop (carried to the next
 * stage, or stored after the loop) an array.  In-values are read at the top
 * of iteration r and out-values written at its bottom, always at index r, so
 * an out-tile may take the array of any in-tile that is not carried on; a row
 * array is indexed by the row slot, which later iterations read again, so row
 * arrays are never shared within a stage. */
static void plan_storage(cg_ctx *c, const cf_ir_spec *sp)
{
    bool busy[2][CG_MAX_ARRAYS] = {{false}};
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (first_acc(c, n))
            c->arr[n->id] = 0;
        else if (n->kind == CF_IR_PLACEHOLDER && stat_source(n))
            continue; /* read from its reduction's red_ array wherever it is used */
        else if (n->kind == CF_IR_PLACEHOLDER && !n->is_stat)
            c->arr[n->id] = c->arr[n->ref->id];
        else
            continue;
        c->pass[n->id] = carried_out(sp, n);
        /* a row array is read at every r of its row, so no out-value may take an in-value's */
        if ((c->pass[n->id] || cls_of(n->shape) == CLS_ROW) && cls_of(n->shape) != CLS_SCALAR)
            busy[cls_of(n->shape)][c->arr[n->id]] = true;
    }
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (n->kind == CF_IR_STORE || n->kind == CF_IR_REDUCE || n->kind == CF_IR_MATMUL || c->pass[n->id] ||
            (n->kind == CF_IR_PLACEHOLDER && stat_source(n)) || !(carried_out(sp, n) || stored(c, sp, n)))
            continue;
        int cls = cls_of(n->shape);
        if (cls == CLS_SCALAR) {
            c->arr[n->id] = n->id;
            continue;
        }
        int k = 0;
        while (k < CG_MAX_ARRAYS && busy[cls][k])
            k++;
        if (k == CG_MAX_ARRAYS) {   /* never two live values in one array: cf_codegen declines */
            c->arrays_full = true;
            k = CG_MAX_ARRAYS - 1;
        }
        busy[cls][k] = true;
        c->arr[n->id] = k;
        if (k + 1 > c->n_arrays[cls])
            c->n_arrays[cls] = k + 1;
    }
    if (c->n_arrays[CLS_TILE] < 1)
        c->n_arrays[CLS_TILE] = 1;
}

/* ---- merged exchanges ------------------------------------------------------
 * Through L2 an exchange costs a round trip that the tile's epilogue waits for
 * (docs/performance.md, "Merged exchanges").  A reduction whose PostOp reduces its data shifted
 * by its statistic needs no exchange of its own:
 *   mean(x), then sum or mean of (x - mean)^2          (variance)
 *   max(z),  then sum of exp(z - max)                   (softmax)
 * Each CTA shifts by its own tile's statistic, and one exchange of pairs merges
 * both (cf_row_merge); the shifted value, if carried on, is corrected per row.
 * The rule needs every use of the statistic and of the shifted value to be
 * the pattern's own; anything else keeps two exchanges. */
static int n_users(const cf_ir_spec *sp, const cf_ir_node *v, const cf_ir_node **user)
{
    int n = 0;
    for (int i = 0; i < sp->n_nodes; i++)
        for (int j = 0; j < sp->nodes[i]->nargs; j++)
            if (sp->nodes[i]->args[j] == v) {
                n++;
                *user = sp->nodes[i];
                break; /* mul(d, d) is one user */
            }
    return n;
}

static bool is_square_of(const cf_ir_node *a, const cf_ir_node *d)
{
    return a->kind == CF_IR_COMPUTE && a->args[0] == d &&
           ((a->op == CF_OP_MUL && a->args[1] == d) || a->op == CF_OP_SQUARE ||
            (a->op == CF_OP_POW && a->args[1]->kind == CF_IR_BCAST && a->args[1]->src == CF_BC_CONST &&
             a->args[1]->cval == 2.0));
}

/* Whole-tile staging for both warpgroups beside the ring (a late finish parks there; a staged
 * gather lands the row's words there). */
static bool whole_tile_staging_fits(const cg_ctx *c)
{
    cf_plan_smem m = cf_plan_smem_of(c->ir, c->opt);
    return m.fits && m.stg_chunks == c->opt->bn / 64;
}

/* cf_reduce.cuh's cf_staged_gather: the row's 8-byte slots for a warp's 32 rows fit the warp's
 * staging boxes (bn/64 x bm/64 box slots of 2 KB a warp, with whole-tile staging). */
static bool staged_gather_fits(const cg_ctx *c)
{
    const cf_plan *o = c->opt;
    return whole_tile_staging_fits(c) && o->row_ctas * 32 * 8 <= (o->bn / 64) * (o->bm / 64) * 2048;
}

/* MERGE_* when sp's reduction can share its PostOp's exchange; *shifted is
 * the PostOp's value that the next stage must correct (may not be carried). */
static int merge_kind(const cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node **shifted)
{
    const cf_ir_spec *q = sp->post;
    const cf_ir_node *r1 = sp->terminal, *r2 = q ? q->terminal : NULL, *stat = NULL, *d = NULL, *u = NULL;
    /* Merged, each lane loads an 8-byte pair per CTA of the row, 16 at once (rows of up to
     * 16 CTAs with 128-row tiles).  A second round of register loads lost to two exchanges
     * (32 CTAs: LN+softmax 1.255 -> 1.34 of cuBLAS, spills).  Two rounds' worth are gathered in one
     * where a synchronous gather lands them in the warp's staging boxes (cf_gather_stage); that
     * pays with more than two reductions, whose tiles finish at once anyway (LN+softmax at 32
     * CTAs 1.236 -> 1.196), not with two, whose unmerged last exchange finishes late (LN
     * 1.134 -> 1.174).  docs/performance.md, "Merged exchanges". */
    const int rounds = (c->opt->row_ctas * c->opt->bm / 128 + 15) / 16;
    const bool staged = rounds == 2 && c->opt->bm == 128 && c->ir->n_stages[0] - 1 > 2 && staged_gather_fits(c);
    if (!c->opt->red_global || c->opt->row_ctas < 2 || rounds > (staged ? 2 : 1) || !r1 || r1->kind != CF_IR_REDUCE ||
        !r2 || r2->kind != CF_IR_REDUCE)
        return MERGE_NONE;
    for (int i = 0; i < q->n_nodes; i++)
        if (q->nodes[i]->kind == CF_IR_PLACEHOLDER && q->nodes[i]->is_stat && q->nodes[i]->ref == r1)
            stat = q->nodes[i];
    if (!stat || n_users(q, stat, &d) != 1 || d->kind != CF_IR_COMPUTE || d->op != CF_OP_SUB ||
        d->args[1] != stat || d->args[0] == stat)
        return MERGE_NONE;
    const cf_ir_node *a = r2->args[0];
    if (r1->op == CF_OP_MEAN && (r2->op == CF_OP_SUM || r2->op == CF_OP_MEAN) && is_square_of(a, d) &&
        n_users(q, d, &u) == 1 && n_users(q, a, &u) == 1 && !carried_out(q, a)) {
        *shifted = d;
        return MERGE_VAR;
    }
    if (r1->op == CF_OP_RMAX && r2->op == CF_OP_SUM && a->kind == CF_IR_COMPUTE && a->op == CF_OP_EXP &&
        a->args[0] == d && n_users(q, d, &u) == 1 && !carried_out(q, d) && n_users(q, a, &u) == 1) {
        *shifted = a;
        return MERGE_SOFTMAX;
    }
    return MERGE_NONE;
}

/* A mean is its sum over N. */
static void emit_mean_scale(cg_ctx *c, const cf_ir_node *red, const char *id, bool divide)
{
    if (red->op != CF_OP_MEAN)
        return;
    /* A multiply by the reciprocal where the fold is merged or late: the division's IEEE
     * slow-path check stalled on its branch there (ncu).  Behind an unmerged exchange the
     * division stays: without it ptxas spilled LN+softmax at 32 CTAs a row 2.7x more (172 ->
     * 460 bytes) and the kernel ran 2 % slower. */
    line(c, "#pragma unroll");
    line(c, "for (int s = 0; s < CF_ROWS; ++s)");
    if (divide)
        line(c, "    red_%s[s] = red_%s[s] / (float)t.N;", id, id);
    else
        line(c, "    red_%s[s] *= cf_rcp((float)t.N);", id);
}

/* ---- late finish -----------------------------------------------------------
 * A tile's last exchange need not hold up its warpgroup: it posts its row
 * partials, parks the one value the last stage needs in its staging buffer as
 * 16-bit, and runs its next mainloop; cf_epilogue_finish then folds the row's
 * partials (long arrived) and finishes the parked tile in place, 8 registers at
 * a time beside the new accumulator (cf_sm90.cuh).  It applies through L2 when
 * the last stage has one tile output (bf16 or f16), takes in one tile value and
 * the last reduction's statistic only, and that value survives 16 bits: the
 * variance merge parks x - tile mean (bf16, so |mean| >> std stays exact
 * enough), the softmax merge exp(z - tile max) in [0, 1] (f16), anything else
 * bf16 when it is only multiplied or divided (relative error 2^-9, as the
 * output's own rounding). */
static const cf_ir_spec *find_late(cg_ctx *c)
{
    const cf_ir *ir = c->ir;
    const cf_ir_spec *prev = NULL, *last = ir->epi[0];
    while (last->post) {
        prev = last;
        last = last->post;
    }
    /* a dual GEMM's tiles finish at once: the late finish's park holds one accumulator */
    if (!c->opt->red_global || c->opt->row_ctas < 2 || c->opt->sync_finish || !prev || !whole_tile_staging_fits(c) ||
        ir->dual)
        return NULL;
    /* Exchanges per tile (a merged pair is one).  Every exchange before the last still waits
     * for the row's slowest CTA, and the park costs a pipeline stage: LN+Softmax with four
     * exchanges ran 1-5 % slower late, with two 2-8 % faster (docs/performance.md, "Late finish"). */
    int exchanges = 0, merges = 0;
    for (const cf_ir_spec *sp = ir->epi[0]; sp->post; sp = sp->post) {
        exchanges += !(sp->depth > 0 && c->merge_of[sp->depth - 1]);
        merges += c->merge_of[sp->depth] != MERGE_NONE;
    }
    if (exchanges > 2 || (merges && c->opt->row_ctas * c->opt->bm / 128 > 16))
        return NULL; /* pairs of more than 16 CTAs are gathered staged, which is synchronous */
    const cf_ir_node *parked = NULL;
    int n_tile_out = 0;
    for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *n = sp->nodes[i];
            if (n->kind != CF_IR_STORE)
                continue;
            const cf_ir_arg *a = &ir->args[n->arg];
            bool tile = cf_graph_output_info(ir->graph, a->index).rank == 2;
            if (sp != last && !tile)
                continue; /* a per-row output of an earlier stage: stored before the park */
            if (sp != last || !tile || (a->dtype != CF_BF16 && a->dtype != CF_F16) ||
                n->args[0]->kind == CF_IR_PLACEHOLDER)
                return NULL;
            n_tile_out++;
        }
    if (n_tile_out != 1)
        return NULL;
    for (int i = 0; i < last->n_nodes; i++) {
        const cf_ir_node *n = last->nodes[i];
        if (n->kind != CF_IR_PLACEHOLDER)
            continue;
        if (n->is_stat ? n->ref != prev->terminal : (parked || cls_of(n->shape) != CLS_TILE))
            return NULL;
        if (!n->is_stat)
            parked = n;
    }
    if (!parked)
        return NULL;
    const cf_ir_node *shift = c->shifted_by[parked->ref->id];
    int merge = prev->depth > 0 ? c->merge_of[prev->depth - 1] : MERGE_NONE;
    if (merge && !shift)
        return NULL; /* the raw value of a merged stage: x - mean would cancel in 16 bits */
    if (!merge)
        for (int i = 0; i < last->n_nodes; i++)
            for (int j = 0; j < last->nodes[i]->nargs; j++)
                if (last->nodes[i]->args[j] == parked && last->nodes[i]->kind == CF_IR_COMPUTE &&
                    last->nodes[i]->op != CF_OP_MUL && last->nodes[i]->op != CF_OP_DIV)
                    return NULL;
    c->late_parked = parked;
    for (const cf_ir_spec *sp = ir->epi[0]; merge && sp; sp = sp->post)
        if (sp->post == prev)
            c->late_r1 = sp->terminal;
    return last;
}

/* 1: the parked value is f16 (softmax's exp(z - tile max)), 0: bf16. */
static int late_park_fmt(const cg_ctx *c)
{
    const cf_ir_node *shift = c->shifted_by[c->late_parked->ref->id];
    return shift && shift->op == CF_OP_RMAX;
}

static int late_out_f16(const cg_ctx *c)
{
    for (int i = 0; i < c->late->n_nodes; i++)
        if (c->late->nodes[i]->kind == CF_IR_STORE)
            return c->ir->args[c->late->nodes[i]->arg].dtype == CF_F16;
    return 0;
}

/* CF_TRACE: the cycles since the previous mark go to the next section of the epilogue's first
 * part (stage loops, reductions, the post and park, in emission order; the eighth takes the rest). */
static void trace_mark(cg_ctx *c, const char *what)
{
    line(c, "CF_TRC_STEP(t, trs, CF_TRC_SEC0 + %d);  /* trace section: %s */", c->trc_sec < 7 ? c->trc_sec : 7,
         what);
    c->trc_sec++;
}

/* ---- pieces every part's stage loops share ------------------------------- */

static bool preloaded(const cf_ir *ir, const cf_ir_spec *sp, const cf_ir_node *n);

/* red's thread-local partials, at the identity: a local array, or the cf_late field the
 * late finish reads them from. */
static void emit_red_init(cg_ctx *c, const cf_ir_node *red, bool in_late_struct)
{
    char id[96];
    ident(red, id, sizeof id);
    if (in_late_struct)
        line(c, "float (&red_%s)[CF_ROWS] = late.red_%s;  /* %s over N: partials, then this tile's own */", id, id,
             cf_op_name(red->op));
    else
        line(c, "float red_%s[CF_ROWS];  /* %s over N: thread-local partials per row */", id, cf_op_name(red->op));
    line(c, "#pragma unroll");
    line(c, "for (int s = 0; s < CF_ROWS; ++s)");
    line(c, "    red_%s[s] = cf_red_identity<%s>();", id, red_op(red->op));
}

/* Loads the columns of [N] vector n this thread holds into dst_prefix+id (16-bit ones
 * converted to f32 as they load). */
static void emit_load_cols(cg_ctx *c, const cf_ir_node *n, const char *dst_prefix, const char *id)
{
    const cf_ir_arg *a = &c->ir->args[n->arg];
    if (a->dtype == CF_F32)
        line(c, "cf_load_cols(t, p.%s, %s%s);", a->name, dst_prefix, id);
    else
        line(c, "cf_load_cols16<%s>(t, p.%s, %s%s);  /* %s, converted to f32 */", a->dtype == CF_F16 ? "true" : "false",
             a->name, dst_prefix, id, cf_dtype_name(a->dtype));
}

/* Row vectors of stage sp: every column this thread touches, loaded at once before the
 * loop (independent loads; one latency instead of one per register), or taken from cf_pre. */
static void emit_col_loads(cg_ctx *c, const cf_ir_spec *sp)
{
    char id[96];
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (preloaded(c->ir, sp, n)) {
            ident(n, id, sizeof id);
            line(c, "const float (&cv_%s)[CF_COLS] = pre.cv_%s;  /* loaded before the mainloop */", id, id);
        } else if (n->kind == CF_IR_BCAST && n->src == CF_BC_VEC_N) {
            ident(n, id, sizeof id);
            line(c, "float cv_%s[CF_COLS];", id);
            emit_load_cols(c, n, "cv_", id);
        }
    }
}

/* Opens the unrolled loop over the accumulator registers; a parked tile (park_fmt: PARK_*)
 * comes back into pk one 8-register group at a time. */
static void emit_loop_open(cg_ctx *c, int park_fmt)
{
    /* Two groups ahead hide ldmatrix's wait under the other warpgroup's wgmma: LN 2-3 %,
     * LN+softmax 6-7 % faster at K <= 1024; three ahead lost, four spilled.  The finisher's own
     * late finish loads at use: ahead, softmax ran 3 % slower. */
    const int ahead = c->opt->finisher && !c->mid && c->in_late ? 0 : 2;
    if (park_fmt != PARK_NONE)   /* in cf_epilogue_finish: parked, or kept in registers */
        line(c, "cf_unpark_stream<%s, %d%s> unpark%d(t);  /* the parked groups, loaded that many ahead of use%s */",
             park_fmt == PARK_F16 ? "CF_PARK_F16" : "CF_PARK_BF16", ahead, c->in_late ? ", KEPT" : "",
             ++c->n_unpark - 1, c->in_late ? " (KEPT: the registers)" : "");
    line(c, "#pragma unroll");
    line(c, "for (int r = 0; r < CF_ACC_REGS; ++r) {");
    c->indent++;
    line(c, "const int row = t.m0 + cf_acc_row(t, r), col = t.n0 + cf_acc_col(t, r);");
    line(c, "(void)row;");
    line(c, "(void)col;");
    if (park_fmt != PARK_NONE) {
        line(c, "if (r %% 8 == 0)");
        line(c, "    unpark%d.next(t, r / 8, pk%s);", c->n_unpark - 1, c->in_late ? ", kept" : "");
    }
}

/* a - b whose only reader is the exp that folded it (exp_sub_of): its own line would be dead */
static bool folded_into_exp(const cf_ir_spec *sp, const cf_ir_node *n)
{
    const cf_ir_node *u = NULL;
    return n != sp->terminal && n_users(sp, n, &u) == 1 && exp_sub_of(u) == n && !carried_out(sp, n);
}

/* a corrected bypass whose only reader folds the correction (corrected_scaled) */
static bool folded_into_scale(const cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *n)
{
    const cf_ir_node *u = NULL, *b = NULL;
    return n->kind == CF_IR_PLACEHOLDER && n != sp->terminal && n_users(sp, n, &u) == 1 &&
           corrected_scaled(c, u, &b) == n && !carried_out(sp, n);
}

static bool emitted(cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *n)
{
    const cf_ir_node *u = NULL;
    if (n->kind == CF_IR_BCAST && n_users(sp, n, &u) == 1 && scale_into_exp(c, u, NULL))
        return false; /* the constant of a scale folded into the exponent */
    return !c->at_store[n->id] && !folded_into_exp(sp, n) && !folded_into_scale(c, sp, n) &&
           !scale_into_exp(c, n, NULL);
}

/* Whether a line of the loop reads v's identifier (an exp that folded a - b reads a and b). */
static bool read_in_loop(cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *v)
{
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *u = sp->nodes[i];
        const cf_ir_node *unscaled = scale_into_exp(c, u, NULL);   /* its max and carry read v */
        if (unscaled == v)
            return true;
        if (u->kind == CF_IR_STORE || !emitted(c, sp, u))
            continue;
        const cf_ir_node *d = exp_sub_of(u), *reads = d ? d : u;   /* op_exp_sub(a, b) reads a and b */
        for (int j = 0; j < reads->nargs; j++)
            if (reads->args[j] == v)
                return true;
    }
    return false;
}

static void emit_nodes(cg_ctx *c, const cf_ir_spec *sp)
{
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        /* an accumulator entry or carried value nothing here reads (a store or a GELU computed by
         * the store takes it from its array): no line for it, unless it is a value shifted by its
         * tile's statistic that this stage corrects in place for a later one */
        const bool corrects = n->kind == CF_IR_PLACEHOLDER && !n->is_stat && c->shifted_by[n->ref->id] &&
                              c->pass[n->id] && !c->in_mid;
        if ((first_acc(c, n) || n->kind == CF_IR_PLACEHOLDER ||
             (n->kind == CF_IR_ACC && c->arr[n->id] < 0)) && !read_in_loop(c, sp, n) && !corrects)
            continue;
        if (emitted(c, sp, n))
            emit_rules[n->kind](c, n);
    }
}

/* The tile's own statistic of red, which starts merged exchange `merge` (MERGE_*): quad
 * shuffles into raw_<red> (in cf_late when the late finish needs it). */
static void emit_tile_stat(cg_ctx *c, const cf_ir_node *red, int merge, bool in_late_struct)
{
    char id[96];
    ident(red, id, sizeof id);
    if (in_late_struct)
        line(c, "float (&raw_%s)[CF_ROWS] = late.raw_%s;  /* this tile's own %s, for the merged exchange */", id, id,
             merge == MERGE_VAR ? "sum" : "max");
    else
        line(c, "float raw_%s[CF_ROWS];  /* this tile's own %s, for the merged exchange after the next stage */",
             id, merge == MERGE_VAR ? "sum" : "max");
    line(c, "%s(%sred_%s, raw_%s);  /* quad shuffles; the next stage shifts by this tile's %s */",
         merge == MERGE_VAR ? "cf_local_mean" : "cf_local_max", merge == MERGE_VAR ? "t, " : "", id, id,
         merge == MERGE_VAR ? "mean" : "max");
    c->merge_r1 = red;
    c->merge_index = c->n_red++;
}

/* Posts red's row partials: a merged pair when merge_prev, else one word per row. */
static void emit_post(cg_ctx *c, const cf_ir_node *red)
{
    char id[96], id1[96];
    ident(red, id, sizeof id);
    if (c->merge_prev) {
        ident(c->merge_r1, id1, sizeof id1);
        line(c, "cf_row_merge_post<%s, %d, %d>(args, t, raw_%s, red_%s);  /* post (%s, partial) pairs for the row */",
             c->merge_prev == MERGE_VAR ? "CF_MERGE_VAR" : "CF_MERGE_SOFTMAX", c->merge_index, c->n_red, id1, id,
             c->merge_prev == MERGE_VAR ? "sum" : "max");
    } else {
        line(c, "cf_row_post<%s, %d>(args, t, red_%s);  /* quad shuffles, then post the partials for the row */",
             red_op(red->op), c->n_red, id);
    }
}

/* Folds the row's pairs of the merged exchange that ends with red; `own` prefixes the tile's
 * own statistics ("late." for cf_late's, "" for locals). */
static void emit_merge_finish(cg_ctx *c, const cf_ir_node *red, const char *own)
{
    char id[96], id1[96];
    ident(red, id, sizeof id);
    ident(c->merge_r1, id1, sizeof id1);
    line(c, "cf_row_merge_finish<%s, %d, %d>(args, t, %sraw_%s, %sred_%s, red_%s, corr_%s);  /* %s */",
         c->merge_prev == MERGE_VAR ? "CF_MERGE_VAR" : "CF_MERGE_SOFTMAX", c->merge_index, c->n_red++, own, id1, own,
         id1, id, id1, c->merge_prev == MERGE_VAR ? "mean and sum of squares" : "max and sum of exps");
}

/* Opens cf_epilogue_finish with the fold of red's row partials (posted by part 1, or by the
 * finisher's mid part). */
static void emit_finish_open(cg_ctx *c, const cf_ir_node *red)
{
    char id[96], id1[96];
    const int merge = c->merge_prev;
    ident(red, id, sizeof id);
    line(c, "/* Part %d, after this warpgroup's next mainloop: the row's partials have arrived.  KEPT: a "
            "warpgroup's last tile,", c->mid ? 3 : 2);
    line(c, " * not parked: finished right after its part 1, from the accumulator registers. */");
    line(c, "template <bool KEPT>");
    line(c, "__device__ __forceinline__ void cf_epilogue_finish(const cf_gemm_args &args, const cf_tile &t, "
            "cf_late &late, const float *kept)");
    line(c, "{");
    c->indent++;
    line(c, "const cf_epi_params &p = args.epi;");
    line(c, "(void)p;");
    line(c, "(void)late;");
    line(c, "(void)kept;");
    line(c, "float red_%s[CF_ROWS];", id);
    if (merge) {
        ident(c->merge_r1, id1, sizeof id1);
        line(c, "float corr_%s[CF_ROWS];", id1);
        emit_merge_finish(c, red, "late.");
    } else {
        line(c, "cf_row_finish<%s, %d>(args, t, red_%s);  /* the row's %s */", red_op(red->op), c->n_red++, id,
             cf_op_name(red->op));
    }
    emit_mean_scale(c, red, id, false);
}

/* A consumer that finishes its own unpaired tiles late posts a tile's partials before it
 * finishes the previous tile (the schedule's post_first; the finish is passed as finish_prev). */
static bool post_first(const cg_ctx *c)
{
    return c->late && !c->opt->pair_tiles && !c->opt->finisher;
}

/* Whether a parked tile's late gather loads its words as soon as the next mainloop ends,
 * before that tile's first part (cf_gather_early), returning the slot block of the late
 * exchange in *block.  One round of loads (at most 16 CTAs a row, 128-row tiles), one late
 * exchange, and a first part that loads no vectors: the words wait in registers beside the
 * accumulator through it (LN's bias made ptxas spill 80-328 bytes and run 3-15 % slower;
 * RMSNorm 2 % faster at 4096x2048x512, unpaired softmax 13 %: docs/performance.md,
 * "Gather early"). */
static bool gathers_early(const cg_ctx *c, int *block)
{
    const cf_plan *o = c->opt;
    const int reductions = c->ir->n_stages[0] - 1;
    if (!post_first(c) || !o->red_global || o->row_ctas < 2 || o->row_ctas > 16 || o->bm != 128 ||
        reductions > 2 || c->mid)
        return false;
    for (const cf_ir_spec *sp = c->ir->epi[0]; sp && sp != c->late; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++)
            if (sp->nodes[i]->kind == CF_IR_BCAST &&
                (sp->nodes[i]->shape == CF_SHAPE_VEC_N || sp->nodes[i]->shape == CF_SHAPE_VEC_M))
                return false;
    /* a merged exchange posts in its first reduction's block */
    *block = c->late->depth - (c->late_r1 ? 2 : 1);
    return true;
}

/* The previous tile's finish (cf_epilogue's finish_prev), emitted once per first part. */
static void emit_finish_prev(cg_ctx *c)
{
    line(c, "finish_prev();  /* the previous tile's finish, while these partials travel */");
    trace_mark(c, "previous finish");
    c->prev_finished = true;
}

/* Posts red's row partials (a merged pair when merge_prev), then parks `parked` (the storage
 * of the value the next part reads) and closes the current part. */
static void emit_post_park(cg_ctx *c, const cf_ir_node *red, const cf_ir_node *parked, bool f16, const char *until)
{
    char pid[96];
    emit_post(c, red);
    trace_mark(c, "post");
    if (parked == c->late_parked && post_first(c) && !c->prev_finished)
        emit_finish_prev(c);
    ident(parked->ref, pid, sizeof pid);
    line(c, "cf_park_tile<%s>(t, T%d);  /* %s waits in shared memory %s */", f16 ? "CF_PARK_F16" : "CF_PARK_BF16",
         c->arr[parked->id], pid, until);
    trace_mark(c, "park");
    c->indent--;
    line(c, "}");
    blank(c);
}

/* Ends cf_epilogue after posting red's partials and parking the late stage's
 * value, and starts cf_epilogue_finish with the fold of the row's partials. */
static void emit_late_split(cg_ctx *c, const cf_ir_node *red)
{
    emit_post_park(c, red, c->late_parked, late_park_fmt(c), "while the next mainloop runs");
    emit_finish_open(c, red);
}

/* ---- the mid part (cf_sched::mid) --------------------------------------------------
 * With two merged exchanges (LayerNorm then Softmax) the first one's wait is the
 * consumer's: its late finish takes only the second.  A finisher warpgroup can
 * take the stages between them instead: the consumer posts the first exchange's
 * pairs and parks its shifted value (x - tile mean, bf16) and runs its next
 * mainloop; meanwhile the finisher folds the row's pairs (long arrived), runs the
 * next stage over the parked tile for the tile's own statistic, runs it again
 * with the stage after it (not kept: 64 registers more than the finisher has),
 * restages that stage's value in place (exp(z - tile max), f16) and posts the
 * second exchange's pairs; then the consumer finishes the tile late, as usual.
 * Stages: s0 (merged with s1), s1, mid = s2 (merged with s3), s3, late = s4. */
static const cf_ir_spec *find_mid(cg_ctx *c)
{
    const cf_ir *ir = c->ir;
    if (!c->opt->finisher || !c->late || ir->n_stages[0] != 5 || !c->merge_of[0] || !c->merge_of[2])
        return NULL;
    const cf_ir_spec *s0 = ir->epi[0], *s1 = s0->post, *s2 = s1->post, *s3 = s2->post;
    if (s3->post != c->late || c->late_parked->ref->stage < s2->depth)
        return NULL;
    const cf_ir_node *parked = NULL;
    for (const cf_ir_spec *sp = s0; sp != c->late; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *n = sp->nodes[i];
            if (n->kind == CF_IR_STORE)
                return NULL; /* every store is the late stage's */
            if (sp->depth < 2)
                continue;
            if (cls_of(n->shape) == CLS_SCALAR && c->arr[n->id] == n->id && n->kind != CF_IR_PLACEHOLDER)
                return NULL; /* no scalar storage in the finisher's loops */
            if (n->kind != CF_IR_PLACEHOLDER)
                continue;
            if (n->is_stat) {
                if (n->ref != (sp == s2 ? s1 : s2)->terminal)
                    return NULL;
            } else if (cls_of(n->shape) != CLS_TILE) {
                return NULL;
            } else if (sp == s2) {
                /* the first exchange's shifted value, the only one s2 takes */
                if (parked || c->shifted_by[n->ref->id] != s0->terminal)
                    return NULL;
                parked = n;
            } else if (n->ref->stage != s2->depth) {
                return NULL;
            }
        }
    if (!parked)
        return NULL;
    c->mid_parked = parked;
    return s2;
}

/* After the loop of a max whose operand's constant factor went into the exponent
 * (scale_into_exp): the thread's partial maxima of v, scaled to those of s. */
static void emit_max_scale(cg_ctx *c, const cf_ir_node *red)
{
    double k = 0;
    const cf_ir_node *v = scale_into_exp(c, red->args[0], &k);
    if (!v)
        return;
    char id[96], sid[96], vid[96], lit[64];
    ident(red, id, sizeof id);
    ident(v, vid, sizeof vid);
    float_literal(k, lit, sizeof lit);
    line(c, "#pragma unroll");
    line(c, "for (int s = 0; s < CF_ROWS; ++s)");
    line(c, "    red_%s[s] *= %s;  /* the max of %s = %.9g * %s: %s's max, scaled */", id, lit,
         ident(red->args[0], sid, sizeof sid), k, vid, vid);
}

/* Ends cf_epilogue after s1 (red): posts the first exchange's pairs, parks s2's value for the
 * finisher, and opens cf_epilogue_mid with the fold of the row's pairs. */
static void emit_mid_split(cg_ctx *c, const cf_ir_node *red)
{
    char id[96], id1[96];
    emit_post_park(c, red, c->mid_parked, false, "for the finisher warpgroup");
    ident(red, id, sizeof id);
    ident(c->merge_r1, id1, sizeof id1);
    line(c, "/* Part 2, by the finisher warpgroup while the consumer runs its next mainloop: the row's");
    line(c, " * pairs (arrived by now), then the next two stages over the parked tile, to the next post. */");
    line(c, "__device__ __forceinline__ void cf_epilogue_mid(const cf_gemm_args &args, const cf_tile &t)");
    line(c, "{");
    c->indent++;
    line(c, "const cf_epi_params &p = args.epi;");
    line(c, "(void)p;");
    line(c, "CF_TRC_START(trs);  /* CF_TRACE: the finisher's sections */");
    c->trc_sec = 0;
    line(c, "float raw_%s[CF_ROWS], red_%s[CF_ROWS], red_%s[CF_ROWS], corr_%s[CF_ROWS];  /* the tile's own %s: "
            "rebuilt from its posted pair */", id1, id1, id, id1, c->merge_prev == MERGE_VAR ? "mean" : "max");
    emit_merge_finish(c, red, "");
    emit_mean_scale(c, red, id, false);
    trace_mark(c, "the row's pairs");
}

/* The mid part's stages s2 and s3, then the second exchange's post; opens cf_epilogue_finish. */
static void emit_mid(cg_ctx *c, const cf_ir_spec *s2)
{
    const cf_ir_spec *s3 = s2->post;
    char pid[96], vid[96];
    ident(c->mid_parked->ref, pid, sizeof pid);
    /* pass 1: s2 for the tile's own statistic */
    line(c, "/* ---- stage %d (PostOp of the reduction above): %d nodes; pass 1 over the parked %s: this "
            "tile's %s ---- */", s2->depth, s2->n_nodes, pid, cf_op_name(s2->terminal->op));
    emit_red_init(c, s2->terminal, false);
    emit_col_loads(c, s2);
    line(c, "float pk[8];  /* one 8-register group of the parked %s */", pid);
    emit_loop_open(c, PARK_BF16);
    c->in_mid = 1;
    emit_nodes(c, s2);
    c->indent--;
    line(c, "}");
    emit_max_scale(c, s2->terminal);
    trace_mark(c, "pass 1");
    emit_tile_stat(c, s2->terminal, c->merge_of[s2->depth], false);
    trace_mark(c, "the tile's statistic");
    /* pass 2: s2 again, then s3; the late stage's value restaged in place */
    line(c, "/* ---- stages %d and %d (PostOp of the reduction above): pass 2, stage %d recomputed from the "
            "parked tile ---- */", s2->depth, s3->depth, s2->depth);
    emit_red_init(c, s3->terminal, false);
    emit_col_loads(c, s3);
    line(c, "float y8[8];  /* %s, restaged in place of the parked group */",
         ident(c->late_parked->ref, vid, sizeof vid));
    emit_loop_open(c, PARK_BF16);
    c->in_mid = 2;
    emit_nodes(c, s2);
    emit_nodes(c, s3);
    c->in_mid = 0;
    line(c, "y8[r %% 8] = %s;", vid);
    line(c, "if (r %% 8 == 7)");
    line(c, "    cf_restage8<%s>(t, r / 8, y8);", late_park_fmt(c) ? "CF_PARK_F16" : "CF_PARK_BF16");
    c->indent--;
    line(c, "}");
    trace_mark(c, "pass 2");
    c->merge_prev = c->merge_of[s2->depth];
    emit_post(c, s3->terminal);
    trace_mark(c, "post");
    c->indent--;
    line(c, "}");
    blank(c);
    emit_finish_open(c, s3->terminal);
}

/* cf_epilogue_preload, before each tile's mainloop: the row vectors ([N], any dtype) of an
 * elementwise epilogue into registers (cf_pre), so their latency hides under
 * the mainloop; the other [N] and [M] vector inputs, the slices the tile reads,
 * into L1.  Loaded only when the epilogue begins, a vector costs a global-memory
 * latency there (~1.3k cycles of a bias+GELU epilogue; an L1 prefetch won back
 * only 0.3k of them).  Epilogues with reductions keep their
 * registers for the exchange: 32 more through the mainloop made LN spill. */
static bool preloaded(const cf_ir *ir, const cf_ir_spec *sp, const cf_ir_node *n)
{
    return ir->n_stages[0] == 1 && sp->depth == 0 && n->kind == CF_IR_BCAST && n->src == CF_BC_VEC_N;
}

static void emit_pre_struct(cg_ctx *c)
{
    const cf_ir *ir = c->ir;
    const cf_ir_spec *sp = ir->epi[0];
    char id[96];
    int n = 0;
    line(c, "/* Vectors stage 0 reads, loaded into registers before the tile's mainloop. */");
    line(c, "struct cf_pre {");
    c->indent++;
    for (int i = 0; sp && i < sp->n_nodes; i++)
        if (preloaded(ir, sp, sp->nodes[i])) {
            const cf_ir_arg *a = &ir->args[sp->nodes[i]->arg];
            line(c, "float cv_%s[cf_sched::bn / 4];  /* %s: %s [N], the columns this thread holds */",
                 ident(sp->nodes[i], id, sizeof id), a->name, cf_dtype_name(a->dtype));
            n++;
        }
    if (n == 0)
        line(c, "int unused;  /* nothing to preload */");
    c->indent--;
    line(c, "};");
    blank(c);
}

static void emit_preload(cg_ctx *c)
{
    const cf_ir *ir = c->ir;
    char id[96];
    line(c, "/* Before each tile's mainloop: stage 0's vectors into registers, the later stages' into L1. */");
    line(c, "__device__ __forceinline__ void cf_epilogue_preload(const cf_gemm_args &args, const cf_tile &t, "
            "cf_pre &pre)");
    line(c, "{");
    c->indent++;
    line(c, "const cf_epi_params &p = args.epi;");
    line(c, "(void)p;");
    line(c, "(void)t;");
    line(c, "(void)pre;");
    bool *seen = calloc((size_t)ir->n_args + 1, 1);
    for (int i = 0; ir->epi[0] && i < ir->epi[0]->n_nodes; i++) {
        const cf_ir_node *n = ir->epi[0]->nodes[i];
        if (preloaded(ir, ir->epi[0], n)) {
            emit_load_cols(c, n, "pre.cv_", ident(n, id, sizeof id));
            if (seen)
                seen[n->arg] = true;
        }
    }
    for (const cf_ir_spec *sp = ir->epi[0]; sp && seen; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *n = sp->nodes[i];
            if (n->kind != CF_IR_BCAST || (n->src != CF_BC_VEC_N && n->src != CF_BC_VEC_M) || seen[n->arg])
                continue;
            seen[n->arg] = true;
            const cf_ir_arg *a = &ir->args[n->arg];
            line(c, "cf_prefetch_%s(t, p.%s, %d);  /* %s: %s [%s] */", n->src == CF_BC_VEC_N ? "cols" : "rows",
                 a->name, (int)cf_dtype_size(a->dtype), a->name, cf_dtype_name(a->dtype),
                 n->src == CF_BC_VEC_N ? "N" : "M");
        }
    free(seen);
    c->indent--;
    line(c, "}");
    blank(c);
}

/* A GELU (tanh or erf form) whose only use is a 16-bit tile store is computed by that
 * store on packed pairs in the output's type (cf_store_tile_bf16_gelu, _gelu_erf): half
 * the FP32-pipe instructions or fewer, which is what a GELU epilogue costs (docs/performance.md,
 * "GELU at the store").  Single-stage epilogues only: a late finish stores a parked tile. */
static bool gelu_at_store(const cf_ir *ir, const cf_ir_spec *sp, const cf_ir_node *st)
{
    const cf_ir_node *y = st->args[0], *user = NULL;
    const cf_ir_arg *a = &ir->args[st->arg];
    if (ir->n_stages[0] != 1 || cf_graph_output_info(ir->graph, a->index).rank != 2 ||
        (a->dtype != CF_BF16 && a->dtype != CF_F16) || y->kind != CF_IR_COMPUTE ||
        (y->op != CF_OP_GELU && y->op != CF_OP_GELU_ERF) ||
        y->shape != CF_SHAPE_TILE || y->args[0]->shape != CF_SHAPE_TILE)
        return false;
    return n_users(sp, y, &user) == 1;
}

static void plan_free(cg_ctx *e)
{
    free(e->at_store);
    e->at_store = NULL;
    free(e->tin);
    e->tin = NULL;
    free(e->arr);
    free(e->pass);
    free(e->shifted_by);
    free(e->merge_of);
    e->arr = NULL;
    e->pass = NULL;
    e->shifted_by = NULL;
    e->merge_of = NULL;
}

/* The tensor node of a 16-bit [M,N] input in stage sp, if it reads one, else NULL. */
static const cf_ir_node *tile_input_read(const cf_ir *ir, const cf_ir_spec *sp, int arg)
{
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (n->kind == CF_IR_BCAST && n->src == CF_BC_TENSOR && n->arg == arg && ir->args[arg].dtype != CF_F32)
            return n;
    }
    return NULL;
}

/* Which 16-bit [M,N] inputs go through the operand ring (cf_tin_* in cf_sm90.cuh): those read
 * only by the consumer's first part (not by a late finish or the finisher's mid part, which run
 * after the warpgroup's next mainloop), in argument order while the ring keeps two stages for
 * the mainloop.  The others are loaded element by element.  false when out of memory. */
static bool plan_tile_inputs(cg_ctx *e)
{
    const cf_ir *ir = e->ir;
    const cf_plan *o = e->opt;
    e->tin = malloc((size_t)(ir->n_args ? ir->n_args : 1) * sizeof *e->tin);
    if (!e->tin) {
        plan_free(e);
        return false;
    }
    /* a stage's 64-column chunks of tile_m rows (tin_per_stage): X's, and each weight's */
    const int tile_m = o->cooperative ? 2 * o->bm : o->bm,
              per_stage = (tile_m + (ir->dual ? 2 : 1) * o->bn) / tile_m;
    int room = (o->stages - 2) * per_stage;   /* 64-column chunks: tin_stages + 2 <= stages */
    e->n_tin = 0;
    e->tin_first = INT_MAX;
    e->tin_last = -1;
    for (int a = 0; a < ir->n_args; a++) {
        e->tin[a] = -1;
        if (ir->args[a].kind != CF_ARG_TENSOR || a >= 31 || room < o->bn / 64)
            continue;
        int first = INT_MAX, last = -1;
        bool late_read = false;
        for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post) {
            if (!tile_input_read(ir, sp, a))
                continue;
            late_read |= sp == e->late || (e->mid && (sp == e->mid || sp == e->mid->post));
            first = sp->depth < first ? sp->depth : first;
            last = sp->depth;
        }
        if (last < 0 || late_read || (!e->deciding_tin && !(o->tin_args >> a & 1u)))
            continue;
        e->tin[a] = e->n_tin++;
        room -= o->bn / 64;
        e->tin_first = first < e->tin_first ? first : e->tin_first;
        e->tin_last = last > e->tin_last ? last : e->tin_last;
    }
    const int tin_stages = (e->n_tin * (o->bn / 64) + per_stage - 1) / per_stage;
    if (e->deciding_tin && e->n_tin && !cf_plan_ring_inputs_pay(ir, o, e->tin_last, tin_stages)) {
        for (int a = 0; a < ir->n_args; a++)
            e->tin[a] = -1;   /* a long first part: the element loads, not a stalled mainloop */
        e->n_tin = 0;
    }
    return true;
}

static bool plan_epilogue(cg_ctx *e);
static void plan_free(cg_ctx *e);

unsigned cf_cg_tile_inputs(const cf_ir *ir, const cf_plan *p)
{
    cg_ctx e = {.ir = ir, .opt = p, .deciding_tin = true};
    unsigned mask = 0;
    if (cf_cg_check(ir, &(cf_error){0}) != CF_OK || !plan_epilogue(&e))
        return 0;
    for (int a = 0; a < ir->n_args && a < 32; a++)
        mask |= e.tin[a] >= 0 ? 1u << a : 0;
    plan_free(&e);
    return mask;
}

/* Plans the epilogue before any of it is emitted: every value's storage, which
 * stages merge their exchanges, and whether the last stage finishes late.
 * false when out of memory (nothing left allocated). */
static bool plan_epilogue(cg_ctx *e)
{
    const cf_ir *ir = e->ir;
    int n_ids = ir->n_nodes;
    e->arr = calloc((size_t)n_ids, sizeof *e->arr);
    e->pass = calloc((size_t)n_ids, sizeof *e->pass);
    e->shifted_by = calloc((size_t)n_ids, sizeof *e->shifted_by);
    e->merge_of = calloc((size_t)ir->n_stages[0] + 1, sizeof *e->merge_of);
    e->at_store = calloc((size_t)n_ids, sizeof *e->at_store);
    if (!e->arr || !e->pass || !e->shifted_by || !e->merge_of || !e->at_store) {
        plan_free(e);
        return false;
    }
    for (int i = 0; i < n_ids; i++)
        e->arr[i] = -1;
    for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++)
            if (sp->nodes[i]->kind == CF_IR_STORE && gelu_at_store(ir, sp, sp->nodes[i]))
                e->at_store[sp->nodes[i]->args[0]->id] = true;
    /* Plan every stage's storage first so the arrays can be declared up front. */
    for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post)
        plan_storage(e, sp);
    /* a reduction merged into its PostOp's exchange cannot also start one */
    for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post) {
        const cf_ir_node *shifted = NULL;
        int prev = sp->depth > 0 ? e->merge_of[sp->depth - 1] : MERGE_NONE;
        e->merge_of[sp->depth] = prev ? MERGE_NONE : merge_kind(e, sp, &shifted);
        if (e->merge_of[sp->depth])
            e->shifted_by[shifted->id] = sp->terminal;
    }
    e->late = find_late(e);
    e->mid = find_mid(e);
    return plan_tile_inputs(e);
}

int cf_cg_gelu_stores(const cf_ir *ir)
{
    int n = 0;
    for (const cf_ir_spec *sp = ir->n_gemms == 1 ? ir->epi[0] : NULL; sp; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++)
            n += sp->nodes[i]->kind == CF_IR_STORE && gelu_at_store(ir, sp, sp->nodes[i]);
    return n;
}

/* A finisher warpgroup takes the late finishes when asked for and when there are any; its
 * consumers get 192 registers, which epilogues with more than two reductions outgrow. */
bool cf_cg_has_finisher(const cf_ir *ir, const cf_plan *opt)
{
    if (!opt->finisher || cf_cg_check(ir, &(cf_error){0}) != CF_OK)
        return false;
    cg_ctx e = {.ir = ir, .opt = opt};
    bool fin = plan_epilogue(&e) && e.late && (ir->n_stages[0] - 1 <= 2 || e.mid);
    plan_free(&e);
    return fin;
}

bool cf_cg_can_pair(const cf_ir *ir, const cf_plan *opt)
{
    cf_plan o = *opt;
    o.pair_tiles = true;
    if (o.finisher || o.cooperative || !o.red_global || cf_cg_check(ir, &(cf_error){0}) != CF_OK)
        return false;
    cg_ctx e = {.ir = ir, .opt = &o};
    /* the late exchange is the only one: WG0's words wait a mainloop for WG1's */
    const int reductions = ir->n_stages[0] - 1;
    bool pair = plan_epilogue(&e) && e.late && !e.mid && (reductions == 1 || (reductions == 2 && e.late_r1));
    plan_free(&e);
    return pair;
}

int cf_cg_gather_words(const cf_ir *ir, const cf_plan *opt)
{
    if (!opt->red_global || opt->row_ctas < 2 || cf_cg_check(ir, &(cf_error){0}) != CF_OK)
        return 0;
    cg_ctx e = {.ir = ir, .opt = opt};
    if (!plan_epilogue(&e))
        return 0;
    const int lanes_per_row = 32 / (16 * (opt->bm / 64));
    const int per_lane = (opt->row_ctas + lanes_per_row - 1) / lanes_per_row;
    int words = 0;
    for (const cf_ir_spec *sp = ir->epi[0]; sp && sp->post; sp = sp->post) {
        if (e.merge_of[sp->depth])
            continue; /* its pair goes with the next stage's reduction */
        words += per_lane * (sp->depth > 0 && e.merge_of[sp->depth - 1] ? 2 : 1);
    }
    plan_free(&e);
    return words;
}

int cf_cg_exchanges(const cf_ir *ir, const cf_plan *opt)
{
    const int reductions = ir->n_stages[0] - 1;
    if (!opt->red_global || opt->row_ctas < 2 || cf_cg_check(ir, &(cf_error){0}) != CF_OK)
        return reductions;
    cg_ctx e = {.ir = ir, .opt = opt};
    if (!plan_epilogue(&e))
        return reductions;
    int exchanges = 0;
    for (const cf_ir_spec *sp = ir->epi[0]; sp && sp->post; sp = sp->post)
        exchanges += !e.merge_of[sp->depth];   /* a merged pair goes with the next stage's */
    plan_free(&e);
    return exchanges;
}

bool cf_cg_gathers_early(const cf_ir *ir, const cf_plan *opt)
{
    if (cf_cg_check(ir, &(cf_error){0}) != CF_OK)
        return false;
    cg_ctx e = {.ir = ir, .opt = opt};
    int block;
    bool early = plan_epilogue(&e) && gathers_early(&e, &block);
    plan_free(&e);
    return early;
}

bool cf_cg_finishes_late(const cf_ir *ir, const cf_plan *opt)
{
    cf_error err;
    if (cf_cg_check(ir, &err) != CF_OK)
        return false;
    cg_ctx e = {.ir = ir, .opt = opt};
    bool late = plan_epilogue(&e) && e.late;
    plan_free(&e);
    return late;
}

/* Before the loop of a stage that reads tile inputs: the first such stage waits for them; each
 * read gets a stream of 8-register groups from the ring (cf_tin_stream). */
static void emit_tin_open(cg_ctx *c, const cf_ir_spec *sp)
{
    if (!c->n_tin || c->in_late)
        return;
    if (sp->depth == c->tin_first)
        line(c, "cf_tin_wait(t);  /* this tile's [M,N] inputs have landed in the ring */");
    char id[96];
    for (int a = 0; a < c->ir->n_args; a++) {
        const cf_ir_node *n = c->tin[a] >= 0 ? tile_input_read(c->ir, sp, a) : NULL;
        if (!n)
            continue;
        ident(n, id, sizeof id);
        line(c, "cf_tin_stream<%d, 2> tin_%s(t, %d);  /* %s, two groups ahead of use */",
             c->ir->args[a].dtype == CF_F16, id, c->tin[a], c->ir->args[a].name);
        line(c, "float tv_%s[8];", id);
    }
}

/* In the loop: the next group of each tile input the stage reads. */
static void emit_tin_next(cg_ctx *c, const cf_ir_spec *sp)
{
    char id[96];
    for (int a = 0; a < c->ir->n_args && c->n_tin && !c->in_late; a++) {
        const cf_ir_node *n = c->tin[a] >= 0 ? tile_input_read(c->ir, sp, a) : NULL;
        if (!n)
            continue;
        ident(n, id, sizeof id);
        line(c, "if (r %% 8 == 0)");
        line(c, "    tin_%s.next(t, r / 8, tv_%s);", id, id);
    }
}

/* A stage's opening: its comment, scalar slots, the reduction's partials, vector loads.
 * Returns whether the stage loops over the accumulator (a store taking the accumulator as it
 * is, or computing its GELU itself, needs no loop). */
static bool emit_stage_head(cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *red)
{
    char id[96];
    bool work = c->in_late;
    for (int i = 0; i < sp->n_nodes; i++)
        work |= !first_acc(c, sp->nodes[i]) && sp->nodes[i]->kind != CF_IR_STORE && !c->at_store[sp->nodes[i]->id];
    if (!work)
        line(c, "/* ---- stage 0: the accumulator, to the store ---- */");
    else if (sp->depth == 0)
        line(c, "/* ---- stage 0: %d nodes, streamed one accumulator register at a time ---- */", sp->n_nodes);
    else
        line(c, "/* ---- stage %d (PostOp of the reduction above): %d nodes ---- */", sp->depth, sp->n_nodes);
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (cls_of(n->shape) == CLS_SCALAR && c->arr[n->id] == n->id && n->kind != CF_IR_PLACEHOLDER)
            line(c, "float S_%d;", n->id);
    }
    if (red)
        emit_red_init(c, red, red == c->late_r1);
    if (c->in_late)
        line(c, "CF_TRC_T0(trl);  /* CF_TRACE: the finish's vector loads and loop */");
    emit_col_loads(c, sp);
    if (c->in_late)
        line(c, "float pk[8], y8[8];  /* one 8-register group: parked %s in, output out */",
             ident(c->late_parked->ref, id, sizeof id));
    return work;
}

/* The loop over the accumulator registers: the stage's nodes, its values into their arrays. */
static void emit_stage_loop(cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *red)
{
    char id[96], where[96];
    emit_tin_open(c, sp);
    emit_loop_open(c, c->in_late ? late_park_fmt(c) : PARK_NONE);
    emit_tin_next(c, sp);
    emit_nodes(c, sp);
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (c->arr[n->id] < 0 || c->pass[n->id] || first_acc(c, n) || n->kind == CF_IR_PLACEHOLDER)
            continue;
        const cf_ir_node *v = scale_into_exp(c, n, NULL);
        line(c, "%s = %s;  /* %s */", slot_ref(c, n, where, sizeof where), ident(v ? v : n, id, sizeof id),
             v ? "carried to the next stage unscaled (op_exp_sub_scaled)"
               : carried_out(sp, n) ? "carried to the next stage" : "kept for the store");
    }
    if (c->in_late) {
        line(c, "if (r %% 8 == 7)");
        line(c, "    cf_restage8<%s>(t, r / 8, y8);  /* in place, as the output's 16-bit type */",
             late_out_f16(c) ? "CF_PARK_F16" : "CF_PARK_BF16");
    }
    c->indent--;
    line(c, "}");
    if (c->n_tin && sp->depth == c->tin_last && !c->in_late)
        line(c, "cf_tin_release(t);  /* the last stage that reads them: their ring stages are free */");
    if (red)
        emit_max_scale(c, red);
}

/* The stage's stores, from the values' arrays: tiles through TMA, [M] values one writer a row. */
static void emit_stage_stores(cg_ctx *c, const cf_ir_spec *sp)
{
    const cf_ir *ir = c->ir;
    char id[96], where[96];
    int tile_out = 0;
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        if (a->kind != CF_ARG_OUTPUT)
            continue;
        bool tile = cf_graph_output_info(ir->graph, a->index).rank == 2;
        for (int j = 0; j < sp->n_nodes; j++) {
            const cf_ir_node *n = sp->nodes[j];
            if (n->kind != CF_IR_STORE || n->arg != i)
                continue;
            const cf_ir_node *src = store_src(c, n);
            int k = c->arr[src->id];
            if (tile && src != n->args[0]) {
                const bool erf = n->args[0]->op == CF_OP_GELU_ERF;
                line(c, "cf_store_tile_%s_gelu%s(args, t, %d, T%d);  /* output %s: %s [M,N]; %s = %s(%s) "
                        "computed by the store, in packed %s */", cf_dtype_name(a->dtype), erf ? "_erf" : "", tile_out,
                     k, a->name, cf_dtype_name(a->dtype), ident(n->args[0], id, sizeof id), erf ? "gelu_erf" : "gelu",
                     ident(src, where, sizeof where), cf_dtype_name(a->dtype));
            } else if (tile && c->in_late) {
                line(c, "cf_store_staged(args, t, %d);  /* output %s: %s [M,N], restaged where it was parked */",
                     tile_out, a->name, cf_dtype_name(a->dtype));
            } else if (tile) {
                line(c, "cf_store_tile_%s(args, t, %d, T%d);  /* output %s: %s [M,N] */", cf_dtype_name(a->dtype),
                     tile_out, k, a->name, cf_dtype_name(a->dtype));
            } else {
                line(c, "#pragma unroll");
                line(c, "for (int s = 0; s < CF_ROWS; ++s) {  /* output %s: %s [M], one writer per row */", a->name,
                     cf_dtype_name(a->dtype));
                line(c, "    const int row = t.m0 + cf_slot_row(t, s);");
                const cf_ir_node *stat = stat_source(src);
                char from[112];
                if (stat)
                    snprintf(from, sizeof from, "red_%s[s]", ident(stat, id, sizeof id));
                else
                    snprintf(from, sizeof from, "R%d[s]", k);
                line(c, "    if (t.n0 == 0 && (t.lane & 3) == 0 && row < t.M)");
                line(c, "        store_%s(p.%s, row, %s);", cf_dtype_name(a->dtype), a->name, from);
                line(c, "}");
            }
        }
        tile_out += tile;
    }
}

/* The stage's reduction: merged with the next, split for a mid part or a late finish, or
 * exchanged across the row's CTAs here. */
static void emit_stage_exchange(cg_ctx *c, const cf_ir_spec *sp, const cf_ir_node *red)
{
    char id[96];
    if (red && c->merge_next) {
        emit_tile_stat(c, red, c->merge_next, red == c->late_r1);
        trace_mark(c, c->merge_next == MERGE_VAR ? "the tile's mean" : "the tile's max");
    } else if (red && c->mid && sp->post == c->mid) {
        emit_mid_split(c, red);
    } else if (red && sp->post == c->late) {
        emit_late_split(c, red);
    } else if (red && c->merge_prev) {
        char id1[96];
        ident(red, id, sizeof id);
        ident(c->merge_r1, id1, sizeof id1);
        const char *kind = c->merge_prev == MERGE_VAR ? "CF_MERGE_VAR" : "CF_MERGE_SOFTMAX";
        const char *what = c->merge_prev == MERGE_VAR ? "mean and sum of squares" : "max and sum of exps";
        line(c, "float corr_%s[CF_ROWS];", id1);
        if (post_first(c) && !c->in_late && !c->in_mid && !c->prev_finished) {
            /* The tile waits for this exchange: the previous tile finishes meanwhile, between
             * the post and the gather (its partials came during the mainloop; LN+softmax's
             * first exchange: docs/performance.md, "Post first"). */
            line(c, "cf_row_merge_post<%s, %d, %d>(args, t, raw_%s, red_%s);  /* post (%s) pairs for the row */", kind,
                 c->merge_index, c->n_red, id1, id, what);
            trace_mark(c, "post");
            emit_finish_prev(c);
            line(c, "cf_row_merge_finish<%s, %d, %d, true>(args, t, raw_%s, red_%s, red_%s, corr_%s);  /* the row's "
                    "pairs: %s */", kind, c->merge_index, c->n_red++, id1, id1, id, id1, what);
        } else {
            line(c, "cf_row_merge<%s, %d, %d>(args, t, raw_%s, red_%s, red_%s, corr_%s);  /* one exchange: %s */", kind,
                 c->merge_index, c->n_red++, id1, id1, id, id1, what);
        }
        emit_mean_scale(c, red, id, false);
        trace_mark(c, "exchange");
    } else if (red) {
        ident(red, id, sizeof id);
        line(c, "cf_row_reduce<%s, %d>(args, t, red_%s);  /* quad shuffles, then across the row's CTAs */",
             red_op(red->op), c->n_red++, id);
        emit_mean_scale(c, red, id, true);
        trace_mark(c, "exchange");
    }
}

static void emit_stage(cg_ctx *c, const cf_ir_spec *sp)
{
    const cf_ir_node *red = sp->terminal && sp->terminal->kind == CF_IR_REDUCE ? sp->terminal : NULL;
    if (emit_stage_head(c, sp, red))
        emit_stage_loop(c, sp, red);
    if (c->in_late)
        line(c, "CF_TRC_ADD(t, CF_TRC_FLOOP, trl);");
    if (!c->in_late && c->ir->n_stages[0] > 1)
        trace_mark(c, "the loop above");
    emit_stage_stores(c, sp);
    emit_stage_exchange(c, sp, red);
}

/* One member of the schedule struct, its reason beside it when there is one. */
static void sched_member(cg_ctx *c, const char *type, const char *name, const char *value, const char *why)
{
    char decl[96];
    snprintf(decl, sizeof decl, "static constexpr %s %s = %s;", type, name, value);
    if (why && *why)
        line(c, "%-44s /* %s */", decl, why);
    else
        line(c, "%s", decl);
}

static void sched_int(cg_ctx *c, const char *name, long v, const char *why)
{
    char value[24];
    snprintf(value, sizeof value, "%ld", v);
    sched_member(c, "int", name, value, why);
}

static void sched_bool(cg_ctx *c, const char *name, bool v, const char *why)
{
    sched_member(c, "bool", name, v ? "true" : "false", why);
}

/* The tile inputs: how many, which arguments (a bit each) and their names. */
static int tile_inputs(const cg_ctx *e, unsigned *mask, char *names, size_t len)
{
    *mask = 0;
    *names = 0;
    for (int a = 0; a < e->ir->n_args; a++) {
        if (e->tin[a] < 0)
            continue;
        *mask |= 1u << a;
        if (strlen(names) + strlen(e->ir->args[a].name) + 3 < len)
            strcat(strcat(names, *names ? ", " : ""), e->ir->args[a].name);
    }
    return e->n_tin;
}

/* The operands and the ring: tile, stages, cluster, layouts, outputs, shared memory. */
static void emit_sched_mainloop(cg_ctx *c, int n_out, const cf_plan_smem *smem)
{
    const cf_plan *opt = c->opt;
    const cf_ir *ir = c->ir;
    const int tile_m = opt->cooperative ? 2 * opt->bm : opt->bm;
    const bool multicast = opt->cluster_n > 1 && (tile_m / opt->cluster_n) % 8 == 0;
    char why[160];
    sched_int(c, "bm", opt->bm, "rows of one consumer warpgroup's tile");
    sched_int(c, "bn", opt->bn, "columns of the tile");
    sched_int(c, "stages", opt->stages, "operand ring depth");
    sched_int(c, "cluster_n", opt->cluster_n, "CTAs per hardware cluster along N");
    sched_int(c, "row_ctas", opt->row_ctas, "CTAs per row block");
    sched_int(c, "split_k", opt->split_k > 1 ? opt->split_k : 1,
              opt->split_k > 1 ? "slices of K, a copy of the grid each; partials through L2" : "K in one slice");
    snprintf(why, sizeof why, opt->cooperative ? "cooperative: both consumer warpgroups on one %dx%d tile"
                                               : "a tile per consumer warpgroup, mainloops in turn", tile_m, opt->bn);
    sched_bool(c, "pingpong", !opt->cooperative, why);
    sched_bool(c, "b_nk", ir->args[1].b_is_nk, ir->args[1].b_is_nk ? "W given as [N,K]" : "W given as [K,N]");
    if (ir->dual)
        snprintf(why, sizeof why, "X x %s beside X x %s: a second weight per stage, a second accumulator",
                 ir->args[2].name, ir->args[1].name);
    sched_bool(c, "dual", ir->dual, ir->dual ? why : "one GEMM");
    sched_bool(c, "in_f16", ir->args[0].dtype == CF_F16, ir->args[0].dtype == CF_F16 ? "f16 operands" : "bf16 operands");
    sched_int(c, "num_out", n_out ? n_out : 1, n_out ? "TMA-stored outputs" : "no tile output: one unused slot");
    sched_int(c, "stg_chunks", smem->stg_chunks, "64-column staging chunks per warpgroup");
    sched_int(c, "smem_plan", (long)smem->dynamic_bytes, "dynamic shared memory of the plan (cf_cg_plan_smem)");
    snprintf(why, sizeof why, "a %d-row slice per CTA is too thin for TMA multicast", tile_m / opt->cluster_n);
    sched_bool(c, "multicast", multicast,
               multicast ? "X's tile multicast to the cluster" : opt->cluster_n > 1 ? why : "no cluster");
}

/* The epilogue's part of the schedule: tile inputs, late finish, finisher, the exchange. */
static void emit_sched_epilogue(cg_ctx *c, const cg_ctx *e, const cf_plan_smem *smem)
{
    const cf_plan *opt = c->opt;
    const int reductions = c->ir->n_stages[0] - 1;
    unsigned mask;
    char names[256], why[320], value[24];
    const int n_tin = tile_inputs(e, &mask, names, sizeof names);
    snprintf(why, sizeof why, "[M,N] inputs fetched through the operand ring: %s", names);
    sched_int(c, "num_tin", n_tin, n_tin ? why : "no [M,N] input through the operand ring");
    snprintf(value, sizeof value, "0x%xu", mask);
    sched_member(c, "unsigned", "tin_args", value, "their argument numbers, a bit each");
    sched_bool(c, "late_finish", e->late != NULL,
               e->late ? "tiles finish after the next mainloop (cf_epilogue_finish)"
                       : "a tile's whole epilogue runs right after its mainloop");
    sched_bool(c, "pair_tiles", opt->pair_tiles,
               opt->pair_tiles ? "a CTA's two warpgroups: adjacent column tiles, one post per row"
                               : "a column tile per warpgroup");
    sched_bool(c, "post_first", post_first(e),
               post_first(e) ? "a tile posts, then the previous one finishes, then it parks"
               : e->late     ? "a tile's first part follows the previous tile's finish"
                             : NULL);
    int block = -1;
    const bool early = opt->gather_early && gathers_early(e, &block);
    snprintf(why, sizeof why, "1 + the slot block (%d) of the parked tile's late gather, loaded as the next "
                              "mainloop ends", block);
    sched_int(c, "gather_early", early ? block + 1 : 0,
              early ? why : post_first(e) ? "the late gather loads when the parked tile finishes" : NULL);
    const bool finisher = e->mid || opt->has_finisher;
    sched_bool(c, "finisher", finisher,
               e->mid ? "a fourth warpgroup runs the middle stages (cf_epilogue_mid)"
               : finisher ? "a fourth warpgroup finishes parked tiles during the next mainloop"
               : e->late  ? "the consumers finish their own parked tiles"
                          : "a producer and two consumer warpgroups");
    sched_bool(c, "mid", e->mid != NULL,
               e->mid ? "... while the consumer runs its next mainloop, then finishes the tile late" : NULL);
    sched_int(c, "num_red", reductions, "row reductions per tile");
    sched_int(c, "static_smem", reductions ? smem->static_bytes : 0,
              reductions ? "static shared memory of the exchange (cf_reduce.cuh)" : "no exchange");
    const bool global = reductions && opt->red_global;
    sched_bool(c, "red_global", global,
               global                         ? "row partials through L2 (cooperative launch)"
               : reductions && opt->row_ctas > 1 ? "row partials through DSMEM, in the cluster"
                                                 : NULL);
    const bool leader = reductions && !global && opt->red_leader;
    sched_bool(c, "red_leader", leader,
               reductions && !global ? (leader ? "cluster reductions: leader-follower" : "cluster reductions: peer-to-peer")
                                     : NULL);
}

/* The schedule the plan chose, as compile-time constants the device header reads. */
static void emit_sched(cg_ctx *c, const cg_ctx *e, int n_out)
{
    const cf_plan_smem smem = cf_plan_smem_of(c->ir, c->opt);
    line(c, "/* The schedule (Psi renders the plan): compile-time constants that cf_sm90.cuh's roles");
    line(c, " * -- producer, consumer mainloop, epilogue, exchange, finisher -- read as S::<member>. */");
    line(c, "struct cf_sched {");
    c->indent++;
    emit_sched_mainloop(c, n_out, &smem);
    emit_sched_epilogue(c, e, &smem);
    c->indent--;
    line(c, "};");
}

cf_status cf_cg_check(const cf_ir *ir, cf_error *err)
{
    if (ir->n_gemms != 1)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "B2B GEMMs (F(X*W1)*W2) have no code generator yet; "
                         "the IR is valid (see `comfuse explain`), fall back to unfused execution");
    return CF_OK;
}

/* The file's opening comment and the schedule struct. */
static void emit_file_header(cg_ctx *c, cg_ctx *e, const char *title)
{
    const cf_ir *ir = c->ir;
    const cf_ir_arg *A = &ir->args[0];
    int n_out = 0;
    for (int i = 0; i < ir->n_args; i++)
        n_out += ir->args[i].kind == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, ir->args[i].index).rank == 2;
    line(c, "/* Generated by comfuse %s (Psi) from %s: do not edit.", CF_VERSION, title ? title : "<graph>");
    line(c, " * GEMM [M,N] = X[M,K] x W%s%s, %s operands, f32 accumulation, then a %d-stage epilogue",
         ir->args[1].b_is_nk ? "^T (W given as [N,K])" : " (W given as [K,N])",
         ir->dual ? ", beside X x W2 (a dual GEMM: X loaded once for both)" : "", cf_dtype_name(A->dtype),
         ir->n_stages[0]);
    line(c, " * applied per fragment in registers on the wgmma accumulator layout. */");
    emit_sched(c, e, n_out);
}

/* struct cf_epi_params: the epilogue's inputs and runtime scalars (the IR's parameter table A). */
static void emit_params_struct(cg_ctx *c)
{
    const cf_ir *ir = c->ir;
    line(c, "/* Epilogue inputs and runtime scalars (the IR's parameter table A). */");
    line(c, "struct cf_epi_params {");
    c->indent++;
    int n_fields = 0;
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        switch (a->kind) {
        case CF_ARG_SCALAR:
            line(c, "float %s;  /* a%d: runtime scalar */", a->name, i);
            n_fields++;
            break;
        case CF_ARG_VEC_N:
        case CF_ARG_VEC_M:
        case CF_ARG_TENSOR:
            line(c, "%s%s;  /* a%d: %s %s */", ptr_type(a->dtype), a->name, i, cf_arg_kind_name(a->kind),
                 cf_dtype_name(a->dtype));
            n_fields++;
            break;
        case CF_ARG_OUTPUT:
            if (cf_graph_output_info(ir->graph, a->index).rank == 1) {
                line(c, "%s%s;  /* a%d: per-row output, %s */", a->dtype == CF_F32 ? "float *" : "unsigned short *",
                     a->name, i, cf_dtype_name(a->dtype));
                n_fields++;
            }
            break;
        default:
            break;
        }
    }
    if (n_fields == 0)
        line(c, "int unused;  /* C++ needs no empty struct; keeps the layout fixed */");
    c->indent--;
    line(c, "};");
    blank(c);
}

/* struct cf_late: what a tile keeps in registers for its late finish. */
static void emit_late_struct(cg_ctx *c, const cg_ctx *e)
{
    if (e->late) {
        char id[96];
        line(c, "/* This tile's own statistics, kept in registers for its late finish. */");
        line(c, "struct cf_late {");
        c->indent++;
        if (e->late_r1) {
            ident(e->late_r1, id, sizeof id);
            line(c, "float raw_%s[cf_sched::bm / 32];  /* %s, per row the thread holds */", id,
                 e->late_r1->op == CF_OP_RMAX ? "max" : "sum");
            line(c, "float red_%s[cf_sched::bm / 32];  /* %s */", id, e->late_r1->op == CF_OP_RMAX ? "shift" : "mean");
        } else {
            line(c, "int unused;  /* a single exchange needs nothing beyond its posted partials */");
        }
        c->indent--;
        line(c, "};");
        blank(c);
    }
}

/* cf_epilogue's signature and its first lines (part 1 of a late finish, or the whole epilogue). */
static void emit_epilogue_open(cg_ctx *e)
{
    const cf_ir *ir = e->ir;
    if (e->late) {
        line(e, "/* Part 1, right after the tile's mainloop: every stage up to the last exchange. */");
        line(e, "template <class FinishPrev>");
        line(e, "__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, "
                 "float (&acc)[CF_ACC_REGS], const cf_pre &pre, cf_late &late, const FinishPrev &finish_prev)");
    } else {
        line(e, "/* Runs once per tile of a consumer warpgroup, after its mainloop. */");
        line(e, "__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, "
                 "float (&acc)[CF_ACC_REGS], %sconst cf_pre &pre)", ir->dual ? "float (&acc2)[CF_ACC_REGS], " : "");
    }
    line(e, "{");
    e->indent++;
    line(e, "const cf_epi_params &p = args.epi;");
    line(e, "(void)p;");
    line(e, "(void)pre;");
    if (e->late) {
        line(e, "(void)late;");
        line(e, "(void)finish_prev;");
    }
    line(e, "float (&T0)[CF_ACC_REGS] = acc;  /* the first tile array is the accumulator itself */");
    if (ir->n_stages[0] > 1)
        line(e, "CF_TRC_START(trs);  /* CF_TRACE: clock at the start of each section below */");
    for (int k = 1; k < e->n_arrays[CLS_TILE]; k++)
        line(e, "float T%d[CF_ACC_REGS];", k);
    for (int k = 0; k < e->n_arrays[CLS_ROW]; k++)
        line(e, "float R%d[CF_ROWS];", k);
}

cf_status cf_codegen(const cf_ir *ir, const cf_plan *opt, const char *title, cf_strbuf *out,
                     cf_error *err)
{
    cf_status st = cf_cg_check(ir, err);
    if (st != CF_OK)
        return st;
    cg_ctx c = {.ir = ir, .opt = opt, .sb = out};
    /* The epilogue goes into its own buffer first so only the helpers it
     * calls are emitted ahead of it; its plan comes first, since the header
     * part says whether tiles finish late. */
    cf_strbuf epi = {0};
    cg_ctx e = {.ir = ir, .opt = opt, .sb = &epi};
    if (!plan_epilogue(&e))
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory generating code");
    if (e.arrays_full) {
        plan_free(&e);
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "cannot fuse: the epilogue keeps more than %d tile or row values live at once "
                         "(carried to a later stage, or stored after their loop); fall back to unfused execution",
                         CG_MAX_ARRAYS);
    }
    /* Ψ renders what the plan decided (cf_plan_make asked these same questions) */
    CF_ASSERT(!e.late == !opt->late_finish && (!opt->pair_tiles || cf_cg_can_pair(ir, opt)));
    emit_file_header(&c, &e, title);
    blank(&c);
    emit_params_struct(&c);
    emit_late_struct(&c, &e);
    emit_pre_struct(&c);
    line(&c, "#include \"cf_sm90.cuh\"");
    if (ir->n_stages[0] > 1)
        line(&c, "#include \"cf_reduce.cuh\"  /* row reductions: shuffles and the cluster exchange */");
    blank(&c);
    emit_preload(&e);
    emit_epilogue_open(&e);
    for (const cf_ir_spec *sp = ir->epi[0]; sp; sp = sp->post) {
        e.merge_prev = sp->depth > 0 ? e.merge_of[sp->depth - 1] : MERGE_NONE;
        e.merge_next = e.merge_of[sp->depth];
        e.in_late = sp == e.late;
        if (sp == e.mid) {
            emit_mid(&e, sp);
            sp = sp->post; /* the mid part emits the stage after it too */
            continue;
        }
        emit_stage(&e, sp);
    }
    plan_free(&e);
    e.indent--;
    line(&e, "}");
    cf_strbuf defs = {0};
    if (cf_cg_emit_helpers(epi.data, &defs) > 0) {
        line(&c, "/* Helpers used by this epilogue (NaN-propagating like the reference). */");
        cf_sb_puts(out, defs.data);
        blank(&c);
    }
    if (defs.oom)
        out->oom = true;
    cf_sb_free(&defs);
    if (epi.data)
        cf_sb_puts(out, epi.data);
    if (epi.oom)
        out->oom = true;
    cf_sb_free(&epi);
    blank(&c);
    line(&c, "#include \"cf_sm90_kernel.cuh\"  /* the kernel over this schedule, and cf_kernel_info */");
    if (out->oom)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory generating code");
    return CF_OK;
}

/* ---- shared with rows.c (the unfused path's row kernel) ------------------------ */

/* The same op templates, identifiers, literals and helper definitions as the
 * fused epilogue, so both kernels compute every op identically. */
const char *cf_cg_ident(const cf_ir_node *n, char *buf, size_t len) { return ident(n, buf, len); }

void cf_cg_float_literal(double v, char *buf, size_t len) { float_literal(v, buf, len); }

const char *cf_cg_load_fn(cf_dtype t) { return load_fn(t); }

bool cf_cg_expand_op(cf_op op, const char *a0, const char *a1, cf_strbuf *out)
{
    const char *tmpl = op_expr(op);
    if (!tmpl)
        return false;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '%' && (p[1] == '1' || p[1] == '2')) {
            cf_sb_puts(out, p[1] == '1' ? a0 : (a1 ? a1 : "0.0f"));
            p++;
        } else {
            char ch[2] = {*p, 0};
            cf_sb_puts(out, ch);
        }
    }
    return true;
}

int cf_cg_emit_helpers(const char *text, cf_strbuf *out)
{
    /* What text calls, and what those helpers call in turn (op_silu uses
     * op_exp); a helper only calls ones before it in the table. */
    bool need[CF_ARRAY_LEN(helpers)] = {false};
    for (int i = CF_ARRAY_LEN(helpers) - 1; i >= 0; i--) {
        need[i] = text && calls(text, helpers[i].name);
        for (int j = i + 1; j < CF_ARRAY_LEN(helpers) && !need[i]; j++)
            need[i] = need[j] && calls(helpers[j].def, helpers[i].name);
    }
    int n = 0;
    for (int i = 0; i < CF_ARRAY_LEN(helpers); i++)
        if (need[i]) {
            cf_sb_puts(out, helpers[i].def);
            cf_sb_puts(out, "\n");
            n++;
        }
    return n;
}
