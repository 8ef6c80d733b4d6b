/* test_property.c — Φ preserves semantics: random epilogue DAGs, lowered and
 * interpreted stage by stage, against the float64 reference on the original
 * graph.
 *
 * Each case comes from its own seed (CF_PROP_SEED and CF_PROP_COUNT override
 * the base seed and the count; a failure prints the case's seed, the graph
 * and its IR, and CF_PROP_CASE=<seed> reruns just that case, with CF_PROP_BIG=1
 * if it was a big one).  The two runs differ only in the order of floating-point sums
 * (hierarchical vs sequential reductions), so the tolerance is a first-order
 * forward error bound computed alongside a shadow evaluation of the graph:
 * each element carries an error bound e and an "uncertain" flag set where an
 * order-of-summation change could legitimately change the result's class
 * (an operand interval touching a pole, a domain edge or overflow, or the
 * sign of an exact zero reaching 1/x).  Certain elements must match within
 * 16 e, with NaN == NaN and infinities equal; uncertain ones are counted. */
#include "cf_internal.h"
#include "test_util.h"

#include <float.h>
#include <stdint.h>
#include <time.h>

#define SAFETY 16.0
#define U 0x1p-53 /* unit roundoff of double */

/* ---- PRNG: splitmix64, so a case depends on its seed alone ---------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int rint_in(rng *r, int lo, int hi) { return lo + (int)(rnext(r) % (uint64_t)(hi - lo + 1)); }
static double runif(rng *r, double lo, double hi) { return lo + (hi - lo) * (double)(rnext(r) >> 11) * 0x1p-53; }
static bool chance(rng *r, double p) { return runif(r, 0, 1) < p; }

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
    if (G->n_params > 0 && chance(&G->r, 0.4))
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
    case 1: return bin(G, CF_OP_MUL, x, cf_graph_const(G->g, 0.25));
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
    if ((op == CF_OP_LOG || op == CF_OP_SQRT || op == CF_OP_RSQRT || op == CF_OP_RECIP) && chance(&G->r, 0.75))
        x = safe_pos(G, x);
    if (op == CF_OP_EXP && chance(&G->r, 0.75))
        x = squash(G, x);
    return un(G, op, x);
}

static cf_value pow_step(gen *G, cf_value a)
{
    static const double ex[] = {2, 3, 0.5, -1, 1.5, 2.5, -0.5};
    double e = ex[rint_in(&G->r, 0, CF_ARRAY_LEN(ex) - 1)];
    cf_value b = chance(&G->r, 0.7) ? cf_graph_const(G->g, e) : param(G);
    if (chance(&G->r, 0.7))
        a = safe_pos(G, a);
    return bin(G, CF_OP_POW, a, b);
}

static cf_value binary_step(gen *G, cf_value a)
{
    cf_op op = any_binary(G);
    if (op == CF_OP_POW)
        return pow_step(G, a);
    cf_value b = pick_other(G);
    if (op == CF_OP_DIV && chance(&G->r, 0.7))
        b = safe_pos(G, b);
    return chance(&G->r, 0.5) ? bin(G, op, a, b) : bin(G, op, b, a);
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
        keep(G, chance(&G->r, 0.8) ? bin(G, op, x, s) : bin(G, op, s, x));
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
    if (op == CF_OP_DIV && chance(&G->r, 0.7))
        b = safe_pos(G, b);
    return bin(G, op, a, b);
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
        if (k < 25)
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
        cf_value v = G->vm.n && chance(&G->r, 0.3) ? pick(G, &G->vm) : pick(G, &G->tile);
        snprintf(name, sizeof name, "o%d", G->n_names++);
        cf_graph_output(G->g, name, v, any_dtype(G));
    }
}

typedef struct gcase {
    cf_graph *g;
    bool b2b;
    int64_t dims[4];
} gcase;

/* Builds the graph of one case; everything depends on seed (and big) only.
 * Big cases have rows long enough for the threads and many tiles. */
