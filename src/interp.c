/* interp.c — runs the lowered Fusion Spec IR on the CPU the way the kernel
 * does, so the property test can compare it with the reference.
 *
 * Each row m is independent (the kernel's CTAs own rows of tiles), and runs
 * stage by stage.  Inside a stage, TILE values stream through the nodes one
 * fragment (CF_INTERP_FRAG adjacent columns) at a time and are never kept
 * for the whole row, except values a bypass placeholder of the next stage
 * carries.  A reduction folds each fragment, combines the fragment partials
 * of a tile with a butterfly (the warp / CTA levels), then combines the tile
 * partials in column order (the cluster level).  VEC_M values are computed
 * once per row, VEC_N values once per column and SCALAR values once, before
 * any row runs, since by the shape rules they cannot depend on a row.
 *
 * The IR is checked first (cf_ir_verify, the checks Φ runs too): a malformed IR
 * is CF_ERR_INTERNAL with a message, never a crash, because this is what tests Φ. */
#include "cf_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CF_INTERP_TILE_N 64
#define CF_INTERP_FRAG 2
#define MAX_THREADS 64

typedef struct interp {
    const cf_ir *ir;
    const cf_graph *g;
    const cf_bindings *b;
    double *const *outputs;
    int64_t m, k, ncols[2];        /* ncols: N of each epilogue               */
    int *epi_of;                   /* by id: the node's epilogue              */
    bool *carried;                 /* by id: a TILE value a bypass carries    */
    double *sval;                  /* by id: SCALAR values                    */
    double **vn;                   /* by id: VEC_N values, ncols[epi] each    */
    const cf_ir_arg *gemm_a, *gemm_b, *gemm2_b;
    double *wt, *w2t;              /* W as [N][K], W2 as [N2][N1] (dual: [N][K]) */
} interp;

typedef struct worker {
    const interp *in;
    int64_t m0, m1;
    double *frag;                  /* by id x CF_INTERP_FRAG: TILE fragments  */
    double *rowv;                  /* by id: VEC_M values of the current row  */
    double **carry;                /* by id: a carried TILE value for the row */
    double *xrow, *acc, *s, *o;    /* s: a row of S (B2B) or of X*W2 (dual)   */
    double *block;                 /* one allocation for all of the above     */
} worker;

static cf_loc no_loc(void) { return (cf_loc){0}; }

static double load_elem(const void *p, cf_dtype t, size_t i)
{
    switch (t) {
    case CF_BF16: return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    case CF_F16: return cf_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static double combine(cf_op op, double a, double b)
{
    switch (op) {
    case CF_OP_RMAX: return (isnan(a) || isnan(b)) ? NAN : (a > b ? a : b);
    case CF_OP_RMIN: return (isnan(a) || isnan(b)) ? NAN : (a < b ? a : b);
    default: return a + b;
    }
}

/* ---- indexing the IR -------------------------------------------------------- */

/* cf_ir_verify first (a malformed IR is an error, never a crash); then the GEMM operands, each
 * node's epilogue, and the TILE values a bypass carries to the next stage. */
static cf_status index_ir(interp *in, cf_error *err)
{
    const cf_ir *ir = in->ir;
    cf_status st = cf_ir_verify(ir, err);
    if (st != CF_OK)
        return st;
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        if (a->kind == CF_ARG_GEMM_A)
            in->gemm_a = a;
        else if (a->kind == CF_ARG_GEMM_B)
            in->gemm_b = a;
        else if (a->kind == CF_ARG_GEMM2_B)
            in->gemm2_b = a;
    }
    for (int e = 0; e < ir->n_gemms; e++)
        for (const cf_ir_spec *s = ir->epi[e]; s; s = s->post)
            for (int i = 0; i < s->n_nodes; i++) {
                const cf_ir_node *n = s->nodes[i];
                in->epi_of[n->id] = e;
                if (n->kind == CF_IR_PLACEHOLDER && !n->is_stat && n->ref->shape == CF_SHAPE_TILE)
                    in->carried[n->ref->id] = true;
            }
    return CF_OK;
}

/* ---- checking the bindings ------------------------------------------------------- */

static cf_status check_bindings(interp *in, cf_error *err)
{
    const cf_ir *ir = in->ir;
    const cf_bindings *b = in->b;
    const cf_graph *g = in->g;
    if (!b->dims)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: bindings have no dims (dims is NULL)");
    cf_dim dims[4] = {ir->dim_m, ir->dim_k, ir->dim_n, ir->dim_n2};
    for (int i = 0; i < (ir->n_gemms == 2 ? 4 : 3); i++)
        if (b->dims[dims[i]] <= 0)
            return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(),
                             "interp: dim '%s' is bound to %lld; dims must be positive",
                             g->dim_names[dims[i]], (long long)b->dims[dims[i]]);
    in->m = b->dims[ir->dim_m];
    in->k = b->dims[ir->dim_k];
    in->ncols[0] = b->dims[ir->dim_n];
    in->ncols[1] = ir->n_gemms == 2 ? b->dims[ir->dim_n2] : 1;
    const uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / 16;
    int64_t pairs[5][2] = {{in->m, in->k}, {in->k, in->ncols[0]}, {in->m, in->ncols[0]},
                           {in->ncols[0], in->ncols[1]}, {in->m, in->ncols[1]}};
    for (int i = 0; i < 5; i++)
        if ((uint64_t)pairs[i][1] > limit / (uint64_t)pairs[i][0])
            return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "interp: a %lld x %lld operand does not fit in memory",
                             (long long)pairs[i][0], (long long)pairs[i][1]);
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        if (a->kind == CF_ARG_SCALAR && !b->params)
            return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: param '%s' has no value (params is NULL)",
                             g->nodes[g->params[a->index]].name);
        if (a->kind == CF_ARG_OUTPUT && (!in->outputs || !in->outputs[a->index]))
            return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: output %d ('%s') has a NULL buffer",
                             a->index, g->outputs[a->index].name);
        if (a->kind != CF_ARG_SCALAR && a->kind != CF_ARG_OUTPUT && (!b->inputs || !b->inputs[a->index]))
            return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: input '%s' is bound to NULL",
                             g->nodes[g->inputs[a->index]].name);
    }
    return CF_OK;
}

