/* plan.c — the planning stage, between Φ and Ψ: every launch decision in one struct.
 *
 * cf_plan_make takes the IR, the GEMM's size (when known), the device and what the caller
 * asked for, and decides the whole launch: the tile, the CTAs that share a row and how
 * tiles map to them, the pipeline depth, the schedule, how row partials are exchanged, the
 * late finish, the pair of tiles, multicast, the shared-memory layout and the grid.  Ψ only
 * renders the plan (cf_codegen) and kernel.c only launches it.  A cost model of the H200
 * predicts the plan's time (cf_plan_predict); the choices themselves are still the rules
 * measured on the workload shapes (docs/performance.md), which the model is checked against.
 */
#include "cf_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the device ------------------------------------------------------------ */

cf_device_facts cf_device_facts_h200(void)
{
    return (cf_device_facts){.sm_count = 132, .smem_per_block = CF_SMEM_OPTIN, .smem_per_sm = 233472,
                             .regs_per_sm = 65536};
}

cf_status cf_device_facts_query(cf_device_facts *dev, cf_error *err)
{
    cf_rt_device_info info;
    cf_status st = cf_rt_device_info_get(&info, err);
    *dev = cf_device_facts_h200();
    if (st != CF_OK)
        return st;
    dev->sm_count = info.sm_count;
    dev->smem_per_block = info.smem_optin;
    dev->smem_per_sm = info.smem_per_sm;
    return CF_OK;
}

/* ---- shared memory ---------------------------------------------------------- */

/* The DSMEM exchange's static buffers (cf_reduce.cuh): partials [2 wg][2 buf][cluster][rows],
 * the leader's results, barriers and sequence counters; 128 bytes of alignment slack with any
 * reduction. */
static int static_smem_bytes(const cf_ir *ir, const cf_plan *o)
{
    if (ir->n_stages[0] < 2)
        return 0;
    const bool dsmem = o->row_ctas > 1 && !o->red_global;
    const int red = dsmem ? 2 * 2 * o->cluster_n * o->bm * 4 + (o->red_leader ? 2 * 2 * o->bm * 4 + 32 : 0) + 32 +
                                2 * 128 * 4
                          : 0;
    return red + 128;
}

/* cf_sm90.cuh's CF_SMEM_BYTES, the one formula of the dynamic shared memory: 1024 bytes of
 * alignment slack, two mbarriers a stage and 96 bytes of others (+ the pair's handoff: two
 * mbarriers and 8 bytes a row), the operand ring (n_b weight tiles a stage: two for a dual
 * GEMM), and both warpgroups' staging buffers (stg_chunks 64-column chunks of bm rows at 128
 * bytes a row). */
static long dynamic_smem_bytes(const cf_plan *o, int n_b, int stg_chunks)
{
    const long tile_m = o->cooperative ? 2L * o->bm : o->bm;
    return 1024 + 16L * o->stages + 96 + (o->pair_tiles ? 16 + 8L * o->bm : 0) +
           o->stages * (tile_m + (long)n_b * o->bn) * 128L + 2L * stg_chunks * o->bm * 128;
}

cf_plan_smem cf_plan_smem_of(const cf_ir *ir, const cf_plan *o)
{
    cf_plan_smem m = {.static_bytes = static_smem_bytes(ir, o)};
    const long limit = (o->smem_limit > 0 ? o->smem_limit : CF_SMEM_OPTIN) - m.static_bytes;
    /* staging: the whole tile where it fits (a late finish parks it there), else half, else one chunk */
    const int whole = o->bn / 64, choices[3] = {whole, (whole + 1) / 2, 1};
    for (int i = 0; i < 3; i++) {
        m.stg_chunks = choices[i];
        m.dynamic_bytes = dynamic_smem_bytes(o, ir->dual ? 2 : 1, m.stg_chunks);
        if (m.dynamic_bytes <= limit)
            break;
    }
    m.fits = m.dynamic_bytes <= limit;
    return m;
}


/* ---- the plan's own choices ------------------------------------------------------ */

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

/* The schedule for a row group through L2 (o->cluster_n CTAs, cg the candidate plan): the
 * late finish and its stages, the pair of tiles, the finisher, multicast.  The rules and the
 * measurements behind them (docs/performance.md). */
static void schedule_defaults(const cf_ir *ir, cf_plan_request *o, int64_t k, cf_plan cg)
{
    const bool late = o->cluster_n > 1 && cf_cg_finishes_late(ir, &cg);
    if (late || (o->cluster_n > 16 && o->cluster_n <= 32))
        o->stages = 5;
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
    cf_plan pair = cg;
    pair.row_ctas = (o->cluster_n + 1) / 2;
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
    const bool single_words = words == o->cluster_n;   /* 128-row tiles: a lane per row */
    const bool early = (!long_k || (o->cluster_n <= 8 && single_words)) && cf_cg_gathers_early(ir, &cg);
    bool paired = o->cluster_n >= 4 && !early && cf_cg_can_pair(ir, &pair) &&
                  (heavy_finish ? saves_round && long_k : saves_round || (o->cluster_n >= 8 && long_k));
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
    const int rounds = (o->cluster_n + 7) / 8, reductions = ir->n_stages[0] - 1;
    const double mainloop = 8.3 * (double)k;
    const double finisher_work = 3000.0 + 2400.0 * rounds + 1200.0 * vectors;
    cg.finisher = true;
    if (!paired && reductions <= 2 && o->cluster_n > 1 && cf_cg_has_finisher(ir, &cg) &&
        finisher_work <= 0.8 * mainloop &&
        3200.0 * reductions + 2400.0 * rounds > 0.9 * mainloop)
        o->schedule = CF_SCHEDULE_FINISHER;
    if (paired) {
        o->pair_tiles = 1;
        o->cluster_n = (o->cluster_n + 1) / 2;
        o->stages = 5;
    }
    /* Four or more reductions (LN+softmax) spill ~500 bytes per thread; up to
     * K = 2048 a stage fewer, 32 KB more L1 for the spills, is faster (2.61 -> 2.52,
     * 2.22 -> 2.07, 1.99 -> 1.96 of cuBLAS); at K = 4096 not (docs/performance.md, "LN+softmax"). */
    if (ir->n_stages[0] - 1 >= 4 && k > 0 && k <= 2048)
        o->stages--;
    /* With two tiles a warpgroup (K = 512) a late finish defers three quarters of the
     * output's stores to the tail, where every CTA writes at once.  LN+softmax's first
     * exchange waits at once anyway, and finishing every tile at once ran 2.03 -> 1.96 of
     * cuBLAS at 4096x2048x512 (3-15 % slower at K >= 1024, and RMSNorm, LN, softmax
     * 11-29 % slower at K = 512; docs/performance.md, "LN+softmax"). */
    if (ir->n_stages[0] - 1 >= 4 && k > 0 && k <= 512) {
        o->sync_finish = 1;
        o->stages = 6;
    }
    /* At K = 4096 the 128x128 mainloop is L2-bound (back to back the fused kernels ran
     * 1.08-1.20 of cuBLAS while its cluster-2 GEMM ran 1.01); pairs of CTAs multicasting
     * their X rows ran 0.90-0.94 of that with W as [N,K], 0.98-1.01 as [K,N], and 1-4.5 %
     * slower at K <= 1024 (docs/performance.md, "X multicast"). */
    if (k >= 4096 && o->cluster_n > 1 && o->cluster_n % 2 && o->cluster_n < 64)
        o->cluster_n++;   /* multicast pairs: an odd row group gets one idle CTA */
    if (k >= 4096 && o->cluster_n % 2 == 0)
        o->multicast = 1;
}

