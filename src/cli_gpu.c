/* cli_gpu.c — the CLI verbs that touch the GPU: `run --check` and `bench`.
 *
 * Inputs are fresh random values each run (never zeros), outputs are poisoned
 * with NaN bit patterns before every launch so an unwritten element fails the
 * check, and the float64 reference computes the expected values.  Benchmarks
 * time through timing.c (CUDA events after a warm-up, L2 flushed between runs,
 * medians) beside cuBLAS doing the GEMM alone in the same process.
 */
#include "cli.h"
#include "device/cf_trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- host data ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) /* [-1, 1) */
{
    return (double)(rng_next(s) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void store_elem(void *p, cf_dtype t, size_t i, double v)
{
    if (t == CF_F32)
        ((float *)p)[i] = (float)v;
    else if (t == CF_BF16)
        ((uint16_t *)p)[i] = cf_f32_to_bf16((float)v);
    else
        ((uint16_t *)p)[i] = cf_f32_to_f16((float)v);
}

static double load_elem(const void *p, cf_dtype t, size_t i)
{
    if (t == CF_F32)
        return ((const float *)p)[i];
    if (t == CF_BF16)
        return cf_bf16_to_f32(((const uint16_t *)p)[i]);
    return cf_f16_to_f32(((const uint16_t *)p)[i]);
}

static size_t numel(const cf_graph *g, cf_tensor_info t, const int64_t *dims)
{
    (void)g;
    size_t n = 1;
    for (int d = 0; d < t.rank; d++)
        n *= (size_t)dims[t.dims[d]];
    return n;
}

/* Random inputs: GEMM operands scaled so X*W stays O(1); vectors in [-1, 1). */
static void fill_inputs(const cf_graph *g, const int64_t *dims, void **host, uint64_t seed)
{
    const cf_ir *unused = NULL;
    (void)unused;
    for (int i = 0; i < cf_graph_num_inputs(g); i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        size_t n = numel(g, t, dims);
        uint64_t s = seed * 0x100000001B3ull + (uint64_t)i * 7919u + 1;
        double scale = 1.0;
        if (t.rank == 2 && (t.dtype == CF_BF16 || t.dtype == CF_F16)) {
            /* a matmul operand: keep dot products near unit variance */
            int64_t k = dims[t.dims[1]] < dims[t.dims[0]] ? dims[t.dims[1]] : dims[t.dims[0]];
            scale = 1.7 / sqrt(sqrt((double)(k > 0 ? k : 1)));
        }
        for (size_t e = 0; e < n; e++)
            store_elem(host[i], t.dtype, e, rng_uniform(&s) * scale);
    }
}

/* ---- comparing ------------------------------------------------------------ */

typedef struct check_stats {
    double max_abs, err2, ref2;
    size_t bad_nonfinite, n;
} check_stats;

static void compare(const void *got, cf_dtype t, const double *ref, size_t n, check_stats *s)
{
    for (size_t i = 0; i < n; i++) {
        double g = load_elem(got, t, i), r = ref[i];
        s->n++;
        if (isnan(r) || isinf(r) || isnan(g) || isinf(g)) {
            bool same = (isnan(r) && isnan(g)) || (isinf(r) && isinf(g) && (r > 0) == (g > 0));
            /* A finite reference that overflows the output dtype is fine as inf. */
            bool overflow = isinf(g) && !isinf(r) && fabs(r) > (t == CF_F16 ? 65504.0 : 3.3e38);
            if (!same && !overflow)
                s->bad_nonfinite++;
            continue;
        }
        double d = fabs(g - r);
        if (d > s->max_abs)
            s->max_abs = d;
        s->err2 += d * d;
        s->ref2 += r * r;
    }
}

/* Relative Frobenius error allowed for an output of dtype t (bf16 rounding of
 * the output dominates; f32 outputs still see bf16 GEMM inputs, exactly). */
static double tolerance(cf_dtype t) { return t == CF_F32 ? 2e-3 : 1e-2; }

/* ---- the GPU session ---------------------------------------------------------- */

typedef struct session {
    const cf_graph *g;
    int64_t dims[CF_MAX_DIMS];
    int n_in, n_out;
    size_t *in_bytes, *out_bytes;   /* checked for overflow (cf_tensor_bytes) */
    void **h_in;
    cf_rt_devptr *d_in, *d_out;
    double *params;
} session;

static void session_free(session *s)
{
    for (int i = 0; i < s->n_in; i++) {
        free(s->h_in ? s->h_in[i] : NULL);
        if (s->d_in && s->d_in[i])
            cf_rt_free(s->d_in[i], NULL);
    }
    for (int i = 0; i < s->n_out; i++)
        if (s->d_out && s->d_out[i])
            cf_rt_free(s->d_out[i], NULL);
    free(s->h_in);
    free(s->in_bytes);
    free(s->out_bytes);
    free(s->d_in);
    free(s->d_out);
    free(s->params);
}

static cf_status session_init(session *s, const cf_graph *g, const cli_opts *o, uint64_t seed, cf_error *err)
{
    memset(s, 0, sizeof *s);
    s->g = g;
    memcpy(s->dims, o->dims, sizeof s->dims);
    s->n_in = cf_graph_num_inputs(g);
    s->n_out = cf_graph_num_outputs(g);
    s->h_in = calloc((size_t)s->n_in + 1, sizeof *s->h_in);
    s->d_in = calloc((size_t)s->n_in + 1, sizeof *s->d_in);
    s->d_out = calloc((size_t)s->n_out + 1, sizeof *s->d_out);
    s->params = calloc((size_t)cf_graph_num_params(g) + 1, sizeof *s->params);
    s->in_bytes = calloc((size_t)s->n_in + 1, sizeof *s->in_bytes);
    s->out_bytes = calloc((size_t)s->n_out + 1, sizeof *s->out_bytes);
    if (!s->h_in || !s->d_in || !s->d_out || !s->params || !s->in_bytes || !s->out_bytes)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory");
    for (int i = 0; i < cf_graph_num_params(g); i++)
        s->params[i] = o->params_set[i] ? o->params[i] : 0.5 + 0.25 * i;
    cf_status st;
    /* every size first (the reference's float64 copy of each output too), nothing touched yet */
    for (int i = 0; i < s->n_in; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        if ((st = cf_tensor_bytes(g, t, s->dims, cf_dtype_size(t.dtype), &s->in_bytes[i], err)) != CF_OK)
            return st;
    }
    for (int i = 0; i < s->n_out; i++) {
        cf_tensor_info t = cf_graph_output_info(g, i);
        size_t ref_bytes;
        if ((st = cf_tensor_bytes(g, t, s->dims, cf_dtype_size(t.dtype), &s->out_bytes[i], err)) != CF_OK ||
            (st = cf_tensor_bytes(g, t, s->dims, sizeof(double), &ref_bytes, err)) != CF_OK)
            return st;
    }
    for (int i = 0; i < s->n_in; i++) {
        s->h_in[i] = malloc(s->in_bytes[i]);
        if (!s->h_in[i])
            return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory for input '%s' (%zu bytes)",
                             cf_graph_input_info(g, i).name, s->in_bytes[i]);
    }
    fill_inputs(g, s->dims, s->h_in, seed);
    for (int i = 0; i < s->n_in; i++)
        if ((st = cf_rt_malloc(&s->d_in[i], s->in_bytes[i], err)) != CF_OK ||
            (st = cf_rt_memcpy_htod(s->d_in[i], s->h_in[i], s->in_bytes[i], err)) != CF_OK)
            return st;
    for (int i = 0; i < s->n_out; i++)
        if ((st = cf_rt_malloc(&s->d_out[i], s->out_bytes[i], err)) != CF_OK)
            return st;
    return CF_OK;
}

static cf_status poison_outputs(session *s, cf_error *err)
{
    for (int i = 0; i < s->n_out; i++) {
        cf_status st = cf_rt_memset_d8(s->d_out[i], 0xFF, s->out_bytes[i], err);
        if (st != CF_OK)
            return st;
    }
    return CF_OK;
}

/* One launch of a path on the session's buffers (the fused kernel or the
 * unfused plan) is a cf_time_fn: bench times it through timing.c. */

typedef struct fused_ctx {
    cf_kernel *k;
    session *s;
} fused_ctx;

static cf_launch_args launch_args(session *s, cf_rt_stream stream)
{
    return (cf_launch_args){.dims = s->dims, .inputs = s->d_in, .params = s->params, .outputs = s->d_out,
                            .stream = stream};
}

static cf_status run_fused(void *ctx, cf_rt_stream stream, cf_error *err)
{
    fused_ctx *f = ctx;
    cf_launch_args a = launch_args(f->s, stream);
    return cf_kernel_launch(f->k, &a, err);
}

typedef struct unfused_ctx {
    cf_unfused *u;
    session *s;
} unfused_ctx;

static cf_status run_unfused(void *ctx, cf_rt_stream stream, cf_error *err)
{
    unfused_ctx *x = ctx;
    cf_launch_args a = launch_args(x->s, stream);
    return cf_unfused_launch(x->u, &a, err);
}

/* The output checked is the third launch's, into re-poisoned buffers, after two
 * launches on other inputs (a constant byte pattern), over all M rows and over
 * M / 2: state a kernel object keeps between launches (the exchange slots and
 * their epoch; the unfused path's buffers and plans) must not leak into
 * results -- a stale partial of the first launch, in a row tile the second
 * does not reach, would. */
static cf_status launch_thrice(cf_time_fn fn, void *ctx, session *s, cf_dim dim_m, cf_error *err)
{
    cf_status st = CF_OK;
    for (int i = 0; i < s->n_in && st == CF_OK; i++)
        st = cf_rt_memset_d8(s->d_in[i], 0x3C, s->in_bytes[i], err);
    if (st == CF_OK)
        st = fn(ctx, NULL, err);
    const int64_t M = s->dims[dim_m];
    if (st == CF_OK && M >= 2) {
        s->dims[dim_m] = M / 2;
        st = fn(ctx, NULL, err);
        s->dims[dim_m] = M;
    }
    if (st == CF_OK)
        st = cf_rt_ctx_sync(err);
    for (int i = 0; i < s->n_in && st == CF_OK; i++)
        st = cf_rt_memcpy_htod(s->d_in[i], s->h_in[i], s->in_bytes[i], err);
    if (st == CF_OK)
        st = poison_outputs(s, err);
    if (st == CF_OK)
        st = fn(ctx, NULL, err);
    return st;
}

/* Rows checked: every row when the reference is cheap, else an even sample. */
static int64_t *pick_rows(int64_t M, int64_t want, int64_t *count)
{
    int64_t n = want <= 0 || want >= M ? M : want;
    int64_t *rows = malloc((size_t)n * sizeof *rows);
    if (!rows)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        rows[i] = n == M ? i : (i * M) / n + ((i * 7) % (M / n > 1 ? M / n : 1));
    *count = n;
    return rows;
}

/* Runs the reference on the chosen rows only (the epilogue is row-wise, so a
 * row of the output depends on that row of every [M, ...] input) and compares. */
static cf_status check_outputs(session *s, cf_dim dim_m, int64_t check_rows, bool *all_ok, cf_error *err)
{
    const cf_graph *g = s->g;
    int64_t M = s->dims[dim_m], nr = 0;
    int64_t *rows = pick_rows(M, check_rows, &nr);
    int64_t sub_dims[CF_MAX_DIMS];
    memcpy(sub_dims, s->dims, sizeof sub_dims);
    sub_dims[dim_m] = nr;
    const void **sub_in = calloc((size_t)s->n_in + 1, sizeof *sub_in);
    void **owned = calloc((size_t)s->n_in + 1, sizeof *owned);
    double **ref = calloc((size_t)s->n_out + 1, sizeof *ref);
    void *got = NULL;
    cf_status st = CF_OK;
    if (!rows || !sub_in || !owned || !ref) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory");
        goto done;
    }
    for (int i = 0; i < s->n_in; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        if (t.rank >= 1 && t.dims[0] == dim_m && nr != M) {
            size_t row_elems = t.rank == 2 ? (size_t)s->dims[t.dims[1]] : 1, es = cf_dtype_size(t.dtype);
            owned[i] = malloc((size_t)nr * row_elems * es);
            if (!owned[i]) {
                st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory");
                goto done;
            }
            for (int64_t r = 0; r < nr; r++)
                memcpy((char *)owned[i] + (size_t)r * row_elems * es,
                       (const char *)s->h_in[i] + (size_t)rows[r] * row_elems * es, row_elems * es);
            sub_in[i] = owned[i];
        } else {
            sub_in[i] = s->h_in[i];
        }
    }
    for (int i = 0; i < s->n_out; i++) {
        cf_tensor_info t = cf_graph_output_info(g, i);
        ref[i] = malloc(numel(g, t, sub_dims) * sizeof(double));
        if (!ref[i]) {
            st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory");
            goto done;
        }
    }
    cf_bindings b = {.dims = sub_dims, .inputs = sub_in, .params = s->params};
    if ((st = cf_reference_run(g, &b, ref, err)) != CF_OK)
        goto done;
    *all_ok = true;
    for (int i = 0; i < s->n_out; i++) {
        cf_tensor_info t = cf_graph_output_info(g, i);
        size_t full = numel(g, t, s->dims), es = cf_dtype_size(t.dtype);
        size_t row_elems = full / (size_t)M;
        got = malloc(full * es);
        if (!got) {
            st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of host memory");
            goto done;
        }
        if ((st = cf_rt_memcpy_dtoh(got, s->d_out[i], full * es, err)) != CF_OK)
            goto done;
        check_stats cs = {0};
        for (int64_t r = 0; r < nr; r++)
            compare((const char *)got + (size_t)rows[r] * row_elems * es, t.dtype, ref[i] + (size_t)r * row_elems,
                    row_elems, &cs);
        double rel = cs.ref2 > 0 ? sqrt(cs.err2 / cs.ref2) : sqrt(cs.err2);
        bool ok = cs.bad_nonfinite == 0 && rel <= tolerance(t.dtype);
        printf("  check %-8s %s: %zu elements (%lld of %lld rows): max |err| %.3e, rel Frobenius %.3e, "
               "non-finite mismatches %zu -> %s\n",
               t.name, cf_dtype_name(t.dtype), cs.n, (long long)nr, (long long)M, cs.max_abs, rel,
               cs.bad_nonfinite, ok ? "PASS" : "FAIL");
        *all_ok = *all_ok && ok;
        free(got);
        got = NULL;
    }
done:
    free(got);
    for (int i = 0; i < s->n_in; i++)
        free(owned ? owned[i] : NULL);
    for (int i = 0; i < s->n_out; i++)
        free(ref ? ref[i] : NULL);
    free(owned);
    free(sub_in);
    free(ref);
    free(rows);
    return st;
}