/* ---- row-invariant values ------------------------------------------------------ */

/* SCALAR and VEC_N nodes (and the STOREs of such values), once. */
static cf_status precompute(interp *in, cf_error *err)
{
    const cf_ir *ir = in->ir;
    for (int e = 0; e < ir->n_gemms; e++) {
        int64_t nc = in->ncols[e];
        for (const cf_ir_spec *s = ir->epi[e]; s; s = s->post) {
            for (int i = 0; i < s->n_nodes; i++) {
                const cf_ir_node *n = s->nodes[i];
                if (n->shape == CF_SHAPE_VEC_N && n->kind != CF_IR_STORE) {
                    in->vn[n->id] = malloc((size_t)nc * sizeof(double));
                    if (!in->vn[n->id])
                        return cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "interp: out of memory");
                }
                if (n->shape != CF_SHAPE_SCALAR && n->shape != CF_SHAPE_VEC_N)
                    continue;
                int64_t cnt = n->shape == CF_SHAPE_SCALAR ? 1 : nc;
                double *dst = n->shape == CF_SHAPE_SCALAR ? &in->sval[n->id] : in->vn[n->id];
                for (int64_t c = 0; c < cnt; c++) {
                    double v[2] = {0, 0};
                    for (int a = 0; a < n->nargs; a++) {
                        const cf_ir_node *x = n->args[a];
                        v[a] = x->shape == CF_SHAPE_SCALAR ? in->sval[x->id] : in->vn[x->id][c];
                    }
                    const cf_ir_node *r = n->ref;
                    const cf_ir_arg *arg = n->kind == CF_IR_BCAST && n->src != CF_BC_CONST ? &ir->args[n->arg] : NULL;
                    double out = 0;
                    switch (n->kind) {
                    case CF_IR_BCAST:
                        out = n->src == CF_BC_CONST ? n->cval
                              : n->src == CF_BC_PARAM ? in->b->params[arg->index]
                                                      : load_elem(in->b->inputs[arg->index], arg->dtype, (size_t)c);
                        break;
                    case CF_IR_COMPUTE:
                        out = n->nargs == 1 ? cf_eval_unary(n->op, v[0]) : cf_eval_binary(n->op, v[0], v[1]);
                        break;
                    case CF_IR_PLACEHOLDER: /* a bypass of a row-invariant value */
                        out = r->shape == CF_SHAPE_SCALAR ? in->sval[r->id] : in->vn[r->id][c];
                        break;
                    case CF_IR_STORE:
                        in->outputs[ir->args[n->arg].index][c] = v[0];
                        continue;
                    default: break; /* excluded by cf_ir_verify */
                    }
                    dst[c] = out;
                }
            }
        }
    }
    return CF_OK;
}

