/* cf_sm90.cuh — comfuse's own persistent, warp-specialised GEMM for sm_90a (Hopper).
 *
 * Header-only; its one #include is cf_trace.h beside it (the trace layout the host reads too).
 * Compiles under NVRTC with no include path and no CUDA headers: bf16/f16 are plain
 * `unsigned short`, conversions are inline PTX.
 * Build target: sm_90a (nvcc -gencode=arch=compute_90a,code=sm_90a, NVRTC --gpu-architecture=sm_90a).
 *
 * ===================================================================================
 * HOW A GENERATED TRANSLATION UNIT USES THIS HEADER
 * ===================================================================================
 *     struct cf_sched {                                   // generated: the plan's schedule
 *         static constexpr int bm = 128;                  // rows of ONE consumer warpgroup's tile (64, 128)
 *         static constexpr int bn = 128;                  // columns of the tile (64, 128, 192, 256)
 *         static constexpr int stages = 5;                // smem ring depth
 *         static constexpr int cluster_n = 1;             // CTAs per cluster along N (1,2,4,8); launch with it
 *         static constexpr int row_ctas = 1;              // CTAs per row block (a multiple of cluster_n)
 *         static constexpr int split_k = 1;               // slices of K, a copy of the grid each
 *         static constexpr bool pingpong = true;          // false: cooperative
 *         static constexpr bool b_nk = false;             // W is [N,K] row-major (nn.Linear), else [K,N]
 *         static constexpr bool dual = false;             // two GEMMs over one X: tma_b[1] and acc2
 *         ...                                             // every member: see cf_schedule below
 *     };
 *     struct cf_epi_params { const float *bias; };       // generated, MUST come before the include
 *     #include "cf_sm90.cuh"
 *     __device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t,
 *                                                 float (&acc)[CF_ACC_REGS]) { ... }
 *     #include "cf_sm90_kernel.cuh"                      // the kernel and cf_kernel_info
 *
 * i.e. the brief's fallback form: cf_sched and cf_epi_params are defined BEFORE the include
 * (cf_gemm_args embeds cf_epi_params by value), this header forward-declares cf_epilogue and
 * defines the roles, the generated file defines cf_epilogue AFTER the include, and
 * cf_sm90_kernel.cuh closes the file with the kernel.  No CF_* macro configures it: a schedule
 * choice is a member of cf_sched, read in `if constexpr` and as template arguments (only
 * CF_TRACE, a diagnostic build of the runtime, is a macro).  (The two-header variant cannot work
 * as written: cf_gemm_args embeds cf_epi_params, and the store helpers take cf_gemm_args.)
 * The kernel: extern "C" __global__ void cf_gemm_kernel(const __grid_constant__ cf_gemm_args args)
 * It also exports  extern "C" __device__ const int cf_kernel_info[23]  (see CF_INFO_*) so the host
 * can read the compiled configuration (smem bytes, tile sizes, ...) with cuModuleGetGlobal.
 * A file of two schedules (two GEMM phases in one kernel) wraps each schedule's part -- its
 * cf_sched, cf_epi_params, this header, its epilogue -- in a namespace of its own, includes
 * cf_trace.h first at file scope, and defines its own kernel over both namespaces' roles.
 *
 * ===================================================================================
 * EXECUTION MODEL
 * ===================================================================================
 * (S below is the schedule, cf_S.)
 * 384 threads = WG0 producer (one thread issues TMA; setmaxnreg.dec S::reg_producer) + WG1, WG2
 * consumers (setmaxnreg.inc S::reg_consumer); with S::finisher 512, WG3 finishing the tiles the
 * consumers park (late finish).  K is walked in blocks of 64 (S::bk) through a ring
 * of S::stages smem stages with full/empty mbarriers.
 *   S::pingpong: each consumer WG owns a different S::bm x S::bn tile; the CTA's tile
 *     stream alternates WG0, WG1, WG0, ...; mainloops are ordered by named barriers so one WG's
 *     epilogue overlaps the other WG's mainloop.  Scheduler tile = S::bm x S::bn.
 *   !S::pingpong (cooperative): both WGs work on one (2*S::bm) x S::bn tile, WG w takes rows
 *     [w*S::bm, (w+1)*S::bm).  Scheduler tile = 2*S::bm x S::bn.
 * Either way cf_epilogue is called once per (WG, tile) with a S::bm x S::bn accumulator block
 * whose origin is (t.m0, t.n0).
 * Persistent scheduler: gridDim.x CTAs (a multiple of S::row_ctas, host-chosen from
 * cuOccupancyMaxActiveClusters).  A row group is S::row_ctas consecutive CTAs (whole clusters;
 * usually S::row_ctas == S::cluster_n).  "Row-group tiles" = tiles_m x ceil(tiles_n / S::row_ctas);
 * group c (= blockIdx.x / S::row_ctas) takes row-group tiles c, c + ngroups, ... ; the CTA of rank r
 * (= blockIdx.x % S::row_ctas) takes column tile  g*S::row_ctas + r  of column group g (all CTAs of
 * a group are on the SAME row block at the same time, in lock step: same tile count, same k-loop).
 * Column tiles past tiles_n (when tiles_n % S::row_ctas != 0) are still "computed" (TMA zero fill)
 * and their stores are skipped: t.n0 >= t.N tells the epilogue.  Row-group-tile order is grouped by
 * S::group_m row blocks (L2 reuse): inside a group the row index runs fastest.
 * S::split_k > 1: the grid is S::split_k copies of that, one per slice of K (CTA blockIdx.x /
 * copy); a slice after the first runs its tiles' mainloops over its slice and posts each
 * accumulator to L2 (cf_split_poster), slice 0 adds them before its epilogue (cf_split_gather).
 * Ragged M/N/K: TMA zero-fills out-of-bounds loads; TMA stores clip.  Requirements: K >= 1,
 * K*2 and N*2 (row pitches) multiples of 16 bytes, i.e. K % 8 == 0 and N % 8 == 0, base pointers
 * 16-byte aligned, output ld*elem_size a multiple of 16. 
 *
 * What the host picks (measured on the H200; docs/performance.md, "The mainloop" and "A bare
 * GEMM"): pingpong bm=128 bn=128 stages=6 cluster_n=1; for a bare GEMM from K = 4096
 * cooperative bm=128 bn=128 stages=4 cluster_n=2 (cuBLAS's own shape:
 * a third fewer operand bytes per FLOP, which the card's full clock needs; its epilogue is not
 * overlapped, so with any epilogue work pingpong wins).
 * Epilogue helpers: cf_acc_row/col(_global), cf_*_in_bounds, cf_load_cols + cf_col_slot (batched
 * per-column vector loads: use them, per-register loads serialise), cf_quad_sum/max, cf_fmax/fmin
 * (NaN-propagating), cf_exp/exp2/tanh/rcp/rsqrt/sigmoid/silu/gelu_tanh, conversions
 * cf_pack_bf16x2/f16x2, stores cf_store_tile_{bf16,f16,f32} (TMA).
 *
 * Named barriers: 0 = __syncthreads, 1..2 pingpong order, 3..4 per-WG epilogue (t.bar_id, 128
 * threads).  Id 5 is the finisher's (S::finisher); CF_BAR_USER_FIRST (6) .. 15 are free for generated code.
 */
/* No include guard: a translation unit includes this once per schedule, each time inside the
 * namespace of that schedule's cf_sched and epilogue (a kernel of two GEMM phases instantiates
 * two), with cf_trace.h included first at file scope.  What may exist once per module -- the
 * kernel, cf_kernel_info, the trace buffer -- is cf_sm90_kernel.cuh's, included after the
 * epilogue by a one-schedule file. */

/* ----------------------------------------------------------------------------------------
 * The schedule
 * -------------------------------------------------------------------------------------- */
/* Psi's choices come as struct cf_sched, generated before this header: one static constexpr
 * member each (bm, bn, stages, cluster_n, row_ctas, pingpong, b_nk, dual, in_f16, num_out,
 * stg_chunks, smem_plan, multicast, num_tin, tin_args, late_finish, pair_tiles, post_first,
 * gather_early, finisher, mid, num_red, static_smem, red_global, red_leader, split_k).  cf_schedule adds
 * what follows from them.  The roles (cf_producer, cf_mainloop, cf_consumer, cf_finisher) are
 * templates over it, S, and read S::stages, S::pingpong, ...; the kernel instantiates them with
 * cf_S.  A feature that is off is a discarded `if constexpr` branch: no code, as an #if made. */
template <class P> struct cf_schedule : P {
    static constexpr bool has_reduce = P::num_red > 0;   /* the epilogue includes cf_reduce.cuh */
    static constexpr int group_m = 8;   /* row tiles of an L2 group of the tile order (cf_sched_tile) */
    /* Row partials through L2 between a row group's CTAs (P::red_global: co-resident CTAs of a
     * cooperative launch): the launch epoch tags them (cf_count_launch).  Else CTAs that work on
     * one row block at the same time are a hardware cluster and exchange through DSMEM. */
    static constexpr bool xchg_l2 = P::red_global && P::row_ctas > 1;
    static constexpr bool xchg_cluster = !P::red_global && P::row_ctas > 1;
    /* keep_last (late finish on the consumers): a warpgroup's last tile finishes from registers
     * instead of being parked; not where four reductions (LN+softmax) spill more with it. */
    static constexpr bool keep_last = P::num_red < 4;
    /* Four reductions (LN+softmax) spill at 232 registers: there the producer keeps 24 (enough for
     * its TMA loop) and the consumers take 240 (LN+softmax 3.8 % faster at 4096x2048x512, 0.6 % at
     * 16384x1024x1024; LN, RMSNorm and softmax within 1 %, so they keep 232 / 40).  With a
     * finisher the register file is split 24 / 184 / 184 / 120 (producer, consumers, finisher;
     * 104 for the finisher spilled LN's gather). */
    static constexpr bool reg_wide = !P::finisher && P::num_red >= 4;
    static constexpr int reg_producer = P::finisher || reg_wide ? 24 : 40;
    static constexpr int reg_consumer = P::finisher ? 184 : reg_wide ? 240 : 232;
    static constexpr int reg_finisher = 120;
    /* split_k: slices of K on copies of the grid, partials through L2 (cf_split_post; a dual
     * GEMM's two accumulators side by side); one tile per warpgroup at a time (pingpong, no
     * pair of tiles) */
    static_assert(P::split_k >= 1 && (P::split_k == 1 || (P::pingpong && !P::pair_tiles)),
                  "split_k needs pingpong and one tile per warpgroup");
    static constexpr int bk = 64;                        /* K elements per stage (one 128-B swizzle row) */
    static constexpr int num_threads = P::finisher ? 512 : 384;
    static constexpr int launch_regs = (65536 / num_threads) & ~7;
    static constexpr int tile_m = P::pingpong ? P::bm : 2 * P::bm;   /* rows of a scheduler tile */
    static constexpr int a_stage_bytes = tile_m * bk * 2;
    /* TMA multicast of the A tile inside a cluster (all CTAs of a cluster share the row block):
     * CTA rank r loads rows [r*tile_m/cluster_n, (r+1)*tile_m/cluster_n) of the A tile and
     * multicasts them to every CTA of the cluster; this cuts L2->SM traffic for A by cluster_n. */
    static constexpr int a_box_rows = P::multicast ? tile_m / P::cluster_n : tile_m;
    static constexpr int b_stage_bytes = P::bn * bk * 2;
    static constexpr int num_b = P::dual ? 2 : 1;       /* weight tiles per stage */
    static constexpr int stage_bytes = a_stage_bytes + num_b * b_stage_bytes;
    static constexpr int acc_regs = (P::bm / 64) * (P::bn / 2);   /* fp32 accumulators per consumer thread */
    static constexpr int acc_per_mt = P::bn / 2;        /* registers per m64 sub-tile */
    /* Output staging: one buffer per consumer WG, made of "chunks" of 128-byte-wide column strips
     * (64 bf16/f16 columns or 32 f32 columns) x bm rows, 128B-swizzled (the TMA store layout).
     * A bf16 tile has bn/64 chunks; with fewer staging chunks the store runs in several passes. */
    static constexpr int stg_chunk_bytes = P::bm * 128;
    static constexpr int stg_bytes = P::stg_chunks * stg_chunk_bytes;
    static constexpr int group_tiles = P::pair_tiles ? 2 : 1;   /* column tiles per CTA in one row-group slot */
    /* Dynamic shared memory the host must pass: alignment slack + mbarriers (+ the pair's
     * handoff: two mbarriers and a word pair per row), the ring, two staging buffers */
    static constexpr int smem_fixed = 1024 + 2 * 8 * P::stages + 96 + (P::pair_tiles ? 16 + P::bm * 8 : 0);
    static constexpr int smem_bytes = smem_fixed + P::stages * stage_bytes + 2 * stg_bytes;
    static constexpr int smem_limit = 232448 - P::static_smem;   /* opt-in limit left for the dynamic part */
    static constexpr int warp_rows = 16;                 /* rows of an m64 sub-tile one warp holds */
    static constexpr int warp_slots = P::stg_chunks * (P::bm / 64);
    /* TMA box rows of a stored output: the staged tile with a late finish, else a warp's rows */
    static constexpr int out_box_rows = P::late_finish ? P::bm : warp_rows;
    /* tile inputs: 64-column chunks of tile_m rows, as many to a ring stage as fit */
    static constexpr int tin_chunk_bytes = tile_m * 128;
    static constexpr int tin_chunks = P::num_tin * (P::bn / 64);
    static constexpr int tin_per_stage = stage_bytes / tin_chunk_bytes;
    static constexpr int tin_stages = (tin_chunks + tin_per_stage - 1) / tin_per_stage;
};
using cf_S = cf_schedule<cf_sched>;   /* this translation unit's schedule */

/* Array extents the generated epilogue declares its values with. */
constexpr int CF_ACC_REGS = cf_S::acc_regs;
constexpr int CF_ROWS = (cf_S::bm / 64) * 2;   /* rows of the tile held by one thread */
constexpr int CF_COLS = cf_S::bn / 4;          /* columns of the tile held by one thread */

