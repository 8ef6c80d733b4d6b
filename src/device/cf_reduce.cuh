/* cf_reduce.cuh — row reductions for Stage-Stream epilogues (included by
 * generated kernels that have reductions, after cf_sm90.cuh).
 *
 * A consumer thread holds CF_ROWS rows of its warpgroup's tile (2 per m64
 * sub-tile); a row's CF_BN columns live in the 4 lanes of one quad.  A
 * reduction is hierarchical, as in the paper:
 *   1. thread-local: the epilogue folds each fragment into part[slot];
 *   2. within the warp: butterfly shuffles over the quad (xor 1, 2); a row
 *      never spans warps or warpgroups here, so no shared-memory step;
 *   3. across the CTAs of the cluster that hold the same rows (CF_CLUSTER_N > 1),
 *      through DSMEM (cf_cluster_row_combine, provided by the kernel header).
 * Every participant combines the partials in the same order, so all CTAs get
 * bit-identical statistics.
 */
#ifndef CF_REDUCE_CUH
#define CF_REDUCE_CUH

#define CF_ROWS ((CF_BM / 64) * 2)  /* rows of the tile held by one thread */

#define CF_RED_SUM 0
#define CF_RED_MAX 1
#define CF_RED_MIN 2

/* Row slot of accumulator register r: slot s covers tile row cf_slot_row(t, s). */
__device__ __forceinline__ int cf_acc_slot(int r)
{
    return (r / CF_ACC_PER_MT) * 2 + ((r % CF_ACC_PER_MT) >> 1 & 1);
}
__device__ __forceinline__ int cf_slot_row(const cf_tile &t, int s)
{
    return 64 * (s >> 1) + 16 * t.warp + (t.lane >> 2) + 8 * (s & 1);
}

template <int OP> __device__ __forceinline__ float cf_red_identity()
{
    return OP == CF_RED_SUM ? 0.0f : OP == CF_RED_MAX ? __int_as_float(0xff800000) : __int_as_float(0x7f800000);
}

/* NaN-propagating like the reference (torch.amax semantics). */
template <int OP> __device__ __forceinline__ float cf_red_combine(float a, float b)
{
    if (OP == CF_RED_SUM)
        return a + b;
    if (a != a || b != b)
        return __int_as_float(0x7fffffff);
    return OP == CF_RED_MAX ? (a > b ? a : b) : (a < b ? a : b);
}

/* Completes the reduction of part[] over the whole row (levels 2 and 3). */
template <int OP> __device__ __forceinline__ void cf_row_reduce(const cf_gemm_args &args, const cf_tile &t,
                                                                float (&part)[CF_ROWS])
{
    (void)args;
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 1));
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 2));
    }
#if CF_CLUSTER_N > 1
    cf_cluster_row_combine<OP>(t, part);
#else
    (void)t;
#endif
}

#endif /* CF_REDUCE_CUH */
