/* rt_driver.c — the CUDA driver, loaded from libcuda.so.1 at run time: init,
 * device info, modules and functions, launches, memory, streams and events.
 *
 * The bottom layer of the runtime: NVRTC (rt_nvrtc.c), TMA descriptors
 * (rt_tma.c) and cuBLASLt (rt_blas.c) use it through rt_cuda.h; it calls
 * none of them.  Nothing links against libcuda: the library, the CLI and
 * every CPU test build and pass on a machine without a GPU, where each call
 * fails with CF_ERR_NO_DEVICE (tests/fake_cuda.c stands in for libcuda.so.1).
 */
#include "rt_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ==== loading helpers (also used by rt_nvrtc.c and rt_blas.c) ============== */

const char *cf_rt_load_syms(void *lib, void *base, const cf_rt_sym *syms, int n)
{
    for (int i = 0; i < n; i++) {
        void *p = dlsym(lib, syms[i].name);
        if (!p && !syms[i].optional)
            return syms[i].name;
        memcpy((char *)base + syms[i].off, &p, sizeof p);
    }
    return NULL;
}

void *cf_rt_open_first(const char *env_path, const char *const *names, int n, const char **loaded,
                       char *tried, size_t tried_n)
{
    static char loaded_buf[3][1024];
    static int loaded_i;
    char cand[1024];
    const char *home = getenv("CUDA_HOME");
    const char *dirs[2] = {home && *home ? home : NULL, "/usr/local/cuda"};
    size_t used = 0;
    tried[0] = '\0';
    for (int pass = 0; pass < 4; pass++) {
        int count = pass == 0 ? (env_path && *env_path ? 1 : 0) : n;
        for (int i = 0; i < count; i++) {
            if (pass == 0)
                snprintf(cand, sizeof cand, "%s", env_path);
            else if (pass == 1)
                snprintf(cand, sizeof cand, "%s", names[i]);
            else if (dirs[pass - 2])
                snprintf(cand, sizeof cand, "%s/lib64/%s", dirs[pass - 2], names[i]);
            else
                continue;
            void *lib = dlopen(cand, RTLD_NOW | RTLD_LOCAL);
            if (lib) {
                int slot = loaded_i++ % 3;
                snprintf(loaded_buf[slot], sizeof loaded_buf[slot], "%s", cand);
                *loaded = loaded_buf[slot];
                return lib;
            }
            const char *e = dlerror();
            if (used < tried_n) {
                int w = snprintf(tried + used, tried_n - used, "%s%s", used ? ", " : "", cand);
                used += w > 0 ? (size_t)w : 0;
            }
            if (e && pass <= 1 && i == 0 && used < tried_n) {
                int w = snprintf(tried + used, tried_n - used, " (%s)", e);
                used += w > 0 ? (size_t)w : 0;
            }
        }
    }
    return NULL;
}

double cf_rt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

const char *cf_rt_call_text(const char *text)
{
    const char *paren = strchr(text, '('), *dot = strchr(text, '.');
    return dot && (!paren || dot < paren) ? dot + 1 : text;
}

const char *cf_rt_file_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* ==== the CUDA driver ======================================================== */

cf_rt_drv_table cf_rt_cu;

static const cf_rt_sym drv_syms[] = {
#define X(f) {CF_RT_SYM(f), offsetof(cf_rt_drv_table, f), false},
    CF_RT_DRV_FUNCS(X)
#undef X
};

static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int drv_state;            /* 0 untried, 1 ready, 2 failed */
static cf_status drv_status;
static char drv_msg[1024];
static CUdevice drv_dev;
static CUcontext drv_ctx;
static int drv_ordinal;
static _Thread_local bool ctx_current;

static const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (!cf_rt_cu.cuGetErrorName || cf_rt_cu.cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN_CODE";
    return s;
}

static const char *cu_string(CUresult r)
{
    const char *s = NULL;
    if (!cf_rt_cu.cuGetErrorString || cf_rt_cu.cuGetErrorString(r, &s) != CUDA_SUCCESS || !s)
        return "unknown error";
    return s;
}

