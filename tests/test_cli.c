/* test_cli.c — the comfuse command line: help, explain, exit statuses, errors. */
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

/* Runs a shell command, returns its exit status and (up to cap bytes of) its
 * combined output. */
static int run(const char *cmd, char *out, size_t cap)
{
    char full[2100];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char buf[1 << 16];
static char bin[512]; /* the comfuse binary next to this test's build dir */
static char fake[512]; /* <build>/tests/fake: a stand-in libcuda.so.1 (fake_cuda.c) */

/* run() with "comfuse" replaced by the binary of this build. */
static int cf(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s", bin, args);
    return run(cmd, out, cap);
}

/* cf() on the fake driver: the host side of `run` (sizes, tables, copies). */
static int cf_fake(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s %s %s", fake, bin, args);
    return run(cmd, out, cap);
}

/* Writes text to dir/name; path gets the file's path. */
static void write_spec(const char *dir, const char *name, const char *text, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Bad-input probe (issue 28): an unusable cache dir says why nothing was cached; a FIFO
 * in an entry's place does not block compile. */
static void test_probe_cache(const char *dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env CF_CACHE_DIR=/proc %s compile examples/gemm.cf", bin);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "cubin: (not cached: ");
    CHECK_CONTAINS(buf, "'/proc'");
    snprintf(cmd, sizeof cmd, "env CF_CACHE_DIR=%s/unused.cf %s compile examples/gemm.cf", dir, bin);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "unused.cf' is not a directory)");
    /* a FIFO for every entry compile might look up: its key is not known here */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/fifo && env CF_CACHE_DIR=%s/fifo %s compile examples/gemm.cf", dir, dir,
             bin);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    snprintf(cmd, sizeof cmd, "cd %s/fifo && for f in *.cubin; do rm $f && mkfifo $f; done && ls -l | grep -c '^p'",
             dir);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    CHECK(atoi(buf) >= 1);
    snprintf(cmd, sizeof cmd, "env CF_CACHE_DIR=%s/fifo timeout 60 %s compile examples/gemm.cf", dir, bin);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "NVRTC in");
    CHECK_CONTAINS(buf, "/fifo/");
    snprintf(cmd, sizeof cmd, "env CF_CACHE_DIR=%s/fifo CF_CACHE_READONLY=1 CF_ASSERT_CACHED=1 %s compile "
             "examples/gemm.cf", dir, bin);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));   /* a read-only cache is read */
    CHECK_CONTAINS(buf, "cache hit");
}

/* Bad-input probe (issue 28): CF_NVRTC_PATH naming a missing file or another library is an
 * error naming it (was: the system NVRTC, or "too old an NVRTC"). */