static gcase generate(uint64_t seed, bool big)
{
    gen G = {.r = {seed}};
    gcase c = {0};
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

/* ---- inputs -------------------------------------------------------------------- */

typedef struct binding_set {
    int n_in;
    void **in;
    double *params;
} binding_set;

static void store_elem(void *p, cf_dtype t, int64_t i, double v)
{
    if (t == CF_F32)
        ((float *)p)[i] = (float)v;
    else if (t == CF_BF16)
        ((uint16_t *)p)[i] = cf_f32_to_bf16((float)v);
    else
        ((uint16_t *)p)[i] = cf_f32_to_f16((float)v);
}

static binding_set make_inputs(const cf_graph *g, const int64_t *dims, uint64_t seed)
{
    rng r = {seed ^ 0x5eed5eed5eedull};
    binding_set bs = {.n_in = g->n_inputs};
    bs.in = calloc((size_t)g->n_inputs + 1, sizeof *bs.in);
    bs.params = calloc((size_t)g->n_params + 1, sizeof *bs.params);
    bool specials = chance(&r, 0.08);
    for (int i = 0; i < g->n_inputs; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        int64_t n = dims[t.dims[0]] * (t.rank == 2 ? dims[t.dims[1]] : 1);
        bs.in[i] = calloc((size_t)n, cf_dtype_size(t.dtype));
        double span = t.name[0] == 'X' || t.name[0] == 'W' ? 1.0 : 1.5;
        for (int64_t e = 0; e < n; e++)
            store_elem(bs.in[i], t.dtype, e, runif(&r, -span, span));
        if (specials && chance(&r, 0.4)) {
            static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0};
            int64_t at = (int64_t)(rnext(&r) % (uint64_t)n);
            store_elem(bs.in[i], t.dtype, at, sp[rint_in(&r, 0, 3)]);
        }
    }
    for (int i = 0; i < g->n_params; i++)
        bs.params[i] = runif(&r, -2, 2);
    return bs;
}

static void free_inputs(binding_set *bs)
{
    for (int i = 0; i < bs->n_in; i++)
        free(bs->in[i]);
    free(bs->in);
    free(bs->params);
}

/* ---- the shadow evaluation: values, error bounds, uncertainty --------------------- */

typedef struct shadow {
    double *v, *e;
    unsigned char *u;
    int64_t rows, cols;
} shadow;

static double load_elem(const void *p, cf_dtype t, int64_t i)
{
    return t == CF_F32 ? ((const float *)p)[i]
           : t == CF_BF16 ? cf_bf16_to_f32(((const uint16_t *)p)[i])
                          : cf_f16_to_f32(((const uint16_t *)p)[i]);
}

static int fclass(double x) { return isnan(x) ? 0 : x == INFINITY ? 1 : x == -INFINITY ? 2 : 3; }

/* |x| * e without inf * 0 = NaN when e is 0. */
static double term(double x, double e) { return e > 0 ? fabs(x) * e : 0; }

static double dunary(cf_op op, double a)
{
    switch (op) {
    case CF_OP_EXP: return exp(a);
    case CF_OP_LOG: return 1 / fabs(a);
    case CF_OP_SQRT: return 0.5 / sqrt(fabs(a));
    case CF_OP_RSQRT: return 0.5 / (fabs(a) * sqrt(fabs(a)));
    case CF_OP_SQUARE: return 2 * fabs(a);
    case CF_OP_RECIP: return 1 / (a * a);
    case CF_OP_GELU:
    case CF_OP_GELU_ERF: return 1.2; /* max |gelu'| is about 1.13 */
    case CF_OP_SILU: return 1.1;
    case CF_OP_SIGMOID: return 0.25;
    default: return 1; /* neg, abs, relu, tanh */
    }
}

/* Whether a result of r, finite, is ill-determined given its bound e. */
static bool shaky(double r, double e) { return !isfinite(e) || fabs(r) > 1e300 || e > 1e300; }

static void sh_unary(cf_op op, double a, double ea, bool ua, double *r, double *e, bool *u)
{
    *r = cf_eval_unary(op, a);
    *u = ua;
    if (ea > 0) { /* the class of the result must not depend on where in a +- ea we are */
        int c = fclass(*r);
        *u |= fclass(cf_eval_unary(op, a - SAFETY * ea)) != c || fclass(cf_eval_unary(op, a + SAFETY * ea)) != c;
    }
    bool pole = op == CF_OP_LOG || op == CF_OP_RSQRT || op == CF_OP_RECIP || op == CF_OP_SQRT;
    if (pole && (a == 0 || SAFETY * ea >= 0.25 * fabs(a))) /* incl. the sign of an exact zero */
        *u = true;
    if (!isfinite(*r)) {
        *e = 0;
        return;
    }
    *e = term(dunary(op, a), ea) + 4 * U * fabs(*r);
    *u |= shaky(*r, *e);
}

