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
 * 16 e, with NaN == NaN and infinities equal; uncertain ones are counted.
 *
 * The graphs come from tests/gen.c (cfgen_property), which build/cfgen also
 * uses, in its GPU mode, for the GPU property test (scripts/gpu-check). */
#include "cf_internal.h"
#include "gen.h"
#include "test_util.h"

#include <float.h>
#include <stdint.h>
#include <time.h>

#define SAFETY 16.0
#define U 0x1p-53 /* unit roundoff of double */

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
    cfgen_rng r = {seed ^ 0x5eed5eed5eedull};
    binding_set bs = {.n_in = g->n_inputs};
    bs.in = calloc((size_t)g->n_inputs + 1, sizeof *bs.in);
    bs.params = calloc((size_t)g->n_params + 1, sizeof *bs.params);
    bool specials = cfgen_chance(&r, 0.08);
    for (int i = 0; i < g->n_inputs; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        int64_t n = dims[t.dims[0]] * (t.rank == 2 ? dims[t.dims[1]] : 1);
        bs.in[i] = calloc((size_t)n, cf_dtype_size(t.dtype));
        double span = t.name[0] == 'X' || t.name[0] == 'W' ? 1.0 : 1.5;
        for (int64_t e = 0; e < n; e++)
            store_elem(bs.in[i], t.dtype, e, cfgen_unif(&r, -span, span));
        if (specials && cfgen_chance(&r, 0.4)) {
            static const double sp[] = {NAN, INFINITY, -INFINITY, 0.0};
            int64_t at = (int64_t)(cfgen_next(&r) % (uint64_t)n);
            store_elem(bs.in[i], t.dtype, at, sp[cfgen_int(&r, 0, 3)]);
        }
    }
    for (int i = 0; i < g->n_params; i++)
        bs.params[i] = cfgen_unif(&r, -2, 2);
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
    cfgen_case c = cfgen_property(seed, big);
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
    cfgen_case c2 = cfgen_property(seed, big);
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

static int find_dim(const cf_graph *g, const char *name)
{
    for (int d = 0; d < g->n_dims; d++)
        if (strcmp(g->dim_names[d], name) == 0)
            return d;
    return 0;
}

/* A dual GEMM (SwiGLU, both weight layouts) at a shape off every tile: the interpreter, which
 * computes both accumulators, agrees with the reference run of the graph. */
static void test_interp_dual(void)
{
    static const char *const files[] = {"examples/swiglu.cf", "tests/specs/swiglu_nk.cf"};
    for (int f = 0; f < CF_ARRAY_LEN(files); f++) {
        cf_graph *g = NULL;
        cf_ir *ir = NULL;
        cf_error err;
        CHECK_EQ_INT(CF_OK, cf_spec_parse_file(files[f], &g, &err));
        CHECK_EQ_INT(CF_OK, g ? cf_lower(g, &ir, &err) : CF_ERR_INTERNAL);
        if (!ir) {
            cf_graph_free(g);
            continue;
        }
        CHECK(ir->dual);
        int64_t dims[3] = {0};
        dims[find_dim(g, "M")] = 7;
        dims[find_dim(g, "N")] = 67;
        dims[find_dim(g, "K")] = 5;
        binding_set bs = make_inputs(g, dims, 0xD0A1 + (uint64_t)f);
        cf_bindings b = {dims, (const void *const *)bs.in, bs.params};
        double *ref[2] = {NULL, NULL}, *got[2] = {NULL, NULL};
        int64_t len[2] = {0, 0};
        for (int o = 0; o < g->n_outputs; o++) {
            cf_tensor_info t = cf_graph_output_info(g, o);
            len[o] = dims[t.dims[0]] * (t.rank == 2 ? dims[t.dims[1]] : 1);
            ref[o] = calloc((size_t)len[o], sizeof(double));
            got[o] = calloc((size_t)len[o], sizeof(double));
        }
        CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, ref, &err));
        CHECK_EQ_INT(CF_OK, cf_ir_interpret(ir, &b, got, &err));
        int bad = 0, nonzero = 0;
        for (int o = 0; o < g->n_outputs; o++)
            for (int64_t i = 0; i < len[o]; i++) {
                bad += !(fabs(got[o][i] - ref[o][i]) <= 1e-9 * (1 + fabs(ref[o][i])));
                nonzero += ref[o][i] != 0;
            }
        CHECK_EQ_INT(0, bad);
        CHECK(nonzero > (int)len[0] / 2);
        for (int o = 0; o < 2; o++) {
            free(ref[o]);
            free(got[o]);
        }
        free_inputs(&bs);
        cf_ir_free(ir);
        cf_graph_free(g);
    }
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
        run_case(&st, i, cfgen_case_seed(base_seed, i), i % 100 == 99);
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
    test_interp_dual();
    return tu_finish("test_property");
}
