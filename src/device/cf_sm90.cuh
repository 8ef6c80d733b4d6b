/* cf_sm90.cuh — comfuse's own persistent, warp-specialised GEMM for sm_90a (Hopper).
 *
 * Header-only; its one #include is cf_trace.h beside it (the trace layout the host reads too).
 * Compiles under NVRTC with no include path and no CUDA headers: bf16/f16 are plain
 * `unsigned short`, conversions are inline PTX.
 * Build target: sm_90a (nvcc -gencode=arch=compute_90a,code=sm_90a, NVRTC --gpu-architecture=sm_90a).
 *
 * ===================================================================================
 * HOW A GENERATED TRANSLATION UNIT USES THIS HEADER (one header; the kernel is in here)
 * ===================================================================================
 *     #define CF_BM 128          // rows of ONE consumer warpgroup's tile (64, 128)
 *     #define CF_BN 128          // columns of the tile (64, 128, 192, 256)
 *     #define CF_STAGES 5        // smem ring depth
 *     #define CF_CLUSTER_N 1     // CTAs per cluster along N (1,2,4,8); launch with the same cluster dims
 *     // optional for row reductions: CF_ROW_CTAS (CTAs per row block, a multiple of CF_CLUSTER_N),
 *     //   CF_RED_GLOBAL (exchange through L2; launch cooperatively), CF_NUM_RED (see cf_reduce.cuh)
 *     #define CF_B_NK 0          // 0: weight is [K,N] row-major; 1: weight is [N,K] row-major (nn.Linear)
 *     #define CF_IN_F16 0        // 1: operands are f16 instead of bf16
 *     #define CF_NUM_OUT 1       // number of TMA-stored outputs
 *     // optional: CF_DUAL (0; 1: two GEMMs over one X, a second weight args.tma_b2 and accumulator acc2),
 *     //           CF_PINGPONG (1), CF_MULTICAST (CF_CLUSTER_N > 1), CF_STG_CHUNKS (auto), CF_GROUP_M (8),
 *     //           CF_REG_PRODUCER (40; 24 with four reductions), CF_REG_CONSUMER (232; 240)
 *     struct cf_epi_params { const float *bias; };       // generated, MUST come before the include
 *     #include "cf_sm90.cuh"
 *     __device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t,
 *                                                 float (&acc)[CF_ACC_REGS]) { ... }
 *
 * i.e. the brief's fallback form: cf_epi_params is defined BEFORE the include (cf_gemm_args embeds
 * it by value), this header forward-declares cf_epilogue, defines the kernel, and the generated
 * file defines cf_epilogue AFTER the include.  (The two-header variant cannot work as written:
 * cf_gemm_args embeds cf_epi_params, and the store helpers take cf_gemm_args.)
 * The kernel: extern "C" __global__ void cf_gemm_kernel(const __grid_constant__ cf_gemm_args args)
 * It also exports  extern "C" __device__ const int cf_kernel_info[19]  (see CF_INFO_*) so the host
 * can read the compiled configuration (smem bytes, tile sizes, ...) with cuModuleGetGlobal.
 *
 * ===================================================================================
 * EXECUTION MODEL
 * ===================================================================================
 * 384 threads = WG0 producer (one thread issues TMA; setmaxnreg.dec CF_REG_PRODUCER) + WG1, WG2
 * consumers (setmaxnreg.inc CF_REG_CONSUMER); with CF_FINISHER 512, WG3 finishing the tiles the
 * consumers park (late finish).  K is walked in blocks of 64 (CF_BK) through a ring
 * of CF_STAGES smem stages with full/empty mbarriers.
 *   CF_PINGPONG=1 (default): each consumer WG owns a different CF_BM x CF_BN tile; the CTA's tile
 *     stream alternates WG0, WG1, WG0, ...; mainloops are ordered by named barriers so one WG's
 *     epilogue overlaps the other WG's mainloop.  Scheduler tile = CF_BM x CF_BN.
 *   CF_PINGPONG=0 (cooperative): both WGs work on one (2*CF_BM) x CF_BN tile, WG w takes rows
 *     [w*CF_BM, (w+1)*CF_BM).  Scheduler tile = 2*CF_BM x CF_BN.
 * Either way cf_epilogue is called once per (WG, tile) with a CF_BM x CF_BN accumulator block
 * whose origin is (t.m0, t.n0).
 * Persistent scheduler: gridDim.x CTAs (a multiple of CF_ROW_CTAS, host-chosen from
 * cuOccupancyMaxActiveClusters).  A row group is CF_ROW_CTAS consecutive CTAs (whole clusters; by
 * default CF_ROW_CTAS == CF_CLUSTER_N).  "Row-group tiles" = tiles_m x ceil(tiles_n / CF_ROW_CTAS);
 * group c (= blockIdx.x / CF_ROW_CTAS) takes row-group tiles c, c + ngroups, ... ; the CTA of rank r
 * (= blockIdx.x % CF_ROW_CTAS) takes column tile  g*CF_ROW_CTAS + r  of column group g (all CTAs of
 * a group are on the SAME row block at the same time, in lock step: same tile count, same k-loop).
 * Column tiles past tiles_n (when tiles_n % CF_ROW_CTAS != 0) are still "computed" (TMA zero fill)
 * and their stores are skipped: t.n0 >= t.N tells the epilogue.  Row-group-tile order is grouped by
 * CF_GROUP_M row blocks (L2 reuse): inside a group the row index runs fastest.
 * Ragged M/N/K: TMA zero-fills out-of-bounds loads; TMA stores clip.  Requirements: K >= 1,
 * K*2 and N*2 (row pitches) multiples of 16 bytes, i.e. K % 8 == 0 and N % 8 == 0, base pointers
 * 16-byte aligned, output ld*elem_size a multiple of 16. 
 *
 * What the host picks (measured on the H200; docs/performance.md, "The mainloop" and "A bare
 * GEMM"): pingpong CF_BM=128 CF_BN=128 CF_STAGES=6 CF_CLUSTER_N=1; for a bare GEMM from K = 4096
 * cooperative CF_PINGPONG=0 CF_BM=128 CF_BN=128 CF_STAGES=4 CF_CLUSTER_N=2 (cuBLAS's own shape:
 * a third fewer operand bytes per FLOP, which the card's full clock needs; its epilogue is not
 * overlapped, so with any epilogue work pingpong wins).
 * Epilogue helpers: cf_acc_row/col(_global), cf_*_in_bounds, cf_load_cols + cf_col_slot (batched
 * per-column vector loads: use them, per-register loads serialise), cf_quad_sum/max, cf_fmax/fmin
 * (NaN-propagating), cf_exp/exp2/tanh/rcp/rsqrt/sigmoid/silu/gelu_tanh/gelu_erf, conversions
 * cf_pack_bf16x2/f16x2, stores cf_store_tile_{bf16,f16,f32} (TMA).
 *
 * Named barriers: 0 = __syncthreads, 1..2 pingpong order, 3..4 per-WG epilogue (t.bar_id, 128
 * threads).  Id 5 is the finisher's (CF_FINISHER); CF_BAR_USER_FIRST (6) .. 15 are free for generated code.
 */
#ifndef CF_SM90_CUH
#define CF_SM90_CUH

/* ----------------------------------------------------------------------------------------
 * Configuration
 * -------------------------------------------------------------------------------------- */
#ifndef CF_BM
#define CF_BM 128
#endif
#ifndef CF_BN
#define CF_BN 128
#endif
#ifndef CF_STAGES
#define CF_STAGES 5
#endif
#ifndef CF_CLUSTER_N
#define CF_CLUSTER_N 1
#endif
#ifndef CF_B_NK
#define CF_B_NK 0
#endif
#ifndef CF_IN_F16
#define CF_IN_F16 0
#endif
#ifndef CF_NUM_OUT
#define CF_NUM_OUT 1
#endif
#ifndef CF_NUM_TIN
#define CF_NUM_TIN 0        /* [M, N] epilogue inputs fetched through the ring (cf_tin_*) */
#define CF_TIN_ARGS 0       /* which: bit q set for the epilogue's q-th [M, N] input */
#endif
#ifndef CF_PINGPONG
#define CF_PINGPONG 1
#endif
/* CF_DUAL: two GEMMs over one X (f(X*W1) (.) g(X*W2), SwiGLU).  Each ring stage holds the X
 * tile once and both weights' tiles (W2's after W1's); a consumer keeps a second accumulator
 * acc2 for X*W2, issues both wgmma per k-step, and cf_epilogue takes both.  Both weights have
 * one layout (CF_B_NK).  No late finish: the epilogue runs once, right after the mainloop. */
#ifndef CF_DUAL
#define CF_DUAL 0
#endif
#ifndef CF_HAS_REDUCE
#define CF_HAS_REDUCE 0                            /* set by epilogues that include cf_reduce.cuh */
#endif
#ifndef CF_STATIC_SMEM
#define CF_STATIC_SMEM 0                           /* static shared memory of the epilogue (cf_reduce.cuh) */
#endif
#define CF_SMEM_LIMIT (232448 - CF_STATIC_SMEM)    /* opt-in limit left for the dynamic part */
#ifndef CF_GROUP_M
#define CF_GROUP_M 8
#endif
/* CTAs that work on one row block at the same time, each on its own column tile: a hardware
 * cluster (DSMEM exchange), or with CF_RED_GLOBAL a group of co-resident CTAs of a cooperative
 * launch that exchange row partials through L2 (cf_reduce.cuh). */
