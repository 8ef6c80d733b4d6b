/* cf_sm90_kernel.cuh — what a module holds once: the kernel of a one-schedule translation unit,
 * the configuration the host reads back (cf_kernel_info, CF_INFO_* in cf_sm90.cuh) and, in a
 * CF_TRACE build, the trace buffer.  The generated file includes it last, after its epilogue;
 * cf_sm90.cuh itself may be included once per schedule (inside a namespace each), this only once. */

#ifdef CF_TRACE
/* the buffer cf_sm90.cuh's cf_trace_at writes and the host finds by name */
extern "C" { __device__ long long cf_trace[CF_TRACE_CTAS * CF_TRACE_ROLES * (CF_TRACE_TILES + 1) * CF_TRACE_EV]; }
#endif

extern "C" __device__ const int cf_kernel_info[23] = {
    CF_SM90_VERSION, cf_S::smem_bytes, cf_S::bm, cf_S::bn, cf_S::tile_m, cf_S::stages, cf_S::cluster_n, cf_S::b_nk,
    cf_S::in_f16, cf_S::num_out, cf_S::pingpong, cf_S::num_threads, cf_S::stg_chunks, cf_S::group_m, cf_S::a_box_rows,
    cf_S::b_nk ? cf_S::bn : 64, cf_S::row_ctas, cf_S::red_global, cf_S::num_red, cf_S::late_finish, cf_S::out_box_rows, cf_S::tin_args,
    cf_S::split_k};

/* The kernel: this translation unit's schedule. */
extern "C" __global__ void __launch_bounds__(cf_S::num_threads, 1)
cf_gemm_kernel(const __grid_constant__ cf_gemm_args args) {
    cf_cta_run<cf_S>(args);
}
