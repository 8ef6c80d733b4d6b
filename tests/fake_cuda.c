/* fake_cuda.c — a stand-in libcuda.so.1 for the host side of `run` and `bench`
 * on a machine without a GPU (test_cli puts its directory on LD_LIBRARY_PATH).
 * Device memory is host memory up to 1 GiB per allocation (larger ones fail as
 * out of memory, as a real card's would); copies and memsets are real, so ASan
 * sees a host buffer shorter than the bytes copied; launches do nothing. */
#include <cuda.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default"))) CUresult CUDAAPI

static int handle;   /* the address every module, function, stream and event is */

/* Calls counted for the tests (test_kernel reads them through dlsym), and the capture status
 * cuStreamIsCapturing reports. */
struct fake_cuda_counts {
    int encodes, allocs, frees, syncs, memsets_async, launches, copies_2d;
    size_t memset_async_bytes;
    unsigned char params[512];   /* the first 512 bytes of the last launch's parameter block */
};
static struct fake_cuda_counts counts;
static int capturing;
__attribute__((visibility("default"))) struct fake_cuda_counts *fake_cuda_counts(void) { return &counts; }
__attribute__((visibility("default"))) void fake_cuda_set_capturing(int on) { capturing = on; }

API cuGetErrorName(CUresult r, const char **s) { *s = r ? "CUDA_ERROR_FAKE" : "CUDA_SUCCESS"; return CUDA_SUCCESS; }
API cuGetErrorString(CUresult r, const char **s) { *s = r ? "fake driver error" : "no error"; return CUDA_SUCCESS; }
API cuInit(unsigned f) { (void)f; return CUDA_SUCCESS; }
API cuDriverGetVersion(int *v) { *v = 12080; return CUDA_SUCCESS; }
API cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
API cuDeviceGet(CUdevice *d, int o) { *d = o; return CUDA_SUCCESS; }
API cuDeviceGetName(char *s, int n, CUdevice d) { (void)d; strncpy(s, "fake H200", (size_t)n); return CUDA_SUCCESS; }
API cuDeviceTotalMem(size_t *b, CUdevice d) { (void)d; *b = (size_t)141 << 30; return CUDA_SUCCESS; }
API cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&handle; return CUDA_SUCCESS; }
API cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
API cuCtxSynchronize(void) { counts.syncs++; return CUDA_SUCCESS; }

API cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9
       : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
       : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? 132
       : a == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE            ? 50 << 20
       : a == CU_DEVICE_ATTRIBUTE_CLOCK_RATE               ? 1980000
                                                           : 232448;   /* shared memory limits */
    return CUDA_SUCCESS;
}

API cuModuleLoadData(CUmodule *m, const void *img) { (void)img; *m = (CUmodule)&handle; return CUDA_SUCCESS; }
API cuModuleUnload(CUmodule m) { (void)m; return CUDA_SUCCESS; }
API cuModuleGetFunction(CUfunction *f, CUmodule m, const char *n) { (void)m, (void)n; *f = (CUfunction)&handle; return CUDA_SUCCESS; }
API cuModuleGetGlobal(CUdeviceptr *p, size_t *b, CUmodule m, const char *n) { (void)p, (void)b, (void)m, (void)n; return CUDA_ERROR_NOT_FOUND; }
API cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
    (void)f;
    *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : a == CU_FUNC_ATTRIBUTE_NUM_REGS ? 128
       : a == CU_FUNC_ATTRIBUTE_PTX_VERSION || a == CU_FUNC_ATTRIBUTE_BINARY_VERSION ? 90 : 0;
    return CUDA_SUCCESS;
}
API cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) { (void)f, (void)a, (void)v; return CUDA_SUCCESS; }
API cuOccupancyMaxActiveClusters(int *n, CUfunction f, const CUlaunchConfig *c) { (void)f, (void)c; *n = 132; return CUDA_SUCCESS; }
API cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **x) { (void)c, (void)f, (void)x; counts.launches++; memcpy(counts.params, p[0], sizeof counts.params); return CUDA_SUCCESS; }

API cuMemAlloc(CUdeviceptr *p, size_t n)
{
    void *m = n <= ((size_t)1 << 30) ? malloc(n ? n : 1) : NULL;
    counts.allocs += m != NULL;
    *p = (CUdeviceptr)(uintptr_t)m;
    return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
API cuMemFree(CUdeviceptr p) { counts.frees++; free((void *)(uintptr_t)p); return CUDA_SUCCESS; }
API cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)(uintptr_t)d, s, n); return CUDA_SUCCESS; }
API cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) { memcpy(d, (const void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
API cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n); return CUDA_SUCCESS; }
API cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream s)
{
    (void)s;
    counts.copies_2d++;
    for (size_t r = 0; r < c->Height; r++)
        memmove((char *)(uintptr_t)c->dstDevice + r * c->dstPitch,
                (const char *)(uintptr_t)c->srcDevice + r * c->srcPitch, c->WidthInBytes);
    return CUDA_SUCCESS;
}
API cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)(uintptr_t)d, v, n); return CUDA_SUCCESS; }
API cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { (void)s; counts.memsets_async++, counts.memset_async_bytes += n; return cuMemsetD8(d, v, n); }
API cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy((char *)(uintptr_t)d + 2 * i, &v, 2);
    return CUDA_SUCCESS;
}
API cuMemsetD32(CUdeviceptr d, unsigned v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy((char *)(uintptr_t)d + 4 * i, &v, 4);
    return CUDA_SUCCESS;
}
API cuStreamCreate(CUstream *s, unsigned f) { (void)f; *s = (CUstream)&handle; return CUDA_SUCCESS; }
API cuStreamDestroy(CUstream s) { (void)s; return CUDA_SUCCESS; }
API cuStreamSynchronize(CUstream s) { (void)s; return CUDA_SUCCESS; }
API cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *c)
{
    (void)s;
    *c = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
API cuEventCreate(CUevent *e, unsigned f) { (void)f; *e = (CUevent)&handle; return CUDA_SUCCESS; }
API cuEventDestroy(CUevent e) { (void)e; return CUDA_SUCCESS; }
API cuEventRecord(CUevent e, CUstream s) { (void)e, (void)s; return CUDA_SUCCESS; }
API cuEventSynchronize(CUevent e) { (void)e; return CUDA_SUCCESS; }
API cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a, (void)b; *ms = 1.0f; return CUDA_SUCCESS; }
API cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t r, void *g, const cuuint64_t *d,
                           const cuuint64_t *s, const cuuint32_t *b, const cuuint32_t *e, CUtensorMapInterleave i,
                           CUtensorMapSwizzle w, CUtensorMapL2promotion l, CUtensorMapFloatOOBfill o)
{
    (void)t, (void)r, (void)d, (void)s, (void)b, (void)e, (void)i, (void)w, (void)l, (void)o;
    counts.encodes++;
    memset(m, 0, sizeof *m);
    memcpy(m, &g, sizeof g);   /* the address, so a test can tell descriptors apart */
    return CUDA_SUCCESS;
}
/* NVRTC opens libcuda.so.1 too and asks for this; no export tables here */
API cuGetExportTable(const void **t, const CUuuid *id) { (void)id; *t = NULL; return CUDA_ERROR_NOT_SUPPORTED; }