/* The plan's own choices for a device with smem_limit bytes of shared memory per CTA. */
static cf_plan_request defaults_of(const cf_graph *g, const cf_ir *ir, int64_t m, int64_t n, int64_t k,
                                   int smem_limit)
{
    (void)m;
    /* 128x128 PingPong tiles, 6 stages, no cluster: PingPong hides one warpgroup's
     * epilogue under the other's mainloop, and a 2-CTA cluster couples the two CTAs'
     * rings (6 % slower with multicast at 8192x4096x4096; docs/performance.md, "The
     * mainloop"). */
    cf_plan_request o = {.block_m = 128, .block_n = n > 0 && n <= 64 ? 64 : 128, .stages = 6, .cluster_n = 1,
                         .schedule = CF_SCHEDULE_PINGPONG};
    /* A dual GEMM holds two accumulators: 128x64 tiles keep both at 64 registers, and a stage
     * (X's 128 rows, both weights' 64 columns) moves as many bytes per FLOP as a 128x128 one. */
    if (ir && ir->dual)
        o.block_n = 64;
    /* reductions the IR keeps (a graph's dead ones need no row group) */
    const bool reduces = ir ? ir->n_stages[0] > 1 : g && has_reductions(g);
    if (g && !reduces && !has_class(g, CF_OPC_UNARY) && !has_class(g, CF_OPC_BINARY) && k >= 4096) {
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
    if (reduces) {
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
        cf_plan cg = {.bm = o.block_m, .bn = o.block_n, .stages = 5, .cluster_n = 1,
                      .row_ctas = o.cluster_n, .red_global = o.cluster_n > 1, .smem_limit = smem_limit};
        if (ir)
            schedule_defaults(ir, &o, k, cg);
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

void cf_plan_fill(cf_plan_request *o, cf_plan_request def)
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
    /* slices of K run one tile per warpgroup at a time (pingpong, no pair) */
    if (o->split_k > 1) {
        if (!o->pair_tiles)
            o->pair_tiles = -1;
        if (!o->schedule && def.schedule == CF_SCHEDULE_COOPERATIVE)
            o->schedule = CF_SCHEDULE_PINGPONG;
    }
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
        o->stages = def.stages; /* cf_plan_make lowers it until the plan fits shared memory */
    if (o->multicast == 1 && def.cluster_n > 1 && def.cluster_n % 2 && def.cluster_n < 64)
        def.cluster_n++;   /* multicast pairs: an odd row group gets one idle CTA */
    if (!o->cluster_n)
        o->cluster_n = def.cluster_n;
    if (!o->multicast)
        o->multicast = def.multicast == 1 && o->reduce_mode == CF_REDUCE_GLOBAL && o->cluster_n % 2 == 0 ? 1 : -1;
    if (!o->split_k)
        o->split_k = 1;
}

cf_plan_request cf_plan_defaults(const cf_ir *ir, int64_t m, int64_t n, int64_t k)
{
    return defaults_of(ir->graph, ir, m, n, k, CF_SMEM_OPTIN);
}

/* ---- the public options ------------------------------------------------------------- */

static cf_options public_of(cf_plan_request r, int64_t m, int64_t n, int64_t k)
{
    return (cf_options){r.block_m, r.block_n, r.stages, r.cluster_n, r.reduce_mode, r.schedule, m, n, k};
}

cf_options cf_options_for(const cf_graph *g, int64_t m, int64_t n, int64_t k)
{
    cf_ir *ir = NULL;
    cf_error err;
    /* the plan reads the IR (reductions, a dual GEMM's two accumulators); a graph Φ rejects
     * still gets the GEMM's shape (the unfused path ignores it) */
    if (g && cf_lower(g, &ir, &err) != CF_OK)
        ir = NULL;
    cf_options o = public_of(defaults_of(g, ir, m, n, k, CF_SMEM_OPTIN), m > 0 ? m : 0, n > 0 ? n : 0, k > 0 ? k : 0);
    cf_ir_free(ir);
    return o;
}

cf_plan_request cf_plan_request_of(const cf_ir *ir, const cf_options *opt)
{
    if (!opt)
        return (cf_plan_request){0};
    const cf_plan_request d = cf_plan_defaults(ir, opt->m, opt->n, opt->k);
    return (cf_plan_request){
        .block_m = opt->block_m == d.block_m ? 0 : opt->block_m,
        .block_n = opt->block_n == d.block_n ? 0 : opt->block_n,
        .stages = opt->stages == d.stages ? 0 : opt->stages,
        .cluster_n = opt->cluster_n == d.cluster_n ? 0 : opt->cluster_n,
        .reduce_mode = opt->reduce_mode == d.reduce_mode ? 0 : opt->reduce_mode,
        .schedule = opt->schedule == d.schedule ? 0 : opt->schedule,
    };
}

/* ---- checking a request ---------------------------------------------------------------- */

/* The sets each field takes, and the combinations the kernel cannot run. */
static cf_status check_request(const cf_plan_request *o, bool reduces, bool dual, cf_error *err)
{
    /* A row inside one tile needs no exchange at all, so no L2 slots either. */
    const bool global = o->reduce_mode == CF_REDUCE_GLOBAL && reduces && o->cluster_n > 1;
    if (o->block_m != 64 && o->block_m != 128)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "block_m %d: must be 64 or 128", o->block_m);
    if (o->block_n != 64 && o->block_n != 128 && o->block_n != 192 && o->block_n != 256)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "block_n %d: must be 64, 128, 192 or 256",
                         o->block_n);
    if (o->block_m * o->block_n > 16384)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "block_m x block_n = %d x %d: more than 128 accumulator registers per thread",
                         o->block_m, o->block_n);
    if (dual && o->block_m * o->block_n > 8192)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "block_m x block_n = %d x %d: a dual GEMM's two accumulators take more than 128 registers "
                         "per thread (at most 8192 elements a tile, e.g. 128x64 or 64x128)",
                         o->block_m, o->block_n);
    if (o->stages < 2 || o->stages > 12)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "stages %d: must be 2..12", o->stages);
    if (o->schedule < CF_SCHEDULE_AUTO || o->schedule > CF_SCHEDULE_FINISHER)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "schedule %d: unknown", o->schedule);
    if (o->schedule == CF_SCHEDULE_COOPERATIVE && reduces)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "schedule cooperative: epilogues with row reductions need the pingpong schedule "
                         "(each warpgroup finishes its own tile while the other runs its mainloop)");
    if (o->reduce_mode < CF_REDUCE_AUTO || o->reduce_mode > CF_REDUCE_GLOBAL)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "reduce_mode %d: unknown", o->reduce_mode);
    if (o->pair_tiles < -1 || o->pair_tiles > 1)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "pair_tiles %d: must be 0 (auto), 1 or -1",
                         o->pair_tiles);
    if (o->sync_finish < -1 || o->sync_finish > 1)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "sync_finish %d: must be 0 (auto), 1 or -1",
                         o->sync_finish);
    if (o->cluster_n < 1 || o->cluster_n > (global ? 64 : 16) || (!global && (o->cluster_n & (o->cluster_n - 1))))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cluster_n %d: must be 1, 2, 4, 8 or 16%s",
                         o->cluster_n, reduces ? " (any count up to 64 with reduce mode global)" : "");
    if (global && o->multicast == 1 && o->cluster_n % 2)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "multicast: a row group of %d CTAs cannot be split into the multicast's pairs",
                         o->cluster_n);
    if (o->multicast < -1 || o->multicast > 1)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "multicast %d: must be 0 (auto), 1 or -1",
                         o->multicast);
    if (o->multicast == 1 && !global)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "multicast: needs row reductions through L2 (reduce mode global) over 2 or more CTAs; "
                         "the DSMEM modes' cluster already multicasts X");
    if (o->split_k < 1 || o->split_k > CF_SPLIT_K_MAX)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "split_k %d: must be 1..%d", o->split_k,
                         CF_SPLIT_K_MAX);
    if (o->split_k > 1 && (o->schedule == CF_SCHEDULE_COOPERATIVE || o->pair_tiles == 1))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "split_k %d: slices of K need one tile per warpgroup: the pingpong or finisher schedule, "
                         "no pair of tiles (here: %s)", o->split_k,
                         o->pair_tiles == 1 ? "pair tiles" : "cooperative");
    return CF_OK;
}