/* ---- the two paths ------------------------------------------------------------ */

/* Builds and compiles the fused kernel.  CF_ERR_UNSUPPORTED (the reason in
 * err) when Ψ cannot fuse this graph yet. */
static cf_status build_fused(const cf_graph *g, const cli_opts *o, cf_kernel **k, cf_error *err)
{
    return cli_build_kernel(o, g, true, k, err);
}

/* After Φ or Ψ declined g: a pointer to the unfused path where it takes g. */
static void hint_unfused(const cf_graph *g)
{
    cf_unfused *u = NULL;
    if (cf_unfused_plan(g, &u, NULL) == CF_OK)
        fprintf(stderr, "  (`comfuse run --unfused` runs and checks the unfused path: cuBLASLt GEMMs + row "
                        "kernels)\n");
    cf_unfused_free(u);
}

/* Lowers g for the CLI; prints the error.  CF_OK with *ir NULL where Φ declines a B2B graph the
 * split into two fused kernels may still run (b2b.c: a second epilogue reading per-row values of
 * the first); building the kernel says whether it does. */
static cf_status lower_for_cli(const cf_graph *g, const char *verb, cf_ir **ir)
{
    cf_error err;
    cf_status st = cf_lower(g, ir, &err);
    if (st == CF_ERR_UNSUPPORTED && cf_b2b_shaped(g))
        return CF_OK;
    if (st != CF_OK) {
        fprintf(stderr, "comfuse %s: %s\n", verb, err.msg);
        if (st == CF_ERR_UNSUPPORTED)
            hint_unfused(g);
    }
    return st;
}

