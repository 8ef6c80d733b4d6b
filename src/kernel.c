/* kernel.c — the fused-kernel object: Φ + Ψ + NVRTC, then launches.
 *
 * cf_kernel_build lowers and generates source; cf_kernel_compile turns it
 * into a cubin through the cache (no GPU needed); cf_kernel_launch checks the
 * shapes and alignments, builds the TMA descriptors and the kernel's parameter
 * block, and launches on a persistent grid of thread-block clusters.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

/* Indices of the kernel's exported configuration (cf_kernel_info in
 * src/device/cf_sm90.cuh). */
#define DEVICE_HEADER_VERSION 6 /* CF_SM90_VERSION this host code packs arguments for */

enum {
    INFO_VERSION, INFO_SMEM, INFO_BM, INFO_BN, INFO_TILE_M, INFO_STAGES, INFO_CLUSTER_N, INFO_B_NK,
    INFO_IN_F16, INFO_NUM_OUT, INFO_PINGPONG, INFO_THREADS, INFO_STG_CHUNKS, INFO_GROUP_M,
    INFO_A_BOX_ROWS, INFO_B_BOX, INFO_ROW_CTAS, INFO_RED_GLOBAL, INFO_NUM_RED, INFO_LATE_FINISH, INFO_OUT_BOX_ROWS,
    INFO_TIN_ARGS, INFO_COUNT
};

struct cf_kernel {
    const cf_graph *graph;
    cf_ir *ir;
    cf_options opt;
    cf_strbuf src;
    bool gather_early;   /* Psi loads a parked tile's late gather as the next mainloop ends */
    cf_rt_cubin cubin;
    bool compiled;
    int info[INFO_COUNT];
    /* loaded on the first launch */
    cf_rt_module module;
    cf_rt_func func;
    int max_clusters;
    /* Row partials exchanged through L2 (CF_RED_GLOBAL): 8-byte slots, and
     * the epoch / finished-CTA counters the kernel keeps; see cf_reduce.cuh. */
    cf_rt_devptr xchg, xsync;
    size_t xchg_bytes;
    /* Rows wider than a cluster: our GEMM into an f32 buffer, then the row
     * kernel (rows.c) runs the epilogue; built on the first such launch. */
    /* By IR arg: the padded copy of a tensor TMA cannot address in place (see staging). */
    struct padded {
        cf_rt_devptr buf;
        size_t bytes;
    } *padded;
    struct {
        cf_graph *graph;     /* X, W -> C = X @ W as f32                          */
        cf_kernel *gemm;
        cf_rows *rows;
        cf_rt_devptr c;
        size_t c_bytes;
    } wide;
};

/* [N] vectors (LN's gamma and beta) the epilogue's last stage reads: what a finisher does a
 * tile grows with them. */
static int last_stage_vectors(const cf_ir *ir)
{
    const cf_ir_spec *sp = ir->epi[0];
    while (sp && sp->post)
        sp = sp->post;
    int n = 0;
    for (int i = 0; sp && i < sp->n_nodes; i++)
        n += sp->nodes[i]->kind == CF_IR_BCAST && sp->nodes[i]->shape == CF_SHAPE_VEC_N;
    return n;
}

static bool has_class(const cf_graph *g, cf_op_class cls)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (cf_op_class_of(g->nodes[i].op) == cls)
            return true;
    return false;
}

static bool has_reductions(const cf_graph *g) { return has_class(g, CF_OPC_REDUCE); }

