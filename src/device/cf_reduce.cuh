/* cf_reduce.cuh — row reductions for Stage-Stream epilogues (included by
 * generated kernels that have reductions, after cf_sm90.cuh).
 *
 * A consumer thread holds CF_ROWS rows of its warpgroup's tile (2 per m64
 * sub-tile); a row's S::bn columns live in the 4 lanes of one quad.  A
 * reduction is hierarchical, as in the paper:
 *   1. thread-local: the epilogue folds each fragment into part[slot];
 *   2. within the warp: butterfly shuffles over the quad (xor 1, 2); a row
 *      never spans warps or warpgroups here, so no shared-memory step;
 *   3. across the CTAs that hold the same rows (S::row_ctas > 1): through DSMEM inside
 *      their thread-block cluster (cf_cluster_row_combine), or with S::red_global through
 *      L2 between the co-resident CTAs of a row group (cf_global_row_combine).
 * Every participant combines the partials in the same order, so all CTAs get
 * bit-identical statistics.
 */
/* No include guard, as cf_sm90.cuh: once per schedule's namespace. */

#define CF_RED_SUM 0
#define CF_RED_MAX 1
#define CF_RED_MIN 2

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
 *   peer-to-peer (S::red_leader 0): every CTA sends to every other and combines locally;
 *     C(C-1) messages per row, one round trip.
 *   leader-follower (S::red_leader 1): followers send to rank 0, which combines and sends
 *     the result back; 2(C-1) messages, two round trips.
 * Buffers and barriers are double-buffered by reduction sequence number (per warpgroup): a
 * peer can be at most one reduction ahead, since it cannot finish reduction j+1 without our
 * partial, which we send only after reading reduction j's buffer -- in all four lanes of the
 * row's quad, hence the __syncwarp before returning (without it a diverged quad let a peer
 * overwrite a buffer still being read; seen as a fault on the H200).  One buffer set serves
 * every reduction of every stage (O(1) in the number of reductions). */
/* The exchange's shared memory (xchg_cluster; leader-follower also the results), declared in
 * every schedule: a kernel that does not use them does not get them, and S::static_smem (the
 * host's budget) counts only those it uses. */
__shared__ __align__(16) float cf_red_part[2][2][cf_S::cluster_n][cf_S::bm]; /* [wg][buf][rank][row] */
__shared__ __align__(16) float cf_red_res[2][2][cf_S::bm];                /* red_leader: results from rank 0 */
__shared__ __align__(8) unsigned long long cf_red_res_bar[2][2];
__shared__ __align__(8) unsigned long long cf_red_bar[2][2];
__shared__ unsigned cf_red_seq[2][128];                                  /* per consumer thread */

__device__ __forceinline__ void cf_reduce_init()
{
    if constexpr (cf_S::xchg_cluster) {   /* (through L2, or one CTA a row: nothing to set up) */
        for (int w = 0; w < 2; ++w)
            for (int b = 0; b < 2; ++b) {
                cf_mbar_init(cf_smem_u32(&cf_red_bar[w][b]), 1);
                if constexpr (cf_S::red_leader)
                    cf_mbar_init(cf_smem_u32(&cf_red_res_bar[w][b]), 1);
            }
        for (int i = 0; i < 256; ++i)
            cf_red_seq[i >> 7][i & 127] = 0;
    }
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
        for (unsigned q = 0; q < cf_S::cluster_n; ++q)
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
    if constexpr (!cf_S::red_leader) {   /* peer-to-peer */
        if (t.tid == 0)
            cf_mbar_expect_tx(bar, (cf_S::cluster_n - 1) * cf_S::bm * 4);
        if (writer) {
#pragma unroll
            for (unsigned q = 1; q < cf_S::cluster_n; ++q) {
                const unsigned peer = (me + q) % cf_S::cluster_n; /* stagger: not everyone hits rank 0 first */
#pragma unroll
                for (int s = 0; s < CF_ROWS; ++s)
                    cf_st_async(cf_smem_u32(&cf_red_part[t.wg][b][me][cf_slot_row(t, s)]), part[s], bar, peer);
            }
        }
        cf_mbar_wait_cluster(bar, parity);
        cf_combine_partials<OP>(t, b, me, part);
        /* A quad's writer must not post the next reduction (which lets a peer reach the one after
         * and overwrite buffer b) before its quad-mates have read buffer b. */
        __syncwarp();
    } else {   /* leader-follower */
        const unsigned res_bar = cf_smem_u32(&cf_red_res_bar[t.wg][b]);
        if (me != 0) {
            if (t.tid == 0)
                cf_mbar_expect_tx(res_bar, cf_S::bm * 4);
            if (writer) {
#pragma unroll
                for (int s = 0; s < CF_ROWS; ++s)
                    cf_st_async(cf_smem_u32(&cf_red_part[t.wg][b][me][cf_slot_row(t, s)]), part[s], bar, 0);
            }
            cf_mbar_wait_cluster(res_bar, parity);
#pragma unroll
            for (int s = 0; s < CF_ROWS; ++s)
                part[s] = cf_red_res[t.wg][b][cf_slot_row(t, s)];
            __syncwarp();   /* as above: the whole quad has read buffer b */
        } else {
            if (t.tid == 0)
                cf_mbar_expect_tx(bar, (cf_S::cluster_n - 1) * cf_S::bm * 4);
            cf_mbar_wait_cluster(bar, parity);
            cf_combine_partials<OP>(t, b, 0, part);
            if (writer) {
#pragma unroll
                for (unsigned q = 1; q < cf_S::cluster_n; ++q)
#pragma unroll
                    for (int s = 0; s < CF_ROWS; ++s)
                        cf_st_async(cf_smem_u32(&cf_red_res[t.wg][b][cf_slot_row(t, s)]), part[s], res_bar, q);
            }
            __syncwarp();
        }
    }
}