/* ---- rows ------------------------------------------------------------------------ */

/* The value of x at column col (fragment slot j) of the current row. */
static inline double get(const worker *w, const cf_ir_node *x, int64_t col, int j)
{
    switch (x->shape) {
    case CF_SHAPE_SCALAR: return w->in->sval[x->id];
    case CF_SHAPE_VEC_N: return w->in->vn[x->id][col];
    case CF_SHAPE_VEC_M: return w->rowv[x->id];
    default: return w->frag[x->id * CF_INTERP_FRAG + j];
    }
}

/* The value a placeholder brings into its stage at column col. */
static inline double placeholder_value(const worker *w, const cf_ir_node *p, int64_t col, int j)
{
    const cf_ir_node *r = p->ref;
    if (p->is_stat || r->shape == CF_SHAPE_VEC_M)
        return w->rowv[r->id];
    if (r->shape == CF_SHAPE_TILE)
        return w->carry[r->id][col];
    return get(w, r, col, j);
}

/* Runs one stage of epilogue e on row m; acc is the row of the GEMM output. */
static void run_stage(worker *w, const cf_ir_spec *s, int e, int64_t m, const double *acc)
{
    const interp *in = w->in;
    const cf_ir *ir = in->ir;
    const int64_t nc = in->ncols[e];

    /* VEC_M values first: they need only statistics, inputs and scalars */
    for (int i = 0; i < s->n_nodes; i++) {
        const cf_ir_node *n = s->nodes[i];
        if (n->shape != CF_SHAPE_VEC_M || n->kind == CF_IR_REDUCE)
            continue;
        double v = 0;
        switch (n->kind) {
        case CF_IR_BCAST: {
            const cf_ir_arg *a = n->src == CF_BC_CONST ? NULL : &ir->args[n->arg];
            v = n->src == CF_BC_CONST   ? n->cval
                : n->src == CF_BC_PARAM ? in->b->params[a->index]
                                        : load_elem(in->b->inputs[a->index], a->dtype, (size_t)m);
            break;
        }
        case CF_IR_COMPUTE:
            v = n->nargs == 1 ? cf_eval_unary(n->op, get(w, n->args[0], 0, 0))
                              : cf_eval_binary(n->op, get(w, n->args[0], 0, 0), get(w, n->args[1], 0, 0));
            break;
        case CF_IR_PLACEHOLDER: v = placeholder_value(w, n, 0, 0); break;
        case CF_IR_STORE: in->outputs[ir->args[n->arg].index][m] = get(w, n->args[0], 0, 0); continue;
        default: break;
        }
        w->rowv[n->id] = v;
    }

    /* Then the tile pass, fragment by fragment, when anything needs it. */
    const cf_ir_node *red = s->terminal && s->terminal->kind == CF_IR_REDUCE ? s->terminal : NULL;
    bool tile_work = red != NULL;
    for (int i = 0; i < s->n_nodes && !tile_work; i++)
        tile_work = s->nodes[i]->shape == CF_SHAPE_TILE || s->nodes[i]->kind == CF_IR_MATMUL;
    if (!tile_work)
        return;

    double total = 0, part[CF_INTERP_TILE_N / CF_INTERP_FRAG + 1];
    for (int64_t t0 = 0; t0 < nc; t0 += CF_INTERP_TILE_N) {
        int64_t t1 = t0 + CF_INTERP_TILE_N < nc ? t0 + CF_INTERP_TILE_N : nc;
        int nf = 0;
        for (int64_t c0 = t0; c0 < t1; c0 += CF_INTERP_FRAG) {
            int fw = t1 - c0 < CF_INTERP_FRAG ? (int)(t1 - c0) : CF_INTERP_FRAG;
            for (int i = 0; i < s->n_nodes; i++) {
                const cf_ir_node *n = s->nodes[i];
                if (n->kind == CF_IR_REDUCE) {
                    /* thread level: fold the fragment */
                    double f = get(w, n->args[0], c0, 0);
                    for (int j = 1; j < fw; j++)
                        f = combine(n->op, f, get(w, n->args[0], c0 + j, j));
                    part[nf++] = f;
                    continue;
                }
                if (n->kind == CF_IR_MATMUL) {
                    for (int j = 0; j < fw; j++)
                        w->s[c0 + j] = get(w, n->args[0], c0 + j, j);
                    continue;
                }
                if (n->shape != CF_SHAPE_TILE)
                    continue;
                double *dst = &w->frag[n->id * CF_INTERP_FRAG];
                for (int j = 0; j < fw; j++) {
                    int64_t col = c0 + j;
                    switch (n->kind) {
                    case CF_IR_ACC: dst[j] = cf_ir_acc_second(ir, n) ? w->s[col] : acc[col]; break;
                    case CF_IR_BCAST: {
                        const cf_ir_arg *a = n->src == CF_BC_CONST ? NULL : &ir->args[n->arg];
                        switch (n->src) {
                        case CF_BC_CONST: dst[j] = n->cval; break;
                        case CF_BC_PARAM: dst[j] = in->b->params[a->index]; break;
                        case CF_BC_VEC_N: dst[j] = load_elem(in->b->inputs[a->index], a->dtype, (size_t)col); break;
                        case CF_BC_VEC_M: dst[j] = load_elem(in->b->inputs[a->index], a->dtype, (size_t)m); break;
                        default:
                            dst[j] = load_elem(in->b->inputs[a->index], a->dtype, (size_t)(m * nc + col));
                            break;
                        }
                        break;
                    }
                    case CF_IR_COMPUTE:
                        dst[j] = n->nargs == 1 ? cf_eval_unary(n->op, get(w, n->args[0], col, j))
                                               : cf_eval_binary(n->op, get(w, n->args[0], col, j),
                                                                get(w, n->args[1], col, j));
                        break;
                    case CF_IR_PLACEHOLDER: dst[j] = placeholder_value(w, n, col, j); break;
                    case CF_IR_STORE:
                        in->outputs[ir->args[n->arg].index][m * nc + col] = get(w, n->args[0], col, j);
                        break;
                    default: break;
                    }
                    if (in->carried[n->id])
                        w->carry[n->id][col] = dst[j];
                }
            }
        }
        if (red) {
            /* warp / CTA level: a butterfly over the fragment partials */
            int half = 1;
            while (half < nf)
                half *= 2;
            for (half /= 2; half >= 1; half /= 2)
                for (int i = 0; i < half && i + half < nf; i++)
                    part[i] = combine(red->op, part[i], part[i + half]);
            /* cluster level: tile partials in column order */
            total = t0 == 0 ? part[0] : combine(red->op, total, part[0]);
        }
    }
    if (red)
        w->rowv[red->id] = red->op == CF_OP_MEAN ? total / (double)nc : total;
}

