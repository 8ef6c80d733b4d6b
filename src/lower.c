/* lower.c — Φ: graph -> Fusion Spec IR <N, E, tau, A, C>.
 *
 * Top-down from the matmul root:
 *   1. keep what the outputs need and number values, so identical
 *      subexpressions become one node (CSE);
 *   2. check the domain: one GEMM on inputs, optionally a second whose left
 *      operand is an epilogue value (B2B) or the first's X with a weight of the
 *      same shape (dual: both accumulators enter one epilogue); only row
 *      reductions; no layout ops;
 *   3. cut each epilogue into stages, one per reduction: reduction r_j is the
 *      terminal of stage j and its statistic enters stage j+1 as a placeholder;
 *   4. place each computed value once, in the earliest stage that consumes it,
 *      and carry it into later stages through bypass placeholders (never
 *      recomputed); leaves (constants, params, input vectors and tensors)
 *      become broadcast nodes in each stage that reads them.
 * No pattern is special-cased: LayerNorm, RMSNorm and Softmax fall out of
 * the same rules.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct lower_ctx {
    const cf_graph *g;
    cf_ir *ir;
    cf_error *err;
    int n;               /* graph nodes                                        */
    bool *live;          /* needed by some output                              */
    cf_value *canon;     /* value number: the representative of each node      */
    int *n_users;        /* per representative                                 */
    cf_value **users;    /* representative -> canonical consumer nodes         */
    cf_value mm[2];      /* the GEMMs, in order                                */
    bool dual;           /* mm[1] is X*W2 beside mm[0] = X*W1, not after it     */
    signed char *seg;    /* 0/1: epilogue of mm[0] or mm[1]; -1: leaf-only      */
    /* per segment, rebuilt by plan_segment() */
    bool *in_seg;        /* node belongs to the current segment's closure       */
    int *stage_of_red;   /* REDUCE: its stage                                   */
    int *earliest, *place, *last_use;
    int n_stages;
    cf_ir_node **cur;    /* the IR node that holds each value in the current stage */
    cf_ir_node **prev;   /* ... in the previous stage                           */
    int cap_args;
} lower_ctx;