#define CF_BAR_ORDER0 1
#define CF_BAR_EPI0 3
#define CF_BAR_FIN 5                               /* the finisher warpgroup's own (128 threads) */
#define CF_BAR_USER_FIRST 6

static_assert(cf_S::row_ctas % cf_S::cluster_n == 0, "row_ctas must be a multiple of cluster_n");
/* setmaxnreg.inc waits until the registers it asks for are free: what the producer (and finisher)
 * give back from the launch's share must cover what the consumers take, or the kernel hangs */
static_assert((cf_S::launch_regs - cf_S::reg_producer) * 128 +
                      (cf_S::finisher ? (cf_S::launch_regs - cf_S::reg_finisher) * 128 : 0) >=
                  (cf_S::reg_consumer - cf_S::launch_regs) * 256,
              "setmaxnreg: the consumers' registers exceed what the producer (and finisher) give back");
static_assert(cf_S::bm % 64 == 0 && cf_S::bm >= 64 && cf_S::tile_m <= 256,
              "bm must be a multiple of 64 and the A box (tile_m rows) at most 256");
static_assert(cf_S::bn == 64 || cf_S::bn == 128 || cf_S::bn == 192 || cf_S::bn == 256, "bn must be 64, 128, 192 or 256");
static_assert(cf_S::acc_regs * cf_S::num_b <= 128,
              "more than 128 accumulator registers per thread would spill (bm*bn > 16384, 8192 with dual)");
static_assert(cf_S::smem_bytes <= cf_S::smem_limit, "shared memory over the 227 KB opt-in limit: lower stages or stg_chunks");
static_assert(cf_S::smem_plan == cf_S::smem_bytes,
              "this layout and the host's plan (cf_cg_plan_smem) disagree on the shared memory");
static_assert(!cf_S::multicast || (cf_S::cluster_n >= 2 && cf_S::a_box_rows % 8 == 0),
              "multicast needs cluster_n >= 2 and tile_m / cluster_n a multiple of 8");
static_assert(cf_S::cluster_n == 1 || cf_S::cluster_n == 2 || cf_S::cluster_n == 4 || cf_S::cluster_n == 8 ||
                  cf_S::cluster_n == 16,
              "cluster_n must be 1, 2, 4, 8 (or 16 with the non-portable attribute)");
static_assert(cf_S::num_out >= 1, "num_out must be >= 1 (pass a dummy output when the epilogue stores none)");
static_assert(!cf_S::dual || !(cf_S::late_finish || cf_S::finisher || cf_S::pair_tiles),
              "dual: the epilogue of both accumulators runs right after the mainloop (no late finish)");
static_assert(!cf_S::post_first || (cf_S::late_finish && !cf_S::finisher && !cf_S::pair_tiles),
              "post_first: a consumer's own late finish of unpaired tiles");
static_assert(!cf_S::pair_tiles || (cf_S::pingpong && cf_S::late_finish && !cf_S::finisher),
              "pair_tiles: pingpong warpgroups that finish their own tiles late (the pair posts after WG1's first part)");
static_assert(!cf_S::late_finish || cf_S::stg_chunks == cf_S::bn / 64,
              "a late finish parks the whole tile in the staging buffer: lower stages until stg_chunks == bn / 64");
static_assert(!cf_S::num_tin || cf_S::stages >= cf_S::tin_stages + 2, "tile inputs need stages >= tin_stages + 2");
static_assert(!cf_S::mid || (cf_S::finisher && cf_S::late_finish), "mid: the finisher's part of a late finish");

/* Layout of cf_kernel_info[] (read by the host with cuModuleGetGlobal). */
#define CF_INFO_VERSION 0      /* header version (CF_SM90_VERSION) */
#define CF_INFO_SMEM 1         /* dynamic smem bytes to launch with */
#define CF_INFO_BM 2
#define CF_INFO_BN 3
#define CF_INFO_TILE_M 4       /* rows of one scheduler tile (== BM pingpong, 2*BM cooperative) */
#define CF_INFO_STAGES 5
#define CF_INFO_CLUSTER_N 6    /* hardware cluster (launch attribute) */
#define CF_INFO_B_NK 7
#define CF_INFO_IN_F16 8
#define CF_INFO_NUM_OUT 9
#define CF_INFO_PINGPONG 10
#define CF_INFO_THREADS 11
#define CF_INFO_STG_CHUNKS 12
#define CF_INFO_GROUP_M 13
#define CF_INFO_A_BOX_ROWS 14  /* TMA box of A: {64, this} (S::tile_m / S::cluster_n with multicast) */
#define CF_INFO_B_BOX 15       /* TMA box of B: B_NK ? {64, this} : {64, 64} (this == 64) */
#define CF_INFO_ROW_CTAS 16    /* CTAs per row group (grid is a multiple of it) */
#define CF_INFO_RED_GLOBAL 17  /* 1: row partials go through L2; cooperative launch, args.xchg */
#define CF_INFO_NUM_RED 18     /* row reductions per tile (sizes args.xchg) */
#define CF_INFO_LATE_FINISH 19 /* 1: tiles finish after the next mainloop (cf_epilogue_finish) */
#define CF_INFO_OUT_BOX_ROWS 20 /* TMA box of each stored output: {128/esize, this} (S::out_box_rows) */
#define CF_INFO_TIN_ARGS 21    /* [M,N] inputs fetched through the operand ring, a bit per argument */
#define CF_INFO_SPLIT_K 22     /* slices of K (S::split_k): cooperative launch, args.split_ws and split_cnt */
#define CF_SM90_VERSION 7
/* cf_kernel_info's initialiser for schedule S, in the CF_INFO_* order */
#define CF_KERNEL_INFO(S)                                                                                         \
    {CF_SM90_VERSION, S::smem_bytes, S::bm, S::bn, S::tile_m, S::stages, S::cluster_n, S::b_nk, S::in_f16,        \
     S::num_out, S::pingpong, S::num_threads, S::stg_chunks, S::group_m, S::a_box_rows, S::b_nk ? S::bn : 64,     \
     S::row_ctas, S::red_global, S::num_red, S::late_finish, S::out_box_rows, S::tin_args, S::split_k}

/* ----------------------------------------------------------------------------------------
 * Types shared with the host
 * -------------------------------------------------------------------------------------- */
typedef unsigned short cf_bf16;   /* raw bf16 bits */
typedef unsigned short cf_f16;    /* raw f16 bits */

/* An opaque CUtensorMap (128 bytes, 64-byte aligned), filled by cuTensorMapEncodeTiled. */
struct alignas(64) cf_tma_desc { unsigned long long v[16]; };

/* Kernel parameter block.  The host fills it (see tests/gpu/gemm_harness.cu, cf_host_setup()):
 *   tma_a      A = X [M,K] row-major: dims {K, M}, strides {K*2}, box {64, S::a_box_rows}, SWIZZLE_128B
 *              (S::a_box_rows = cf_kernel_info[CF_INFO_A_BOX_ROWS] = S::tile_m, or S::tile_m/S::cluster_n
 *              with multicast)
 *   tma_b[b]   b_nk: W [N,K] row-major: dims {K, N}, strides {K*2}, box {64, bn}, SWIZZLE_128B
 *              else: W [K,N] row-major: dims {N, K}, strides {N*2}, box {64, 64},   SWIZZLE_128B
 *              (b = 1: a dual GEMM's W2, the same)
 *   tma_out[o] output o [M, ld] row-major: dims {N, M}, strides {out_ld[o]*esize},
 *              box {128/esize, S::out_box_rows} (64 for bf16/f16, 32 for f32; 16 rows, or S::bm
 *              when tiles finish late), SWIZZLE_128B
 *              (only needed for outputs stored with cf_store_tile_*; else may be left zero)
 *   out[o]     base pointer of output o (for generated code)
 *   M, N, K    problem size; out_ld[o] leading dimension (elements) of output o
 *   epi        generated epilogue parameters
 * All maps: CU_TENSOR_MAP_INTERLEAVE_NONE, elementStrides {1,1}, OOB fill NONE (zeros);
 * L2 promotion 256B suggested for A and B. */
struct cf_gemm_args {
    cf_tma_desc tma_a;
    cf_tma_desc tma_b[cf_S::num_b];   /* W; a dual GEMM's W2 after it, laid out and boxed alike */
    /* the stored outputs, then the tile inputs (cf_tin_*, in argument order): one array, so
     * that no member exists only in some schedules (the host packs the same bytes) */
    cf_tma_desc tma_out[cf_S::num_out + cf_S::num_tin];
    unsigned long long *xchg;  /* S::red_global: row partials, 8-byte slots (cf_reduce.cuh) */
    unsigned *xsync;           /* S::red_global: [0] launch epoch, [1] CTAs that have read it */
    float *split_ws;           /* S::split_k > 1: the K slices' partial accumulators (cf_split_post) */
    unsigned *split_cnt;       /* S::split_k > 1: per tile, the slices posted (0 between launches) */
    void *out[cf_S::num_out];
    int M, N, K;
    int out_ld[cf_S::num_out];
    cf_epi_params epi;
};

/* What the epilogue knows about the tile it is given.  The accumulator block of the calling
 * warpgroup covers rows [m0, m0 + S::bm) and columns [n0, n0 + S::bn) of the output. */
struct cf_tile {
    int m0, n0;        /* global origin of this WG's S::bm x S::bn block */
    int M, N;          /* problem size (for bounds) */
    int warp, lane;    /* warp within the WG (0..3), lane (0..31) */
    int tid;           /* thread within the WG (0..127) */
    int wg;            /* consumer WG index (0, 1) */
    int tile_m, tile_n;/* scheduler tile indices (tile_n = column tile, tile_m = row tile) */
    int rank;          /* CTA rank in its row group (0..S::row_ctas-1) == tile_n % S::row_ctas */
    unsigned epoch;    /* S::red_global: this launch's tag for exchanged partials */
    int bar_id;        /* named barrier of this WG (128 threads) */
    unsigned stg;      /* shared-window address of this WG's staging buffer (S::stg_bytes, 1024-aligned) */
    unsigned fin_bar;  /* S::finisher: this WG's mbarriers, parked (+0) and staging free (+8) */
    unsigned pair_bar; /* S::pair_tiles: the handoff's mbarriers, full (+0) and empty (+8), then its words (+16) */
    int parks;         /* S::finisher: tiles this WG has parked before this one */
    int kept;          /* S::late_finish: this WG's last tile, finished from registers, not parked */
    unsigned ring;     /* shared-window address of the operand ring (stage 0) and its full barriers */
    unsigned ring_full, ring_empty;
    int tin_pos;       /* S::num_tin: the ring position of this tile's first input stage */
    /* gather_early: a parked tile's late-gather words, loaded as the next mainloop ended
     * (cf_gather_early); unused (and compiled away) in other schedules */
    const unsigned long long *gw_src;   /* the lane's first slot they came from; null: not loaded */
    unsigned gw[2][cf_S::gather_early ? cf_S::row_ctas : 1];
};

/* CF_TRACE: cycles thread 0 of each consumer warpgroup spends in parts of the epilogue,
 * summed over its tiles (cf_tr_cat[wg][CF_TRC_*], the parts named in cf_trace.h); see the
 * trace block before the kernel. */
#include "cf_trace.h"
#ifdef CF_TRACE
__shared__ long long cf_tr_cat[CF_TRACE_ROLES][CF_TRC_N];   /* consumer WGs 0, 1; the finisher */
#define CF_TRC_IDX(t) ((t).bar_id == CF_BAR_FIN ? 2 : (t).wg)
#define CF_TRC_COUNT(t, cat) do { if ((t).tid == 0) cf_tr_cat[CF_TRC_IDX(t)][cat] += 1; } while (0)
#define CF_TRC_T0(v) const long long v = clock64()
#define CF_TRC_ADD(t, cat, v) do { if ((t).tid == 0) cf_tr_cat[CF_TRC_IDX(t)][cat] += clock64() - (v); } while (0)
#define CF_TRC_START(v) long long v = clock64()
#define CF_TRC_STEP(t, v, cat) do { const long long n_ = clock64(); if ((t).tid == 0) cf_tr_cat[CF_TRC_IDX(t)][cat] += n_ - (v); (v) = n_; } while (0)
#else
#define CF_TRC_START(v) ((void)0)
#define CF_TRC_STEP(t, v, cat) ((void)0)
#define CF_TRC_T0(v) ((void)0)
#define CF_TRC_ADD(t, cat, v) ((void)0)
#define CF_TRC_COUNT(t, cat) ((void)0)
#endif

/* ---- CF_TRACE (diagnostics only: bench/trace.sh) ---------------------------------------
 * Per (CTA, role, tile) clock64 stamps, the events named CF_TRE_* in cf_trace.h; slot
 * CF_TRACE_TILES of each (CTA, role) holds the role's summary (CF_TRS_*: its start, end, tile
 * count, its epilogue parts cf_tr_cat, the end of its last late finish).  Roles 0, 1: the
 * consumer warpgroups; 2: the finisher (its summary only, and a tile's CF_TRE_FIN_*).
 * Compiled out unless CF_TRACE is defined (CF_TRACE=1 in the environment of the runtime).
 * CF_TRACE is the one preprocessor switch left in the device headers, and it is not a schedule
 * choice: a diagnostic build the runtime asks for with -DCF_TRACE.  Its storage is an extern "C"
 * __device__ array the host finds by name (kept in every module that defines it, used or not),
 * so it must not exist in ordinary builds; its #ifs stay. */