#ifndef CF_ROW_CTAS
#define CF_ROW_CTAS CF_CLUSTER_N
#endif
#ifndef CF_RED_GLOBAL
#define CF_RED_GLOBAL 0
#endif
/* Row partials through L2 between a row group's CTAs: the launch epoch tags them (cf_count_launch) */
#define CF_XCHG_L2 (CF_RED_GLOBAL && CF_ROW_CTAS > 1)
#if CF_ROW_CTAS % CF_CLUSTER_N != 0
#error "CF_ROW_CTAS must be a multiple of CF_CLUSTER_N"
#endif
/* TMA multicast of the A tile inside a cluster (all CTAs of a cluster share the row block):
 * CTA rank r loads rows [r*CF_TILE_M/CF_CLUSTER_N, (r+1)*CF_TILE_M/CF_CLUSTER_N) of the A tile
 * and multicasts them to every CTA of the cluster; this cuts L2->SM traffic for A by CF_CLUSTER_N. */
#ifndef CF_MULTICAST
#define CF_MULTICAST (CF_CLUSTER_N > 1)
#endif
/* CF_FINISHER (with CF_LATE_FINISH): a fourth warpgroup finishes the parked tiles, so a consumer
 * goes from parking one tile straight to its next mainloop.  512 threads: the register file is
 * split 24 / 184 / 184 / 120 (producer, consumers, finisher; 104 for the finisher spilled LN's gather). */
#ifndef CF_FINISHER
#define CF_FINISHER 0
#endif
/* CF_MID (with CF_FINISHER): the finisher runs Psi's cf_epilogue_mid on each parked tile instead
 * (the stages between two exchanges, ending in the second one's post, restaged in place), and
 * the consumer finishes its tile late as without a finisher, once the finisher is done with it. */
#ifndef CF_MID
#define CF_MID 0
#endif
/* CF_POST_FIRST (Psi, late finish on the consumer, no pairs, no finisher): a tile posts its
 * partials, then the previous tile finishes (cf_epilogue's finish_prev), then it parks; with a
 * synchronous exchange before (LN+softmax's first), the finish runs in that exchange's wait. */
#ifndef CF_POST_FIRST
#define CF_POST_FIRST 0
#endif
/* CF_KEEP_LAST (late finish on the consumers): a warpgroup's last tile finishes from registers
 * instead of being parked; not where four reductions (LN+softmax) spill more with it. */
#ifndef CF_KEEP_LAST
#define CF_KEEP_LAST (CF_NUM_RED < 4)
#endif
/* Four reductions (LN+softmax) spill at 232 registers: there the producer keeps 24 (enough for
 * its TMA loop) and the consumers take 240 (LN+softmax 3.8 % faster at
 * 4096x2048x512, 0.6 % at 16384x1024x1024; LN, RMSNorm and softmax within 1 %, so they keep
 * 232 / 40). */
#define CF_REG_WIDE (!CF_FINISHER && CF_NUM_RED >= 4)
#ifndef CF_REG_PRODUCER
#define CF_REG_PRODUCER (CF_FINISHER || CF_REG_WIDE ? 24 : 40)
#endif
#ifndef CF_REG_CONSUMER
#define CF_REG_CONSUMER (CF_FINISHER ? 184 : CF_REG_WIDE ? 240 : 232)
#endif
#ifndef CF_REG_FINISHER
#define CF_REG_FINISHER 120
#endif

#define CF_BK 64                                   /* K elements per stage (one 128-B swizzle row) */
#define CF_NUM_THREADS (CF_FINISHER ? 512 : 384)
/* setmaxnreg.inc waits until the registers it asks for are free: what the producer (and finisher)
 * give back from the launch's share must cover what the consumers take, or the kernel hangs */
#define CF_LAUNCH_REGS ((65536 / CF_NUM_THREADS) & ~7)
#if (CF_LAUNCH_REGS - CF_REG_PRODUCER) * 128 + (CF_FINISHER ? (CF_LAUNCH_REGS - CF_REG_FINISHER) * 128 : 0) < \
    (CF_REG_CONSUMER - CF_LAUNCH_REGS) * 256
#error "setmaxnreg: the consumers' registers exceed what the producer (and finisher) give back"
#endif
#if CF_PINGPONG
#define CF_TILE_M CF_BM                            /* rows of a scheduler tile */
#else
#define CF_TILE_M (2 * CF_BM)
#endif
#define CF_A_STAGE_BYTES (CF_TILE_M * CF_BK * 2)
#if CF_MULTICAST
#define CF_A_BOX_ROWS (CF_TILE_M / CF_CLUSTER_N)   /* rows of A each CTA loads (and multicasts) */
#else
#define CF_A_BOX_ROWS CF_TILE_M
#endif
#define CF_B_STAGE_BYTES (CF_BN * CF_BK * 2)
#define CF_NUM_B (CF_DUAL ? 2 : 1)                 /* weight tiles per stage */
#define CF_STAGE_BYTES (CF_A_STAGE_BYTES + CF_NUM_B * CF_B_STAGE_BYTES)
#define CF_ACC_REGS ((CF_BM / 64) * (CF_BN / 2))  /* fp32 accumulators per consumer thread */
#define CF_ACC_PER_MT (CF_BN / 2)                  /* registers per m64 sub-tile */

/* Output staging: one buffer per consumer WG, made of "chunks" of 128-byte-wide column strips
 * (64 bf16/f16 columns or 32 f32 columns) x CF_BM rows, 128B-swizzled (the TMA store layout).
 * A bf16 tile has CF_BN/64 chunks; with fewer staging chunks the store runs in several passes. */
#define CF_STG_CHUNK_BYTES (CF_BM * 128)
/* CF_GATHER_EARLY (with CF_POST_FIRST; generated): 1 + the late exchange's slot block.  A
 * parked tile's first round of late-gather words is loaded as the next mainloop ends, into
 * registers, and the gather re-polls only the words not yet posted (cf_gather_early). */
#ifndef CF_GATHER_EARLY
#define CF_GATHER_EARLY 0
#endif
#ifndef CF_PAIR_TILES
#define CF_PAIR_TILES 0   /* 1: a CTA's two warpgroups take adjacent column tiles of one row block (cf_pair_merge) */
#endif
#define CF_GROUP_TILES (CF_PAIR_TILES ? 2 : 1)   /* column tiles per CTA in one row-group slot */
/* alignment slack + mbarriers (+ the pair's handoff: two mbarriers and a word pair per row) */
#define CF_SMEM_FIXED (1024 + 2 * 8 * CF_STAGES + 96 + (CF_PAIR_TILES ? 16 + CF_BM * 8 : 0))
#ifndef CF_STG_CHUNKS
#define CF_STG_CHUNKS (CF_BN / 64)   /* Psi passes the plan's choice (cf_cg_plan_smem) */
#endif
#define CF_STG_BYTES (CF_STG_CHUNKS * CF_STG_CHUNK_BYTES)
/* Dynamic shared memory the host must pass (and set with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES):
 *   1024 + 16*CF_STAGES + 64 + CF_STAGES*(CF_TILE_M + CF_NUM_B*CF_BN)*128 + 2*CF_STG_CHUNKS*CF_BM*128 */
#define CF_SMEM_BYTES (CF_SMEM_FIXED + CF_STAGES * CF_STAGE_BYTES + 2 * CF_STG_BYTES)

#define CF_BAR_ORDER0 1
#define CF_BAR_EPI0 3
#define CF_BAR_FIN 5                               /* the finisher warpgroup's own (128 threads) */
#define CF_BAR_USER_FIRST 6

#if CF_BM % 64 != 0 || CF_BM < 64 || CF_TILE_M > 256
#error "CF_BM must be a multiple of 64 and the A box (CF_TILE_M rows) at most 256"
#endif
#if CF_BN != 64 && CF_BN != 128 && CF_BN != 192 && CF_BN != 256
#error "CF_BN must be 64, 128, 192 or 256"
#endif
#if CF_ACC_REGS * CF_NUM_B > 128
#error "more than 128 accumulator registers per thread would spill (CF_BM*CF_BN > 16384, 8192 with CF_DUAL)"
#endif
#if CF_SMEM_BYTES > CF_SMEM_LIMIT
#error "shared memory over the 227 KB opt-in limit: lower CF_STAGES or CF_STG_CHUNKS"
#endif
#if defined(CF_SMEM_PLAN) && CF_SMEM_PLAN != CF_SMEM_BYTES
#error "this layout and the host's plan (cf_cg_plan_smem) disagree on the shared memory"
#endif
#if CF_MULTICAST && (CF_CLUSTER_N < 2 || CF_A_BOX_ROWS % 8 != 0)
#error "CF_MULTICAST needs CF_CLUSTER_N >= 2 and CF_TILE_M / CF_CLUSTER_N a multiple of 8"
#endif
#if CF_CLUSTER_N != 1 && CF_CLUSTER_N != 2 && CF_CLUSTER_N != 4 && CF_CLUSTER_N != 8 && CF_CLUSTER_N != 16
#error "CF_CLUSTER_N must be 1, 2, 4, 8 (or 16 with the non-portable attribute)"
#endif
#if CF_NUM_OUT < 1
#error "CF_NUM_OUT must be >= 1 (pass a dummy output when the epilogue stores none)"
#endif
#ifndef CF_LATE_FINISH
#define CF_LATE_FINISH 0
#endif
#if CF_DUAL && (CF_LATE_FINISH || CF_FINISHER || CF_PAIR_TILES)
#error "CF_DUAL: the epilogue of both accumulators runs right after the mainloop (no late finish)"
#endif
#if CF_POST_FIRST && (!CF_LATE_FINISH || CF_FINISHER || CF_PAIR_TILES)
#error "CF_POST_FIRST: a consumer's own late finish of unpaired tiles"
#endif
#if CF_PAIR_TILES && (!CF_PINGPONG || !CF_LATE_FINISH || CF_FINISHER)
#error "CF_PAIR_TILES: pingpong warpgroups that finish their own tiles late (the pair posts after WG1's first part)"
#endif
#if CF_LATE_FINISH && CF_STG_CHUNKS != CF_BN / 64
#error "a late finish parks the whole tile in the staging buffer: lower CF_STAGES until CF_STG_CHUNKS == CF_BN / 64"
#endif