/* as cli.c's: kernel options the library refuses are bad usage (2) */
static int exit_code_of(cf_status st)
{
    return st == CF_OK ? 0 : st == CF_ERR_UNSUPPORTED ? 3 : st == CF_ERR_INVALID_ARG ? 2 : 1;
}

/* Builds what `run` launches: the fused kernel (and g's IR), or with --unfused
 * the unfused plan; *dim_m gets the dim the rows run over.  Prints errors. */
static cf_status build_for_run(const cf_graph *g, const cli_opts *o, cf_ir **ir, cf_kernel **k, cf_unfused **u,
                               cf_dim *dim_m)
{
    cf_error err;
    cf_status st;
    if (o->unfused) {
        if ((st = cf_unfused_build(g, o->spec, u, &err)) != CF_OK)
            fprintf(stderr, "comfuse run: unfused path: %s\n", err.msg);
        else
            *dim_m = cf_unfused_gemm_at(*u, 0)->dim_m;
        return st;
    }
    if ((st = lower_for_cli(g, "run", ir)) != CF_OK)
        return st;
    st = build_fused(g, o, k, &err);
    if (st == CF_OK)   /* a B2B kernel's rows are its first kernel's (the dims are numbered alike) */
        *dim_m = cf_kernel_b2b(*k) ? cf_kernel_ir(cf_b2b_part(cf_kernel_b2b(*k), 0))->dim_m : (*ir)->dim_m;
    if (st == CF_ERR_UNSUPPORTED) {
        fprintf(stderr, "comfuse run: the fused kernel is not available: %s\n", err.msg);
        hint_unfused(g);
    } else if (st != CF_OK) {
        fprintf(stderr, "comfuse run: %s\n", err.msg);
    }
    return st;
}

