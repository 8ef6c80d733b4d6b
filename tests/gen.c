/* gen.c — random epilogue graphs from a seed (see gen.h), and the .cf writer. */
#include "gen.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG: splitmix64, so a case depends on its seed alone ---------------- */

typedef cfgen_rng rng;

uint64_t cfgen_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int cfgen_int(rng *r, int lo, int hi) { return lo + (int)(cfgen_next(r) % (uint64_t)(hi - lo + 1)); }
double cfgen_unif(rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(cfgen_next(r) >> 11) * 0x1p-53; }
bool cfgen_chance(rng *r, double p) { return cfgen_unif(r, 0, 1) < p; }

uint64_t cfgen_case_seed(uint64_t base, int i)
{
    rng r = {base + (uint64_t)i};
    return cfgen_next(&r);
}

#define rint_in cfgen_int
#define chance cfgen_chance

/* ---- the generator ---------------------------------------------------------
 * Every random draw and node creation is its own statement (never two in one
 * argument list, whose order C leaves open) so a seed means the same graph
 * under every compiler. */

#define POOL 128

typedef struct pool {
    cf_value v[POOL];
    int n;
} pool;

typedef struct gen {
    rng r;
    cf_graph *g;
    cf_dim M, N, K, N2, ncol; /* ncol: the columns of the current epilogue */
    pool tile, vm, vn, sc;    /* values of the current epilogue by shape   */
    int n_names, red_left, n_params;
    cf_dtype gemm_t;
    /* how often the operand of log, sqrt, rsqrt, 1/x, exp, pow and the divisor
     * are guarded (GPU mode: always, so f32 and f64 agree on what is finite) */
    double p_guard_unary, p_guard_div, p_guard_pow, p_vec_out;
    bool gpu, nonfinite;
} gen;

static void push(pool *p, cf_value v)
{
    if (v < 0)
        return;
    if (p->n < POOL)
        p->v[p->n++] = v;
    else
        p->v[POOL - 1] = v;
}

static cf_value pick(gen *G, const pool *p)
{
    if (p->n == 0)
        return -1;
    /* favour recent values so chains grow deep, but reach back too (bypasses) */
    if (p->n > 3 && chance(&G->r, 0.6))
        return p->v[p->n - 1 - rint_in(&G->r, 0, 2)];
    return p->v[rint_in(&G->r, 0, p->n - 1)];
}

static const cf_node *node(const gen *G, cf_value v) { return cf_graph_node(G->g, v); }

/* Files a value under its shape in the current epilogue. */
static cf_value keep(gen *G, cf_value v)
{
    const cf_node *n = node(G, v);
    if (!n)
        return v;
    if (n->rank == 2)
        push(&G->tile, v);
    else if (n->rank == 1 && n->dims[0] == G->M)
        push(&G->vm, v);
    else if (n->rank == 1)
        push(&G->vn, v);
    else
        push(&G->sc, v);
    return v;
}

static cf_dtype any_dtype(gen *G) { return (cf_dtype)rint_in(&G->r, 0, CF_DTYPE_COUNT - 1); }

static cf_value new_input(gen *G, const char *prefix, int rank, cf_dim d0, cf_dim d1, cf_dtype t)
{
    char name[32];
    snprintf(name, sizeof name, "%s%d", prefix, G->n_names++);
    return cf_graph_input(G->g, name, t, rank, (cf_dim[]){d0, d1});
}

static cf_value konst(gen *G)
{
    static const double cs[] = {0.5, 2, -1, 0.25, 3, -0.5, 1e-5, 1, 0, 1.5, -2, 10, 0.1};
    return cf_graph_const(G->g, cs[rint_in(&G->r, 0, CF_ARRAY_LEN(cs) - 1)]);
}

static cf_value param(gen *G)
{
    /* (GPU mode: at most CFGEN_MAX_PARAMS, which carry values) */
    if (G->n_params > 0 && (chance(&G->r, 0.4) || (G->gpu && G->n_params >= CFGEN_MAX_PARAMS)))
        return G->g->params[rint_in(&G->r, 0, G->n_params - 1)];
    char name[32];
    snprintf(name, sizeof name, "p%d", G->n_params++);
    return cf_graph_param(G->g, name);
}

static cf_value un(gen *G, cf_op op, cf_value x) { return cf_graph_unary(G->g, op, x); }
static cf_value bin(gen *G, cf_op op, cf_value a, cf_value b) { return cf_graph_binary(G->g, op, a, b); }

/* Something positive and away from 0 built from x: the domain of log, sqrt,
 * rsqrt and 1/x (used most of the time; raw operands are allowed too). */
static cf_value safe_pos(gen *G, cf_value x)
{
    switch (rint_in(&G->r, 0, 3)) {
    case 0: x = un(G, CF_OP_ABS, x); return bin(G, CF_OP_ADD, x, cf_graph_const(G->g, 0.5));
    case 1: x = un(G, CF_OP_SQUARE, x); return bin(G, CF_OP_ADD, x, cf_graph_const(G->g, 1));
    case 2: return un(G, CF_OP_EXP, un(G, CF_OP_TANH, x));
    default: x = un(G, CF_OP_SIGMOID, x); return bin(G, CF_OP_ADD, x, cf_graph_const(G->g, 0.25));
    }
}

