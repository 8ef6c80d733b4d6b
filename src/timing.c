/* timing.c — timing work on the GPU the one way comfuse reports it: CUDA
 * events around each launch after a warm-up, L2 flushed before each, medians
 * over the runs; and cuBLASLt doing the GEMMs alone, the baseline every
 * comparison is made against.
 *
 * Implementations are timed in turns (job 0, job 1, ..., job 0, ...), each
 * launch behind a flush and between its own events.  The card changes speed
 * under load (the H200's power cap: the same cuBLAS kernel 0.340 ms for the
 * first ~20 launches after idle, 0.378 ms later): both launches of a turn run
 * at one clock, so the median over turns of job j's time over job 0's cannot
 * pair one implementation's fast launches with the other's slow ones, as the
 * ratio of the two medians can.
 *
 * Uses the runtime's driver and cuBLASLt layers, which never call up into it. */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

struct cf_timer {
    cf_rt_event e0, e1;
    cf_rt_devptr flush;
    size_t flush_bytes;
};

cf_status cf_time_open(size_t flush_bytes, cf_timer **out, cf_error *err)
{
    *out = NULL;
    cf_timer *t = calloc(1, sizeof *t);
    if (!t)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    t->flush_bytes = flush_bytes / 4 * 4;   /* written as 32-bit words */
    cf_status st = cf_rt_event_create(&t->e0, err);
    if (st == CF_OK)
        st = cf_rt_event_create(&t->e1, err);
    if (st == CF_OK && t->flush_bytes)
        st = cf_rt_malloc(&t->flush, t->flush_bytes, err);
    if (st != CF_OK) {
        cf_time_close(t);
        return st;
    }
    *out = t;
    return CF_OK;
}

void cf_time_close(cf_timer *t)
{
    if (!t)
        return;
    if (t->e0)
        cf_rt_event_destroy(t->e0, NULL);
    if (t->e1)
        cf_rt_event_destroy(t->e1, NULL);
    if (t->flush)
        cf_rt_free(t->flush, NULL);
    free(t);
}

cf_status cf_time_flush_l2(cf_timer *t, uint32_t pattern, cf_error *err)
{
    return t->flush ? cf_rt_memset_d32(t->flush, pattern, t->flush_bytes / 4, err) : CF_OK;
}

cf_status cf_time_once(cf_timer *t, const cf_time_job *job, uint32_t pattern, float *ms, cf_error *err)
{
    cf_status st;
    if ((st = cf_time_flush_l2(t, pattern, err)) != CF_OK || (st = cf_rt_event_record(t->e0, NULL, err)) != CF_OK ||
        (st = job->fn(job->ctx, NULL, err)) != CF_OK || (st = cf_rt_event_record(t->e1, NULL, err)) != CF_OK ||
        (st = cf_rt_event_sync(t->e1, err)) != CF_OK)
        return st;
    return cf_rt_event_elapsed_ms(t->e0, t->e1, ms, err);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

float cf_time_median(float *v, int n)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return v[n / 2];
}

cf_status cf_time_summarize(const float *samples, int n, int iters, cf_time_result *out, cf_error *err)
{
    float *v = iters > 0 ? malloc((size_t)iters * sizeof *v) : NULL;
    if (!v)
        return cf_errorf(err, iters > 0 ? CF_ERR_NO_MEMORY : CF_ERR_INVALID_ARG, (cf_loc){0},
                         iters > 0 ? "out of memory" : "no timed runs (iters %d)", iters);
    for (int j = 0; j < n; j++) {
        const float *tj = samples + (size_t)j * (size_t)iters;
        for (int i = 0; i < iters; i++)
            v[i] = tj[i] / samples[i];
        out[j].ratio = cf_time_median(v, iters);
        memcpy(v, tj, (size_t)iters * sizeof *v);
        out[j].median_ms = cf_time_median(v, iters);
    }
    free(v);
    return CF_OK;
}

/* warmup rounds of every job, untimed (module loads, the clocks ramping up) */
static cf_status warm_up(const cf_time_job *jobs, int n, int warmup, cf_error *err)
{
    cf_status st = CF_OK;
    for (int i = 0; i < warmup && st == CF_OK; i++)
        for (int j = 0; j < n && st == CF_OK; j++)
            st = jobs[j].fn(jobs[j].ctx, NULL, err);
    return st;
}