/* ---- level 3 through L2 (S::red_global) ----------------------------------------------------
 * No cluster: the S::row_ctas CTAs of a row group are ordinary CTAs of a cooperative launch
 * (so all are resident and a wait always ends), scheduled on the same row block at the same
 * time.  Each reduction RED of row tile tm has a block of 8-byte slots in args.xchg,
 *     xchg[((tm * S::num_red + RED) * S::row_ctas + rank) * S::bm + row],
 * each written with one store, so a reader sees all of it or none: no fences, flags or atomics
 * on the critical path.  A single partial is posted as (partial, epoch).  A merged exchange's
 * pair (in its first reduction's block) is posted as its two partials, the second rounded to
 * make room for a tag of the epoch in its lowest 8 bits (1..255; a relative error under 2^-16
 * on a sum of squares or of exps, the same in every CTA): half the bytes of two (partial,
 * epoch) words, so a round of loads takes twice the ranks.  Every slot is written once per
 * launch and differs from the last launch's, so none is reset; before a launch the host zeroes
 * (no epoch, no tag) the slots of row tiles the last launch did not write, where a post 255
 * launches old could pass.  Each row's total is folded in rank order by one lane (two for
 * 64-row tiles), the same in every CTA, so all get bit-identical statistics. */

/* ---- merged exchanges (S::red_global; emitted by Ψ's merge rule) ----------------------
 * mean(x) followed by sum((x - mean)^2), and max(z) followed by sum(exp(z - max)), need one
 * exchange, not two: each CTA shifts its tile by the tile's own statistic, then (raw
 * partial of the first reduction, partial of the second) pairs are exchanged once and
 * folded in rank order -- Chan et al.'s pairwise update for the variance (accurate when
 * |mean| >> std), the online-softmax rescaling for the exp sums.  The values the next
 * stage carries on are corrected per row with corr: d + corr, e * corr. */
/* Valid columns of what rank q of the row group posts: its tile, or with S::pair_tiles its two. */
__device__ __forceinline__ int cf_tile_cols(const cf_tile &t, int q)
{
    const int first = t.n0 + ((q - t.rank) * cf_S::group_tiles - (cf_S::pair_tiles ? t.wg : 0)) * cf_S::bn;
    return cf_imax(0, cf_imin(cf_S::group_tiles * cf_S::bn, t.N - first));
}
/* A stable shift for exp: a tile (or row) whose max is -inf shifts by 0. */
__device__ __forceinline__ float cf_shift_of(float m) { return m == __int_as_float(0xff800000) ? 0.0f : m; }

template <int OP> __device__ __forceinline__ void cf_row_reduce_local(float (&part)[CF_ROWS])
{
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 1));
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 2));
    }
}
/* 1 / (this tile's valid columns): its own mean is sum * this, here and in the finisher. */
__device__ __forceinline__ float cf_own_cols_inv(const cf_tile &t)
{
    const int n = cf_imax(0, cf_imin(cf_S::bn, t.N - t.n0));
    return n > 0 ? cf_rcp((float)n) : 0.0f;   /* a count: no subnormal or special value */
}
/* The tile's own mean (raw keeps its sum for the exchange). */
__device__ __forceinline__ void cf_local_mean(const cf_tile &t, float (&stat)[CF_ROWS], float (&raw)[CF_ROWS])
{
    cf_row_reduce_local<CF_RED_SUM>(stat);
    const float inv = cf_own_cols_inv(t);   /* once, not a division per row */
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        raw[s] = stat[s];
        stat[s] = stat[s] * inv;
    }
}
/* The tile's own max, as a shift (raw keeps the max itself). */
__device__ __forceinline__ void cf_local_max(float (&stat)[CF_ROWS], float (&raw)[CF_ROWS])
{
    cf_row_reduce_local<CF_RED_MAX>(stat);
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        raw[s] = stat[s];
        stat[s] = cf_shift_of(stat[s]);
    }
}

