/* cf_sm90_kernel.cuh — what a module holds once: the kernel of a one-schedule translation unit,
 * the configuration the host reads back (cf_kernel_info, CF_INFO_* in cf_sm90.cuh) and, in a
 * CF_TRACE build, the trace buffer.  The generated file includes it last, after its epilogue;
 * cf_sm90.cuh itself may be included once per schedule (inside a namespace each), this only once. */

#ifdef CF_TRACE
/* the buffer cf_sm90.cuh's cf_trace_at writes and the host finds by name */
extern "C" { __device__ long long cf_trace[CF_TRACE_CTAS * CF_TRACE_ROLES * (CF_TRACE_TILES + 1) * CF_TRACE_EV]; }
#endif

extern "C" __device__ const int cf_kernel_info[23] = CF_KERNEL_INFO(cf_S);

/* The kernel: this translation unit's schedule. */
extern "C" __global__ void __launch_bounds__(cf_S::num_threads, 1)
cf_gemm_kernel(const __grid_constant__ cf_gemm_args args) {
    cf_cta_run<cf_S>(args);
}