/* A row group given for a known row must not hold a whole CTA with no column tile: the
 * row's tiles split over the group (rows wider than the group take the wide-row path).
 * Through L2 only: a DSMEM cluster is a power of two, so idle CTAs are its price. */
static cf_status check_row_cover(const cf_plan_request *given, const cf_plan_request *o, int64_t N, bool reduces,
                                 cf_error *err)
{
    if (!reduces || !given->cluster_n || N <= 0 || o->reduce_mode != CF_REDUCE_GLOBAL)
        return CF_OK;
    const int per_cta = o->pair_tiles == 1 ? 2 : 1;
    const int64_t tiles = (N + o->block_n - 1) / o->block_n, held = (int64_t)o->cluster_n * per_cta;
    if (held - tiles >= per_cta)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "cluster_n %d: a row of N=%lld is %lld column tiles of %d, which %d CTAs%s do not divide "
                         "(%lld CTA%s would have no tile); use at most %lld",
                         o->cluster_n, (long long)N, (long long)tiles, o->block_n, o->cluster_n,
                         per_cta == 2 ? " of two tiles" : "", (long long)((held - tiles) / per_cta),
                         (held - tiles) / per_cta == 1 ? "" : "s", (long long)((tiles + per_cta - 1) / per_cta));
    return CF_OK;
}

/* Every plan is checked against shared memory before code is generated: the depth is lowered
 * until it fits (the request's stages is the deepest wanted), and a tile that fits at no
 * depth is refused. */
static cf_status fit_smem(const cf_ir *ir, cf_plan *p, cf_error *err)
{
    cf_plan_smem m = cf_plan_smem_of(ir, p);
    while (!m.fits && p->stages > 2) {
        p->stages--;
        m = cf_plan_smem_of(ir, p);
    }
    p->smem = m;
    if (m.fits)
        return CF_OK;
    return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                     "shared memory: %d stages of a %dx%d tile need %ld bytes dynamic + %d static, over the "
                     "%d-byte limit per CTA; use a narrower tile (--block-n) or another schedule",
                     p->stages, p->cooperative ? 2 * p->bm : p->bm, p->bn, m.dynamic_bytes, m.static_bytes,
                     p->smem_limit);
}

/* What Ψ renders, from a filled request. */
static cf_plan render_fields(const cf_ir *ir, const cf_plan_request *o, const cf_device_facts *dev)
{
    const bool global = o->reduce_mode == CF_REDUCE_GLOBAL && ir->n_stages[0] > 1 && o->cluster_n > 1;
    /* Through L2 the row's CTAs need no hardware cluster but the multicast's pairs. */
    return (cf_plan){.bm = o->block_m, .bn = o->block_n, .stages = o->stages,
                     .cluster_n = !global ? o->cluster_n : o->multicast == 1 ? 2 : 1, .row_ctas = o->cluster_n,
                     .red_leader = o->reduce_mode == CF_REDUCE_LEADER, .red_global = global,
                     .sync_finish = o->sync_finish == 1, .pair_tiles = o->pair_tiles == 1,
                     .cooperative = o->schedule == CF_SCHEDULE_COOPERATIVE,
                     .finisher = o->schedule == CF_SCHEDULE_FINISHER, .split_k = o->split_k,
                     .smem_limit = dev->smem_per_block};
}

