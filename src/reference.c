/* reference.c — the float64 reference: runs the original graph on the CPU.
 *
 * Every value reachable from an output is materialized as a dense row-major
 * double array and freed after its last use.  MATMUL is the only expensive
 * op, so it gets a packed, register-blocked kernel spread over pthreads; the
 * rest are straightforward loops.  The summation order of every reduction
 * (and of each matmul dot product: k = 0, 1, ...) is fixed, so results do not
 * depend on the thread count. */
#include "cf_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_THREADS 64

/* A materialized value: rows x cols doubles (1 x 1 for scalars, 1 x d0 for
 * rank-1 values). */
typedef struct value {
    double *data;
    int64_t rows, cols;
} value;

static cf_loc no_loc(void) { return (cf_loc){0}; }

static int cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static double load_elem(const void *p, cf_dtype t, size_t i)
{
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* ---- the matmul kernel ------------------------------------------------------
 *
 * C[M,N] = A[M,K] * B, with B packed into panels of NR columns: panel p holds
 * B[k][p*NR + j] at bp[(p*K + k)*NR + j], zero-padded past N.  Each thread owns
 * a range of rows and walks K in blocks of KB and N in blocks of NC so the B
 * block stays in L2 and the A micro-panel in L1.  The micro-kernel keeps a
 * MR x NR block of C in vector registers (GNU vector extensions, so it is
 * vectorized whatever the -O level). */

#define MR 4
#define NR 4
#define KB 256
#define NC 512

typedef double v4d __attribute__((vector_size(NR * sizeof(double))));

typedef struct mm_job {
    const double *a, *bp;
    double *c;
    int64_t m0, m1, n, k;
} mm_job;

/* C[rows, j0..j0+nr) += A[rows, k0..k1) * panel; rows beyond mr repeat the
 * last row and their results are dropped. */
static void micro_kernel(const double *const arow[MR], const double *panel, int64_t k0, int64_t k1,
                         double *const crow[MR], int mr, int nr)
{
    v4d acc[MR];
    for (int i = 0; i < MR; i++) {
        double t[NR] = {0};
        if (i < mr)
            memcpy(t, crow[i], (size_t)nr * sizeof(double));
        memcpy(&acc[i], t, sizeof t);
    }
    for (int64_t k = k0; k < k1; k++) {
        v4d b;
        memcpy(&b, panel + k * NR, sizeof b);
        for (int i = 0; i < MR; i++)
            acc[i] += arow[i][k] * b;
    }
    for (int i = 0; i < mr; i++) {
        double t[NR];
        memcpy(t, &acc[i], sizeof t);
        memcpy(crow[i], t, (size_t)nr * sizeof(double));
    }
}

static void *mm_worker(void *p)
{
    const mm_job *j = p;
    int64_t npanels = (j->n + NR - 1) / NR;
    for (int64_t i = j->m0; i < j->m1; i++)
        memset(j->c + i * j->n, 0, (size_t)j->n * sizeof(double));
    for (int64_t k0 = 0; k0 < j->k; k0 += KB) {
        int64_t k1 = k0 + KB < j->k ? k0 + KB : j->k;
        for (int64_t p0 = 0; p0 < npanels; p0 += NC / NR) {
            int64_t p1 = p0 + NC / NR < npanels ? p0 + NC / NR : npanels;
            for (int64_t i0 = j->m0; i0 < j->m1; i0 += MR) {
                int mr = j->m1 - i0 < MR ? (int)(j->m1 - i0) : MR;
                const double *arow[MR];
                for (int i = 0; i < MR; i++)
                    arow[i] = j->a + (i0 + (i < mr ? i : mr - 1)) * j->k;
                for (int64_t pp = p0; pp < p1; pp++) {
                    int64_t col = pp * NR;
                    int nr = j->n - col < NR ? (int)(j->n - col) : NR;
                    double *crow[MR];
                    for (int i = 0; i < MR; i++)
                        crow[i] = j->c + (i0 + (i < mr ? i : mr - 1)) * j->n + col;
                    micro_kernel(arow, j->bp + pp * j->k * NR, k0, k1, crow, mr, nr);
                }
            }
        }
    }
    return NULL;
}

/* c[M,N] = a[M,K] * b, where b is [K,N] (b_nk false) or [N,K]. */
static cf_status matmul(const double *a, const double *b, bool b_nk, int64_t m, int64_t k,
                        int64_t n, double *c, cf_error *err)
{
    int64_t npanels = (n + NR - 1) / NR;
    if ((uint64_t)npanels > SIZE_MAX / sizeof(double) / NR / (uint64_t)k)
        return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "matmul weight of %lld x %lld is too large",
                         (long long)k, (long long)n);
    double *bp = calloc((size_t)(npanels * NR * k), sizeof(double));
    if (!bp)
        return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "out of memory packing a %lld x %lld weight",
                         (long long)k, (long long)n);
    for (int64_t col = 0; col < n; col++) {
        double *dst = bp + (col / NR) * k * NR + col % NR;
        if (b_nk)
            for (int64_t kk = 0; kk < k; kk++)
                dst[kk * NR] = b[col * k + kk];
        else
            for (int64_t kk = 0; kk < k; kk++)
                dst[kk * NR] = b[kk * n + col];
    }

    /* threads only pay off past a few million multiply-adds */
    double work = (double)m * (double)n * (double)k;
    int64_t nt = work < 4e6 ? 1 : cpu_threads();
    int64_t blocks = (m + MR - 1) / MR;
    if (nt > blocks)
        nt = blocks;
    mm_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int64_t t = 0; t < nt; t++) {
        jobs[t] = (mm_job){.a = a, .bp = bp, .c = c, .n = n, .k = k,
                           .m0 = blocks * t / nt * MR, .m1 = blocks * (t + 1) / nt * MR};
        if (jobs[t].m1 > m)
            jobs[t].m1 = m;
    }
    for (int64_t t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, mm_worker, &jobs[t]) == 0;
    mm_worker(&jobs[0]);
    for (int64_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            mm_worker(&jobs[t]); /* no thread to spare: do it here */
    }
    free(bp);
    return CF_OK;
}