static cf_status oom(lower_ctx *c)
{
    return cf_errorf(c->err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory while lowering");
}

static const char *nname(lower_ctx *c, cf_value v, char *buf, size_t n)
{
    return cf_graph_node_name(c->g, v, buf, n);
}

__attribute__((format(printf, 3, 4)))
static cf_status reject(lower_ctx *c, cf_value v, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_loc loc = v >= 0 ? c->g->nodes[v].loc : (cf_loc){0};
    return cf_errorf(c->err, CF_ERR_UNSUPPORTED, loc, "cannot fuse: %s", msg);
}

/* ---- 1. liveness and value numbering ----------------------------------- */

static void mark_live(lower_ctx *c)
{
    /* Nodes are created in topological order, so one backward sweep suffices. */
    for (int i = 0; i < c->g->n_outputs; i++)
        c->live[c->g->outputs[i].value] = true;
    for (int v = c->n - 1; v >= 0; v--)
        if (c->live[v])
            for (int k = 0; k < 2; k++)
                if (c->g->nodes[v].src[k] >= 0)
                    c->live[c->g->nodes[v].src[k]] = true;
}

static bool commutative(cf_op op)
{
    return op == CF_OP_ADD || op == CF_OP_MUL || op == CF_OP_MAX || op == CF_OP_MIN;
}

typedef struct vn_key {
    cf_op op;
    cf_value a, b;
    uint64_t cbits;
    int index, axis;
} vn_key;

static vn_key key_of(lower_ctx *c, cf_value v)
{
    const cf_node *n = &c->g->nodes[v];
    vn_key k = {.op = n->op, .a = -1, .b = -1, .index = n->index, .axis = n->axis};
    if (n->op == CF_OP_CONST)
        memcpy(&k.cbits, &n->cval, sizeof k.cbits);
    if (n->op == CF_OP_INPUT || n->op == CF_OP_PARAM)
        k.index = n->index; /* distinct declarations stay distinct */
    if (n->src[0] >= 0)
        k.a = c->canon[n->src[0]];
    if (n->src[1] >= 0)
        k.b = c->canon[n->src[1]];
    if (commutative(n->op) && k.a > k.b) {
        cf_value t = k.a;
        k.a = k.b;
        k.b = t;
    }
    return k;
}

/* Field by field: struct copies need not preserve padding, so no memcmp. */
static bool key_eq(const vn_key *x, const vn_key *y)
{
    return x->op == y->op && x->a == y->a && x->b == y->b && x->cbits == y->cbits && x->index == y->index &&
           x->axis == y->axis;
}

static uint64_t hash_key(const vn_key *k)
{
    uint64_t h = 1469598103934665603ull;
    uint64_t parts[6] = {(uint64_t)k->op, (uint64_t)(uint32_t)k->a, (uint64_t)(uint32_t)k->b,
                         k->cbits, (uint64_t)(uint32_t)k->index, (uint64_t)(uint32_t)k->axis};
    for (int i = 0; i < 6; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static cf_status number_values(lower_ctx *c)
{
    size_t cap = 16;
    while (cap < (size_t)c->n * 2)
        cap *= 2;
    cf_value *table = malloc(cap * sizeof *table);
    vn_key *keys = malloc((size_t)c->n * sizeof *keys);
    if (!table || !keys) {
        free(table);
        free(keys);
        return oom(c);
    }
    for (size_t i = 0; i < cap; i++)
        table[i] = -1;
    for (int v = 0; v < c->n; v++) {
        c->canon[v] = v;
        if (!c->live[v])
            continue;
        keys[v] = key_of(c, v);
        size_t slot = hash_key(&keys[v]) & (cap - 1);
        for (;; slot = (slot + 1) & (cap - 1)) {
            cf_value w = table[slot];
            if (w < 0) {
                table[slot] = v;
                break;
            }
            if (key_eq(&keys[w], &keys[v])) {
                c->canon[v] = w;
                break;
            }
        }
    }
    free(table);
    free(keys);
    return CF_OK;
}

static cf_value src_of(lower_ctx *c, cf_value v, int k)
{
    cf_value s = c->g->nodes[v].src[k];
    return s < 0 ? -1 : c->canon[s];
}

static bool is_rep(lower_ctx *c, cf_value v) { return c->live[v] && c->canon[v] == v; }

static cf_status build_users(lower_ctx *c)
{
    for (int v = 0; v < c->n; v++)
        if (is_rep(c, v))
            for (int k = 0; k < 2; k++) {
                cf_value s = src_of(c, v, k);
                if (s >= 0 && !(k == 1 && src_of(c, v, 0) == s))
                    c->n_users[s]++;
            }
    for (int v = 0; v < c->n; v++)
        if (c->n_users[v]) {
            c->users[v] = calloc((size_t)c->n_users[v], sizeof(cf_value));
            if (!c->users[v])
                return oom(c);
            c->n_users[v] = 0;
        }
    for (int v = 0; v < c->n; v++)
        if (is_rep(c, v))
            for (int k = 0; k < 2; k++) {
                cf_value s = src_of(c, v, k);
                if (s >= 0 && !(k == 1 && src_of(c, v, 0) == s))
                    c->users[s][c->n_users[s]++] = v;
            }
    return CF_OK;
}

/* ---- 2. the domain ------------------------------------------------------ */

static bool depends_on(lower_ctx *c, cf_value v, cf_value target, signed char *memo)
{
    /* memo: 0 unknown, 1 yes, 2 no */
    if (v == target)
        return true;
    if (memo[v])
        return memo[v] == 1;
    bool d = false;
    for (int k = 0; k < 2 && !d; k++) {
        cf_value s = src_of(c, v, k);
        if (s >= 0)
            d = depends_on(c, s, target, memo);
    }
    memo[v] = d ? 1 : 2;
    return d;
}

/* Two GEMMs neither of which reads the other: they fuse as a dual GEMM when they share
 * the left operand X and their weights have one shape, layout and dtype, so one
 * kernel loads each X tile once for both weight tiles. */
static cf_status check_dual(lower_ctx *c)
{
    const cf_graph *g = c->g;
    char b1[96], b2[96];
    cf_value mm0 = c->mm[0], mm1 = c->mm[1];
    const cf_node *n0 = &g->nodes[mm0], *n1 = &g->nodes[mm1];
    cf_value x0 = src_of(c, mm0, 0), x1 = src_of(c, mm1, 0);
    cf_value w0 = src_of(c, mm0, 1), w1 = src_of(c, mm1, 1);
    nname(c, mm0, b1, sizeof b1);
    nname(c, mm1, b2, sizeof b2);
    if (x0 != x1)
        return reject(c, mm1, "'%s' and '%s' are independent GEMMs over different left operands ('%s', '%s'); "
                      "only a chain F(X*W1)*W2 or two GEMMs over one X fuse", b1, b2, g->nodes[x0].name,
                      g->nodes[x1].name ? g->nodes[x1].name : "a computed value");
    if (g->nodes[w1].op != CF_OP_INPUT)
        return reject(c, mm1, "the right operand of '%s' is a computed value; both weights of a dual GEMM must "
                      "be graph inputs", b2);
    if (n0->axis != n1->axis)
        return reject(c, mm1, "'%s' takes its weight as %s but '%s' as %s; both weights of a dual GEMM need one "
                      "layout", b1, n0->axis ? "[N, K]" : "[K, N]", b2, n1->axis ? "[N, K]" : "[K, N]");
    if (n0->dims[1] != n1->dims[1])
        return reject(c, mm1, "'%s' has %s columns but '%s' has %s; both GEMMs over one X must have the same N",
                      b1, cf_graph_dim_name(g, n0->dims[1]), b2, cf_graph_dim_name(g, n1->dims[1]));
    if (g->nodes[w1].dtype != g->nodes[w0].dtype)
        return reject(c, w1, "weight '%s' is %s but weight '%s' is %s; both must have the same dtype",
                      g->nodes[w1].name, cf_dtype_name(g->nodes[w1].dtype), g->nodes[w0].name,
                      cf_dtype_name(g->nodes[w0].dtype));
    c->dual = true;
    return CF_OK;
}

static cf_status check_domain(lower_ctx *c)
{
    const cf_graph *g = c->g;
    char b1[96], b2[96];
    if (g->n_outputs == 0)
        return reject(c, -1, "the graph has no outputs");
    int n_mm = 0;
    for (int v = 0; v < c->n; v++) {
        if (!is_rep(c, v))
            continue;
        const cf_node *n = &g->nodes[v];
        if (n->op == CF_OP_TRANSPOSE)
            return reject(c, v, "'%s' is a transpose; layout changes are outside the fusion domain",
                          nname(c, v, b1, sizeof b1));
        if (cf_op_class_of(n->op) == CF_OPC_REDUCE && n->axis == 0)
            return reject(c, v, "'%s' reduces over %s (the rows); only row reductions over the GEMM's "
                          "N dimension can be fused", nname(c, v, b1, sizeof b1),
                          cf_graph_dim_name(g, g->nodes[src_of(c, v, 0)].dims[0]));
        if (n->op == CF_OP_MATMUL) {
            if (n_mm == 2)
                return reject(c, v, "'%s' is a third matmul; at most two chained GEMMs (B2B) fuse",
                              nname(c, v, b1, sizeof b1));
            c->mm[n_mm++] = v;
        }
    }
    if (n_mm == 0)
        return reject(c, -1, "nothing to fuse: no output depends on a matmul");
    /* The first GEMM reads inputs only: a prologue would need its own kernel. */
    cf_value mm0 = c->mm[0];
    for (int k = 0; k < 2; k++) {
        cf_value s = src_of(c, mm0, k);
        const cf_node *sn = &g->nodes[s];
        if (sn->op != CF_OP_INPUT)
            return reject(c, mm0, "the %s operand of '%s' is '%s', a computed value; the first GEMM "
                          "must read graph inputs (prologue fusion is outside the domain)",
                          k ? "right" : "left", nname(c, mm0, b1, sizeof b1), nname(c, s, b2, sizeof b2));
        if (sn->dtype != CF_BF16 && sn->dtype != CF_F16)
            return reject(c, s, "GEMM operand '%s' is %s; the tensor-core GEMM takes bf16 or f16",
                          sn->name, cf_dtype_name(sn->dtype));
    }
    if (g->nodes[src_of(c, mm0, 0)].dtype != g->nodes[src_of(c, mm0, 1)].dtype)
        return reject(c, mm0, "'%s' mixes %s and %s operands; both must have the same dtype",
                      nname(c, mm0, b1, sizeof b1), cf_dtype_name(g->nodes[src_of(c, mm0, 0)].dtype),
                      cf_dtype_name(g->nodes[src_of(c, mm0, 1)].dtype));
    signed char *memo0 = calloc((size_t)c->n, 1), *memo1 = calloc((size_t)c->n, 1);
    if (!memo0 || !memo1) {
        free(memo0);
        free(memo1);
        return oom(c);
    }
    cf_status st = CF_OK;
    if (n_mm == 2) {
        cf_value mm1 = c->mm[1];
        cf_value a = src_of(c, mm1, 0), b = src_of(c, mm1, 1);
        if (!depends_on(c, a, mm0, memo0))
            st = check_dual(c);
        else if (g->nodes[b].op != CF_OP_INPUT)
            st = reject(c, mm1, "the right operand of '%s' is '%s', a computed value; the second GEMM's "
                        "weight must be a graph input", nname(c, mm1, b1, sizeof b1),
                        nname(c, b, b2, sizeof b2));
        else if (g->nodes[b].dtype != g->nodes[src_of(c, mm0, 1)].dtype)
            st = reject(c, b, "weight '%s' is %s but the first GEMM's operands are %s",
                        g->nodes[b].name, cf_dtype_name(g->nodes[b].dtype),
                        cf_dtype_name(g->nodes[src_of(c, mm0, 1)].dtype));
    }
    /* Segments: a value depending on the second GEMM belongs to its epilogue (a dual
     * GEMM has one epilogue, over both accumulators).
     * Rows of S = F(X*W1) live in registers only until the second GEMM consumes
     * them, so nothing after it may read the first epilogue except through it. */
    for (int v = 0; v < c->n && st == CF_OK; v++) {
        if (!is_rep(c, v))
            continue;
        bool d1 = n_mm == 2 && depends_on(c, v, c->mm[1], memo1);
        if (c->dual) {
            c->seg[v] = d1 || depends_on(c, v, mm0, memo0) ? 0 : -1;
            continue;
        }
        c->seg[v] = d1 ? 1 : depends_on(c, v, mm0, memo0) ? 0 : -1;
        if (!d1 || v == c->mm[1])
            continue;
        for (int k = 0; k < 2; k++) {
            cf_value s = src_of(c, v, k);
            if (s >= 0 && c->seg[s] == 0 && !depends_on(c, s, c->mm[1], memo1))
                st = reject(c, v, "'%s' (after the second GEMM) reads '%s' from before it; the first "
                            "epilogue's values are not kept once the second GEMM consumes them",
                            nname(c, v, b1, sizeof b1), nname(c, s, b2, sizeof b2));
        }
    }
    free(memo0);
    free(memo1);
    return st;
}

/* ---- 3./4. stages and placement, one segment at a time ------------------ */

static cf_dim seg_n(lower_ctx *c, int s) { return c->g->nodes[c->mm[s]].dims[1]; }
static cf_dim seg_m(lower_ctx *c) { return c->g->nodes[c->mm[0]].dims[0]; }

/* The value's shape within segment s, or an error if it has none there. */
static cf_status shape_in_seg(lower_ctx *c, int s, cf_value v, cf_shape *out)
{
    const cf_node *n = &c->g->nodes[v];
    char b1[96];
    cf_dim M = seg_m(c), N = seg_n(c, s);
    if (n->rank == 0) {
        *out = CF_SHAPE_SCALAR;
    } else if (n->rank == 1 && n->dims[0] == M) {
        *out = CF_SHAPE_VEC_M;
    } else if (n->rank == 1 && n->dims[0] == N) {
        *out = CF_SHAPE_VEC_N;
    } else if (n->rank == 2 && n->dims[0] == M && n->dims[1] == N) {
        *out = CF_SHAPE_TILE;
    } else {
        const char *d0 = cf_graph_dim_name(c->g, n->dims[0]);
        const char *d1 = n->rank == 2 ? cf_graph_dim_name(c->g, n->dims[1]) : NULL;
        return reject(c, v, "'%s' has shape [%s%s%s], which does not broadcast to the GEMM output [%s, %s]",
                      nname(c, v, b1, sizeof b1), d0, d1 ? ", " : "", d1 ? d1 : "",
                      cf_graph_dim_name(c->g, M), cf_graph_dim_name(c->g, N));
    }
    return CF_OK;
}

static bool is_leaf(lower_ctx *c, cf_value v)
{
    cf_op op = c->g->nodes[v].op;
    return op == CF_OP_INPUT || op == CF_OP_CONST || op == CF_OP_PARAM;
}

static bool is_reduce(lower_ctx *c, cf_value v) { return cf_op_class_of(c->g->nodes[v].op) == CF_OPC_REDUCE; }

/* The stage from which v's value exists. */
static int avail(lower_ctx *c, cf_value v)
{
    return is_reduce(c, v) ? c->stage_of_red[v] + 1 : c->place[v];
}

/* Whether v enters segment s as an accumulator: its GEMM, or either GEMM of a dual one. */
static bool is_acc(lower_ctx *c, int s, cf_value v) { return v == c->mm[s] || (c->dual && v == c->mm[1]); }

/* Marks the closure of segment s: everything its sinks need, stopping at its
 * GEMM (which enters as the accumulator). */
static void close_segment(lower_ctx *c, int s)
{
    memset(c->in_seg, 0, (size_t)c->n * sizeof *c->in_seg);
    for (int i = 0; i < c->g->n_outputs; i++) {
        cf_value v = c->canon[c->g->outputs[i].value];
        if (c->seg[v] == s || (s == 0 && c->seg[v] == -1))
            c->in_seg[v] = true;
    }
    if (s == 0 && c->mm[1] >= 0 && !c->dual)
        c->in_seg[src_of(c, c->mm[1], 0)] = true;
    for (int v = c->n - 1; v >= 0; v--) {
        if (!c->in_seg[v] || is_acc(c, s, v))
            continue;
        for (int k = 0; k < 2; k++) {
            cf_value src = src_of(c, v, k);
            if (src >= 0)
                c->in_seg[src] = true;
        }
    }
}

static cf_status plan_segment(lower_ctx *c, int s)
{
    close_segment(c, s);
    cf_value mm = c->mm[s];
    int n_red = 0;
    /* Earliest stages, and one stage per reduction in topological order. */
    for (int v = 0; v < c->n; v++) {
        if (!c->in_seg[v])
            continue;
        cf_shape sh;
        cf_status st = shape_in_seg(c, s, v, &sh);
        if (st != CF_OK)
            return st;
        int e = 0;
        if (!is_acc(c, s, v) && !is_leaf(c, v))
            for (int k = 0; k < 2; k++) {
                cf_value src = src_of(c, v, k);
                if (src < 0)
                    continue;
                int a = is_reduce(c, src) ? c->stage_of_red[src] + 1 : c->earliest[src];
                if (a > e)
                    e = a;
            }
        c->earliest[v] = e;
        if (is_reduce(c, v) && v != mm) {
            if (sh != CF_SHAPE_VEC_M) {
                char b1[96];
                return reject(c, v, "'%s' is not a row reduction of the GEMM output",
                              nname(c, v, b1, sizeof b1));
            }
            /* Reductions close stages in topological order, one per stage: the
             * operand is ready by then (e <= n_red, since every value so far
             * exists by the stage after the last reduction seen). */
            CF_ASSERT(e <= n_red);
            c->stage_of_red[v] = n_red;
            n_red++;
        }
    }
    c->n_stages = n_red + 1;
    for (int i = 0; i < c->g->n_outputs; i++) {
        cf_value v = c->canon[c->g->outputs[i].value];
        cf_shape sh;
        if (!c->in_seg[v] || shape_in_seg(c, s, v, &sh) != CF_OK)
            continue;
        if (sh != CF_SHAPE_TILE && sh != CF_SHAPE_VEC_M) {
            return cf_errorf(c->err, CF_ERR_UNSUPPORTED, c->g->outputs[i].loc,
                             "cannot fuse: output '%s' is a %s; outputs must be [M, N] tiles or "
                             "[M] per-row values", c->g->outputs[i].name,
                             sh == CF_SHAPE_SCALAR ? "scalar" : "[N] vector");
        }
    }
    /* Placement: once, in the earliest stage that consumes the value. */
    for (int v = c->n - 1; v >= 0; v--) {
        if (!c->in_seg[v])
            continue;
        int p = -1, lu = -1;
        for (int i = 0; i < c->n_users[v]; i++) {
            cf_value u = c->users[v][i];
            if (!c->in_seg[u])
                continue; /* a consumer in the other segment (mm[1] itself) */
            int at = is_reduce(c, u) && u != mm ? c->stage_of_red[u] : c->place[u];
            if (p < 0 || at < p)
                p = at;
            if (at > lu)
                lu = at;
        }
        if (s == 0 && c->mm[1] >= 0 && !c->dual && v == src_of(c, c->mm[1], 0)) {
            int at = c->n_stages - 1; /* feeds the second GEMM from the last stage */
            if (p < 0 || at < p)
                p = at;
            if (at > lu)
                lu = at;
        }
        if (is_acc(c, s, v) || p < 0 || p < c->earliest[v])
            p = c->earliest[v]; /* the accumulator enters in stage 0; outputs-only values asap */
        c->place[v] = is_reduce(c, v) ? c->stage_of_red[v] : p;
        /* A value stored as an output is stored where it is placed. */
        c->last_use[v] = lu;
    }
    return CF_OK;
}

/* ---- emitting the IR ---------------------------------------------------- */

typedef struct stage_builder {
    cf_ir_spec *spec;
    int cap;
} stage_builder;

static cf_ir_node *new_node(lower_ctx *c, stage_builder *sb, cf_ir_kind kind, cf_shape shape, int s)
{
    cf_ir *ir = c->ir;
    cf_ir_spec *sp = sb->spec;
    if (sp->n_nodes == sb->cap) {
        int nc = sb->cap ? sb->cap * 2 : 16;
        cf_ir_node **nn = cf_arena_alloc(&ir->arena, (size_t)nc * sizeof *nn);
        if (!nn)
            return NULL;
        if (sp->n_nodes)
            memcpy(nn, sp->nodes, (size_t)sp->n_nodes * sizeof *nn);
        sp->nodes = nn;
        sb->cap = nc;
    }
    cf_ir_node *n = cf_arena_alloc(&ir->arena, sizeof *n);
    if (!n)
        return NULL;
    n->id = ir->n_nodes++;
    n->kind = kind;
    n->shape = shape;
    n->origin = -1;
    n->arg = -1;
    n->stage = sp->depth;
    n->gemm = s;
    sp->nodes[sp->n_nodes++] = n;
    return n;
}

/* Index of the A entry for a graph input/param/output, added on first use. */
static int arg_index(lower_ctx *c, cf_arg_kind kind, const char *name, cf_dtype t, int index, bool nk)
{
    cf_ir *ir = c->ir;
    for (int i = 0; i < ir->n_args; i++)
        if (ir->args[i].kind == kind && ir->args[i].index == index)
            return i;
    if (ir->n_args == c->cap_args) {
        int nc = c->cap_args ? c->cap_args * 2 : 8;
        cf_ir_arg *na = cf_arena_alloc(&ir->arena, (size_t)nc * sizeof *na);
        if (!na)
            return -1;
        if (ir->n_args)
            memcpy(na, ir->args, (size_t)ir->n_args * sizeof *na);
        ir->args = na;
        c->cap_args = nc;
    }
    ir->args[ir->n_args] = (cf_ir_arg){.kind = kind, .name = name, .dtype = t, .index = index,
                                       .b_is_nk = nk};
    return ir->n_args++;
}

static cf_ir_node *lower_leaf(lower_ctx *c, stage_builder *sb, int s, cf_value v)
{
    const cf_node *n = &c->g->nodes[v];
    cf_shape sh;
    if (shape_in_seg(c, s, v, &sh) != CF_OK)
        return NULL;
    cf_ir_node *x = new_node(c, sb, CF_IR_BCAST, sh, s);
    if (!x)
        return NULL;
    x->origin = v;
    x->name = n->name;
    if (n->op == CF_OP_CONST) {
        x->src = CF_BC_CONST;
        x->cval = n->cval;
        return x;
    }
    if (n->op == CF_OP_PARAM) {
        x->src = CF_BC_PARAM;
        x->arg = arg_index(c, CF_ARG_SCALAR, n->name, CF_F32, n->index, false);
    } else {
        static const cf_bcast_src src_of_shape[] = {CF_BC_CONST, CF_BC_VEC_N, CF_BC_VEC_M, CF_BC_TENSOR};
        static const cf_arg_kind arg_of_shape[] = {CF_ARG_SCALAR, CF_ARG_VEC_N, CF_ARG_VEC_M, CF_ARG_TENSOR};
        x->src = src_of_shape[sh];
        x->arg = arg_index(c, arg_of_shape[sh], n->name, n->dtype, n->index, false);
    }
    return x->arg < 0 ? NULL : x;
}

/* The IR node holding v in this stage: carried, placed here, or a leaf load. */
static cf_ir_node *operand(lower_ctx *c, stage_builder *sb, int s, cf_value v)
{
    if (c->cur[v])
        return c->cur[v];
    if (is_leaf(c, v))
        return c->cur[v] = lower_leaf(c, sb, s, v);
    return NULL; /* a bug in placement: the verifier-level assert below catches it */
}

/* A stage's entries: the accumulators (stage 0), the previous reduction's statistic and the
 * values carried past it (placeholders referring to the previous stage's nodes). */
static cf_status stage_entries(lower_ctx *c, stage_builder *sb, int s, int k)
{
    const cf_graph *g = c->g;
    for (int a = 0; k == 0 && a < (c->dual ? 2 : 1); a++) {
        cf_value mv = c->mm[s + a];
        cf_ir_node *acc = new_node(c, sb, CF_IR_ACC, CF_SHAPE_TILE, s);
        if (!acc)
            return oom(c);
        acc->origin = mv;
        acc->name = g->nodes[mv].name;
        acc->arg = c->dual ? 1 + a : -1; /* GEMM_B, GEMM2_B: cf_lower adds them first */
        c->cur[mv] = acc;
    }
    for (int v = 0; v < c->n; v++) {
        if (!c->in_seg[v] || is_leaf(c, v))
            continue;
        int a = is_acc(c, s, v) ? 0 : avail(c, v);
        bool stat = is_reduce(c, v) && a == k;
        bool carried = a < k && c->last_use[v] >= k;
        if (!stat && !carried)
            continue;
        cf_shape sh;
        shape_in_seg(c, s, v, &sh);
        cf_ir_node *ph = new_node(c, sb, CF_IR_PLACEHOLDER, sh, s);
        if (!ph)
            return oom(c);
        ph->is_stat = stat;
        ph->ref = c->prev[v];
        ph->origin = v;
        ph->name = g->nodes[v].name;
        CF_ASSERT(ph->ref);
        c->cur[v] = ph;
    }
    return CF_OK;
}

/* The values placed in stage k, in topological order; a reduction becomes its terminal. */
static cf_status stage_values(lower_ctx *c, stage_builder *sb, int s, int k)
{
    for (int v = 0; v < c->n; v++) {
        if (!c->in_seg[v] || is_acc(c, s, v) || is_leaf(c, v) || c->place[v] != k)
            continue;
        const cf_node *gn = &c->g->nodes[v];
        cf_op_class cls = cf_op_class_of(gn->op);
        cf_shape sh;
        shape_in_seg(c, s, v, &sh);
        cf_ir_node *args[2] = {NULL, NULL};
        int nargs = cls == CF_OPC_BINARY ? 2 : 1;
        for (int i = 0; i < nargs; i++) {
            args[i] = operand(c, sb, s, src_of(c, v, i));
            if (!args[i])
                return c->err && c->err->status ? c->err->status : oom(c);
        }
        cf_ir_node *x = new_node(c, sb, cls == CF_OPC_REDUCE ? CF_IR_REDUCE : CF_IR_COMPUTE, sh, s);
        if (!x)
            return oom(c);
        x->op = gn->op;
        x->nargs = nargs;
        x->args[0] = args[0];
        x->args[1] = args[1];
        x->origin = v;
        x->name = gn->name;
        if (cls == CF_OPC_REDUCE)
            sb->spec->terminal = x; /* the reduction's result lives on in the next stage */
        else
            c->cur[v] = x;
    }
    return CF_OK;
}

/* The graph outputs whose value is complete in stage k. */
static cf_status stage_stores(lower_ctx *c, stage_builder *sb, int s, int k)
{
    const cf_graph *g = c->g;
    cf_ir_spec *sp = sb->spec;
    for (int i = 0; i < g->n_outputs; i++) {
        const cf_output *o = &g->outputs[i];
        cf_value v = c->canon[o->value];
        if (!c->in_seg[v] || (c->seg[v] != s && !(s == 0 && c->seg[v] == -1)))
            continue;
        bool here = is_acc(c, s, v) ? k == 0 : is_leaf(c, v) ? k == 0 : avail(c, v) == k;
        if (!here)
            continue;
        cf_ir_node *val = operand(c, sb, s, v);
        if (!val)
            return oom(c);
        cf_ir_node *st = new_node(c, sb, CF_IR_STORE, val->shape, s);
        if (!st)
            return oom(c);
        st->nargs = 1;
        st->args[0] = val;
        st->name = o->name;
        st->arg = arg_index(c, CF_ARG_OUTPUT, o->name, o->dtype, i, false);
        if (st->arg < 0)
            return oom(c);
        if (!sp->terminal || sp->terminal->kind == CF_IR_STORE)
            sp->terminal = st;
    }
    return CF_OK;
}

/* B2B: the first epilogue's last stage ends in the second GEMM, fed by its left operand. */
static cf_status stage_b2b_matmul(lower_ctx *c, stage_builder *sb, int s)
{
    const cf_graph *g = c->g;
    cf_value a = src_of(c, c->mm[1], 0), b = src_of(c, c->mm[1], 1);
    cf_ir_node *val = operand(c, sb, s, a);
    cf_ir_node *mm = val ? new_node(c, sb, CF_IR_MATMUL, CF_SHAPE_TILE, s) : NULL;
    if (!mm)
        return oom(c);
    mm->nargs = 1;
    mm->args[0] = val;
    mm->origin = c->mm[1];
    mm->name = g->nodes[c->mm[1]].name;
    mm->arg = arg_index(c, CF_ARG_GEMM2_B, g->nodes[b].name, g->nodes[b].dtype, g->nodes[b].index,
                        g->nodes[c->mm[1]].axis == 1);
    if (mm->arg < 0)
        return oom(c);
    sb->spec->terminal = mm;
    return CF_OK;
}

/* The terminal reduction goes last: its stage ends with it. */
static void reduction_last(lower_ctx *c, cf_ir_spec *sp)
{
    if (!sp->terminal || sp->terminal->kind != CF_IR_REDUCE)
        return;
    int at = -1;
    for (int i = 0; i < sp->n_nodes; i++)
        if (sp->nodes[i] == sp->terminal)
            at = i;
    memmove(&sp->nodes[at], &sp->nodes[at + 1], (size_t)(sp->n_nodes - at - 1) * sizeof *sp->nodes);
    sp->nodes[sp->n_nodes - 1] = sp->terminal;
    c->cur[sp->terminal->origin] = sp->terminal;
}

/* Segment s (the epilogue of GEMM s) as a chain of stages, one per reduction depth. */
static cf_status emit_segment(lower_ctx *c, int s)
{
    cf_ir *ir = c->ir;
    cf_ir_spec **link = &ir->epi[s];
    memset(c->prev, 0, (size_t)c->n * sizeof *c->prev);
    for (int k = 0; k < c->n_stages; k++) {
        cf_ir_spec *sp = cf_arena_alloc(&ir->arena, sizeof *sp);
        if (!sp)
            return oom(c);
        sp->depth = k;
        *link = sp;
        link = &sp->post;
        stage_builder sb = {.spec = sp};
        memset(c->cur, 0, (size_t)c->n * sizeof *c->cur);
        cf_status st = stage_entries(c, &sb, s, k);
        if (st == CF_OK)
            st = stage_values(c, &sb, s, k);
        if (st == CF_OK)
            st = stage_stores(c, &sb, s, k);
        if (st == CF_OK && s == 0 && c->mm[1] >= 0 && !c->dual && k == c->n_stages - 1)
            st = stage_b2b_matmul(c, &sb, s);
        if (st != CF_OK)
            return st;
        reduction_last(c, sp);
        cf_ir_node **t = c->prev;
        c->prev = c->cur;
        c->cur = t;
    }
    ir->n_stages[s] = c->n_stages;
    return CF_OK;
}

/* What one fused kernel can take: its parameters must fit the block a launch passes, and
 * code generation (quadratic in the nodes of a stage) and NVRTC (in the reductions: 15 s
 * at 32; in the epilogue's inputs: 18 s at 64, 187 s at 128) must finish in seconds, not
 * hours. */
static cf_status check_limits(const cf_ir *ir, cf_error *err)
{
    int tile_outputs = 0, reductions = 0, inputs = 0;
    const size_t bytes = cf_ir_param_bytes(ir, &tile_outputs);
    if (bytes > CF_KERNEL_PARAM_BYTES)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "cannot fuse: the kernel's parameters take %zu bytes (%d [M, N] outputs at 140 bytes "
                         "each, %d epilogue arguments), over the %d bytes a launch passes; use fewer inputs, "
                         "outputs or params",
                         bytes, tile_outputs, ir->n_args - 2, CF_KERNEL_PARAM_BYTES);
    for (int i = 0; i < ir->n_args; i++)
        inputs += ir->args[i].kind == CF_ARG_VEC_N || ir->args[i].kind == CF_ARG_VEC_M ||
                  ir->args[i].kind == CF_ARG_TENSOR;
    for (int g = 0; g < ir->n_gemms; g++)
        for (const cf_ir_spec *sp = ir->epi[g]; sp; sp = sp->post)
            reductions += sp->terminal && sp->terminal->kind == CF_IR_REDUCE;
    if (ir->n_nodes > CF_IR_MAX_NODES)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "cannot fuse: the epilogue has %d nodes after Φ, over the limit of %d for one kernel",
                         ir->n_nodes, CF_IR_MAX_NODES);
    if (reductions > CF_IR_MAX_REDUCTIONS)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "cannot fuse: the epilogue has %d row reductions, over the limit of %d for one kernel",
                         reductions, CF_IR_MAX_REDUCTIONS);
    if (inputs > CF_IR_MAX_INPUTS)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "cannot fuse: the epilogue reads %d inputs besides the GEMM's operands, over the limit "
                         "of %d for one kernel",
                         inputs, CF_IR_MAX_INPUTS);
    return CF_OK;
}