#ifdef CF_TRACE
#define CF_TRACE_WAITS (CF_TRACE > 1)   /* CF_TRACE=2 also times the mainloop's waits (more registers) */
extern "C" { extern __device__ long long cf_trace[CF_TRACE_CTAS * CF_TRACE_ROLES * (CF_TRACE_TILES + 1) * CF_TRACE_EV]; }
__device__ __forceinline__ void cf_trace_at(int w, int j, int ev, int tid, long long v) {
    if (tid == 0 && blockIdx.x < CF_TRACE_CTAS && j <= CF_TRACE_TILES)
        cf_trace[((blockIdx.x * CF_TRACE_ROLES + w) * (CF_TRACE_TILES + 1) + j) * CF_TRACE_EV + ev] = v;
}
/* value v (or the clock) as event ev of tile j; tiles past CF_TRACE_TILES are not kept */
#define CF_TR_V(w, j, ev, tid, v) cf_trace_at(w, (j) < CF_TRACE_TILES ? (j) : CF_TRACE_TILES + 1, ev, tid, v)
#define CF_TR(w, j, ev, tid) CF_TR_V(w, j, ev, tid, clock64())
__device__ __forceinline__ long long cf_globaltimer() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#else
#define CF_TRACE_WAITS 0
#define CF_TR(w, j, ev, tid) ((void)0)
#endif

/* ----------------------------------------------------------------------------------------
 * Small helpers
 * -------------------------------------------------------------------------------------- */
__device__ __forceinline__ int cf_imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int cf_imax(int a, int b) { return a > b ? a : b; }

__device__ __forceinline__ unsigned cf_smem_u32(const void *p) {
    unsigned r;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}
/* Coherent at GPU scope (through L2, never a stale L1 line); no ordering implied. */
__device__ __forceinline__ unsigned cf_ld_relaxed_u32(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long cf_ld_relaxed_u64(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void cf_st_relaxed_u64(unsigned long long *p, unsigned long long v) {
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
/* 16 bytes global -> shared, cached in L2 only (never a stale L1 line), no register held while
 * in flight; complete for this thread after cf_cp_async_wait_all. */
__device__ __forceinline__ void cf_cp_async16(unsigned dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cf_cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ unsigned cf_lds_u32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

/* ---- accumulator layout (wgmma m64nNk16, fp32 D) --------------------------------------
 * acc[r]: m64 sub-tile mt = r / (S::bn/2), i = r % (S::bn/2):
 *   row = 64*mt + 16*warp + lane/4 + 8*((i>>1)&1)      col = 8*(i>>2) + 2*(lane%4) + (i&1)
 * Consecutive even/odd r (r, r+1 with r even) are ADJACENT COLUMNS of the same row.  Each thread
 * holds 2 rows per m64 sub-tile; a row's S::bn values live in the 4 lanes of one quad (same lane/4):
 * row reductions = in-thread reduce, then cf_quad_* (shfl xor 1, 2). */
__device__ __forceinline__ int cf_acc_row(const cf_tile &t, int r) {
    int mt = r / cf_S::acc_per_mt, i = r % cf_S::acc_per_mt;
    return 64 * mt + 16 * t.warp + (t.lane >> 2) + 8 * ((i >> 1) & 1);
}
__device__ __forceinline__ int cf_acc_col(const cf_tile &t, int r) {
    int i = r % cf_S::acc_per_mt;
    return 8 * (i >> 2) + 2 * (t.lane & 3) + (i & 1);
}
/* Row slot of accumulator register r: slot s covers tile row cf_slot_row(t, s) (per-row values,
 * row reductions and [M] outputs keep one value a slot). */
__device__ __forceinline__ int cf_acc_slot(int r)
{
    return (r / cf_S::acc_per_mt) * 2 + ((r % cf_S::acc_per_mt) >> 1 & 1);
}
__device__ __forceinline__ int cf_slot_row(const cf_tile &t, int s)
{
    return 64 * (s >> 1) + 16 * t.warp + (t.lane >> 2) + 8 * (s & 1);
}
__device__ __forceinline__ int cf_acc_row_global(const cf_tile &t, int r) { return t.m0 + cf_acc_row(t, r); }
__device__ __forceinline__ int cf_acc_col_global(const cf_tile &t, int r) { return t.n0 + cf_acc_col(t, r); }
__device__ __forceinline__ bool cf_acc_in_bounds(const cf_tile &t, int r) {
    return cf_acc_row_global(t, r) < t.M && cf_acc_col_global(t, r) < t.N;
}
__device__ __forceinline__ bool cf_col_in_bounds(const cf_tile &t, int r) { return cf_acc_col_global(t, r) < t.N; }
__device__ __forceinline__ bool cf_row_in_bounds(const cf_tile &t, int r) { return cf_acc_row_global(t, r) < t.M; }

/* Load the two values of a per-column fp32 vector v[N] (bias, gamma, ...) for the column pair of
 * accumulator index i (even; same columns for every m64 sub-tile): b0 -> column of i, b1 -> i+1.
 * Out-of-range columns read 0.  Uses one 8-byte load when N is even (v must be 8-byte aligned). */
__device__ __forceinline__ void cf_load_col_pair(const cf_tile &t, const float *v, int i, float &b0, float &b1) {
    const int col = t.n0 + 8 * ((i % cf_S::acc_per_mt) >> 2) + 2 * (t.lane & 3);
    if (col + 1 < t.N && (t.N & 1) == 0) {
        float2 p = *(const float2 *)(v + col);
        b0 = p.x; b1 = p.y;
    } else {
        b0 = col < t.N ? v[col] : 0.0f;
        b1 = col + 1 < t.N ? v[col + 1] : 0.0f;
    }
}

/* Per-column vectors, batched: all S::bn/4 distinct columns this thread touches, loaded at once
 * (independent loads, one memory latency).  cv[cf_col_slot(r)] is the value for accumulator r:
 *   cv[2*j + e] = v[n0 + 8*j + 2*(lane&3) + e], j < S::bn/8, e < 2; out-of-range columns read 0.
 * Prefer this over per-register loads inside the accumulator loop (those serialise on latency). */
__device__ __forceinline__ int cf_col_slot(int r) { return 2 * ((r % cf_S::acc_per_mt) >> 2) + (r & 1); }
__device__ __forceinline__ void cf_load_cols(const cf_tile &t, const float *v, float (&cv)[CF_COLS]) {
    const int c0 = t.n0 + 2 * (t.lane & 3);
    if (t.n0 + cf_S::bn <= t.N && ((t.N | (int)(((unsigned long long)v) >> 2)) & 1) == 0) {
#pragma unroll
        for (int j = 0; j < cf_S::bn / 8; ++j) {
            float2 p = __ldg((const float2 *)(v + c0 + 8 * j));
            cv[2 * j] = p.x; cv[2 * j + 1] = p.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < cf_S::bn / 8; ++j) {
            const int c = c0 + 8 * j;
            cv[2 * j] = c < t.N ? __ldg(v + c) : 0.0f;
            cv[2 * j + 1] = c + 1 < t.N ? __ldg(v + c + 1) : 0.0f;
        }
    }
}

/* A 16-bit value (bf16, or f16 with F16) as f32. */
template <bool F16>
__device__ __forceinline__ float cf_f32_of16(unsigned short h) {
    if constexpr (!F16)
        return __uint_as_float((unsigned)h << 16);
    float f;
    asm("{ .reg .f16 x; mov.b16 x, %1; cvt.f32.f16 %0, x; }" : "=f"(f) : "h"(h));
    return f;
}

/* cf_load_cols for a 16-bit [N] vector (bf16, or f16 with F16: nn.Linear's bias and LayerNorm's
 * weights in 16-bit models): a thread's two adjacent columns are one 32-bit load, converted once. */
template <bool F16>
__device__ __forceinline__ void cf_load_cols16(const cf_tile &t, const unsigned short *v, float (&cv)[CF_COLS]) {
    const int c0 = t.n0 + 2 * (t.lane & 3);
    if (t.n0 + cf_S::bn <= t.N && ((t.N | (int)(((unsigned long long)v) >> 1)) & 1) == 0) {
#pragma unroll
        for (int j = 0; j < cf_S::bn / 8; ++j) {
            const unsigned p = __ldg((const unsigned *)(v + c0 + 8 * j));
            cv[2 * j] = cf_f32_of16<F16>((unsigned short)(p & 0xffffu));
            cv[2 * j + 1] = cf_f32_of16<F16>((unsigned short)(p >> 16));
        }
    } else {
#pragma unroll
        for (int j = 0; j < cf_S::bn / 8; ++j) {
            const int c = c0 + 8 * j;
            cv[2 * j] = c < t.N ? cf_f32_of16<F16>(__ldg(v + c)) : 0.0f;
            cv[2 * j + 1] = c + 1 < t.N ? cf_f32_of16<F16>(__ldg(v + c + 1)) : 0.0f;
        }
    }
}

/* Pull the slice of a [N] (cols) or [M] (rows) vector that tile t reads into L1, one 128-byte
 * line per lane of warp 0, so the epilogue's loads of it hit L1 instead of waiting on L2. */
__device__ __forceinline__ void cf_prefetch_l1(const void *v, long long first, long long limit, int esize, int count,
                                               int lane) {
    const long long i = first + (long long)lane * (128 / esize);
    if (lane * 128 < count * esize && i < limit)
        asm volatile("prefetch.global.L1 [%0];" :: "l"((const char *)v + i * esize));
}
__device__ __forceinline__ void cf_prefetch_cols(const cf_tile &t, const void *v, int esize) {
    if (t.warp == 0) cf_prefetch_l1(v, t.n0, t.N, esize, cf_S::bn, t.lane);
}
__device__ __forceinline__ void cf_prefetch_rows(const cf_tile &t, const void *v, int esize) {
    if (t.warp == 1) cf_prefetch_l1(v, t.m0, t.M, esize, cf_S::bm, t.lane);
}

/* ---- fp32 math for epilogues (NaN-propagating max/min; fast approximations) ------------ */
__device__ __forceinline__ float cf_fmax(float a, float b) { float d; asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b)); return d; }
__device__ __forceinline__ float cf_fmin(float a, float b) { float d; asm("min.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b)); return d; }
__device__ __forceinline__ float cf_exp2(float x) { float d; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(x)); return d; }
__device__ __forceinline__ float cf_exp(float x) { return cf_exp2(x * 1.4426950408889634f); }
__device__ __forceinline__ float cf_tanh(float x) { float d; asm("tanh.approx.f32 %0, %1;" : "=f"(d) : "f"(x)); return d; }
__device__ __forceinline__ float cf_rcp(float x) { float d; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(x)); return d; }
__device__ __forceinline__ float cf_rsqrt(float x) { float d; asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(d) : "f"(x)); return d; }
__device__ __forceinline__ float cf_sigmoid(float x) { return cf_rcp(1.0f + cf_exp(-x)); }
/* gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); tanh.approx rel. err ~2^-11 */
__device__ __forceinline__ float cf_gelu_tanh(float x) {
    float u = x * (0.7978845608028654f + 0.0356774081363001f * x * x);
    float hx = 0.5f * x;
    return hx + hx * cf_tanh(u);
}
__device__ __forceinline__ float cf_silu(float x) { return x * cf_sigmoid(x); }
/* quad (4 lanes holding one accumulator row) reductions */
__device__ __forceinline__ float cf_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}
__device__ __forceinline__ float cf_quad_max(float v) {
    v = cf_fmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = cf_fmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return v;
}

/* ---- conversions ---------------------------------------------------------------------- */
/* pack (lo, hi) -> bf16x2 / f16x2 (lo in the low 16 bits = lower column) */
__device__ __forceinline__ unsigned cf_pack_bf16x2(float lo, float hi) {
    unsigned d; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d;
}
__device__ __forceinline__ unsigned cf_pack_f16x2(float lo, float hi) {
    unsigned d; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo)); return d;
}
__device__ __forceinline__ float cf_bf16_to_f32(cf_bf16 h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ cf_bf16 cf_f32_to_bf16(float x) { return (cf_bf16)(cf_pack_bf16x2(x, 0.0f) & 0xffffu); }
__device__ __forceinline__ float cf_f16_to_f32(cf_f16 h) { float d; asm("cvt.f32.f16 %0, %1;" : "=f"(d) : "h"(h)); return d; }
__device__ __forceinline__ cf_f16 cf_f32_to_f16(float x) { unsigned short d; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(d) : "f"(x)); return d; }

/* ----------------------------------------------------------------------------------------
 * PTX wrappers: mbarrier, TMA, wgmma, named barriers, cluster
 * -------------------------------------------------------------------------------------- */
__device__ __forceinline__ void cf_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count));
}
__device__ __forceinline__ void cf_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cf_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void cf_mbar_wait(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred P1;\nCF_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
                 "@!P1 bra CF_WAIT_%=;\n}\n" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void cf_fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void cf_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void cf_named_bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void cf_named_bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void cf_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cf_cluster_ctarank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cf_prefetch_tma(const cf_tma_desc *d) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(d) : "memory");
}
__device__ __forceinline__ void cf_tma_load_2d(unsigned dst, const cf_tma_desc *d, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(dst), "l"(d), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void cf_tma_load_2d_mc(unsigned dst, const cf_tma_desc *d, unsigned bar, int c0, int c1,
                                                  unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%3, %4}], [%2], %5;"
                 :: "r"(dst), "l"(d), "r"(bar), "r"(c0), "r"(c1), "h"(mask) : "memory");
}
/* shared::cta address -> the same offset in CTA `rank` of the cluster */
__device__ __forceinline__ unsigned cf_mapa(unsigned addr, unsigned rank) {
    unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank)); return r;
}
/* Remote arrive with the default (.release.cta) semantics, as CUTLASS's ClusterBarrier::arrive does:
 * the .release.cluster form costs a cluster-scope fence per call and halved the throughput. */
__device__ __forceinline__ void cf_mbar_arrive_cluster(unsigned cluster_addr) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(cluster_addr) : "memory");
}
__device__ __forceinline__ void cf_tma_store_2d(const cf_tma_desc *d, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
                 :: "l"(d), "r"(src), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void cf_bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/* until at most N of this thread's bulk groups still read shared memory */
template <int N> __device__ __forceinline__ void cf_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

__device__ __forceinline__ void cf_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void cf_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cf_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
template <int N> __device__ __forceinline__ void cf_fence_operand(float *a) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(a[i]) :: "memory");
}