static void test_probe_nvrtc(void)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env CF_NVRTC_PATH=/nonexistent/libnvrtc.so %s compile examples/gemm.cf", bin);
    CHECK_EQ_INT(1, run(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "CF_NVRTC_PATH names a library that cannot be loaded: /nonexistent/libnvrtc.so (");
    CHECK_CONTAINS(buf, "No such file");
    snprintf(cmd, sizeof cmd, "env CF_NVRTC_PATH=libm.so.6 %s compile examples/gemm.cf", bin);
    CHECK_EQ_INT(1, run(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "CF_NVRTC_PATH=libm.so.6 is not an NVRTC library");
}

/* Bad-input probe (issue 28): --shape was cut at 255 characters without a word (a dim after
 * the cut was "not given", or a size lost digits); kernel options out of range gave exit 1 or
 * 2 depending on the value: now always 2, naming what the option takes. */
static void test_probe_usage(void)
{
    char shape[400], cmd[1024];
    snprintf(shape, sizeof shape, "N=%0250d,K=64,M=4096", 128);   /* M starts past character 255 */
    snprintf(cmd, sizeof cmd, "explain --shape %s examples/gemm.cf", shape);
    CHECK_EQ_INT(0, cf(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, ",K=64,M=4096): tile");
    CHECK_EQ_INT(2, cf("explain --shape M=64,N=64,K=64,M=128 examples/gemm.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "--shape: dim M is given twice");
    static const struct {
        const char *args, *want;
    } bad[] = {
        {"--stages 13", "--stages 13: must be an integer in 2..12"},
        {"--stages 100", "--stages 100: must be an integer in 2..12"},
        {"--stages 0", "--stages 0: must be an integer in 2..12"},   /* 0 was "auto" */
        {"--block-n 100", "--block-n 100: must be 64, 128, 192 or 256"},
        {"--block-n 2048", "--block-n 2048: must be 64, 128, 192 or 256"},
        {"--block-m 96", "--block-m 96: must be 64 or 128"},
        {"--cluster 3 --reduce-mode peer", "cluster_n 3: must be 1, 2, 4, 8 or 16"},   /* any count through L2 */
        {"--cluster 128", "--cluster 128: must be 1..64"},
        {"--block-n 256", "block_m x block_n = 128 x 256: more than 128 accumulator registers"},   /* the library's */
        {"--cluster 32 --reduce-mode peer", "cluster_n 32: must be 1, 2, 4, 8 or 16"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "emit %s examples/gemm_rmsnorm.cf", bad[i].args);
        CHECK_EQ_INT(2, cf(cmd, buf, sizeof buf));
        CHECK_CONTAINS(buf, bad[i].want);
    }
}

/* Bad-input probe (issue 28): sizes the spec and --shape set, tables it sizes. */
static void test_probe_sizes(const char *dir)
{
    char path[256], cmd[1024];
    /* an unused input of 2^62 f32 elements: 2^64 bytes wrapped to 0 and the fill ran past it */
    write_spec(dir, "unused.cf", "input X: bf16[M, K]\ninput W: bf16[K, N]\ninput B: f32[P, Q]\n"
               "output Y: bf16 = X @ W\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, "run --shape M=128,N=128,K=64,P=2147483648,Q=2147483648 %s", path);
    CHECK_EQ_INT(1, cf_fake(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "tensor 'B' [P=2147483648, Q=2147483648] of 4-byte elements: its size in bytes overflows");
    /* the fake driver itself: a small run gets to the check (its launches write nothing) */
    snprintf(cmd, sizeof cmd, "run --shape M=128,N=128,K=64,P=2,Q=3 --check %s", path);
    CHECK_EQ_INT(4, cf_fake(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "check Y        bf16: 16384 elements");
    /* a dual GEMM (SwiGLU) runs fused: three operand maps, both weights; with K = 20 (rows of 40
     * bytes) X and both [N, K] weights go through padded copies */
    CHECK_EQ_INT(4, cf_fake("run --shape M=128,N=128,K=64 --check examples/swiglu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "check H        bf16: 16384 elements");
    CHECK_EQ_INT(0, cf_fake("run --shape M=40,N=24,K=20 tests/specs/geglu_nk.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "ran ");
    /* 70 params: --param p65 was refused and the run read a bool[64] past its end */
    static char spec[16384], sum[8192];
    snprintf(spec, sizeof spec, "input X: bf16[M, K]\ninput W: bf16[K, N]\n");
    sum[0] = 0;
    for (int i = 1; i <= 70; i++) {
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "param p%d: f32\n", i);
        snprintf(sum + strlen(sum), sizeof sum - strlen(sum), "%sp%d", i > 1 ? " + " : "", i);
    }
    snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "output Y: f32 = X @ W + (%s)\n", sum);
    write_spec(dir, "p70.cf", spec, path, sizeof path);
    snprintf(cmd, sizeof cmd, "emit --param p65=1 --param p70=-2 %s", path);
    CHECK_EQ_INT(0, cf(cmd, buf, sizeof buf));
    snprintf(cmd, sizeof cmd, "run --shape M=128,N=128,K=64 --param p65=1 --param p70=-2 --check %s", path);
    CHECK_EQ_INT(4, cf_fake(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "check Y        f32: 16384 elements");
    snprintf(cmd, sizeof cmd, "emit --param p71=1 %s", path);
    CHECK_EQ_INT(2, cf(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "--param p71=1: expected NAME=VALUE naming a param of the spec");
    /* 300 scalars: the launch laid them out through a size_t[256] */
    snprintf(spec, sizeof spec, "input X: bf16[M, K]\ninput W: bf16[K, N]\n");
    sum[0] = 0;
    for (int i = 1; i <= 300; i++) {
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "param p%d: f32\n", i);
        snprintf(sum + strlen(sum), sizeof sum - strlen(sum), "%sp%d", i > 1 ? " + " : "", i);
    }
    snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "output Y: f32 = X @ W + (%s)\n", sum);
    write_spec(dir, "p300.cf", spec, path, sizeof path);
    snprintf(cmd, sizeof cmd, "run --shape M=128,N=128,K=64 --param p300=3 %s", path);
    CHECK_EQ_INT(0, cf_fake(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "ran ");
    /* 240 [M, N] outputs: NVRTC's "Formal parameter space overflowed" (exit 1) before; now Φ */
    snprintf(spec, sizeof spec, "input X: bf16[M, K]\ninput W: bf16[K, N]\nx = X @ W\n");
    for (int i = 1; i <= 240; i++)
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "output Y%d: bf16 = x * %d\n", i, i);
    write_spec(dir, "o240.cf", spec, path, sizeof path);
    snprintf(cmd, sizeof cmd, "compile %s", path);
    CHECK_EQ_INT(3, cf(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "cannot fuse: the kernel's parameters take 33920 bytes");
    snprintf(cmd, sizeof cmd, "run --unfused --shape M=128,N=128,K=64 %s", path);
    CHECK_EQ_INT(3, cf(cmd, buf, sizeof buf));
}

int main(int argc, char **argv)
{
    /* argv[0] is <build>/tests/test_cli: the CLI is <build>/comfuse. */
    snprintf(bin, sizeof bin, "%s", argc > 0 ? argv[0] : "build/tests/test_cli");
    char *slash = strrchr(bin, '/');
    if (slash)
        *slash = 0;
    slash = strrchr(bin, '/');
    if (slash)
        snprintf(slash, sizeof bin - (size_t)(slash - bin), "/comfuse");
    else
        snprintf(bin, sizeof bin, "build/comfuse");
    snprintf(fake, sizeof fake, "%s", bin);
    slash = strrchr(fake, '/');
    snprintf(slash ? slash : fake, sizeof fake - (size_t)(slash ? slash - fake : 0), "%s",
             slash ? "/tests/fake" : "build/tests/fake");
    char pdir[] = "/tmp/cf_test_probe_XXXXXX";
    CHECK(mkdtemp(pdir) != NULL);
    test_probe_sizes(pdir);
    test_probe_cache(pdir);
    test_probe_nvrtc();
    test_probe_usage();
    CHECK_EQ_INT(0, cf("--help", buf, sizeof buf));
    CHECK_CONTAINS(buf, "explain SPEC");
    CHECK_CONTAINS(buf, "bench SPEC");
    static const char *verbs[] = {"explain", "emit", "compile", "run", "bench"};
    for (int i = 0; i < 5; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "%s --help", verbs[i]);
        CHECK_EQ_INT(0, cf(cmd, buf, sizeof buf));
        char want[64];
        snprintf(want, sizeof want, "usage: comfuse %s", verbs[i]);
        CHECK_CONTAINS(buf, want);
    }
    CHECK_EQ_INT(2, cf("", buf, sizeof buf));
    CHECK_EQ_INT(2, cf("frobnicate x.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "unknown command 'frobnicate'");

    /* explain: the LayerNorm example has three stages and carries x. */
    CHECK_EQ_INT(0, cf("explain examples/gemm_bias_ln.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "3 stages, 2 reductions");
    CHECK_CONTAINS(buf, "bypass of x.");
    CHECK_CONTAINS(buf, "accumulator");
    CHECK_CONTAINS(buf, "edges:");
    CHECK_CONTAINS(buf, "runtime parameters (A):");
    CHECK_CONTAINS(buf, "fused kernel (no --shape: default options): tile 128x128");
    CHECK_CONTAINS(buf, "static (reduction exchange)");
    CHECK_EQ_INT(0, cf("explain --shape M=4096,N=2048,K=512 examples/gemm_bias_ln.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "cluster 1x1, row reductions over 16 CTAs through L2");   /* K = 512: LN keeps a CTA a tile */
    CHECK(!strstr(buf, "their gather loaded"));   /* its first part holds the bias: no early gather */
    CHECK_EQ_INT(0, cf("explain --shape M=4096,N=2048,K=512 examples/gemm_softmax.cf", buf, sizeof buf));
    /* K = 512: softmax keeps a CTA a tile too; its late gather loads as the mainloop ends */
    CHECK_CONTAINS(buf, "cluster 1x1, row reductions over 16 CTAs through L2, tiles finished late (their gather "
                        "loaded as the next mainloop ends)");
    CHECK_EQ_INT(0, cf("explain --shape M=4096,N=2048,K=1024 examples/gemm_softmax.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "cluster 1x1, row reductions over 8 CTAs of two column tiles each through L2");
    CHECK_EQ_INT(0, cf("explain --shape M=4096,N=2048,K=512 --reduce-mode leader examples/gemm_bias_ln.cf", buf,
                       sizeof buf));
    CHECK_CONTAINS(buf, "4 stages, pingpong, cluster 16x1, row reductions over 16 CTAs through DSMEM via rank 0");
    CHECK(!strstr(buf, "GELU of"));
    /* explain says when the store computes a GELU in 16-bit math */
    CHECK_EQ_INT(0, cf("explain examples/gemm_bias_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "GELU of 1 output computed by its store in packed 16-bit math");
    /* The schedule explain reports (kernel options -> the fused kernel line):
     * - cooperative 256x128 over a 2-CTA cluster for a bare GEMM from K = 4096 (4 stages of 48 KB
     *   fit), pingpong below and wherever the epilogue computes (it hides there);
     * - two column tiles per CTA from 8 CTAs a row at K >= 1024, or 16 of pairs at K = 512, but
     *   for LN (its finish reads gamma and beta) only where that saves a round at K >= 1024;
     * - else a finisher warpgroup where the epilogue outlasts the mainloop and the finisher keeps up
     *   (softmax at 4 CTAs a row, K = 1024); not where its last stage
     *   reads [N] vectors it must reload (LN's gamma and beta), not where the epilogue is hidden
     *   (RMSNorm there, K = 4096), not at N = 2048 with K <= 1024, not with a given
     *   --sync-finish, and PingPong when asked for where no tile finishes late. */
    static const struct {
        const char *args, *want;
    } schedules[] = {
        {"--shape M=8192,N=4096,K=4096 examples/gemm.cf",
         "4 stages, cooperative (one tile of 2 x block_m rows), cluster 2x1"},
        {"--shape M=8192,N=4096,K=4096 examples/gemm_bias_gelu.cf", "6 stages, pingpong, cluster 1x1"},
        {"--shape M=8192,N=4096,K=2048 examples/gemm_bias_gelu.cf", "6 stages, pingpong, cluster 1x1"},
        {"--shape M=8192,N=4096,K=4096 --schedule pingpong examples/gemm.cf", "6 stages, pingpong, cluster 1x1"},
        {"--shape M=64,N=64,K=64 --schedule cooperative examples/gemm.cf",
         "4 stages, cooperative (one tile of 2 x block_m rows), cluster 2x1"},
        {"--shape M=8192,N=4096,K=4096 examples/gemm_rmsnorm.cf",   /* K = 4096: pairs of CTAs multicast X */
         "5 stages, pingpong, cluster 2x1, row reductions over 16 CTAs of two column tiles each through L2, "
         "tiles finished late, 384 threads"},
        {"--shape M=8192,N=4096,K=4096 --multicast off examples/gemm_rmsnorm.cf",
         "5 stages, pingpong, cluster 1x1, row reductions over 16 CTAs of two column tiles each through L2"},
        {"--shape M=16384,N=1024,K=1024 --multicast on examples/gemm_bias_ln.cf",
         "5 stages, pingpong, cluster 2x1, row reductions over 8 CTAs through L2"},
        {"--shape M=16384,N=2048,K=1024 examples/gemm_rmsnorm.cf",   /* K >= 1024: pairs from 8 CTAs a row */
         "5 stages, pingpong, cluster 1x1, row reductions over 8 CTAs of two column tiles each through L2, "
         "tiles finished late"},
        {"--shape M=4096,N=2048,K=512 examples/gemm_rmsnorm.cf",   /* K = 512, 16 single words: no pairs */
         "5 stages, pingpong, cluster 1x1, row reductions over 16 CTAs through L2, tiles finished late"},
        {"--shape M=16384,N=2048,K=1024 --pair-tiles off examples/gemm_bias_ln.cf",
         "5 stages, pingpong, cluster 1x1, row reductions over 16 CTAs through L2, tiles finished late"},
        {"--shape M=16384,N=1024,K=1024 --pair-tiles on examples/gemm_rmsnorm.cf",
         "row reductions over 4 CTAs of two column tiles each through L2"},
        {"--shape M=16384,N=1024,K=1024 --pair-tiles on examples/gemm_bias_ln.cf",   /* not the finisher's */
         "5 stages, pingpong, cluster 1x1, row reductions over 4 CTAs of two column tiles each through L2"},
        {"--shape M=16384,N=1024,K=1024 examples/gemm_rmsnorm.cf", "5 stages, pingpong, cluster 1x1"},
        {"--shape M=16384,N=1024,K=1024 examples/gemm_softmax.cf",   /* pairs beat the finisher */
         "5 stages, pingpong, cluster 1x1, row reductions over 4 CTAs of two column tiles each through L2, "
         "tiles finished late, 384 threads"},
        {"--shape M=16384,N=512,K=1024 examples/gemm_softmax.cf",   /* 4 CTAs: no pairs, the finisher */
         "5 stages, pingpong + a finisher warpgroup, cluster 1x1, row reductions over 4 CTAs through L2, "
         "tiles finished late, 512 threads"},
        {"--shape M=16384,N=1024,K=1024 examples/gemm_bias_ln.cf",   /* no pairs (gamma, beta), no finisher */
         "5 stages, pingpong, cluster 1x1, row reductions over 8 CTAs through L2, tiles finished late, 384 threads"},
        {"--shape M=16384,N=1024,K=1024 --schedule finisher examples/gemm_bias_ln.cf", "pingpong + a finisher warpgroup"},
        {"--shape M=16384,N=2048,K=1024 examples/gemm_bias_ln.cf",
         "5 stages, pingpong, cluster 1x1, row reductions over 8 CTAs of two column tiles each through L2, "
         "tiles finished late, 384 threads"},
        {"--shape M=16384,N=1024,K=1024 --sync-finish examples/gemm_bias_ln.cf",
         "6 stages, pingpong, cluster 1x1, row reductions over 8 CTAs through L2, 384 threads"},
        {"--shape M=16384,N=1024,K=1024 examples/gemm_ln_softmax.cf",   /* the mid part is asked for, not default */
         "4 stages, pingpong, cluster 1x1, row reductions over 8 CTAs through L2, tiles finished late, 384 threads"},
        {"--shape M=16384,N=1024,K=1024 --schedule finisher examples/gemm_ln_softmax.cf",
         "4 stages, pingpong + a finisher warpgroup"},
        {"--shape M=16384,N=2048,K=1024 examples/gemm_ln_softmax.cf", "4 stages, pingpong, cluster 1x1"},
        {"--shape M=4096,N=2048,K=512 examples/gemm_ln_softmax.cf",   /* two tiles a warpgroup: at once */
         "6 stages, pingpong, cluster 1x1, row reductions over 16 CTAs through L2, 384 threads"},
        {"--shape M=4096,N=2048,K=512 --late-finish examples/gemm_ln_softmax.cf",
         "4 stages, pingpong, cluster 1x1, row reductions over 16 CTAs through L2, tiles finished late, 384 threads"},
        {"--shape M=4096,N=2048,K=512 --schedule finisher --sync-finish examples/gemm_softmax.cf",
         "pingpong, cluster 1x1, row reductions over 16 CTAs through L2, 384 threads"},
        {"--shape M=4096,N=2048,K=512 --schedule finisher examples/gemm_softmax.cf",
         "pingpong + a finisher warpgroup, cluster 1x1, row reductions over 16 CTAs through L2"},
    };
    for (size_t i = 0; i < sizeof schedules / sizeof schedules[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "explain %s", schedules[i].args);
        CHECK_EQ_INT(0, cf(cmd, buf, sizeof buf));
        CHECK_CONTAINS(buf, schedules[i].want);
        /* a finisher asked for and not taken is said so, on stderr */
        const int asked = strstr(schedules[i].args, "--schedule finisher") != NULL;
        const int taken = strstr(schedules[i].want, "finisher") != NULL;
        CHECK(!!strstr(buf, "note: --schedule finisher does not apply to this kernel") == (asked && !taken));
    }
    /* cooperative + reductions is an error */
    CHECK_EQ_INT(0, cf("explain --schedule cooperative examples/gemm_rmsnorm.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "fused kernel: none (schedule cooperative: epilogues with row reductions need the pingpong");
    CHECK_EQ_INT(2, cf("explain --schedule zigzag examples/gemm.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "bad option --schedule zigzag");
    CHECK_EQ_INT(2, cf("explain --reduce-mode bogus examples/gemm_bias_ln.cf", buf, sizeof buf));
    CHECK_EQ_INT(2, cf("explain --multicast maybe examples/gemm_bias_ln.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "bad option --multicast maybe");
    CHECK_EQ_INT(2, cf("explain --pair-tiles yes examples/gemm_bias_ln.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "bad option --pair-tiles yes");
    /* B2B (issue 31): one kernel of two phases, S through L2, both phases' plans */
    CHECK_EQ_INT(0, cf("explain examples/b2b_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "B2B: one kernel of two phases, S [M,N1] bf16 through L2 (a row block's phase-2 tiles wait "
                        "for its S; rows wider than phase 1's row group run as two kernels)\n"
                        "  phase 1: GEMM 'matmul.4' [M,N1] and its epilogue -> S [M,N1] bf16\n"
                        "  phase 2: GEMM 'O' [M,N2] and its epilogue -> O bf16\n"
                        "---- B2B phase 1 of 2 ----\nplan:\n");
    CHECK_CONTAINS(buf, "---- B2B phase 2 of 2 ----\nplan:\n");
    /* F with row reductions: two kernels, and why */
    CHECK_EQ_INT(0, cf("explain examples/b2b_ln.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "B2B: two fused kernels, S [M,N1] bf16 through global memory (not one kernel: at GEMM "
                        "'matmul.6', its row reductions tie a row group to N1's tiles");
    CHECK_CONTAINS(buf, "---- B2B kernel 1 of 2 ----\nplan:\n");
    CHECK_CONTAINS(buf, "  reductions: 2, exchange: ");
    CHECK_CONTAINS(buf, "---- B2B kernel 2 of 2 ----\nplan:\n");
    CHECK_CONTAINS(buf, "  reductions: 0, exchange: none");
    CHECK(!strstr(buf, "fused kernel: none"));
    /* a request against it (a cooperative schedule): two kernels, and why */
    CHECK_EQ_INT(0, cf("explain --schedule cooperative examples/b2b_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "B2B: two fused kernels, S [M,N1] bf16 through global memory (not one kernel: at GEMM "
                        "'matmul.4', its schedule is not pingpong)\n"
                        "  kernel 1: GEMM 'matmul.4' [M,N1] and its epilogue -> S [M,N1] bf16\n");
    CHECK_CONTAINS(buf, "---- B2B kernel 2 of 2 ----\nplan:\n");
    /* Φ has no single IR for b2b_rowstat (per-row values of the first epilogue in the second):
     * the split runs it, kernel 1 storing those values; each kernel's IR is printed */
    CHECK_EQ_INT(0, cf("explain tests/specs/b2b_rowstat.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "Fusion Spec IR: none for the whole B2B graph (tests/specs/b2b_rowstat.cf:11:27: cannot fuse");
    CHECK_CONTAINS(buf, "r f32 [per row, for kernel 2], sum_12 f32 [per row, for kernel 2]\n");
    const char *first_ir = strstr(buf, "Fusion Spec IR: GEMM + epilogue");
    CHECK(first_ir && strstr(first_ir + 1, "Fusion Spec IR: GEMM + epilogue"));
    CHECK_EQ_INT(0, cf("compile --shape M=1000,K=520,N1=1000,N2=264 tests/specs/b2b_gelu_nk.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "compiled tests/specs/b2b_gelu_nk.cf for sm_90a: B2B: one kernel of two phases, S [M,N1] bf16");
    CHECK_CONTAINS(buf, "B2B phase 1 of 2: ");
    CHECK_CONTAINS(buf, "B2B phase 2 of 2: ");

    /* Errors: a parse error names file:line:col (status 1); a spec outside
     * the domain exits 3 so a caller can fall back. */
    char dir[] = "/tmp/cf_test_cli_XXXXXX", path[256], cmd[512];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/bad_parse.cf", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("input X: bf16[M, K]\ninput W: bf16[K, N]\noutput Y = gelu(X @ W\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "explain %s", path);
    CHECK_EQ_INT(1, cf(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "bad_parse.cf:3:22: expected ')' after 'W', at the end of the input");
    snprintf(path, sizeof path, "%s/outside.cf", dir);
    f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("input X: bf16[M, K]\ninput W: bf16[K, N]\nx = X @ W\noutput Y = x - sum(x, axis=0)\n", f);
        fclose(f);
    }
    snprintf(cmd, sizeof cmd, "explain %s", path);
    CHECK_EQ_INT(3, cf(cmd, buf, sizeof buf));
    CHECK_CONTAINS(buf, "cannot fuse");
    CHECK_CONTAINS(buf, "reduces over M");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    CHECK_EQ_INT(1, cf("explain /nonexistent/no_such_file.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "no_such_file.cf");

    /* emit needs no GPU; bad kernel options are usage errors. */
    CHECK_EQ_INT(0, cf("emit examples/gemm_bias_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "cf_epilogue(");
    CHECK_EQ_INT(2, cf("emit --stages lots examples/gemm.cf", buf, sizeof buf));
    CHECK_EQ_INT(2, cf("run --shape M=8,Q=4 examples/gemm.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "no dim 'Q'");
    CHECK_EQ_INT(2, cf("run --shape M=8,N=8 examples/gemm.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "no size given for dim K");

    /* Without a GPU, run says so clearly (skipped where a driver exists). */
    if (run("ls /dev/nvidia0", buf, sizeof buf) != 0) {
        CHECK_EQ_INT(1, cf("run --shape M=8,N=8,K=8 examples/gemm.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "libcuda.so.1");
        /* Two-GEMM graphs (issue 28, item 5): --unfused plans and compiles their row
         * kernels and gets as far as the GPU; bench times the unfused path */
        CHECK_EQ_INT(1, cf("run --unfused --check --shape M=40,N=24,K=16 examples/swiglu.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "comfuse run (unfused: cuBLAS + rows): CUDA driver libcuda.so.1");
        CHECK_EQ_INT(1, cf("run --unfused --shape M=40,N=24,K=16 tests/specs/swiglu_nk.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "libcuda.so.1");
        CHECK_EQ_INT(1, cf("run --unfused --check --shape M=40,K=16,N1=24,N2=8 examples/b2b_ln.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "libcuda.so.1");
        CHECK_EQ_INT(1, cf("bench --shape M=40,N=24,K=16 examples/swiglu.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "libcuda.so.1");
        /* compile --unfused fills the cache with what run --unfused loads */
        CHECK_EQ_INT(0, cf("compile --unfused tests/specs/b2b_rowstat.cf", buf, sizeof buf));
        CHECK_CONTAINS(buf, "the unfused path, 2 cuBLASLt GEMMs and 2 row kernels");
        CHECK_CONTAINS(buf, "after GEMM 'matmul.10': ");
        char cmd2[700];
        snprintf(cmd2, sizeof cmd2, "CF_ASSERT_CACHED=1 %s run --unfused --shape M=40,K=16,N1=24,N2=8 "
                 "tests/specs/b2b_rowstat.cf", bin);
        CHECK_EQ_INT(1, run(cmd2, buf, sizeof buf));
        CHECK_CONTAINS(buf, "libcuda.so.1");   /* every row kernel came from the cache */
        CHECK(!strstr(buf, "CF_ASSERT_CACHED"));
    }
    /* the fused path declines them (exit 3) and points to --unfused */
    CHECK_EQ_INT(3, cf("run --check --shape M=40,N=8192,K=16 tests/specs/swiglu_nk.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "the fused kernel is not available: a dual GEMM's rows of N=8192 are wider than a row group");
    CHECK_CONTAINS(buf, "`comfuse run --unfused` runs and checks the unfused path");
    /* B2B runs as one kernel (on the fake driver: as far as the check) */
    CHECK_EQ_INT(4, cf_fake("run --check --shape M=40,K=16,N1=24,N2=8 examples/b2b_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "ran examples/b2b_gelu.cf at M=40,K=16,N1=24,N2=8 (seed 1): B2B: one kernel of two phases, "
                        "S [M,N1] bf16 through L2");
    CHECK_CONTAINS(buf, "check O        bf16: 320 elements (40 of 40 rows)");
    /* emit --unfused: a row kernel after each GEMM with an epilogue */
    CHECK_EQ_INT(0, cf("emit --unfused examples/b2b_gelu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "from examples/b2b_gelu.cf, the row kernel after GEMM 'matmul.4'");
    CHECK_CONTAINS(buf, "from examples/b2b_gelu.cf, the row kernel after GEMM 'O'");
    CHECK_EQ_INT(0, cf("emit --unfused examples/swiglu.cf", buf, sizeof buf));
    CHECK_CONTAINS(buf, "the row kernel after GEMM 'u'");
    CHECK(!strstr(buf, "the row kernel after GEMM 'g'"));   /* g has no epilogue of its own */
    /* what no path runs keeps exit 3 and says why, for run --unfused and bench */
    {
        char d3[] = "/tmp/cf_test_cli3_XXXXXX", p3[256], c3[600];
        CHECK(mkdtemp(d3) != NULL);
        snprintf(p3, sizeof p3, "%s/three.cf", d3);
        FILE *f3 = fopen(p3, "w");
        CHECK(f3 != NULL);
        if (f3) {
            fputs("input X: bf16[M, K]\ninput A: bf16[K, K]\ninput B: bf16[K, N]\n"
                  "output Y: bf16 = (X @ A) @ A @ B\n", f3);
            fclose(f3);
        }
        snprintf(c3, sizeof c3, "run --unfused --shape M=8,N=8,K=8 %s", p3);
        CHECK_EQ_INT(3, cf(c3, buf, sizeof buf));
        CHECK_CONTAINS(buf, "is a third matmul; the unfused path runs at most two GEMMs");
        snprintf(c3, sizeof c3, "bench --shape M=8,N=8,K=8 %s", p3);
        CHECK_EQ_INT(3, cf(c3, buf, sizeof buf));
        CHECK_CONTAINS(buf, "nothing to time for");
        CHECK_CONTAINS(buf, "unfused: ");
        snprintf(c3, sizeof c3, "rm -rf %s", d3);
        CHECK_EQ_INT(0, run(c3, buf, sizeof buf));
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", pdir);
    CHECK_EQ_INT(0, run(cmd, buf, sizeof buf));
    return tu_finish("test_cli");
}