cf_options cf_options_for(const cf_graph *g, int64_t m, int64_t n, int64_t k)
{
    (void)m;
    /* 128x128 PingPong tiles, 6 stages, no cluster: PingPong hides one warpgroup's
     * epilogue under the other's mainloop, and a 2-CTA cluster couples the two CTAs'
     * rings (6 % slower with multicast at 8192x4096x4096; docs/performance.md, "The
     * mainloop"). */
    cf_options o = {.block_m = 128, .block_n = n > 0 && n <= 64 ? 64 : 128, .stages = 6, .cluster_n = 1,
                    .schedule = CF_SCHEDULE_PINGPONG};
    if (g && !has_reductions(g) && !has_class(g, CF_OPC_UNARY) && !has_class(g, CF_OPC_BINARY) && k >= 4096) {
        /* A bare GEMM has no epilogue to hide, and from K = 4096 cuBLAS's own shape, both
         * warpgroups on one 256x128 tile with X multicast over a 2-CTA cluster, moves a third
         * fewer operand bytes per FLOP than a PingPong tile (1.026-1.029 of cuBLAS at full
         * clock against PingPong's 1.044-1.065; a wash under the power cap).  With elementwise
         * work PingPong hides it: bias+GELU at 8192x4096x4096 ran 0.99 against cooperative's
         * 1.036 under the power cap, in every one of ten turns, and lost ~1 % at full clock
         * (docs/performance.md, "A bare GEMM").  The ring then holds 4 stages of 48 KB. */
        o.schedule = CF_SCHEDULE_COOPERATIVE;
        o.cluster_n = 2;
    }
    if (g && has_reductions(g)) {
        /* A row block's column tiles run at once on cluster_n CTAs that exchange
         * row partials through L2 (docs/performance.md, "Row exchanges": a hardware cluster of
         * 4 or more CTAs keeps only 120 of 132 SMs busy and couples the CTAs'
         * pipelines, +25-30 % before any epilogue work); rows up to 64 x 128.  A row group is
         * exactly the row's column tiles (any count, no idle padding CTAs): through L2 it needs
         * no power of two. */
        int64_t tiles = n > 0 ? (n + o.block_n - 1) / o.block_n : 1;
        o.cluster_n = (int)(tiles < 64 ? tiles : 64);
        o.reduce_mode = CF_REDUCE_GLOBAL;
        /* Tiles that finish late park in shared memory, which takes the sixth stage; so do
         * synchronous exchanges over more than 16 CTAs, which land the row's words in each
         * warp's staging boxes in one round (cf_gather_stage) and need a whole tile's staging. */
        cf_ir *ir = NULL;
        cf_error err;
        cf_cg_options cg = {.bm = o.block_m, .bn = o.block_n, .stages = 5, .cluster_n = 1,
                            .row_ctas = o.cluster_n, .red_global = o.cluster_n > 1};
        if (cf_lower(g, &ir, &err) == CF_OK) {
            const bool late = o.cluster_n > 1 && cf_cg_finishes_late(ir, &cg);
            if (late || (o.cluster_n > 16 && o.cluster_n <= 32))
                o.stages = 5;
            /* Two column tiles per CTA halve the ranks a row gathers, where the late exchange
             * is the only one.  It pays where a lane would load 32 partials or more (16 CTAs
             * of pairs, 32 of single partials: LN and softmax 5-7 % faster at 16 CTAs a row,
             * 3-4 % at 32; LN 1.288 -> 1.230 at 16 CTAs), and with K >= 1024 from 8 CTAs a
             * row, where it also beats the finisher (docs/performance.md, "Pair tiles": softmax
             * 1.152 with the finisher, 1.082 paired at 16384x1024x1024; RMSNorm 1.048 -> 1.018
             * at 16384x2048x1024, 1.073 -> 1.063 at 8 CTAs).  Not at K = 512 with 16 CTAs of
             * single partials (RMSNorm 1.194 -> 1.22), nor at 4 CTAs (1.15 -> 1.23), nor where
             * the late stage reads two [N] vectors (LN's gamma and beta: its finish is the
             * heaviest) unless K >= 1024 and a round is saved (LN unpaired 1.375 -> 1.317
             * at 4096x2048x512, 1.155 -> 1.147 at 16384x1024x1024; paired 1.158 -> 1.124 at
             * 16384x2048x1024). */
            cf_cg_options pair = cg;
            pair.row_ctas = (o.cluster_n + 1) / 2;
            pair.pair_tiles = true;
            const int vectors = last_stage_vectors(ir);
            const bool heavy_finish = vectors >= 2, long_k = k >= 1024;
            const int words = cf_cg_gather_words(ir, &cg);   /* a lane's, over the row's ranks */
            const bool saves_round = words >= 32;
            /* Below K = 1024 an unpaired tile whose gather loads as the mainloop ends beats the
             * pair (softmax 1.259 -> 1.235 at 4096x2048x512; paired still wins at K = 1024,
             * 1.073 against 1.105), and at K = 1024 where the row is 8 CTAs of single words
             * (RMSNorm at 16384x1024x1024: 0.4-1 % faster unpaired in five calls; at
             * 16 CTAs the pair wins, 1.018 against 1.036). */
            const bool single_words = words == o.cluster_n;   /* 128-row tiles: a lane per row */
            const bool early = (!long_k || (o.cluster_n <= 8 && single_words)) && cf_cg_gathers_early(ir, &cg);
            bool paired = o.cluster_n >= 4 && !early && cf_cg_can_pair(ir, &pair) &&
                          (heavy_finish ? saves_round && long_k : saves_round || (o.cluster_n >= 8 && long_k));
            /* A finisher warpgroup pays where a consumer's epilogue (first part and late finish,
             * ~3.2k cycles per reduction + ~2.4k per round of 8 ranks' L2 loads) outlasts the
             * other warpgroup's mainloop (~8.3 K cycles a tile), and only if the finisher keeps
             * up: ~3k + 2.4k per round a tile, and ~1.2k per [N] vector its stage reads (with
             * 120 registers it reloads them).  Fitted to same-call A/Bs (docs/performance.md,
             * "The finisher"): at 16384x1024x1024 softmax 1.27 -> 1.18, RMSNorm (epilogue hidden)
             * and K = 4096 unchanged, N = 2048 at K <= 1024 (not kept up) 4-14 % slower; LN's
             * finisher works 8.8k a tile (softmax's 6.8k) and LN ran 1.198 with it against 1.141
             * without.  Not for more than two reductions (LN+softmax's mid part, CF_MID): since
             * its PingPong kernel finishes the previous tile inside its first wait, that ran 1.448
             * against the mid part's 1.507 at 16384x1024x1024; --schedule finisher still builds it. */
            const int rounds = (o.cluster_n + 7) / 8, reductions = ir->n_stages[0] - 1;
            const double mainloop = 8.3 * (double)k;
            const double finisher_work = 3000.0 + 2400.0 * rounds + 1200.0 * vectors;
            cg.finisher = true;
            if (!paired && reductions <= 2 && o.cluster_n > 1 && cf_cg_has_finisher(ir, &cg) &&
                finisher_work <= 0.8 * mainloop &&
                3200.0 * reductions + 2400.0 * rounds > 0.9 * mainloop)
                o.schedule = CF_SCHEDULE_FINISHER;
            if (paired) {
                o.pair_tiles = 1;
                o.cluster_n = (o.cluster_n + 1) / 2;
                o.stages = 5;
            }
            /* Four or more reductions (LN+softmax) spill ~500 bytes per thread; up to
             * K = 2048 a stage fewer, 32 KB more L1 for the spills, is faster (2.61 -> 2.52,
             * 2.22 -> 2.07, 1.99 -> 1.96 of cuBLAS); at K = 4096 not (docs/performance.md, "LN+softmax"). */
            if (ir->n_stages[0] - 1 >= 4 && k > 0 && k <= 2048)
                o.stages--;
            /* With two tiles a warpgroup (K = 512) a late finish defers three quarters of the
             * output's stores to the tail, where every CTA writes at once.  LN+softmax's first
             * exchange waits at once anyway, and finishing every tile at once ran 2.03 -> 1.96 of
             * cuBLAS at 4096x2048x512 (3-15 % slower at K >= 1024, and RMSNorm, LN, softmax
             * 11-29 % slower at K = 512; docs/performance.md, "LN+softmax"). */
            if (ir->n_stages[0] - 1 >= 4 && k > 0 && k <= 512) {
                o.sync_finish = 1;
                o.stages = 6;
            }
            /* At K = 4096 the 128x128 mainloop is L2-bound (back to back the fused kernels ran
             * 1.08-1.20 of cuBLAS while its cluster-2 GEMM ran 1.01); pairs of CTAs multicasting
             * their X rows ran 0.90-0.94 of that with W as [N,K], 0.98-1.01 as [K,N], and 1-4.5 %
             * slower at K <= 1024 (docs/performance.md, "X multicast"). */
            if (k >= 4096 && o.cluster_n > 1 && o.cluster_n % 2 && o.cluster_n < 64)
                o.cluster_n++;   /* multicast pairs: an odd row group gets one idle CTA */
            if (k >= 4096 && o.cluster_n % 2 == 0)
                o.multicast = 1;
        }
        cf_ir_free(ir);
    } else {
        o.reduce_mode = CF_REDUCE_PEER; /* unused without reductions */
    }
    return o;
}

