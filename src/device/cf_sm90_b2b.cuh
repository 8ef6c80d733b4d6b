/* cf_sm90_b2b.cuh — the single B2B kernel, O = G(F(X*W1)*W2), phase-1 and phase-2 tiles in one
 * persistent stream per CTA, on one operand ring.
 *
 * The generated file includes it last, after two namespaces, cf_p1 and cf_p2, that each hold a
 * one-schedule part: its cf_sched and cf_epi_params, cf_sm90.cuh, its epilogue.  Phase 1 is X*W1
 * and F, storing S [M, N1]; phase 2 is S*W2 and G, storing O.  Both take the same tiles (bm, bn,
 * pingpong) on the same ring (stages, stage bytes), so the roles of either phase advance one ring
 * position and one pair of turn barriers.
 *
 * The stream.  Phase 1's row groups (P1::row_ctas CTAs; F's row reductions through L2, as in its
 * own kernel) take row blocks b = group, group + groups, ...  A CTA's stream is
 *     phase 1 of b_0, then for j = 1, 2, ...: phase 1 of b_j, phase 2 of b_{j-1}, then phase 2 of the last,
 * phase 1 of a row block being its column groups (rank, rank + row_ctas, ... of N1's tiles) and
 * phase 2 its share of N2's tiles (rank, rank + row_ctas, ...).  The warpgroups take the items in
 * turn whatever their phase, so a phase-2 mainloop (K = N1, no reduction) runs under a phase-1
 * epilogue.  A phase-2 tile needs all of its row block's S: each phase-1 warp raises the row
 * block's counter once its stores have landed, and phase 2's producer (and, for F's per-row
 * values, its consumers) wait for every warp's.  Every wait is on an earlier item of a resident
 * CTA's stream (cooperative launch), so none deadlocks.  The counters go back to zero as the row
 * block's last phase-2 tile ends, ready for the next launch.
 *
 * S goes through L2 (the next round reads it, while it is still there) and is written back to
 * device memory once: the two kernels' S write and read become a write.  Outside this class
 * (late finishes, a finisher, slices of K, clusters, reductions in G) the host runs two kernels;
 * it does so also where F reduces rows, which this kernel runs correctly but slower (a row group
 * of N1's tiles, each finished at once; docs/design.md).
 */

namespace cf_b2b {
using P1 = cf_p1::cf_S;
using P2 = cf_p2::cf_S;

static_assert(P1::pingpong && P2::pingpong && P1::bm == P2::bm && P1::bn == P2::bn,
              "B2B: both phases pingpong with the same tile");
static_assert(P1::stages == P2::stages && P1::stage_bytes == P2::stage_bytes && !P1::dual && !P2::dual,
              "B2B: one ring, the same stages for both phases");
static_assert(!P1::late_finish && !P2::late_finish && !P1::finisher && !P2::finisher,
              "B2B: every tile finishes in its own epilogue (a late finish would wait across phases)");
static_assert(P1::split_k == 1 && P2::split_k == 1 && P1::cluster_n == 1 && P2::cluster_n == 1,
              "B2B: no slices of K, no hardware clusters");
static_assert(P2::num_red == 0, "B2B: G has no row reduction");
static_assert(cf_p1::CF_ACC_REGS == cf_p2::CF_ACC_REGS, "B2B: one accumulator for both phases");

/* Registers: the wider consumer share of the two */
constexpr int reg_consumer = P1::reg_consumer > P2::reg_consumer ? P1::reg_consumer : P2::reg_consumer;
constexpr int reg_producer = P1::reg_producer < P2::reg_producer ? P1::reg_producer : P2::reg_producer;
static_assert((P1::launch_regs - reg_producer) * 128 >= (reg_consumer - P1::launch_regs) * 256,
              "B2B setmaxnreg: the consumers' registers exceed what the producer gives back");

/* Shared memory: the ring, a staging buffer per warpgroup wide enough for either phase, the
 * ring's barriers */
constexpr int stg_stride = P1::stg_bytes > P2::stg_bytes ? P1::stg_bytes : P2::stg_bytes;
constexpr int smem_bytes = 1024 + 2 * 8 * P1::stages + 96 + P1::stages * P1::stage_bytes + 2 * stg_stride;
static_assert(smem_bytes + P1::static_smem + P2::static_smem <= 232448, "B2B: shared memory over the opt-in limit");

struct args_t {
    cf_p1::cf_gemm_args p1;   /* X, W1, S (and F's other outputs) */
    cf_p2::cf_gemm_args p2;   /* S, W2, O */
    unsigned *ready;          /* per row block: [2b] phase-1 warps whose stores have landed,
                                 [2b + 1] phase-2 tiles done with its S */
    int group_ctas;           /* CTAs of a row group: phase 1's row_ctas where F reduces rows, else the
                                 host's choice (a grid of whole groups fills the GPU) */
};

/* A CTA's items.  Round j (0 .. rounds + lag - 1): phase 1 of the group's row block j (its column
 * tiles rank, rank + c, ...; none past the last block), then phase 2 of row block j - lag: a row
 * block's S has a round of the other CTAs' work to land before its phase-2 tiles wait for it.  A row block's N2 tiles k are dealt over
 * the group's CTAs in one sequence through the row blocks (tile k of block j to rank (j * tiles_n2
 * + k) % c), so every CTA gets the same share also where N2 has fewer tiles than the group has CTAs. */
struct stream {
    int cid, groups, rank, c;   /* row group, row groups, rank in it, its CTAs */
    int rounds;                 /* row blocks of this group */
    int n1;                     /* phase-1 tiles of a row block this CTA takes */
    int tiles_n2;               /* N2's column tiles */
    static constexpr int lag = 2;