#if CF_IN_F16
#define CF_WGMMA_AB "f16.f16"
#else
#define CF_WGMMA_AB "bf16.bf16"
#endif

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
#define CF_INFO_A_BOX_ROWS 14  /* TMA box of A: {64, this} (CF_TILE_M / CF_CLUSTER_N with multicast) */
#define CF_INFO_B_BOX 15       /* TMA box of B: B_NK ? {64, this} : {64, 64} (this == 64) */
#define CF_INFO_ROW_CTAS 16    /* CTAs per row group (grid is a multiple of it) */
#define CF_INFO_RED_GLOBAL 17  /* 1: row partials go through L2; cooperative launch, args.xchg */
#define CF_INFO_NUM_RED 18     /* row reductions per tile (sizes args.xchg) */
#define CF_INFO_LATE_FINISH 19 /* 1: tiles finish after the next mainloop (cf_epilogue_finish) */
#define CF_INFO_OUT_BOX_ROWS 20 /* TMA box of each stored output: {128/esize, this} (CF_OUT_BOX_ROWS) */
#define CF_SM90_VERSION 6

/* ----------------------------------------------------------------------------------------
 * Types shared with the host
 * -------------------------------------------------------------------------------------- */
typedef unsigned short cf_bf16;   /* raw bf16 bits */
typedef unsigned short cf_f16;    /* raw f16 bits */

/* An opaque CUtensorMap (128 bytes, 64-byte aligned), filled by cuTensorMapEncodeTiled. */
struct alignas(64) cf_tma_desc { unsigned long long v[16]; };

/* Kernel parameter block.  The host fills it (see tests/gpu/gemm_harness.cu, cf_host_setup()):
 *   tma_a      A = X [M,K] row-major: dims {K, M}, strides {K*2}, box {64, CF_A_BOX_ROWS}, SWIZZLE_128B
 *              (CF_A_BOX_ROWS = cf_kernel_info[CF_INFO_A_BOX_ROWS] = CF_TILE_M, or CF_TILE_M/CF_CLUSTER_N
 *              with multicast)
 *   tma_b      CF_B_NK=1: W [N,K] row-major: dims {K, N}, strides {K*2}, box {64, CF_BN}, SWIZZLE_128B
 *              CF_B_NK=0: W [K,N] row-major: dims {N, K}, strides {N*2}, box {64, 64},   SWIZZLE_128B
 *   tma_out[o] output o [M, ld] row-major: dims {N, M}, strides {out_ld[o]*esize},
 *              box {128/esize, CF_OUT_BOX_ROWS} (64 for bf16/f16, 32 for f32; 16 rows, or CF_BM
 *              when tiles finish late), SWIZZLE_128B
 *              (only needed for outputs stored with cf_store_tile_*; else may be left zero)
 *   out[o]     base pointer of output o (for generated code)
 *   M, N, K    problem size; out_ld[o] leading dimension (elements) of output o
 *   epi        generated epilogue parameters
 * All maps: CU_TENSOR_MAP_INTERLEAVE_NONE, elementStrides {1,1}, OOB fill NONE (zeros);
 * L2 promotion 256B suggested for A and B. */
struct cf_gemm_args {
    cf_tma_desc tma_a;
    cf_tma_desc tma_b;
#if CF_DUAL
    cf_tma_desc tma_b2;   /* W2, laid out and boxed as tma_b */
#endif
    cf_tma_desc tma_out[CF_NUM_OUT];
#if CF_NUM_TIN
    cf_tma_desc tma_in[CF_NUM_TIN];   /* the tile inputs (cf_tin_*), in argument order */
#endif
    unsigned long long *xchg;  /* CF_RED_GLOBAL: row partials, 8-byte slots (cf_reduce.cuh) */
    unsigned *xsync;           /* CF_RED_GLOBAL: [0] launch epoch, [1] CTAs that have read it */
    void *out[CF_NUM_OUT];
    int M, N, K;
    int out_ld[CF_NUM_OUT];
    cf_epi_params epi;
};

/* What the epilogue knows about the tile it is given.  The accumulator block of the calling
 * warpgroup covers rows [m0, m0 + CF_BM) and columns [n0, n0 + CF_BN) of the output. */