static void sh_binary(cf_op op, double a, double ea, bool ua, double b, double eb, bool ub, double *r,
                      double *e, bool *u)
{
    *r = cf_eval_binary(op, a, b);
    *u = ua || ub;
    if (ea > 0 || eb > 0) {
        int c = fclass(*r);
        for (int sa = -1; sa <= 1; sa += 2)
            for (int sb = -1; sb <= 1; sb += 2)
                *u |= fclass(cf_eval_binary(op, a + sa * SAFETY * ea, b + sb * SAFETY * eb)) != c;
    }
    if (op == CF_OP_DIV && (b == 0 || SAFETY * eb >= 0.25 * fabs(b)))
        *u = true;
    if (op == CF_OP_POW && (b < 0 || b != floor(b)) && (a == 0 || SAFETY * ea >= 0.25 * fabs(a)))
        *u = true;
    if (!isfinite(*r)) {
        *e = 0;
        return;
    }
    switch (op) {
    case CF_OP_ADD:
    case CF_OP_SUB: *e = ea + eb; break;
    case CF_OP_MUL: *e = term(b, ea) + term(a, eb) + ea * eb; break;
    case CF_OP_DIV: *e = term(1 / b, ea) + term(a / (b * b), eb); break;
    case CF_OP_MAX:
    case CF_OP_MIN: *e = ea > eb ? ea : eb; break;
    default: /* POW */
        *e = term(b * pow(a, b - 1), ea) + term(log(fabs(a)) * *r, eb);
        break;
    }
    *e += 4 * U * fabs(*r);
    *u |= shaky(*r, *e);
}

static bool sh_alloc(shadow *s, int64_t rows, int64_t cols)
{
    s->rows = rows;
    s->cols = cols;
    s->v = calloc((size_t)(rows * cols), sizeof *s->v);
    s->e = calloc((size_t)(rows * cols), sizeof *s->e);
    s->u = calloc((size_t)(rows * cols), sizeof *s->u);
    return s->v && s->e && s->u;
}

static void sh_free(shadow *s)
{
    free(s->v);
    free(s->e);
    free(s->u);
    memset(s, 0, sizeof *s);
}

/* Index of operand element for result element (i, j), as the reference broadcasts. */
static int64_t bidx(const cf_node *o, const cf_node *res, const shadow *os, int64_t i, int64_t j)
{
    if (o->rank == 0)
        return 0;
    if (o->rank == res->rank)
        return i * os->cols + j;
    return o->dims[0] == res->dims[0] ? i : j;
}

/* Evaluates every node (the graphs are small) into sh[]. */
static void shadow_run(const cf_graph *g, const int64_t *dims, const binding_set *bs, shadow *sh)
{
    for (int v = 0; v < g->n_nodes; v++) {
        const cf_node *n = &g->nodes[v];
        int64_t rows = n->rank == 2 ? dims[n->dims[0]] : 1;
        int64_t cols = n->rank == 2 ? dims[n->dims[1]] : n->rank == 1 ? dims[n->dims[0]] : 1;
        shadow *s = &sh[v];
        CF_ASSERT(sh_alloc(s, rows, cols));
        const shadow *a = n->src[0] >= 0 ? &sh[n->src[0]] : NULL, *b = n->src[1] >= 0 ? &sh[n->src[1]] : NULL;
        switch (cf_op_class_of(n->op)) {
        case CF_OPC_LEAF:
            for (int64_t i = 0; i < rows * cols; i++)
                s->v[i] = n->op == CF_OP_CONST ? n->cval
                          : n->op == CF_OP_PARAM ? bs->params[n->index]
                                                 : load_elem(bs->in[n->index], n->dtype, i);
            break;
        case CF_OPC_UNARY:
            for (int64_t i = 0; i < rows * cols; i++) {
                bool u;
                sh_unary(n->op, a->v[i], a->e[i], a->u[i], &s->v[i], &s->e[i], &u);
                s->u[i] = u;
            }
            break;
        case CF_OPC_BINARY:
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    int64_t ia = bidx(&g->nodes[n->src[0]], n, a, i, j), ib = bidx(&g->nodes[n->src[1]], n, b, i, j);
                    bool u;
                    sh_binary(n->op, a->v[ia], a->e[ia], a->u[ia], b->v[ib], b->e[ib], b->u[ib], &s->v[i * cols + j],
                              &s->e[i * cols + j], &u);
                    s->u[i * cols + j] = u;
                }
            break;
        case CF_OPC_REDUCE:
            if (n->axis != 1) /* not fusible: the negative cases never run it */
                break;
            for (int64_t i = 0; i < a->rows; i++) {
                double acc = n->op == CF_OP_RMAX ? -INFINITY : n->op == CF_OP_RMIN ? INFINITY : 0, mag = 0, err = 0;
                bool unc = false;
                for (int64_t j = 0; j < a->cols; j++) {
                    double x = a->v[i * a->cols + j], ex = a->e[i * a->cols + j];
                    unc |= a->u[i * a->cols + j];
                    if (n->op == CF_OP_RMAX || n->op == CF_OP_RMIN) {
                        acc = (isnan(x) || (n->op == CF_OP_RMAX ? x > acc : x < acc)) ? x : acc;
                        err = ex > err ? ex : err;
                    } else {
                        acc += x;
                        if (isfinite(x))
                            mag += fabs(x);
                        err += ex;
                    }
                }
                if (n->op == CF_OP_SUM || n->op == CF_OP_MEAN) {
                    /* any two summation orders differ by at most 2 (n-1) u sum|x| */
                    err += 2 * (double)a->cols * U * mag;
                    unc |= mag > 1e300;
                    if (n->op == CF_OP_MEAN) {
                        acc /= (double)a->cols;
                        err = err / (double)a->cols + 2 * U * fabs(acc);
                    }
                }
                s->v[i] = acc;
                s->e[i] = isfinite(acc) ? err : 0;
                s->u[i] = unc || (isfinite(acc) && shaky(acc, err));
            }
            break;
        case CF_OPC_MATMUL: {
            int64_t K = a->cols;
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < cols; j++) {
                    double acc = 0, mag = 0, err = 0;
                    bool unc = false, nonfinite = false, any_err = false;
                    for (int64_t k = 0; k < K; k++) {
                        int64_t ia = i * K + k, ib = n->axis == 1 ? j * K + k : k * cols + j;
                        double x = a->v[ia], w = b->v[ib], p = x * w;
                        acc += p;
                        unc |= a->u[ia] || b->u[ib];
                        nonfinite |= !isfinite(x) || !isfinite(w);
                        any_err |= a->e[ia] > 0 || b->e[ib] > 0;
                        if (isfinite(p))
                            mag += fabs(p);
                        err += term(w, a->e[ia]) + term(x, b->e[ib]) + a->e[ia] * b->e[ib];
                    }
                    err += 2 * (double)K * U * mag;
                    s->v[i * cols + j] = acc;
                    s->e[i * cols + j] = isfinite(acc) ? err : 0;
                    s->u[i * cols + j] = unc || (nonfinite && any_err) || mag > 1e300 ||
                                         (isfinite(acc) && shaky(acc, err));
                }
            break;
        }
        case CF_OPC_LAYOUT: break;
        }
    }
}