/* Something of moderate size built from x (keeps exp() finite mostly). */
static cf_value squash(gen *G, cf_value x)
{
    switch (rint_in(&G->r, 0, 2)) {
    case 0: return un(G, CF_OP_TANH, x);
    case 1:
        if (G->gpu) /* bounded: exp must not overflow f32 where f64 does not */
            x = un(G, CF_OP_TANH, x);
        return bin(G, CF_OP_MUL, x, cf_graph_const(G->g, G->gpu ? 4 : 0.25));
    default: return un(G, CF_OP_SIGMOID, x);
    }
}

/* Any operand that broadcasts against a tile of the current epilogue. */
static cf_value pick_other(gen *G)
{
    cf_value v = -1;
    switch (rint_in(&G->r, 0, 8)) {
    case 0: v = pick(G, &G->tile); break;
    case 1:
        v = G->vn.n && chance(&G->r, 0.5) ? pick(G, &G->vn)
                                          : keep(G, new_input(G, "r", 1, G->ncol, -1, any_dtype(G)));
        break;
    case 2:
        v = G->vm.n && chance(&G->r, 0.5) ? pick(G, &G->vm)
                                          : keep(G, new_input(G, "c", 1, G->M, -1, any_dtype(G)));
        break;
    case 3: v = konst(G); break;
    case 4: v = param(G); break;
    case 5: v = new_input(G, "t", 2, G->M, G->ncol, any_dtype(G)); break;
    case 6: v = pick(G, &G->vm); break; /* often a reduction result */
    case 7: v = G->sc.n ? pick(G, &G->sc) : konst(G); break;
    default: v = pick(G, &G->tile); break;
    }
    return v >= 0 ? v : konst(G);
}

static cf_op any_unary(gen *G) { return (cf_op)rint_in(&G->r, CF_OP_NEG, CF_OP_TANH); }
static cf_op any_binary(gen *G) { return (cf_op)rint_in(&G->r, CF_OP_ADD, CF_OP_POW); }

static cf_value unary_step(gen *G, cf_value x)
{
    cf_op op = any_unary(G);
    if ((op == CF_OP_LOG || op == CF_OP_SQRT || op == CF_OP_RSQRT || op == CF_OP_RECIP) && chance(&G->r, G->p_guard_unary))
        x = safe_pos(G, x);
    if (op == CF_OP_EXP && chance(&G->r, G->p_guard_unary))
        x = squash(G, x);
    return un(G, op, x);
}

static cf_value pow_step(gen *G, cf_value a)
{
    static const double ex[] = {2, 3, 0.5, -1, 1.5, 2.5, -0.5};
    double e = ex[rint_in(&G->r, 0, CF_ARRAY_LEN(ex) - 1)];
    cf_value b = chance(&G->r, 0.7) ? cf_graph_const(G->g, e) : param(G);
    if (chance(&G->r, G->p_guard_pow))
        a = safe_pos(G, a);
    return bin(G, CF_OP_POW, a, b);
}

static cf_value binary_step(gen *G, cf_value a)
{
    cf_op op = any_binary(G);
    if (op == CF_OP_POW)
        return pow_step(G, a);
    cf_value b = pick_other(G);
    if (op == CF_OP_DIV && chance(&G->r, G->p_guard_div))
        b = safe_pos(G, b);
    bool swap = !chance(&G->r, 0.5);
    if (swap && op == CF_OP_DIV && G->gpu) /* GPU mode: the divisor is guarded either way */
        a = safe_pos(G, a);
    return swap ? bin(G, op, b, a) : bin(G, op, a, b);
}

static cf_value reduce_step(gen *G)
{
    static const cf_op ops[] = {CF_OP_SUM, CF_OP_MEAN, CF_OP_RMAX, CF_OP_RMIN};
    cf_value x = pick(G, &G->tile);
    cf_op rop = ops[rint_in(&G->r, 0, 3)];
    int axis = chance(&G->r, 0.5) ? -1 : 1;
    cf_value r = keep(G, cf_graph_reduce(G->g, rop, x, axis));
    G->red_left--;
    /* the reduced value used again after its reduction: a bypass */
    if (chance(&G->r, 0.7)) {
        static const cf_op use[] = {CF_OP_SUB, CF_OP_MUL, CF_OP_ADD, CF_OP_DIV, CF_OP_MAX};
        cf_op op = use[rint_in(&G->r, 0, CF_ARRAY_LEN(use) - 1)];
        cf_value s = op == CF_OP_DIV ? safe_pos(G, r) : r;
        bool swap = !chance(&G->r, 0.8);
        if (swap && op == CF_OP_DIV && G->gpu) /* GPU mode: x becomes the divisor */
            x = safe_pos(G, x);
        keep(G, swap ? bin(G, op, s, x) : bin(G, op, x, s));
    }
    return r;
}