static void print_ran(const cli_opts *o, const cf_ir *ir, const cf_kernel *k, const cf_unfused *u, const session *s)
{
    if (!u && cf_kernel_b2b(k)) {
        cf_strbuf sb = {0};
        cf_b2b_describe(cf_kernel_b2b(k), &sb);
        printf("ran %s at %s (seed %llu): %s", o->spec, o->shape_text, (unsigned long long)o->seed,
               sb.data ? sb.data : "\n");
        cf_sb_free(&sb);
        return;
    }
    if (!u) {
        printf("ran %s at %s (seed %llu)%s\n", o->spec, o->shape_text, (unsigned long long)o->seed,
               cf_kernel_wide(k, s->dims[ir->dim_n]) ? ": rows wider than one cluster, so our GEMM -> f32 C -> row kernel"
                                                    : "");
        return;
    }
    const int ng = cf_unfused_num_gemms(u), np = cf_unfused_num_pieces(u);
    printf("ran %s at %s (seed %llu) on the unfused path: %d cuBLASLt GEMM%s into f32 buffers, %d row kernel%s\n",
           o->spec, o->shape_text, (unsigned long long)o->seed, ng, ng == 1 ? "" : "s", np, np == 1 ? "" : "s");
    for (int i = 0; i < np; i++) {
        const cf_unfused_gemm *m = cf_unfused_gemm_at(u, cf_unfused_piece_gemm(u, i));
        char b1[96];
        printf("  after GEMM '%s': a row kernel of %d stage%s (%d threads a CTA)\n",
               cf_graph_node_name(s->g, m->node, b1, sizeof b1), cf_unfused_piece_ir(u, i)->n_stages[0],
               cf_unfused_piece_ir(u, i)->n_stages[0] == 1 ? "" : "s", cf_rows_threads(s->dims[m->dim_n]));
    }
}

int cli_run(const cf_graph *g, const cli_opts *o)
{
    cf_error err;
    cf_ir *ir = NULL;
    cf_kernel *k = NULL;
    cf_unfused *u = NULL;
    cf_dim dim_m = 0;
    session s;
    memset(&s, 0, sizeof s);
    cf_status st = build_for_run(g, o, &ir, &k, &u, &dim_m);
    if (st != CF_OK) {
        cf_ir_free(ir);
        return exit_code_of(st);
    }
    fused_ctx f = {k, &s};
    unfused_ctx x = {u, &s};
    bool ok = true;
    if ((st = cf_rt_init(&err)) == CF_OK && (st = session_init(&s, g, o, o->seed, &err)) == CF_OK &&
        (st = launch_thrice(u ? run_unfused : run_fused, u ? (void *)&x : (void *)&f, &s, dim_m, &err)) == CF_OK &&
        (st = cf_rt_ctx_sync(&err)) == CF_OK) {
        print_ran(o, ir, k, u, &s);
        if (o->check)
            st = check_outputs(&s, dim_m, o->check_rows, &ok, &err);
    }
    if (st != CF_OK)
        fprintf(stderr, "comfuse run (%s): %s\n", u ? "unfused: cuBLAS + rows" : "fused", err.msg);
    cf_unfused_free(u);
    cf_kernel_free(k);
    session_free(&s);
    cf_ir_free(ir);
    if (st != CF_OK)
        return exit_code_of(st);
    if (o->check)
        printf("%s\n", ok ? "check passed" : "check FAILED");
    return ok ? 0 : 4;
}

/* ---- bench ------------------------------------------------------------------ */

/* The baseline (timing.c): cuBLASLt doing the GEMMs of the unfused plan when there is
 * one, else the IR's first, on the session's operands.  A dual GEMM's is one GEMM over its
 * two weights side by side, [K, 2N] (what a framework that concatenates them runs). */
static cf_status cublas_setup(cf_time_cublas **out, const cf_unfused *u, const cf_ir *ir, const session *s,
                              cf_error *err)
{
    cf_time_cublas *c = *out = cf_time_cublas_new();
    if (!c)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_status st = CF_OK;
    if (ir && ir->dual) {
        const cf_ir_arg *A = &ir->args[0], *B = &ir->args[1];
        return cf_time_cublas_add(c, A->dtype, s->dims[ir->dim_m], 2 * s->dims[ir->dim_n], s->dims[ir->dim_k],
                                  s->d_in[A->index], 0, B->b_is_nk, err);
    }
    for (int j = 0; u && j < cf_unfused_num_gemms(u) && st == CF_OK; j++) {
        const cf_unfused_gemm *m = cf_unfused_gemm_at(u, j);
        st = cf_time_cublas_add(c, m->dtype, s->dims[m->dim_m], s->dims[m->dim_n], s->dims[m->dim_k],
                                m->a_input >= 0 ? s->d_in[m->a_input] : 0, s->d_in[m->b_input], m->b_is_nk, err);
    }
    if (!u && !ir)
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0}, "no cuBLAS baseline: neither an IR nor an unfused plan");
    if (!u) {
        const cf_ir_arg *A = &ir->args[0], *B = &ir->args[1];
        st = cf_time_cublas_add(c, A->dtype, s->dims[ir->dim_m], s->dims[ir->dim_n], s->dims[ir->dim_k],
                                s->d_in[A->index], s->d_in[B->index], B->b_is_nk, err);
    }
    for (int i = 0; !u && ir->n_gemms == 2 && i < ir->n_args && st == CF_OK; i++) {
        const cf_ir_arg *W2 = &ir->args[i];   /* B2B: S*W2 right after, over a zeroed S of its own */
        if (W2->kind == CF_ARG_GEMM2_B)
            st = cf_time_cublas_add(c, W2->dtype, s->dims[ir->dim_m], s->dims[ir->dim_n2], s->dims[ir->dim_n], 0,
                                    s->d_in[W2->index], W2->b_is_nk, err);
    }
    return st;
}

/* Bytes every implementation must move at least: each input read once, each
 * output written once. */
static double floor_bytes(const session *s)
{
    double b = 0;
    for (int i = 0; i < s->n_in; i++) {
        cf_tensor_info t = cf_graph_input_info(s->g, i);
        b += (double)numel(s->g, t, s->dims) * (double)cf_dtype_size(t.dtype);
    }
    for (int i = 0; i < s->n_out; i++) {
        cf_tensor_info t = cf_graph_output_info(s->g, i);
        b += (double)numel(s->g, t, s->dims) * (double)cf_dtype_size(t.dtype);
    }
    return b;
}

/* Why a path is not available, for the report ("" when it is). */
typedef struct why {
    char text[400];
} why;

static void set_why(why *w, const cf_error *err)
{
    /* the first line of the message is enough for a table */
    size_t n = strcspn(err->msg, "\n");
    if (n >= sizeof w->text)
        n = sizeof w->text - 1;
    memcpy(w->text, err->msg, n);
    w->text[n] = 0;
}

/* With CF_TRACE=1 the kernel carries clock64 stamps per (CTA, role, tile), laid out
 * and named in device/cf_trace.h: one more launch, then where a CTA's cycles went. */