/* wgmma shared-memory descriptor, 128B swizzle: start>>4 | LBO>>4 << 16 | SBO>>4 << 32 | 1 << 62 */
__device__ __forceinline__ unsigned long long cf_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

/* ---- wgmma m64nNk16, fp32 accumulate (generated wrappers; TRANS_B=1: B is MN-major) ----
 * The operand type is part of the instruction's text, so each wrapper's asm is a macro over it
 * (AB: "bf16.bf16" or "f16.f16") and the wrapper picks one with the schedule's in_f16. */
#define CF_WGMMA_N64(AB) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B))
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n64(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (cf_S::in_f16)
        CF_WGMMA_N64("f16.f16");
    else
        CF_WGMMA_N64("bf16.bf16");
}

#define CF_WGMMA_N128(AB) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B))
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n128(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (cf_S::in_f16)
        CF_WGMMA_N128("f16.f16");
    else
        CF_WGMMA_N128("bf16.bf16");
}

#define CF_WGMMA_N192(AB) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n192k16.f32." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, %99;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B))
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n192(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (cf_S::in_f16)
        CF_WGMMA_N192("f16.f16");
    else
        CF_WGMMA_N192("bf16.bf16");
}

#define CF_WGMMA_N256(AB) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." AB " " \
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n" \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B))
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n256(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (cf_S::in_f16)
        CF_WGMMA_N256("f16.f16");
    else
        CF_WGMMA_N256("bf16.bf16");
}

/* one m64 x S::bn x k16 wgmma on one accumulator sub-tile */
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_tile(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    if constexpr (cf_S::bn == 64)
        cf_wgmma_n64<TRANS_B>(d, da, db, scale_d);
    else if constexpr (cf_S::bn == 128)
        cf_wgmma_n128<TRANS_B>(d, da, db, scale_d);
    else if constexpr (cf_S::bn == 192)
        cf_wgmma_n192<TRANS_B>(d, da, db, scale_d);
    else
        cf_wgmma_n256<TRANS_B>(d, da, db, scale_d);
}

/* ----------------------------------------------------------------------------------------
 * Store helpers (called by all 128 threads of a consumer WG, from cf_epilogue)
 *
 * cf_store_tile_{bf16,f16,f32}(args, t, o, y): y (same layout as acc) -> convert -> this WG's
 * 128B-swizzled staging buffer (stmatrix for 16-bit, st.shared.v2 for f32) -> TMA store.
 * Each warp stages and stores only its own rows: 16 rows of each m64 sub-tile, one "box" of
 * 16 rows x 128 bytes (64 bf16/f16 or 32 f32 columns; tensor map box {128/esize, 16}).  So no
 * warpgroup barrier sits in the store, and a warp's next box is converted while TMA reads its
 * previous one (bias+GELU 1.3-1.5 % faster than two warpgroup-wide passes of 64 columns, and
 * no 40-byte spill once the bias is preloaded; docs/performance.md, "The staged epilogue").
 * A warp owns S::warp_slots box slots of the buffer (slot (cc, mt): chunk cc, sub-tile mt, at
 * the box's place in the whole-tile layout); every store issues one bulk group per box, column
 * strip outer, sub-tile inner, even for a box wholly out of bounds (an empty group), so the
 * slot about to be rewritten was last read exactly S::warp_slots - 1 groups ago.  Rows >= M /
 * columns >= N are clipped by TMA.  Output o's map must have the element type of the helper.
 * Kernels that finish late store through the parked tile instead (cf_store_staged below).
 * -------------------------------------------------------------------------------------- */
/* staging address of this warp's rows of chunk cc, m64 sub-tile mt (2 KB-aligned: the swizzle
 * phase of a row is row & 7, as TMA expects) */
__device__ __forceinline__ unsigned cf_box_addr(const cf_tile &t, int cc, int mt) {
    return t.stg + cc * cf_S::stg_chunk_bytes + (mt * 64 + t.warp * cf_S::warp_rows) * 128;
}
/* Before a warp rewrites one of its slots: the store that last read it is done. */
__device__ __forceinline__ void cf_box_slot_wait(const cf_tile &t) {
    CF_TRC_T0(tr0);
    if (t.lane == 0) cf_bulk_wait_read<cf_S::warp_slots - 1>();
    __syncwarp();
    CF_TRC_ADD(t, CF_TRC_STORE, tr0);
}
/* Before a store's first box: the slots are taken in turn within a store, but a store whose
 * 64-column chunks do not divide among them (192 columns in two chunks' room) ends on a slot
 * other than the last, so the next store's first slot may be the one TMA still reads: wait for
 * every read then.  Free (no code) where the chunks divide. */
__device__ __forceinline__ void cf_box_first(const cf_tile &t) {
    if constexpr ((cf_S::bn / 64) % cf_S::stg_chunks != 0) {
        if (t.lane == 0) cf_bulk_wait_read<0>();
        __syncwarp();
    }
}
/* Lane 0: TMA-stores this warp's box at addr (column strip c of COLS columns, sub-tile mt) as
 * one bulk group. */
template <int COLS>
__device__ __forceinline__ void cf_box_issue(const cf_gemm_args &args, const cf_tile &t, int o, unsigned addr, int c,
                                             int mt) {
    const int col = t.n0 + c * COLS, row = t.m0 + mt * 64 + t.warp * cf_S::warp_rows;
    if (col < t.N && row < t.M) cf_tma_store_2d(&args.tma_out[o], addr, col, row);
    cf_bulk_commit();
}
/* Hands this warp's staged box to TMA once every lane's shared stores are visible to it. */
template <int COLS>
__device__ __forceinline__ void cf_box_store(const cf_gemm_args &args, const cf_tile &t, int o, unsigned addr, int c,
                                             int mt) {
    cf_fence_proxy_async();
    __syncwarp();
    if (t.lane == 0) cf_box_issue<COLS>(args, t, o, addr, c, mt);
}

/* ---- packed 16-bit activations, applied by a 16-bit store (CF_ACT_*) --------------------
 * A GELU whose only use is a 16-bit tile store runs inside the store on the packed pair, in
 * the output's type: 5 packed FMA-pipe ops per two elements, 9-10 for the erf form (and, for
 * bf16, a pack of the f32 tanh) instead of 5 per element in f32.  Epilogue FP32-pipe instructions slow the other
 * warpgroup's wgmma about one for one (docs/performance.md, "Epilogue instructions"), so this
 * is what a GELU epilogue costs.
 * The input is rounded to 16 bits first, as PyTorch's unfused path rounds the GEMM output
 * (bf16: rel. error 2.8e-3 against 1.7e-3 in f32, 2.6e-3 torch.compile, 3.2e-3 eager; see
 * test_codegen).  NaN and +-inf propagate as in f32 (tanh saturates; x^2 overflow gives
 * tanh(+-inf) = +-1). */
#define CF_ACT_NONE 0
#define CF_ACT_GELU_TANH 1
#define CF_ACT_GELU_ERF 2
/* Packed pairs of the 16-bit type F16 names (f16x2, else bf16x2), rounded to nearest. */
template <int F16> __device__ __forceinline__ unsigned cf_mul_x2(unsigned a, unsigned b) {
    unsigned d;
    if constexpr (F16) asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
template <int F16> __device__ __forceinline__ unsigned cf_fma_x2(unsigned a, unsigned b, unsigned c) {
    unsigned d;
    if constexpr (F16) asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    else asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* (where one of a pair is NaN, min takes the other) */
template <int F16> __device__ __forceinline__ unsigned cf_min_x2(unsigned a, unsigned b) {
    unsigned d;
    if constexpr (F16) asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else asm("min.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
/* 1/2 x (1 + tanh(u)) on packed pairs, the part both GELU forms share */
template <int F16> __device__ __forceinline__ unsigned cf_half_x_one_plus_tanh_x2(unsigned x, unsigned u) {
    unsigned th;
    if constexpr (F16) {
        asm("tanh.approx.f16x2 %0, %1;" : "=r"(th) : "r"(u));
    } else {
        /* tanh in f32: tanh.approx.bf16x2 is two MUFU ops too, but rounds toward zero
         * (measured rel. error 3.2e-3 against 2.8e-3 this way) */
        unsigned lo;   /* the low bf16 into the high half: PRMT, not an FMA-pipe IMAD shift */
        asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(u));
        th = cf_pack_bf16x2(cf_tanh(__uint_as_float(lo)), cf_tanh(__uint_as_float(u & 0xffff0000u)));
    }
    const unsigned h = cf_mul_x2<F16>(x, F16 ? 0x38003800u : 0x3F003F00u);   /* x / 2 */
    return cf_fma_x2<F16>(h, th, h);
}
/* gelu, tanh form: u = x (sqrt(2/pi) + 0.044715 sqrt(2/pi) x^2) */
template <int F16> __device__ __forceinline__ unsigned cf_gelu_tanh_x2(unsigned x) {
    const unsigned c0 = F16 ? 0x3A623A62u : 0x3F4C3F4Cu, c1 = F16 ? 0x28912891u : 0x3D123D12u;
    const unsigned q = cf_fma_x2<F16>(cf_mul_x2<F16>(x, x), c1, c0);
    return cf_half_x_one_plus_tanh_x2<F16>(x, cf_mul_x2<F16>(x, q));
}
/* gelu, exact form: x Phi(x) = 1/2 x (1 + tanh(x Q(x^2))), Q = -(ln 2 / 2) P with x P(x^2) a
 * minimax fit of Phi's log-odds log2(Phi / (1 - Phi)) over |x| <= 5.5 (P by ascending degree:
 * -2.297371, -1.0957898e-1, 1.4534204e-3, -1.4740496e-5, 3.1232904e-8; Phi within 1.4e-3
 * relative, far below a 16-bit output's rounding; test_codegen checks the constants against it):
 * the tanh form's packed ops with Q's degree 4 for its degree 1.  x^2 is clamped at
 * the fit's edge (|x| = 5.5, where tanh has saturated), so no x makes Q turn; f16 takes Q in
 * (x/4)^2, which keeps its coefficients normal (bf16 holds them in x^2 itself).  NaN stays NaN
 * (min keeps the number, x * Q the NaN), -inf gives NaN and +inf +inf, as x Phi(x) does. */
template <int F16> __device__ __forceinline__ unsigned cf_gelu_erf_x2(unsigned x) {
    const unsigned c0 = F16 ? 0x3A5F3A5Fu : 0x3F4C3F4Cu, c1 = F16 ? 0x38DC38DCu : 0x3D1C3D1Cu,
                   c2 = F16 ? 0xB020B020u : 0xBA04BA04u, c3 = F16 ? 0x255B255Bu : 0x36AB36ABu,
                   c4 = F16 ? 0x91D091D0u : 0xB23AB23Au, wmax = F16 ? 0x3F903F90u : 0x41F241F2u;
    unsigned s = x;
    if constexpr (F16)
        s = cf_mul_x2<F16>(x, 0x34003400u);   /* x / 4 */
    const unsigned w = cf_min_x2<F16>(cf_mul_x2<F16>(s, s), wmax);
    unsigned q = cf_fma_x2<F16>(w, c4, c3);
    q = cf_fma_x2<F16>(q, w, c2);
    q = cf_fma_x2<F16>(q, w, c1);
    q = cf_fma_x2<F16>(q, w, c0);
    return cf_half_x_one_plus_tanh_x2<F16>(x, cf_mul_x2<F16>(x, q));
}
/* (lo, hi) -> the 16-bit pair a store writes, activation applied */
template <int F16, int ACT> __device__ __forceinline__ unsigned cf_pack_out(float lo, float hi) {
    const unsigned p = F16 ? cf_pack_f16x2(lo, hi) : cf_pack_bf16x2(lo, hi);
    return ACT == CF_ACT_GELU_TANH ? cf_gelu_tanh_x2<F16>(p) : ACT == CF_ACT_GELU_ERF ? cf_gelu_erf_x2<F16>(p) : p;
}

template <int F16, int ACT>
__device__ __forceinline__ void cf_store_tile_16(const cf_gemm_args &args, const cf_tile &t, int o,
                                                 const float (&y)[CF_ACC_REGS]) {
    const int lane = t.lane, mi = lane >> 3;
    cf_box_first(t);
#pragma unroll
    for (int c = 0; c < cf_S::bn / 64; ++c) {
#pragma unroll
        for (int mt = 0; mt < cf_S::bm / 64; ++mt) {
            const unsigned box = cf_box_addr(t, c % cf_S::stg_chunks, mt);
            const unsigned rbase = box + ((mi & 1) * 8 + (lane & 7)) * 128;
            cf_box_slot_wait(t);
#pragma unroll
            for (int gp = 0; gp < 4; ++gp) {
                const int b = mt * cf_S::acc_per_mt + 4 * (c * 8 + 2 * gp);
                const unsigned r0 = cf_pack_out<F16, ACT>(y[b + 0], y[b + 1]);
                const unsigned r1 = cf_pack_out<F16, ACT>(y[b + 2], y[b + 3]);
                const unsigned r2 = cf_pack_out<F16, ACT>(y[b + 4], y[b + 5]);
                const unsigned r3 = cf_pack_out<F16, ACT>(y[b + 6], y[b + 7]);
                const int ch = 2 * gp + (mi >> 1);
                const unsigned addr = rbase + (unsigned)((ch ^ (lane & 7)) << 4);
                asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                             :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
            }
            cf_box_store<64>(args, t, o, box, c, mt);
        }
    }
}

__device__ __forceinline__ void cf_store_tile_bf16(const cf_gemm_args &args, const cf_tile &t, int o,
                                                   const float (&y)[CF_ACC_REGS]) {
    cf_store_tile_16<0, CF_ACT_NONE>(args, t, o, y);
}
__device__ __forceinline__ void cf_store_tile_f16(const cf_gemm_args &args, const cf_tile &t, int o,
                                                  const float (&y)[CF_ACC_REGS]) {
    cf_store_tile_16<1, CF_ACT_NONE>(args, t, o, y);
}
/* gelu (tanh form) of x, computed by the store in the output's 16-bit type */
__device__ __forceinline__ void cf_store_tile_bf16_gelu(const cf_gemm_args &args, const cf_tile &t, int o,
                                                        const float (&x)[CF_ACC_REGS]) {
    cf_store_tile_16<0, CF_ACT_GELU_TANH>(args, t, o, x);
}
__device__ __forceinline__ void cf_store_tile_f16_gelu(const cf_gemm_args &args, const cf_tile &t, int o,
                                                       const float (&x)[CF_ACC_REGS]) {
    cf_store_tile_16<1, CF_ACT_GELU_TANH>(args, t, o, x);
}
/* gelu (exact, erf form) of x, likewise */
__device__ __forceinline__ void cf_store_tile_bf16_gelu_erf(const cf_gemm_args &args, const cf_tile &t, int o,
                                                            const float (&x)[CF_ACC_REGS]) {
    cf_store_tile_16<0, CF_ACT_GELU_ERF>(args, t, o, x);
}
__device__ __forceinline__ void cf_store_tile_f16_gelu_erf(const cf_gemm_args &args, const cf_tile &t, int o,
                                                           const float (&x)[CF_ACC_REGS]) {
    cf_store_tile_16<1, CF_ACT_GELU_ERF>(args, t, o, x);
}
__device__ __forceinline__ void cf_store_tile_f32(const cf_gemm_args &args, const cf_tile &t, int o,
                                                  const float (&y)[CF_ACC_REGS]) {
    const int lane = t.lane, r0 = lane >> 2;   /* this lane's first row of the box */
    cf_box_first(t);
#pragma unroll
    for (int c = 0; c < cf_S::bn / 32; ++c) {     /* 32 fp32 columns per 128-byte strip */
#pragma unroll
        for (int mt = 0; mt < cf_S::bm / 64; ++mt) {
            const unsigned box = cf_box_addr(t, c % cf_S::stg_chunks, mt);
            cf_box_slot_wait(t);
#pragma unroll
            for (int gg = 0; gg < 4; ++gg) {
                const int b = mt * cf_S::acc_per_mt + 4 * (c * 4 + gg);
                const int ch = 2 * gg + ((lane & 3) >> 1);
                const unsigned off = (unsigned)(((ch ^ r0) << 4) + (lane & 1) * 8);   /* (r0 + 8) & 7 == r0 */
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(box + r0 * 128 + off), "f"(y[b]), "f"(y[b + 1]) : "memory");
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(box + (r0 + 8) * 128 + off), "f"(y[b + 2]), "f"(y[b + 3]) : "memory");
            }
            cf_box_store<32>(args, t, o, box, c, mt);
        }
    }
}

/* Four 16-bit pairs (an ldmatrix x4 of a staged tile) -> the 8 f32 accumulator-order values. */
template <int F16> __device__ __forceinline__ void cf_unpack8(const unsigned (&r)[4], float (&y)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (F16) {
            asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
                : "=f"(y[2 * j]), "=f"(y[2 * j + 1]) : "r"(r[j]));
        } else {
            /* prmt and and, not the shift the compiler turns into an IMAD: integer-pipe
             * instructions leave the other warpgroup's wgmma alone (docs/performance.md,
             * "Epilogue instructions") */
            unsigned lo;
            asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(r[j]));
            y[2 * j] = __uint_as_float(lo);
            y[2 * j + 1] = __uint_as_float(r[j] & 0xffff0000u);
        }
    }
}
__device__ __forceinline__ void cf_ldmatrix4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
/* Within a 128B-swizzled staged block whose rows start at `rows` (this warp's 16 rows of an m64
 * sub-tile): the address of the lane's 16 bytes of 8-register group gp (0..3) of a 64-column chunk,
 * as ldmatrix / stmatrix x4 take them. */