/* LayerNorm, softmax or RMSNorm of x, as a user would write them. */
static cf_value norm_step(gen *G, cf_value x)
{
    cf_value eps = cf_graph_const(G->g, 1e-5);
    int kind = rint_in(&G->r, 0, 2);
    if (kind == 2 || G->red_left < 2) {
        cf_value ms = cf_graph_reduce(G->g, CF_OP_MEAN, un(G, CF_OP_SQUARE, x), -1);
        G->red_left--;
        cf_value y = bin(G, CF_OP_MUL, x, un(G, CF_OP_RSQRT, bin(G, CF_OP_ADD, ms, eps)));
        return chance(&G->r, 0.5) ? bin(G, CF_OP_MUL, y, new_input(G, "gamma", 1, G->ncol, -1, any_dtype(G))) : y;
    }
    G->red_left -= 2;
    if (kind == 0) {
        cf_value mu = keep(G, cf_graph_reduce(G->g, CF_OP_MEAN, x, -1));
        cf_value d = bin(G, CF_OP_SUB, x, mu);
        cf_value var = cf_graph_reduce(G->g, CF_OP_MEAN, un(G, CF_OP_SQUARE, d), -1);
        cf_value y = bin(G, CF_OP_MUL, d, un(G, CF_OP_RSQRT, bin(G, CF_OP_ADD, var, eps)));
        if (chance(&G->r, 0.5)) {
            y = bin(G, CF_OP_MUL, y, new_input(G, "gamma", 1, G->ncol, -1, any_dtype(G)));
            y = bin(G, CF_OP_ADD, y, new_input(G, "beta", 1, G->ncol, -1, any_dtype(G)));
        }
        return y;
    }
    cf_value e = un(G, CF_OP_EXP, bin(G, CF_OP_SUB, x, cf_graph_reduce(G->g, CF_OP_RMAX, x, -1)));
    return bin(G, CF_OP_DIV, e, cf_graph_reduce(G->g, CF_OP_SUM, e, -1));
}

/* The same expression built a second time, operands maybe swapped: CSE. */
static cf_value duplicate_step(gen *G)
{
    const pool *p = chance(&G->r, 0.7) ? &G->tile : &G->vm;
    cf_value v = pick(G, p);
    const cf_node *n = node(G, v);
    if (!n)
        return -1;
    switch (cf_op_class_of(n->op)) {
    case CF_OPC_UNARY: return un(G, n->op, n->src[0]);
    case CF_OPC_REDUCE: return cf_graph_reduce(G->g, n->op, n->src[0], n->axis);
    case CF_OPC_BINARY: {
        bool comm = n->op == CF_OP_ADD || n->op == CF_OP_MUL || n->op == CF_OP_MAX || n->op == CF_OP_MIN;
        bool swap = comm && chance(&G->r, 0.5);
        return bin(G, n->op, n->src[swap ? 1 : 0], n->src[swap ? 0 : 1]);
    }
    default: return -1;
    }
}

/* A per-row or per-column value computed from vectors and scalars. */
static cf_value vector_step(gen *G)
{
    bool use_m = G->vm.n && (!G->vn.n || chance(&G->r, 0.6));
    pool *p = use_m ? &G->vm : &G->vn;
    if (!p->n)
        return -1;
    cf_value a = pick(G, p);
    if (chance(&G->r, 0.5))
        return unary_step(G, a);
    cf_op op = any_binary(G);
    if (op == CF_OP_POW)
        return pow_step(G, a);
    cf_value b = chance(&G->r, 0.5) ? pick(G, p) : chance(&G->r, 0.5) ? konst(G) : param(G);
    if (op == CF_OP_DIV && chance(&G->r, G->p_guard_div))
        b = safe_pos(G, b);
    return bin(G, op, a, b);
}

/* NaN and Inf that f32 and f64 must agree on (GPU mode): unary ops straight on
 * inputs (an input's sign is exact on both sides), or a non-finite tile that
 * goes straight to an output of its own (an Inf times a value near 0 would
 * take the sign of rounding). */
static void nonfinite_step(gen *G)
{
    int kind = rint_in(&G->r, 0, 3);
    if (kind == 0) {
        cf_dtype t = any_dtype(G);
        cf_value x = new_input(G, "t", 2, G->M, G->ncol, t);
        x = un(G, chance(&G->r, 0.5) ? CF_OP_SQRT : CF_OP_LOG, x); /* NaN where t < 0 */
        cf_value y = pick(G, &G->tile); /* the tile pool holds only values of the GEMM */
        keep(G, bin(G, CF_OP_ADD, y, x));
    } else if (kind == 1) {
        cf_dtype t = any_dtype(G);
        keep(G, un(G, CF_OP_LOG, new_input(G, "c", 1, G->M, -1, t))); /* NaN rows */
    } else if (kind == 2) {
        cf_dtype t = any_dtype(G);
        keep(G, un(G, CF_OP_RSQRT, new_input(G, "r", 1, G->ncol, -1, t))); /* NaN columns */
    } else {
        cf_value x = un(G, CF_OP_ABS, pick(G, &G->tile)), v;
        if (chance(&G->r, 0.5)) { /* +inf: (|x| + 1) / 0 */
            v = bin(G, CF_OP_ADD, x, cf_graph_const(G->g, 1));
            v = bin(G, CF_OP_DIV, v, cf_graph_const(G->g, 0));
        } else { /* -inf: log(|x| * 0) */
            v = bin(G, CF_OP_MUL, x, cf_graph_const(G->g, 0));
            v = un(G, CF_OP_LOG, v);
        }
        char name[32];
        snprintf(name, sizeof name, "o%d", G->n_names++);
        cf_dtype t = any_dtype(G);
        cf_graph_output(G->g, name, v, t);
    }
}

static bool consumed(const cf_graph *g, cf_value v)
{
    for (int i = v + 1; i < g->n_nodes; i++)
        if (g->nodes[i].src[0] == v || g->nodes[i].src[1] == v)
            return true;
    return false;
}

/* Random steps, then the dangling values folded into one tile so that every
 * reduction stays live. */
