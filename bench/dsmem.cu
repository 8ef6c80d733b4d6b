// What moving f32 partials between the CTAs of a cluster costs: the bound an on-chip B2B kernel's
// O reduction (each CTA sends (c-1)/c of its 128 x N2 f32 partial to the chunk's owner) runs into.
// Every SM sends `rounds` chunks of `chunk` bytes to a peer ((rank + 1 + round) % c) and receives as
// many, all clusters at once; the receiver adds each chunk into an accumulator (as the reduction
// must) or not.  Two ways to send: one thread's cp.async.bulk shared::cta -> shared::cluster, and
// 256 threads' st.shared::cluster.v4.  Prints GB/s per SM and bytes per clock at 1.755 GHz.
//   nvcc -arch=sm_90a -O2 -o build/dsmem bench/dsmem.cu && build/dsmem        (GPU machine)
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#define SLOTS 4
#define THREADS 256

__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ unsigned mapa(unsigned a, unsigned r) {
    unsigned d; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(r)); return d;
}
__device__ __forceinline__ unsigned ctarank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred P1;\nW_%=:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@!P1 bra W_%=;\n}\n"
                 :: "r"(bar), "r"(parity) : "memory");
}

// mode 0: bulk copy; mode 1: st.shared::cluster.v4 by every thread then one remote arrive per warp.
// add: the receiver adds the chunk into a local f32 accumulator before the slot is reused.
template <int MODE>
__global__ void __launch_bounds__(THREADS) xfer(int chunk, int rounds, int add, float *sink)
{
    extern __shared__ __align__(128) unsigned char sm[];
    float *slot = (float *)sm;                                   // SLOTS receive buffers
    float *src = (float *)(sm + SLOTS * chunk);                  // what this CTA sends
    float *acc = (float *)(sm + (SLOTS + 1) * chunk);            // the owner's sum
    __shared__ __align__(8) unsigned long long bar[SLOTS];
    unsigned nct; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nct));
    const unsigned me = ctarank();
    const int n4 = chunk / 16;
    for (int i = threadIdx.x; i < chunk / 4; i += THREADS) { src[i] = (float)i; acc[i] = 0.0f; }
    if (threadIdx.x == 0)
        for (int s = 0; s < SLOTS; s++)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(&bar[s])), "r"(MODE == 0 ? 1 : 1 + THREADS / 32));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    cluster_arrive(); cluster_wait();
    // A group: SLOTS chunks in flight to SLOTS peers, then every receive waited for and added,
    // then a cluster barrier before the slots are written again.
    for (int g = 0; g < rounds / SLOTS; g++) {
        const unsigned par = g & 1;
        if (threadIdx.x == 0)
            for (int s = 0; s < SLOTS; s++)
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             :: "r"(smem_u32(&bar[s])), "r"(MODE == 0 ? chunk : 0) : "memory");
        for (int s = 0; s < SLOTS; s++) {
            const unsigned peer = (me + 1 + (s % (nct - 1))) % nct;
            const unsigned dst = mapa(smem_u32(slot) + s * chunk, peer);
            const unsigned rbar = mapa(smem_u32(&bar[s]), peer);
            if (MODE == 0) {
                if (threadIdx.x == 0)
                    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                                 :: "r"(dst), "r"(smem_u32(src)), "r"(chunk), "r"(rbar) : "memory");
            } else {
                for (int i = threadIdx.x; i < n4; i += THREADS) {
                    const float4 v = ((const float4 *)src)[i];
                    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};"
                                 :: "r"(dst + 16 * i), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w) : "memory");
                }
                __syncwarp();
                if (threadIdx.x % 32 == 0)
                    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(rbar) : "memory");
            }
        }
        for (int s = 0; s < SLOTS; s++) {
            mbar_wait(smem_u32(&bar[s]), par);
            if (add)
                for (int i = threadIdx.x; i < n4; i += THREADS) {
                    float4 a = ((float4 *)acc)[i];
                    const float4 v = ((const float4 *)(slot + s * chunk / 4))[i];
                    a.x += v.x; a.y += v.y; a.z += v.z; a.w += v.w;
                    ((float4 *)acc)[i] = a;
                }
        }
        cluster_arrive(); cluster_wait();                        // every slot read: senders may reuse them
    }
    if (threadIdx.x == 0 && acc[0] == 12345.0f) sink[blockIdx.x] = acc[1];
}

int main()
{
    int sms = 0, clk_khz = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0);
    float *sink;
    cudaMalloc(&sink, 4096 * sizeof(float));
    printf("# DSMEM chunk transfer, every SM sending and receiving; %d SMs, %d MHz\n", sms, clk_khz / 1000);
    printf("%-6s %-8s %-4s %-8s %-10s %-10s %-8s\n", "mode", "cluster", "add", "chunk", "us", "GB/s/SM", "B/clk");
    const int rounds = 256;
    for (int mode = 0; mode < 2; mode++)
        for (int cl : {2, 8, 16})
            for (int add = 0; add < 2; add++)
                for (int chunk : {16384, 32768}) {
                    const int smem = (SLOTS + 2) * chunk;
                    auto k = mode == 0 ? xfer<0> : xfer<1>;
                    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
                    cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
                    cudaLaunchAttribute a[1];
                    a[0].id = cudaLaunchAttributeClusterDimension;
                    a[0].val.clusterDim = {(unsigned)cl, 1, 1};
                    cudaLaunchConfig_t c = {};
                    c.blockDim = dim3(THREADS);
                    c.dynamicSmemBytes = smem;
                    c.attrs = a;
                    c.numAttrs = 1;
                    int nclusters = 0;
                    c.gridDim = dim3(cl);
                    if (cudaOccupancyMaxActiveClusters(&nclusters, k, &c) != cudaSuccess || nclusters == 0) {
                        printf("%-6d %-8d %-4d %-8d cannot launch (%s)\n", mode, cl, add, chunk, cudaGetErrorString(cudaGetLastError()));
                        continue;
                    }
                    c.gridDim = dim3(nclusters * cl);
                    cudaEvent_t e0, e1;
                    cudaEventCreate(&e0);
                    cudaEventCreate(&e1);
                    std::vector<float> t;
                    for (int it = 0; it < 12; it++) {
                        cudaEventRecord(e0);
                        cudaLaunchKernelEx(&c, k, chunk, rounds, add, sink);
                        cudaEventRecord(e1);
                        cudaEventSynchronize(e1);
                        float ms = 0;
                        cudaEventElapsedTime(&ms, e0, e1);
                        if (it >= 2) t.push_back(ms * 1000.0f);
                    }
                    cudaError_t e = cudaGetLastError();
                    if (e != cudaSuccess) { printf("error %s\n", cudaGetErrorString(e)); return 1; }
                    std::sort(t.begin(), t.end());
                    const double us = t[t.size() / 2];
                    const double per_sm = (double)chunk * rounds / (us * 1e-6) / 1e9;   // each CTA sends this
                    printf("%-6d %-8d %-4d %-8d %-10.1f %-10.1f %-8.1f  (%d CTAs)\n", mode, cl, add, chunk, us, per_sm,
                           per_sm * 1e9 / (clk_khz * 1e3), nclusters * cl);
                }
    return 0;
}
