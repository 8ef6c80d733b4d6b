/* rt_blas.c — cuBLASLt, loaded from libcublasLt.so at run time: GEMM plans
 * for the cuBLAS baseline and the unfused path's GEMMs.
 *
 * Uses the driver layer (cf_rt_init, device memory), which never calls up into it. */
#include "rt_cuda.h"

#include <cublasLt.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LT_FUNCS(X)                                                                           \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                            \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)                           \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                 \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

static struct lt_table {
#define X(f) __typeof__(&f) f;
    LT_FUNCS(X)
#undef X
    __typeof__(&cublasLtGetStatusName) cublasLtGetStatusName;
} lt;

static const cf_rt_sym lt_syms[] = {
#define X(f) {CF_RT_SYM(f), offsetof(struct lt_table, f), false},
    LT_FUNCS(X)
#undef X
    {"cublasLtGetStatusName", offsetof(struct lt_table, cublasLtGetStatusName), true},
};

static pthread_mutex_t lt_mu = PTHREAD_MUTEX_INITIALIZER;
static bool lt_tried;
static cf_status lt_status;
static char lt_msg[1024];

static cf_status lt_load(cf_error *err)
{
    pthread_mutex_lock(&lt_mu);
    if (!lt_tried) {
        lt_tried = true;
        static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                            "libcublasLt.so"};
        char tried[700];
        const char *path = NULL, *missing = NULL;
        void *lib = cf_rt_open_first(NULL, names, CF_ARRAY_LEN(names), &path, tried, sizeof tried);
        lt_status = CF_ERR_NO_DEVICE;
        if (!lib)
            snprintf(lt_msg, sizeof lt_msg, "cuBLASLt not found (needed for the cuBLAS "
                     "baseline and the unfused path); tried %s", tried);
        else if ((missing = cf_rt_load_syms(lib, &lt, lt_syms, CF_ARRAY_LEN(lt_syms))))
            snprintf(lt_msg, sizeof lt_msg, "%s lacks %s", path, missing);
        else
            lt_status = CF_OK;
    }
    pthread_mutex_unlock(&lt_mu);
    if (lt_status != CF_OK)
        return cf_errorf(err, lt_status, (cf_loc){0}, "%s", lt_msg);
    return CF_OK;
}

#define CF_LT_CHECK(expr)                                                                  \
    do {                                                                                   \
        cublasStatus_t s_ = (expr);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "%s failed: %s (%d) (rt_blas.c:%d)", \
                           cf_rt_call_text(#expr),                                         \
                           lt.cublasLtGetStatusName ? lt.cublasLtGetStatusName(s_) : "cuBLAS", \
                           (int)s_, __LINE__);                                             \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

struct cf_rt_cublas_plan {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    cf_rt_devptr ws;
    size_t ws_size;
    bool owns_ws;   /* allocated by the plan (else the caller's, shared by its plans) */
};

enum { LT_WORKSPACE = 32 << 20 };

static cf_status plan_create(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                             cf_rt_devptr ws, size_t ws_size, cf_rt_cublas_plan **out, cf_error *err)
{
    cf_status st;
    *out = NULL;
    if ((t != CF_BF16 && t != CF_F16) || (c_t != t && c_t != CF_F32))
        return cf_errorf(err, CF_ERR_DTYPE, (cf_loc){0},
                         "cuBLAS GEMM takes bf16 or f16 operands and C of theirs or f32, not %s -> %s",
                         cf_dtype_name(t), cf_dtype_name(c_t));
    if (M <= 0 || N <= 0 || K <= 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "bad GEMM shape %lldx%lldx%lld",
                         (long long)M, (long long)N, (long long)K);
    CF_RT_INIT();
    if ((st = lt_load(err)) != CF_OK)
        return st;
    cf_rt_cublas_plan *p = calloc(1, sizeof *p);
    cublasLtMatmulPreference_t pref = NULL;
    if (!p)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cudaDataType_t dt = t == CF_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* Row-major C[M,N] = A[M,K] B is column-major C^T[N,M] = B^T A^T: cuBLAS's
     * "A" is our B (N x K, or K x N transposed when B is [N,K]), its "B" is
     * our A seen as K x M, and m = N, n = M. */
    cublasOperation_t ta = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    CF_LT_CHECK(lt.cublasLtCreate(&p->h));
    CF_LT_CHECK(lt.cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CF_LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                 sizeof ta));
    CF_LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                 sizeof tb));
    if (b_is_nk)
        CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->la, dt, (uint64_t)K, (uint64_t)N, K));
    else
        CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->la, dt, (uint64_t)N, (uint64_t)K, N));
    CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->lb, dt, (uint64_t)K, (uint64_t)M, K));
    CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->lc, c_t == CF_F32 ? CUDA_R_32F : dt, (uint64_t)N,
                                              (uint64_t)M, N));
    p->ws = ws;
    p->ws_size = ws ? ws_size : LT_WORKSPACE;
    p->owns_ws = !ws;
    if (p->owns_ws && (st = cf_rt_malloc(&p->ws, p->ws_size, err)) != CF_OK)
        goto fail;
    CF_LT_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
    CF_LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws_size, sizeof p->ws_size));
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    CF_LT_CHECK(lt.cublasLtMatmulAlgoGetHeuristic(p->h, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                                 1, &res, &n_res));
    if (n_res < 1) {
        st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                       "cuBLASLt has no algorithm for %s %lldx%lldx%lld (B %s)",
                       cf_dtype_name(t), (long long)M, (long long)N, (long long)K,
                       b_is_nk ? "[N,K]" : "[K,N]");
        goto fail;
    }
    p->algo = res.algo;
    lt.cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return CF_OK;