cf_status cf_time_paired(cf_timer *t, const cf_time_job *jobs, int n, int warmup, int iters, float *samples,
                         cf_time_result *out, cf_error *err)
{
    if (n < 1 || iters < 1 || warmup < 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "timing %d jobs over %d runs after %d warm-ups", n,
                         iters, warmup);
    float *own = samples ? NULL : malloc((size_t)n * (size_t)iters * sizeof *own);
    float *s = samples ? samples : own;
    if (!s)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_status st = warm_up(jobs, n, warmup, err);
    for (int i = 0; i < iters && st == CF_OK; i++)
        for (int j = 0; j < n && st == CF_OK; j++)   /* each flush writes a new pattern */
            st = cf_time_once(t, &jobs[j], (uint32_t)i, &s[(size_t)j * (size_t)iters + (size_t)i], err);
    if (st == CF_OK)
        st = cf_time_summarize(s, n, iters, out, err);
    free(own);
    return st;
}

/* ---- the baseline: cuBLASLt doing the GEMMs alone ---------------------------- */

struct cf_time_cublas {
    int n;
    int64_t mnk[CF_TIME_MAX_GEMMS][3];
    cf_rt_cublas_plan *plan[CF_TIME_MAX_GEMMS];
    cf_rt_devptr a[CF_TIME_MAX_GEMMS], b[CF_TIME_MAX_GEMMS], c[CF_TIME_MAX_GEMMS];
    bool own_a[CF_TIME_MAX_GEMMS], own_b[CF_TIME_MAX_GEMMS];
};

cf_time_cublas *cf_time_cublas_new(void) { return calloc(1, sizeof(cf_time_cublas)); }

void cf_time_cublas_free(cf_time_cublas *c)
{
    if (!c)
        return;
    for (int j = 0; j < c->n; j++) {
        cf_rt_cublas_plan_free(c->plan[j]);
        if (c->own_a[j] && c->a[j])
            cf_rt_free(c->a[j], NULL);
        if (c->own_b[j] && c->b[j])
            cf_rt_free(c->b[j], NULL);
        if (c->c[j])
            cf_rt_free(c->c[j], NULL);
    }
    free(c);
}

cf_status cf_time_cublas_add(cf_time_cublas *c, cf_dtype t, int64_t M, int64_t N, int64_t K, cf_rt_devptr a,
                             cf_rt_devptr b, bool b_is_nk, cf_error *err)
{
    if (c->n >= CF_TIME_MAX_GEMMS)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "more than %d GEMMs in one baseline", CF_TIME_MAX_GEMMS);
    if (M <= 0 || N <= 0 || K <= 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "bad GEMM shape %lldx%lldx%lld", (long long)M,
                         (long long)N, (long long)K);
    const int j = c->n++;
    const size_t es = cf_dtype_size(t);
    c->mnk[j][0] = M, c->mnk[j][1] = N, c->mnk[j][2] = K;
    c->b[j] = b;
    c->a[j] = a;
    c->own_a[j] = !a;
    c->own_b[j] = !b;
    cf_status st = CF_OK;
    if (!a && (st = cf_rt_malloc(&c->a[j], (size_t)M * (size_t)K * es, err)) == CF_OK)
        st = cf_rt_memset_d8(c->a[j], 0, (size_t)M * (size_t)K * es, err);
    if (st == CF_OK && !b && (st = cf_rt_malloc(&c->b[j], (size_t)K * (size_t)N * es, err)) == CF_OK)
        st = cf_rt_memset_d8(c->b[j], 0, (size_t)K * (size_t)N * es, err);
    if (st == CF_OK)
        st = cf_rt_malloc(&c->c[j], (size_t)M * (size_t)N * es, err);
    if (st == CF_OK)
        st = cf_rt_cublas_plan_create(t, t, M, N, K, b_is_nk, &c->plan[j], err);
    return st;
}

cf_status cf_time_cublas_run(void *ctx, cf_rt_stream s, cf_error *err)
{
    cf_time_cublas *c = ctx;
    cf_status st = CF_OK;
    for (int j = 0; j < c->n && st == CF_OK; j++)
        st = cf_rt_cublas_plan_run(c->plan[j], c->a[j], c->b[j], c->c[j], s, err);
    return st;
}

int cf_time_cublas_count(const cf_time_cublas *c) { return c->n; }

double cf_time_cublas_flops(const cf_time_cublas *c)
{
    double f = 0;
    for (int j = 0; j < c->n; j++)
        f += 2.0 * (double)c->mnk[j][0] * (double)c->mnk[j][1] * (double)c->mnk[j][2];
    return f;
}