/* ---- validation ------------------------------------------------------------ */

static cf_status check_dim(const cf_graph *g, const cf_bindings *b, cf_dim d, cf_error *err)
{
    if (d < 0 || d >= g->n_dims)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "invalid dim handle %d", (int)d);
    if (b->dims[d] <= 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "dim '%s' is bound to %lld; dims must be positive",
                         g->dim_names[d], (long long)b->dims[d]);
    return CF_OK;
}

/* Elements of a node's value; fails when they cannot fit in memory. */
static cf_status node_size(const cf_graph *g, const cf_bindings *b, const cf_node *n, int64_t *rows,
                           int64_t *cols, cf_error *err)
{
    *rows = *cols = 1;
    for (int i = 0; i < n->rank; i++) {
        cf_status st = check_dim(g, b, n->dims[i], err);
        if (st != CF_OK)
            return st;
    }
    if (n->rank == 1)
        *cols = b->dims[n->dims[0]];
    else if (n->rank == 2) {
        *rows = b->dims[n->dims[0]];
        *cols = b->dims[n->dims[1]];
    }
    const uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / 16;
    if ((uint64_t)*cols > limit / (uint64_t)*rows) {
        char nm[96];
        return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "%s: %lld x %lld elements do not fit in memory",
                         cf_graph_node_name(g, (cf_value)(n - g->nodes), nm, sizeof nm),
                         (long long)*rows, (long long)*cols);
    }
    return CF_OK;
}

/* ---- evaluation ------------------------------------------------------------- */