struct cf_tile {
    int m0, n0;        /* global origin of this WG's CF_BM x CF_BN block */
    int M, N;          /* problem size (for bounds) */
    int warp, lane;    /* warp within the WG (0..3), lane (0..31) */
    int tid;           /* thread within the WG (0..127) */
    int wg;            /* consumer WG index (0, 1) */
    int tile_m, tile_n;/* scheduler tile indices (tile_n = column tile, tile_m = row tile) */
    int rank;          /* CTA rank in its row group (0..CF_ROW_CTAS-1) == tile_n % CF_ROW_CTAS */
    unsigned epoch;    /* CF_RED_GLOBAL: this launch's tag for exchanged partials */
    int bar_id;        /* named barrier of this WG (128 threads) */
    unsigned stg;      /* shared-window address of this WG's staging buffer (CF_STG_BYTES, 1024-aligned) */
    unsigned fin_bar;  /* CF_FINISHER: this WG's mbarriers, parked (+0) and staging free (+8) */
    unsigned pair_bar; /* CF_PAIR_TILES: the handoff's mbarriers, full (+0) and empty (+8), then its words (+16) */
    int parks;         /* CF_FINISHER: tiles this WG has parked before this one */
    int kept;          /* CF_LATE_FINISH: this WG's last tile, finished from registers, not parked */
    unsigned ring;     /* shared-window address of the operand ring (stage 0) and its full barriers */
    unsigned ring_full, ring_empty;
    int tin_pos;       /* CF_NUM_TIN: the ring position of this tile's first input stage */
#if CF_GATHER_EARLY
    /* a parked tile's late-gather words, loaded as the next mainloop ended (cf_gather_early) */
    const unsigned long long *gw_src;   /* the lane's first slot they came from; null: not loaded */
    unsigned gw[2][CF_ROW_CTAS];
#endif
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
 * Compiled out unless CF_TRACE is defined (CF_TRACE=1 in the environment of the runtime). */
#ifdef CF_TRACE
#define CF_TRACE_WAITS (CF_TRACE > 1)   /* CF_TRACE=2 also times the mainloop's waits (more registers) */
extern "C" { __device__ long long cf_trace[CF_TRACE_CTAS * CF_TRACE_ROLES * (CF_TRACE_TILES + 1) * CF_TRACE_EV]; }
__device__ __forceinline__ void cf_trace_at(int w, int j, int ev, int tid, long long v) {
    if (tid == 0 && blockIdx.x < CF_TRACE_CTAS && j <= CF_TRACE_TILES)
        cf_trace[((blockIdx.x * CF_TRACE_ROLES + w) * (CF_TRACE_TILES + 1) + j) * CF_TRACE_EV + ev] = v;
}
/* value v (or the clock) as event ev of tile j; tiles past CF_TRACE_TILES are not kept */
#define CF_TR_V(w, j, ev, tid, v) cf_trace_at(w, (j) < CF_TRACE_TILES ? (j) : CF_TRACE_TILES + 1, ev, tid, v)
#define CF_TR(w, j, ev, tid) CF_TR_V(w, j, ev, tid, clock64())
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
 * acc[r]: m64 sub-tile mt = r / (CF_BN/2), i = r % (CF_BN/2):
 *   row = 64*mt + 16*warp + lane/4 + 8*((i>>1)&1)      col = 8*(i>>2) + 2*(lane%4) + (i&1)
 * Consecutive even/odd r (r, r+1 with r even) are ADJACENT COLUMNS of the same row.  Each thread
 * holds 2 rows per m64 sub-tile; a row's CF_BN values live in the 4 lanes of one quad (same lane/4):
 * row reductions = in-thread reduce, then cf_quad_* (shfl xor 1, 2). */
__device__ __forceinline__ int cf_acc_row(const cf_tile &t, int r) {
    int mt = r / CF_ACC_PER_MT, i = r % CF_ACC_PER_MT;
    return 64 * mt + 16 * t.warp + (t.lane >> 2) + 8 * ((i >> 1) & 1);
}
__device__ __forceinline__ int cf_acc_col(const cf_tile &t, int r) {
    int i = r % CF_ACC_PER_MT;
    return 8 * (i >> 2) + 2 * (t.lane & 3) + (i & 1);
}
#define CF_ROWS ((CF_BM / 64) * 2)  /* rows of the tile held by one thread */
/* Row slot of accumulator register r: slot s covers tile row cf_slot_row(t, s) (per-row values,
 * row reductions and [M] outputs keep one value a slot). */
__device__ __forceinline__ int cf_acc_slot(int r)
{
    return (r / CF_ACC_PER_MT) * 2 + ((r % CF_ACC_PER_MT) >> 1 & 1);
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
    const int col = t.n0 + 8 * ((i % CF_ACC_PER_MT) >> 2) + 2 * (t.lane & 3);
    if (col + 1 < t.N && (t.N & 1) == 0) {
        float2 p = *(const float2 *)(v + col);
        b0 = p.x; b1 = p.y;
    } else {
        b0 = col < t.N ? v[col] : 0.0f;
        b1 = col + 1 < t.N ? v[col + 1] : 0.0f;
    }
}

/* Per-column vectors, batched: all CF_BN/4 distinct columns this thread touches, loaded at once
 * (independent loads, one memory latency).  cv[cf_col_slot(r)] is the value for accumulator r:
 *   cv[2*j + e] = v[n0 + 8*j + 2*(lane&3) + e], j < CF_BN/8, e < 2; out-of-range columns read 0.
 * Prefer this over per-register loads inside the accumulator loop (those serialise on latency). */
#define CF_COLS (CF_BN / 4)
__device__ __forceinline__ int cf_col_slot(int r) { return 2 * ((r % CF_ACC_PER_MT) >> 2) + (r & 1); }
__device__ __forceinline__ void cf_load_cols(const cf_tile &t, const float *v, float (&cv)[CF_COLS]) {
    const int c0 = t.n0 + 2 * (t.lane & 3);
    if (t.n0 + CF_BN <= t.N && ((t.N | (int)(((unsigned long long)v) >> 2)) & 1) == 0) {
#pragma unroll
        for (int j = 0; j < CF_BN / 8; ++j) {
            float2 p = __ldg((const float2 *)(v + c0 + 8 * j));
            cv[2 * j] = p.x; cv[2 * j + 1] = p.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < CF_BN / 8; ++j) {
            const int c = c0 + 8 * j;
            cv[2 * j] = c < t.N ? __ldg(v + c) : 0.0f;
            cv[2 * j + 1] = c + 1 < t.N ? __ldg(v + c + 1) : 0.0f;
        }
    }
}

/* The same for a 16-bit [N] vector (bf16 or f16, as nn.Linear's bias and LayerNorm's weights
 * come in 16-bit models): a thread's two adjacent columns are one 32-bit load, converted once. */
__device__ __forceinline__ float cf_f32_of16(unsigned short h, bool f16) {
    if (!f16)
        return __uint_as_float((unsigned)h << 16);
    float f;
    asm("{ .reg .f16 x; mov.b16 x, %1; cvt.f32.f16 %0, x; }" : "=f"(f) : "h"(h));
    return f;
}
template <bool F16>
__device__ __forceinline__ void cf_load_cols16(const cf_tile &t, const unsigned short *v, float (&cv)[CF_COLS]) {
    const int c0 = t.n0 + 2 * (t.lane & 3);
    if (t.n0 + CF_BN <= t.N && ((t.N | (int)(((unsigned long long)v) >> 1)) & 1) == 0) {
#pragma unroll
        for (int j = 0; j < CF_BN / 8; ++j) {
            const unsigned p = __ldg((const unsigned *)(v + c0 + 8 * j));
            cv[2 * j] = cf_f32_of16((unsigned short)(p & 0xffffu), F16);
            cv[2 * j + 1] = cf_f32_of16((unsigned short)(p >> 16), F16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < CF_BN / 8; ++j) {
            const int c = c0 + 8 * j;
            cv[2 * j] = c < t.N ? cf_f32_of16(__ldg(v + c), F16) : 0.0f;
            cv[2 * j + 1] = c + 1 < t.N ? cf_f32_of16(__ldg(v + c + 1), F16) : 0.0f;
        }
    }
}
__device__ __forceinline__ void cf_load_cols(const cf_tile &t, const unsigned short *v, float (&cv)[CF_COLS],
                                             bool f16) {
    if (f16)
        cf_load_cols16<true>(t, v, cv);
    else
        cf_load_cols16<false>(t, v, cv);
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
    if (t.warp == 0) cf_prefetch_l1(v, t.n0, t.N, esize, CF_BN, t.lane);
}
__device__ __forceinline__ void cf_prefetch_rows(const cf_tile &t, const void *v, int esize) {
    if (t.warp == 1) cf_prefetch_l1(v, t.m0, t.M, esize, CF_BM, t.lane);
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
__device__ __forceinline__ float cf_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
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

/* ---- wgmma m64nNk16, fp32 accumulate (generated wrappers; TRANS_B=1: B is MN-major) ---- */
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n64(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." CF_WGMMA_AB " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n128(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." CF_WGMMA_AB " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n192(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32." CF_WGMMA_AB " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, 0, %99;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_n256(float *d, unsigned long long da, unsigned long long db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." CF_WGMMA_AB " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));
}

/* one m64 x CF_BN x k16 wgmma on one accumulator sub-tile */
template <int TRANS_B>
__device__ __forceinline__ void cf_wgmma_tile(float *d, unsigned long long da, unsigned long long db, int scale_d) {
#if CF_BN == 64
    cf_wgmma_n64<TRANS_B>(d, da, db, scale_d);
#elif CF_BN == 128
    cf_wgmma_n128<TRANS_B>(d, da, db, scale_d);
#elif CF_BN == 192
    cf_wgmma_n192<TRANS_B>(d, da, db, scale_d);
#else
    cf_wgmma_n256<TRANS_B>(d, da, db, scale_d);
#endif
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
 * A warp owns CF_WARP_SLOTS box slots of the buffer (slot (cc, mt): chunk cc, sub-tile mt, at
 * the box's place in the whole-tile layout); every store issues one bulk group per box, column
 * strip outer, sub-tile inner, even for a box wholly out of bounds (an empty group), so the
 * slot about to be rewritten was last read exactly CF_WARP_SLOTS - 1 groups ago.  Rows >= M /
 * columns >= N are clipped by TMA.  Output o's map must have the element type of the helper.
 * Kernels that finish late store through the parked tile instead (cf_store_staged below).
 * -------------------------------------------------------------------------------------- */
#define CF_WARP_ROWS 16                             /* rows of an m64 sub-tile one warp holds */
#define CF_WARP_SLOTS (CF_STG_CHUNKS * (CF_BM / 64))
#if CF_LATE_FINISH
#define CF_OUT_BOX_ROWS CF_BM                       /* the staged tile, one chunk per store */
#else
#define CF_OUT_BOX_ROWS CF_WARP_ROWS
#endif
/* staging address of this warp's rows of chunk cc, m64 sub-tile mt (2 KB-aligned: the swizzle
 * phase of a row is row & 7, as TMA expects) */
__device__ __forceinline__ unsigned cf_box_addr(const cf_tile &t, int cc, int mt) {
    return t.stg + cc * CF_STG_CHUNK_BYTES + (mt * 64 + t.warp * CF_WARP_ROWS) * 128;
}
#if !CF_LATE_FINISH
/* Before a warp rewrites one of its slots: the store that last read it is done. */
__device__ __forceinline__ void cf_box_slot_wait(const cf_tile &t) {
    CF_TRC_T0(tr0);
    if (t.lane == 0) cf_bulk_wait_read<CF_WARP_SLOTS - 1>();
    __syncwarp();
    CF_TRC_ADD(t, CF_TRC_STORE, tr0);
}
/* Lane 0: TMA-stores this warp's box at addr (column strip c of COLS columns, sub-tile mt) as
 * one bulk group. */
template <int COLS>
__device__ __forceinline__ void cf_box_issue(const cf_gemm_args &args, const cf_tile &t, int o, unsigned addr, int c,
                                             int mt) {
    const int col = t.n0 + c * COLS, row = t.m0 + mt * 64 + t.warp * CF_WARP_ROWS;
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
 * the output's type: 5 packed FMA-pipe ops per two elements (and, for bf16, a pack of the
 * f32 tanh) instead of 5 per element in f32.  Epilogue FP32-pipe instructions slow the other
 * warpgroup's wgmma about one for one (docs/performance.md, "Epilogue instructions"), so this
 * is what a GELU epilogue costs.
 * The input is rounded to 16 bits first, as PyTorch's unfused path rounds the GEMM output
 * (bf16: rel. error 2.8e-3 against 1.7e-3 in f32, 2.6e-3 torch.compile, 3.2e-3 eager; see
 * test_codegen).  NaN and +-inf propagate as in f32 (tanh saturates; x^2 overflow gives
 * tanh(+-inf) = +-1). */
#define CF_ACT_NONE 0
#define CF_ACT_GELU_TANH 1
template <int F16> __device__ __forceinline__ unsigned cf_gelu_tanh_x2(unsigned x) {
    unsigned q, u, th, h, y;
    if (F16) {   /* sqrt(2/pi), 0.044715 sqrt(2/pi), 1/2 as f16 */
        const unsigned c0 = 0x3A623A62u, c1 = 0x28912891u, half = 0x38003800u;
        asm("mul.rn.f16x2 %0, %1, %1;" : "=r"(q) : "r"(x));
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(q) : "r"(q), "r"(c1), "r"(c0));
        asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(u) : "r"(x), "r"(q));
        asm("tanh.approx.f16x2 %0, %1;" : "=r"(th) : "r"(u));
        asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(h) : "r"(x), "r"(half));
        asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(y) : "r"(h), "r"(th), "r"(h));
    } else {     /* the same as bf16 */
        const unsigned c0 = 0x3F4C3F4Cu, c1 = 0x3D123D12u, half = 0x3F003F00u;
        asm("mul.rn.bf16x2 %0, %1, %1;" : "=r"(q) : "r"(x));
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(q) : "r"(q), "r"(c1), "r"(c0));
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(u) : "r"(x), "r"(q));
        /* tanh in f32: tanh.approx.bf16x2 is two MUFU ops too, but rounds toward zero
         * (measured rel. error 3.2e-3 against 2.8e-3 this way) */
        unsigned lo;   /* the low bf16 into the high half: PRMT, not an FMA-pipe IMAD shift */
        asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(u));
        th = cf_pack_bf16x2(cf_tanh(__uint_as_float(lo)), cf_tanh(__uint_as_float(u & 0xffff0000u)));
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(h) : "r"(x), "r"(half));
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(y) : "r"(h), "r"(th), "r"(h));
    }
    return y;
}
/* (lo, hi) -> the 16-bit pair a store writes, activation applied */
template <int F16, int ACT> __device__ __forceinline__ unsigned cf_pack_out(float lo, float hi) {
    const unsigned p = F16 ? cf_pack_f16x2(lo, hi) : cf_pack_bf16x2(lo, hi);
    return ACT == CF_ACT_GELU_TANH ? cf_gelu_tanh_x2<F16>(p) : p;
}