static int pow2_at_least(int c)
{
    int p = 1;
    while (p < c)
        p *= 2;
    return p;
}

void cf_options_fill(cf_options *o, cf_options def)
{
    if (!o->reduce_mode)
        o->reduce_mode = def.reduce_mode;
    if (!o->sync_finish)
        o->sync_finish = def.sync_finish ? def.sync_finish : -1;
    /* a schedule given against the default's takes that schedule's own cluster */
    if (o->schedule && o->schedule != def.schedule && def.reduce_mode != CF_REDUCE_GLOBAL)
        def.cluster_n = o->schedule == CF_SCHEDULE_COOPERATIVE ? 2 : 1;
    /* the finisher was chosen for the default late finish and its stages */
    const bool shape_given = o->stages || o->block_m || o->block_n || o->cluster_n;
    if (def.schedule == CF_SCHEDULE_FINISHER &&
        (o->sync_finish == 1 || shape_given || (o->reduce_mode && o->reduce_mode != CF_REDUCE_GLOBAL)))
        def.schedule = CF_SCHEDULE_PINGPONG;
    /* the pair was chosen for the default's late finish, row group and schedule */
    if (!o->pair_tiles)
        o->pair_tiles = def.pair_tiles == 1 && o->sync_finish != 1 && !shape_given &&
                                (!o->reduce_mode || o->reduce_mode == CF_REDUCE_GLOBAL) &&
                                (!o->schedule || o->schedule == CF_SCHEDULE_PINGPONG)
                            ? 1
                            : -1;
    if (def.pair_tiles == 1 && o->pair_tiles != 1 && def.cluster_n < 64)
        def.cluster_n *= 2;   /* a CTA per tile again */
    else if (def.pair_tiles != 1 && o->pair_tiles == 1 && def.cluster_n > 1) {
        def.cluster_n = (def.cluster_n + 1) / 2;
        if (def.schedule == CF_SCHEDULE_FINISHER)
            def.schedule = CF_SCHEDULE_PINGPONG;   /* the pair's warpgroups finish their own tiles */
    }
    if (!o->schedule)
        o->schedule = def.schedule;
    /* def is for a graph with reductions when its mode is global.  The DSMEM
     * modes hold a row in one hardware cluster (at most 16 CTAs: 64x256 tiles
     * past 2048 columns), and their static buffers take two stages' room. */
    if (def.reduce_mode == CF_REDUCE_GLOBAL && o->reduce_mode == CF_REDUCE_GLOBAL && o->sync_finish == 1)
        def.stages = 6; /* nothing parked in shared memory */
    else if (def.sync_finish == 1)
        def.stages = 4; /* the late finish's depth there: a stage parks, one more for the spills */
    if (def.reduce_mode == CF_REDUCE_GLOBAL && o->reduce_mode != CF_REDUCE_GLOBAL) {
        def.stages = 4;
        def.cluster_n = pow2_at_least(def.cluster_n);   /* a hardware cluster */
        if (def.cluster_n > 16 && !o->block_m && !o->block_n && !o->cluster_n) {
            def.block_m = 64;
            def.block_n = 256;
            def.cluster_n /= 2;
        }
        if (def.cluster_n > 16)
            def.cluster_n = 16;   /* the largest cluster: wider rows take the wide-row path */
    }
    /* a row group covers N: wider tiles given without a row-group size need fewer CTAs
     * (64x256 tiles over the default 8 CTAs of N = 1024 ran half the grid on empty tiles) */
    if (o->block_n && !o->cluster_n && def.cluster_n > 1 && o->block_n != def.block_n) {
        int c = (int)(((int64_t)def.cluster_n * def.block_n + o->block_n - 1) / o->block_n);
        def.cluster_n = c < 1 ? 1 : o->reduce_mode == CF_REDUCE_GLOBAL ? c : pow2_at_least(c);
    }
    if (!o->block_m)
        o->block_m = def.block_m;
    if (!o->block_n)
        o->block_n = def.block_n;
    if (!o->stages)
        o->stages = def.stages; /* cf_kernel_build lowers it until the plan fits shared memory */
    if (o->multicast == 1 && def.cluster_n > 1 && def.cluster_n % 2 && def.cluster_n < 64)
        def.cluster_n++;   /* multicast pairs: an odd row group gets one idle CTA */
    if (!o->cluster_n)
        o->cluster_n = def.cluster_n;
    if (!o->multicast)
        o->multicast = def.multicast == 1 && o->reduce_mode == CF_REDUCE_GLOBAL && o->cluster_n % 2 == 0 ? 1 : -1;
}

void cf_kernel_free(cf_kernel *k)
{
    if (!k)
        return;
    if (k->module)
        cf_rt_module_unload(k->module, NULL);
    if (k->wide.c)
        cf_rt_free(k->wide.c, NULL);
    if (k->xchg)
        cf_rt_free(k->xchg, NULL);
    if (k->xsync)
        cf_rt_free(k->xsync, NULL);
    for (int i = 0; k->padded && i < k->ir->n_args; i++)
        if (k->padded[i].buf)
            cf_rt_free(k->padded[i].buf, NULL);
    free(k->padded);
    cf_rows_free(k->wide.rows);
    cf_kernel_free(k->wide.gemm);
    cf_graph_free(k->wide.graph);
    cf_rt_cubin_free(&k->cubin);
    cf_sb_free(&k->src);
    cf_ir_free(k->ir);
    free(k);
}

/* Every plan is checked against shared memory before code is generated: the depth is lowered
 * until it fits (cf_options.stages is the deepest wanted), and a tile that fits at no depth is
 * refused. */
static cf_status check_smem(const cf_ir *ir, cf_cg_options *cg, cf_error *err)
{
    cf_cg_smem m = cf_cg_plan_smem(ir, cg);
    while (!m.fits && cg->stages > 2) {
        cg->stages--;
        m = cf_cg_plan_smem(ir, cg);
    }
    if (m.fits)
        return CF_OK;
    return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                     "shared memory: %d stages of a %dx%d tile need %ld bytes dynamic + %d static, over the "
                     "%d-byte limit per CTA; use a narrower tile (--block-n) or another schedule",
                     cg->stages, cg->cooperative ? 2 * cg->bm : cg->bm, cg->bn, m.dynamic_bytes, m.static_bytes,
                     CF_SMEM_OPTIN);
}

