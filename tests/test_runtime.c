/* test_runtime.c — NVRTC compiles for sm_90a (no GPU needed), the embedded
 * device headers, compile errors with their log, ptxas -v parsing, TMA
 * validation, and the driver: CF_ERR_NO_DEVICE without libcuda.so.1, or, where
 * a GPU is present, a small end-to-end run (launch, clusters, TMA map, cuBLASLt). */
#include "cf_internal.h"
#include "test_util.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static cf_rt_compile_opts NO_CACHE = {.no_cache = true};

static const char *SIMPLE =
    "extern \"C\" __global__ void cf_add(float *x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] += 1.0f;\n"
    "}\n";

static void test_nvrtc_simple(void)
{
    int major = 0, minor = 0;
    const char *path = NULL;
    cf_error err = {0};
    CHECK_EQ_INT(CF_OK, cf_rt_nvrtc_load(&major, &minor, &path, &err));
    CHECK(major >= 12);
    CHECK(path && strstr(path, "nvrtc"));
    cf_rt_cubin c;
    cf_status st = cf_rt_compile_ex(SIMPLE, "cf_add", &NO_CACHE, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK(c.cubin_size > 64 && !memcmp(c.cubin, "\177ELF", 4));
    CHECK_CONTAINS(c.ptx, ".target sm_90a");
    CHECK_CONTAINS(c.ptx, ".entry cf_add");
    CHECK_CONTAINS(c.log, "ptxas info");
    CHECK(c.log_size == strlen(c.log));
    CHECK(c.registers > 0 && c.registers < 64);
    CHECK_EQ_INT(0, c.spill_store_bytes);
    CHECK_EQ_INT(0, c.spill_load_bytes);
    CHECK_EQ_INT(0, c.smem_bytes);
    CHECK(c.compile_ms > 0 && c.total_ms >= c.compile_ms);
    CHECK_EQ_INT(64, strlen(c.key));
    cf_rt_cubin_free(&c);
    CHECK(c.cubin == NULL && c.ptx == NULL && c.log == NULL);
}

/* Hopper-only PTX: wgmma and TMA must assemble for sm_90a. */
static const char *HOPPER =
    "extern \"C\" __global__ void cf_hopper(float *out, unsigned long long da,\n"
    "                                       unsigned long long db, const void *tmap) {\n"
    "    __shared__ __align__(128) unsigned short tile[64 * 64];\n"
    "    __shared__ __align__(8) unsigned long long bar;\n"
    "    unsigned s = (unsigned)__cvta_generic_to_shared(tile);\n"
    "    unsigned b = (unsigned)__cvta_generic_to_shared(&bar);\n"
    "    if (threadIdx.x == 0)\n"
    "        asm volatile(\"cp.async.bulk.tensor.2d.shared::cluster.global.tile\"\n"
    "                     \".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\"\n"
    "                     :: \"r\"(s), \"l\"(tmap), \"r\"(0), \"r\"(0), \"r\"(b) : \"memory\");\n"
    "    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;\n"
    "    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
    "    asm volatile(\"{\\n .reg .pred p;\\n setp.ne.b32 p, %6, 0;\\n\"\n"
    "                 \"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 \"\n"
    "                 \"{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\\n}\\n\"\n"
    "                 : \"+f\"(d0), \"+f\"(d1), \"+f\"(d2), \"+f\"(d3)\n"
    "                 : \"l\"(da), \"l\"(db), \"r\"(1));\n"
    "    asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n"
    "    asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n"
    "    out[threadIdx.x] = d0 + d1 + d2 + d3;\n"
    "}\n";

static void test_nvrtc_hopper(void)
{
    cf_error err = {0};
    cf_rt_cubin c;
    const char *fence = "extern \"C\" __global__ void cf_fence() {\n"
                        "    asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n"
                        "}\n";
    cf_status st = cf_rt_compile_ex(fence, "cf_fence", &NO_CACHE, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st == CF_OK) {
        CHECK(c.cubin_size > 0);
        CHECK_CONTAINS(c.ptx, "wgmma.fence.sync.aligned");
    } else {
        fprintf(stderr, "%s\n", err.msg);
    }
    cf_rt_cubin_free(&c);
    st = cf_rt_compile_ex(HOPPER, "cf_hopper", &NO_CACHE, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st == CF_OK) {
        CHECK(c.cubin_size > 0);
        CHECK_CONTAINS(c.ptx, "wgmma.mma_async");
        CHECK_CONTAINS(c.ptx, "cp.async.bulk.tensor");
        CHECK(c.smem_bytes >= 64 * 64 * 2);
    } else {
        fprintf(stderr, "%s\n", err.msg);
    }
    cf_rt_cubin_free(&c);
}

static void test_nvrtc_errors(void)
{
    cf_error err = {0};
    cf_rt_cubin c;
    const char *bad = "extern \"C\" __global__ void bad_k(float *x) {\n"
                      "    x[0] = 1.0f +;\n"
                      "}\n";
    CHECK_EQ_INT(CF_ERR_NVRTC, cf_rt_compile_ex(bad, "bad_k", &NO_CACHE, &c, &err));
    CHECK_CONTAINS(err.msg, "NVRTC could not compile 'bad_k.cu'");
    CHECK_CONTAINS(err.msg, "bad_k.cu(2): error");   /* the log line, with its line number */
    CHECK_CONTAINS(err.msg, "expected an expression");
    CHECK(c.cubin == NULL);
    CHECK_CONTAINS(c.log, "bad_k.cu(2): error");
    cf_rt_cubin_free(&c);

    /* A front-end warning and a ptxas error: NVRTC 13's log puts a NUL
     * between them; both halves must reach the message. */
    const char *ptxas_bad =
        "__global__ void unused_k() { int unused_var; }\n"
        "extern \"C\" __global__ void cvt_k(float *x) {\n"
        "    float v;\n"
        "    asm volatile(\"cvt.rn.bf16x2.f32 %0, %1, %1;\" : \"=f\"(v) : \"f\"(x[0]));\n"
        "    x[1] = v;\n"
        "}\n";
    CHECK_EQ_INT(CF_ERR_NVRTC, cf_rt_compile_ex(ptxas_bad, "cvt_k", &NO_CACHE, &c, &err));
    CHECK_CONTAINS(err.msg, "unused_var");
    CHECK_CONTAINS(err.msg, "Arguments mismatch for instruction 'cvt'");
    CHECK(c.log && c.log_size == strlen(c.log));
    cf_rt_cubin_free(&c);

    /* An unknown include fails without touching the file system's headers. */
    CHECK_EQ_INT(CF_ERR_NVRTC, cf_rt_compile_ex("#include \"no_such_header.cuh\"\n", "inc_k",
                                                &NO_CACHE, &c, &err));
    CHECK_CONTAINS(err.msg, "no_such_header.cuh");
    cf_rt_cubin_free(&c);

    /* Bad arguments. */
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_rt_compile(NULL, "k", NULL, 0, &c, &err));
    cf_rt_compile_opts neg = {.n_extra = -1, .no_cache = true};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_rt_compile_ex(SIMPLE, "k", &neg, &c, &err));
}