/* (Everything from here on is for red_global; templates and inline functions that a schedule
 * does not call compile to nothing.) */
#define CF_MERGE_VAR 8      /* fold kinds besides CF_RED_SUM / MAX / MIN: the merged pairs */
#define CF_MERGE_SOFTMAX 9
/* A running fold over the row's ranks: one partial per rank (a = the combined value), or
 * (raw, part) pairs -- VAR keeps (n, mean, M2), SOFTMAX (max, sum of exp(z - shift(max))). */
struct cf_fold {
    float n, a, b;
};
template <int KIND> __device__ __forceinline__ cf_fold cf_fold_start()
{
    return KIND == CF_MERGE_VAR ? cf_fold{0.0f, 0.0f, 0.0f}
           : KIND == CF_MERGE_SOFTMAX ? cf_fold{0.0f, __int_as_float(0xff800000), 0.0f}
                                      : cf_fold{0.0f, cf_red_identity<KIND>(), 0.0f};
}
/* Adds rank q's words: n_q valid columns, w0 (the partial, or the tile max) and w1 (its exp sum). */
template <int KIND> __device__ __forceinline__ cf_fold cf_fold_add(cf_fold f, float n_q, float w0, float w1)
{
    if (KIND == CF_MERGE_SOFTMAX) {   /* (variance pairs fold in cf_fold_pairs / cf_fold_join) */ /* w0 = max of the tile, w1 = sum of exp(z - shift) */
        const float m = cf_fmax(f.a, w0), sm = cf_shift_of(m);
        const float keep = f.b == 0.0f ? 0.0f : f.b * cf_exp(cf_shift_of(f.a) - sm);  /* 0 * inf is no term */
        const float add = w1 == 0.0f ? 0.0f : w1 * cf_exp(cf_shift_of(w0) - sm);
        f.a = m;
        f.b = keep + add;
    } else {
        f.a = cf_red_combine<KIND>(f.a, w0);
    }
    return f;
}
/* The merged kinds fold a round of a row's pairs (8 per lane) in two passes over registers:
 * the ranks' terms are then independent, where a running fold chains a division or two
 * exps through every rank (measured: that chain, not the L2 round trip, was most of a
 * merged exchange's cost once the partials had arrived).  Rank order is kept, so every
 * CTA still gets bit-identical statistics.  Absent ranks have n 0 and (0, 0), or
 * (-inf, 0) for softmax, and add nothing. */
template <int KIND, int C>
__device__ __forceinline__ cf_fold cf_fold_pairs(const float (&nq)[C], const float (&w0)[C], const float (&w1)[C])
{
    if (KIND == CF_MERGE_VAR) {            /* w0 = sum of the tile, w1 = sum of (x - its mean)^2 */
        float n = 0.0f, sum = 0.0f, m2 = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            n += nq[c];
            sum += w0[c];
        }
        const float mean = n > 0.0f ? sum / n : 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) {      /* Chan et al.: M2 = sum of M2_q + n_q (mean_q - mean)^2 */
            const float d = nq[c] > 0.0f ? __fdividef(w0[c], nq[c]) - mean : 0.0f;
            m2 += w1[c] + nq[c] * d * d;
        }
        return cf_fold{n, mean, m2};
    } else {                               /* w0 = max of the tile, w1 = sum of exp(z - shift) */
        float m = __int_as_float(0xff800000), sum = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c)
            m = cf_fmax(m, w0[c]);
        const float sm = cf_shift_of(m);
#pragma unroll
        for (int c = 0; c < C; ++c)        /* 0 * inf is no term */
            sum += w1[c] == 0.0f ? 0.0f : w1[c] * cf_exp(cf_shift_of(w0[c]) - sm);
        return cf_fold{0.0f, m, sum};
    }
}
/* Joins the fold of another lane (disjoint ranks) into f. */
template <int KIND> __device__ __forceinline__ cf_fold cf_fold_join(cf_fold f, cf_fold o)
{
    if (KIND != CF_MERGE_VAR)
        return KIND == CF_MERGE_SOFTMAX ? cf_fold_add<KIND>(f, 1.0f, o.a, o.b) : cf_fold_add<KIND>(f, 0.0f, o.a, 0.0f);
    if (o.n > 0.0f) {
        const float n = f.n + o.n, delta = o.a - f.a;
        f.a += delta * (o.n / n);
        f.b += o.b + delta * delta * (f.n * o.n / n);
        f.n = n;
    }
    return f;
}

/* Reduction RED's slots of this row tile: a block of 8-byte words per [rank][row] (a merged
 * exchange's pairs in its first reduction's block). */