cf_status cf_kernel_build(const cf_graph *g, const cf_options *opt, const char *title, cf_kernel **out,
                          cf_error *err)
{
    cf_error_clear(err);
    if (!g || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_build: NULL argument");
    *out = NULL;
    cf_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    k->graph = g;
    k->opt = opt ? *opt : (cf_options){0};
    cf_options_fill(&k->opt, cf_options_for(g, 0, 0, 0));
    cf_status st;
    const cf_options *o = &k->opt;
    /* A row inside one tile needs no exchange at all, so no L2 slots either. */
    const bool reduces = has_reductions(g);
    const bool global = o->reduce_mode == CF_REDUCE_GLOBAL && reduces && o->cluster_n > 1;
    if (o->block_m != 64 && o->block_m != 128)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "block_m %d: must be 64 or 128", o->block_m);
    else if (o->block_n != 64 && o->block_n != 128 && o->block_n != 192 && o->block_n != 256)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "block_n %d: must be 64, 128, 192 or 256",
                       o->block_n);
    else if (o->block_m * o->block_n > 16384)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                       "block_m x block_n = %d x %d: more than 128 accumulator registers per thread",
                       o->block_m, o->block_n);
    else if (o->stages < 2 || o->stages > 12)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "stages %d: must be 2..12", o->stages);
    else if (o->schedule < CF_SCHEDULE_AUTO || o->schedule > CF_SCHEDULE_FINISHER)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "schedule %d: unknown", o->schedule);
    else if (o->schedule == CF_SCHEDULE_COOPERATIVE && reduces)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                       "schedule cooperative: epilogues with row reductions need the pingpong schedule "
                       "(each warpgroup finishes its own tile while the other runs its mainloop)");
    else if (o->reduce_mode < CF_REDUCE_AUTO || o->reduce_mode > CF_REDUCE_GLOBAL)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "reduce_mode %d: unknown", o->reduce_mode);
    else if (o->pair_tiles < -1 || o->pair_tiles > 1)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "pair_tiles %d: must be 0 (auto), 1 or -1",
                       o->pair_tiles);
    else if (o->sync_finish < -1 || o->sync_finish > 1)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "sync_finish %d: must be 0 (auto), 1 or -1",
                       o->sync_finish);
    else if (o->cluster_n < 1 || o->cluster_n > (global ? 64 : 16) || (!global && (o->cluster_n & (o->cluster_n - 1))))
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cluster_n %d: must be 1, 2, 4, 8 or 16%s",
                       o->cluster_n, reduces ? " (any count up to 64 with reduce mode global)" : "");
    else if (global && o->multicast == 1 && o->cluster_n % 2)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                       "multicast: a row group of %d CTAs cannot be split into the multicast's pairs",
                       o->cluster_n);
    else if (o->multicast < -1 || o->multicast > 1)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "multicast %d: must be 0 (auto), 1 or -1",
                       o->multicast);
    else if (o->multicast == 1 && !global)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                       "multicast: needs row reductions through L2 (reduce mode global) over 2 or more CTAs; "
                       "the DSMEM modes' cluster already multicasts X");
    else
        st = cf_lower(g, &k->ir, err);
    if (st == CF_OK) {
        /* Through L2 the row's CTAs need no hardware cluster but the multicast's pairs. */
        cf_cg_options cg = {.bm = o->block_m, .bn = o->block_n, .stages = o->stages,
                            .cluster_n = !global ? o->cluster_n : o->multicast == 1 ? 2 : 1, .row_ctas = o->cluster_n,
                            .red_leader = o->reduce_mode == CF_REDUCE_LEADER, .red_global = global,
                            .sync_finish = o->sync_finish == 1, .pair_tiles = o->pair_tiles == 1,
                            .cooperative = o->schedule == CF_SCHEDULE_COOPERATIVE,
                            .finisher = o->schedule == CF_SCHEDULE_FINISHER};
        st = check_smem(k->ir, &cg, err);
        k->opt.stages = cg.stages;
        if (st == CF_OK)
            st = cf_codegen(k->ir, &cg, title, &k->src, err);
        k->gather_early = st == CF_OK && cf_cg_gathers_early(k->ir, &cg);
    }
    if (st == CF_OK && !(k->padded = calloc((size_t)k->ir->n_args, sizeof *k->padded)))
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    if (st != CF_OK) {
        cf_kernel_free(k);
        return st;
    }
    *out = k;
    return CF_OK;
}

const cf_ir *cf_kernel_ir(const cf_kernel *k) { return k ? k->ir : NULL; }
const cf_options *cf_kernel_options(const cf_kernel *k) { return k ? &k->opt : NULL; }
const char *cf_kernel_source(const cf_kernel *k) { return k ? k->src.data : NULL; }
const char *cf_kernel_ptx(const cf_kernel *k) { return k && k->compiled ? k->cubin.ptx : NULL; }

/* Reads cf_kernel_info (a byte-initialised .global array) out of the PTX,
 * so the configuration is known without a GPU. */
static cf_status parse_info(cf_kernel *k, cf_error *err)
{
    const char *p = k->cubin.ptx ? strstr(k->cubin.ptx, "cf_kernel_info[") : NULL;
    const char *brace = p ? strchr(p, '{') : NULL;
    if (!brace)
        return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0}, "compiled kernel has no cf_kernel_info in its PTX");
    unsigned char bytes[4 * INFO_COUNT] = {0};
    const char *q = brace + 1;
    for (int i = 0; i < (int)sizeof bytes; i++) {
        char *end;
        long v = strtol(q, &end, 10);
        if (end == q)
            break;
        bytes[i] = (unsigned char)v;
        q = end;
        while (*q == ' ' || *q == ',')
            q++;
        if (*q == '}')
            break;
    }
    for (int i = 0; i < INFO_COUNT; i++)
        k->info[i] = bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 | bytes[4 * i + 3] << 24;
    if (k->info[INFO_VERSION] != DEVICE_HEADER_VERSION || k->info[INFO_BM] != k->opt.block_m || k->info[INFO_BN] != k->opt.block_n)
        return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0},
                         "kernel configuration mismatch (header version %d, BM %d, BN %d)", k->info[INFO_VERSION],
                         k->info[INFO_BM], k->info[INFO_BN]);
    return CF_OK;
}