cf_status cf_rt_cu_fail(cf_error *err, CUresult r, const char *text, const char *file, int line)
{
    return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "%s failed: %s (%s) (%s:%d)", cf_rt_call_text(text),
                     cu_name(r), cu_string(r), cf_rt_file_name(file), line);
}

static void drv_init_locked(void)
{
    drv_status = CF_ERR_NO_DEVICE;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(drv_msg, sizeof drv_msg,
                 "CUDA driver libcuda.so.1 not found (no GPU on this machine?): %s",
                 e ? e : "dlopen failed");
        return;
    }
    const char *missing = cf_rt_load_syms(lib, &cf_rt_cu, drv_syms, CF_ARRAY_LEN(drv_syms));
    if (missing) {
        snprintf(drv_msg, sizeof drv_msg,
                 "CUDA driver libcuda.so.1 lacks %s: the driver is too old for comfuse", missing);
        return;
    }
    CUresult r = cf_rt_cu.cuInit(0);
    int count = 0;
    if (r != CUDA_SUCCESS) {
        snprintf(drv_msg, sizeof drv_msg, "cuInit failed: %s (%s)", cu_name(r), cu_string(r));
        return;
    }
    if ((r = cf_rt_cu.cuDeviceGetCount(&count)) != CUDA_SUCCESS || count == 0) {
        snprintf(drv_msg, sizeof drv_msg, "no CUDA device: cuDeviceGetCount gave %d (%s)", count,
                 cu_name(r));
        return;
    }
    const char *dev_env = getenv("CF_DEVICE");
    drv_ordinal = 0;
    if (dev_env && *dev_env) {
        char *end;
        long v = strtol(dev_env, &end, 10);
        if (*end || v < 0 || v >= count) {
            drv_status = CF_ERR_INVALID_ARG;
            snprintf(drv_msg, sizeof drv_msg, "CF_DEVICE=%s: not a device ordinal (0..%d)",
                     dev_env, count - 1);
            return;
        }
        drv_ordinal = (int)v;
    }
    if ((r = cf_rt_cu.cuDeviceGet(&drv_dev, drv_ordinal)) != CUDA_SUCCESS ||
        (r = cf_rt_cu.cuDevicePrimaryCtxRetain(&drv_ctx, drv_dev)) != CUDA_SUCCESS) {
        snprintf(drv_msg, sizeof drv_msg, "cannot open device %d: %s (%s)", drv_ordinal,
                 cu_name(r), cu_string(r));
        return;
    }
    drv_status = CF_OK;
}

cf_status cf_rt_init(cf_error *err)
{
    int s = atomic_load(&drv_state);
    if (s == 0) {
        pthread_mutex_lock(&drv_mu);
        if (atomic_load(&drv_state) == 0) {
            drv_init_locked();
            atomic_store(&drv_state, drv_status == CF_OK ? 1 : 2);
        }
        pthread_mutex_unlock(&drv_mu);
        s = atomic_load(&drv_state);
    }
    if (s != 1)
        return cf_errorf(err, drv_status, (cf_loc){0}, "%s", drv_msg);
    if (!ctx_current) {
        CUresult r = cf_rt_cu.cuCtxSetCurrent(drv_ctx);
        if (r != CUDA_SUCCESS)
            return cf_rt_cu_fail(err, r, "cuCtxSetCurrent(primary context)", __FILE__, __LINE__);
        ctx_current = true;
    }
    return CF_OK;
}

cf_status cf_rt_device_info_get(cf_rt_device_info *info, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    memset(info, 0, sizeof *info);
    info->ordinal = drv_ordinal;
    CF_CU_CHECK(cf_rt_cu.cuDeviceGetName(info->name, (int)sizeof info->name, drv_dev));
    static const struct { CUdevice_attribute a; size_t off; } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, offsetof(cf_rt_device_info, cc_major)},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, offsetof(cf_rt_device_info, cc_minor)},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, offsetof(cf_rt_device_info, sm_count)},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
         offsetof(cf_rt_device_info, smem_optin)},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
         offsetof(cf_rt_device_info, smem_per_sm)},
        {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, offsetof(cf_rt_device_info, l2_bytes)},
        {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, offsetof(cf_rt_device_info, clock_khz)},
    };
    for (int i = 0; i < CF_ARRAY_LEN(attrs); i++)
        CF_CU_CHECK(cf_rt_cu.cuDeviceGetAttribute((int *)((char *)info + attrs[i].off), attrs[i].a,
                                           drv_dev));
    CF_CU_CHECK(cf_rt_cu.cuDeviceTotalMem(&info->total_mem, drv_dev));
    CF_CU_CHECK(cf_rt_cu.cuDriverGetVersion(&info->driver_version));