template <int RED, int WORDS> __device__ __forceinline__ unsigned long long *cf_xchg_slots(const cf_gemm_args &args,
                                                                                        const cf_tile &t)
{
    static_assert(WORDS == 1 || WORDS == 2, "one partial, or a pair");
    return args.xchg + ((size_t)t.tile_m * cf_S::num_red + RED) * cf_S::row_ctas * cf_S::bm;
}
/* A pair's tag of this launch (never 0: zeroed slots are empty; consecutive epochs differ). */
__device__ __forceinline__ unsigned cf_pair_tag(const cf_tile &t) { return t.epoch % 255u + 1u; }
/* Whether a slot (its low and high 4 bytes) holds this launch's post: the epoch, or the tag in
 * the high half's low byte.  The staged check reads both halves although only the high one
 * decides: without the low one's load ptxas allocated LN+softmax's registers differently
 * (different spills), a kernel not measured on the GPU. */
template <int WORDS> __device__ __forceinline__ bool cf_xchg_fresh(const cf_tile &t, unsigned lo, unsigned hi)
{
    (void)lo;
    return WORDS == 2 ? (hi & 0xffu) == cf_pair_tag(t) : hi == t.epoch;
}

/* Ranks a lane gathers: RW rows a warp, LPR lanes a row, PER_LANE ranks a lane, ROUND of them
 * loaded at once.  The loads take an L2 round trip under the mainloop's traffic (1.1-2.6k cycles;
 * docs/performance.md, "Gathers"), so as many as registers allow: 16 words of a 16-CTA row (32 registers;
 * RMSNorm 1.32 -> 1.29 at 4096x2048x512), else 8 (16 words of a 32-CTA row made LN+softmax
 * spill more, 11 % slower); 16 pairs where the tile is parked, 8 beside the accumulator (16
 * there ran LN+softmax 16 % slower).  A staged gather (from shared memory) of more than 16
 * ranks folds them all at once: in rounds ptxas spilled more (8 a round 176 bytes, 16 a round
 * 420, all at once 88). */
template <int WORDS, bool SYNC, bool STAGED = false> struct cf_gather_shape {
    static constexpr int RW = 16 * (cf_S::bm / 64);
    static constexpr int LPR = 32 / RW;
    static constexpr int PER_LANE = (cf_S::row_ctas + LPR - 1) / LPR;
    static constexpr int ROUND = STAGED && PER_LANE > 16 ? PER_LANE : WORDS == 1 ? (PER_LANE <= 16 ? 16 : 8) : SYNC ? 8 : 16;
    static constexpr int CHUNK = PER_LANE < ROUND ? PER_LANE : ROUND;
};

/* A synchronous gather (the tile waits for it) of more ranks than a round holds lands the row's
 * words in this warp's staging boxes with cp.async instead, every rank in one round (LN+softmax
 * at 32 CTAs a row, four synchronous exchanges: 8 % faster; docs/performance.md, "Gathers").  For
 * 128-row tiles (a lane per row) whose warps' boxes hold the row's words, in kernels that finish
 * every tile at once: before a tile parks, the boxes must first wait for the previous tile's
 * store, and its one synchronous exchange (LN+softmax at 16 CTAs) ran no faster. */
template <int WORDS> struct cf_staged_gather {
    static constexpr bool more_rounds = cf_gather_shape<WORDS, true>::PER_LANE > cf_gather_shape<WORDS, true>::ROUND;
    static constexpr bool fits = cf_S::row_ctas * 32 * 8 <= cf_S::warp_slots * 2048;
    static constexpr bool on = !cf_S::late_finish && cf_S::bm == 128 && cf_S::row_ctas <= 32 && more_rounds && fits;
};
/* Rank q's words for this warp's 32 rows (lane order), in the warp's staging boxes. */
__device__ __forceinline__ unsigned cf_staged_rank(const cf_tile &t, int q)
{
    constexpr int BLK = 32 * 8, PER_BOX = 2048 / BLK;
    const int box = q / PER_BOX;
    return cf_box_addr(t, box / (cf_S::bm / 64), box % (cf_S::bm / 64)) + (q % PER_BOX) * BLK;
}
/* Copies every rank's words for this warp's rows into its boxes (16 bytes a copy: each rank's
 * words stay coalesced, [rank][row] as posted; a [row][rank] layout, one lane's own words a copy,
 * ran LN+softmax twice as slow), again for the ranks some lane found not yet posted, until all
 * are.  The boxes are free once this warp's stores that last read them are done. */