/* ---- one case ------------------------------------------------------------------- */

typedef struct stats {
    int cases, b2b, reds[6], failures;
    bool big; /* the current case is a big one */
    long compared, exact_nonfinite, skipped, finite;
} stats;

static void dump_graph(const cf_graph *g, FILE *f)
{
    char b0[96], b1[96], b2[96];
    for (int v = 0; v < g->n_nodes; v++) {
        const cf_node *n = &g->nodes[v];
        fprintf(f, "  %%%d = %s", v, cf_op_name(n->op));
        if (n->op == CF_OP_INPUT || n->op == CF_OP_PARAM)
            fprintf(f, " %s%s%s", n->name, n->op == CF_OP_INPUT ? " " : "",
                    n->op == CF_OP_INPUT ? cf_dtype_name(n->dtype) : "");
        else if (n->op == CF_OP_CONST)
            fprintf(f, " %.17g", n->cval);
        else
            fprintf(f, "(%s%s%s)", cf_graph_node_name(g, n->src[0], b0, sizeof b0), n->src[1] >= 0 ? ", " : "",
                    n->src[1] >= 0 ? cf_graph_node_name(g, n->src[1], b1, sizeof b1) : "");
        if (cf_op_class_of(n->op) == CF_OPC_REDUCE)
            fprintf(f, " axis %d", n->axis);
        fprintf(f, " : rank %d [%s, %s]  (%s)\n", n->rank, n->rank ? cf_graph_dim_name(g, n->dims[0]) : "-",
                n->rank == 2 ? cf_graph_dim_name(g, n->dims[1]) : "-", cf_graph_node_name(g, v, b2, sizeof b2));
    }
    for (int i = 0; i < g->n_outputs; i++)
        fprintf(f, "  output %s = %%%d %s\n", g->outputs[i].name, g->outputs[i].value,
                cf_dtype_name(g->outputs[i].dtype));
}

static char *ir_text(const cf_ir *ir)
{
    cf_strbuf sb = {0};
    cf_ir_format(ir, &sb);
    return sb.data; /* caller frees */
}

/* No graph value is computed by two IR nodes of one epilogue: bypasses carry,
 * never recompute.  (A B2B graph's two epilogues may each compute a value that
 * depends on leaves only: nothing survives from the first into the second.) */
