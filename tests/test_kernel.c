/* test_kernel.c — kernel.c's launch path on the stand-in driver (tests/fake_cuda.c, which this
 * test re-executes itself under): what one launch costs the host in driver calls.  The kernel is
 * compiled for real (NVRTC, no GPU); launches run nothing, the fake counts the calls and keeps the
 * last launch's first TMA descriptors (each holds the address it was encoded for). */
#include "cf_internal.h"
#include "test_util.h"

#include <dlfcn.h>
#include <unistd.h>

/* The fake's counters (tests/fake_cuda.c). */
struct fake_cuda_counts {
    int encodes, allocs, frees, syncs, memsets_async, launches, copies_2d;
    size_t memset_async_bytes;
    unsigned char params[512];
};
static struct fake_cuda_counts *fc;
static void (*fake_capture)(int);

/* LayerNorm over a row of 4096: a row group of CTAs reducing through L2 (CF_REDUCE_GLOBAL). */
enum { N = 4096, K = 512, M_MAX = 2048 };
static cf_graph *g;
static uint64_t x[2], w, vec[3], y;   /* X twice (a new pointer), Y with 16 spare bytes */

static cf_kernel *new_kernel(void)
{
    cf_error err;
    cf_options opt = cf_options_for(g, 512, N, K);
    cf_kernel *k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build(g, &opt, "test_kernel", &k, &err));
    if (k && cf_kernel_compile(k, &err) != CF_OK) {
        fprintf(stderr, "compile: %s\n", err.msg);
        cf_kernel_free(k);
        return NULL;
    }
    return k;
}

/* Launches k at M with X number xi and Y at byte offset yoff; the counters restart first. */
static cf_status launch(cf_kernel *k, int64_t M, int xi, int yoff, cf_error *err)
{
    const int64_t dims[3] = {M, N, K};
    const uint64_t in[5] = {x[xi], w, vec[0], vec[1], vec[2]}, out[1] = {y + (uint64_t)yoff};
    const cf_launch_args a = {dims, in, NULL, out, NULL};
    struct fake_cuda_counts zero = {0};
    *fc = zero;
    return cf_kernel_launch(k, &a, err);
}

static uint64_t desc_addr(int i)
{
    uint64_t p;
    memcpy(&p, fc->params + 128 * i, 8);
    return p;
}

/* A second launch with the same tensors encodes no descriptor; a new pointer or M re-encodes
 * exactly the descriptors that changed, and the block carries the new addresses. */
static void test_descriptor_cache(cf_kernel *k)
{
    cf_error err;
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 0, &err));
    CHECK_EQ_INT(3, fc->encodes);   /* X, W, Y */
    CHECK_EQ_INT(1, fc->launches);
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 0, &err));
    CHECK_EQ_INT(0, fc->encodes);
    CHECK_EQ_INT(1, fc->launches);
    CHECK(desc_addr(0) == x[0] && desc_addr(1) == w && desc_addr(2) == y);
    CHECK_EQ_INT(CF_OK, launch(k, 512, 1, 0, &err));
    CHECK_EQ_INT(1, fc->encodes);   /* X only */
    CHECK(desc_addr(0) == x[1] && desc_addr(1) == w);
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 0, &err));
    CHECK_EQ_INT(1, fc->encodes);   /* back: encoded again, and its address is the first X's */
    CHECK(desc_addr(0) == x[0]);
    CHECK_EQ_INT(CF_OK, launch(k, 256, 0, 0, &err));
    CHECK_EQ_INT(2, fc->encodes);   /* M is in X's and Y's descriptors, not in W's */
}

/* An output TMA cannot address in place goes through the kernel's padded copy: its descriptor
 * (the copy's) is cached too, the copy out still runs every launch, and Y back in place is
 * encoded again. */
static void test_descriptor_cache_padded(cf_kernel *k)
{
    cf_error err;
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 0, &err));
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 2, &err));
    CHECK_EQ_INT(1, fc->encodes);   /* Y's padded copy */
    CHECK_EQ_INT(1, fc->copies_2d);
    const uint64_t copy = desc_addr(2);
    CHECK(copy != y + 2 && copy % 16 == 0);
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 2, &err));
    CHECK_EQ_INT(0, fc->encodes);
    CHECK_EQ_INT(1, fc->copies_2d);
    CHECK(desc_addr(2) == copy);
    CHECK_EQ_INT(CF_OK, launch(k, 512, 0, 0, &err));
    CHECK_EQ_INT(1, fc->encodes);
    CHECK_EQ_INT(0, fc->copies_2d);
    CHECK(desc_addr(2) == y);
}

/* The L2 exchange: prepared for M_MAX, a growing M allocates, synchronises and zeroes nothing; a
 * shrink zeroes the tail once (it is needed: cf_reduce.cuh's 8-bit pair tags come round); past
 * the prepared size the slots grow without a device synchronisation or a free. */