/* Strides (per row, per col) that read operand o broadcast to a result r. */
static void bcast_strides(const cf_node *o, const cf_node *r, const value *ov, int64_t *si, int64_t *sj)
{
    if (o->rank == 0) {
        *si = *sj = 0;
    } else if (o->rank == r->rank) {
        *si = ov->cols;
        *sj = 1;
    } else if (o->dims[0] == r->dims[0]) { /* a [M] column vector: one value per row */
        *si = 1;
        *sj = 0;
    } else {                               /* a [N] row vector: one value per column */
        *si = 0;
        *sj = 1;
    }
}

static void eval_reduce(cf_op op, int axis, const value *x, double *out)
{
    /* axis 1 reduces each row into out[i]; axis 0 each column into out[j] */
    int64_t nout = axis == 1 ? x->rows : x->cols, len = axis == 1 ? x->cols : x->rows;
    int64_t so = axis == 1 ? x->cols : 1, sl = axis == 1 ? 1 : x->cols;
    for (int64_t o = 0; o < nout; o++) {
        const double *p = x->data + o * so;
        double acc = (op == CF_OP_RMAX) ? -INFINITY : (op == CF_OP_RMIN) ? INFINITY : 0.0;
        for (int64_t l = 0; l < len; l++) {
            double v = p[l * sl];
            switch (op) {
            case CF_OP_RMAX: acc = (isnan(v) || v > acc) ? v : acc; break; /* NaN sticks */
            case CF_OP_RMIN: acc = (isnan(v) || v < acc) ? v : acc; break;
            default: acc += v; break;
            }
        }
        out[o] = op == CF_OP_MEAN ? acc / (double)len : acc;
    }
}

static cf_status eval_node(const cf_graph *g, const cf_bindings *b, cf_value v, value *vals,
                           cf_error *err)
{
    const cf_node *n = &g->nodes[v];
    value *r = &vals[v];
    int64_t rows, cols;
    cf_status st = node_size(g, b, n, &rows, &cols, err);
    if (st != CF_OK)
        return st;
    r->rows = rows;
    r->cols = cols;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)rows, (size_t)cols, &bytes) ||
        __builtin_mul_overflow(bytes, sizeof(double), &bytes)) {
        char nm[96];
        return cf_errorf(err, CF_ERR_SHAPE, no_loc(), "%s: %lld x %lld doubles overflow a size in bytes",
                         cf_graph_node_name(g, v, nm, sizeof nm), (long long)rows, (long long)cols);
    }
    r->data = malloc(bytes);
    if (!r->data) {
        char nm[96];
        return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "out of memory for %s (%lld x %lld doubles)",
                         cf_graph_node_name(g, v, nm, sizeof nm), (long long)rows, (long long)cols);
    }
    double *d = r->data;
    size_t count = (size_t)(rows * cols);
    const value *a = n->src[0] >= 0 ? &vals[n->src[0]] : NULL;
    const value *bv = n->src[1] >= 0 ? &vals[n->src[1]] : NULL;

    switch (cf_op_class_of(n->op)) {
    case CF_OPC_LEAF:
        if (n->op == CF_OP_CONST)
            d[0] = n->cval;
        else if (n->op == CF_OP_PARAM)
            d[0] = b->params[n->index];
        else
            for (size_t i = 0; i < count; i++)
                d[i] = load_elem(b->inputs[n->index], n->dtype, i);
        return CF_OK;
    case CF_OPC_UNARY:
        for (size_t i = 0; i < count; i++)
            d[i] = cf_eval_unary(n->op, a->data[i]);
        return CF_OK;
    case CF_OPC_BINARY: {
        int64_t ai, aj, bi, bj;
        bcast_strides(&g->nodes[n->src[0]], n, a, &ai, &aj);
        bcast_strides(&g->nodes[n->src[1]], n, bv, &bi, &bj);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                d[i * cols + j] = cf_eval_binary(n->op, a->data[i * ai + j * aj], bv->data[i * bi + j * bj]);
        return CF_OK;
    }
    case CF_OPC_REDUCE:
        eval_reduce(n->op, n->axis, a, d);
        return CF_OK;
    case CF_OPC_MATMUL:
        return matmul(a->data, bv->data, n->axis == 1, rows, a->cols, cols, d, err);
    case CF_OPC_LAYOUT: /* TRANSPOSE */
        for (int64_t i = 0; i < a->rows; i++)
            for (int64_t j = 0; j < a->cols; j++)
                d[j * a->rows + i] = a->data[i * a->cols + j];
        return CF_OK;
    }
    return cf_errorf(err, CF_ERR_INTERNAL, no_loc(), "reference: unknown op %d", (int)n->op);
}