static bool computed_once(const cf_ir *ir)
{
    int *seen = calloc((size_t)ir->graph->n_nodes * 2, sizeof *seen);
    bool ok = true;
    for (int gi = 0; gi < ir->n_gemms; gi++)
        for (const cf_ir_spec *sp = ir->epi[gi]; sp; sp = sp->post)
            for (int i = 0; i < sp->n_nodes; i++) {
                const cf_ir_node *x = sp->nodes[i];
                if ((x->kind == CF_IR_COMPUTE || x->kind == CF_IR_REDUCE) &&
                    seen[gi * ir->graph->n_nodes + x->origin]++)
                    ok = false;
            }
    free(seen);
    return ok;
}

/* The first line where two texts differ, both versions, for a failure report. */
static void first_diff(const char *a, const char *b, char *out, size_t n)
{
    if (!a || !b) {
        snprintf(out, n, "(lowering failed the second time)\n");
        return;
    }
    int line = 1;
    const char *la = a, *lb = b;
    while (*a && *a == *b) {
        if (*a == '\n') {
            line++;
            la = a + 1;
            lb = b + 1;
        }
        a++, b++;
    }
    int ea = (int)strcspn(la, "\n"), eb = (int)strcspn(lb, "\n");
    snprintf(out, n, "first difference at IR line %d:\n  < %.*s\n  > %.*s\n", line, ea, la, eb, lb);
}

static void fail_case(stats *st, int idx, uint64_t seed, const cf_graph *g, const cf_ir *ir, const char *what)
{
    st->failures++;
    tu_failed++;
    if (st->failures > 3)
        return;
    fprintf(stderr, "test_property: case %d (seed 0x%016llx%s): %s\n", idx, (unsigned long long)seed,
            st->big ? ", big" : "", what);
    fprintf(stderr, "graph:\n");
    dump_graph(g, stderr);
    if (ir) {
        fprintf(stderr, "IR:\n");
        cf_ir_print(ir, stderr);
    }
}