template <int WORDS> __device__ __forceinline__ void cf_gather_stage(const cf_tile &t, const unsigned long long *slots)
{
    constexpr int PER_LANE = (cf_S::row_ctas * 16 + 31) / 32;   /* 16-byte copies: 16 per rank */
    if (t.lane == 0) cf_bulk_wait_read<0>();
    __syncwarp();
    unsigned stale = 0xffffffffu >> (32 - cf_S::row_ctas);
    for (;;) {
#pragma unroll
        for (int k = 0; k < PER_LANE; ++k) {
            const int j = t.lane + 32 * k, q = j / 16, ri = 2 * (j % 16);
            if (q < cf_S::row_ctas && ((stale >> q) & 1u))   /* rows ri, ri + 1: adjacent words of one 16-row run */
                cf_cp_async16(cf_staged_rank(t, q) + 8 * ri, slots + q * cf_S::bm + 64 * (ri >> 4) + 16 * t.warp + (ri & 15));
        }
        cf_cp_async_wait_all();
        __syncwarp();   /* every lane's copies visible to the warp */
        unsigned mine = 0;
#pragma unroll
        for (int q = 0; q < cf_S::row_ctas; ++q) {
            const unsigned w = cf_staged_rank(t, q) + 8 * t.lane;
            if (((stale >> q) & 1u) && !cf_xchg_fresh<WORDS>(t, cf_lds_u32(w), cf_lds_u32(w + 4))) {
                CF_TRC_COUNT(t, CF_TRC_SPINS);
                mine |= 1u << q;
            }
        }
        stale = __reduce_or_sync(0xffffffffu, mine);
        if (!stale) break;
        __syncwarp();   /* every lane's reads done before the copies again */
    }
}

/* Posts this CTA's words for its rows (quad leaders hold them after the quad shuffles).  A pair's
 * second partial is rounded to 16 mantissa bits for its tag (+0x80 rounds the magnitude to
 * nearest, an infinity stays one, a NaN is made one that stays NaN without the tag). */
template <int WORDS>
__device__ __forceinline__ void cf_post_rows(const cf_tile &t, unsigned long long *slots, const float (&w0)[CF_ROWS],
                                             const float (&w1)[CF_ROWS])
{
    if ((t.lane & 3) == 0) {
#pragma unroll
        for (int s = 0; s < CF_ROWS; ++s) {
            unsigned long long *p = slots + t.rank * cf_S::bm + cf_slot_row(t, s);
            if (WORDS == 2) {
                const unsigned hi = (w1[s] != w1[s] ? 0x7fffff00u : (__float_as_uint(w1[s]) + 0x80u) & ~0xffu) | cf_pair_tag(t);
                cf_st_relaxed_u64(p, __float_as_uint(w0[s]) | (unsigned long long)hi << 32);
            } else {
                cf_st_relaxed_u64(p, (unsigned long long)t.epoch << 32 | __float_as_uint(w0[s]));
            }
        }
    }
}

/* One rank's slot of a row, coherent at GPU scope: its low and high 4 bytes. */
__device__ __forceinline__ void cf_xchg_load(const unsigned long long *p, unsigned &lo, unsigned &hi)
{
    const unsigned long long v = cf_ld_relaxed_u64(p);
    lo = (unsigned)v;
    hi = (unsigned)(v >> 32);
}

/* Folds the row's ranks once every CTA of the row group has posted: lane l of the warp
 * folds warp row l % RW over ranks l / RW, + LPR, ... in rank order (coalesced: a rank's
 * rows are contiguous), a round of words at a time, and returns the fold of the row held in
 * this thread's slot s in a[s], b[s]. */