template <int F16, int ACT>
__device__ __forceinline__ void cf_store_tile_16(const cf_gemm_args &args, const cf_tile &t, int o,
                                                 const float (&y)[CF_ACC_REGS]) {
    const int lane = t.lane, mi = lane >> 3;
#pragma unroll
    for (int c = 0; c < CF_BN / 64; ++c) {
#pragma unroll
        for (int mt = 0; mt < CF_BM / 64; ++mt) {
            const unsigned box = cf_box_addr(t, c % CF_STG_CHUNKS, mt);
            const unsigned rbase = box + ((mi & 1) * 8 + (lane & 7)) * 128;
            cf_box_slot_wait(t);
#pragma unroll
            for (int gp = 0; gp < 4; ++gp) {
                const int b = mt * CF_ACC_PER_MT + 4 * (c * 8 + 2 * gp);
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
__device__ __forceinline__ void cf_store_tile_f32(const cf_gemm_args &args, const cf_tile &t, int o,
                                                  const float (&y)[CF_ACC_REGS]) {
    const int lane = t.lane, r0 = lane >> 2;   /* this lane's first row of the box */
#pragma unroll
    for (int c = 0; c < CF_BN / 32; ++c) {     /* 32 fp32 columns per 128-byte strip */
#pragma unroll
        for (int mt = 0; mt < CF_BM / 64; ++mt) {
            const unsigned box = cf_box_addr(t, c % CF_STG_CHUNKS, mt);
            cf_box_slot_wait(t);
#pragma unroll
            for (int gg = 0; gg < 4; ++gg) {
                const int b = mt * CF_ACC_PER_MT + 4 * (c * 4 + gg);
                const int ch = 2 * gg + ((lane & 3) >> 1);
                const unsigned off = (unsigned)(((ch ^ r0) << 4) + (lane & 1) * 8);   /* (r0 + 8) & 7 == r0 */
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(box + r0 * 128 + off), "f"(y[b]), "f"(y[b + 1]) : "memory");
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(box + (r0 + 8) * 128 + off), "f"(y[b + 2]), "f"(y[b + 3]) : "memory");
            }
            cf_box_store<32>(args, t, o, box, c, mt);
        }
    }
}
#endif /* !CF_LATE_FINISH */

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
 * k-blocks, as 64-column chunks of CF_TILE_M rows in the staged-tile layout (128B swizzle), so it
 * arrives while the mainloop runs.  The consumer waits for them before the first stage that reads
 * one, reads them 8 registers at a time (ldmatrix, the unpark order), and releases the stages
 * after the last stage that reads one.  Inputs are read only before a late finish's park, so a
 * warpgroup holds them through no exchange of a later tile.  CF_STAGES >= CF_TIN_STAGES + 2
 * leaves the other warpgroup's mainloop two stages.  A PingPong warpgroup waits for its inputs
 * before the other's turn (see the tile loop). */
#define CF_TIN_CHUNK_BYTES (CF_TILE_M * 128)
#define CF_TIN_CHUNKS (CF_NUM_TIN * (CF_BN / 64))
#define CF_TIN_PER_STAGE (CF_STAGE_BYTES / CF_TIN_CHUNK_BYTES)
#define CF_TIN_STAGES ((CF_TIN_CHUNKS + CF_TIN_PER_STAGE - 1) / CF_TIN_PER_STAGE)
#if CF_NUM_TIN && CF_STAGES < CF_TIN_STAGES + 2
#error "tile inputs need CF_STAGES >= CF_TIN_STAGES + 2"
#endif
/* shared address of chunk j (input j / (CF_BN / 64), columns 64 (j % (CF_BN / 64)) ..) of this
 * warpgroup's rows of the tile */
__device__ __forceinline__ unsigned cf_tin_chunk(const cf_tile &t, int j) {
    const int s = (t.tin_pos + j / CF_TIN_PER_STAGE) % CF_STAGES;
    return t.ring + s * CF_STAGE_BYTES + (j % CF_TIN_PER_STAGE) * CF_TIN_CHUNK_BYTES +
           (CF_PINGPONG ? 0 : t.wg * CF_BM * 128);
}
/* Before the first stage that reads a tile input: the tile's input stages have landed. */
__device__ __forceinline__ void cf_tin_wait(const cf_tile &t) {
#pragma unroll
    for (int e = 0; e < CF_TIN_STAGES; ++e) {
        const int p = t.tin_pos + e;
        cf_mbar_wait(t.ring_full + 8 * (p % CF_STAGES), (unsigned)(p / CF_STAGES) & 1u);
    }
}
/* After the last stage that reads one: every warp hands the stages back to the producer. */
__device__ __forceinline__ void cf_tin_release(const cf_tile &t);
/* Tile input q, one 8-register group at a time, AHEAD groups ahead of use (as cf_unpark_stream). */
template <int F16, int AHEAD> struct cf_tin_stream {
    unsigned raw[AHEAD > 0 ? AHEAD : 1][4];
    int q;
    __device__ __forceinline__ unsigned addr(const cf_tile &t, int g) const {
        constexpr int GPM = CF_ACC_PER_MT / 8;    /* groups per m64 sub-tile */
        const int mt = g / GPM, c = (g % GPM) / 4;
        return cf_swz_group(cf_tin_chunk(t, q * (CF_BN / 64) + c) + (mt * 64 + t.warp * 16) * 128, t.lane, g % 4);
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

#if CF_LATE_FINISH
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
    constexpr int GPM = CF_ACC_PER_MT / 8;    /* groups per m64 sub-tile */
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
#if CF_FINISHER && !CF_MID
    cf_mbar_wait(t.fin_bar + 8, (unsigned)(t.parks & 1) ^ 1u);   /* the finisher's store has read it */
#else
    if (t.tid == 0) cf_bulk_wait_read<0>();
    cf_named_bar_sync(t.bar_id, 128);
#endif
    CF_TRC_ADD(t, CF_TRC_PARK, tr0);
    if (t.kept)
        return;
#pragma unroll
    for (int g = 0; g < CF_ACC_REGS / 8; ++g)
        cf_stmatrix8<F16>(cf_group_addr(t, g), v + 8 * g);
#if CF_FINISHER
    cf_mbar_arrive(t.fin_bar);   /* release: the finisher's ldmatrix sees the tile */
#endif
}
/* Writes finished group g (the output's 16-bit type) where it was parked. */
template <int F16> __device__ __forceinline__ void cf_restage8(const cf_tile &t, int g, const float (&y)[8]) {
    cf_stmatrix8<F16>(cf_group_addr(t, g), y);
}
/* TMA-stores the restaged tile (the whole tile is staged: CF_STG_CHUNKS == CF_BN / 64). */
__device__ __forceinline__ void cf_store_staged(const cf_gemm_args &args, const cf_tile &t, int o) {
    cf_fence_proxy_async();
    CF_TRC_T0(tr0);
    cf_named_bar_sync(t.bar_id, 128);
    CF_TRC_ADD(t, CF_TRC_STORE, tr0);
    if (t.tid == 0) {
#pragma unroll
        for (int c = 0; c < CF_BN / 64; ++c) {
            const int col = t.n0 + c * 64;
            if (col < t.N && t.m0 < t.M) cf_tma_store_2d(&args.tma_out[o], t.stg + c * CF_STG_CHUNK_BYTES, col, t.m0);
        }
        cf_bulk_commit();
    }
}
#endif

/* ----------------------------------------------------------------------------------------
 * The kernel
 * -------------------------------------------------------------------------------------- */
/* Defined by the generated code AFTER this header; struct cf_pre (what cf_epilogue_preload
 * loads into registers for the epilogue) and struct cf_late are defined BEFORE it. */
struct cf_pre;
#if CF_LATE_FINISH
/* Per-row values a late finish needs. */
struct cf_late;
template <class FinishPrev>
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            const cf_pre &pre, cf_late &late, const FinishPrev &finish_prev);
struct cf_no_op {
    __device__ __forceinline__ void operator()() const {}
};
template <bool KEPT>
__device__ __forceinline__ void cf_epilogue_finish(const cf_gemm_args &args, const cf_tile &t, cf_late &late,
                                                   const float *kept);
#if CF_MID
__device__ __forceinline__ void cf_epilogue_mid(const cf_gemm_args &args, const cf_tile &t);
#endif
/* A consumer's late finish of its parked tile (with CF_MID, once the finisher's mid part is done). */
__device__ __forceinline__ void cf_finish_parked(const cf_gemm_args &args, const cf_tile &parked, cf_late &late) {
#if CF_MID
    CF_TR(parked.wg, parked.parks, CF_TRE_MID_WAIT, parked.tid);
    cf_mbar_wait(parked.fin_bar + 8, (unsigned)(parked.parks & 1));
    CF_TR(parked.wg, parked.parks, CF_TRE_MID_DONE, parked.tid);
#endif
    cf_epilogue_finish<false>(args, parked, late, nullptr);
}
#elif CF_DUAL
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            float (&acc2)[CF_ACC_REGS], const cf_pre &pre);
#else
__device__ __forceinline__ void cf_epilogue(const cf_gemm_args &args, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            const cf_pre &pre);
#endif
/* Before tile t's mainloop: the vectors its epilogue will read, into registers (pre) or L1
 * (cf_load_cols, cf_prefetch_cols/rows). */
__device__ __forceinline__ void cf_epilogue_preload(const cf_gemm_args &args, const cf_tile &t, cf_pre &pre);
#if CF_HAS_REDUCE
/* Epilogues with row reductions (cf_reduce.cuh): barriers of the cluster exchange, set up by one
 * thread before the kernel's first cluster sync so no peer can signal an uninitialised barrier. */
__device__ __forceinline__ void cf_reduce_init();
#endif

#if CF_GATHER_EARLY
__device__ __forceinline__ void cf_gather_early(const cf_gemm_args &args, cf_tile &t);
#endif
/* a consumer warp releases a ring stage: lane 0 arrives locally, or with multicast lane p < CLUSTER_N
 * arrives on CTA p's empty barrier (every CTA's producer multicasts into this stage) */
__device__ __forceinline__ void cf_release_stage(unsigned bar, int lane) {
#if CF_MULTICAST
    if (lane < CF_CLUSTER_N) cf_mbar_arrive_cluster(cf_mapa(bar, (unsigned)lane));
#else
    if (lane == 0) cf_mbar_arrive(bar);
#endif
}
__device__ __forceinline__ void cf_tin_release(const cf_tile &t) {
    /* the stages were read through the generic proxy and TMA (the async proxy) refills them:
     * the memory model orders the two only across a proxy fence */
    cf_fence_proxy_async();
    __syncwarp();   /* every lane's ldmatrix of the stages is done */
#pragma unroll
    for (int e = 0; e < CF_TIN_STAGES; ++e)
        cf_release_stage(t.ring_empty + 8 * ((t.tin_pos + e) % CF_STAGES), t.lane);
}

#ifndef CF_NUM_RED
#define CF_NUM_RED 0                               /* row reductions per tile (generated) */
#endif
extern "C" __device__ const int cf_kernel_info[22] = {
    CF_SM90_VERSION, CF_SMEM_BYTES, CF_BM, CF_BN, CF_TILE_M, CF_STAGES, CF_CLUSTER_N, CF_B_NK,
    CF_IN_F16, CF_NUM_OUT, CF_PINGPONG, CF_NUM_THREADS, CF_STG_CHUNKS, CF_GROUP_M, CF_A_BOX_ROWS,
    CF_B_NK ? CF_BN : 64, CF_ROW_CTAS, CF_RED_GLOBAL, CF_NUM_RED, CF_LATE_FINISH, CF_OUT_BOX_ROWS, CF_TIN_ARGS};


/* The CTA's i-th tile -> (row tile, column tile): row-group tile ct = cid + (i / CF_GROUP_TILES) *
 * nclusters, of which the CTA with rank `rank` takes CF_GROUP_TILES adjacent column tiles. */
__device__ __forceinline__ void cf_sched_tile(int i, int cid, int nclusters, int tiles_m, int groups_n, int rank,
                                              int &tm, int &tn) {
    const int ct = cid + (i / CF_GROUP_TILES) * nclusters;
    const int per_group = CF_GROUP_M * groups_n;
    const int gid = ct / per_group;
    const int first = gid * CF_GROUP_M;
    const int gsz = cf_imin(tiles_m - first, CF_GROUP_M);
    const int loc = ct - gid * per_group;
    tm = first + loc % gsz;
    tn = ((loc / gsz) * CF_ROW_CTAS + rank) * CF_GROUP_TILES + i % CF_GROUP_TILES;
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
#if CF_GATHER_EARLY
    t.gw_src = nullptr;
#endif
    t.epoch = 0;   /* CF_XCHG_L2: set from cf_launch_epoch before the first post */
    return t;
}

#if CF_XCHG_L2
/* The launch's epoch tags its partials, so the next launch (stream-ordered after this one, also
 * when replayed from a CUDA graph) cannot take a stale slot for its own.  One thread of the
 * producer's idle warps reads it and counts its CTA in; the CTA counted last advances it for the
 * next launch (0 is never used).  Doing this as the kernel starts, not as each CTA ends, keeps an
 * L2 round trip and a fence off every CTA's exit (2-3 % faster at K = 512). */
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
#endif

/* What every role of a CTA knows: its shared-memory layout and its stream of tiles. */
struct cf_cta {
    unsigned base, stg0;          /* the operand ring; the staging buffers after it */
    unsigned bar_full, bar_empty; /* the ring's mbarriers, a stage each */
    unsigned bar_fin;             /* CF_FINISHER: per consumer WG, parked / free */
    unsigned bar_pair;            /* CF_PAIR_TILES: full / empty, then the words */
    int M, N, K, tiles_m, groups_n, nkb;
    int nclusters, cid;           /* row groups, and this CTA's */
    int my_n;                     /* tiles of this CTA's stream (the same for all CTAs of a row group) */
    int rank;                     /* in the row group (a cluster's CTAs are consecutive) */
#if CF_CLUSTER_N > 1
    int cl_rank;
#endif
};
__device__ __forceinline__ cf_cta cf_cta_of(const cf_gemm_args &args) {
    extern __shared__ unsigned char cf_smem_raw[];
    cf_cta c;
    c.base = (cf_smem_u32(cf_smem_raw) + 1023u) & ~1023u;
    c.stg0 = c.base + CF_STAGES * CF_STAGE_BYTES;
    c.bar_full = c.stg0 + 2 * CF_STG_BYTES;
    c.bar_empty = c.bar_full + 8 * CF_STAGES;
    c.bar_fin = c.bar_empty + 8 * CF_STAGES;
    c.bar_pair = c.bar_fin + 32;
    c.M = args.M, c.N = args.N, c.K = args.K;
    c.tiles_m = (c.M + CF_TILE_M - 1) / CF_TILE_M;
    const int tiles_n = (c.N + CF_BN - 1) / CF_BN;
    c.groups_n = (tiles_n + CF_ROW_CTAS * CF_GROUP_TILES - 1) / (CF_ROW_CTAS * CF_GROUP_TILES);
    const int num_ct = c.tiles_m * c.groups_n;
    c.nkb = (c.K + CF_BK - 1) / CF_BK;
    c.nclusters = gridDim.x / CF_ROW_CTAS;
    c.cid = blockIdx.x / CF_ROW_CTAS;
    c.my_n = num_ct > c.cid ? (num_ct - c.cid + c.nclusters - 1) / c.nclusters * CF_GROUP_TILES : 0;
    c.rank = (int)(blockIdx.x % CF_ROW_CTAS);
#if CF_CLUSTER_N > 1
    c.cl_rank = (int)cf_cluster_ctarank();
#endif
    return c;
}

/* One thread, before any role starts: the ring's, the finisher's, the pair's and the exchange's
 * barriers. */
__device__ __forceinline__ void cf_init_barriers(const cf_cta &cta) {
#pragma unroll 1
    for (int s = 0; s < CF_STAGES; ++s) {
        cf_mbar_init(cta.bar_full + 8 * s, 1);
        /* one arrival per consumer warp (of every CTA of the cluster with multicast) */
        cf_mbar_init(cta.bar_empty + 8 * s, (CF_PINGPONG ? 4 : 8) * (CF_MULTICAST ? CF_CLUSTER_N : 1));
    }
#if CF_FINISHER
    for (int w = 0; w < 2; ++w) {
        cf_mbar_init(cta.bar_fin + 16 * w, 128);   /* every consumer thread has parked its part */
        /* the finisher's store has read the buffer; with CF_MID, every finisher thread has
         * restaged its part of the tile */
        cf_mbar_init(cta.bar_fin + 16 * w + 8, CF_MID ? 128 : 1);
    }
#endif
#if CF_PAIR_TILES
    cf_mbar_init(cta.bar_pair, 128);       /* WG0 has handed its row words over */
    cf_mbar_init(cta.bar_pair + 8, 128);   /* WG1 has read them */
#endif
#if CF_HAS_REDUCE
    cf_reduce_init();
#endif
#if CF_XCHG_L2
    cf_mbar_init(cf_smem_u32(&cf_epoch_bar), 1);
#endif
    cf_fence_barrier_init();
}

/* ---------------- producer warpgroup: the ring, in the consumers' order ---------------- */
__device__ __forceinline__ void cf_producer(const cf_gemm_args &args, const cf_cta &cta, int tid) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(CF_REG_PRODUCER));
#if CF_XCHG_L2
    if (tid == 32) cf_count_launch(args);