static void run_epilogue(worker *w, int e, int64_t m, const double *acc)
{
    for (const cf_ir_spec *s = w->in->ir->epi[e]; s; s = s->post)
        run_stage(w, s, e, m, acc);
}

static void *run_rows(void *p)
{
    worker *w = p;
    const interp *in = w->in;
    const int64_t K = in->k, N = in->ncols[0], N2 = in->ncols[1];
    const cf_ir_arg *xa = in->gemm_a;
    const void *x = in->b->inputs[xa->index];
    for (int64_t m = w->m0; m < w->m1; m++) {
        for (int64_t k = 0; k < K; k++)
            w->xrow[k] = load_elem(x, xa->dtype, (size_t)(m * K + k));
        for (int64_t n = 0; n < N; n++) {
            const double *wr = in->wt + n * K;
            double a = 0;
            for (int64_t k = 0; k < K; k++)
                a += w->xrow[k] * wr[k];
            w->acc[n] = a;
        }
        for (int64_t n = 0; in->ir->dual && n < N; n++) {
            const double *wr = in->w2t + n * K;
            double a = 0;
            for (int64_t k = 0; k < K; k++)
                a += w->xrow[k] * wr[k];
            w->s[n] = a;
        }
        run_epilogue(w, 0, m, w->acc);
        if (in->ir->n_gemms == 2) {
            /* the second GEMM consumes this row of S while it is on chip */
            for (int64_t n2 = 0; n2 < N2; n2++) {
                const double *wr = in->w2t + n2 * N;
                double a = 0;
                for (int64_t n = 0; n < N; n++)
                    a += w->s[n] * wr[n];
                w->o[n2] = a;
            }
            run_epilogue(w, 1, m, w->o);
        }
    }
    return NULL;
}