cf_status cf_kernel_compile(cf_kernel *k, cf_error *err)
{
    cf_error_clear(err);
    if (!k)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_compile: NULL kernel");
    if (k->compiled)
        return CF_OK;
    /* CF_TRACE=1 (diagnostics, bench): per-tile clock64 stamps, see cf_sm90.cuh; CF_TRACE=2 also
     * times the mainloop's waits */
    const char *trace_env = getenv("CF_TRACE");
    const bool trace = trace_env && *trace_env && strcmp(trace_env, "0");
    const char *const trace_opt[] = {trace && !strcmp(trace_env, "2") ? "-DCF_TRACE=2" : "-DCF_TRACE=1"};
    cf_status st = cf_rt_compile(k->src.data, "cf_gemm_kernel", trace ? trace_opt : NULL, trace ? 1 : 0,
                                 &k->cubin, err);
    if (st == CF_OK)
        st = parse_info(k, err);
    k->compiled = st == CF_OK;
    return st;
}

cf_status cf_kernel_resources(const cf_kernel *k, cf_resources *r, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !r)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_resources: NULL argument");
    if (!k->compiled)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_resources: compile the kernel first");
    memset(r, 0, sizeof *r);
    r->threads = k->info[INFO_THREADS];
    r->registers = k->cubin.registers;
    r->spill_bytes = (k->cubin.spill_store_bytes > 0 ? k->cubin.spill_store_bytes : 0) +
                     (k->cubin.spill_load_bytes > 0 ? k->cubin.spill_load_bytes : 0);
    r->stack_bytes = k->cubin.stack_bytes > 0 ? k->cubin.stack_bytes : 0;
    r->smem_bytes = k->info[INFO_SMEM];
    r->static_smem_bytes = k->cubin.smem_bytes > 0 ? k->cubin.smem_bytes : 0;
    r->cluster_n = k->info[INFO_CLUSTER_N];
    r->block_m = k->info[INFO_BM];
    r->block_n = k->info[INFO_BN];
    r->stages = k->info[INFO_STAGES];
    r->resident_ctas = k->max_clusters * k->info[INFO_CLUSTER_N];
    r->row_ctas = k->info[INFO_ROW_CTAS];
    r->schedule = !k->info[INFO_PINGPONG] ? CF_SCHEDULE_COOPERATIVE
                  : k->info[INFO_THREADS] > 384 ? CF_SCHEDULE_FINISHER
                                                : CF_SCHEDULE_PINGPONG;
    r->reduce_mode = !k->info[INFO_NUM_RED] ? 0 : k->info[INFO_RED_GLOBAL] ? CF_REDUCE_GLOBAL
                                                                          : k->opt.reduce_mode;
    r->late_finish = k->info[INFO_LATE_FINISH] != 0;
    r->pair_tiles = k->opt.pair_tiles == 1;
    r->gather_early = k->gather_early;
    r->wgmma_serialized = k->cubin.wgmma_serialized;
    r->gelu_at_store = cf_cg_gelu_stores(k->ir);
    r->cache_hit = k->cubin.cache == CF_RT_CACHE_HIT_DISK || k->cubin.cache == CF_RT_CACHE_HIT_MEMORY;
    r->compile_ms = k->cubin.compile_ms;
    snprintf(r->cache_path, sizeof r->cache_path, "%s", k->cubin.stored ? k->cubin.cache_path : "");
    snprintf(r->cache_note, sizeof r->cache_note, "%s", k->cubin.cache_note);
    return CF_OK;
}

/* ---- launching ------------------------------------------------------------ */

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The parameter block cf_gemm_args of the device header, packed by the C
 * layout rules both compilers follow: three or more 128-byte TMA descriptors
 * (64-byte aligned), output pointers, M N K, output pitches, then the
 * generated cf_epi_params. */
typedef struct args_layout {
    size_t tma_out, tma_in, xchg, out_ptr, mnk, out_ld, epi, size;
} args_layout;

static args_layout layout_of(const cf_ir *ir, int n_out, int n_tin, size_t *epi_size, size_t *epi_align)
{
    args_layout l;
    l.tma_out = 256;
    l.tma_in = l.tma_out + 128 * (size_t)n_out;
    l.xchg = l.tma_in + 128 * (size_t)n_tin; /* xchg, xsync */
    l.out_ptr = l.xchg + 16;
    l.mnk = l.out_ptr + 8 * (size_t)n_out;
    l.out_ld = l.mnk + 12;
    cf_cg_epi_layout(ir, NULL, epi_size, epi_align);
    l.epi = align_up(l.out_ld + 4 * (size_t)n_out, *epi_align);
    l.size = align_up(l.epi + *epi_size, 64);
    return l;
}

/* The generated cf_epi_params at epi: scalars, input and per-row output pointers (offsets as
 * many as the spec has args). */
static cf_status fill_epi(const cf_ir *ir, const cf_launch_args *a, unsigned char *epi, cf_error *err)
{
    size_t size, align, *offs = malloc(((size_t)ir->n_args + 1) * sizeof *offs);
    if (!offs)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_cg_epi_layout(ir, offs, &size, &align);
    cf_status st = CF_OK;
    for (int i = 0; i < ir->n_args && st == CF_OK; i++) {
        const cf_ir_arg *x = &ir->args[i];
        unsigned char *dst = epi + offs[i];
        if (x->kind == CF_ARG_SCALAR) {
            float v = (float)a->params[x->index];
            memcpy(dst, &v, 4);
        } else if (x->kind == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, x->index).rank == 1) {
            uint64_t ptr = a->outputs[x->index];
            memcpy(dst, &ptr, 8);
        } else if (x->kind == CF_ARG_VEC_N || x->kind == CF_ARG_VEC_M || x->kind == CF_ARG_TENSOR) {
            uint64_t ptr = a->inputs[x->index];
            if (ptr % cf_dtype_size(x->dtype))
                st = cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                           "input '%s': device pointer 0x%llx is not aligned to its %s elements", x->name,
                           (unsigned long long)ptr, cf_dtype_name(x->dtype));
            else
                memcpy(dst, &ptr, 8);
        }
    }
    free(offs);
    return st;
}