template <int KIND, int WORDS, bool SYNC = false>
__device__ __forceinline__ void cf_gather_rows(const cf_tile &t, const unsigned long long *slots, float (&a)[CF_ROWS],
                                               float (&b)[CF_ROWS], float *own = nullptr)
{
    CF_TRC_T0(tr0);
    constexpr bool STAGED = SYNC && cf_staged_gather<WORDS>::on;
    using shape = cf_gather_shape<WORDS, SYNC, STAGED>;
    constexpr int RW = shape::RW, LPR = shape::LPR, PER_LANE = shape::PER_LANE, CHUNK = shape::CHUNK;
    /* Stale ranks re-polled a round at a time in late gathers: 1-1.5 % faster at K = 512 (RMSNorm,
     * softmax, LN).  Not in synchronous ones, which wait for CTAs still in their mainloop; not
     * with four reductions, where it spilled (LN+softmax 3-10 % slower); not where pairs of CTAs
     * multicast X (K >= 4096: the mainloop is L2-bound, and LN ran 1.4 % slower). */
    constexpr bool ROUNDS = !SYNC && cf_S::num_red < 4 && cf_S::cluster_n == 1;
    static_assert(!ROUNDS || CHUNK <= 32, "a round's stale ranks are a 32-bit mask");
    const int ri = t.lane % RW;
    const unsigned long long *mine = slots + 64 * (ri >> 4) + 16 * t.warp + (ri & 15);
    if (STAGED) cf_gather_stage<WORDS>(t, slots);   /* then every word below is this tile's */
    cf_fold f = cf_fold_start<KIND>();
    float own_w0 = 0.0f;   /* this CTA's own first word of the row, if asked for (a finisher's stats) */
#pragma unroll 1
    for (int c0 = 0; c0 < PER_LANE; c0 += CHUNK) {
        const auto rank = [&](int c) { return (c0 + c) * LPR + t.lane / RW; };   /* word c's rank */
        unsigned v0[CHUNK], v1[CHUNK];   /* a slot's low and high halves */
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            const int q = rank(c);
            v0[c] = v1[c] = 0u;
            if (q < cf_S::row_ctas && STAGED) {
                const unsigned w = cf_staged_rank(t, q) + 8 * t.lane;
                v0[c] = cf_lds_u32(w);
                v1[c] = cf_lds_u32(w + 4);
            } else if (cf_S::gather_early && !SYNC && c0 == 0 && c < cf_S::row_ctas && t.gw_src == mine) {
                /* loaded as the mainloop ended (cf_gather_early; 128-row tiles: q == c).  Indexed
                 * by the unrolled c: an index ptxas cannot resolve puts the tile on the stack */
                v0[c] = t.gw[0][c];
                v1[c] = t.gw[1][c];
            } else if (q < cf_S::row_ctas) {
                cf_xchg_load(mine + q * cf_S::bm, v0[c], v1[c]);
            }
        }
        if (ROUNDS) {
            /* CTAs that have not got there yet: a late gather (the row mostly posted long ago)
             * loads every stale rank again, a round at a time, so k late ranks cost the rounds until
             * the last has posted, not k round trips one after another */
            unsigned stale = 0;   /* the ranks this lane has not seen posted yet */
#pragma unroll
            for (int c = 0; c < CHUNK; ++c)
                stale |= (rank(c) < cf_S::row_ctas ? 1u : 0u) << c;
            for (;;) {
#pragma unroll
                for (int c = 0; c < CHUNK; ++c)
                    if (((stale >> c) & 1u) && cf_xchg_fresh<WORDS>(t, v0[c], v1[c]))
                        stale &= ~(1u << c);
                if (!stale)
                    break;
                CF_TRC_COUNT(t, CF_TRC_SPINS);
#pragma unroll
                for (int c = 0; c < CHUNK; ++c)
                    if ((stale >> c) & 1u)
                        cf_xchg_load(mine + rank(c) * cf_S::bm, v0[c], v1[c]);
            }
        }
        float nq[CHUNK], w0[CHUNK], w1[CHUNK];
#pragma unroll
        for (int c = 0; c < CHUNK; ++c) {
            const int q = rank(c);
            if (q < cf_S::row_ctas && !ROUNDS && !STAGED) {
                /* one rank at a time (a 64 ns nanosleep here cost 5-10 %) */
                while (!cf_xchg_fresh<WORDS>(t, v0[c], v1[c])) {
                    CF_TRC_COUNT(t, CF_TRC_SPINS);
                    cf_xchg_load(mine + q * cf_S::bm, v0[c], v1[c]);
                }
            }
            const bool here = q < cf_S::row_ctas;
            if (cf_S::finisher && own && q == t.rank) own_w0 = __uint_as_float(v0[c]);
            if (c == CHUNK - 1 && c0 == 0) CF_TRC_ADD(t, CF_TRC_LOADS, tr0);   /* the first round's loads */
            nq[c] = here ? (float)cf_tile_cols(t, q) : 0.0f;
            w0[c] = here ? __uint_as_float(v0[c]) : KIND == CF_MERGE_SOFTMAX ? __int_as_float(0xff800000) : 0.0f;
            w1[c] = here && WORDS == 2 ? __uint_as_float(v1[c] & ~0xffu) : 0.0f;   /* the tag off */
        }
        if (KIND == CF_MERGE_VAR || KIND == CF_MERGE_SOFTMAX) {
            /* a round of pairs at a time, joined in rank order (every CTA folds identically) */
            const cf_fold r = cf_fold_pairs<KIND, CHUNK>(nq, w0, w1);
            f = c0 == 0 ? r : cf_fold_join<KIND>(f, r);
        } else {
#pragma unroll
            for (int c = 0; c < CHUNK; ++c)
                if (rank(c) < cf_S::row_ctas)
                    f = cf_fold_add<KIND>(f, nq[c], w0[c], w1[c]);
        }
    }
    if (LPR == 2) {   /* 64-row tiles: two lanes per row; the lower lane's fold is the one used */
        const cf_fold o = {__shfl_xor_sync(0xffffffffu, f.n, 16), __shfl_xor_sync(0xffffffffu, f.a, 16),
                           __shfl_xor_sync(0xffffffffu, f.b, 16)};
        f = cf_fold_join<KIND>(f, o);
        if (cf_S::finisher && own) {   /* one of the two lanes loaded this CTA's rank */
            const float other = __shfl_xor_sync(0xffffffffu, own_w0, 16);
            if ((t.rank % LPR) != t.lane / RW) own_w0 = other;
        }
    }
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {   /* slot s is warp row 16 (s >> 1) + 8 (s & 1) + lane / 4 */
        const int src = 16 * (s >> 1) + 8 * (s & 1) + (t.lane >> 2);
        a[s] = __shfl_sync(0xffffffffu, f.a, src);
        if (WORDS == 2)
            b[s] = __shfl_sync(0xffffffffu, f.b, src);
        if (cf_S::finisher && own)
            own[s] = __shfl_sync(0xffffffffu, own_w0, src);
    }
    CF_TRC_ADD(t, CF_TRC_GATHER, tr0);
}