/* The consequences of the rendered fields: what Ψ will emit for them. */
static void derive(const cf_ir *ir, cf_plan *p)
{
    p->reductions = ir->n_stages[0] - 1;
    p->reduce_mode = !p->reductions ? 0 : p->red_global ? CF_REDUCE_GLOBAL : p->req.reduce_mode;
    p->multicast = p->red_global && p->cluster_n == 2;
    p->late_finish = cf_cg_finishes_late(ir, p);
    p->gather_early = cf_cg_gathers_early(ir, p);
    p->has_finisher = cf_cg_has_finisher(ir, p);
    p->schedule = p->cooperative ? CF_SCHEDULE_COOPERATIVE : p->has_finisher ? CF_SCHEDULE_FINISHER
                                                                              : CF_SCHEDULE_PINGPONG;
    p->threads = p->has_finisher ? 512 : 384;
    p->gelu_at_store = cf_cg_gelu_stores(ir);
    p->exchanges = cf_cg_exchanges(ir, p);
}

/* Which [M,N] inputs come through the operand ring (decided at the plan's own K) and their names. */
static void tile_inputs(const cf_ir *ir, cf_plan *p)
{
    p->tin_args = cf_cg_tile_inputs(ir, p);
    p->tin_names[0] = '\0';
    for (int a = 0; a < ir->n_args && a < 32; a++)
        if (p->tin_args >> a & 1u) {
            const size_t used = strlen(p->tin_names);
            snprintf(p->tin_names + used, sizeof p->tin_names - used, "%s%s", used ? ", " : "", ir->args[a].name);
        }
}

static cf_status plan_by_rules(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                               const cf_plan_request *req, cf_plan *out, cf_error *err);

static bool request_empty(const cf_plan_request *r)
{
    static const cf_plan_request none;
    return !r || memcmp(r, &none, sizeof none) == 0;
}

/* Where the model's choice replaces the rules' plan.  The rules were fitted to A/Bs at shapes
 * that run two or more waves of row groups of at most 16 CTAs (M >= 4096, N <= 2048 or
 * K = 4096); there they stand (the model's paired tiles at K = 512 lost 2 % to them in those
 * A/Bs).  Outside that class (the GPU underfilled or one wave quantised: small M; rows of more
 * than 16 CTAs) the model decides where it predicts 10 % less time.  In a same-call A/B of
 * the 16 cells of the grid where it so decides (M = 64-8192, N/128 not a power of two,
 * K = 128-16384) its plan ran faster in 12 (up to 2.9x: softmax at 8192x8192x128; RMSNorm at
 * M = 512 1.40x, LN at M = 64 1.10x), even in one, slower in three (5, 11, 12 %); where it
 * predicted less than 10 %, the rules' plan had run up to 45 % faster. */
#define MODEL_MARGIN 0.90
/* The cost model's fixed cost of a launch (launch, prologue, the last tile's drain), as an
 * event-timed figure carries it: cuBLAS's own 512x512x64 GEMM, a fraction of a microsecond of
 * work, times 6.4 us there.  3 us under-predicted every grid cell under 20 us by 1.5-2.6x;
 * at 6 no grid cell's plan changes (the margin above is on the whole prediction). */
#define LAUNCH_US 6.0
#define RULES_MIN_WAVES 2.0
#define RULES_MAX_ROW_CTAS 16

static bool rules_fitted_class(const cf_plan *p)
{
    return p->waves >= RULES_MIN_WAVES && p->row_ctas <= RULES_MAX_ROW_CTAS;
}

/* The plan at M, N, K: req's choices, the rest from the rules (defaults_of, fitted to
 * measurements), or, with nothing requested and the shape known, the cost model's choice
 * where it predicts a clear gain over the rules' plan. */
cf_status cf_plan_make(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                       const cf_plan_request *req, cf_plan *out, cf_error *err)
{
    cf_status st = plan_by_rules(ir, M, N, K, dev, req, out, err);
    if (st != CF_OK || !request_empty(req) || !M || !N || !K || ir->n_gemms != 1 || out->wide ||
        out->predicted_us <= 0 || rules_fitted_class(out))
        return st;
    cf_plan best;
    if (cf_plan_model_choice(ir, M, N, K, dev, &best, &(cf_error){0}) == CF_OK &&
        best.predicted_us < MODEL_MARGIN * out->predicted_us) {
        best.rules_us = out->predicted_us;
        *out = best;
    }
    return CF_OK;
}

/* An [M, N] epilogue input beside a row reduction whose finish reads two [N] vectors (a residual
 * before LayerNorm): under a late finish the parked tile, the input and the vectors spill (24-36
 * bytes at N = 768, 1024), and finishing every tile at once ran 4-6 % faster (residual+LN
 * 8192x768x768 1.53 -> 1.46, 2048x1024x4096 1.32 -> 1.25, 8192x1024x1024 1.44 -> 1.39 of
 * cuBLAS; docs/performance.md).  Residual+RMSNorm (one reduction) does not spill late and
 * keeps the late finish. */
static bool sync_finish_pays(const cf_ir *ir)
{
    if (ir->n_stages[0] - 1 < 2 || last_stage_vectors(ir) < 2)   /* LN's two reductions, gamma and beta */
        return false;
    for (int i = 0; i < ir->n_args; i++)
        if (ir->args[i].kind == CF_ARG_TENSOR)
            return true;
    return false;
}

static cf_status plan_by_rules(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                               const cf_plan_request *req, cf_plan *out, cf_error *err)
{
    const cf_device_facts h200 = cf_device_facts_h200();
    if (!dev)
        dev = &h200;
    memset(out, 0, sizeof *out);
    const cf_plan_request given = req ? *req : (cf_plan_request){0};
    cf_plan_request o = given;
    if (request_empty(req) && sync_finish_pays(ir))   /* the rules' own plan; the model's are its own */
        o.sync_finish = 1;
    cf_plan_fill(&o, defaults_of(ir->graph, ir, M, N, K, dev->smem_per_block));
    const bool reduces = ir->n_stages[0] > 1;
    cf_status st = check_request(&o, reduces, ir->dual, err);
    if (st == CF_OK)
        st = check_row_cover(&given, &o, N, reduces, err);
    if (st != CF_OK)
        return st;
    cf_plan p = render_fields(ir, &o, dev);
    if ((st = fit_smem(ir, &p, err)) != CF_OK)
        return st;
    o.stages = p.stages;
    p.req = o;
    if (cf_cg_check(ir, &(cf_error){0}) == CF_OK) {
        derive(ir, &p);
        if (p.pair_tiles && !cf_cg_can_pair(ir, &p))
            return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                             "pair_tiles: needs a late finish through L2 on the consumer warpgroups (pingpong, "
                             "no --sync-finish, 2 or more CTAs a row) after the epilogue's only exchange, and no "
                             "more pairs a row than one round of the gather holds (%d pairs of %d-row tiles here)",
                             p.row_ctas, p.bm);
    }
    cf_plan_shape(ir, &p, M, N, K, dev, 0);
    if (cf_cg_check(ir, &(cf_error){0}) == CF_OK)
        tile_inputs(ir, &p);
    *out = p;
    return CF_OK;
}