/* dst[c][r] = B as [cols][rows], from a [rows][cols] (nk false) or [cols][rows] matrix. */
static double *load_weight(const cf_bindings *b, const cf_ir_arg *a, int64_t rows, int64_t cols)
{
    double *dst = malloc((size_t)(rows * cols) * sizeof(double));
    if (!dst)
        return NULL;
    const void *src = b->inputs[a->index];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            dst[c * rows + r] = load_elem(src, a->dtype, (size_t)(a->b_is_nk ? c * rows + r : r * cols + c));
    return dst;
}

static int cpu_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

cf_status cf_ir_interpret(const cf_ir *ir, const cf_bindings *b, double *const *outputs, cf_error *err)
{
    cf_error_clear(err);
    if (!ir || !b || !ir->graph)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: IR or bindings is NULL");
    if (!outputs)
        return cf_errorf(err, CF_ERR_INVALID_ARG, no_loc(), "interp: outputs is NULL");
    interp in = {.ir = ir, .g = ir->graph, .b = b, .outputs = outputs};
    int nn = ir->n_nodes > 0 ? ir->n_nodes : 1;
    worker ws[MAX_THREADS];
    memset(ws, 0, sizeof ws);
    int nt = 0;
    cf_status st = CF_OK;
    in.epi_of = calloc((size_t)nn, sizeof *in.epi_of);
    in.carried = calloc((size_t)nn, sizeof *in.carried);
    in.sval = calloc((size_t)nn, sizeof *in.sval);
    in.vn = calloc((size_t)nn, sizeof *in.vn);
    if (!in.epi_of || !in.carried || !in.sval || !in.vn) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "interp: out of memory");
        goto done;
    }
    /* (n_nodes < 0: cf_ir_verify says so) */
    if ((st = index_ir(&in, err)) != CF_OK || (st = check_bindings(&in, err)) != CF_OK)
        goto done;

    const int64_t M = in.m, K = in.k, N = in.ncols[0], N2 = in.ncols[1];
    in.wt = load_weight(b, in.gemm_b, K, N);
    if (ir->n_gemms == 2)
        in.w2t = load_weight(b, in.gemm2_b, N, N2);
    else if (ir->dual)
        in.w2t = load_weight(b, in.gemm2_b, K, N);
    if (!in.wt || ((ir->n_gemms == 2 || ir->dual) && !in.w2t)) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "interp: out of memory loading the weights");
        goto done;
    }
    if ((st = precompute(&in, err)) != CF_OK)
        goto done;

    /* threads only pay off past a few million operations */
    double work = (double)M * (double)N * ((double)K * (ir->dual ? 2 : 1) + (double)ir->n_nodes +
                                           (ir->n_gemms == 2 ? (double)N2 : 0));
    nt = work < 4e6 ? 1 : cpu_threads();
    if (nt > M)
        nt = (int)M;
    int64_t carried_len = 0;
    for (int id = 0; id < ir->n_nodes; id++)
        if (in.carried[id])
            carried_len += in.ncols[in.epi_of[id]];
    size_t per = (size_t)nn * (CF_INTERP_FRAG + 1) + (size_t)(K + 2 * N + N2 + carried_len);
    for (int t = 0; t < nt; t++) {
        worker *w = &ws[t];
        w->in = &in;
        w->m0 = M * t / nt;
        w->m1 = M * (t + 1) / nt;
        w->block = calloc(per, sizeof(double));
        w->carry = calloc((size_t)nn, sizeof *w->carry);
        if (!w->block || !w->carry) {
            st = cf_errorf(err, CF_ERR_NO_MEMORY, no_loc(), "interp: out of memory for row buffers");
            goto done;
        }
        double *p = w->block;
        w->frag = p, p += (size_t)nn * CF_INTERP_FRAG;
        w->rowv = p, p += nn;
        w->xrow = p, p += K;
        w->acc = p, p += N;
        w->s = p, p += N;
        w->o = p, p += N2;
        for (int id = 0; id < ir->n_nodes; id++)
            if (in.carried[id])
                w->carry[id] = p, p += in.ncols[in.epi_of[id]];
    }
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {false};
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&tid[t], NULL, run_rows, &ws[t]) == 0;
    run_rows(&ws[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            run_rows(&ws[t]); /* no thread to spare: do it here */
    }

done:
    for (int t = 0; t < MAX_THREADS; t++) {
        free(ws[t].block);
        free(ws[t].carry);
    }
    if (in.vn)
        for (int id = 0; id < nn; id++)
            free(in.vn[id]);
    free(in.vn);
    free(in.sval);
    free(in.carried);
    free(in.epi_of);
    free(in.wt);
    free(in.w2t);
    return st;
}