/* Parked tile t's late gather, its loads only: every rank's word for this lane's row (one
 * round: Psi sets gather_early for 128-row tiles of at most 16 CTAs a row), from the late
 * exchange's block, as cf_gather_rows would load them.  That gather re-polls a stale word. */
template <class S> __device__ __forceinline__ void cf_gather_early(const cf_gemm_args &args, cf_tile &t)
{
    static_assert(S::gather_early > 0 && S::bm == 128 && S::row_ctas <= 16 && S::post_first,
                  "gather_early: one round of loads");
    const unsigned long long *mine =
        cf_xchg_slots<S::gather_early - 1, 1>(args, t) + 64 * (t.lane >> 4) + 16 * t.warp + (t.lane & 15);
#pragma unroll
    for (int q = 0; q < S::row_ctas; ++q)
        cf_xchg_load(mine + q * S::bm, t.gw[0][q], t.gw[1][q]);
    t.gw_src = mine;
}

template <int OP, int RED>
__device__ __forceinline__ void cf_global_row_combine(const cf_gemm_args &args, const cf_tile &t, float (&part)[CF_ROWS])
{
    cf_post_rows<1>(t, cf_xchg_slots<RED, 1>(args, t), part, part);
    cf_gather_rows<OP, 1, true>(t, cf_xchg_slots<RED, 1>(args, t), part, part);
}

/* pair_tiles: a CTA's two tiles of a row block (WG0 columns 2 rank, WG1 2 rank + 1) post one word (pair) per
 * row, so a row has half the ranks to gather: WG0 hands its quad-reduced words to WG1 through
 * shared memory and returns false; WG1 folds them with its own (a0, a1: the tile's, which it
 * keeps for its late finish) into (w0, w1) and returns true.  WG1 runs its first part a
 * mainloop after WG0's, so the words wait for it, not it for them. */
template <int KIND>
__device__ __forceinline__ bool cf_pair_merge(const cf_tile &t, const float (&a0)[CF_ROWS], const float (&a1)[CF_ROWS],
                                              float (&w0)[CF_ROWS], float (&w1)[CF_ROWS])
{
    const unsigned full = t.pair_bar, empty = t.pair_bar + 8, words = t.pair_bar + 16;
    const unsigned n = (unsigned)t.parks;   /* this warpgroup's tiles before this one */
    if (t.wg == 0) {
        if (n > 0) cf_mbar_wait(empty, (n - 1) & 1u);   /* WG1 has read the previous tile's */
        if ((t.lane & 3) == 0) {
#pragma unroll
            for (int s = 0; s < CF_ROWS; ++s)
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(words + 8 * cf_slot_row(t, s)), "f"(a0[s]),
                             "f"(a1[s]) : "memory");
        }
        cf_mbar_arrive(full);
        return false;
    }
    cf_mbar_wait(full, n & 1u);
    float o0[CF_ROWS], o1[CF_ROWS];
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s)
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(o0[s]), "=f"(o1[s]) : "r"(words + 8 * cf_slot_row(t, s))
                     : "memory");
    cf_mbar_arrive(empty);
    const float n0 = (float)cf_imax(0, cf_imin(cf_S::bn, t.N - (t.n0 - cf_S::bn)));   /* WG0's tile, to the left */
    const float n1 = (float)cf_imax(0, cf_imin(cf_S::bn, t.N - t.n0));
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        w0[s] = a0[s];
        w1[s] = a1[s];
        if (KIND == CF_MERGE_VAR) {   /* (sum, sum of squares about the tile's mean): Chan et al. */
            if (n1 > 0.0f && n0 > 0.0f) {
                const float d = __fdividef(a0[s], n1) - __fdividef(o0[s], n0);
                w1[s] = o1[s] + a1[s] + d * d * __fdividef(n0 * n1, n0 + n1);
                w0[s] = o0[s] + a0[s];
            } else if (n1 == 0.0f) {
                w0[s] = o0[s];
                w1[s] = o1[s];
            }
        } else if (KIND == CF_MERGE_SOFTMAX) {   /* (max, sum of exp(z - shift(max))) */
            const cf_fold f = cf_fold_add<KIND>(cf_fold{0.0f, o0[s], o1[s]}, 1.0f, a0[s], a1[s]);
            w0[s] = f.a;
            w1[s] = f.b;
        } else {
            w0[s] = cf_red_combine<KIND>(o0[s], a0[s]);
        }
    }
    return true;
}