fail:
    return st;
}

cf_status cf_rt_module_load(const void *cubin, cf_rt_module *mod, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUmodule m = NULL;
    CF_CU_CHECK(cf_rt_cu.cuModuleLoadData(&m, cubin));
    *mod = m;
fail:
    return st;
}

cf_status cf_rt_module_unload(cf_rt_module mod, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuModuleUnload((CUmodule)mod));
fail:
    return st;
}

cf_status cf_rt_module_get_global(cf_rt_module mod, const char *name, cf_rt_devptr *p, size_t *bytes,
                                  cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUdeviceptr d = 0;
    size_t n = 0;
    CF_CU_CHECK(cf_rt_cu.cuModuleGetGlobal(&d, &n, (CUmodule)mod, name));
    *p = (cf_rt_devptr)d;
    *bytes = n;
fail:
    return st;
}

cf_status cf_rt_module_get_func(cf_rt_module mod, const char *name, cf_rt_func *f, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUfunction fn = NULL;
    CUresult r = cf_rt_cu.cuModuleGetFunction(&fn, (CUmodule)mod, name);
    if (r != CUDA_SUCCESS)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                         "cuModuleGetFunction(\"%s\") failed: %s (%s) "
                         "(is the kernel extern \"C\"?)",
                         name, cu_name(r), cu_string(r));
    *f = fn;
    return CF_OK;
}

cf_status cf_rt_func_get_attrs(cf_rt_func f, cf_rt_func_attrs *a, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUfunction fn = f;
    memset(a, 0, sizeof *a);
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->const_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                      fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION, fn));
    CF_CU_CHECK(cf_rt_cu.cuFuncGetAttribute(&a->max_dynamic_smem,
                                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn));
fail:
    return st;
}

cf_status cf_rt_func_prepare(cf_rt_func f, int dyn_smem, int cluster, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUfunction fn = f;
    CF_CU_CHECK(cf_rt_cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      dyn_smem));
    if (cluster > 8)
        CF_CU_CHECK(cf_rt_cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                          1));
fail:
    return st;
}

cf_status cf_rt_max_active_clusters(cf_rt_func f, int cluster, int block, int dyn_smem, int *n,
                                    cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    if (cluster < 1 || block < 1)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "cluster size %d / block %d must be positive", cluster, block);
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = (unsigned)cluster;
    attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {.gridDimX = (unsigned)cluster, .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = (unsigned)block, .blockDimY = 1, .blockDimZ = 1,
                          .sharedMemBytes = (unsigned)dyn_smem, .attrs = &attr, .numAttrs = 1};
    CF_CU_CHECK(cf_rt_cu.cuOccupancyMaxActiveClusters(n, (CUfunction)f, &cfg));
fail:
    return st;
}

cf_status cf_rt_launch(cf_rt_func f, const cf_rt_launch_cfg *c, void **args, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUlaunchAttribute attrs[2] = {{.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION}};
    unsigned cx = c->cluster[0] ? c->cluster[0] : 1, cy = c->cluster[1] ? c->cluster[1] : 1;
    unsigned cz = c->cluster[2] ? c->cluster[2] : 1;
    attrs[0].value.clusterDim.x = cx;
    attrs[0].value.clusterDim.y = cy;
    attrs[0].value.clusterDim.z = cz;
    unsigned n_attrs = cx * cy * cz > 1 ? 1 : 0;
    if (c->cooperative) {
        attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n_attrs++].value.cooperative = 1;
    }
    CUlaunchConfig cfg = {
        .gridDimX = c->grid[0], .gridDimY = c->grid[1] ? c->grid[1] : 1,
        .gridDimZ = c->grid[2] ? c->grid[2] : 1, .blockDimX = c->block[0],
        .blockDimY = c->block[1] ? c->block[1] : 1, .blockDimZ = c->block[2] ? c->block[2] : 1,
        .sharedMemBytes = c->dyn_smem, .hStream = (CUstream)c->stream,
        .attrs = attrs, .numAttrs = n_attrs};
    if (cfg.gridDimX % cx || cfg.gridDimY % cy || cfg.gridDimZ % cz)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "grid %ux%ux%u is not a multiple of the cluster %ux%ux%u", cfg.gridDimX,
                         cfg.gridDimY, cfg.gridDimZ, cx, cy, cz);
    CF_CU_CHECK(cf_rt_cu.cuLaunchKernelEx(&cfg, (CUfunction)f, args, NULL));