typedef struct trace_sums {
    double ml, ep, head, tail, total, period, cat[CF_TRC_N];
    double t_epi, t_fin, t_drain, t_other;   /* the tail, in order */
    double o_epi, o_fin;   /* the other warpgroup's, from the same point */
    double order, both;   /* the order barrier; both warpgroups in a mainloop (the drain) */
    double w_data, w_mma, w_issue, w_rest, w_drain, w_loop;   /* CF_TRACE=2: the k-loop */
    /* finisher: waiting for a park, its work; consumer: waiting for it */
    double f_wait, f_work, f_done, f_cat[CF_TRC_N];
    int ctas, tiles, f_tiles, d_tiles;
} trace_sums;

#define AT(c, w, j, e) tr[(((size_t)(c) * CF_TRACE_ROLES + (w)) * (CF_TRACE_TILES + 1) + (j)) * CF_TRACE_EV + (e)]
#define SUM(c, w, e) AT(c, w, CF_TRACE_TILES, e)
/* a tile's k-loop starts at CF_TRE_KLOOP, once its turn has come; bar.sync defers its blocking,
 * so CF_TRE_TURN's clock is read before the turn (kernels without CF_TRE_KLOOP: CF_TRE_TURN) */
#define TURN(c, w, j) (AT(c, w, j, CF_TRE_KLOOP) ? AT(c, w, j, CF_TRE_KLOOP) : AT(c, w, j, CF_TRE_TURN))

/* Cycles both warpgroups of CTA c spend in a mainloop at once. */
static double trace_both(const long long *tr, int c, int n0, int n1)
{
    double both = 0;
    for (int j0 = 0; j0 < n0 && j0 < CF_TRACE_TILES; j0++)
        for (int j1 = 0; j1 < n1 && j1 < CF_TRACE_TILES; j1++) {
            const long long a = TURN(c, 0, j0) > TURN(c, 1, j1) ? TURN(c, 0, j0) : TURN(c, 1, j1);
            const long long e0 = AT(c, 0, j0, CF_TRE_ACC), e1 = AT(c, 1, j1, CF_TRE_ACC);
            const long long b = e0 < e1 ? e0 : e1;
            if (e0 && e1 && b > a)
                both += (double)(b - a);
        }
    return both;
}

/* Adds tile j of warpgroup w of CTA c to s. */
static void trace_tile(const long long *tr, int c, int w, int j, trace_sums *s)
{
    const long long acc = AT(c, w, j, CF_TRE_ACC);
    s->ml += acc - AT(c, w, j, CF_TRE_ORDER);
    s->order += TURN(c, w, j) - AT(c, w, j, CF_TRE_ORDER);
    s->w_data += AT(c, w, j, CF_TRE_WAIT_DATA);
    s->w_mma += AT(c, w, j, CF_TRE_WAIT_MMA);
    s->w_issue += AT(c, w, j, CF_TRE_ISSUE);
    s->w_rest += AT(c, w, j, CF_TRE_RELEASE);
    s->w_drain += AT(c, w, j, CF_TRE_DRAIN);
    if (AT(c, w, j, CF_TRE_KLOOP_END))
        s->w_loop += AT(c, w, j, CF_TRE_KLOOP_END) - AT(c, w, j, CF_TRE_KLOOP);
    s->ep += AT(c, w, j, CF_TRE_EPI_DONE) - acc;
    if (AT(c, w, j, CF_TRE_FIN_WORK) && AT(c, w, j, CF_TRE_FIN_DONE)) {
        s->f_wait += AT(c, w, j, CF_TRE_FIN_WORK) - AT(c, w, j, CF_TRE_FIN_WAIT);
        s->f_work += AT(c, w, j, CF_TRE_FIN_DONE) - AT(c, w, j, CF_TRE_FIN_WORK);
        s->f_tiles++;
    }
    if (AT(c, w, j, CF_TRE_MID_DONE)) {
        s->f_done += AT(c, w, j, CF_TRE_MID_DONE) - AT(c, w, j, CF_TRE_MID_WAIT);
        s->d_tiles++;
    }
}

/* Adds CTA c to s (a CTA without a sane tile count is skipped). */
static void trace_cta(const long long *tr, int c, trace_sums *s)
{
    const int n0 = (int)SUM(c, 0, CF_TRS_TILES), n1 = (int)SUM(c, 1, CF_TRS_TILES);
    if (n0 <= 0 || n0 + n1 > 2 * CF_TRACE_TILES)
        return;
    const long long start = SUM(c, 0, CF_TRS_START), end0 = SUM(c, 0, CF_TRS_END);
    const long long end1 = SUM(c, 1, CF_TRS_END), end = end1 > end0 ? end1 : end0;
    long long first_acc = 0, last_acc = 0;
    int last_w = 0, last_j = 0;
    s->both += trace_both(tr, c, n0, n1);
    for (int i = 0; i < n0 + n1; i++) {   /* the warpgroups' tiles alternate */
        const int w = i & 1, j = i >> 1;
        const long long acc = AT(c, w, j, CF_TRE_ACC);
        trace_tile(tr, c, w, j, s);
        if (i == 0)
            first_acc = acc;
        if (acc > last_acc)
            last_acc = acc, last_w = w, last_j = j;
    }
    s->head += first_acc - start;
    s->tail += end - last_acc;
    /* the warpgroup with the last mainloop: its epilogue, the final late finish, the wait
     * for its stores, then the other warpgroup's lag */
    const long long e3 = AT(c, last_w, last_j, CF_TRE_EPI_DONE), fin = SUM(c, last_w, CF_TRS_LAST_FINISH);
    const long long end_w = SUM(c, last_w, CF_TRS_END);
    s->t_epi += e3 - last_acc;
    s->t_fin += fin - e3;
    s->t_drain += end_w - fin;
    s->t_other += end - end_w;
    /* the other warpgroup after the last mainloop: its last epilogue's end, its late finishes' */
    const int ow = 1 - last_w, on = ow ? n1 : n0;
    if (on > 0 && on <= CF_TRACE_TILES) {
        s->o_epi += (double)(AT(c, ow, on - 1, CF_TRE_EPI_DONE) - last_acc);
        s->o_fin += (double)(SUM(c, ow, CF_TRS_LAST_FINISH) - last_acc);
    }
    s->total += end - start;
    if (n0 + n1 > 1)
        s->period += (double)(last_acc - first_acc) / (n0 + n1 - 1);
    for (int q = 0; q < CF_TRC_N; q++) {
        s->cat[q] += (double)SUM(c, 0, CF_TRS_CAT0 + q) + (double)SUM(c, 1, CF_TRS_CAT0 + q);
        s->f_cat[q] += (double)SUM(c, 2, CF_TRS_CAT0 + q);
    }
    s->tiles += n0 + n1;
    s->ctas++;
}
#undef TURN
#undef SUM
/* The grid on one clock (%globaltimer): from the first CTA's start to the last role's end, and
 * how far apart the CTAs start and end.  Beside the launch's event-timed figure this splits it
 * into the CTAs' own time and what the launch adds. */