fail:
    if (pref)
        lt.cublasLtMatmulPreferenceDestroy(pref);
    cf_rt_cublas_plan_free(p);
    return st;
}

cf_status cf_rt_cublas_plan_create(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                                   cf_rt_cublas_plan **out, cf_error *err)
{
    return plan_create(t, c_t, M, N, K, b_is_nk, 0, 0, out, err);
}

cf_status cf_rt_cublas_plan_create_ws(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                                      cf_rt_devptr ws, size_t ws_size, cf_rt_cublas_plan **out, cf_error *err)
{
    if (!ws || !ws_size)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rt_cublas_plan_create_ws: no workspace");
    return plan_create(t, c_t, M, N, K, b_is_nk, ws, ws_size, out, err);
}

size_t cf_rt_cublas_workspace_bytes(void) { return LT_WORKSPACE; }

cf_status cf_rt_cublas_plan_run(cf_rt_cublas_plan *p, cf_rt_devptr A, cf_rt_devptr B,
                                cf_rt_devptr C, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    const float alpha = 1.0f, beta = 0.0f;
    CF_LT_CHECK(lt.cublasLtMatmul(p->h, p->op, &alpha, (const void *)(uintptr_t)B, p->la,
                                 (const void *)(uintptr_t)A, p->lb, &beta,
                                 (const void *)(uintptr_t)C, p->lc, (void *)(uintptr_t)C, p->lc,
                                 &p->algo, (void *)(uintptr_t)p->ws, p->ws_size,
                                 (cudaStream_t)s));
fail:
    return st;
}

void cf_rt_cublas_plan_free(cf_rt_cublas_plan *p)
{
    if (!p)
        return;
    if (p->la)
        lt.cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        lt.cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        lt.cublasLtMatrixLayoutDestroy(p->lc);
    if (p->op)
        lt.cublasLtMatmulDescDestroy(p->op);
    if (p->h)
        lt.cublasLtDestroy(p->h);
    if (p->ws && p->owns_ws)
        cf_rt_free(p->ws, NULL);
    free(p);
}

cf_status cf_rt_cublas_gemm(cf_dtype t, int64_t M, int64_t N, int64_t K, cf_rt_devptr A,
                            cf_rt_devptr B, bool b_is_nk, cf_rt_devptr C, cf_rt_stream s,
                            cf_error *err)
{
    cf_rt_cublas_plan *p;
    cf_status st = cf_rt_cublas_plan_create(t, t, M, N, K, b_is_nk, &p, err);
    if (st != CF_OK)
        return st;
    st = cf_rt_cublas_plan_run(p, A, B, C, s, err);
    if (st == CF_OK)
        st = cf_rt_stream_sync(s, err);
    cf_rt_cublas_plan_free(p);
    return st;
}