/* A merged exchange in two halves: post the (raw, part) pairs, then (at once, or after the
 * next mainloop with a late finish) fold the row's pairs and correct this tile's shift. */
template <int KIND, int R1, int R2>
__device__ __forceinline__ void cf_row_merge_post(const cf_gemm_args &args, const cf_tile &t, const float (&raw)[CF_ROWS],
                                                  float (&part)[CF_ROWS])
{
    static_assert(R2 == R1 + 1, "a merged exchange takes two consecutive slot regions");
    cf_row_reduce_local<CF_RED_SUM>(part);
    if constexpr (cf_S::pair_tiles) {
        float w0[CF_ROWS], w1[CF_ROWS];
        if (cf_pair_merge<KIND>(t, raw, part, w0, w1))
            cf_post_rows<2>(t, cf_xchg_slots<R1, 2>(args, t), w0, w1);
    } else {
        cf_post_rows<2>(t, cf_xchg_slots<R1, 2>(args, t), raw, part);
    }
}
template <int KIND, int R1, int R2, bool SYNC = false>
__device__ __forceinline__ void cf_row_merge_finish(const cf_gemm_args &args, const cf_tile &t,
                                                    const float (&raw_kept)[CF_ROWS], float (&stat)[CF_ROWS],
                                                    float (&part)[CF_ROWS], float (&corr)[CF_ROWS])
{
    float a[CF_ROWS], raw[CF_ROWS];
    cf_gather_rows<KIND, 2, SYNC>(t, cf_xchg_slots<R1, 2>(args, t), a, part, raw);
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        if (!cf_S::finisher) {
            raw[s] = raw_kept[s];
        } else if (KIND == CF_MERGE_VAR) {   /* the finisher rebuilds the tile's own statistic from */
            stat[s] = raw[s] * cf_own_cols_inv(t);   /* its posted raw word, as cf_local_mean made it */
        } else {                             /* ... and as cf_local_max made it */
            stat[s] = cf_shift_of(raw[s]);
        }
    }
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        if (KIND == CF_MERGE_VAR)
            corr[s] = stat[s] - a[s];          /* x - mean = (x - tile mean) + (tile mean - mean) */
        else                                   /* e = exp(z - shift(tile max)) * exp(...) */
            corr[s] = raw[s] == __int_as_float(0xff800000) ? 0.0f : cf_exp(raw[s] - cf_shift_of(a[s]));
        stat[s] = a[s];                        /* part: sum of (x - mean)^2, or of exp(z - max) */
    }
}
template <int KIND, int R1, int R2>
__device__ __forceinline__ void cf_row_merge(const cf_gemm_args &args, const cf_tile &t, const float (&raw)[CF_ROWS],
                                             float (&stat)[CF_ROWS], float (&part)[CF_ROWS], float (&corr)[CF_ROWS])
{
    cf_row_merge_post<KIND, R1, R2>(args, t, raw, part);
    cf_row_merge_finish<KIND, R1, R2, true>(args, t, raw, stat, part, corr);
}

/* A single exchange in two halves, for a late finish: quad shuffles and post, then fold. */
template <int OP, int RED> __device__ __forceinline__ void cf_row_post(const cf_gemm_args &args, const cf_tile &t,
                                                                       float (&part)[CF_ROWS])
{
    cf_row_reduce_local<OP>(part);
    if constexpr (cf_S::pair_tiles) {
        float w0[CF_ROWS], w1[CF_ROWS];   /* w1 unused: one word a row */
        if (cf_pair_merge<OP>(t, part, part, w0, w1))
            cf_post_rows<1>(t, cf_xchg_slots<RED, 1>(args, t), w0, w0);
    } else {
        cf_post_rows<1>(t, cf_xchg_slots<RED, 1>(args, t), part, part);
    }
}
template <int OP, int RED> __device__ __forceinline__ void cf_row_finish(const cf_gemm_args &args, const cf_tile &t,
                                                                         float (&part)[CF_ROWS])
{
    cf_gather_rows<OP, 1>(t, cf_xchg_slots<RED, 1>(args, t), part, part);
}

/* Completes reduction number RED of the tile's epilogue over the whole row (levels 2, 3). */
template <int OP, int RED> __device__ __forceinline__ void cf_row_reduce(const cf_gemm_args &args, const cf_tile &t,
                                                                         float (&part)[CF_ROWS])
{
    (void)args;
#pragma unroll
    for (int s = 0; s < CF_ROWS; ++s) {
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 1));
        part[s] = cf_red_combine<OP>(part[s], __shfl_xor_sync(0xffffffffu, part[s], 2));
    }
    if constexpr (cf_S::xchg_l2)
        cf_global_row_combine<OP, RED>(args, t, part);   /* through L2 */
    else if constexpr (cf_S::row_ctas > 1)
        cf_cluster_row_combine<OP>(t, part);             /* through DSMEM */
    else
        (void)t;                                         /* one CTA holds the whole row */
}
