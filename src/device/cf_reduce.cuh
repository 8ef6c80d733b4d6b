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
    return OP == CF_RED_MAX ? cf_fmax(a, b) : cf_fmin(a, b); /* max.NaN / min.NaN */
}

/* ---- level 3: across the CTAs of the cluster, through DSMEM -----------------------------
 * CTAs of a cluster hold the same rows (the scheduler keeps them on one row block) and the
 * same thread ids hold the same rows in every CTA, so a partial needs no reordering: quad
 * leader q of warpgroup w writes its CF_ROWS row partials straight into slot
 * [w][buf][my rank][row] of the peers' buffers with st.async, which also counts the bytes on
 * the receiver's mbarrier.  Two modes:
 *   peer-to-peer (CF_RED_LEADER 0): every CTA sends to every other and combines locally;
 *     C(C-1) messages per row, one round trip.
 *   leader-follower (CF_RED_LEADER 1): followers send to rank 0, which combines and sends
 *     the result back; 2(C-1) messages, two round trips.
 * Buffers and barriers are double-buffered by reduction sequence number (per warpgroup): a
 * peer can be at most one reduction ahead, since it cannot finish reduction j+1 without our
 * partial, which we send only after reading reduction j's buffer.  One buffer set serves
 * every reduction of every stage (O(1) in the number of reductions). */
#if CF_CLUSTER_N > 1
#ifndef CF_RED_LEADER
#define CF_RED_LEADER 0
#endif

__shared__ __align__(16) float cf_red_part[2][2][CF_CLUSTER_N][CF_BM]; /* [wg][buf][rank][row] */
#if CF_RED_LEADER
__shared__ __align__(16) float cf_red_res[2][2][CF_BM];                /* results from rank 0 */
__shared__ __align__(8) unsigned long long cf_red_res_bar[2][2];
#endif
__shared__ __align__(8) unsigned long long cf_red_bar[2][2];
__shared__ unsigned cf_red_seq[2][128];                                  /* per consumer thread */

__device__ __forceinline__ void cf_reduce_init()
{
    for (int w = 0; w < 2; ++w)
        for (int b = 0; b < 2; ++b) {
            cf_mbar_init(cf_smem_u32(&cf_red_bar[w][b]), 1);
#if CF_RED_LEADER
            cf_mbar_init(cf_smem_u32(&cf_red_res_bar[w][b]), 1);
#endif
        }
    for (int i = 0; i < 256; ++i)
        cf_red_seq[i >> 7][i & 127] = 0;
}

__device__ __forceinline__ void cf_st_async(unsigned local_addr, float v, unsigned local_bar, unsigned rank)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                 :: "r"(cf_mapa(local_addr, rank)), "r"(__float_as_uint(v)), "r"(cf_mapa(local_bar, rank))
                 : "memory");
}

/* Waits for the phase with this parity; acquire at cluster scope makes the peers' st.async
 * data visible. */
__device__ __forceinline__ void cf_mbar_wait_cluster(unsigned bar, unsigned parity)
{
    asm volatile("{\n.reg .pred P1;\nCF_CWAIT_%=:\n"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P1, [%0], %1;\n"
                 "@!P1 bra CF_CWAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}

/* Folds the cluster's partials of this thread's rows in rank order (so every
 * CTA computes bit-identical statistics); rank `me`'s own is still in part[]. */
template <int OP> __device__ __forceinline__ void cf_combine_partials(const cf_tile &t, int b, unsigned me,
                                                                     float (&part)[CF_ROWS])
{
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        float v = cf_red_identity<OP>();
#pragma unroll
        for (unsigned q = 0; q < CF_CLUSTER_N; ++q)
            v = cf_red_combine<OP>(v, q == me ? part[s] : cf_red_part[t.wg][b][q][cf_slot_row(t, s)]);
        part[s] = v;
    }
}

template <int OP> __device__ __forceinline__ void cf_cluster_row_combine(const cf_tile &t, float (&part)[CF_ROWS])
{
    const unsigned seq = cf_red_seq[t.wg][t.tid];
    cf_red_seq[t.wg][t.tid] = seq + 1;
    const int b = (int)(seq & 1u);
    const unsigned parity = (seq >> 1) & 1u;
    const unsigned me = (unsigned)t.rank;
    const bool writer = (t.lane & 3) == 0;
    const unsigned bar = cf_smem_u32(&cf_red_bar[t.wg][b]);
#if !CF_RED_LEADER
    if (t.tid == 0)
        cf_mbar_expect_tx(bar, (CF_CLUSTER_N - 1) * CF_BM * 4);
    if (writer) {
#pragma unroll
        for (unsigned q = 1; q < CF_CLUSTER_N; ++q) {
            const unsigned peer = (me + q) % CF_CLUSTER_N; /* stagger: not everyone hits rank 0 first */
#pragma unroll
            for (int s = 0; s < CF_ROWS; ++s)
                cf_st_async(cf_smem_u32(&cf_red_part[t.wg][b][me][cf_slot_row(t, s)]), part[s], bar, peer);
        }
    }
    cf_mbar_wait_cluster(bar, parity);
    cf_combine_partials<OP>(t, b, me, part);
#else
    const unsigned res_bar = cf_smem_u32(&cf_red_res_bar[t.wg][b]);
    if (me != 0) {
        if (t.tid == 0)
            cf_mbar_expect_tx(res_bar, CF_BM * 4);
        if (writer) {
#pragma unroll
            for (int s = 0; s < CF_ROWS; ++s)
                cf_st_async(cf_smem_u32(&cf_red_part[t.wg][b][me][cf_slot_row(t, s)]), part[s], bar, 0);
        }
        cf_mbar_wait_cluster(res_bar, parity);
#pragma unroll
        for (int s = 0; s < CF_ROWS; ++s)
            part[s] = cf_red_res[t.wg][b][cf_slot_row(t, s)];
    } else {
        if (t.tid == 0)
            cf_mbar_expect_tx(bar, (CF_CLUSTER_N - 1) * CF_BM * 4);
        cf_mbar_wait_cluster(bar, parity);
        cf_combine_partials<OP>(t, b, 0, part);
        if (writer) {
#pragma unroll
            for (unsigned q = 1; q < CF_CLUSTER_N; ++q)
#pragma unroll
                for (int s = 0; s < CF_ROWS; ++s)
                    cf_st_async(cf_smem_u32(&cf_red_res[t.wg][b][cf_slot_row(t, s)]), part[s], res_bar, q);
        }
    }
#endif
}
#else
__device__ __forceinline__ void cf_reduce_init()
{
}
#endif

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