/* A stand-in device header passed like the embedded ones. */
static const char *PLACEHOLDER_CUH =
    "#pragma once\n"
    "__device__ __forceinline__ float cf_placeholder_twice(float x) { return 2.0f * x; }\n";

static void test_headers(void)
{
    cf_error err = {0};
    cf_rt_cubin c;
    /* The embedded table is well formed. */
    CHECK(cf_rt_n_device_headers >= 0);
    CHECK(cf_rt_device_header_names[cf_rt_n_device_headers] == NULL);
    for (int i = 0; i < cf_rt_n_device_headers; i++) {
        const char *n = cf_rt_device_header_names[i];
        const size_t len = strlen(n);
        CHECK(((len > 4 && !strcmp(n + len - 4, ".cuh")) || (len > 2 && !strcmp(n + len - 2, ".h"))) &&
              !strchr(n, '/'));
        CHECK(cf_rt_device_header_sizes[i] > 0);
        CHECK(strlen(cf_rt_device_header_texts[i]) == cf_rt_device_header_sizes[i]);
    }
    /* Extra named headers resolve from memory and change the key. */
    const char *hn[] = {"cf_placeholder.cuh"}, *ht[] = {PLACEHOLDER_CUH};
    const char *src = "#include \"cf_placeholder.cuh\"\n"
                      "extern \"C\" __global__ void ph_k(float *x) {\n"
                      "    x[threadIdx.x] = cf_placeholder_twice(x[threadIdx.x]);\n"
                      "}\n";
    cf_rt_compile_opts o = {.header_names = hn, .header_texts = ht, .n_headers = 1,
                            .no_cache = true};
    cf_status st = cf_rt_compile_ex(src, "ph_k", &o, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK)
        fprintf(stderr, "%s\n", err.msg);
    CHECK_CONTAINS(c.ptx, ".entry ph_k");
    char key1[65];
    snprintf(key1, sizeof key1, "%s", c.key);
    cf_rt_cubin_free(&c);
    const char *ht2[] = {"#pragma once\n__device__ float cf_placeholder_twice(float x)"
                         " { return x + x; }\n"};
    o.header_texts = ht2;
    CHECK_EQ_INT(CF_OK, cf_rt_compile_ex(src, "ph_k", &o, &c, &err));
    CHECK(strcmp(key1, c.key) != 0);
    cf_rt_cubin_free(&c);

    /* Every embedded header resolves by name with no file access.  (They are
     * not self-contained: generated code defines what they use first.) */
    for (int i = 0; i < cf_rt_n_device_headers; i++) {
        char s[256];
        snprintf(s, sizeof s,
                 "#if !__has_include(\"%s\")\n#error embedded header missing\n#endif\n"
                 "extern \"C\" __global__ void hdr_k() {}\n",
                 cf_rt_device_header_names[i]);
        st = cf_rt_compile_ex(s, "hdr_k", &NO_CACHE, &c, &err);
        CHECK_EQ_INT(CF_OK, st);
        if (st != CF_OK)
            fprintf(stderr, "embedded %s: %s\n", cf_rt_device_header_names[i], err.msg);
        cf_rt_cubin_free(&c);
        snprintf(s, sizeof s, "#include \"%s\"\n", cf_rt_device_header_names[i]);
        if (cf_rt_compile_ex(s, "hdr_k", &NO_CACHE, &c, &err) != CF_OK)
            CHECK(!strstr(err.msg, "cannot open source file"));
        cf_rt_cubin_free(&c);
    }
    /* cf_trace.h stands alone in CUDA too (the host includes it as C: this file does). */
    st = cf_rt_compile_ex("#include \"cf_trace.h\"\n"
                          "extern \"C\" __global__ void tr_k(long long *p) { p[CF_TRE_ACC] = CF_TRC_N; }\n",
                          "tr_k", &NO_CACHE, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK)
        fprintf(stderr, "cf_trace.h: %s\n", err.msg);
    cf_rt_cubin_free(&c);
    /* __has_include sees the named headers, and misses absent ones. */
    st = cf_rt_compile_ex("#if __has_include(\"absent.cuh\")\n#error found\n#endif\n", "hi_k",
                          &NO_CACHE, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    cf_rt_cubin_free(&c);
}

static void test_ptxas_parse(void)
{
    char log[] =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function '_Z5otherPf' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z5otherPf\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 200 registers, used 1 barriers, 1024 bytes smem\n"
        "ptxas info    : Compiling entry function 'gemm' for 'sm_90a'\n"
        "ptxas info    : Function properties for gemm\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 2 barriers, 16 bytes smem, 536 bytes cmem[0]\n";
    cf_rt_cubin c = {.log = log, .log_size = strlen(log)};
    cf_rt_parse_ptxas(&c, "gemm");
    CHECK_EQ_INT(168, c.registers);
    CHECK_EQ_INT(0, c.spill_store_bytes);
    CHECK_EQ_INT(16, c.smem_bytes);
    CHECK_EQ_INT(2, c.barriers);
    cf_rt_parse_ptxas(&c, "other");   /* the mangled name */
    CHECK_EQ_INT(200, c.registers);
    CHECK_EQ_INT(8, c.spill_store_bytes);
    CHECK_EQ_INT(4, c.spill_load_bytes);
    CHECK_EQ_INT(16, c.stack_bytes);
    cf_rt_parse_ptxas(&c, "absent");  /* no such entry: the max over all */
    CHECK_EQ_INT(200, c.registers);
    CHECK_EQ_INT(1024, c.smem_bytes);
    cf_rt_parse_ptxas(&c, "oth");     /* a prefix is not a match */
    CHECK_EQ_INT(200, c.registers);
    CHECK(!c.wgmma_serialized);
    /* ptxas's warning that it serialised a wgmma pipeline is picked up */
    char warned[] = "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
                    "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
                    "between start and end of the pipeline stage in the function 'gemm'\n"
                    "ptxas info    : Used 168 registers, used 2 barriers, 16 bytes smem\n";
    cf_rt_cubin w = {.log = warned, .log_size = strlen(warned)};
    cf_rt_parse_ptxas(&w, "gemm");
    CHECK(w.wgmma_serialized);
    c.log = NULL;
    cf_rt_parse_ptxas(&c, "gemm");
    CHECK_EQ_INT(-1, c.registers);
    CHECK(!c.wgmma_serialized);
}

static void test_tma_check(void)
{
    cf_error err = {0};
    const void *good = (const void *)(uintptr_t)0x7f0000010000ull;
    CHECK_EQ_INT(CF_OK, cf_rt_tma_check("X", CF_BF16, good, 4096, 4096, 4096, 128, 64, 128, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_tma_check("Y", CF_F32, good, 100, 33, 36, 64, 32, 128, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_tma_check("Z", CF_BF16, good, 1, 8, 8, 256, 256, 0, &err));

    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("W", CF_BF16, good, 1000, 1001, 1001, 64, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "tensor 'W': row pitch 2002 bytes is not a multiple of 16");
    CHECK_CONTAINS(err.msg, "pad the leading dimension to a multiple of 8 bf16 elements");

    const void *odd = (const void *)(uintptr_t)0x7f0000010008ull;
    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("A", CF_BF16, odd, 64, 64, 64, 64, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "tensor 'A'");
    CHECK_CONTAINS(err.msg, "not 16-byte aligned");

    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("B", CF_BF16, good, 4096, 4096, 4096, 300, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "tensor 'B': box 300 x 64");
    CHECK_CONTAINS(err.msg, "1..256");

    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("C", CF_BF16, good, 4096, 4096, 4096, 64, 128, 128, &err));
    CHECK_CONTAINS(err.msg, "256 bytes, more than the 128-byte swizzle span");

    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("D", CF_F16, good, 64, 64, 64, 64, 4, 0, &err));
    CHECK_CONTAINS(err.msg, "8 bytes, not a multiple of 16");

    CHECK_EQ_INT(CF_ERR_ALIGNMENT, cf_rt_tma_check("E", CF_BF16, good, (1ull << 32) + 1, 64, 64,
                                                   64, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "exceeds 2^32");

    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check("F", CF_BF16, good, 2, 64, 1ull << 39, 64, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "2^40");

    CHECK_EQ_INT(CF_ERR_INVALID_ARG,
                 cf_rt_tma_check("G", CF_BF16, good, 64, 64, 32, 64, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "smaller than the 64 columns");
    CHECK_EQ_INT(CF_ERR_INVALID_ARG,
                 cf_rt_tma_check("H", CF_BF16, good, 64, 64, 64, 64, 64, 96, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG,
                 cf_rt_tma_check("I", CF_BF16, NULL, 64, 64, 64, 64, 64, 128, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG,
                 cf_rt_tma_check("J", CF_BF16, good, 0, 64, 64, 64, 64, 128, &err));
    CHECK_EQ_INT(CF_ERR_ALIGNMENT,
                 cf_rt_tma_check(NULL, CF_BF16, good, 64, 1001, 1001, 64, 64, 128, &err));
    CHECK(strncmp(err.msg, "tensor: row pitch", 17) == 0);
}

/* ---- with a GPU ------------------------------------------------------------ */

static const char *GPU_KERNELS =
    "extern \"C\" __global__ void cf_add(float *x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] += 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void cf_rank(unsigned *out) {\n"
    "    extern __shared__ unsigned dyn[];\n"
    "    unsigned r, n;\n"
    "    asm volatile(\"mov.u32 %0, %%cluster_ctarank;\" : \"=r\"(r));\n"
    "    asm volatile(\"mov.u32 %0, %%cluster_nctarank;\" : \"=r\"(n));\n"
    "    dyn[threadIdx.x] = r;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x == 0) out[blockIdx.x] = dyn[0] * 100 + n;\n"
    "}\n";

static void test_gpu(void)
{
    cf_error err = {0};
    cf_rt_device_info info;
    CHECK_EQ_INT(CF_OK, cf_rt_device_info_get(&info, &err));
    printf("test_runtime: device %d %s, sm_%d%d, %d SMs, smem opt-in %d, driver %d\n",
           info.ordinal, info.name, info.cc_major, info.cc_minor, info.sm_count, info.smem_optin,
           info.driver_version);
    if (info.cc_major != 9) {
        printf("test_runtime: SKIP GPU run: not an sm_90 device\n");
        return;
    }
    cf_rt_cubin c;
    cf_rt_module mod = NULL;
    cf_rt_func add = NULL, rank = NULL;
    cf_rt_devptr d = 0, o = 0;
    CHECK_EQ_INT(CF_OK, cf_rt_compile_ex(GPU_KERNELS, "gpu_k", &NO_CACHE, &c, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_module_load(c.cubin, &mod, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_module_get_func(mod, "cf_add", &add, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_module_get_func(mod, "cf_rank", &rank, &err));
    CHECK_EQ_INT(CF_ERR_CUDA, cf_rt_module_get_func(mod, "nope", &rank, &err));
    CHECK_CONTAINS(err.msg, "CUDA_ERROR_NOT_FOUND");
    CHECK_EQ_INT(CF_OK, cf_rt_module_get_func(mod, "cf_rank", &rank, &err));
    cf_rt_func_attrs a;
    CHECK_EQ_INT(CF_OK, cf_rt_func_get_attrs(add, &a, &err));
    CHECK(a.registers > 0 && a.max_threads >= 256 && a.binary_version == 90);

    enum { N = 1000 };
    float h[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    CHECK_EQ_INT(CF_OK, cf_rt_malloc(&d, sizeof h, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_memcpy_htod(d, h, sizeof h, &err));
    cf_rt_stream s = NULL;
    cf_rt_event e0 = NULL, e1 = NULL;
    CHECK_EQ_INT(CF_OK, cf_rt_stream_create(&s, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_event_create(&e0, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_event_create(&e1, &err));
    int n = N;
    void *args[] = {&d, &n};
    cf_rt_launch_cfg cfg = {.grid = {4}, .block = {256}, .stream = s};
    CHECK_EQ_INT(CF_OK, cf_rt_event_record(e0, s, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_launch(add, &cfg, args, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_event_record(e1, s, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_stream_sync(s, &err));
    float ms = -1;
    CHECK_EQ_INT(CF_OK, cf_rt_event_elapsed_ms(e0, e1, &ms, &err));
    CHECK(ms >= 0);
    CHECK_EQ_INT(CF_OK, cf_rt_memcpy_dtoh(h, d, sizeof h, &err));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += h[i] != (float)i + 1.0f;
    CHECK_EQ_INT(0, bad);
    CHECK_EQ_INT(CF_OK, cf_rt_memset_d32(d, 0x3f800000u, N, &err));   /* 1.0f */
    CHECK_EQ_INT(CF_OK, cf_rt_memcpy_dtoh(h, d, sizeof h, &err));
    CHECK(h[0] == 1.0f && h[N - 1] == 1.0f);
    CHECK_EQ_INT(CF_OK, cf_rt_memset_d16(d, 0x1234, 2, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_memset_d8(d + 4, 0xab, 4, &err));
    unsigned char bytes[8];
    CHECK_EQ_INT(CF_OK, cf_rt_memcpy_dtoh(bytes, d, 8, &err));
    CHECK(bytes[0] == 0x34 && bytes[1] == 0x12 && bytes[4] == 0xab && bytes[7] == 0xab);

    /* Clusters of 2, 8 and (non-portable) 16 with dynamic smem. */
    CHECK_EQ_INT(CF_OK, cf_rt_malloc(&o, 64 * sizeof(unsigned), &err));
    static const int sizes[] = {2, 8, 16};
    for (int k = 0; k < CF_ARRAY_LEN(sizes); k++) {
        int cl = sizes[k], smem = 100 * 1024, nclusters = 0;
        CHECK_EQ_INT(CF_OK, cf_rt_func_prepare(rank, smem, cl, &err));
        CHECK_EQ_INT(CF_OK, cf_rt_max_active_clusters(rank, cl, 128, smem, &nclusters, &err));
        printf("test_runtime: cluster %d at %d KB: %d co-resident clusters\n", cl, smem / 1024,
               nclusters);
        CHECK(nclusters > 0);
        void *rargs[] = {&o};
        cf_rt_launch_cfg rc = {.grid = {(unsigned)(2 * cl)}, .block = {128},
                               .cluster = {(unsigned)cl, 1, 1}, .dyn_smem = (unsigned)smem};
        cf_status st = cf_rt_launch(rank, &rc, rargs, &err);
        CHECK_EQ_INT(CF_OK, st);
        if (st != CF_OK)
            fprintf(stderr, "%s\n", err.msg);
        CHECK_EQ_INT(CF_OK, cf_rt_ctx_sync(&err));
        unsigned got[32];
        CHECK_EQ_INT(CF_OK, cf_rt_memcpy_dtoh(got, o, sizeof(unsigned) * 2 * (size_t)cl, &err));
        int wrong = 0;
        for (int i = 0; i < 2 * cl; i++)
            wrong += got[i] != (unsigned)((i % cl) * 100 + cl);
        CHECK_EQ_INT(0, wrong);
    }
    cf_rt_launch_cfg badc = {.grid = {3}, .block = {32}, .cluster = {2, 1, 1}};
    void *bargs[] = {&o};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_rt_launch(rank, &badc, bargs, &err));

    /* A TMA map over real memory; a bad one is refused before the driver. */
    _Alignas(64) unsigned char desc[128];
    memset(desc, 0, sizeof desc);
    CHECK_EQ_INT(CF_OK, cf_rt_tensor_map_2d(desc, CF_BF16, (const void *)(uintptr_t)d, 16, 64, 64,
                                            16, 64, 128, &err));
    int nz = 0;
    for (int i = 0; i < 128; i++)
        nz += desc[i] != 0;
    CHECK(nz > 0);
    CHECK_EQ_INT(CF_ERR_ALIGNMENT, cf_rt_tensor_map_2d_named(desc, "W", CF_BF16,
                                                             (const void *)(uintptr_t)d, 16,
                                                             1001, 1001, 16, 64, 128, &err));
    CHECK_CONTAINS(err.msg, "tensor 'W': row pitch 2002 bytes");

    /* cuBLASLt: C[M,N] = A[M,K] B, B as [K,N] and [N,K], against the CPU. */
    enum { M = 64, NN = 48, K = 32 };
    uint16_t A[M * K], B[K * NN], Bt[NN * K], C[M * NN];
    for (int i = 0; i < M * K; i++)
        A[i] = cf_f32_to_bf16((float)((i * 7) % 11 - 5) / 4.0f);
    for (int i = 0; i < K * NN; i++)
        B[i] = cf_f32_to_bf16((float)((i * 5) % 13 - 6) / 8.0f);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < NN; j++)
            Bt[j * K + k] = B[k * NN + j];
    cf_rt_devptr dA = 0, dB = 0, dC = 0;
    CHECK_EQ_INT(CF_OK, cf_rt_malloc(&dA, sizeof A, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_malloc(&dB, sizeof B, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_malloc(&dC, sizeof C, &err));
    CHECK_EQ_INT(CF_OK, cf_rt_memcpy_htod(dA, A, sizeof A, &err));
    for (int nk = 0; nk < 2; nk++) {
        CHECK_EQ_INT(CF_OK, cf_rt_memcpy_htod(dB, nk ? Bt : B, sizeof B, &err));
        CHECK_EQ_INT(CF_OK, cf_rt_memset_d16(dC, 0, M * NN, &err));
        cf_status st = cf_rt_cublas_gemm(CF_BF16, M, NN, K, dA, dB, nk, dC, NULL, &err);
        CHECK_EQ_INT(CF_OK, st);
        if (st != CF_OK)
            fprintf(stderr, "%s\n", err.msg);
        CHECK_EQ_INT(CF_OK, cf_rt_memcpy_dtoh(C, dC, sizeof C, &err));
        int wrong = 0;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < NN; j++) {
                double ref = 0;
                for (int k = 0; k < K; k++)
                    ref += (double)cf_bf16_to_f32(A[i * K + k]) * cf_bf16_to_f32(B[k * NN + j]);
                wrong += fabs(cf_bf16_to_f32(C[i * NN + j]) - ref) > 1e-2 * (1 + fabs(ref));
            }
        CHECK_EQ_INT(0, wrong);
    }
    CHECK_EQ_INT(CF_ERR_DTYPE, cf_rt_cublas_gemm(CF_F32, M, NN, K, dA, dB, 0, dC, NULL, &err));

    cf_rt_free(dA, &err);
    cf_rt_free(dB, &err);
    cf_rt_free(dC, &err);
    cf_rt_free(o, &err);
    cf_rt_free(d, &err);
    cf_rt_event_destroy(e0, &err);
    cf_rt_event_destroy(e1, &err);
    cf_rt_stream_destroy(s, &err);
    CHECK_EQ_INT(CF_OK, cf_rt_module_unload(mod, &err));
    cf_rt_cubin_free(&c);
}

static void test_driver(void)
{
    void *probe = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    cf_error err = {0};
    cf_status st = cf_rt_init(&err);
    if (!probe) {
        CHECK_EQ_INT(CF_ERR_NO_DEVICE, st);
        CHECK_CONTAINS(err.msg, "CUDA driver libcuda.so.1 not found (no GPU on this machine?)");
        /* Sticky, and every driver call says the same. */
        cf_rt_devptr p;
        CHECK_EQ_INT(CF_ERR_NO_DEVICE, cf_rt_malloc(&p, 16, &err));
        CHECK_CONTAINS(err.msg, "libcuda.so.1");
        cf_rt_device_info info;
        CHECK_EQ_INT(CF_ERR_NO_DEVICE, cf_rt_device_info_get(&info, &err));
        _Alignas(64) unsigned char desc[128];
        CHECK_EQ_INT(CF_ERR_NO_DEVICE,
                     cf_rt_tensor_map_2d(desc, CF_BF16, (const void *)(uintptr_t)0x10000, 64, 64,
                                         64, 64, 64, 128, &err));
        CHECK_EQ_INT(CF_ERR_NO_DEVICE,
                     cf_rt_cublas_gemm(CF_BF16, 64, 64, 64, 0, 0, false, 0, NULL, &err));
        return;
    }
    dlclose(probe);
    if (st != CF_OK) {
        /* A driver without a usable GPU. */
        CHECK_EQ_INT(CF_ERR_NO_DEVICE, st);
        printf("test_runtime: SKIP GPU run: %s\n", err.msg);
        return;
    }
    test_gpu();
}

int main(void)
{
    char dir[] = "/tmp/cf_test_runtime.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("CF_CACHE_DIR", dir, 1);
    cf_error err = {0};
    cf_status st = cf_rt_nvrtc_load(NULL, NULL, NULL, &err);
    CHECK_EQ_INT(CF_OK, st);   /* NVRTC is required: fail, never skip */
    if (st == CF_OK) {
        test_nvrtc_simple();
        test_nvrtc_hopper();
        test_nvrtc_errors();
        test_headers();
    } else {
        fprintf(stderr, "NVRTC missing: %s\n", err.msg);
    }
    test_ptxas_parse();
    test_tma_check();
    test_driver();
    rmdir(dir);   /* nothing was cached: every compile here bypasses the cache */
    return tu_finish("test_runtime");
}
