// What a launch costs by its attributes: an empty kernel over 132 CTAs, event-timed behind an L2
// flush as `comfuse bench` times (median of 50), with and without 227 KB of dynamic shared
// memory, 128 or 384 threads, clusters of 1, 2, 4, and the cooperative attribute the fused
// kernels take when CTAs wait for each other (split K, row exchanges through L2).
//   nvcc -arch=sm_90a -O2 -o build/launch bench/launch.cu && build/launch        (GPU machine)
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void empty_kernel(int *p)
{
    extern __shared__ int s[];
    if (p && threadIdx.x == 0 && blockIdx.x == 100000)   // never: keeps the shared memory declared
        p[0] = s[0];
}

static float median_us(int smem, int threads, int cluster, bool coop, int *flush, size_t flush_bytes)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    for (int it = 0; it < 60; it++) {
        cudaMemsetAsync(flush, it, flush_bytes);
        cudaLaunchAttribute a[2];
        int n = 0;
        if (cluster > 1) {
            a[n].id = cudaLaunchAttributeClusterDimension;
            a[n++].val.clusterDim = {(unsigned)cluster, 1, 1};
        }
        if (coop) {
            a[n].id = cudaLaunchAttributeCooperative;
            a[n++].val.cooperative = 1;
        }
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3(132 / cluster * cluster);
        c.blockDim = dim3(threads);
        c.dynamicSmemBytes = smem;
        c.attrs = a;
        c.numAttrs = n;
        cudaEventRecord(e0);
        cudaError_t err = cudaLaunchKernelEx(&c, empty_kernel, (int *)nullptr);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        if (err != cudaSuccess) {
            printf("launch failed: %s\n", cudaGetErrorString(err));
            return -1;
        }
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (it >= 10)
            t.push_back(ms * 1e3f);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main()
{
    const size_t flush_bytes = 256u << 20;
    int *flush;
    if (cudaMalloc(&flush, flush_bytes) != cudaSuccess)
        return 1;
    cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
    cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    printf("empty kernel, 132 CTAs, event-timed after a 256 MB flush (median of 50, us)\n");
    printf("%8s %7s %7s %12s %12s\n", "smem", "threads", "cluster", "plain", "cooperative");
    for (int smem : {0, 227 * 1024})
        for (int threads : {128, 384})
            for (int cluster : {1, 2, 4})
                printf("%8d %7d %7d %12.2f %12.2f\n", smem, threads, cluster,
                       median_us(smem, threads, cluster, false, flush, flush_bytes),
                       median_us(smem, threads, cluster, true, flush, flush_bytes));
    return 0;
}