static void test_exchange(cf_kernel *k)
{
    cf_error err;
    const int64_t dims[3] = {M_MAX, N, K};
    CHECK_EQ_INT(CF_OK, cf_kernel_prepare(k, dims, &err));
    CHECK_EQ_INT(CF_OK, launch(k, 256, 0, 0, &err));
    CHECK_EQ_INT(2, fc->allocs);          /* slots for M_MAX, and the epoch counters */
    CHECK_EQ_INT(1, fc->memsets_async);   /* the new slots zeroed */
    const size_t all = fc->memset_async_bytes;
    for (int64_t m = 512; m <= M_MAX; m *= 2) {
        CHECK_EQ_INT(CF_OK, launch(k, m, 0, 0, &err));
        CHECK(fc->allocs == 0 && fc->frees == 0 && fc->syncs == 0 && fc->memsets_async == 0);
    }
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 2, 0, 0, &err));
    CHECK_EQ_INT(1, fc->memsets_async);   /* the half M_MAX posted into and M_MAX / 2 does not */
    CHECK(fc->memset_async_bytes == all / 2);
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 2, 0, 0, &err));
    CHECK_EQ_INT(0, fc->memsets_async);   /* already zero */
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 8, 0, 0, &err));
    CHECK(fc->memsets_async == 1 && fc->memset_async_bytes == all / 2 - all / 8);
    CHECK_EQ_INT(CF_OK, launch(k, 2 * M_MAX, 0, 0, &err));
    CHECK(fc->allocs == 1 && fc->frees == 0 && fc->syncs == 0);   /* the old slots kept, not freed */
    CHECK(fc->memsets_async == 1 && fc->memset_async_bytes == 2 * all);
    CHECK_EQ_INT(CF_OK, launch(k, 2 * M_MAX + 256, 0, 0, &err));
    CHECK(fc->allocs == 1 && fc->frees == 0 && fc->syncs == 0);
    CHECK(fc->memset_async_bytes == 4 * all);   /* doubled */
    CHECK_EQ_INT(CF_OK, launch(k, 4 * M_MAX, 0, 0, &err));
    CHECK(fc->allocs == 0 && fc->memsets_async == 0);
}

/* Under CUDA-graph capture every launch zeroes up to the most any launch posted (replays are
 * not seen), and one that would allocate is refused by name. */
static void test_exchange_capture(cf_kernel *k)
{
    cf_error err;
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX, 0, 0, &err));   /* a first launch allocates */
    fake_capture(1);
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 2, 0, 0, &err));
    CHECK(fc->memsets_async == 1 && fc->allocs == 0);
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 2, 0, 0, &err));
    CHECK_EQ_INT(1, fc->memsets_async);   /* recorded into this graph too */
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, launch(k, 8 * M_MAX, 0, 0, &err));
    CHECK_CONTAINS(err.msg, "CUDA-graph capture of a launch at M=16384");
    CHECK(fc->allocs == 0 && fc->launches == 0);
    fake_capture(0);
    CHECK_EQ_INT(CF_OK, launch(k, M_MAX / 2, 0, 0, &err));
    CHECK_EQ_INT(1, fc->memsets_async);   /* a replay may have posted into the tail since */
}

/* Slices of K: the counters and partials are allocated with the kernel's first launch, for the
 * prepared M if larger, the counters zeroed once; the block passes them (split_ws after the
 * allocation's counters); a larger M grows them (the old kept), and under capture that is
 * refused by name. */