/* ---- the shape: tiles, grid, waves ------------------------------------------------------ */

/* A hardware cluster of 4 or more CTAs keeps only ~120 of 132 SMs busy (GPCs hold SM counts
 * that clusters do not divide; docs/performance.md). */
#define CLUSTER4_SM_FRACTION (120.0 / 132.0)

/* CTAs the device holds at once: one per SM for these kernels (over 114 KB of shared memory
 * and 384+ threads at up to 168 registers), fewer SMs with large clusters. */
static int resident_estimate(const cf_plan *p, const cf_device_facts *dev)
{
    const long smem = p->smem.dynamic_bytes + p->smem.static_bytes + 1024;   /* + the SM's reserved 1 KB */
    long per_sm = smem > 0 ? dev->smem_per_sm / smem : 1;
    const long by_regs = dev->regs_per_sm / ((long)(p->threads ? p->threads : 384) * 128);
    per_sm = per_sm < by_regs ? per_sm : by_regs;
    per_sm = per_sm < 1 ? 1 : per_sm;
    const int sms = p->cluster_n >= 4 ? (int)(dev->sm_count * CLUSTER4_SM_FRACTION) : dev->sm_count;
    const int ctas = (int)(sms * per_sm);
    return ctas / p->cluster_n * p->cluster_n;
}

void cf_plan_shape(const cf_ir *ir, cf_plan *p, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                   int resident_ctas)
{
    const cf_device_facts h200 = cf_device_facts_h200();
    dev = dev ? dev : &h200;
    p->m = M > 0 ? M : 0;
    p->n = N > 0 ? N : 0;
    p->k = K > 0 ? K : 0;
    p->resident_ctas = resident_ctas > 0 ? resident_ctas : resident_estimate(p, dev);
    if (!p->m || !p->n || !p->k)
        return;
    const int tile_m = p->cooperative ? 2 * p->bm : p->bm, per_group = p->row_ctas * (p->pair_tiles ? 2 : 1);
    p->tiles_m = (M + tile_m - 1) / tile_m;
    p->tiles_n = (N + p->bn - 1) / p->bn;
    p->group_tiles = p->tiles_m * ((p->tiles_n + per_group - 1) / per_group);
    /* split_k: a copy of the row groups per slice of K, all resident at once */
    const int split = p->split_k > 1 ? p->split_k : 1;
    int64_t groups = p->resident_ctas / split / p->row_ctas;
    groups = groups < p->group_tiles ? groups : p->group_tiles;
    p->grid_ctas = groups * p->row_ctas * split;
    p->waves = groups > 0 ? (double)p->group_tiles / (double)groups : 0;
    p->wide = ir->n_stages[0] > 1 && N > (int64_t)p->bn * per_group;
    if (p->wide && ir->dual)   /* the wide path's GEMM and row kernel take one weight */
        snprintf(p->fallback, sizeof p->fallback,
                 "rows of N=%lld are wider than the row group (%d columns): a dual GEMM has no wide-row path, "
                 "it runs unfused (run --unfused)", (long long)N, p->bn * per_group);
    else if (p->wide)
        snprintf(p->fallback, sizeof p->fallback,
                 "rows of N=%lld are wider than the row group (%d columns): the wide-row path (this GEMM to f32, "
                 "then the row kernel)", (long long)N, p->bn * per_group);
    else if (groups < 1)
        snprintf(p->fallback, sizeof p->fallback, "a row group of %d CTAs%s does not fit on the device at once",
                 p->row_ctas, split > 1 ? " times the K slices" : "");
    else
        p->fallback[0] = 0;
    p->predicted_us = cf_plan_predict(ir, p, dev);
}

/* ---- the cost model ---------------------------------------------------------------------
 * A first-principles estimate for the H200, in microseconds.  Each constant is a datasheet
 * figure or a rounded estimate; MMA_EFF_128 and L2_BYTES_PER_US are set so that a bare GEMM
 * comes out at cuBLAS's measured times at 8192x4096x4096 (0.34-0.39 ms) and 16384x1024x1024
 * (0.044 ms), and LAUNCH_US (above) so that a tiny GEMM comes out at cuBLAS's time.  Nothing
 * else is fitted: bench/grid.py prints this prediction beside the measured time, which is what
 * checks it. */
#define SM_CLOCK_GHZ 1.98           /* the H200's boost clock (its power cap lowers it)         */
#define TC_FLOP_PER_SM_CLK 4096.0   /* dense bf16/f16 wgmma: 1024 FMA a clock an SM            */
#define MMA_EFF_128 0.80            /* of that a 128-row PingPong tile sustains (issue gaps)   */
#define MMA_EFF_64 0.70             /* a 64-row tile: half the wgmma shape, same overheads     */
#define FP32_OPS_PER_SM_CLK 128.0   /* the epilogue's FP32 pipe: 4 x 32 lanes                  */
#define L2_BYTES_PER_US 16.0e6      /* operand tiles from L2 (~16 TB/s over all SMs)          */
#define HBM_BYTES_PER_US 4.0e6      /* ~4 TB/s: unique operands, epilogue inputs and outputs */
#define XCHG_POST_US 0.5            /* a row partial's post and its flag through L2           */
#define XCHG_ROUND_US 1.2           /* a gather round of 8 ranks' partials (~2.4k cycles)     */
#define EPI_EXPOSED 0.15            /* PingPong: the share of an epilogue the other warpgroup's
                                       mainloop does not hide                                 */
/* An operand stage's load latency under a full stream, from L2 and from HBM: an SM streams its
 * ring's bytes in flight per latency, which bounds it below its L2 share when few SMs stream
 * weights that no other tile reuses (M = 64, N = K = 4096: 61-72 GB/s an SM with 80-160 KB in
 * flight). */
#define L2_LATENCY_US 0.5
#define HBM_LATENCY_US 2.2