    __device__ int first2(int j) const {   /* this CTA's first phase-2 tile of row block j */
        const int k = (rank - j * tiles_n2) % c;
        return k < 0 ? k + c : k;
    }
    template <class F> __device__ __forceinline__ void each(F &&f) const {
#pragma unroll 1
        for (int j = 0; j < rounds + lag; ++j) {
#pragma unroll 1
            for (int k = 0; k < (j < rounds ? n1 : 0); ++k)
                f(false, cid + j * groups, k * c + rank);
            if (j >= lag) {
#pragma unroll 1
                for (int k = first2(j - lag); k < tiles_n2; k += c)
                    f(true, cid + (j - lag) * groups, k);
            }
        }
    }
    __device__ int length() const {
        int n = rounds * n1;
        for (int j = 0; j < rounds; ++j) {
            const int k = first2(j);
            n += k < tiles_n2 ? (tiles_n2 - 1 - k) / c + 1 : 0;
        }
        return n;
    }
};

/* The ring layout both phases' roles see (their cf_cta's shared-memory part). */
template <class Cta> __device__ __forceinline__ void place(Cta &c, unsigned base) {
    c.base = base;
    c.stg0 = base + P1::stages * P1::stage_bytes;
    c.bar_full = c.stg0 + 2 * stg_stride;
    c.bar_empty = c.bar_full + 8 * P1::stages;
    c.bar_fin = c.bar_pair = 0;
}

struct ctx {
    cf_p1::cf_cta c1;
    cf_p2::cf_cta c2;
    stream st;
    unsigned *ready;
    int target1;   /* phase-1 warps of a row block: 4 a tile */
};

__device__ __forceinline__ ctx make(const args_t &a) {
    extern __shared__ unsigned char cf_smem_raw[];
    const unsigned base = (cf_p1::cf_smem_u32(cf_smem_raw) + 1023u) & ~1023u;
    ctx x;
    x.c1 = cf_p1::cf_cta_of<P1>(a.p1);
    x.c2 = cf_p2::cf_cta_of<P2>(a.p2);
    place(x.c1, base);
    place(x.c2, base);
    stream &s = x.st;
    s.c = a.group_ctas;
    s.cid = (int)blockIdx.x / s.c;
    s.groups = (int)gridDim.x / s.c;
    s.rank = (int)blockIdx.x % s.c;
    s.rounds = x.c1.tiles_m > s.cid ? (x.c1.tiles_m - s.cid + s.groups - 1) / s.groups : 0;
    s.n1 = ((x.c1.N + P1::bn - 1) / P1::bn + s.c - 1) / s.c;   /* tiles past N1 run, their stores clipped */
    s.tiles_n2 = (x.c2.N + P2::bn - 1) / P2::bn;
    /* the turn barriers and the last tile's hand-over count the whole stream */
    x.c1.my_n = x.c2.my_n = s.length();
    x.ready = a.ready;
    x.target1 = 4 * s.n1 * s.c;
    return x;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void nap() { asm volatile("nanosleep.u32 64;"); }
__device__ __forceinline__ void fence_proxy_async_global() {
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
/* Until row block b's S has landed, every phase-1 warp's stores: then TMA (the async proxy)
 * and this thread's loads see it. */
__device__ __forceinline__ void wait_s(const ctx &x, int b) {
    while (ld_acquire(&x.ready[2 * b]) < (unsigned)x.target1)
        nap();
    fence_proxy_async_global();
}
/* A phase-1 warp after its tile's epilogue: its stores (TMA, lane 0's bulk groups, and the
 * lanes' plain stores of per-row values) have landed, then the row block counts it. */
__device__ __forceinline__ void post_s(const ctx &x, int b, int lane) {
    __syncwarp();
    if (lane == 0) {
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        fence_proxy_async_global();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(&x.ready[2 * b]) : "memory");
    }
}
/* A phase-2 tile done with row block b's S: the block's last resets both counters. */
__device__ __forceinline__ void done_s(const ctx &x, int b, int tid) {
    if (tid == 0 && atomicAdd(&x.ready[2 * b + 1], 1u) == (unsigned)x.st.tiles_n2 - 1) {
        x.ready[2 * b] = 0;
        x.ready[2 * b + 1] = 0;
    }
}

/* ---------------- producer: both phases' stages, in stream order ---------------- */
__device__ __forceinline__ void producer(const args_t &a, const ctx &x, int tid) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(reg_producer));
    if constexpr (P1::xchg_l2)
        if (tid == 32) cf_p1::cf_count_launch(a.p1);
    if (tid == 0) {
        cf_p1::cf_prefetch_tma(&a.p1.tma_a);
        cf_p1::cf_prefetch_tma(&a.p1.tma_b[0]);
        cf_p2::cf_prefetch_tma(&a.p2.tma_a);
        cf_p2::cf_prefetch_tma(&a.p2.tma_b[0]);
        int stage = 0;
        unsigned phase = 0;
        x.st.each([&](bool second, int tm, int tn) {
            if (second) {
                wait_s(x, tm);
                cf_p2::cf_produce_tile<P2>(a.p2, x.c2, tm, tn, stage, phase);
            } else {
                cf_p1::cf_produce_tile<P1>(a.p1, x.c1, tm, tn, stage, phase);
            }
        });
    }
    __syncwarp();
}