/* Marks what the outputs need and, for each needed node, its last consumer. */
static void plan(const cf_graph *g, bool *need, int *last_use)
{
    for (int i = 0; i < g->n_outputs; i++) {
        need[g->outputs[i].value] = true;
        last_use[g->outputs[i].value] = g->n_nodes; /* kept until copied out */
    }
    for (int v = g->n_nodes - 1; v >= 0; v--) {
        if (!need[v])
            continue;
        for (int s = 0; s < 2; s++) {
            cf_value a = g->nodes[v].src[s];
            if (a < 0)
                continue;
            need[a] = true;
            if (last_use[a] < v)
                last_use[a] = v;
        }
    }
}

cf_status cf_reference_run(const cf_graph *g, const cf_bindings *b, double *const *outputs,
                           cf_error *err)
{
    cf_error_clear(err);
    if (!g || !b)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: graph or bindings is NULL");
    if (g->err.status != CF_OK)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: the graph has a build error: %s",
                         g->err.msg);
    if (g->n_outputs == 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: the graph has no outputs");
    if (!outputs)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: outputs is NULL");
    if (g->n_dims > 0 && !b->dims)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: bindings have no dims (dims is NULL)");

    bool *need = calloc((size_t)g->n_nodes, sizeof *need);
    int *last_use = malloc((size_t)g->n_nodes * sizeof *last_use);
    value *vals = calloc((size_t)g->n_nodes, sizeof *vals);
    cf_status st = CF_OK;
    if (!need || !last_use || !vals) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "reference: out of memory");
        goto done;
    }
    for (int v = 0; v < g->n_nodes; v++)
        last_use[v] = -1;
    plan(g, need, last_use);

    /* Check every binding before any work so a bad one costs nothing. */
    for (int v = 0; v < g->n_nodes && st == CF_OK; v++) {
        if (!need[v])
            continue;
        const cf_node *n = &g->nodes[v];
        int64_t rows, cols;
        st = node_size(g, b, n, &rows, &cols, err);
        if (st != CF_OK)
            break;
        if (n->op == CF_OP_INPUT && (!b->inputs || !b->inputs[n->index]))
            st = cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: input '%s' is bound to NULL", n->name);
        else if (n->op == CF_OP_PARAM && !b->params)
            st = cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(),
                           "reference: param '%s' has no value (params is NULL)", n->name);
    }
    for (int i = 0; i < g->n_outputs && st == CF_OK; i++)
        if (!outputs[i])
            st = cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "reference: output %d ('%s') has a NULL buffer", i,
                           g->outputs[i].name);

    for (int v = 0; v < g->n_nodes && st == CF_OK; v++) {
        if (!need[v])
            continue;
        st = eval_node(g, b, v, vals, err);
        for (int s = 0; s < 2; s++) { /* free operands this node used last */
            cf_value a = g->nodes[v].src[s];
            if (a >= 0 && last_use[a] == v) {
                free(vals[a].data);
                vals[a].data = NULL;
            }
        }
    }
    for (int i = 0; i < g->n_outputs && st == CF_OK; i++) {
        const value *o = &vals[g->outputs[i].value];
        memcpy(outputs[i], o->data, (size_t)(o->rows * o->cols) * sizeof(double));
    }

done:
    if (vals)
        for (int v = 0; v < g->n_nodes; v++)
            free(vals[v].data);
    free(vals);
    free(need);
    free(last_use);
    return st;
}
