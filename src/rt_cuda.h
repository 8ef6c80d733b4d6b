/* rt_cuda.h — what the driver layer (rt_driver.c) lends the layers above it
 * (rt_nvrtc.c, rt_tma.c, rt_blas.c): loading a library into a table of
 * function pointers, the driver's own table, and the check macros.
 *
 * Included only by src/rt_*.c, which take CUDA types from the toolkit's
 * headers (types only: nothing links against a CUDA library). */
#ifndef CF_RT_CUDA_H
#define CF_RT_CUDA_H

#include "cf_internal.h"

#include <cuda.h>

#define CF_RT_STR_(x) #x
#define CF_RT_SYM(x) CF_RT_STR_(x)   /* the exported name after cuda.h's _v2 renames */

/* One entry of a function table: the symbol and where its pointer goes. */
typedef struct cf_rt_sym {
    const char *name;
    size_t off;
    bool optional;
} cf_rt_sym;

/* Fills the table at base from lib; NULL or the first missing required name. */
const char *cf_rt_load_syms(void *lib, void *base, const cf_rt_sym *syms, int n);
/* dlopen of the first name that loads: env_path, then names, then each of
 * names under $CUDA_HOME/lib64 and /usr/local/cuda/lib64.  On failure, tried
 * gets the list of names and the last dlerror(). */
void *cf_rt_open_first(const char *env_path, const char *const *names, int n, const char **loaded,
                       char *tried, size_t tried_n);
/* "tab.cuFoo(a)" -> "cuFoo(a)": a failed call's text as messages show it. */
const char *cf_rt_call_text(const char *text);
/* "src/rt_tma.c" -> "rt_tma.c" (__FILE__ in messages). */
const char *cf_rt_file_name(const char *path);
double cf_rt_now_ms(void);

/* ---- the driver's table (rt_driver.c) ---- */

#define CF_RT_DRV_FUNCS(X)                                                                     \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) \
    X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)             \
    X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData)   \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetAttribute)      \
    X(cuFuncSetAttribute) X(cuOccupancyMaxActiveClusters) X(cuLaunchKernelEx) X(cuMemAlloc)  \
    X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpy2DAsync)          \
    X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD16) X(cuMemsetD32) X(cuStreamCreate)          \
    X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy)              \
    X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuTensorMapEncodeTiled)   \
    X(cuStreamIsCapturing)

typedef struct cf_rt_drv_table {
#define X(f) __typeof__(&f) f;
    CF_RT_DRV_FUNCS(X)
#undef X
} cf_rt_drv_table;

/* Filled by cf_rt_init; read only after it succeeded. */
extern cf_rt_drv_table cf_rt_cu;

/* CF_ERR_CUDA: "<call> failed: <name> (<string>) (<file>:<line>)". */
cf_status cf_rt_cu_fail(cf_error *err, CUresult r, const char *text, const char *file, int line);

/* In a function with `cf_status st`, `cf_error *err` and a `fail:` label. */
#define CF_CU_CHECK(expr)                                                \
    do {                                                                 \
        CUresult r_ = (expr);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            st = cf_rt_cu_fail(err, r_, #expr, __FILE__, __LINE__);      \
            goto fail;                                                   \
        }                                                                \
    } while (0)

/* Returns cf_rt_init's error from a function with `cf_status st` and `err`. */
#define CF_RT_INIT()                          \
    do {                                      \
        if ((st = cf_rt_init(err)) != CF_OK)  \
            return st;                        \
    } while (0)

#endif