/* ---------------- consumers: the items of their turn, either phase ---------------- */
__device__ __forceinline__ void consumer(const args_t &a, const ctx &x, int tid, int wg) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(reg_consumer));
    const int w = wg - 1;
    float acc[cf_p1::CF_ACC_REGS];
    cf_p1::cf_consumer_state<P1> cs1;
    cf_p2::cf_consumer_state<P2> cs2;
    cf_p1::cf_tile t1 = cf_p1::cf_wg_tile(a.p1, x.c1.M, x.c1.N, tid, x.c1.rank, CF_BAR_EPI0 + w);
    cf_p2::cf_tile t2 = cf_p2::cf_wg_tile(a.p2, x.c2.M, x.c2.N, tid, x.st.rank, CF_BAR_EPI0 + w);
    t1.wg = t2.wg = w;
    t1.stg = t2.stg = x.c1.stg0 + w * stg_stride;
    t1.ring = t2.ring = x.c1.base;
    t1.ring_full = t2.ring_full = x.c1.bar_full;
    t1.ring_empty = t2.ring_empty = x.c1.bar_empty;
    cs1.parked = t1, cs1.parked_ok = false;
    cs2.parked = t2, cs2.parked_ok = false;
    int s = 0, pos = 0;   /* item s of the stream; the ring position of its first stage */
    x.st.each([&](bool second, int tm, int tn) {
        if ((s & 1) == w) {
            if (second) {
                /* G may read F's per-row values: this warpgroup's loads see them */
                while (ld_acquire(&x.ready[2 * tm]) < (unsigned)x.target1)
                    nap();
                cf_p2::cf_consume_tile<P2>(a.p2, x.c2, t2, cs2, acc, acc, w, s, 2, 0, tm, tn, pos);
                /* the next tile may be phase 1's, whose staging slots differ: its stores read
                 * the buffer first; and every thread is past its wait before the count */
                if (t2.lane == 0) cf_p2::cf_bulk_wait_read<0>();
                cf_p1::cf_named_bar_sync(t2.bar_id, 128);
                done_s(x, tm, t2.tid);
            } else {
                cf_p1::cf_consume_tile<P1>(a.p1, x.c1, t1, cs1, acc, acc, w, s, 2, 0, tm, tn, pos);
                post_s(x, tm, t1.lane);
            }
        }
        ++s;
        pos += second ? x.c2.nkb + P2::tin_stages : x.c1.nkb + P1::tin_stages;
    });
    if (t1.lane == 0) cf_p1::cf_bulk_wait_read<0>();   /* the staging buffer is read before the CTA exits */
}

__device__ __forceinline__ void run(const args_t &a) {
    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const ctx x = make(a);
    if (tid == 0) {
        cf_p1::cf_init_barriers<P1>(x.c1);   /* the ring's, F's reductions', the launch epoch's */
    }
    __syncthreads();
    if (wg == 0)
        producer(a, x, tid);
    else
        consumer(a, x, tid, wg);
}
}  // namespace cf_b2b

/* What the host reads back: each phase's configuration, then the kernel's shared memory. */
extern "C" __device__ const int cf_kernel_info[23] = CF_KERNEL_INFO(cf_b2b::P1);
extern "C" __device__ const int cf_kernel_info_2[23] = CF_KERNEL_INFO(cf_b2b::P2);
extern "C" __device__ const int cf_b2b_info[2] = {cf_b2b::smem_bytes, cf_b2b::P1::num_threads};

extern "C" __global__ void __launch_bounds__(384, 1) cf_b2b_kernel(const __grid_constant__ cf_b2b::args_t args) {
    cf_b2b::run(args);
}