static void trace_print_grid(const long long *tr)
{
    long long s0 = 0, s1 = 0, e0 = 0, e1 = 0;
    int n = 0;
    for (int c = 0; c < CF_TRACE_CTAS; c++) {
        const long long start = AT(c, 0, CF_TRACE_TILES, CF_TRS_GT_START);
        long long end = 0;
        for (int w = 0; w < CF_TRACE_ROLES; w++)
            end = AT(c, w, CF_TRACE_TILES, CF_TRS_GT_END) > end ? AT(c, w, CF_TRACE_TILES, CF_TRS_GT_END) : end;
        if (!start || !end)
            continue;
        s0 = !n || start < s0 ? start : s0;
        s1 = !n || start > s1 ? start : s1;
        e0 = !n || end < e0 ? end : e0;
        e1 = !n || end > e1 ? end : e1;
        n++;
    }
    if (n)
        printf("  trace, the grid (globaltimer, %d CTAs): first start to last end %.2f us; starts spread over "
               "%.2f us, ends over %.2f us\n", n, (double)(e1 - s0) / 1e3, (double)(s1 - s0) / 1e3,
               (double)(e1 - e0) / 1e3);
}

#undef AT

/* The finisher's lines (with a finisher only). */
static void trace_print_finisher(const trace_sums *s)
{
    const double ft = s->f_tiles * 1e3;
    printf("  trace, the finisher per tile (kcycles, thread 0): waiting for the park %.2f, its work %.2f; "
           "the consumer waiting for it before the late finish %.2f\n", s->f_wait / ft, s->f_work / ft,
           s->d_tiles ? s->f_done / s->d_tiles / 1e3 : 0.0);
    printf("  trace, the finisher's parts per tile (kcycles, thread 0): gather %.2f (first round of loads %.2f, "
           "re-polls %.1f), store waits %.2f; by section (as marked in the source):", s->f_cat[CF_TRC_GATHER] / ft,
           s->f_cat[CF_TRC_LOADS] / ft, s->f_cat[CF_TRC_SPINS] / s->f_tiles, s->f_cat[CF_TRC_STORE] / ft);
    for (int q = CF_TRC_SEC0; q < CF_TRC_SEC0 + CF_TRC_SECTIONS; q++)
        printf(" %.2f", s->f_cat[q] / ft);
    printf("\n");
}

static void trace_print(const trace_sums *s)
{
    const double tk = s->tiles * 1e3, ck = s->ctas * 1e3;
    const double *cat = s->cat;
    printf("  trace (kcycles, mean over %d CTAs, %.1f tiles each): tile period %.2f | per tile: order+mainloop %.2f, "
           "epilogue %.2f | per CTA: first tile %.2f, tail after the last mainloop %.2f, total %.1f\n",
           s->ctas, (double)s->tiles / s->ctas, s->period / ck, s->ml / tk, s->ep / tk, s->head / ck, s->tail / ck,
           s->total / ck);
    printf("  trace, a tile's mainloop (kcycles, thread 0): waiting for its turn (order barrier) %.2f, mainloop %.2f, "
           "of which the other warpgroup's mainloop overlaps %.2f", s->order / tk, (s->ml - s->order) / tk,
           2 * s->both / tk);
    if (s->w_data > 0 || s->w_mma > 0)   /* CF_TRACE=2 */
        printf(" (the k-loop %.2f: waiting for TMA data %.2f, for wgmma %.2f; issuing wgmma %.2f; releases %.2f; "
               "after it %.2f)", s->w_loop / tk, s->w_data / tk, s->w_mma / tk, s->w_issue / tk, s->w_rest / tk,
               s->w_drain / tk);
    printf("\n");
    printf("  trace, epilogue parts per tile (kcycles, thread 0): gather %.2f (first round of loads %.2f, re-polls %.1f), "
           "park wait %.2f, store waits %.2f, late finish %.2f (every late finish's vector loads and loop "
           "over the tile %.2f)\n", cat[CF_TRC_GATHER] / tk, cat[CF_TRC_LOADS] / tk, cat[CF_TRC_SPINS] / s->tiles,
           cat[CF_TRC_PARK] / tk, cat[CF_TRC_STORE] / tk, cat[CF_TRC_FINISH] / tk, cat[CF_TRC_FLOOP] / tk);
    /* the sections Psi marks (CF_TRC_STEP in the generated source: loops, reductions, post, park) */
    printf("  trace, epilogue's first part by section (kcycles per tile, thread 0, as marked in the source):");
    for (int q = CF_TRC_SEC0; q < CF_TRC_SEC0 + CF_TRC_SECTIONS; q++)
        printf(" %.2f", cat[q] / tk);
    printf("\n");
    if (s->f_tiles)
        trace_print_finisher(s);
    printf("  trace, the tail (kcycles): last tile's epilogue %.2f, final late finish %.2f, store drain %.2f, "
           "other warpgroup's lag %.2f (its last epilogue ends at %.2f, its late finishes at %.2f)\n",
           s->t_epi / ck, s->t_fin / ck, s->t_drain / ck, s->t_other / ck, s->o_epi / ck, s->o_fin / ck);
}