fail:
    return st;
}

cf_status cf_rt_malloc(cf_rt_devptr *p, size_t bytes, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUdeviceptr d = 0;
    CF_CU_CHECK(cf_rt_cu.cuMemAlloc(&d, bytes));
    *p = d;
fail:
    return st;
}

cf_status cf_rt_free(cf_rt_devptr p, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    if (p)
        CF_CU_CHECK(cf_rt_cu.cuMemFree(p));
fail:
    return st;
}

cf_status cf_rt_memcpy_htod(cf_rt_devptr dst, const void *src, size_t bytes, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemcpyHtoD(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memcpy_dtoh(void *dst, cf_rt_devptr src, size_t bytes, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemcpyDtoH(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memcpy_2d_async(cf_rt_devptr dst, size_t dst_pitch, cf_rt_devptr src, size_t src_pitch,
                                size_t width_bytes, size_t rows, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = src, .srcPitch = src_pitch,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dst, .dstPitch = dst_pitch,
                       .WidthInBytes = width_bytes, .Height = rows};
    CF_CU_CHECK(cf_rt_cu.cuMemcpy2DAsync(&c, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_memcpy_dtod(cf_rt_devptr dst, cf_rt_devptr src, size_t bytes, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemcpyDtoD(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memset_d8(cf_rt_devptr dst, uint8_t v, size_t count, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemsetD8(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_memset_d8_async(cf_rt_devptr dst, uint8_t v, size_t count, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemsetD8Async(dst, v, count, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_memset_d16(cf_rt_devptr dst, uint16_t v, size_t count, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemsetD16(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_memset_d32(cf_rt_devptr dst, uint32_t v, size_t count, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuMemsetD32(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_ctx_sync(cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuCtxSynchronize());
fail:
    return st;
}

cf_status cf_rt_stream_create(cf_rt_stream *s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUstream cs = NULL;
    CF_CU_CHECK(cf_rt_cu.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    *s = cs;
fail:
    return st;
}

cf_status cf_rt_stream_destroy(cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuStreamDestroy((CUstream)s));
fail:
    return st;
}

cf_status cf_rt_stream_capturing(cf_rt_stream s, bool *capturing, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CF_CU_CHECK(cf_rt_cu.cuStreamIsCapturing((CUstream)s, &cs));
    *capturing = cs != CU_STREAM_CAPTURE_STATUS_NONE;   /* an invalidated capture too */
fail:
    return st;
}

cf_status cf_rt_stream_sync(cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuStreamSynchronize((CUstream)s));
fail:
    return st;
}

cf_status cf_rt_event_create(cf_rt_event *e, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CUevent ev = NULL;
    CF_CU_CHECK(cf_rt_cu.cuEventCreate(&ev, CU_EVENT_DEFAULT));
    *e = ev;
fail:
    return st;
}

cf_status cf_rt_event_destroy(cf_rt_event e, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuEventDestroy((CUevent)e));
fail:
    return st;
}

cf_status cf_rt_event_record(cf_rt_event e, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuEventRecord((CUevent)e, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_event_sync(cf_rt_event e, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuEventSynchronize((CUevent)e));
fail:
    return st;
}

cf_status cf_rt_event_elapsed_ms(cf_rt_event start, cf_rt_event end, float *ms, cf_error *err)
{
    cf_status st;
    CF_RT_INIT();
    CF_CU_CHECK(cf_rt_cu.cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
fail:
    return st;
}