static cf_status load_module(cf_kernel *k, cf_error *err)
{
    cf_status st = cf_rt_init(err);
    if (st == CF_OK)
        st = cf_rt_module_load(k->cubin.cubin, &k->module, err);
    if (st == CF_OK)
        st = cf_rt_module_get_func(k->module, "cf_gemm_kernel", &k->func, err);
    if (st == CF_OK)
        st = cf_rt_func_prepare(k->func, k->info[INFO_SMEM], k->info[INFO_CLUSTER_N], err);
    if (st == CF_OK)
        st = cf_rt_max_active_clusters(k->func, k->info[INFO_CLUSTER_N], k->info[INFO_THREADS],
                                       k->info[INFO_SMEM], &k->max_clusters, err);
    if (st == CF_OK && k->max_clusters < 1)
        st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                       "no cluster of %d CTAs with %d bytes of shared memory fits on this GPU",
                       k->info[INFO_CLUSTER_N], k->info[INFO_SMEM]);
    if (st != CF_OK && k->module) {
        cf_rt_module_unload(k->module, NULL);
        k->module = NULL;
    }
    return st;
}

/* The L2 exchange's slots for tiles_m row tiles, 8 bytes per (reduction, rank, row) (grown,
 * never shrunk), and its counters {epoch 1, 0 CTAs counted in}.  A launch writes every slot of
 * its own row tiles and reads only those; the slots of the row tiles it does not reach are zeroed (no
 * epoch or pair tag is 0) on its stream before it runs.  So after any launch -- also one replayed
 * from a CUDA graph, where this runs only at capture -- every slot holds that launch's post or
 * nothing, and a pair's 8-bit tag, which comes round every 255 launches, is never stale. */
static cf_status prepare_exchange(cf_kernel *k, int64_t tiles_m, cf_rt_stream stream, cf_error *err)
{
    cf_status st;
    const size_t bytes = (size_t)k->info[INFO_NUM_RED] * (size_t)tiles_m * (size_t)k->info[INFO_ROW_CTAS] *
                         (size_t)k->info[INFO_BM] * 8;
    if (bytes > k->xchg_bytes) {
        /* an earlier launch may still be reading the old slots */
        if (k->xchg && ((st = cf_rt_ctx_sync(err)) != CF_OK || (st = cf_rt_free(k->xchg, err)) != CF_OK))
            return st;
        k->xchg = 0;
        k->xchg_bytes = 0;
        if ((st = cf_rt_malloc(&k->xchg, bytes, err)) != CF_OK)
            return st;
        k->xchg_bytes = bytes;
        if ((st = cf_rt_memset_d8_async(k->xchg, 0, bytes, stream, err)) != CF_OK)
            return st;
    } else if (bytes < k->xchg_bytes &&
               (st = cf_rt_memset_d8_async(k->xchg + bytes, 0, k->xchg_bytes - bytes, stream, err)) != CF_OK) {
        return st;
    }
    if (!k->xsync) {
        const uint32_t init[2] = {1, 0};
        if ((st = cf_rt_malloc(&k->xsync, sizeof init, err)) != CF_OK)
            return st;
        if ((st = cf_rt_memcpy_htod(k->xsync, init, sizeof init, err)) != CF_OK) {
            cf_rt_free(k->xsync, NULL);
            k->xsync = 0;
            return st;
        }
    }
    return CF_OK;
}

static int64_t dim_of(const cf_launch_args *a, cf_dim d) { return d >= 0 ? a->dims[d] : 0; }

/* Column tiles of a row group: a tile per CTA, or two with pair_tiles. */
static int64_t row_group_tiles(const cf_kernel *k)
{
    return (int64_t)k->info[INFO_ROW_CTAS] * (k->opt.pair_tiles == 1 ? 2 : 1);
}

bool cf_kernel_wide(const cf_kernel *k, int64_t n)
{
    return k && k->compiled && k->ir->n_stages[0] > 1 && n > (int64_t)k->info[INFO_BN] * row_group_tiles(k);
}

/* The GEMM of the wide path: the same X and W, C = X @ W kept in f32. */
static cf_status build_wide(cf_kernel *k, int64_t M, int64_t N, int64_t K, cf_error *err)
{
    const cf_ir *ir = k->ir;
    cf_tensor_info x = cf_graph_input_info(k->graph, ir->args[0].index);
    cf_tensor_info w = cf_graph_input_info(k->graph, ir->args[1].index);
    cf_graph *g = cf_graph_new();
    if (!g)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_dim d[CF_MAX_DIMS];
    for (int i = 0; i < cf_graph_num_dims(k->graph); i++)
        d[i] = cf_graph_dim(g, cf_graph_dim_name(k->graph, i));
    cf_value X = cf_graph_input(g, x.name, x.dtype, 2, (cf_dim[]){d[x.dims[0]], d[x.dims[1]]});
    cf_value W = cf_graph_input(g, w.name, w.dtype, 2, (cf_dim[]){d[w.dims[0]], d[w.dims[1]]});
    cf_graph_output(g, "C", cf_graph_matmul(g, X, W), CF_F32);
    k->wide.graph = g;
    if (cf_graph_error(g)->status != CF_OK) {
        if (err)
            *err = *cf_graph_error(g);
        return cf_graph_error(g)->status;
    }
    cf_options o = cf_options_for(g, M, N, K);
    cf_status st = cf_kernel_build(g, &o, "wide-row GEMM", &k->wide.gemm, err);
    if (st == CF_OK)
        st = cf_kernel_compile(k->wide.gemm, err);
    if (st == CF_OK)
        st = cf_rows_build(ir, "wide-row epilogue", &k->wide.rows, err);
    return st;
}

cf_status cf_kernel_prepare(cf_kernel *k, const int64_t *dims, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !dims)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_prepare: NULL argument");
    cf_status st = cf_kernel_compile(k, err);
    const cf_ir *ir = k->ir;
    const int64_t M = ir->dim_m >= 0 ? dims[ir->dim_m] : 0, N = ir->dim_n >= 0 ? dims[ir->dim_n] : 0,
                  K = ir->dim_k >= 0 ? dims[ir->dim_k] : 0;
    if (st == CF_OK && cf_kernel_wide(k, N) && !k->wide.gemm)
        st = build_wide(k, M, N, K, err);
    return st;
}

/* Rows wider than one cluster cannot be reduced on chip: C goes through
 * device memory once (f32) and the row kernel runs the epilogue over it. */