__device__ __forceinline__ unsigned cf_swz_group(unsigned rows, int lane, int gp) {
    const int mi = lane >> 3;
    return rows + ((mi & 1) * 8 + (lane & 7)) * 128 + (unsigned)(((2 * gp + (mi >> 1)) ^ (lane & 7)) << 4);
}

/* ---- [M, N] epilogue inputs through the ring (tile inputs) ------------------------------
 * A full [M, N] input of the epilogue (a mask, a residual) is fetched like the operands, not
 * element by element in the accumulator layout (8 rows a load instruction, one memory latency
 * each): the producer TMA-loads the tile's block of each into the ring stage(s) after the tile's
 * k-blocks, as 64-column chunks of S::tile_m rows in the staged-tile layout (128B swizzle), so it
 * arrives while the mainloop runs.  The consumer waits for them before the first stage that reads
 * one, reads them 8 registers at a time (ldmatrix, the unpark order), and releases the stages
 * after the last stage that reads one.  Inputs are read only before a late finish's park, so a
 * warpgroup holds them through no exchange of a later tile.  S::stages >= S::tin_stages + 2
 * leaves the other warpgroup's mainloop two stages.  A PingPong warpgroup waits for its inputs
 * before the other's turn (see the tile loop). */
/* shared address of chunk j (input j / (S::bn / 64), columns 64 (j % (S::bn / 64)) ..) of this
 * warpgroup's rows of the tile */
__device__ __forceinline__ unsigned cf_tin_chunk(const cf_tile &t, int j) {
    const int s = (t.tin_pos + j / cf_S::tin_per_stage) % cf_S::stages;
    return t.ring + s * cf_S::stage_bytes + (j % cf_S::tin_per_stage) * cf_S::tin_chunk_bytes +
           (cf_S::pingpong ? 0 : t.wg * cf_S::bm * 128);
}
/* Before the first stage that reads a tile input: the tile's input stages have landed. */
__device__ __forceinline__ void cf_tin_wait(const cf_tile &t) {
#pragma unroll
    for (int e = 0; e < cf_S::tin_stages; ++e) {
        const int p = t.tin_pos + e;
        cf_mbar_wait(t.ring_full + 8 * (p % cf_S::stages), (unsigned)(p / cf_S::stages) & 1u);
    }
}
/* After the last stage that reads one: every warp hands the stages back to the producer. */
__device__ __forceinline__ void cf_tin_release(const cf_tile &t);
/* Tile input q, one 8-register group at a time, AHEAD groups ahead of use (as cf_unpark_stream). */
template <int F16, int AHEAD> struct cf_tin_stream {
    unsigned raw[AHEAD > 0 ? AHEAD : 1][4];
    int q;
    __device__ __forceinline__ unsigned addr(const cf_tile &t, int g) const {
        constexpr int GPM = cf_S::acc_per_mt / 8;    /* groups per m64 sub-tile */
        const int mt = g / GPM, c = (g % GPM) / 4;
        return cf_swz_group(cf_tin_chunk(t, q * (cf_S::bn / 64) + c) + (mt * 64 + t.warp * 16) * 128, t.lane, g % 4);
    }
    __device__ __forceinline__ cf_tin_stream(const cf_tile &t, int input) : q(input) {
#pragma unroll
        for (int g = 0; g < AHEAD; ++g)
            cf_ldmatrix4(addr(t, g), raw[g]);
    }
    __device__ __forceinline__ void next(const cf_tile &t, int g, float (&y)[8]) {
        unsigned(&r)[4] = raw[AHEAD > 0 ? g % AHEAD : 0];
        if (AHEAD == 0)
            cf_ldmatrix4(addr(t, g), r);
        cf_unpack8<F16>(r, y);
        if (AHEAD > 0 && g + AHEAD < CF_ACC_REGS / 8)
            cf_ldmatrix4(addr(t, g + AHEAD), r);
    }
};

/* ---- late finish: a tile parked in the staging buffer ----------------------------------
 * With a late finish (cf_reduce.cuh) a warpgroup posts its row partials, parks the value its
 * last stage needs as 16-bit in its staging buffer (the whole tile; the TMA store layout),
 * runs its next mainloop, and only then folds the row's partials and finishes the parked
 * tile in place, 8 registers at a time (an x4 8x8 matrix group), so the accumulator of the
 * new tile stays live in registers alongside.  Group g holds acc registers 8g .. 8g+7.
 * The finished tile goes out warpgroup-wide, one TMA store per 64-column chunk: per-warp
 * boxes made the late finish 0.2k cycles longer and LN / softmax 2-3 % slower at N = 2048. */
#define CF_PARK_BF16 0
#define CF_PARK_F16 1
__device__ __forceinline__ unsigned cf_group_addr(const cf_tile &t, int g) {
    constexpr int GPM = cf_S::acc_per_mt / 8;    /* groups per m64 sub-tile */
    const int mt = g / GPM, c = (g % GPM) / 4;
    return cf_swz_group(cf_box_addr(t, c, mt), t.lane, g % 4);
}
template <int F16> __device__ __forceinline__ void cf_stmatrix8(unsigned addr, const float *y) {
    unsigned r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        r[j] = F16 ? cf_pack_f16x2(y[2 * j], y[2 * j + 1]) : cf_pack_bf16x2(y[2 * j], y[2 * j + 1]);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
/* Reads a parked tile back one group at a time, AHEAD groups ahead of its use: a group's
 * ldmatrix issued just before its math waits out the whole shared-memory latency, which is long
 * while the other warpgroup's wgmma streams its operands (ncu: a fifth of LN's late finish).
 * Slots are registers (the loop over groups is unrolled); group g + AHEAD is loaded before
 * group g is restaged in place, another address.  AHEAD 0 loads each group at its use.
 * KEPT: the tile was not parked (a warpgroup's last, t.kept); its groups come from registers. */
template <int F16, int AHEAD, bool KEPT = false> struct cf_unpark_stream {
    unsigned raw[AHEAD > 0 && !KEPT ? AHEAD : 1][4];
    __device__ __forceinline__ void load(const cf_tile &t, int g, unsigned (&r)[4]) { cf_ldmatrix4(cf_group_addr(t, g), r); }
    __device__ __forceinline__ explicit cf_unpark_stream(const cf_tile &t) {
#pragma unroll
        for (int g = 0; g < (KEPT ? 0 : AHEAD); ++g)
            load(t, g, raw[g]);
    }
    /* group g into y, then the load of group g + AHEAD into its slot */
    __device__ __forceinline__ void next(const cf_tile &t, int g, float (&y)[8], const float *kept = nullptr) {
        if (KEPT) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                y[j] = kept[8 * g + j];
            return;
        }
        unsigned(&r)[4] = raw[AHEAD > 0 ? g % AHEAD : 0];
        if (AHEAD == 0)
            load(t, g, r);
        cf_unpack8<F16>(r, y);
        if (AHEAD > 0 && g + AHEAD < CF_ACC_REGS / 8)
            load(t, g + AHEAD, r);
    }
};
/* Parks v (16-bit) once the previous tile's TMA store has read the buffer; a kept tile (t.kept)
 * only waits for that, and is restaged there from registers. */
template <int F16> __device__ __forceinline__ void cf_park_tile(const cf_tile &t, const float (&v)[CF_ACC_REGS]) {
    CF_TRC_T0(tr0);
    if constexpr (cf_S::finisher && !cf_S::mid) {
        cf_mbar_wait(t.fin_bar + 8, (unsigned)(t.parks & 1) ^ 1u);   /* the finisher's store has read it */
    } else {
        if (t.tid == 0) cf_bulk_wait_read<0>();
        cf_named_bar_sync(t.bar_id, 128);
    }
    CF_TRC_ADD(t, CF_TRC_PARK, tr0);
    if (t.kept)
        return;
#pragma unroll
    for (int g = 0; g < CF_ACC_REGS / 8; ++g)
        cf_stmatrix8<F16>(cf_group_addr(t, g), v + 8 * g);
    if constexpr (cf_S::finisher)
        cf_mbar_arrive(t.fin_bar);   /* release: the finisher's ldmatrix sees the tile */
}
/* Writes finished group g (the output's 16-bit type) where it was parked. */
template <int F16> __device__ __forceinline__ void cf_restage8(const cf_tile &t, int g, const float (&y)[8]) {
    cf_stmatrix8<F16>(cf_group_addr(t, g), y);
}
/* TMA-stores the restaged tile (the whole tile is staged: S::stg_chunks == S::bn / 64). */
__device__ __forceinline__ void cf_store_staged(const cf_gemm_args &args, const cf_tile &t, int o) {
    cf_fence_proxy_async();
    CF_TRC_T0(tr0);
    cf_named_bar_sync(t.bar_id, 128);
    CF_TRC_ADD(t, CF_TRC_STORE, tr0);
    if (t.tid == 0) {
#pragma unroll
        for (int c = 0; c < cf_S::bn / 64; ++c) {
            const int col = t.n0 + c * 64;
            if (col < t.N && t.m0 < t.M) cf_tma_store_2d(&args.tma_out[o], t.stg + c * cf_S::stg_chunk_bytes, col, t.m0);
        }
        cf_bulk_commit();
    }
}

/* ----------------------------------------------------------------------------------------
 * The kernel
 * -------------------------------------------------------------------------------------- */
/* Defined by the generated code AFTER this header; struct cf_pre (what cf_epilogue_preload
 * loads into registers for the epilogue) and struct cf_late are defined BEFORE it.  Every form
 * the epilogue can take is declared; the generated code defines the one its schedule calls
 * (the roles call them through cf_gen, below). */
struct cf_pre;
struct cf_late;   /* per-row values a late finish needs (late_finish) */
/* late_finish: the first part, right after the tile's mainloop (its finish comes later) */
template <class FinishPrev>
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            const cf_pre &pre, cf_late &late, const FinishPrev &finish_prev);
/* dual: both accumulators, right after the mainloop */
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            float (&acc2)[CF_ACC_REGS], const cf_pre &pre);
/* otherwise: the whole epilogue, right after the mainloop */
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            const cf_pre &pre);
struct cf_no_op {
    __device__ __forceinline__ void operator()() const {}
};
template <bool KEPT>
__device__ __forceinline__ void cf_epilogue_finish(const cf_gemm_args &args, const cf_tile &t, cf_late &late,
                                                   const float *kept);