#endif
    if (tid == 0) {
        cf_prefetch_tma(&args.tma_a);
        cf_prefetch_tma(&args.tma_b);
#if CF_DUAL
        cf_prefetch_tma(&args.tma_b2);
#endif
        int stage = 0;
        unsigned phase = 0;
#pragma unroll 1
        for (int i = 0; i < cta.my_n; ++i) {
            int tm, tn;
            cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
            const int m0 = tm * CF_TILE_M, n0 = tn * CF_BN;
#pragma unroll 1
            for (int kb = 0; kb < cta.nkb; ++kb) {
                cf_mbar_wait(cta.bar_empty + 8 * stage, phase ^ 1);
                const unsigned fb = cta.bar_full + 8 * stage;
                cf_mbar_expect_tx(fb, CF_STAGE_BYTES);
                const unsigned sa = cta.base + stage * CF_STAGE_BYTES;
                const unsigned sb = sa + CF_A_STAGE_BYTES;
#if CF_MULTICAST
                cf_tma_load_2d_mc(sa + cta.cl_rank * (CF_A_BOX_ROWS * 128), &args.tma_a, fb, kb * CF_BK,
                                  m0 + cta.cl_rank * CF_A_BOX_ROWS, (unsigned short)((1u << CF_CLUSTER_N) - 1));
#else
                cf_tma_load_2d(sa, &args.tma_a, fb, kb * CF_BK, m0);
#endif
#pragma unroll
                for (int b = 0; b < CF_NUM_B; ++b) {   /* W1's tile, then (CF_DUAL) W2's */
#if CF_DUAL
                    const cf_tma_desc *tb = b ? &args.tma_b2 : &args.tma_b;
#else
                    const cf_tma_desc *tb = &args.tma_b;
#endif
                    const unsigned sbb = sb + b * CF_B_STAGE_BYTES;
#if CF_B_NK
                    cf_tma_load_2d(sbb, tb, fb, kb * CF_BK, n0);
#else
#pragma unroll
                    for (int j = 0; j < CF_BN / 64; ++j)
                        cf_tma_load_2d(sbb + j * (64 * 128), tb, fb, n0 + 64 * j, kb * CF_BK);
#endif
                }
                if (++stage == CF_STAGES) { stage = 0; phase ^= 1; }
            }
#if CF_NUM_TIN
            /* the tile's [M, N] epilogue inputs, into the next stage(s) (cf_tin_*) */
#pragma unroll 1
            for (int e = 0; e < CF_TIN_STAGES; ++e) {
                cf_mbar_wait(cta.bar_empty + 8 * stage, phase ^ 1);
                const unsigned fb = cta.bar_full + 8 * stage;
                const int j0 = e * CF_TIN_PER_STAGE, j1 = cf_imin(j0 + CF_TIN_PER_STAGE, CF_TIN_CHUNKS);
                int loads = 0;   /* chunks wholly right of N are not loaded: no column there is read */
                for (int j = j0; j < j1; ++j)
                    loads += n0 + 64 * (j % (CF_BN / 64)) < cta.N;
                cf_mbar_expect_tx(fb, loads * CF_TIN_CHUNK_BYTES);
                for (int j = j0; j < j1; ++j) {
                    const int col = n0 + 64 * (j % (CF_BN / 64));
                    if (col < cta.N)
                        cf_tma_load_2d(cta.base + stage * CF_STAGE_BYTES + (j - j0) * CF_TIN_CHUNK_BYTES,
                                       &args.tma_in[j / (CF_BN / 64)], fb, col, m0);
                }
                if (++stage == CF_STAGES) { stage = 0; phase ^= 1; }
            }
#endif
        }
    }
    __syncwarp();
}

