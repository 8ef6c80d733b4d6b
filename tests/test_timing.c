/* test_timing.c — timing.c: the statistics on the CPU, then the timing loop
 * itself on the stand-in driver (tests/fake_cuda.c: events read 1 ms, memsets
 * are real), which this test re-executes itself under. */
#include "cf_internal.h"
#include "test_util.h"

#include <unistd.h>

static void test_median(void)
{
    float a[] = {3, 1, 2};
    CHECK(cf_time_median(a, 3) == 2.0f);
    CHECK(a[0] == 1.0f && a[2] == 3.0f);   /* sorted in place */
    float b[] = {4, 1, 3, 2};
    CHECK(cf_time_median(b, 4) == 3.0f);   /* the element at n / 2 */
    CHECK(cf_time_median(b, 0) == 0.0f);
}

static void test_summarize(void)
{
    /* job 1 is slower in every turn; the turns' ratios are 1.5, 1.1, 1.2: their median
     * (1.2) is what pairs a turn's launches, not the ratio of the medians (11 / 10) */
    const float s[] = {1, 10, 10, /* job 1 */ 1.5f, 11, 12};
    cf_time_result r[2];
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_time_summarize(s, 2, 3, r, &err));
    CHECK(r[0].median_ms == 10.0f && r[0].ratio == 1.0f);
    CHECK(r[1].median_ms == 11.0f && fabsf(r[1].ratio - 1.2f) < 1e-6f);
    CHECK(s[3] == 1.5f);   /* the samples are left as they were */
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_time_summarize(s, 2, 0, r, &err));
}

/* A job that records the order jobs ran in, and fails on call fail_at. */
typedef struct counter {
    int id, calls, fail_at;
    int *log, *n_log;
} counter;

static cf_status count_run(void *ctx, cf_rt_stream s, cf_error *err)
{
    counter *c = ctx;
    (void)s;
    c->log[(*c->n_log)++] = c->id;
    if (++c->calls == c->fail_at)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "job %d failed", c->id);
    return CF_OK;
}

static void test_paired_on_fake_driver(void)
{
    cf_error err;
    cf_status st = cf_rt_init(&err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK) {
        fprintf(stderr, "fake driver: %s\n", err.msg);
        return;
    }
    cf_timer *t = NULL;
    CHECK_EQ_INT(CF_OK, cf_time_open(1 << 20, &t, &err));
    if (!t)
        return;
    int log[64], n_log = 0;
    counter c0 = {0, 0, -1, log, &n_log}, c1 = {1, 0, -1, log, &n_log};
    cf_time_job jobs[2] = {{count_run, &c0}, {count_run, &c1}};
    float samples[2 * 7];
    cf_time_result r[2];
    CHECK_EQ_INT(CF_OK, cf_time_paired(t, jobs, 2, 5, 7, samples, r, &err));
    CHECK_EQ_INT(12, c0.calls);   /* 5 warm-ups + 7 timed */
    CHECK_EQ_INT(12, c1.calls);
    bool turns = n_log == 24;     /* in turns: 0 1 0 1 ... */
    for (int i = 0; i < n_log; i++)
        turns = turns && log[i] == (i & 1);
    CHECK(turns);
    CHECK(samples[0] == 1.0f && samples[13] == 1.0f);   /* the fake's events: 1 ms apart */
    CHECK(r[1].median_ms == 1.0f && r[1].ratio == 1.0f);
    /* a failing job stops the loop and its error comes back */
    n_log = 0, c0.calls = c1.calls = 0, c1.fail_at = 7;
    CHECK_EQ_INT(CF_ERR_CUDA, cf_time_paired(t, jobs, 2, 5, 7, NULL, r, &err));
    CHECK_CONTAINS(err.msg, "job 1 failed");
    CHECK_EQ_INT(14, n_log);
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_time_paired(t, jobs, 0, 5, 7, NULL, r, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_time_paired(t, jobs, 2, 5, 0, NULL, r, &err));
    float ms = 0;
    CHECK_EQ_INT(CF_OK, cf_time_once(t, &jobs[0], 3, &ms, &err));
    CHECK(ms == 1.0f);
    cf_time_close(t);

    /* the baseline refuses what is not a GEMM before it touches cuBLAS */
    cf_time_cublas *cb = cf_time_cublas_new();
    CHECK(cb != NULL);
    if (cb) {
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_time_cublas_add(cb, CF_BF16, 0, 8, 8, 0, 0, false, &err));
        CHECK_CONTAINS(err.msg, "bad GEMM shape 0x8x8");
        CHECK_EQ_INT(0, cf_time_cublas_count(cb));
        CHECK(cf_time_cublas_flops(cb) == 0);
        CHECK_EQ_INT(CF_OK, cf_time_cublas_run(cb, NULL, &err));   /* no GEMMs: nothing to run */
        cf_time_cublas_free(cb);
    }
}

int main(int argc, char **argv)
{
    (void)argc;
    /* the driver part runs on <this test's dir>/fake/libcuda.so.1: re-executed with it first
     * on the library path (the loader reads LD_LIBRARY_PATH once, at start) */
    if (!getenv("CF_TEST_TIMING_FAKE")) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", argv[0]);
        char *slash = strrchr(dir, '/');
        snprintf(slash ? slash : dir, sizeof dir - (size_t)(slash ? slash - dir : 0), "%s",
                 slash ? "/fake" : "fake");
        setenv("LD_LIBRARY_PATH", dir, 1);
        setenv("CF_TEST_TIMING_FAKE", "1", 1);
        execv(argv[0], argv);
        perror("test_timing: execv");
        return 1;
    }
    test_median();
    test_summarize();
    test_paired_on_fake_driver();
    return tu_finish("test_timing");
}