static cf_status launch_wide(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, int64_t K, cf_error *err)
{
    cf_status st = CF_OK;
    if (!k->wide.gemm && (st = build_wide(k, M, N, K, err)) != CF_OK)
        return st;
    size_t bytes = (size_t)M * (size_t)N * 4;
    if (bytes > k->wide.c_bytes) {
        if (k->wide.c)
            cf_rt_free(k->wide.c, NULL);
        k->wide.c = 0;
        k->wide.c_bytes = 0;
        if ((st = cf_rt_malloc(&k->wide.c, bytes, err)) != CF_OK)
            return st;
        k->wide.c_bytes = bytes;
    }
    /* The GEMM's graph has just X and W (inputs 0 and 1), and the same dims. */
    uint64_t c = k->wide.c, xw[2] = {a->inputs[k->ir->args[0].index], a->inputs[k->ir->args[1].index]};
    cf_launch_args ga = *a;
    ga.inputs = xw;
    ga.outputs = &c;
    ga.params = NULL;
    if ((st = cf_kernel_launch(k->wide.gemm, &ga, err)) != CF_OK)
        return st;
    return cf_rows_launch(k->wide.rows, k->wide.c, CF_F32, M, N, a, a->stream, err);
}

/* ---- staging: tensors TMA cannot address in place ---------------------------------------
 * TMA needs a 16-byte aligned base and row pitch, which a 16-bit tensor with an odd K or N (a
 * vocabulary of 50257) or an offset view does not have.  Such a tensor goes through a padded
 * copy the kernel object owns: an operand is copied in before the launch and an output out
 * after it, on the launch's stream (a 2D copy, so CUDA-graph capture holds), and the kernel
 * runs on the copy with the same logical dims.  One extra pass over that tensor. */
static bool tma_addressable(uint64_t ptr, uint64_t cols, cf_dtype t)
{
    return ptr % 16 == 0 && (cols * cf_dtype_size(t)) % 16 == 0;
}

/* The padded copy of arg (rows x cols of dtype t) at *ptr: *ptr and *pitch become the copy's;
 * an input's data is copied in. */
static cf_status pad_tensor(cf_kernel *k, int arg, uint64_t *ptr, uint64_t rows, uint64_t cols, cf_dtype t,
                            bool input, cf_rt_stream s, uint64_t *pitch, cf_error *err)
{
    const size_t es = cf_dtype_size(t), row_bytes = (size_t)cols * es, padded = (row_bytes + 15) / 16 * 16;
    if (rows > SIZE_MAX / padded)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "tensor '%s': %llu rows of %zu bytes overflow a size",
                         k->ir->args[arg].name, (unsigned long long)rows, padded);
    struct padded *p = &k->padded[arg];
    cf_status st;
    if (p->bytes < rows * padded) {
        if (p->buf)
            cf_rt_free(p->buf, NULL);
        *p = (struct padded){0};
        if ((st = cf_rt_malloc(&p->buf, rows * padded, err)) != CF_OK)
            return st;
        p->bytes = rows * padded;
    }
    if (input && (st = cf_rt_memcpy_2d_async(p->buf, padded, *ptr, row_bytes, row_bytes, rows, s, err)) != CF_OK)
        return st;
    *ptr = p->buf;
    *pitch = padded / es;
    return CF_OK;
}

/* The operand or output arg as TMA sees it: in place, or its padded copy. */
static cf_status tma_view(cf_kernel *k, int arg, uint64_t *ptr, uint64_t rows, uint64_t cols, bool input,
                          cf_rt_stream s, uint64_t *pitch, cf_error *err)
{
    const cf_dtype t = k->ir->args[arg].dtype;
    *pitch = cols;
    return tma_addressable(*ptr, cols, t) ? CF_OK : pad_tensor(k, arg, ptr, rows, cols, t, input, s, pitch, err);
}

/* Outputs the kernel wrote into their padded copies, to the caller's tensors. */
static cf_status copy_out_padded(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, cf_error *err)
{
    for (int i = 0; i < k->ir->n_args; i++) {
        const cf_ir_arg *x = &k->ir->args[i];
        if (x->kind != CF_ARG_OUTPUT || cf_graph_output_info(k->graph, x->index).rank != 2 ||
            tma_addressable(a->outputs[x->index], (uint64_t)N, x->dtype))
            continue;
        const size_t row_bytes = (size_t)N * cf_dtype_size(x->dtype);
        cf_status st = cf_rt_memcpy_2d_async(a->outputs[x->index], row_bytes, k->padded[i].buf,
                                             (row_bytes + 15) / 16 * 16, row_bytes, (size_t)M, a->stream, err);
        if (st != CF_OK)
            return st;
    }
    return CF_OK;
}

/* [M,N] epilogue inputs the kernel fetches through its operand ring (CF_TIN_ARGS). */
static int tile_inputs(const cf_kernel *k)
{
    int n = 0;
    for (unsigned m = (unsigned)k->info[INFO_TIN_ARGS]; m; m &= m - 1)
        n++;
    return n;
}

/* Their tensor maps, in argument order: boxes of 64 columns x a scheduler tile's rows, 128B
 * swizzled (the layout cf_tin_stream reads). */
static cf_status map_tile_inputs(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, unsigned char *dst,
                                 cf_error *err)
{
    const unsigned mask = (unsigned)k->info[INFO_TIN_ARGS];
    for (int i = 0; i < k->ir->n_args && i < 32; i++) {
        if (!(mask >> i & 1u))
            continue;
        const cf_ir_arg *x = &k->ir->args[i];
        uint64_t ptr = a->inputs[x->index], ld;
        cf_status st = tma_view(k, i, &ptr, (uint64_t)M, (uint64_t)N, true, a->stream, &ld, err);
        if (st == CF_OK)
            st = cf_rt_tensor_map_2d_named(dst, x->name, x->dtype, (const void *)(uintptr_t)ptr, (uint64_t)M,
                                           (uint64_t)N, ld, (uint32_t)k->info[INFO_TILE_M], 64, 128, err);
        if (st != CF_OK)
            return st;
        dst += 128;
    }
    return CF_OK;
}