__device__ __forceinline__ void cf_epilogue_mid(const cf_gemm_args &args, const cf_tile &t);   /* mid */
/* Before tile t's mainloop: the vectors its epilogue will read, into registers (pre) or L1
 * (cf_load_cols, cf_prefetch_cols/rows). */
__device__ __forceinline__ void cf_epilogue_preload(const cf_gemm_args &args, const cf_tile &t, cf_pre &pre);
/* Epilogues with row reductions (cf_reduce.cuh): barriers of the cluster exchange, set up by one
 * thread before the kernel's first cluster sync so no peer can signal an uninitialised barrier. */
__device__ __forceinline__ void cf_reduce_init();
/* gather_early (cf_reduce.cuh): a parked tile's late-gather loads, as the next mainloop ends */
template <class S> __device__ __forceinline__ void cf_gather_early(const cf_gemm_args &args, cf_tile &t);

/* The generated code's entry points, as the roles call them: through the schedule S, so that a
 * call only some schedules make is bound only where S makes it.  (Called directly, a call in a
 * discarded `if constexpr` branch whose arguments do not depend on S still names its function,
 * and NVRTC rejects a reference to an epilogue form the generated file does not define.) */
template <class S> struct cf_gen {
    template <class... A> static __device__ __forceinline__ void epilogue(A &&...a) { cf_epilogue(a...); }
    template <bool KEPT, class... A> static __device__ __forceinline__ void finish(A &&...a) {
        cf_epilogue_finish<KEPT>(a...);
    }
    template <class... A> static __device__ __forceinline__ void mid(A &&...a) { cf_epilogue_mid(a...); }
    template <class... A> static __device__ __forceinline__ void reduce_init(A &&...a) { cf_reduce_init(a...); }
};

/* A consumer's late finish of its parked tile (with mid, once the finisher's mid part is done). */
template <class S, class Late>
__device__ __forceinline__ void cf_finish_parked(const cf_gemm_args &args, const cf_tile &parked, Late &late) {
    if constexpr (S::mid) {
        CF_TR(parked.wg, parked.parks, CF_TRE_MID_WAIT, parked.tid);
        cf_mbar_wait(parked.fin_bar + 8, (unsigned)(parked.parks & 1));
        CF_TR(parked.wg, parked.parks, CF_TRE_MID_DONE, parked.tid);
    }
    cf_gen<S>::template finish<false>(args, parked, late, nullptr);
}

/* a consumer warp releases a ring stage: lane 0 arrives locally, or with multicast lane p < cluster_n
 * arrives on CTA p's empty barrier (every CTA's producer multicasts into this stage) */
__device__ __forceinline__ void cf_release_stage(unsigned bar, int lane) {
    if constexpr (cf_S::multicast) {
        if (lane < cf_S::cluster_n) cf_mbar_arrive_cluster(cf_mapa(bar, (unsigned)lane));
    } else {
        if (lane == 0) cf_mbar_arrive(bar);
    }
}
__device__ __forceinline__ void cf_tin_release(const cf_tile &t) {
    /* the stages were read through the generic proxy and TMA (the async proxy) refills them:
     * the memory model orders the two only across a proxy fence */
    cf_fence_proxy_async();
    __syncwarp();   /* every lane's ldmatrix of the stages is done */
#pragma unroll
    for (int e = 0; e < cf_S::tin_stages; ++e)
        cf_release_stage(t.ring_empty + 8 * ((t.tin_pos + e) % cf_S::stages), t.lane);
}

/* The CTA's i-th tile -> (row tile, column tile): row-group tile ct = cid + (i / S::group_tiles) *
 * nclusters, of which the CTA with rank `rank` takes S::group_tiles adjacent column tiles. */
__device__ __forceinline__ void cf_sched_tile(int i, int cid, int nclusters, int tiles_m, int groups_n, int rank,
                                              int &tm, int &tn) {
    const int ct = cid + (i / cf_S::group_tiles) * nclusters;
    const int per_group = cf_S::group_m * groups_n;
    const int gid = ct / per_group;
    const int first = gid * cf_S::group_m;
    const int gsz = cf_imin(tiles_m - first, cf_S::group_m);
    const int loc = ct - gid * per_group;
    tm = first + loc % gsz;
    tn = ((loc / gsz) * cf_S::row_ctas + rank) * cf_S::group_tiles + i % cf_S::group_tiles;
}

/* A warpgroup's cf_tile: the fields that stay fixed through the kernel (the tile loop sets the rest). */
__device__ __forceinline__ cf_tile cf_wg_tile(const cf_gemm_args &args, int M, int N, int tid, int rank, int bar_id) {
    cf_tile t;
    t.M = M; t.N = N;
    t.tid = tid & 127; t.warp = t.tid >> 5; t.lane = tid & 31;
    t.rank = rank; t.bar_id = bar_id;
    t.parks = 0;
    t.kept = 0;
    t.pair_bar = 0;
    t.ring = t.ring_full = t.ring_empty = 0;
    t.tin_pos = 0;
    t.gw_src = nullptr;
    t.epoch = 0;   /* xchg_l2: set from cf_launch_epoch before the first post */
    return t;
}

/* xchg_l2: the launch's epoch tags its partials, so the next launch (stream-ordered after this
 * one, also when replayed from a CUDA graph) cannot take a stale slot for its own.  One thread of
 * the producer's idle warps reads it and counts its CTA in; the CTA counted last advances it for
 * the next launch (0 is never used).  Doing this as the kernel starts, not as each CTA ends, keeps
 * an L2 round trip and a fence off every CTA's exit (2-3 % faster at K = 512).  (Shared variables
 * no code uses are left out of the kernel.) */
__shared__ __align__(8) unsigned long long cf_epoch_bar;   /* completes once cf_epoch_word is set */
__shared__ unsigned cf_epoch_word;
__device__ __forceinline__ void cf_count_launch(const cf_gemm_args &args) {
    /* acquire: the read is done before the count lets the last CTA advance the epoch */
    unsigned e;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(e) : "l"(&args.xsync[0]) : "memory");
    cf_epoch_word = e;
    cf_mbar_arrive(cf_smem_u32(&cf_epoch_bar));
    if (atomicAdd(&args.xsync[1], 1u) == gridDim.x - 1) {
        args.xsync[1] = 0;
        args.xsync[0] = e + 1u ? e + 1u : 1u;
    }
}
/* A warpgroup's wait for it, before its first post (a mainloop after the read: no wait in practice) */
__device__ __forceinline__ unsigned cf_launch_epoch() {
    cf_mbar_wait(cf_smem_u32(&cf_epoch_bar), 0);
    return cf_epoch_word;
}

/* What every role of a CTA knows: its shared-memory layout and its stream of tiles. */
struct cf_cta {
    unsigned base, stg0;          /* the operand ring; the staging buffers after it */
    unsigned bar_full, bar_empty; /* the ring's mbarriers, a stage each */
    unsigned bar_fin;             /* finisher: per consumer WG, parked / free */
    unsigned bar_pair;            /* pair_tiles: full / empty, then the words */
    int M, N, K, tiles_m, groups_n;
    int nkb, kb0;                 /* the k-blocks of this CTA's K slice: [kb0, kb0 + nkb) */
    int ks;                       /* split_k: the K slice (0: the slice that runs the epilogue) */
    int nclusters, cid;           /* row groups, and this CTA's */
    int my_n;                     /* tiles of this CTA's stream (the same for all CTAs of a row group) */
    int rank;                     /* in the row group (a cluster's CTAs are consecutive) */
    int cl_rank;                  /* in the hardware cluster (0 without one) */
};
template <class S> __device__ __forceinline__ cf_cta cf_cta_of(const cf_gemm_args &args) {
    extern __shared__ unsigned char cf_smem_raw[];
    cf_cta c;
    c.base = (cf_smem_u32(cf_smem_raw) + 1023u) & ~1023u;
    c.stg0 = c.base + S::stages * S::stage_bytes;
    c.bar_full = c.stg0 + 2 * S::stg_bytes;
    c.bar_empty = c.bar_full + 8 * S::stages;
    c.bar_fin = c.bar_empty + 8 * S::stages;
    c.bar_pair = c.bar_fin + 32;
    c.M = args.M, c.N = args.N, c.K = args.K;
    c.tiles_m = (c.M + S::tile_m - 1) / S::tile_m;
    const int tiles_n = (c.N + S::bn - 1) / S::bn;
    c.groups_n = (tiles_n + S::row_ctas * S::group_tiles - 1) / (S::row_ctas * S::group_tiles);
    const int num_ct = c.tiles_m * c.groups_n;
    /* split_k: the grid is split_k copies of the row groups, one per K slice (blockIdx.x /
     * copy).  Slice 0 runs the epilogue and takes K's last part, which is never empty. */
    const unsigned copy = gridDim.x / S::split_k;
    const unsigned block = S::split_k > 1 ? blockIdx.x % copy : blockIdx.x;
    c.ks = S::split_k > 1 ? (int)(blockIdx.x / copy) : 0;   /* a constant without slices: their tests fold */
    const int nkb_all = (c.K + S::bk - 1) / S::bk, part = S::split_k - 1 - c.ks;
    c.kb0 = nkb_all * part / S::split_k;
    c.nkb = nkb_all * (part + 1) / S::split_k - c.kb0;
    c.nclusters = (int)(copy / S::row_ctas);
    c.cid = (int)(block / S::row_ctas);
    c.my_n = num_ct > c.cid ? (num_ct - c.cid + c.nclusters - 1) / c.nclusters * S::group_tiles : 0;
    c.rank = (int)(block % S::row_ctas);
    c.cl_rank = 0;
    if constexpr (S::cluster_n > 1)
        c.cl_rank = (int)cf_cluster_ctarank();
    return c;
}

/* One thread, before any role starts: the ring's, the finisher's, the pair's and the exchange's
 * barriers. */
template <class S> __device__ __forceinline__ void cf_init_barriers(const cf_cta &cta) {
#pragma unroll 1
    for (int s = 0; s < S::stages; ++s) {
        cf_mbar_init(cta.bar_full + 8 * s, 1);
        /* one arrival per consumer warp (of every CTA of the cluster with multicast) */
        cf_mbar_init(cta.bar_empty + 8 * s, (S::pingpong ? 4 : 8) * (S::multicast ? S::cluster_n : 1));
    }
    if constexpr (S::finisher) {
        for (int w = 0; w < 2; ++w) {
            cf_mbar_init(cta.bar_fin + 16 * w, 128);   /* every consumer thread has parked its part */
            /* the finisher's store has read the buffer; with mid, every finisher thread has
             * restaged its part of the tile */
            cf_mbar_init(cta.bar_fin + 16 * w + 8, S::mid ? 128 : 1);
        }
    }
    if constexpr (S::pair_tiles) {
        cf_mbar_init(cta.bar_pair, 128);       /* WG0 has handed its row words over */
        cf_mbar_init(cta.bar_pair + 8, 128);   /* WG1 has read them */
    }
    if constexpr (S::has_reduce)
        cf_gen<S>::reduce_init();
    if constexpr (S::xchg_l2)
        cf_mbar_init(cf_smem_u32(&cf_epoch_bar), 1);
    cf_fence_barrier_init();
}

/* ---------------- producer warpgroup: the ring, in the consumers' order ---------------- */
/* Input stage e of tile (m0, n0)'s [M, N] epilogue inputs into ring stage `stage` (cf_tin_*). */
template <class S>
__device__ __forceinline__ void cf_load_tin_stage(const cf_gemm_args &args, const cf_cta &cta, int stage, int m0,
                                                  int n0, int e) {
    const unsigned fb = cta.bar_full + 8 * stage;
    const int j0 = e * S::tin_per_stage, j1 = cf_imin(j0 + S::tin_per_stage, S::tin_chunks);
    int loads = 0;   /* chunks wholly right of N are not loaded: no column there is read */
    for (int j = j0; j < j1; ++j)
        loads += n0 + 64 * (j % (S::bn / 64)) < cta.N;
    cf_mbar_expect_tx(fb, loads * S::tin_chunk_bytes);
    for (int j = j0; j < j1; ++j) {
        const int col = n0 + 64 * (j % (S::bn / 64));
        if (col < cta.N)   /* the tile inputs' maps follow the outputs' */
            cf_tma_load_2d(cta.base + stage * S::stage_bytes + (j - j0) * S::tin_chunk_bytes,
                           &args.tma_out[S::num_out + j / (S::bn / 64)], fb, col, m0);
    }
}

/* The producer's part of tile (tm, tn): its k-blocks' operand stages, then (the slice that
 * runs the epilogue) the tile's [M, N] epilogue inputs, each into the ring stage at (stage,
 * phase), which it advances. */
template <class S> __device__ __forceinline__ void cf_produce_tile(const cf_gemm_args &args, const cf_cta &cta, int tm,
                                                                   int tn, int &stage, unsigned &phase) {
    const int m0 = tm * S::tile_m, n0 = tn * S::bn;
#pragma unroll 1
    for (int kb = 0; kb < cta.nkb; ++kb) {
        cf_mbar_wait(cta.bar_empty + 8 * stage, phase ^ 1);
        const int kc = (cta.kb0 + kb) * S::bk;   /* K coordinate of this k-block */
        /* X's tile (with multicast this CTA's slice of it, to every CTA of the cluster),
         * then each weight's (written out here: as a function of its own, the compiler numbered
         * the loop's registers differently) */
        const unsigned fb = cta.bar_full + 8 * stage;
        cf_mbar_expect_tx(fb, S::stage_bytes);
        const unsigned sa = cta.base + stage * S::stage_bytes;
        const unsigned sb = sa + S::a_stage_bytes;
        if constexpr (S::multicast)
            cf_tma_load_2d_mc(sa + cta.cl_rank * (S::a_box_rows * 128), &args.tma_a, fb, kc,
                              m0 + cta.cl_rank * S::a_box_rows, (unsigned short)((1u << S::cluster_n) - 1));
        else
            cf_tma_load_2d(sa, &args.tma_a, fb, kc, m0);
#pragma unroll
        for (int b = 0; b < S::num_b; ++b) {   /* W1's tile, then (dual) W2's */
            const cf_tma_desc *tb = &args.tma_b[b];
            const unsigned sbb = sb + b * S::b_stage_bytes;
            if constexpr (S::b_nk) {
                cf_tma_load_2d(sbb, tb, fb, kc, n0);
            } else {
#pragma unroll
                for (int j = 0; j < S::bn / 64; ++j)
                    cf_tma_load_2d(sbb + j * (64 * 128), tb, fb, n0 + 64 * j, kc);
            }
        }
        if (++stage == S::stages) { stage = 0; phase ^= 1; }
    }
    if constexpr (S::num_tin > 0) {   /* the tile's [M, N] epilogue inputs, into the next stage(s) */
#pragma unroll 1
        for (int e = 0; e < (cta.ks == 0 ? S::tin_stages : 0); ++e) {   /* the slice that runs the epilogue */
            cf_mbar_wait(cta.bar_empty + 8 * stage, phase ^ 1);
            cf_load_tin_stage<S>(args, cta, stage, m0, n0, e);
            if (++stage == S::stages) { stage = 0; phase ^= 1; }
        }
    }
}