/* FP32-pipe instructions per output element of the epilogue: an op's cost in the pipe
 * (transcendentals go through the SFU and a few FMAs), a reduction's add and shuffle share,
 * a store's conversion, a [M,N] input's load and conversion. */
static double epilogue_instr_upto(const cf_ir *ir, int last_depth)
{
    double n = 0;
    for (const cf_ir_spec *sp = ir->epi[0]; sp && sp->depth <= last_depth; sp = sp->post)
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *x = sp->nodes[i];
            if (x->shape != CF_SHAPE_TILE && x->kind != CF_IR_STORE)
                continue;
            switch (x->kind) {
            case CF_IR_COMPUTE:
                n += x->op == CF_OP_GELU || x->op == CF_OP_GELU_ERF || x->op == CF_OP_TANH ? 8
                     : x->op == CF_OP_EXP || x->op == CF_OP_LOG || x->op == CF_OP_SIGMOID || x->op == CF_OP_SILU ||
                               x->op == CF_OP_DIV || x->op == CF_OP_POW
                         ? 4
                         : 1;
                break;
            case CF_IR_REDUCE: n += 1.5; break;
            case CF_IR_STORE: n += 1.5; break;
            case CF_IR_BCAST: n += x->src == CF_BC_TENSOR ? 2 : 0; break;
            default: break;
            }
        }
    return n;
}

static double epilogue_instr_per_elem(const cf_ir *ir) { return epilogue_instr_upto(ir, INT_MAX); }

/* One k-block (64 of K) of a tile's mainloop on the tensor cores, in microseconds. */
static double kblock_us(const cf_plan *p)
{
    const int tile_m = p->cooperative ? 2 * p->bm : p->bm;
    const double eff = p->bm == 128 ? MMA_EFF_128 : MMA_EFF_64;
    return 2.0 * tile_m * p->bn * 64 / (TC_FLOP_PER_SM_CLK * eff * SM_CLOCK_GHZ * 1e3);
}

bool cf_plan_ring_inputs_pay(const cf_ir *ir, const cf_plan *p, int last_depth, int tin_stages)
{
    const int tile_m = p->cooperative ? 2 * p->bm : p->bm;
    const double hold = tile_m * p->bn * epilogue_instr_upto(ir, last_depth) / (FP32_OPS_PER_SM_CLK * SM_CLOCK_GHZ * 1e3);
    const int free = p->stages - tin_stages - 1;   /* what the producer fills before it waits */
    const int64_t nkb = p->k > 0 ? (p->k + 63) / 64 : INT32_MAX;
    return nkb <= free || hold <= free * kblock_us(p);
}

/* Bytes that must cross HBM once: X, W, the epilogue's inputs and its outputs. */
static double hbm_bytes(const cf_ir *ir, const cf_plan *p)
{
    const double M = (double)p->m, N = (double)p->n, K = (double)p->k;
    const double in = (double)cf_dtype_size(ir->args[0].dtype);
    double b = (M * K + K * N) * in;
    for (int i = 2; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        b += a->kind == CF_ARG_GEMM2_B && ir->dual ? K * N * in : 0;   /* the second weight */
        const double es = (double)cf_dtype_size(a->dtype);
        b += a->kind == CF_ARG_TENSOR ? M * N * es : a->kind == CF_ARG_VEC_N ? N * es : a->kind == CF_ARG_VEC_M ? M * es
             : a->kind == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, a->index).rank == 2 ? M * N * es
             : a->kind == CF_ARG_OUTPUT                                                         ? M * es
                                                                                                : 0;
    }
    return b;
}

/* Two things that run at once take about the longer's time; the 4-norm says so smoothly
 * (within 19 % of the max when equal, exact when one dominates), and keeps the prediction
 * growing with each of them. */
static double overlap(double a, double b)
{
    return pow(pow(a, 4) + pow(b, 4), 0.25);
}

double cf_plan_predict(const cf_ir *ir, const cf_plan *p, const cf_device_facts *dev)
{
    const cf_device_facts h200 = cf_device_facts_h200();
    dev = dev ? dev : &h200;
    if (!p->m || !p->n || !p->k || p->grid_ctas < 1)
        return 0;
    const double clk_per_us = SM_CLOCK_GHZ * 1e3;
    const int tile_m = p->cooperative ? 2 * p->bm : p->bm;
    /* Waves: tiles per SM, in whole tiles (the busiest SM sets the time). */
    const double tiles = (double)p->tiles_m * (double)p->tiles_n;
    const int split = p->split_k > 1 ? p->split_k : 1;
    const double rounds = ceil(tiles / (double)(p->grid_ctas / split));
    /* Mainloop of one tile over its slice of K: tensor-core time against its operand bytes at
     * the SM's stream rate, its share of L2 bandwidth or its ring's bytes in flight per load
     * latency, whichever is lower (a cluster's multicast halves X's bytes). */
    const double eff = p->bm == 128 ? MMA_EFF_128 : MMA_EFF_64;
    const int n_b = ir->dual ? 2 : 1;   /* a dual GEMM's tile multiplies X by both weights' columns */
    const double k = (double)p->k / split;
    const double mma = 2.0 * tile_m * p->bn * n_b * k / (TC_FLOP_PER_SM_CLK * eff * clk_per_us);
    const double x_rows = tile_m * (p->cluster_n > 1 ? 0.5 : 1.0), row_bytes = (x_rows + n_b * p->bn) * 2.0;
    /* the share of a row block's operand bytes that come from HBM: X's rows once for all its
     * column tiles, the weights' columns each once (reuse by other row blocks is not counted,
     * which keeps more M from predicting less time) */
    const double miss = fmin(1.0, (x_rows + n_b * (double)p->n) / ((double)p->tiles_n * row_bytes / 2.0));
    const double latency = L2_LATENCY_US + (HBM_LATENCY_US - L2_LATENCY_US) * miss;
    const double rate = fmin(L2_BYTES_PER_US / dev->sm_count, p->stages * row_bytes * 64 / latency);
    const double mainloop = overlap(mma, row_bytes * k / rate);
    /* split_k: slice 0 waits for the others' posts and reads their partials from L2, an L2
     * round trip under load a slice (1.1 us at 64x192 in 6 slices, gathered into registers) */
    const double slice_bytes = tile_m * p->bn * 4.0;
    const double partials = split > 1 ? XCHG_POST_US + (split - 1) * overlap(XCHG_ROUND_US,
                                                                         slice_bytes / (L2_BYTES_PER_US / dev->sm_count))
                                      : 0;
    /* Epilogue of one tile on the FP32 pipe, and the exchange: a post and the gather rounds of
     * 8 ranks per exchange (a merged pair is one), waited for at once, or (late finish) under
     * the next mainloop but for what outlasts it (smoothly: x^2 / (x + mainloop)). */
    const double epi = tile_m * p->bn * epilogue_instr_per_elem(ir) / (FP32_OPS_PER_SM_CLK * clk_per_us);
    double xchg_all = 0, xchg = 0;
    if (p->reductions && p->row_ctas > 1) {
        xchg_all = p->exchanges * (XCHG_POST_US + XCHG_ROUND_US * ((p->row_ctas + 7) / 8));
        xchg = p->late_finish ? xchg_all * xchg_all / (xchg_all + mainloop) : xchg_all;
    }
    /* A warpgroup's chain per tile is its mainloop, epilogue and exchange.  Cooperatively the
     * SM runs one chain; PingPong two, sharing the tensor cores: a tile takes the mainloop
     * (tensor-bound) or half a chain (latency-bound), whichever is longer, plus the share of
     * the epilogue the other warpgroup's mainloop does not hide. */
    const double chain = mainloop + partials + epi + xchg;
    const double tile = p->cooperative ? chain : overlap(mainloop, chain / 2) + EPI_EXPOSED * epi;
    /* The last tile's epilogue and exchange have no mainloop after them to hide under: a grid
     * of one tile a CTA (small M) takes the whole chain (CF_TRACE: the tail after the last
     * mainloop is 5-12 kcycles, as long as that mainloop, at M = 64-2048). */
    const double last = mainloop + partials + epi + xchg_all;
    const double per_sm = (rounds - 1) * tile + fmax(tile, last);
    /* HBM: every byte once (the wide-row path writes C as f32 and reads it back) */
    const double mn = (double)p->m * (double)p->n;
    const double hbm = (hbm_bytes(ir, p) + (p->wide ? 8.0 * mn : 0)) / HBM_BYTES_PER_US;
    return overlap(per_sm, hbm) + LAUNCH_US;
}