static cf_value grow_epilogue(gen *G, int steps)
{
    for (int s = 0; s < steps || G->red_left > 0; s++) {
        int k = rint_in(&G->r, 0, 99);
        if (s >= steps)
            k = 60; /* only reductions left to place */
        if (G->nonfinite && k < 8)
            nonfinite_step(G);
        else if (k < 25)
            keep(G, unary_step(G, pick(G, &G->tile)));
        else if (k < 55)
            keep(G, binary_step(G, pick(G, &G->tile)));
        else if (k < 70 && G->red_left > 0)
            reduce_step(G);
        else if (k < 80)
            keep(G, vector_step(G));
        else if (k < 90)
            keep(G, duplicate_step(G));
        else if (G->red_left > 0)
            keep(G, norm_step(G, pick(G, &G->tile)));
        else
            keep(G, binary_step(G, pick(G, &G->tile)));
    }
    cf_value acc = G->tile.v[0]; /* the GEMM */
    cf_value fin = pick(G, &G->tile);
    const pool *ps[2] = {&G->tile, &G->vm};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ps[k]->n; i++) {
            cf_value v = ps[k]->v[i];
            const cf_node *n = node(G, v);
            if (v == fin || !n || n->op == CF_OP_INPUT || consumed(G->g, v))
                continue;
            if (n->op == CF_OP_MATMUL || cf_op_class_of(n->op) == CF_OPC_REDUCE || chance(&G->r, 0.5))
                fin = bin(G, CF_OP_ADD, fin, bin(G, CF_OP_MUL, v, cf_graph_const(G->g, 0.5)));
        }
    if (node(G, fin) && node(G, fin)->rank != 2)
        fin = bin(G, CF_OP_ADD, acc, fin);
    return keep(G, fin);
}

static void add_outputs(gen *G, cf_value fin, int extra)
{
    char name[32];
    snprintf(name, sizeof name, "o%d", G->n_names++);
    cf_graph_output(G->g, name, fin, any_dtype(G));
    for (int i = 0; i < extra; i++) {
        cf_value v = G->vm.n && chance(&G->r, G->p_vec_out) ? pick(G, &G->vm) : pick(G, &G->tile);
        snprintf(name, sizeof name, "o%d", G->n_names++);
        cf_graph_output(G->g, name, v, any_dtype(G));
    }
}

/* Builds the graph of one case; everything depends on seed (and big) only.
 * Big cases have rows long enough for the threads and many tiles. */
cfgen_case cfgen_property(uint64_t seed, bool big)
{
    gen G = {.r = {seed}, .p_guard_unary = 0.75, .p_guard_div = 0.7, .p_guard_pow = 0.7, .p_vec_out = 0.3};
    cfgen_case c = {0};
    G.g = cf_graph_new();
    c.g = G.g;
    G.M = cf_graph_dim(G.g, "M");
    G.N = cf_graph_dim(G.g, "N");
    G.K = cf_graph_dim(G.g, "K");
    c.dims[G.M] = big ? rint_in(&G.r, 100, 300) : rint_in(&G.r, 1, 9);
    c.dims[G.N] = big ? rint_in(&G.r, 100, 400) : rint_in(&G.r, 1, 70);
    c.dims[G.K] = big ? rint_in(&G.r, 20, 100) : rint_in(&G.r, 1, 20);
    G.ncol = G.N;
    G.gemm_t = chance(&G.r, 0.5) ? CF_BF16 : CF_F16;
    c.b2b = chance(&G.r, 0.1);
    int n_red = rint_in(&G.r, 0, 4);
    cf_value X = cf_graph_input(G.g, "X", G.gemm_t, 2, (cf_dim[]){G.M, G.K});
    bool nk = chance(&G.r, 0.5);
    cf_value W = cf_graph_input(G.g, "W", G.gemm_t, 2, nk ? (cf_dim[]){G.N, G.K} : (cf_dim[]){G.K, G.N});
    push(&G.tile, cf_graph_matmul(G.g, X, W));
    G.red_left = c.b2b ? rint_in(&G.r, 0, n_red < 2 ? n_red : 2) : n_red;
    int red1 = n_red - G.red_left;
    cf_value fin = grow_epilogue(&G, rint_in(&G.r, c.b2b ? 0 : 1, c.b2b ? 6 : 12));
    if (!c.b2b) {
        add_outputs(&G, fin, chance(&G.r, 0.4) ? rint_in(&G.r, 1, 2) : 0);
        return c;
    }
    if (chance(&G.r, 0.3))
        add_outputs(&G, pick(&G, &G.tile), 0); /* an intermediate output of S's epilogue */
    G.N2 = cf_graph_dim(G.g, "N2");
    c.dims[G.N2] = big ? rint_in(&G.r, 50, 200) : rint_in(&G.r, 1, 40);
    bool nk2 = chance(&G.r, 0.5);
    cf_value W2 = cf_graph_input(G.g, "W2", G.gemm_t, 2, nk2 ? (cf_dim[]){G.N2, G.N} : (cf_dim[]){G.N, G.N2});
    cf_value mm1 = cf_graph_matmul(G.g, fin, W2);
    /* the second epilogue sees only its GEMM, leaves and leaf-only values */
    pool vm_leaves = {.n = 0};
    for (int i = 0; i < G.vm.n; i++)
        if (node(&G, G.vm.v[i])->op == CF_OP_INPUT)
            push(&vm_leaves, G.vm.v[i]);
    G.tile = (pool){.n = 0};
    G.vn = (pool){.n = 0};
    G.vm = vm_leaves;
    push(&G.tile, mm1);
    G.ncol = G.N2;
    G.red_left = red1;
    fin = grow_epilogue(&G, rint_in(&G.r, 0, 5));
    add_outputs(&G, fin, chance(&G.r, 0.3) ? 1 : 0);
    return c;
}