static void run_case(stats *st, int idx, uint64_t seed, bool big)
{
    gcase c = generate(seed, big);
    cf_graph *g = c.g;
    st->big = big;
    char msg[2400];
    if (cf_graph_error(g)->status != CF_OK) {
        snprintf(msg, sizeof msg, "the generator built an invalid graph: %s", cf_graph_error(g)->msg);
        fail_case(st, idx, seed, g, NULL, msg);
        cf_graph_free(g);
        return;
    }
    cf_ir *ir = NULL, *ir2 = NULL, *ir3 = NULL;
    cf_error err;
    cf_status s = cf_lower(g, &ir, &err);
    if (s != CF_OK) {
        snprintf(msg, sizeof msg, "cf_lower: %s: %s", cf_status_name(s), err.msg);
        fail_case(st, idx, seed, g, NULL, msg);
        cf_graph_free(g);
        return;
    }
    tu_passed++;
    st->cases++;
    st->b2b += ir->n_gemms == 2;
    int nred = ir->n_stages[0] - 1 + (ir->n_gemms == 2 ? ir->n_stages[1] - 1 : 0);
    st->reds[nred < 5 ? nred : 5]++;
    if ((ir->n_gemms == 2) != c.b2b)
        fail_case(st, idx, seed, g, ir, "the IR's GEMM count differs from the graph's");
    if (!computed_once(ir))
        fail_case(st, idx, seed, g, ir, "a graph value is computed twice in the IR");

    /* determinism: the same graph twice, and the same seed rebuilt */
    gcase c2 = generate(seed, big);
    char *t1 = ir_text(ir), *t2 = NULL, *t3 = NULL;
    if (cf_lower(g, &ir2, &err) == CF_OK)
        t2 = ir_text(ir2);
    if (cf_lower(c2.g, &ir3, &err) == CF_OK)
        t3 = ir_text(ir3);
    if (!t1 || !t2 || strcmp(t1, t2) != 0) {
        first_diff(t1, t2, msg, sizeof msg);
        fail_case(st, idx, seed, g, ir, "lowering the same graph twice gave different IR text");
        fprintf(stderr, "%s", st->failures <= 3 ? msg : "");
    } else if (!t3 || strcmp(t1, t3) != 0) {
        first_diff(t1, t3, msg, sizeof msg);
        fail_case(st, idx, seed, g, ir, "rebuilding the graph from the same seed gave different IR text");
        fprintf(stderr, "%s", st->failures <= 3 ? msg : "");
    } else
        tu_passed++;
    free(t1);
    free(t2);
    free(t3);
    cf_ir_free(ir2);
    cf_ir_free(ir3);
    cf_graph_free(c2.g);

    /* run both ways */
    binding_set bs = make_inputs(g, c.dims, seed);
    cf_bindings b = {c.dims, (const void *const *)bs.in, bs.params};
    int no = g->n_outputs;
    double **ref = calloc((size_t)no, sizeof *ref), **got = calloc((size_t)no, sizeof *got);
    int64_t *len = calloc((size_t)no, sizeof *len);
    for (int o = 0; o < no; o++) {
        cf_tensor_info t = cf_graph_output_info(g, o);
        len[o] = t.rank == 0 ? 1 : c.dims[t.dims[0]] * (t.rank == 2 ? c.dims[t.dims[1]] : 1);
        ref[o] = malloc((size_t)len[o] * sizeof **ref);
        got[o] = malloc((size_t)len[o] * sizeof **got);
        for (int64_t i = 0; i < len[o]; i++)
            got[o][i] = -7777.25; /* catches elements the interpreter never writes */
    }
    cf_status sr = cf_reference_run(g, &b, ref, &err);
    if (sr != CF_OK) {
        snprintf(msg, sizeof msg, "cf_reference_run: %s", err.msg);
        fail_case(st, idx, seed, g, ir, msg);
    }
    cf_status si = cf_ir_interpret(ir, &b, got, &err);
    if (si != CF_OK) {
        snprintf(msg, sizeof msg, "cf_ir_interpret: %s", err.msg);
        fail_case(st, idx, seed, g, ir, msg);
    }
    if (sr == CF_OK && si == CF_OK) {
        shadow *sh = calloc((size_t)g->n_nodes, sizeof *sh);
        shadow_run(g, c.dims, &bs, sh);
        bool ok = true;
        for (int o = 0; o < no && ok; o++) {
            const shadow *so = &sh[g->outputs[o].value];
            for (int64_t i = 0; i < len[o] && ok; i++) {
                double r = ref[o][i], v = got[o][i], tol = SAFETY * so->e[i];
                if (so->u[i]) {
                    st->skipped++;
                    continue;
                }
                st->compared++;
                bool same;
                if (isnan(r) || isnan(v) || isinf(r) || isinf(v)) {
                    same = (isnan(r) && isnan(v)) || r == v;
                    st->exact_nonfinite += same;
                } else {
                    same = fabs(r - v) <= tol;
                    st->finite++;
                }
                if (!same) {
                    snprintf(msg, sizeof msg,
                             "output '%s' element %lld (row %lld): reference %.17g, interpreter %.17g, "
                             "tolerance %.3g (shadow %.17g)",
                             g->outputs[o].name, (long long)i,
                             (long long)(cf_graph_output_info(g, o).rank == 2 ? i / c.dims[cf_graph_output_info(g, o).dims[1]] : i),
                             r, v, tol, so->v[i]);
                    fail_case(st, idx, seed, g, ir, msg);
                    ok = false;
                }
            }
        }
        if (ok)
            tu_passed++;
        for (int v = 0; v < g->n_nodes; v++)
            sh_free(&sh[v]);
        free(sh);
    }
    for (int o = 0; o < no; o++) {
        free(ref[o]);
        free(got[o]);
    }
    free(ref);
    free(got);
    free(len);
    free_inputs(&bs);
    cf_ir_free(ir);
    cf_graph_free(g);
}

/* ---- graphs Φ must reject, naming the node -------------------------------------- */

static void expect_unsupported(cf_graph *g, const char *needle)
{
    cf_ir *ir = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_graph_error(g)->status);
    CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_lower(g, &ir, &err));
    CHECK(ir == NULL);
    CHECK_CONTAINS(err.msg, needle);
    cf_ir_free(ir);
    cf_graph_free(g);
}

static cf_graph *base(cf_value *X, cf_value *W, cf_dim *M, cf_dim *N, cf_dim *K)
{
    cf_graph *g = cf_graph_new();
    *M = cf_graph_dim(g, "M");
    *N = cf_graph_dim(g, "N");
    *K = cf_graph_dim(g, "K");
    *X = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){*M, *K});
    *W = cf_graph_input(g, "W", CF_BF16, 2, (cf_dim[]){*K, *N});
    return g;
}