template <class S> __device__ __forceinline__ void cf_producer(const cf_gemm_args &args, const cf_cta &cta, int tid) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(S::reg_producer));
    if constexpr (S::xchg_l2)
        if (tid == 32) cf_count_launch(args);
    if (tid == 0) {
        cf_prefetch_tma(&args.tma_a);
#pragma unroll
        for (int b = 0; b < S::num_b; ++b)
            cf_prefetch_tma(&args.tma_b[b]);
        int stage = 0;
        unsigned phase = 0;
#pragma unroll 1
        for (int i = 0; i < cta.my_n; ++i) {
            int tm, tn;
            cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
            cf_produce_tile<S>(args, cta, tm, tn, stage, phase);
        }
    }
    __syncwarp();
}

/* What a late finish keeps, where the schedule finishes tiles late (cf_late is generated then
 * only); an empty struct otherwise, so the roles can declare it unconditionally. */
template <bool B, class T, class F> struct cf_pick { using type = T; };
template <class T, class F> struct cf_pick<false, T, F> { using type = F; };
struct cf_nothing {};
template <class S> using cf_late_of = typename cf_pick<S::late_finish, cf_late, cf_nothing>::type;

/* ---------------- finisher warpgroup (finisher) ----------------
 * Runs Psi's cf_epilogue_finish on each parked tile, in the order the consumers park them
 * (pingpong: WG0, WG1, WG0, ...), as if it were the warpgroup that parked it: same thread
 * to fragment mapping, that warpgroup's staging buffer, its own named barrier.  With mid it runs
 * cf_epilogue_mid instead, and the consumer finishes the tile. */
template <class S> __device__ __forceinline__ void cf_finisher(const cf_gemm_args &args, const cf_cta &cta, int tid) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(S::reg_finisher));
    cf_tile t = cf_wg_tile(args, cta.M, cta.N, tid, cta.rank, CF_BAR_FIN);
    if constexpr (S::xchg_l2)
        t.epoch = cf_launch_epoch();
#pragma unroll 1
    for (int i = 0; i < cta.my_n; ++i) {
        const int w = i & 1;
        int tm, tn;
        cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
        t.wg = w; t.tile_m = tm; t.tile_n = tn;
        t.m0 = tm * S::tile_m; t.n0 = tn * S::bn;
        t.stg = cta.stg0 + w * S::stg_bytes;
        t.fin_bar = cta.bar_fin + 16 * w;
        CF_TR(w, i >> 1, CF_TRE_FIN_WAIT, t.tid);
        cf_mbar_wait(t.fin_bar, (unsigned)(i >> 1) & 1u);   /* that warpgroup's (i / 2)-th park */
        CF_TR(w, i >> 1, CF_TRE_FIN_WORK, t.tid);
        if constexpr (S::mid) {
            cf_gen<S>::mid(args, t);
            cf_mbar_arrive(t.fin_bar + 8);   /* release: the consumer's late finish sees the tile */
        } else {
            cf_late_of<S> late;   /* rebuilt from the tile's own posted words (cf_reduce.cuh) */
            cf_gen<S>::template finish<false>(args, t, late, nullptr);
            if (t.tid == 0) {
                cf_bulk_wait_read<0>();
                cf_mbar_arrive(t.fin_bar + 8);
            }
        }
        CF_TR(w, i >> 1, CF_TRE_FIN_DONE, t.tid);
    }
    if (t.tid == 0) cf_bulk_wait_read<0>();   /* the buffer is read; the writes need not land before exit */
#ifdef CF_TRACE
    for (int c = 0; c < CF_TRC_N; ++c) cf_trace_at(2, CF_TRACE_TILES, CF_TRS_CAT0 + c, t.tid, cf_tr_cat[2][c]);
#endif
}

/* ---------------- consumer warpgroups: mainloop and epilogue, tile after tile ---------------- */
/* One k-block of the mainloop: its wgmma over the ring stage at sa (X) and sb (W); the first
 * k-block of a tile overwrites the accumulator. */
template <class S>
__device__ __forceinline__ void cf_mma_kblock(float (&acc)[CF_ACC_REGS], float (&acc2)[CF_ACC_REGS], unsigned sa,
                                              unsigned sb, int kb) {
    (void)acc2;   /* dual: X * W2 */
    constexpr int TRANS_B = S::b_nk ? 0 : 1;
#pragma unroll
    for (int k = 0; k < S::bk / 16; ++k) {
        /* W's k-slice: [N,K] K-major 32 bytes a k16 step, else [K,N] MN-major 2048 bytes (16 rows) */
        const unsigned b_off = S::b_nk ? 32 * k : 2048 * k;
        const unsigned long long db = S::b_nk ? cf_desc(sb + b_off, 16, 1024) : cf_desc(sb + b_off, 64 * 128, 1024);
        /* dual: W2's tile follows W1's in the stage (unused otherwise) */
        const unsigned long long db2 = S::b_nk ? cf_desc(sb + S::b_stage_bytes + b_off, 16, 1024)
                                               : cf_desc(sb + S::b_stage_bytes + b_off, 64 * 128, 1024);
        (void)db2;
#pragma unroll
        for (int mt = 0; mt < S::bm / 64; ++mt) {
            const unsigned long long da = cf_desc(sa + mt * 8192 + 32 * k, 16, 1024);
            cf_wgmma_tile<TRANS_B>(acc + mt * S::acc_per_mt, da, db, (kb > 0 || k > 0) ? 1 : 0);
            if constexpr (S::dual)   /* the same X slice against W2's tile */
                cf_wgmma_tile<TRANS_B>(acc2 + mt * S::acc_per_mt, da, db2, (kb > 0 || k > 0) ? 1 : 0);
        }
    }
}

/* A consumer warpgroup's mainloop of its i-th tile: its turn for the tensor cores (pingpong),
 * the k-blocks from ring position pos on, the other warpgroup's turn, the accumulator complete. */
template <class S>
__device__ __forceinline__ void cf_mainloop(const cf_cta &cta, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            float (&acc2)[CF_ACC_REGS], int i, int istep, int pos, unsigned a_off) {
    const int w = t.wg, nkb = cta.nkb, my_n = cta.my_n;
    const unsigned base = cta.base, bar_full = cta.bar_full, bar_empty = cta.bar_empty;
    (void)my_n;
    (void)w;
    int stage = pos % S::stages;
    unsigned phase = (unsigned)(pos / S::stages) & 1u;
    int prev_stage = 0;
    CF_TR(w, i / istep, CF_TRE_ORDER, t.tid);
    if constexpr (S::pingpong)
        if (i >= 2 || w == 1) cf_named_bar_sync(CF_BAR_ORDER0 + w, 256);   /* my turn for the tensor cores */
    CF_TR(w, i / istep, CF_TRE_TURN, t.tid);
    cf_fence_operand<CF_ACC_REGS>(acc);
    if constexpr (S::dual)
        cf_fence_operand<CF_ACC_REGS>(acc2);
    /* CF_TRACE=2 (a diagnostic build, -DCF_TRACE, not a schedule) also times the waits */
#if CF_TRACE_WAITS
    long long tr_data = 0, tr_mma = 0, tr_issue = 0, tr_rest = 0;
#endif
    /* The k-loop starts.  bar.sync defers its blocking to the next memory instruction,
     * here event 1's store: event 1's clock is read before the turn comes, this one after. */
    CF_TR(w, i / istep, CF_TRE_KLOOP, t.tid);
#pragma unroll 1
    for (int kb = 0; kb < nkb; ++kb) {
#if CF_TRACE_WAITS
        const long long tr0 = clock64();
#endif
        cf_mbar_wait(bar_full + 8 * stage, phase);
#if CF_TRACE_WAITS
        tr_data += clock64() - tr0;
        const long long tr_i0 = clock64();
#endif
        const unsigned sa = base + stage * S::stage_bytes + a_off;
        const unsigned sb = base + stage * S::stage_bytes + S::a_stage_bytes;
        cf_wgmma_fence();
        cf_mma_kblock<S>(acc, acc2, sa, sb, kb);
        cf_wgmma_commit();
#if CF_TRACE_WAITS
        tr_issue += clock64() - tr_i0;   /* the wgmma issue, the warpgroup's warps converging */
        const long long tr1 = clock64();
#endif
        cf_wgmma_wait<1>();
#if CF_TRACE_WAITS
        const long long tr2 = clock64();
        tr_mma += tr2 - tr1;
#endif
        if (kb > 0) cf_release_stage(bar_empty + 8 * prev_stage, t.lane);
        prev_stage = stage;
        if (++stage == S::stages) { stage = 0; phase ^= 1; }
#if CF_TRACE_WAITS
        tr_rest += clock64() - tr2;   /* the release and the loop */
#endif
    }
#if CF_TRACE_WAITS
    const long long tr_d0 = clock64();
    CF_TR_V(w, i / istep, CF_TRE_KLOOP_END, t.tid, tr_d0);   /* the k-loop ends */
#endif
    if constexpr (S::pingpong && S::num_tin > 0) {
        /* This tile's input stages land before the other warpgroup's turn.  It consumes the
         * stages after them, and a wait on a stage whose previous fill has not landed yet
         * passes at once (the parity it waits for is that of the fill before): the inputs
         * come from HBM and can land after the other warpgroup's next k-blocks. */
        if (cta.ks == 0)   /* split_k: the slices after the first load no inputs */
            cf_tin_wait(t);
    }
    if constexpr (S::pingpong)
        if (i + 1 < my_n) cf_named_bar_arrive(CF_BAR_ORDER0 + (1 - w), 256);   /* other WG's turn */
    cf_wgmma_wait<0>();
    cf_release_stage(bar_empty + 8 * prev_stage, t.lane);
    cf_fence_operand<CF_ACC_REGS>(acc);
    if constexpr (S::dual)
        cf_fence_operand<CF_ACC_REGS>(acc2);
    CF_TR(w, i / istep, CF_TRE_ACC, t.tid);
#if CF_TRACE_WAITS
    CF_TR_V(w, i / istep, CF_TRE_WAIT_DATA, t.tid, tr_data);
    CF_TR_V(w, i / istep, CF_TRE_WAIT_MMA, t.tid, tr_mma);
    CF_TR_V(w, i / istep, CF_TRE_ISSUE, t.tid, tr_issue);
    CF_TR_V(w, i / istep, CF_TRE_RELEASE, t.tid, tr_rest);
    CF_TR_V(w, i / istep, CF_TRE_DRAIN, t.tid, clock64() - tr_d0);   /* the last k-block's drain */
#endif
}

/* The second accumulator: a dual GEMM's own registers, else the first one's (the mainloop then
 * never touches it). */
template <bool DUAL> struct cf_acc2 {
    float v[CF_ACC_REGS];   /* X * W2 */
    __device__ __forceinline__ float (&of(float (&)[CF_ACC_REGS]))[CF_ACC_REGS] { return v; }
};
template <> struct cf_acc2<false> {
    __device__ __forceinline__ float (&of(float (&acc)[CF_ACC_REGS]))[CF_ACC_REGS] { return acc; }
};

/* ---------------- split_k: partial accumulators through L2 ----------------
 * With S::split_k > 1 the grid is that many copies of the row groups, one per slice of K.  A
 * warpgroup of slice ks > 0 runs its tile's mainloop over its slice and posts the accumulator
 * (cf_split_post); slice 0's warpgroup, after its own slice, waits until the others have
 * posted, adds their partials (cf_split_gather) and runs the epilogue.  Small M leaves most SMs
 * idle without it: one row block of tiles streams all of K per CTA.  The launch is cooperative
 * (every CTA resident), so the wait ends. */