/* ---- GPU mode ---------------------------------------------------------------- */

/* A multiple of 8 in about [lo, hi], moved off multiples of 64 where it can be
 * (ragged tiles are where kernels go wrong). */
static int ragged8(rng *r, int lo, int hi)
{
    int v = 8 * rint_in(r, (lo + 7) / 8, hi / 8);
    if (v % 64 == 0 && v + 8 <= hi && chance(r, 0.8))
        v += 8;
    return v;
}

/* GPU-sized dims: every class of M, N and K the kernels treat differently,
 * with M * N * K kept small enough for the float64 reference. */
static void gpu_shape(gen *G, cfgen_case *c)
{
    rng *r = &G->r;
    c->align = chance(r, 0.12) ? CFGEN_ODD_PITCH : CFGEN_ALIGN16;
    int mb = rint_in(r, 0, 9), nb = rint_in(r, 0, 19);
    int64_t M = mb < 3 ? rint_in(r, 1, 200) : mb < 8 ? rint_in(r, 200, 2000) : rint_in(r, 2000, 6000), N, K;
    if (nb < 3)
        N = 128 * rint_in(r, 1, 32); /* whole tiles */
    else if (nb < 5)
        N = ragged8(r, 8, 64); /* less than one tile */
    else if (nb < 7) {
        N = ragged8(r, 8200, 20000); /* wider than one cluster: the wide-row path */
        M = M < 300 ? M : 1 + M % 300;
    } else if (nb < 8)
        N = ragged8(r, 4096, 8192);
    else
        N = ragged8(r, 8, 4096);
    K = chance(r, 0.25) ? 64 * rint_in(r, 1, 32) : ragged8(r, 8, 2048);
    if (c->align == CFGEN_ODD_PITCH) {
        int which = rint_in(r, 0, 2);
        if (which != 1)
            N += rint_in(r, 1, 7);
        if (which != 0)
            K += rint_in(r, 1, 7);
    }
    while (M > 1 && (double)M * (double)N * (double)K > 6e8)
        M = (M + 1) / 2;
    if (chance(r, 0.1)) {
        /* Many tiles per CTA and long K: a warpgroup's ring stages interleave with the other's
         * over several tiles (where an input stage landing late once broke the ring's parity).
         * gpu-check samples 256 rows from M > 1024, so the reference stays cheap. */
        M = rint_in(r, 2048, 8192);
        N = c->align == CFGEN_ODD_PITCH ? N % 8 + ragged8(r, 1024, 4096) : ragged8(r, 1024, 4096);
        K = c->align == CFGEN_ODD_PITCH ? K % 8 + 64 * rint_in(r, 16, 64) : 64 * rint_in(r, 16, 64);
    }
    c->dims[G->M] = M;
    c->dims[G->N] = N;
    c->dims[G->K] = K;
}

/* Puts in a feature Φ must reject (after the epilogue is built). */
static void plant(gen *G, cfgen_reject what)
{
    char name[32];
    snprintf(name, sizeof name, "o%d", G->n_names++);
    cf_value v = -1, x = pick(G, &G->tile);
    switch (what) {
    case CFGEN_REJ_VEC_N_OUTPUT:
        v = new_input(G, "r", 1, G->N, -1, CF_F32);
        v = bin(G, CF_OP_MUL, v, cf_graph_const(G->g, 2));
        break;
    case CFGEN_REJ_COL_REDUCE:
        v = cf_graph_reduce(G->g, CF_OP_SUM, x, 0);
        v = bin(G, CF_OP_ADD, x, v);
        break;
    case CFGEN_REJ_TRANSPOSE: v = cf_graph_transpose(G->g, x); break;
    case CFGEN_REJ_SCALAR_OUTPUT:
        v = param(G);
        v = bin(G, CF_OP_MUL, v, cf_graph_const(G->g, 2));
        break;
    default: return; /* the prologue is planted before the GEMM */
    }
    cf_graph_output(G->g, name, v, CF_F32);
}

static double param_value(rng *r)
{
    double p = round(cfgen_unif(r, -2, 2) * 1000) / 1000; /* prints exactly as %.3f */
    return fabs(p) < 0.05 ? 0.5 : p;
}

cfgen_case cfgen_gpu(uint64_t seed)
{
    gen G = {.r = {seed}, .p_guard_unary = 1, .p_guard_div = 1, .p_guard_pow = 1, .p_vec_out = 0.45, .gpu = true};
    cfgen_case c = {0};
    G.g = cf_graph_new();
    c.g = G.g;
    G.M = cf_graph_dim(G.g, "M");
    G.N = cf_graph_dim(G.g, "N");
    G.K = cf_graph_dim(G.g, "K");
    gpu_shape(&G, &c);
    G.ncol = G.N;
    G.gemm_t = chance(&G.r, 0.5) ? CF_BF16 : CF_F16;
    c.planted = chance(&G.r, 0.07) ? (cfgen_reject)rint_in(&G.r, 1, CFGEN_REJ_COUNT - 1) : CFGEN_REJ_NONE;
    c.nonfinite = chance(&G.r, 0.2);
    G.nonfinite = c.nonfinite;
    int n_red = rint_in(&G.r, 0, 4);
    cf_value X = cf_graph_input(G.g, "X", G.gemm_t, 2, (cf_dim[]){G.M, G.K});
    if (c.planted == CFGEN_REJ_PROLOGUE)
        X = un(&G, CF_OP_RELU, X);
    bool nk = chance(&G.r, 0.5);
    cf_value W = cf_graph_input(G.g, "W", G.gemm_t, 2, nk ? (cf_dim[]){G.N, G.K} : (cf_dim[]){G.K, G.N});
    push(&G.tile, cf_graph_matmul(G.g, X, W));
    G.red_left = n_red;
    cf_value fin = grow_epilogue(&G, rint_in(&G.r, 1, 12));
    add_outputs(&G, fin, rint_in(&G.r, 0, 3));
    if (c.planted != CFGEN_REJ_NONE && c.planted != CFGEN_REJ_PROLOGUE)
        plant(&G, c.planted);
    for (int i = 0; i < G.n_params && i < CFGEN_MAX_PARAMS; i++)
        c.params[i] = param_value(&G.r);
    return c;
}