cf_status cf_lower(const cf_graph *g, cf_ir **out, cf_error *err)
{
    cf_error_clear(err);
    if (!g || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_lower: NULL argument");
    *out = NULL;
    if (g->err.status != CF_OK) {
        if (err)
            *err = g->err;
        return g->err.status;
    }
    lower_ctx c = {.g = g, .err = err, .n = g->n_nodes, .mm = {-1, -1}};
    cf_status st = CF_OK;
    size_t n = (size_t)(c.n ? c.n : 1);
    c.live = calloc(n, sizeof *c.live);
    c.canon = calloc(n, sizeof *c.canon);
    c.n_users = calloc(n, sizeof *c.n_users);
    c.users = calloc(n, sizeof *c.users);
    c.seg = calloc(n, sizeof *c.seg);
    c.in_seg = calloc(n, sizeof *c.in_seg);
    c.stage_of_red = calloc(n, sizeof *c.stage_of_red);
    c.earliest = calloc(n, sizeof *c.earliest);
    c.place = calloc(n, sizeof *c.place);
    c.last_use = calloc(n, sizeof *c.last_use);
    c.cur = calloc(n, sizeof *c.cur);
    c.prev = calloc(n, sizeof *c.prev);
    c.ir = calloc(1, sizeof *c.ir);
    if (!c.live || !c.canon || !c.n_users || !c.users || !c.seg || !c.in_seg || !c.stage_of_red ||
        !c.earliest || !c.place || !c.last_use || !c.cur || !c.prev || !c.ir) {
        st = oom(&c);
        goto done;
    }
    c.ir->graph = g;
    c.ir->dim_n2 = -1;
    mark_live(&c);
    if ((st = number_values(&c)) != CF_OK || (st = build_users(&c)) != CF_OK ||
        (st = check_domain(&c)) != CF_OK)
        goto done;
    cf_ir *ir = c.ir;
    ir->n_gemms = c.mm[1] >= 0 && !c.dual ? 2 : 1;
    ir->dual = c.dual;
    const cf_node *mm0 = &g->nodes[c.mm[0]];
    const cf_node *X = &g->nodes[src_of(&c, c.mm[0], 0)], *W = &g->nodes[src_of(&c, c.mm[0], 1)];
    ir->dim_m = mm0->dims[0];
    ir->dim_n = mm0->dims[1];
    ir->dim_k = X->dims[1];
    if (ir->n_gemms == 2)
        ir->dim_n2 = g->nodes[c.mm[1]].dims[1];
    const cf_node *W2 = c.dual ? &g->nodes[src_of(&c, c.mm[1], 1)] : NULL;
    if (arg_index(&c, CF_ARG_GEMM_A, X->name, X->dtype, X->index, false) < 0 ||
        arg_index(&c, CF_ARG_GEMM_B, W->name, W->dtype, W->index, mm0->axis == 1) < 0 ||
        (W2 && arg_index(&c, CF_ARG_GEMM2_B, W2->name, W2->dtype, W2->index, mm0->axis == 1) < 0)) {
        st = oom(&c);
        goto done;
    }
    for (int s = 0; s < ir->n_gemms; s++) {
        if ((st = plan_segment(&c, s)) != CF_OK || (st = emit_segment(&c, s)) != CF_OK)
            goto done;
    }
    st = cf_ir_verify(ir, err);
    if (st == CF_OK)
        st = check_limits(ir, err);
done:
    for (int v = 0; c.users && v < c.n; v++)
        free(c.users[v]);
    free(c.live);
    free(c.canon);
    free(c.n_users);
    free(c.users);
    free(c.seg);
    free(c.in_seg);
    free(c.stage_of_red);
    free(c.earliest);
    free(c.place);
    free(c.last_use);
    free(c.cur);
    free(c.prev);
    if (st != CF_OK) {
        cf_ir_free(c.ir);
        return st;
    }
    *out = c.ir;
    return CF_OK;
}