static void print_trace(fused_ctx *f, cf_timer *timer)
{
    cf_error err;
    cf_rt_devptr p = 0;
    size_t bytes = 0;
    if (cf_kernel_global(f->k, "cf_trace", &p, &bytes, &err) != CF_OK)
        return;
    const size_t want = sizeof(long long) * CF_TRACE_CTAS * CF_TRACE_ROLES * (CF_TRACE_TILES + 1) * CF_TRACE_EV;
    if (bytes != want) {   /* a kernel built from another cf_trace.h */
        printf("  trace: the kernel's cf_trace is %zu bytes, not the %zu cf_trace.h lays out\n", bytes, want);
        return;
    }
    /* the traced launch timed as bench times one (L2 flushed, events around it): its span
     * beside the CTAs' own (trace_print_grid) is what the launch adds */
    long long *tr = malloc(bytes);
    const cf_time_job job = {run_fused, f};
    float ms = 0;
    if (!tr || cf_rt_memset_d8(p, 0, bytes, &err) != CF_OK || cf_time_once(timer, &job, 7, &ms, &err) != CF_OK ||
        cf_rt_memcpy_dtoh(tr, p, bytes, &err) != CF_OK) {
        free(tr);
        return;
    }
    trace_sums s;
    memset(&s, 0, sizeof s);
    for (int c = 0; c < CF_TRACE_CTAS; c++)
        trace_cta(tr, c, &s);
    if (s.ctas && s.tiles)
        trace_print(&s);
    trace_print_grid(tr);
    printf("  trace, the launch (CUDA events, L2 flushed before it, one sample): %.2f us\n", ms * 1e3);
    free(tr);
}

/* Builds what bench times: the fused kernel (with g's IR) and the unfused
 * plan, each where it exists, with the reason where it does not. */
static cf_status build_for_bench(const cf_graph *g, const cli_opts *o, cf_ir **ir, cf_kernel **k, cf_unfused **u,
                                 why *no_fused, why *no_unfused)
{
    cf_error err;
    cf_status st = cf_lower(g, ir, &err);
    if (st == CF_OK || (st == CF_ERR_UNSUPPORTED && cf_b2b_shaped(g)))   /* see lower_for_cli */
        st = build_fused(g, o, k, &err);
    if (st == CF_ERR_UNSUPPORTED) {
        set_why(no_fused, &err);
        st = CF_OK;
    }
    if (st == CF_OK && (st = cf_unfused_build(g, o->spec, u, &err)) == CF_ERR_UNSUPPORTED) {
        set_why(no_unfused, &err);
        st = CF_OK;
    }
    if (st != CF_OK)
        fprintf(stderr, "comfuse bench: %s\n", err.msg);
    else if (!*k && !*u) {
        fprintf(stderr, "comfuse bench: nothing to time for %s:\n  fused: %s\n  unfused: %s\n", o->spec,
                no_fused->text, no_unfused->text);
        st = CF_ERR_UNSUPPORTED;
    }
    return st;
}

/* What bench has: the paths that exist, the timer and baseline, and the times. */
typedef struct bench {
    session s;
    cf_ir *ir;
    cf_kernel *k;
    cf_unfused *u;
    bool fused_failed;
    why no_fused, no_unfused;
    cf_timer *timer;
    cf_time_cublas *cb;
    cf_time_result cublas, fused, unfused;
} bench;

static void bench_free(bench *b)
{
    cf_time_cublas_free(b->cb);
    cf_unfused_free(b->u);
    cf_kernel_free(b->k);
    cf_time_close(b->timer);
    session_free(&b->s);
    cf_ir_free(b->ir);
}

/* A fused kernel that fails to launch still leaves the baselines worth timing: it is
 * dropped (the reason kept) and the bench reports it and exits 1. */
static void bench_probe_fused(bench *b)
{
    cf_error err;
    fused_ctx f0 = {b->k, &b->s};
    cf_status fs = run_fused(&f0, NULL, &err);
    if (fs == CF_OK)
        fs = cf_rt_ctx_sync(&err);
    if (fs == CF_OK)
        return;
    /* CF_ERR_UNSUPPORTED at launch: a shape the kernel declines (not a failure) */
    b->fused_failed = fs != CF_ERR_UNSUPPORTED;
    if (b->fused_failed)
        fprintf(stderr, "comfuse bench: the fused kernel failed: %s\n", err.msg);
    set_why(&b->no_fused, &err);
    cf_kernel_free(b->k);
    b->k = NULL;
    cf_rt_ctx_sync(NULL); /* let a failed launch finish before the others run */
}

/* cuBLAS, then each path that exists, in turns (timing.c). */
static cf_status bench_time(bench *b, int iters, cf_error *err)
{
    fused_ctx f = {b->k, &b->s};
    unfused_ctx x = {b->u, &b->s};
    cf_time_job jobs[3];
    cf_time_result res[3], *outs[3];
    int n = 0;
    jobs[n] = (cf_time_job){cf_time_cublas_run, b->cb}, outs[n++] = &b->cublas;
    if (b->k)
        jobs[n] = (cf_time_job){run_fused, &f}, outs[n++] = &b->fused;
    if (b->u)
        jobs[n] = (cf_time_job){run_unfused, &x}, outs[n++] = &b->unfused;
    float *samples = malloc((size_t)n * (size_t)iters * sizeof *samples);
    if (!samples)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_status st = cf_time_paired(b->timer, jobs, n, 5, iters, samples, res, err);
    /* CF_BENCH_SAMPLES=1: every launch's time in launch order (implementation, turn, ms) */
    for (int j = 0; j < n && st == CF_OK && getenv("CF_BENCH_SAMPLES"); j++)
        for (int i = 0; i < iters; i++)
            printf("SAMPLE\t%d\t%d\t%.5f\n", j, i, samples[(size_t)j * (size_t)iters + (size_t)i]);
    for (int j = 0; j < n && st == CF_OK; j++)
        *outs[j] = res[j];
    free(samples);
    return st;
}

/* A fused kernel's shape line. */
static void report_kernel_shape(const char *what, const cf_resources *r)
{
    char lay[256];
    printf("  %-22s %dx%d tiles, %d stages, %s, %d regs, %d+%d B smem, %d CTAs resident\n", what, r->block_m,
           r->block_n, r->stages, cli_layout_text(r, lay, sizeof lay), r->registers, r->smem_bytes,
           r->static_smem_bytes, r->resident_ctas);
}