const char *cfgen_reject_name(cfgen_reject r)
{
    static const char *names[] = {"none", "vec-n-output", "col-reduce", "transpose", "prologue", "scalar-output"};
    return (unsigned)r < CFGEN_REJ_COUNT ? names[r] : "?";
}

const char *cfgen_align_name(cfgen_align a) { return a == CFGEN_ALIGN16 ? "align16" : "odd-pitch"; }

void cfgen_shape_text(const cfgen_case *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < cf_graph_num_dims(c->g) && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s=%lld", d ? "," : "", cf_graph_dim_name(c->g, d),
                               (long long)c->dims[d]);
}

void cfgen_params_text(const cfgen_case *c, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < cf_graph_num_params(c->g) && i < CFGEN_MAX_PARAMS && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s=%.3f", i ? "," : "", cf_graph_param_name(c->g, i),
                               c->params[i]);
}

/* ---- the .cf writer -------------------------------------------------------------- */

static bool write_operand(const cf_graph *g, cf_value v, cf_strbuf *out)
{
    const cf_node *n = cf_graph_node(g, v);
    if (!n)
        return false;
    if (n->op == CF_OP_CONST) {
        if (!isfinite(n->cval)) /* the language has no inf or nan literal */
            return false;
        cf_sb_printf(out, signbit(n->cval) ? "(%.17g)" : "%.17g", n->cval);
    } else if (n->op == CF_OP_INPUT || n->op == CF_OP_PARAM)
        cf_sb_puts(out, n->name);
    else
        cf_sb_printf(out, "v%d", v);
    return true;
}

static bool write_node(const cf_graph *g, cf_value v, cf_strbuf *out)
{
    const cf_node *n = &g->nodes[v];
    cf_op_class cl = cf_op_class_of(n->op);
    if (cl == CF_OPC_LEAF)
        return true;
    cf_sb_printf(out, "v%d = %s(", v, cf_op_name(n->op));
    bool ok = write_operand(g, n->src[0], out);
    if (cl == CF_OPC_BINARY || cl == CF_OPC_MATMUL) {
        cf_sb_puts(out, ", ");
        ok = ok && write_operand(g, n->src[1], out);
    } else if (cl == CF_OPC_REDUCE)
        cf_sb_printf(out, ", axis=%d", n->axis);
    cf_sb_puts(out, ")\n");
    return ok;
}

bool cfgen_write_spec(const cf_graph *g, const char *header, cf_strbuf *out)
{
    if (cf_graph_error(g)->status != CF_OK)
        return false;
    for (const char *h = header; h && *h;) {
        size_t len = strcspn(h, "\n");
        cf_sb_printf(out, "# %.*s\n", (int)len, h);
        h += len + (h[len] == '\n');
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const cf_node *n = &g->nodes[g->inputs[i]];
        cf_sb_printf(out, "input %s: %s[%s", n->name, cf_dtype_name(n->dtype), cf_graph_dim_name(g, n->dims[0]));
        if (n->rank == 2)
            cf_sb_printf(out, ", %s", cf_graph_dim_name(g, n->dims[1]));
        cf_sb_puts(out, "]\n");
    }
    for (int i = 0; i < g->n_params; i++)
        cf_sb_printf(out, "param %s\n", g->nodes[g->params[i]].name);
    bool ok = true;
    for (int v = 0; v < g->n_nodes && ok; v++)
        ok = write_node(g, v, out);
    for (int i = 0; i < g->n_outputs && ok; i++) {
        cf_sb_printf(out, "output %s: %s = ", g->outputs[i].name, cf_dtype_name(g->outputs[i].dtype));
        ok = write_operand(g, g->outputs[i].value, out);
        cf_sb_puts(out, "\n");
    }
    return ok;
}

/* ---- the conditioning screen ------------------------------------------------------ */

/* `comfuse run --check` compares f32 kernels with a float64 reference, by
 * relative Frobenius error, NaN/Inf exactly.  A graph whose outputs move
 * by most of the tolerance when X*W moves as the path moves it, whose NaN/Inf
 * pattern moves, or whose values leave the f32 range, can fail there without a
 * defect: the screen finds those on the CPU, at 16 rows of the real N.  It
 * runs the spec with X*W times an input "cfgen_noise" and every computed value
 * as an output, twice: noise 1, then (X*W + 2^-18 u) / (X*W) (fused: f32
 * accumulation, whose error does not shrink with X*W; the unfused path's f32 C
 * moves the same). */

#define SCREEN_ROWS 16
#define SCREEN_K 32