/* ---- overrides (the CLI's --plan key=value) ------------------------------------------ */

static bool parse_int_in(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* "a" -> 1, "b" -> -1 for the two words of a switch; 0 for anything else */
static int either(const char *v, const char *a, const char *b)
{
    return strcmp(v, a) == 0 ? 1 : strcmp(v, b) == 0 ? -1 : 0;
}

static int reduce_of(const char *v)
{
    return strcmp(v, "peer") == 0 ? CF_REDUCE_PEER : strcmp(v, "leader") == 0 ? CF_REDUCE_LEADER
           : strcmp(v, "global") == 0 ? CF_REDUCE_GLOBAL : 0;
}

static int schedule_of(const char *v)
{
    return strcmp(v, "pingpong") == 0 ? CF_SCHEDULE_PINGPONG : strcmp(v, "cooperative") == 0 ? CF_SCHEDULE_COOPERATIVE
           : strcmp(v, "finisher") == 0 ? CF_SCHEDULE_FINISHER : 0;
}

static const char *const derived_keys[] = {
    "late_finish", "gather_early", "finisher", "gelu_at_store", "smem", "grid", "waves", "threads", "fallback",
    "predicted",
};

cf_status cf_plan_override(cf_plan_request *r, const char *key, const char *v, cf_error *err)
{
    int x = 0;
    bool ok = true;
    int *field = NULL;   /* set to x when the value is good */
    if (strcmp(key, "block_m") == 0)
        ok = parse_int_in(v, 64, 128, &x) && (x == 64 || x == 128), field = &r->block_m;
    else if (strcmp(key, "block_n") == 0)
        ok = parse_int_in(v, 64, 256, &x) && x % 64 == 0, field = &r->block_n;
    else if (strcmp(key, "stages") == 0)
        ok = parse_int_in(v, 2, 12, &x), field = &r->stages;
    else if (strcmp(key, "cluster") == 0 || strcmp(key, "row_ctas") == 0)
        ok = parse_int_in(v, 1, 64, &x), field = &r->cluster_n;
    else if (strcmp(key, "reduce") == 0)
        ok = (x = reduce_of(v)) != 0, field = &r->reduce_mode;
    else if (strcmp(key, "schedule") == 0)
        ok = (x = schedule_of(v)) != 0, field = &r->schedule;
    else if (strcmp(key, "finish") == 0)
        ok = (x = either(v, "sync", "late")) != 0, field = &r->sync_finish;
    else if (strcmp(key, "pair") == 0 || strcmp(key, "pair_tiles") == 0)
        ok = (x = either(v, "on", "off")) != 0, field = &r->pair_tiles;
    else if (strcmp(key, "multicast") == 0)
        ok = (x = either(v, "on", "off")) != 0, field = &r->multicast;
    else if (strcmp(key, "split_k") == 0)
        ok = parse_int_in(v, 1, CF_SPLIT_K_MAX, &x), field = &r->split_k;
    else {
        for (int i = 0; i < CF_ARRAY_LEN(derived_keys); i++)
            if (strcmp(key, derived_keys[i]) == 0)
                return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                                 "--plan %s: follows from the other fields (the epilogue, the tile, the finish); "
                                 "it cannot be set", key);
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "--plan %s: no such field (block_m, block_n, stages, cluster, reduce, schedule, finish, "
                         "pair, multicast, split_k)", key);
    }
    if (ok) {
        *field = x;
        return CF_OK;
    }
    static const struct { const char *key, *takes; } takes[] = {
        {"block_m", "64 or 128"}, {"block_n", "64, 128, 192 or 256"}, {"stages", "an integer in 2..12"},
        {"cluster", "1..64"}, {"row_ctas", "1..64"}, {"reduce", "peer, leader or global"},
        {"schedule", "pingpong, cooperative or finisher"}, {"finish", "sync or late"}, {"pair", "on or off"},
        {"pair_tiles", "on or off"}, {"multicast", "on or off"}, {"split_k", "an integer in 1..16"},
    };
    const char *what = "";
    for (int i = 0; i < CF_ARRAY_LEN(takes); i++)
        if (strcmp(key, takes[i].key) == 0)
            what = takes[i].takes;
    return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "--plan %s=%s: must be %s", key, v, what);
}

/* ---- printing ------------------------------------------------------------------------ */

static const char *schedule_name(int s)
{
    return s == CF_SCHEDULE_COOPERATIVE ? "cooperative" : s == CF_SCHEDULE_FINISHER ? "finisher" : "pingpong";
}