static void test_negative(void)
{
    cf_value X, W, v;
    cf_dim M, N, K;

    cf_graph *g = base(&X, &W, &M, &N, &K);
    v = cf_graph_reduce(g, CF_OP_SUM, cf_graph_matmul(g, X, W), 0);
    cf_graph_set_name(g, v, "colsum");
    cf_graph_output(g, "Y", v, CF_F32);
    expect_unsupported(g, "'colsum'");

    g = base(&X, &W, &M, &N, &K);
    v = cf_graph_transpose(g, cf_graph_matmul(g, X, W));
    cf_graph_set_name(g, v, "flipped");
    cf_graph_output(g, "Y", v, CF_F32);
    expect_unsupported(g, "'flipped'");

    g = base(&X, &W, &M, &N, &K);
    cf_value xs = cf_graph_unary(g, CF_OP_RELU, X);
    cf_graph_set_name(g, xs, "xrelu");
    cf_graph_output(g, "Y", cf_graph_matmul(g, xs, W), CF_F32);
    expect_unsupported(g, "'xrelu'");

    g = base(&X, &W, &M, &N, &K);
    cf_value X2 = cf_graph_input(g, "X2", CF_BF16, 2, (cf_dim[]){M, K});
    cf_value a = cf_graph_matmul(g, X, W), b = cf_graph_matmul(g, X2, W);
    cf_graph_set_name(g, a, "left_mm");
    cf_graph_set_name(g, b, "right_mm");
    cf_graph_output(g, "Y", cf_graph_binary(g, CF_OP_ADD, a, b), CF_F32);
    expect_unsupported(g, "'right_mm'");
}

/* ---- the interpreter refuses bad bindings and malformed IR -------------------- */

static cf_ir_node *find_kind(cf_ir *ir, int stage, cf_ir_kind kind)
{
    cf_ir_spec *sp = ir->epi[0];
    while (sp && stage-- > 0)
        sp = sp->post;
    for (int i = 0; sp && i < sp->n_nodes; i++)
        if (sp->nodes[i]->kind == kind)
            return sp->nodes[i];
    return NULL;
}

static void test_interp_errors(void)
{
    cf_value X, W;
    cf_dim M, N, K;
    cf_graph *g = base(&X, &W, &M, &N, &K);
    cf_value bias = cf_graph_input(g, "bias", CF_F32, 1, (cf_dim[]){N});
    cf_value x = cf_graph_binary(g, CF_OP_ADD, cf_graph_binary(g, CF_OP_MUL, cf_graph_matmul(g, X, W),
                                                                cf_graph_param(g, "alpha")), bias);
    cf_value mu = cf_graph_reduce(g, CF_OP_MEAN, x, -1);
    cf_value d = cf_graph_binary(g, CF_OP_SUB, x, mu);
    cf_value var = cf_graph_reduce(g, CF_OP_MEAN, cf_graph_unary(g, CF_OP_SQUARE, d), -1);
    cf_graph_output(g, "Y", cf_graph_binary(g, CF_OP_MUL, d, cf_graph_unary(g, CF_OP_RSQRT, var)), CF_BF16);
    cf_graph_output(g, "mu", mu, CF_F32);
    cf_ir *ir = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_lower(g, &ir, &err));
    if (!ir) {
        cf_graph_free(g);
        return;
    }
    int64_t dims[3] = {5, 67, 3};
    uint16_t xv[5 * 3], wv[3 * 67];
    float bv[67];
    for (int i = 0; i < 15; i++)
        xv[i] = cf_f32_to_bf16((float)(i % 7) - 3);
    for (int i = 0; i < 3 * 67; i++)
        wv[i] = cf_f32_to_bf16((float)(i % 5) - 2);
    for (int i = 0; i < 67; i++)
        bv[i] = (float)i / 10;
    const void *in[3] = {xv, wv, bv};
    double params[1] = {0.5};
    double y[5 * 67], m[5], yr[5 * 67], mr[5];
    double *outs[2] = {y, m}, *routs[2] = {yr, mr};
    cf_bindings b = {dims, in, params};
    CHECK_EQ_INT(CF_OK, cf_ir_interpret(ir, &b, outs, &err));
    CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, routs, &err));
    int bad = 0;
    for (int i = 0; i < 5 * 67; i++)
        bad += fabs(y[i] - yr[i]) > 1e-12 * (1 + fabs(yr[i]));
    for (int i = 0; i < 5; i++)
        bad += fabs(m[i] - mr[i]) > 1e-12 * (1 + fabs(mr[i]));
    CHECK_EQ_INT(0, bad);

    dims[1] = 0;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(ir, &b, outs, &err));
    CHECK_CONTAINS(err.msg, "'N'");
    dims[1] = 67;
    in[2] = NULL;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(ir, &b, outs, &err));
    CHECK_CONTAINS(err.msg, "'bias'");
    in[2] = bv;
    b.params = NULL;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(ir, &b, outs, &err));
    CHECK_CONTAINS(err.msg, "'alpha'");
    b.params = params;
    outs[1] = NULL;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(ir, &b, outs, &err));
    CHECK_CONTAINS(err.msg, "'mu'");
    outs[1] = m;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(ir, &b, NULL, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_interpret(NULL, &b, outs, &err));
    dims[0] = (int64_t)1 << 62;
    CHECK_EQ_INT(CF_ERR_NO_MEMORY, cf_ir_interpret(ir, &b, outs, &err));
    dims[0] = 5;

    /* malformed IR: each tampering is reported, then undone */
    cf_ir_node *sub = NULL, *red = find_kind(ir, 1, CF_IR_REDUCE), *ph = find_kind(ir, 2, CF_IR_PLACEHOLDER);
    cf_ir_node *acc = find_kind(ir, 0, CF_IR_ACC), *store = find_kind(ir, 2, CF_IR_STORE);
    for (int i = 0; i < ir->epi[0]->post->n_nodes; i++)
        if (ir->epi[0]->post->nodes[i]->kind == CF_IR_COMPUTE && ir->epi[0]->post->nodes[i]->op == CF_OP_SUB)
            sub = ir->epi[0]->post->nodes[i];
    CHECK(sub && red && ph && acc && store);
    if (sub && red && ph && acc && store) {
        cf_ir_node *save = sub->args[0];
        sub->args[0] = acc; /* an edge from stage 0 into stage 1 */
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_interpret(ir, &b, outs, &err));
        CHECK_CONTAINS(err.msg, "edges must stay inside a stage");
        sub->args[0] = save;

        red->op = CF_OP_ADD;
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_interpret(ir, &b, outs, &err));
        CHECK_CONTAINS(err.msg, "reduces with op");
        red->op = CF_OP_MEAN;

        save = ph->ref;
        ph->ref = acc; /* two stages back */
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_interpret(ir, &b, outs, &err));
        CHECK_CONTAINS(err.msg, "not in the previous stage");
        ph->ref = save;

        cf_shape sh = sub->shape;
        sub->shape = CF_SHAPE_VEC_N; /* narrower than its tile operand */
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_interpret(ir, &b, outs, &err));
        CHECK_CONTAINS(err.msg, "operands span");
        sub->shape = sh;

        int arg = store->arg;
        store->arg = 0; /* GEMM_A, not an output */
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_interpret(ir, &b, outs, &err));
        store->arg = arg;

        CHECK_EQ_INT(CF_OK, cf_ir_interpret(ir, &b, outs, &err));
    }
    cf_ir_free(ir);
    cf_graph_free(g);
}