static char *screen_spec(const cf_graph *g)
{
    cf_strbuf sb = {0};
    if (!cfgen_write_spec(g, NULL, &sb))
        return NULL;
    cf_strbuf out = {0};
    cf_sb_puts(&out, "input cfgen_noise: f32[M, N]\n");
    for (const char *l = sb.data; *l;) {
        size_t len = strcspn(l, "\n");
        const char *mm = strstr(l, " = matmul(");
        if (mm && mm < l + len)
            cf_sb_printf(&out, "%.*s = mul(%.*s, cfgen_noise)\n", (int)(mm - l), l, (int)(l + len - mm - 3), mm + 3);
        else
            cf_sb_printf(&out, "%.*s\n", (int)len, l);
        l += len + (l[len] == '\n');
    }
    for (int v = 0; v < g->n_nodes; v++)
        if (cf_op_class_of(g->nodes[v].op) != CF_OPC_LEAF)
            cf_sb_printf(&out, "output cfgen_v%d: f32 = v%d\n", v, v);
    cf_sb_free(&sb);
    return out.data;
}

/* C = X*W over the screen's rows, in double, from the 16-bit operands. */
static double gemm_at(const cf_graph *s, const int64_t *sd, void *const *in, int64_t i, int64_t j)
{
    const void *x = NULL, *w = NULL;
    cf_tensor_info tw = {0};
    for (int a = 0; a < cf_graph_num_inputs(s); a++) {
        cf_tensor_info t = cf_graph_input_info(s, a);
        if (!strcmp(t.name, "X"))
            x = in[a];
        if (!strcmp(t.name, "W")) {
            w = in[a];
            tw = t;
        }
    }
    cf_dim K = cf_graph_dim((cf_graph *)s, "K"), N = cf_graph_dim((cf_graph *)s, "N");
    bool nk = tw.dims[0] == N, bf = tw.dtype == CF_BF16;
    double acc = 0;
    for (int64_t k = 0; k < sd[K]; k++) {
        uint16_t xv = ((const uint16_t *)x)[i * sd[K] + k], wv = ((const uint16_t *)w)[nk ? j * sd[K] + k : k * sd[N] + j];
        acc += (double)(bf ? cf_bf16_to_f32(xv) : cf_f16_to_f32(xv)) * (bf ? cf_bf16_to_f32(wv) : cf_f16_to_f32(wv));
    }
    return acc;
}

/* The noise of the kernels' f32 accumulation (see above) into the noise input. */
static void screen_noise(const cf_graph *s, const int64_t *sd, void *const *in, int which)
{
    cf_dim M = cf_graph_dim((cf_graph *)s, "M"), N = cf_graph_dim((cf_graph *)s, "N");
    float *noise = in[which];
    rng r = {99};
    for (int64_t i = 0; i < sd[M]; i++)
        for (int64_t j = 0; j < sd[N]; j++) {
            double c = gemm_at(s, sd, in, i, j);
            double moved = c + cfgen_unif(&r, -1, 1) * 0x1p-18; /* absolute: X*W is about unit size */
            noise[i * sd[N] + j] = c != 0 ? (float)(moved / c) : 1;
        }
}

/* Inputs as `comfuse run` draws them (cli_gpu.c fill_inputs): uniform in
 * [-1, 1), 16-bit matrices scaled so X*W has about unit variance at the real
 * dims (the fewer columns of K here scaled up to match). */
static void screen_inputs(const cfgen_case *c, const cf_graph *s, const int64_t *sdims, uint64_t seed, void **in)
{
    double ks = pow((double)c->dims[2] / (double)sdims[cf_graph_dim((cf_graph *)s, "K")], 0.25);
    for (int i = 0; i < cf_graph_num_inputs(s); i++) {
        cf_tensor_info t = cf_graph_input_info(s, i);
        int64_t n = sdims[t.dims[0]] * (t.rank == 2 ? sdims[t.dims[1]] : 1);
        rng r = {seed * 0x100000001B3ull + (uint64_t)i * 7919u + 1};
        bool noise = strcmp(t.name, "cfgen_noise") == 0;
        double scale = 1;
        if (t.rank == 2 && t.dtype != CF_F32) { /* real dims: M, N or K by name */
            int64_t d0 = c->dims[cf_graph_dim(c->g, cf_graph_dim_name(s, t.dims[0]))];
            int64_t d1 = c->dims[cf_graph_dim(c->g, cf_graph_dim_name(s, t.dims[1]))];
            scale = 1.7 / sqrt(sqrt((double)(d0 < d1 ? d0 : d1)));
            if (!strcmp(t.name, "X") || !strcmp(t.name, "W"))
                scale *= ks;
        }
        for (int64_t e = 0; e < n; e++) {
            double u = cfgen_unif(&r, -1, 1);
            float x = (float)(noise ? 1 : u * scale);
            if (t.dtype == CF_F32)
                ((float *)in[i])[e] = x;
            else
                ((uint16_t *)in[i])[e] = t.dtype == CF_BF16 ? cf_f32_to_bf16(x) : cf_f32_to_f16(x);
        }
    }
}