static const char *yes_no(bool b) { return b ? "yes" : "no"; }

void cf_plan_format(const cf_plan *p, cf_strbuf *sb)
{
    static const char *const modes[] = {"none", "peer (DSMEM all-to-all)", "leader (DSMEM via rank 0)",
                                        "global (through L2)"};
    cf_sb_printf(sb, "plan:\n");
    cf_sb_printf(sb, "  tile: %dx%d per consumer warpgroup%s\n", p->bm, p->bn,
                 p->cooperative ? " (both on one tile of 2 x block_m rows)" : "");
    cf_sb_printf(sb, "  row group: %d CTAs%s\n", p->row_ctas, p->pair_tiles ? " of two column tiles each" : "");
    cf_sb_printf(sb, "  tile map: %s\n",
                 p->cooperative  ? "a CTA's two warpgroups share each tile (2 x block_m rows)"
                 : p->pair_tiles ? "CTA r of a row group takes column tiles 2r and 2r+1, one per warpgroup"
                 : p->row_ctas > 1 ? "CTA r of a row group takes column tile r; its warpgroups alternate row blocks"
                                   : "a CTA's warpgroups alternate tiles");
    cf_sb_printf(sb, "  hardware cluster: %d\n", p->cluster_n);
    cf_sb_printf(sb, "  stages: %d\n", p->stages);
    cf_sb_printf(sb, "  schedule: %s\n", schedule_name(p->schedule));
    cf_sb_printf(sb, "  reductions: %d, exchange: %s\n", p->reductions, modes[p->reduce_mode & 3]);
    cf_sb_printf(sb, "  finish: %s\n", p->late_finish ? "late (after the next mainloop)" : "at once");
    cf_sb_printf(sb, "  pair tiles: %s\n", yes_no(p->pair_tiles));
    cf_sb_printf(sb, "  multicast: %s\n", yes_no(p->multicast));
    if (p->split_k > 1)
        cf_sb_printf(sb, "  split K: %d slices, each on its own copy of the grid; partials through L2\n", p->split_k);
    else
        cf_sb_printf(sb, "  split K: no\n");
    cf_sb_printf(sb, "  gather early: %s\n", yes_no(p->gather_early));
    cf_sb_printf(sb, "  finisher warpgroup: %s\n", yes_no(p->has_finisher));
    cf_sb_printf(sb, "  gelu at store: %d\n", p->gelu_at_store);
    cf_sb_printf(sb, "  tile inputs: %s\n", p->tin_args ? p->tin_names : "none through the ring");
    cf_sb_printf(sb, "  threads: %d\n", p->threads);
    cf_sb_printf(sb, "  shared memory: %ld bytes dynamic (%d staging chunks) + %d static\n", p->smem.dynamic_bytes,
                 p->smem.stg_chunks, p->smem.static_bytes);
    if (!p->m) {
        cf_sb_printf(sb, "  grid: unknown without a shape\n");
        return;
    }
    cf_sb_printf(sb, "  tiles: %lld x %lld (%lld row-group tiles)\n", (long long)p->tiles_m, (long long)p->tiles_n,
                 (long long)p->group_tiles);
    cf_sb_printf(sb, "  grid: %lld CTAs of %d resident, %.2f waves\n", (long long)p->grid_ctas, p->resident_ctas,
                 p->waves);
    cf_sb_printf(sb, "  fallback: %s\n", p->fallback[0] ? p->fallback : "none");
    cf_sb_printf(sb, "predicted: %.1f us\n", p->predicted_us);
    if (p->rules_us > 0)
        cf_sb_printf(sb, "chosen by: the cost model (the rules' plan: predicted %.1f us)\n", p->rules_us);
}

/* ---- the model's own choice (cf_plan_make takes it outside the rules' class) ----------- */

cf_status cf_plan_model_choice(const cf_ir *ir, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                               cf_plan *best, cf_error *err)
{
    /* tiles of 128 rows up to 128 columns, of 64 rows wider (128 accumulators a thread);
     * with reductions, each with and without the pair of tiles per CTA.  A dual GEMM's K is
     * not sliced: posting two accumulators cost more than the slices gained (SwiGLU
     * 64x11008x4096, 64x128 tiles: 1.05x cuBLAS whole, 1.15x in 2 or 3 slices) */
    static const int tiles[][2] = {{64, 64}, {128, 64}, {128, 128}, {64, 128}, {64, 192}, {64, 256}};
    static const int splits[] = {1, 2, 3, 4, 6, 8};
    const bool reduces = ir->n_stages[0] > 1;
    bool found = false;
    cf_status st = CF_OK;
    for (int i = 0; i < CF_ARRAY_LEN(tiles); i++)
        for (int pair = -1; pair <= (reduces ? 1 : -1); pair += 2)
            for (int j = 0; j < CF_ARRAY_LEN(splits) && ((pair == -1 && !ir->dual) || j == 0); j++) {
                /* a row group of exactly the row's column tiles (no idle CTA) */
                const int64_t row_tiles = (N + tiles[i][1] - 1) / tiles[i][1], per_cta = pair == 1 ? 2 : 1;
                const int64_t ctas = reduces ? (row_tiles + per_cta - 1) / per_cta : 0;
                /* every slice at least two k-blocks */
                if (ctas > 64 || (K + 63) / 64 < 2 * splits[j])
                    continue;
                /* the ring as deep as shared memory holds (cf_plan_make lowers it to fit; the
                 * model's stream rate grows with the bytes in flight), else where that is
                 * refused (a pair of tiles needs the late finish a deep ring leaves no room
                 * for) the plan's own depth */
                cf_plan_request r = {.block_m = tiles[i][0], .block_n = tiles[i][1], .pair_tiles = pair,
                                     .cluster_n = (int)ctas, .split_k = splits[j], .stages = 12};
                cf_plan p;
                if ((st = cf_plan_make(ir, M, N, K, dev, &r, &p, err)) != CF_OK) {
                    r.stages = 0;
                    st = cf_plan_make(ir, M, N, K, dev, &r, &p, err);
                }
                if (st != CF_OK || p.wide || p.predicted_us <= 0 || p.fallback[0])
                    continue;
                if (!found || p.predicted_us < best->predicted_us)
                    *best = p;
                found = true;
            }
    if (found)
        return CF_OK;
    return st != CF_OK ? st
                       : cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                                   "no candidate tile holds a row of N=%lld in one row group", (long long)N);
}