#if CF_FINISHER
    /* ---------------- finisher warpgroup ----------------
     * Runs Psi's cf_epilogue_finish on each parked tile, in the order the consumers park them
     * (pingpong: WG0, WG1, WG0, ...), as if it were the warpgroup that parked it: same thread
     * to fragment mapping, that warpgroup's staging buffer, its own named barrier. */
    __device__ __forceinline__ void cf_finisher(const cf_gemm_args &args, const cf_cta &cta, int tid) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(CF_REG_FINISHER));
    cf_tile t = cf_wg_tile(args, cta.M, cta.N, tid, cta.rank, CF_BAR_FIN);
#if CF_XCHG_L2
    t.epoch = cf_launch_epoch();
#endif
#pragma unroll 1
    for (int i = 0; i < cta.my_n; ++i) {
        const int w = i & 1;
        int tm, tn;
        cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
        t.wg = w; t.tile_m = tm; t.tile_n = tn;
        t.m0 = tm * CF_TILE_M; t.n0 = tn * CF_BN;
        t.stg = cta.stg0 + w * CF_STG_BYTES;
        t.fin_bar = cta.bar_fin + 16 * w;
        CF_TR(w, i >> 1, CF_TRE_FIN_WAIT, t.tid);
        cf_mbar_wait(t.fin_bar, (unsigned)(i >> 1) & 1u);   /* that warpgroup's (i / 2)-th park */
        CF_TR(w, i >> 1, CF_TRE_FIN_WORK, t.tid);
#if CF_MID
        cf_epilogue_mid(args, t);
        cf_mbar_arrive(t.fin_bar + 8);   /* release: the consumer's late finish sees the tile */
#else
        cf_late late;   /* rebuilt from the tile's own posted words (cf_reduce.cuh) */
        cf_epilogue_finish<false>(args, t, late, nullptr);
        if (t.tid == 0) {
            cf_bulk_wait_read<0>();
            cf_mbar_arrive(t.fin_bar + 8);
        }
#endif
        CF_TR(w, i >> 1, CF_TRE_FIN_DONE, t.tid);
    }
    if (t.tid == 0) cf_bulk_wait_read<0>();   /* the buffer is read; the writes need not land before exit */
#ifdef CF_TRACE
    for (int c = 0; c < CF_TRC_N; ++c) cf_trace_at(2, CF_TRACE_TILES, CF_TRS_CAT0 + c, t.tid, cf_tr_cat[2][c]);
#endif
}
#endif

/* ---------------- consumer warpgroups: mainloop and epilogue, tile after tile ---------------- */
/* One k-block of the mainloop: its wgmma over the ring stage at sa (X) and sb (W); the first
 * k-block of a tile overwrites the accumulator. */
__device__ __forceinline__ void cf_mma_kblock(float (&acc)[CF_ACC_REGS], float (&acc2)[CF_ACC_REGS], unsigned sa,
                                              unsigned sb, int kb) {
    (void)acc2;   /* CF_DUAL: X * W2 */
#pragma unroll
    for (int k = 0; k < CF_BK / 16; ++k) {
#if CF_B_NK
        const unsigned long long db = cf_desc(sb + 32 * k, 16, 1024);
#else
        const unsigned long long db = cf_desc(sb + 2048 * k, 64 * 128, 1024);
#endif
#if CF_DUAL   /* W2's tile follows W1's in the stage */
#if CF_B_NK
        const unsigned long long db2 = cf_desc(sb + CF_B_STAGE_BYTES + 32 * k, 16, 1024);
#else
        const unsigned long long db2 = cf_desc(sb + CF_B_STAGE_BYTES + 2048 * k, 64 * 128, 1024);
#endif
#endif
#pragma unroll
        for (int mt = 0; mt < CF_BM / 64; ++mt) {
            const unsigned long long da = cf_desc(sa + mt * 8192 + 32 * k, 16, 1024);
            cf_wgmma_tile<CF_B_NK ? 0 : 1>(acc + mt * CF_ACC_PER_MT, da, db, (kb > 0 || k > 0) ? 1 : 0);
#if CF_DUAL
            /* the same X slice against W2's tile */
            cf_wgmma_tile<CF_B_NK ? 0 : 1>(acc2 + mt * CF_ACC_PER_MT, da, db2, (kb > 0 || k > 0) ? 1 : 0);
#endif
        }
    }
}

/* A consumer warpgroup's mainloop of its i-th tile: its turn for the tensor cores (PingPong),
 * the k-blocks from ring position pos on, the other warpgroup's turn, the accumulator complete. */
__device__ __forceinline__ void cf_mainloop(const cf_cta &cta, const cf_tile &t, float (&acc)[CF_ACC_REGS],
                                            float (&acc2)[CF_ACC_REGS], int i, int istep, int pos, unsigned a_off) {
    const int w = t.wg, nkb = cta.nkb, my_n = cta.my_n;
    const unsigned base = cta.base, bar_full = cta.bar_full, bar_empty = cta.bar_empty;
    (void)my_n;
    int stage = pos % CF_STAGES;
    unsigned phase = (unsigned)(pos / CF_STAGES) & 1u;
    int prev_stage = 0;
    CF_TR(w, i / istep, CF_TRE_ORDER, t.tid);
#if CF_PINGPONG
    if (i >= 2 || w == 1) cf_named_bar_sync(CF_BAR_ORDER0 + w, 256);   /* my turn for the tensor cores */
#endif
    CF_TR(w, i / istep, CF_TRE_TURN, t.tid);
    cf_fence_operand<CF_ACC_REGS>(acc);
#if CF_DUAL
    cf_fence_operand<CF_ACC_REGS>(acc2);
#endif
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
        const unsigned sa = base + stage * CF_STAGE_BYTES + a_off;
        const unsigned sb = base + stage * CF_STAGE_BYTES + CF_A_STAGE_BYTES;
        cf_wgmma_fence();
        cf_mma_kblock(acc, acc2, sa, sb, kb);
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
        if (++stage == CF_STAGES) { stage = 0; phase ^= 1; }
#if CF_TRACE_WAITS
        tr_rest += clock64() - tr2;   /* the release and the loop */
#endif
    }