int main(void)
{
    uint64_t base_seed = 0xC0FFEE1234ull;
    int count = 2000;
    if (getenv("CF_PROP_SEED"))
        base_seed = strtoull(getenv("CF_PROP_SEED"), NULL, 0);
    if (getenv("CF_PROP_COUNT"))
        count = atoi(getenv("CF_PROP_COUNT"));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    stats st = {0};
    if (getenv("CF_PROP_CASE")) { /* rerun one case by the seed a failure printed */
        run_case(&st, 0, strtoull(getenv("CF_PROP_CASE"), NULL, 0), getenv("CF_PROP_BIG") != NULL);
        return tu_finish("test_property");
    }
    for (int i = 0; i < count; i++) {
        rng r = {base_seed + (uint64_t)i};
        run_case(&st, i, rnext(&r), i % 100 == 99);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("test_property: %d graphs from seed 0x%llx in %.2f s: by reductions 0:%d 1:%d 2:%d 3:%d 4:%d (>4:%d); "
           "B2B %d\n",
           st.cases, (unsigned long long)base_seed, secs, st.reds[0], st.reds[1], st.reds[2], st.reds[3],
           st.reds[4], st.reds[5], st.b2b);
    printf("test_property: %ld elements compared (%ld finite, %ld NaN/Inf matched exactly), %ld ill-conditioned "
           "skipped\n",
           st.compared, st.finite, st.exact_nonfinite, st.skipped);
    /* the test is only worth something if most elements were checked */
    CHECK(st.cases >= (count * 9) / 10);
    CHECK(st.skipped * 10 < st.compared);
    CHECK(st.finite * 2 > st.compared);
    if (count >= 500) {
        CHECK(st.b2b >= count / 20);
        for (int k = 0; k <= 4; k++)
            CHECK(st.reds[k] > 0);
    }
    test_negative();
    test_interp_errors();
    return tu_finish("test_property");
}