static void test_split(void)
{
    cf_error err;
    cf_plan_request r = {.split_k = 4, .block_m = 64};
    cf_kernel *k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_req(g, &r, 64, N, K, "test_split", &k, &err));
    if (!k)
        return;
    const int64_t dims[3] = {128, N, K};
    CHECK_EQ_INT(CF_OK, cf_kernel_prepare(k, dims, &err));
    CHECK_EQ_INT(CF_OK, launch(k, 64, 0, 0, &err));
    CHECK_EQ_INT(3, fc->allocs);   /* the split's counters and partials, the exchange's slots and epoch */
    CHECK(fc->memsets_async == 2);  /* the split's counters, the exchange's slots */
    /* xchg, xsync, split_ws, split_cnt follow the operand and output descriptors */
    uint64_t p[4];
    memcpy(p, fc->params + 384, sizeof p);
    CHECK(p[3] != 0 && p[2] == p[3] + 256);   /* the prepared M's 2 x 32 tiles' counters: 256 bytes */
    CHECK_EQ_INT(CF_OK, launch(k, 128, 0, 0, &err));
    uint64_t q[4];
    memcpy(q, fc->params + 384, sizeof q);
    CHECK(fc->allocs == 0 && fc->memsets_async == 0 && q[3] == p[3] && q[2] == p[2]);
    CHECK_EQ_INT(CF_OK, launch(k, 1024, 0, 0, &err));   /* 16 row blocks: grows */
    memcpy(q, fc->params + 384, sizeof q);
    CHECK(fc->frees == 0 && fc->syncs == 0 && q[3] != p[3] && q[2] == q[3] + 16 * (N / 128) * 4);
    fake_capture(1);
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, launch(k, 2048, 0, 0, &err));
    CHECK_CONTAINS(err.msg, "the K slices' partials are not allocated for it yet");
    CHECK_EQ_INT(0, fc->launches);
    fake_capture(0);
    cf_kernel_free(k);
    /* prepared for more rows than memory holds (a warm-up of the open M bucket), a launch
     * allocates what it needs itself */
    k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_req(g, &r, 64, N, K, "test_split", &k, &err));
    const int64_t huge[3] = {(int64_t)1 << 31, N, K};
    CHECK_EQ_INT(CF_OK, k ? cf_kernel_prepare(k, huge, &err) : CF_ERR_INTERNAL);
    CHECK_EQ_INT(CF_OK, k ? launch(k, 64, 0, 0, &err) : CF_ERR_INTERNAL);
    CHECK_EQ_INT(1, fc->launches);
    cf_kernel_free(k);
    /* a row group of 64 CTAs times 4 slices (256) is never resident at once on 132 SMs: the
     * launch is refused, naming the slices, and nothing is launched */
    cf_plan_request unfit = {.split_k = 4, .block_m = 64, .block_n = 64};
    k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_req(g, &unfit, 64, N, K, "test_split_unfit", &k, &err));
    if (k) {
        CHECK_EQ_INT(CF_ERR_CUDA, launch(k, 64, 0, 0, &err));
        CHECK_CONTAINS(err.msg, "a row group of 64 CTAs, times 4 slices of K, does not fit");
        CHECK_EQ_INT(0, fc->launches);
        cf_kernel_free(k);
    }
}

static void run_all(void)
{
    cf_error err;
    if (cf_rt_init(&err) != CF_OK) {
        CHECK(!"fake driver");
        fprintf(stderr, "fake driver: %s\n", err.msg);
        return;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    struct fake_cuda_counts *(*counts)(void) = lib ? (struct fake_cuda_counts * (*)(void)) dlsym(lib, "fake_cuda_counts")
                                                   : NULL;
    fake_capture = lib ? (void (*)(int))dlsym(lib, "fake_cuda_set_capturing") : NULL;
    CHECK(counts && fake_capture);
    if (!counts || !fake_capture)
        return;
    fc = counts();
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file("examples/gemm_bias_ln.cf", &g, &err));
    const size_t bytes[] = {(size_t)M_MAX * 4 * K * 2, (size_t)M_MAX * 4 * K * 2, (size_t)K * N * 2};
    uint64_t *bufs[] = {&x[0], &x[1], &w};
    bool ok = g != NULL;
    for (int i = 0; i < 3 && ok; i++)
        ok = cf_rt_malloc(bufs[i], bytes[i], &err) == CF_OK;
    for (int i = 0; i < 3 && ok; i++)
        ok = cf_rt_malloc(&vec[i], N * 4, &err) == CF_OK;
    ok = ok && cf_rt_malloc(&y, (size_t)M_MAX * 4 * N * 2 + 16, &err) == CF_OK;
    CHECK(ok);
    cf_kernel *k = ok ? new_kernel() : NULL;
    cf_resources r;
    CHECK(k && cf_kernel_resources(k, &r, &err) == CF_OK && r.reduce_mode == CF_REDUCE_GLOBAL);
    if (k) {
        test_descriptor_cache(k);
        test_descriptor_cache_padded(k);
        cf_kernel_free(k);
    }
    if ((k = ok ? new_kernel() : NULL)) {
        test_exchange(k);
        test_exchange_capture(k);
        cf_kernel_free(k);
    }
    if (ok)
        test_split();
    cf_graph_free(g);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* on <this test's dir>/fake/libcuda.so.1: re-executed with it first on the library path (the
     * loader reads LD_LIBRARY_PATH once, at start) */
    if (!getenv("CF_TEST_KERNEL_FAKE")) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", argv[0]);
        char *slash = strrchr(dir, '/');
        snprintf(slash ? slash : dir, sizeof dir - (size_t)(slash ? slash - dir : 0), "%s", slash ? "/fake" : "fake");
        setenv("LD_LIBRARY_PATH", dir, 1);
        setenv("CF_TEST_KERNEL_FAKE", "1", 1);
        execv(argv[0], argv);
        perror("test_kernel: execv");
        return 1;
    }
    char dir[] = "/tmp/cf_test_kernel_XXXXXX";   /* a cache of our own: a compile, not a stale hit */
    CHECK(mkdtemp(dir) != NULL);
    setenv("CF_CACHE_DIR", dir, 1);
    run_all();
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(0, system(cmd));
    return tu_finish("test_kernel");
}