#if CF_TRACE_WAITS
    const long long tr_d0 = clock64();
    CF_TR_V(w, i / istep, CF_TRE_KLOOP_END, t.tid, tr_d0);   /* the k-loop ends */
#endif
#if CF_PINGPONG && CF_NUM_TIN
    /* This tile's input stages land before the other warpgroup's turn.  It consumes the
     * stages after them, and a wait on a stage whose previous fill has not landed yet
     * passes at once (the parity it waits for is that of the fill before): the inputs
     * come from HBM and can land after the other warpgroup's next k-blocks. */
    cf_tin_wait(t);
#endif
#if CF_PINGPONG
    if (i + 1 < my_n) cf_named_bar_arrive(CF_BAR_ORDER0 + (1 - w), 256);   /* other WG's turn */
#endif
    cf_wgmma_wait<0>();
    cf_release_stage(bar_empty + 8 * prev_stage, t.lane);
    cf_fence_operand<CF_ACC_REGS>(acc);
#if CF_DUAL
    cf_fence_operand<CF_ACC_REGS>(acc2);
#endif
    CF_TR(w, i / istep, CF_TRE_ACC, t.tid);
#if CF_TRACE_WAITS
    CF_TR_V(w, i / istep, CF_TRE_WAIT_DATA, t.tid, tr_data);
    CF_TR_V(w, i / istep, CF_TRE_WAIT_MMA, t.tid, tr_mma);
    CF_TR_V(w, i / istep, CF_TRE_ISSUE, t.tid, tr_issue);
    CF_TR_V(w, i / istep, CF_TRE_RELEASE, t.tid, tr_rest);
    CF_TR_V(w, i / istep, CF_TRE_DRAIN, t.tid, clock64() - tr_d0);   /* the last k-block's drain */
#endif
}

__device__ __forceinline__ void cf_consumer(const cf_gemm_args &args, const cf_cta &cta, int tid, int wg) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(CF_REG_CONSUMER));
    const int w = wg - 1;
    float acc[CF_ACC_REGS];
#if CF_DUAL
    float acc2[CF_ACC_REGS];   /* X * W2 */
#else
    float (&acc2)[CF_ACC_REGS] = acc;   /* one accumulator: the mainloop's second is never touched */
#endif
    cf_pre pre;
    cf_tile t = cf_wg_tile(args, cta.M, cta.N, tid, cta.rank, CF_BAR_EPI0 + w);
    t.wg = w;
    t.stg = cta.stg0 + w * CF_STG_BYTES;
    t.fin_bar = cta.bar_fin + 16 * w;
    t.pair_bar = cta.bar_pair;
    t.ring = cta.base;
    t.ring_full = cta.bar_full;
    t.ring_empty = cta.bar_empty;
#if CF_PINGPONG
    const int istart = w, istep = 2;
    const unsigned a_off = 0;
#else
    const int istart = 0, istep = 1;
    const unsigned a_off = w * CF_BM * 128;
#endif
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_START, t.tid, clock64());
#endif
#if CF_LATE_FINISH
    cf_late late;
#if !CF_FINISHER || CF_MID
    cf_tile parked = t;     /* the tile waiting for its finish, if parked_ok */
    bool parked_ok = false;
#endif
#if CF_POST_FIRST
    cf_late late_prev;      /* its statistics */
#endif
#endif
#pragma unroll 1
    for (int i = istart; i < cta.my_n; i += istep) {
        int tm, tn;
        cf_sched_tile(i, cta.cid, cta.nclusters, cta.tiles_m, cta.groups_n, cta.rank, tm, tn);
        const int pos = i * (cta.nkb + CF_TIN_STAGES);   /* ring stages per tile: k-blocks, then inputs */
        t.tin_pos = pos + cta.nkb;
        {   /* this tile's vectors for the epilogue, loaded while its mainloop runs */
            cf_tile next = t;
            next.m0 = tm * CF_TILE_M + (CF_PINGPONG ? 0 : w * CF_BM);
            next.n0 = tn * CF_BN;
            cf_epilogue_preload(args, next, pre);
        }
        cf_mainloop(cta, t, acc, acc2, i, istep, pos, a_off);
#if CF_XCHG_L2
        if (i == istart) t.epoch = cf_launch_epoch();
#endif
        t.tile_m = tm; t.tile_n = tn;
        t.m0 = tm * CF_TILE_M + (CF_PINGPONG ? 0 : w * CF_BM);
        t.n0 = tn * CF_BN;
        t.parks = i / istep;
#if CF_LATE_FINISH && !CF_FINISHER
        /* A warpgroup's last tile is not parked: it finishes from registers after the loop,
         * so the tail has no park and unpark (LN 1.4 %, softmax 0.6 % faster at
         * K = 512; LN+softmax spills 44 bytes more with it and ran 0.9 % slower). */
        t.kept = CF_KEEP_LAST && i + istep >= cta.my_n;
#endif
#if CF_LATE_FINISH && CF_FINISHER && !CF_MID
        cf_epilogue(args, t, acc, pre, late, cf_no_op{});   /* parks the tile for the finisher */
#elif CF_LATE_FINISH && !CF_POST_FIRST
        /* the previous tile's row partials arrived during this mainloop */
        {
            CF_TRC_T0(trf);
            if (parked_ok) cf_finish_parked(args, parked, late);
            CF_TRC_ADD(t, CF_TRC_FINISH, trf);
        }
        cf_epilogue(args, t, acc, pre, late, cf_no_op{});
        parked = t;
        parked_ok = true;
#elif CF_LATE_FINISH
        /* This tile posts its partials first, then finishes the previous one (its partials
         * arrived during this mainloop), then parks: the last tile's partials travel while
         * the previous tile finishes (RMSNorm 2-3 %, LN+softmax 2-4 % faster at K <= 1024;
         * docs/performance.md, "Post first").  Paired tiles keep the finish first: their park
         * then waits for the store just issued, and LN and softmax ran 1 % slower. */
#if CF_GATHER_EARLY
        /* the parked tile's words travel while this tile's first part runs ("Gather early") */
        if (parked_ok) cf_gather_early(args, parked);
#endif
        cf_epilogue(args, t, acc, pre, late, [&] {
            CF_TRC_T0(trf);
            if (parked_ok) cf_finish_parked(args, parked, late_prev);
            CF_TRC_ADD(t, CF_TRC_FINISH, trf);
        });
        late_prev = late;
        parked = t;
        parked_ok = true;
#elif CF_DUAL
        cf_epilogue(args, t, acc, acc2, pre);
#else
        cf_epilogue(args, t, acc, pre);
#endif
        CF_TR(w, i / istep, CF_TRE_EPI_DONE, t.tid);
    }
#if CF_LATE_FINISH && !CF_FINISHER && CF_KEEP_LAST
    if (t.kept) {   /* the last tile, in registers; the one before it finished in its epilogue */
        CF_TRC_T0(trf);
        cf_epilogue_finish<true>(args, t, late, acc);
        CF_TRC_ADD(t, CF_TRC_FINISH, trf);
    }
#elif CF_POST_FIRST
    if (parked_ok) cf_finish_parked(args, parked, late_prev);
#elif CF_LATE_FINISH && (!CF_FINISHER || CF_MID)
    if (parked_ok) cf_finish_parked(args, parked, late);
#endif
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_LAST_FINISH, t.tid, clock64());
#endif
    /* every warp's stores have read the staging buffer: all a CTA must wait for before it exits
     * (the grid completes only once its bulk writes have) */
    if (t.lane == 0) cf_bulk_wait_read<0>();
#ifdef CF_TRACE
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_END, t.tid, clock64());
    cf_trace_at(w, CF_TRACE_TILES, CF_TRS_TILES, t.tid, (cta.my_n - w + 1) / 2);
    for (int c = 0; c < CF_TRC_N; ++c) cf_trace_at(w, CF_TRACE_TILES, CF_TRS_CAT0 + c, t.tid, cf_tr_cat[w][c]);
#endif
}

/* The kernel: the CTA's layout, its barriers, then each warpgroup runs its role. */
extern "C" __global__ void __launch_bounds__(CF_NUM_THREADS, 1)
cf_gemm_kernel(const __grid_constant__ cf_gemm_args args) {
    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);   /* warp-uniform for the compiler: uniform registers */
    const cf_cta cta = cf_cta_of(args);
#ifdef CF_TRACE
    if (tid < CF_TRACE_ROLES * CF_TRC_N) cf_tr_cat[tid / CF_TRC_N][tid % CF_TRC_N] = 0;
#endif
    if (tid == 0) cf_init_barriers(cta);
    __syncthreads();
#if CF_CLUSTER_N > 1
    cf_cluster_sync();
#endif
    if (wg == 0)
        cf_producer(args, cta, tid);
#if CF_FINISHER
    else if (wg == 3)
        cf_finisher(args, cta, tid);
#endif
    else
        cf_consumer(args, cta, tid, wg);
#if CF_CLUSTER_N > 1
    cf_cluster_sync();
#endif
}

#endif /* CF_SM90_CUH */