/* Compares the two runs; false (why set) where the check could fail. */
static bool screen_compare(const cf_graph *g, const cf_graph *s, double *const *a, double *const *b,
                           const int64_t *lens, char *why, size_t n)
{
    for (int o = 0; o < cf_graph_num_outputs(s); o++) {
        bool user = o < g->n_outputs; /* the graph's own outputs come first */
        cf_dtype t = cf_graph_output_info(s, o).dtype;
        if (user)
            t = g->outputs[o].dtype;
        double err2 = 0, ref2 = 0, round2 = 0, lim = t == CF_F16 ? 65504 : 3e38;
        for (int64_t i = 0; i < lens[o]; i++) {
            double x = a[o][i], y = b[o][i];
            if (isfinite(x) && fabs(x) <= lim && t != CF_F32) {   /* the output type's own rounding */
                float f = (float)x, r = t == CF_F16 ? cf_f16_to_f32(cf_f32_to_f16(f)) : cf_bf16_to_f32(cf_f32_to_bf16(f));
                round2 += (r - x) * (r - x);
            }
            if (isfinite(x) != isfinite(y) || (!isfinite(x) && !(x == y || (isnan(x) && isnan(y))))) {
                snprintf(why, n, "NaN/Inf pattern of %s moves with X*W", cf_graph_output_info(s, o).name);
                return false;
            }
            if (isfinite(x) && fabs(x) > 1e30) {
                snprintf(why, n, "%s reaches %.3g (f32 range)", cf_graph_output_info(s, o).name, x);
                return false;
            }
            if (isfinite(x) && fabs(x) <= lim) {
                err2 += (x - y) * (x - y);
                ref2 += x * x;
            }
        }
        double rel = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2), tol = t == CF_F32 ? 2e-3 : 1e-2;
        if (user && ref2 > 0 && sqrt(round2 / ref2) > 0.5 * tol) {   /* values in the 16-bit subnormals */
            snprintf(why, n, "output %s: rounding to %s alone moves it by %.2g (its values are subnormal there)",
                     g->outputs[o].name, cf_dtype_name(t), sqrt(round2 / ref2));
            return false;
        }
        if (user && rel > 0.8 * tol) {
            snprintf(why, n, "output %s moves by %.2g (relative; the check allows %g) when X*W moves by 2^-18 "
                     "(absolute)", g->outputs[o].name, rel, tol);
            return false;
        }
    }
    return true;
}

bool cfgen_screen(const cfgen_case *c, char *why, size_t n)
{
    snprintf(why, n, "ok");
    char *text = screen_spec(c->g);
    cf_graph *s = NULL;
    cf_error err;
    if (!text || cf_spec_parse(text, strlen(text), "<screen>", &s, &err) != CF_OK) {
        snprintf(why, n, "cannot screen: %s", text ? err.msg : "the graph cannot be written");
        free(text);
        return false;
    }
    free(text);
    int64_t sd[CF_MAX_DIMS];
    for (int d = 0; d < cf_graph_num_dims(s); d++) {
        int64_t real = c->dims[cf_graph_dim(c->g, cf_graph_dim_name(s, d))];
        const char *name = cf_graph_dim_name(s, d);
        sd[d] = !strcmp(name, "M") ? (real < SCREEN_ROWS ? real : SCREEN_ROWS)
                : !strcmp(name, "K") ? (real < SCREEN_K ? real : SCREEN_K) : real;
    }
    int ni = cf_graph_num_inputs(s), no = cf_graph_num_outputs(s);
    void **in[2] = {calloc((size_t)ni, sizeof(void *)), calloc((size_t)ni, sizeof(void *))};
    double **out[2] = {calloc((size_t)no, sizeof(double *)), calloc((size_t)no, sizeof(double *))};
    int64_t *lens = calloc((size_t)no, sizeof *lens);
    bool ok = in[0] && in[1] && out[0] && out[1] && lens;
    for (int i = 0; ok && i < ni; i++) {
        cf_tensor_info t = cf_graph_input_info(s, i);
        size_t bytes = (size_t)(sd[t.dims[0]] * (t.rank == 2 ? sd[t.dims[1]] : 1)) * cf_dtype_size(t.dtype);
        in[0][i] = malloc(bytes);
        in[1][i] = malloc(bytes);
        ok = in[0][i] && in[1][i];
    }
    for (int o = 0; ok && o < no; o++) {
        cf_tensor_info t = cf_graph_output_info(s, o);
        lens[o] = t.rank == 0 ? 1 : sd[t.dims[0]] * (t.rank == 2 ? sd[t.dims[1]] : 1);
        out[0][o] = malloc((size_t)lens[o] * sizeof(double));
        out[1][o] = malloc((size_t)lens[o] * sizeof(double));
        ok = out[0][o] && out[1][o];
    }
    int which = 0;
    for (int i = 0; i < ni; i++)
        if (!strcmp(cf_graph_input_info(s, i).name, "cfgen_noise"))
            which = i;
    for (int k = 0; ok && k < 2; k++) {
        screen_inputs(c, s, sd, 17, in[k]);
        if (k == 1)
            screen_noise(s, sd, in[k], which);
        cf_bindings b = {sd, (const void *const *)in[k], c->params};
        ok = cf_reference_run(s, &b, out[k], &err) == CF_OK;
        if (!ok)
            snprintf(why, n, "cannot screen: %s", err.msg);
    }
    if (ok)
        ok = screen_compare(c->g, s, out[0], out[1], lens, why, n);
    else if (!strncmp(why, "ok", 3))
        snprintf(why, n, "cannot screen: out of memory");
    for (int k = 0; k < 2; k++) {
        for (int i = 0; in[k] && i < ni; i++)
            free(in[k][i]);
        for (int o = 0; out[k] && o < no; o++)
            free(out[k][o]);
        free(in[k]);
        free(out[k]);
    }
    free(lens);
    cf_graph_free(s);
    return ok;
}