/* The fused kernel's row of the table, and its shape line (a B2B kernel's: each of its two). */
static void report_fused(const bench *b, double flops, double bytes, double floor_ms, bool have_r,
                         const cf_resources *r)
{
    const float t = b->fused.median_ms;
    const cf_b2b *b2b = cf_kernel_b2b(b->k);
    printf("  %-22s %9.4f %9.1f %9.0f %10.3f %10.3f\n",
           b2b                                          ? (cf_b2b_one_kernel(b2b) ? "comfuse B2B, one kernel"
                                                                                    : "comfuse B2B, 2 kernels")
           : cf_kernel_wide(b->k, b->s.dims[b->ir->dim_n]) ? "comfuse (wide rows)"
                                                          : "comfuse fused",
           t, flops / t / 1e9, bytes / t / 1e6, b->fused.ratio, t / floor_ms);
    cf_resources rp;
    for (int i = 0; b2b && i < 2; i++)
        if (cf_kernel_resources(cf_b2b_part(b2b, i), &rp, NULL) == CF_OK)
            report_kernel_shape(cf_b2b_one_kernel(b2b) ? (i ? "  phase 2 (S*W2):" : "  phase 1 (X*W1, F):")
                                : i ? "  kernel 2 (S*W2):" : "  kernel 1 (X*W1, F):", &rp);
    if (have_r && !b2b)
        report_kernel_shape("  fused kernel:", r);
}

static void bench_report(bench *b, const cli_opts *o)
{
    const double flops = cf_time_cublas_flops(b->cb), bytes = floor_bytes(&b->s);
    const double floor_ms = fmax(flops / 790e12, bytes / 4.3e12) * 1e3;
    const float t_cublas = b->cublas.median_ms, t_unfused = b->unfused.median_ms;
    char fused_col[32] = "-", unfused_col[32] = "-", fused_r[32] = "-", unfused_r[32] = "-";
    printf("bench %s at %s (median of %d, L2 flushed; vs cuBLAS: median of per-turn ratios)\n", o->spec,
           o->shape_text, o->iters);
    printf("  %-22s %9s %9s %9s %10s %10s\n", "implementation", "ms", "TFLOP/s", "GB/s", "vs cuBLAS", "vs floor");
    cf_resources r;
    const bool have_r = b->k && cf_kernel_resources(b->k, &r, NULL) == CF_OK;
    if (b->k) {
        report_fused(b, flops, bytes, floor_ms, have_r, &r);
        snprintf(fused_col, sizeof fused_col, "%.5f", b->fused.median_ms);
        snprintf(fused_r, sizeof fused_r, "%.4f", b->fused.ratio);
    } else {
        printf("  %-22s %s (%s)\n", "comfuse fused", b->fused_failed ? "FAILED" : "not available", b->no_fused.text);
    }
    printf("  %-22s %9.4f %9.1f %9s %10.3f %10.3f\n",
           cf_time_cublas_count(b->cb) == 1 ? "cuBLASLt GEMM alone" : "cuBLASLt GEMMs alone", t_cublas,
           flops / t_cublas / 1e9, "-", 1.0, t_cublas / floor_ms);
    if (b->u) {
        printf("  %-22s %9.4f %9.1f %9.0f %10.3f %10.3f\n", "unfused: cuBLAS + rows", t_unfused,
               flops / t_unfused / 1e9, bytes / t_unfused / 1e6, b->unfused.ratio, t_unfused / floor_ms);
        snprintf(unfused_col, sizeof unfused_col, "%.5f", t_unfused);
        snprintf(unfused_r, sizeof unfused_r, "%.4f", b->unfused.ratio);
    } else {
        printf("  %-22s not available (%s)\n", "unfused: cuBLAS + rows", b->no_unfused.text);
    }
    printf("  %-22s %9.4f %9s %9s\n", "floor", floor_ms, "", "");
    /* the plan's cost model beside the measurement (bench/grid.py: predicted vs measured) */
    const cf_ir *ir = b->ir;
    const double pred_ms = !b->k               ? 0
                           : cf_kernel_b2b(b->k) ? cf_b2b_predict_us(cf_kernel_b2b(b->k), b->s.dims) / 1e3
                                                 : cf_kernel_predict_us(b->k, b->s.dims[ir->dim_m], b->s.dims[ir->dim_n],
                                                                        b->s.dims[ir->dim_k]) / 1e3;
    char pred_col[32] = "-";
    if (pred_ms > 0) {
        printf("  %-22s %9.4f %9s %9s %10s %10s  (measured/predicted %.3f)\n", "predicted (plan model)", pred_ms,
               "", "", "", "", b->fused.median_ms / pred_ms);
        snprintf(pred_col, sizeof pred_col, "%.5f", pred_ms);
    }
    if (have_r && getenv("CF_TRACE") && !cf_kernel_b2b(b->k)) {
        /* the trace reads a CTA's tiles as alternating warpgroups' (with a finisher too) */
        fused_ctx f = {b->k, &b->s};
        if (r.schedule != CF_SCHEDULE_COOPERATIVE)
            print_trace(&f, b->timer);
        else
            printf("  trace: pingpong kernels only (this one is cooperative; --schedule pingpong)\n");
    }
    /* columns: spec shape fused cublas floor unfused (ms), then fused/cuBLAS and unfused/cuBLAS
     * (medians of per-turn ratios), then the plan's predicted fused time (ms); "-" for a path
     * not available */
    printf("BENCH\t%s\t%s\t%s\t%.5f\t%.5f\t%s\t%s\t%s\t%s\n", o->spec, o->shape_text, fused_col, t_cublas,
           floor_ms, unfused_col, fused_r, unfused_r, pred_col);
}

int cli_bench(const cf_graph *g, const cli_opts *o)
{
    cf_error err;
    bench b;
    memset(&b, 0, sizeof b);
    /* Either path may be outside what comfuse does; bench what exists. */
    cf_status st = build_for_bench(g, o, &b.ir, &b.k, &b.u, &b.no_fused, &b.no_unfused);
    if (st != CF_OK) {   /* said on stderr */
        bench_free(&b);
        return exit_code_of(st);
    }
    st = cf_rt_init(&err);
    if (st == CF_OK)
        st = session_init(&b.s, g, o, o->seed, &err);
    if (st == CF_OK)   /* 256 MiB: several times the H200's 50 MiB L2 */
        st = cf_time_open((size_t)256 << 20, &b.timer, &err);
    if (st == CF_OK && b.k)
        bench_probe_fused(&b);
    if (st == CF_OK)
        st = cublas_setup(&b.cb, b.u, b.ir, &b.s, &err);
    if (st == CF_OK)
        st = bench_time(&b, o->iters, &err);
    if (st == CF_OK)
        bench_report(&b, o);
    else
        fprintf(stderr, "comfuse bench: %s\n", err.msg);
    const bool failed = b.fused_failed;
    bench_free(&b);
    return st == CF_OK && failed ? 1 : exit_code_of(st);
}