cf_status cf_kernel_launch(cf_kernel *k, const cf_launch_args *a, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !a || !a->dims || !a->inputs || !a->outputs)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_launch: NULL argument");
    cf_status st;
    if (!k->compiled && (st = cf_kernel_compile(k, err)) != CF_OK)
        return st;
    const cf_ir *ir = k->ir;
    const cf_graph *g = k->graph;
    int64_t M = dim_of(a, ir->dim_m), N = dim_of(a, ir->dim_n), K = dim_of(a, ir->dim_k);
    if (M < 1 || N < 1 || K < 1 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "M=%lld N=%lld K=%lld: every GEMM dim must be in [1, 2^31)",
                         (long long)M, (long long)N, (long long)K);
    if (cf_kernel_wide(k, N))
        return launch_wide(k, a, M, N, K, err);
    for (int i = 0; i < g->n_params; i++)
        if (!a->params)
            return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "runtime scalar '%s' has no value",
                             cf_graph_param_name(g, i));
    int n_out = k->info[INFO_NUM_OUT];
    size_t epi_size, epi_align;
    args_layout l = layout_of(ir, n_out, tile_inputs(k), &epi_size, &epi_align);
    _Alignas(64) unsigned char block[CF_KERNEL_PARAM_BYTES];   /* Φ rejects larger (cf_ir_param_bytes) */
    if (l.size > sizeof block)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel parameter block of %zu bytes is too large",
                         l.size);
    memset(block, 0, l.size);
    const cf_ir_arg *A = &ir->args[0], *B = &ir->args[1];
    int bn = k->info[INFO_BN];
    cf_dtype in_t = A->dtype;
    uint64_t pa = a->inputs[A->index], pb = a->inputs[B->index], lda, ldb;
    const uint64_t b_rows = B->b_is_nk ? (uint64_t)N : (uint64_t)K, b_cols = B->b_is_nk ? (uint64_t)K : (uint64_t)N;
    if ((st = tma_view(k, 0, &pa, (uint64_t)M, (uint64_t)K, true, a->stream, &lda, err)) != CF_OK ||
        (st = tma_view(k, 1, &pb, b_rows, b_cols, true, a->stream, &ldb, err)) != CF_OK)
        return st;
    st = cf_rt_tensor_map_2d_named(block, A->name, in_t, (const void *)(uintptr_t)pa, (uint64_t)M, (uint64_t)K, lda,
                                   (uint32_t)k->info[INFO_A_BOX_ROWS], 64, 128, err);
    if (st != CF_OK)
        return st;
    st = cf_rt_tensor_map_2d_named(block + 128, B->name, in_t, (const void *)(uintptr_t)pb, b_rows, b_cols, ldb,
                                   B->b_is_nk ? (uint32_t)k->info[INFO_B_BOX] : 64, 64, 128, err);
    if (st != CF_OK)
        return st;
    int o = 0;
    for (int i = 0; i < ir->n_args && o < n_out; i++) {
        const cf_ir_arg *x = &ir->args[i];
        if (x->kind != CF_ARG_OUTPUT || cf_graph_output_info(g, x->index).rank != 2)
            continue; /* per-row outputs are plain pointers in the epilogue struct */
        uint64_t ptr = a->outputs[x->index], ldo;
        if ((st = tma_view(k, i, &ptr, (uint64_t)M, (uint64_t)N, false, a->stream, &ldo, err)) != CF_OK)
            return st;
        uint32_t box_cols = (uint32_t)(128 / cf_dtype_size(x->dtype));
        st = cf_rt_tensor_map_2d_named(block + l.tma_out + 128 * (size_t)o, x->name, x->dtype,
                                       (const void *)(uintptr_t)ptr, (uint64_t)M, (uint64_t)N, ldo,
                                       (uint32_t)k->info[INFO_OUT_BOX_ROWS], box_cols, 128, err);
        if (st != CF_OK)
            return st;
        int32_t ld = (int32_t)ldo;
        memcpy(block + l.out_ptr + 8 * (size_t)o, &ptr, 8);
        memcpy(block + l.out_ld + 4 * (size_t)o, &ld, 4);
        o++;
    }
    if ((st = map_tile_inputs(k, a, M, N, block + l.tma_in, err)) != CF_OK)
        return st;
    int32_t mnk[3] = {(int32_t)M, (int32_t)N, (int32_t)K};
    memcpy(block + l.mnk, mnk, sizeof mnk);
    if ((st = fill_epi(ir, a, block + l.epi, err)) != CF_OK)
        return st;
    if (!k->module && (st = load_module(k, err)) != CF_OK)
        return st;
    /* Persistent grid: as many row groups (of row_ctas CTAs, whole clusters) as
     * fit at once, no more than there are row-group tiles. */
    int cl = k->info[INFO_CLUSTER_N], rc = k->info[INFO_ROW_CTAS];
    int64_t tiles_m = (M + k->info[INFO_TILE_M] - 1) / k->info[INFO_TILE_M];
    int64_t tiles_n = (N + bn - 1) / bn;
    const int64_t per_group = row_group_tiles(k);
    int64_t group_tiles = tiles_m * ((tiles_n + per_group - 1) / per_group);
    int64_t groups = (int64_t)k->max_clusters * cl / rc;
    if (groups < 1)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                         "a row group of %d CTAs does not fit on this GPU at once (%d resident)", rc,
                         k->max_clusters * cl);
    if (groups > group_tiles)
        groups = group_tiles;
    bool global = k->info[INFO_RED_GLOBAL]; /* emitted only for row groups of 2 or more */
    if (global && (st = prepare_exchange(k, tiles_m, a->stream, err)) != CF_OK)
        return st;
    uint64_t xptr[2] = {global ? k->xchg : 0, global ? k->xsync : 0};
    memcpy(block + l.xchg, xptr, sizeof xptr);
    cf_rt_launch_cfg cfg = {
        .grid = {(unsigned)(groups * rc), 1, 1},
        .block = {(unsigned)k->info[INFO_THREADS], 1, 1},
        .cluster = {(unsigned)cl, 1, 1},
        .dyn_smem = (unsigned)k->info[INFO_SMEM],
        .stream = a->stream,
        .cooperative = global, /* a row group's CTAs wait for each other: all must be resident */
    };
    void *params[] = {block};
    if ((st = cf_rt_launch(k->func, &cfg, params, err)) != CF_OK)
        return st;
    return copy_out_padded(k, a, M, N, err);
}

cf_status cf_kernel_global(const cf_kernel *k, const char *name, cf_rt_devptr *p, size_t *bytes, cf_error *err)
{
    if (!k->module)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel not loaded yet (launch it first)");
    return cf_rt_module_get_global(k->module, name, p, bytes, err);
}