__device__ __forceinline__ void cf_st_cg_v4(float *p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void cf_ld_cg_v4(const float *p, float &a, float &b, float &c, float &d) {
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
/* Slice `slice`'s (1 ..) partial of accumulator b (a dual GEMM's second: 1) of tile `tile` (row
 * tile * padded column tiles + column tile): CF_ACC_REGS floats a thread, as float4s interleaved
 * over the warpgroup's 128 threads (a warp stores 512 contiguous bytes). */
template <class S> __device__ __forceinline__ float *cf_split_slot(const cf_gemm_args &args, const cf_tile &t,
                                                                   int tile, int slice, int b) {
    const long long slot = ((long long)tile * (S::split_k - 1) + (slice - 1)) * S::num_b + b;
    return args.split_ws + slot * (CF_ACC_REGS * 128) + 4 * t.tid;
}
__device__ __forceinline__ void cf_split_store(float *p, const float (&acc)[CF_ACC_REGS]) {
#pragma unroll
    for (int r = 0; r < CF_ACC_REGS; r += 4)
        cf_st_cg_v4(p + 128 * r, acc[r], acc[r + 1], acc[r + 2], acc[r + 3]);
}
__device__ __forceinline__ void cf_split_add(const float *p, float (&acc)[CF_ACC_REGS]) {
#pragma unroll
    for (int r = 0; r < CF_ACC_REGS; r += 4) {
        float a, b, c, d;
        cf_ld_cg_v4(p + 128 * r, a, b, c, d);
        acc[r] += a; acc[r + 1] += b; acc[r + 2] += c; acc[r + 3] += d;
    }
}
/* The tile's count of posted slices, once every thread of the warpgroup has stored its part. */
__device__ __forceinline__ void cf_split_count(const cf_gemm_args &args, const cf_tile &t, int tile) {
    cf_named_bar_sync(t.bar_id, 128);   /* every thread's stores precede the count */
    if (t.tid == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" :: "l"(args.split_cnt + tile) : "memory");
    }
}
template <class S> __device__ __forceinline__ void cf_split_post(const cf_gemm_args &args, const cf_tile &t,
                                                                 const float (&acc)[CF_ACC_REGS],
                                                                 const float (&acc2)[CF_ACC_REGS], int tile, int slice) {
    cf_split_store(cf_split_slot<S>(args, t, tile, slice, 0), acc);
    if constexpr (S::dual)
        cf_split_store(cf_split_slot<S>(args, t, tile, slice, 1), acc2);
    cf_split_count(args, t, tile);
}
/* An empty slice (fewer k-blocks than slices) posts zeros, without touching the accumulators
 * (zeroing them on a branch beside the mainloop's wgmma made ptxas spill a dual GEMM's). */
template <class S> __device__ __forceinline__ void cf_split_post_zero(const cf_gemm_args &args, const cf_tile &t,
                                                                      int tile, int slice) {
#pragma unroll 1
    for (int b = 0; b < S::num_b; ++b) {
        float *p = cf_split_slot<S>(args, t, tile, slice, b);
#pragma unroll 1
        for (int r = 0; r < CF_ACC_REGS; r += 4)
            cf_st_cg_v4(p + 128 * r, 0.0f, 0.0f, 0.0f, 0.0f);
    }
    cf_split_count(args, t, tile);
}
template <class S> __device__ __forceinline__ void cf_split_gather(const cf_gemm_args &args, const cf_tile &t,
                                                                   float (&acc)[CF_ACC_REGS],
                                                                   float (&acc2)[CF_ACC_REGS], int tile) {
    if (t.tid == 0) {
        unsigned n;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(n) : "l"(args.split_cnt + tile) : "memory");
        } while (n < (unsigned)(S::split_k - 1));
        args.split_cnt[tile] = 0;   /* for the next launch, which is stream-ordered after this one */
    }
    cf_named_bar_sync(t.bar_id, 128);   /* thread 0's acquire orders the warpgroup's loads */
#pragma unroll 1
    for (int slice = 1; slice < S::split_k; ++slice) {
        cf_split_add(cf_split_slot<S>(args, t, tile, slice, 0), acc);
        if constexpr (S::dual)
            cf_split_add(cf_split_slot<S>(args, t, tile, slice, 1), acc2);
    }
}
/* A tile's index in the split counters and partials: row tile, then column tile of the padded row. */
__device__ __forceinline__ int cf_split_tile(const cf_cta &cta, int tm, int tn) {
    return tm * cta.groups_n * cf_S::row_ctas * cf_S::group_tiles + tn;
}

/* What a consumer warpgroup carries from one tile to the next beside its tile descriptor: the
 * vectors preloaded for the tile and, with a late finish, the parked tile and the statistics of
 * this tile and the one before.  Declared in every schedule (cf_late_of is an empty struct
 * without a late finish); unused members compile to nothing. */
template <class S> struct cf_consumer_state {
    cf_pre pre;
    cf_late_of<S> late, late_prev;
    cf_tile parked;
    bool parked_ok;
};

/* Consumer warpgroup w's tile (tm, tn), the i-th of its CTA's stream (it takes every istep-th),
 * its operands from ring position pos on: the mainloop, then the epilogue, finishing the parked
 * tile of the one before where the schedule finishes tiles late. */
template <class S>
__device__ __forceinline__ void cf_consume_tile(const cf_gemm_args &args, const cf_cta &cta, cf_tile &t,
                                                cf_consumer_state<S> &cs, float (&acc)[CF_ACC_REGS],
                                                float (&acc2)[CF_ACC_REGS], int w, int i, int istep, unsigned a_off,
                                                int tm, int tn, int pos) {
    cf_tile &parked = cs.parked;
    cf_pre &pre = cs.pre;
    cf_late_of<S> &late = cs.late, &late_prev = cs.late_prev;
    bool &parked_ok = cs.parked_ok;
    (void)parked_ok;
    (void)late_prev;
    (void)w;
    t.tin_pos = pos + cta.nkb;
    {   /* this tile's vectors for the epilogue, loaded while its mainloop runs */
        cf_tile next = t;
        next.m0 = tm * S::tile_m + (S::pingpong ? 0 : w * S::bm);
        next.n0 = tn * S::bn;
        cf_epilogue_preload(args, next, pre);
    }
    cf_mainloop<S>(cta, t, acc, acc2, i, istep, pos, a_off);
    if constexpr (S::split_k > 1)   /* the other slices' partials of this tile */
        cf_split_gather<S>(args, t, acc, acc2, cf_split_tile(cta, tm, tn));
    if constexpr (S::xchg_l2)
        if (t.epoch == 0) t.epoch = cf_launch_epoch();   /* the warpgroup's first tile (0 is no epoch) */
    t.tile_m = tm; t.tile_n = tn;
    t.m0 = tm * S::tile_m + (S::pingpong ? 0 : w * S::bm);
    t.n0 = tn * S::bn;
    t.parks = i / istep;
    if constexpr (S::late_finish && !S::finisher) {
        /* A warpgroup's last tile is not parked: it finishes from registers after the loop,
         * so the tail has no park and unpark (LN 1.4 %, softmax 0.6 % faster at
         * K = 512; LN+softmax spills 44 bytes more with it and ran 0.9 % slower). */
        t.kept = S::keep_last && i + istep >= cta.my_n;
    }
    if constexpr (S::late_finish && S::finisher && !S::mid) {
        cf_gen<S>::epilogue(args, t, acc, pre, late, cf_no_op{});   /* parks the tile for the finisher */
    } else if constexpr (S::late_finish && !S::post_first) {
        /* the previous tile's row partials arrived during this mainloop */
        {
            CF_TRC_T0(trf);
            if (parked_ok) cf_finish_parked<S>(args, parked, late);
            CF_TRC_ADD(t, CF_TRC_FINISH, trf);
        }
        cf_gen<S>::epilogue(args, t, acc, pre, late, cf_no_op{});
        parked = t;
        parked_ok = true;
    } else if constexpr (S::late_finish) {
        /* This tile posts its partials first, then finishes the previous one (its partials
         * arrived during this mainloop), then parks: the last tile's partials travel while
         * the previous tile finishes (RMSNorm 2-3 %, LN+softmax 2-4 % faster at K <= 1024;
         * docs/performance.md, "Post first").  Paired tiles keep the finish first: their park
         * then waits for the store just issued, and LN and softmax ran 1 % slower. */
        if constexpr (S::gather_early > 0) {
            /* the parked tile's words travel while this tile's first part runs ("Gather early") */
            if (parked_ok) cf_gather_early<S>(args, parked);
        }
        cf_gen<S>::epilogue(args, t, acc, pre, late, [&] {
            CF_TRC_T0(trf);
            if (parked_ok) cf_finish_parked<S>(args, parked, late_prev);
            CF_TRC_ADD(t, CF_TRC_FINISH, trf);
        });
        late_prev = late;
        parked = t;
        parked_ok = true;
    } else if constexpr (S::dual) {
        cf_gen<S>::epilogue(args, t, acc, acc2, pre);
    } else {
        cf_gen<S>::epilogue(args, t, acc, pre);
    }
    CF_TR(w, i / istep, CF_TRE_EPI_DONE, t.tid);
}

/* A consumer warpgroup after its last tile: the last late finish, then the wait for its stores. */
template <class S>
__device__ __forceinline__ void cf_consumer_done(const cf_gemm_args &args, const cf_cta &cta, cf_tile &t,
                                                 cf_consumer_state<S> &cs, float (&acc)[CF_ACC_REGS], int w) {
    if constexpr (S::late_finish && !S::finisher && S::keep_last) {
        if (t.kept) {   /* the last tile, in registers; the one before it finished in its epilogue */
            CF_TRC_T0(trf);
            cf_gen<S>::template finish<true>(args, t, cs.late, acc);
            CF_TRC_ADD(t, CF_TRC_FINISH, trf);
        }
    } else if constexpr (S::post_first) {
        if (cs.parked_ok) cf_finish_parked<S>(args, cs.parked, cs.late_prev);
    } else if constexpr (S::late_finish && (!S::finisher || S::mid)) {
        if (cs.parked_ok) cf_finish_parked<S>(args, cs.parked, cs.late);
    }
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_LAST_FINISH, t.tid, clock64());
#endif
    /* every warp's stores have read the staging buffer: all a CTA must wait for before it exits
     * (the grid completes only once its bulk writes have) */
    if (t.lane == 0) cf_bulk_wait_read<0>();
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_END, t.tid, clock64());
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_GT_END, t.tid, cf_globaltimer());
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_TILES, t.tid, (cta.my_n - w + 1) / 2);
    for (int c = 0; c < CF_TRC_N; ++c) cf_trace_at(w, CF_TRACE_TILES, CF_TRS_CAT0 + c, t.tid, cf_tr_cat[w][c]);
#endif
}

template <class S>
__device__ __forceinline__ void cf_consumer(const cf_gemm_args &args, const cf_cta &cta, int tid, int wg) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(S::reg_consumer));
    const int w = wg - 1;
    float acc[CF_ACC_REGS];
    cf_acc2<S::dual> second;
    float (&acc2)[CF_ACC_REGS] = second.of(acc);
    cf_consumer_state<S> cs;
    cf_tile t = cf_wg_tile(args, cta.M, cta.N, tid, cta.rank, CF_BAR_EPI0 + w);
    t.wg = w;
    t.stg = cta.stg0 + w * S::stg_bytes;
    t.fin_bar = cta.bar_fin + 16 * w;
    t.pair_bar = cta.bar_pair;
    t.ring = cta.base;
    t.ring_full = cta.bar_full;
    t.ring_empty = cta.bar_empty;
    /* pingpong: the warpgroups take the CTA's tiles in turn; cooperative: each its half of every tile */
    const int istart = S::pingpong ? w : 0, istep = S::pingpong ? 2 : 1;
    const unsigned a_off = S::pingpong ? 0 : w * S::bm * 128;
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_START, t.tid, clock64());
#endif
    cs.parked = t;
    cs.parked_ok = false;
#pragma unroll 1
    for (int i = istart; i < cta.my_n; i += istep) {
        int tm, tn;
        cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
        /* ring stages per tile: its k-blocks, then its inputs */
        cf_consume_tile<S>(args, cta, t, cs, acc, acc2, w, i, istep, a_off, tm, tn, i * (cta.nkb + S::tin_stages));
    }
    cf_consumer_done<S>(args, cta, t, cs, acc, w);
}

/* split_k: a consumer warpgroup of a K slice after the first.  Its tiles' mainloops over the
 * slice, each accumulator posted for slice 0's epilogue; an empty slice (K of fewer k-blocks
 * than slices) posts zeros (cf_split_post_zero). */
template <class S> __device__ __forceinline__ void cf_split_poster(const cf_gemm_args &args, const cf_cta &cta,
                                                                   int tid, int wg) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(S::reg_consumer));
    const int w = wg - 1;
    float acc[CF_ACC_REGS];
    cf_acc2<S::dual> second;
    float (&acc2)[CF_ACC_REGS] = second.of(acc);
    cf_tile t = cf_wg_tile(args, cta.M, cta.N, tid, cta.rank, CF_BAR_EPI0 + w);
    t.wg = w;
#pragma unroll 1
    for (int i = w; i < cta.my_n; i += 2) {
        int tm, tn;
        cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
        if (cta.nkb > 0) {
            cf_mainloop<S>(cta, t, acc, acc2, i, 2, i * cta.nkb, 0);
            cf_split_post<S>(args, t, acc, acc2, cf_split_tile(cta, tm, tn), cta.ks);
        } else {
            cf_split_post_zero<S>(args, t, cf_split_tile(cta, tm, tn), cta.ks);
        }
    }
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_GT_END, t.tid, cf_globaltimer());
#endif
}

/* A CTA: its layout, its barriers, then each warpgroup runs its role. */
template <class S> __device__ __forceinline__ void cf_cta_run(const cf_gemm_args &args) {
    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);   /* warp-uniform for the compiler: uniform registers */
    const cf_cta cta = cf_cta_of<S>(args);
#ifdef CF_TRACE
    if (tid < CF_TRACE_ROLES * CF_TRC_N) cf_tr_cat[tid / CF_TRC_N][tid % CF_TRC_N] = 0;
    cf_trace_at(0, CF_TRACE_TILES, CF_TRS_GT_START, tid, cf_globaltimer());
#endif
    if (tid == 0) cf_init_barriers<S>(cta);
    __syncthreads();
    if constexpr (S::cluster_n > 1)
        cf_cluster_sync();
    if (wg == 0) {
        cf_producer<S>(args, cta, tid);
    } else if (S::split_k > 1 && cta.ks > 0) {   /* uniform over the CTA */
        if (wg < 3)
            cf_split_poster<S>(args, cta, tid, wg);
        else   /* the finisher's registers go back to the pool the consumers take theirs from */
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(S::reg_finisher));
    } else if constexpr (S::finisher) {
        if (wg == 3)
            cf_finisher<S>(args, cta, tid);
        else
            cf_consumer<S>(args, cta, tid, wg);
    } else {
        cf_consumer<S>(args, cta, tid, wg);
    }
    if constexpr (S::cluster_n > 1)
        cf_cluster_sync();
}

