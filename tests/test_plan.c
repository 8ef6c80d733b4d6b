/* test_plan.c — the planning stage (src/plan.c): its decisions at several shapes, the cost
 * model's monotonicity, overrides applied and refused, and the same plan from the CLI and
 * the C API. */
#include "cf_internal.h"
#include "test_util.h"

#include <stdint.h>
#include <sys/wait.h>

static char bin[512]; /* the comfuse binary of this build */

static cf_graph *parse(const char *path)
{
    cf_graph *g = NULL;
    cf_error err;
    if (cf_spec_parse_file(path, &g, &err) != CF_OK)
        fprintf(stderr, "%s\n", err.msg);
    return g;
}

/* Plans spec at M, N, K from req (NULL: all chosen); false (error printed) on failure. */
static bool plan_of(const char *spec, int64_t M, int64_t N, int64_t K, const cf_device_facts *dev,
                    const cf_plan_request *req, cf_plan *p, cf_error *err)
{
    cf_graph *g = parse(spec);
    cf_ir *ir = NULL;
    cf_status st = g ? cf_lower(g, &ir, err) : CF_ERR_PARSE;
    if (st == CF_OK)
        st = cf_plan_make(ir, M, N, K, dev, req, p, err);
    cf_ir_free(ir);
    cf_graph_free(g);
    return st == CF_OK;
}

/* Runs the CLI with args; its exit status, and its output (stdout and stderr) in out. */
static int cli(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", bin, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A row group covers its row's column tiles with no whole CTA idle, N = 5120 (40 tiles, not a
 * power of two) included; one row group per row block of tiles. */
static void test_row_groups(void)
{
    static const char *const specs[] = {"examples/gemm_rmsnorm.cf", "examples/gemm_bias_ln.cf",
                                        "examples/gemm_softmax.cf"};
    static const int64_t shapes[][3] = {{8192, 5120, 1024}, {4096, 5120, 4096}, {2048, 768, 768},
                                        {16384, 1024, 1024}, {512, 1600, 6400}};
    for (int s = 0; s < CF_ARRAY_LEN(specs); s++)
        for (int i = 0; i < CF_ARRAY_LEN(shapes); i++) {
            cf_plan p;
            cf_error err;
            CHECK(plan_of(specs[s], shapes[i][0], shapes[i][1], shapes[i][2], NULL, NULL, &p, &err));
            const int per_cta = p.pair_tiles ? 2 : 1;
            const int64_t held = (int64_t)p.row_ctas * per_cta;
            CHECK(held >= p.tiles_n);                               /* the row fits: no wide path */
            /* idle: at most the one CTA a multicast pair adds to an odd group */
            CHECK(held - p.tiles_n < per_cta + (p.multicast ? per_cta : 0));
            CHECK_EQ_INT(p.tiles_m, p.group_tiles);
            CHECK(!p.wide && !p.fallback[0]);
            CHECK(p.grid_ctas >= p.row_ctas && p.grid_ctas <= p.resident_ctas);
        }
    cf_plan p;
    cf_error err;
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 8192, 5120, 1024, NULL, NULL, &p, &err));
    CHECK_EQ_INT(40, p.tiles_n);
    CHECK_EQ_INT(CF_REDUCE_GLOBAL, p.reduce_mode);
    /* rows wider than 64 CTAs' tiles: the wide path, said so */
    CHECK(plan_of("examples/gemm_bias_ln.cf", 2048, 32000, 4096, NULL, NULL, &p, &err));
    CHECK(p.wide);
    CHECK_CONTAINS(p.fallback, "wide-row path");
    /* an elementwise epilogue: no row group, PingPong (cooperative for a bare GEMM at K = 4096) */
    CHECK(plan_of("examples/gemm_bias_gelu.cf", 8192, 4096, 4096, NULL, NULL, &p, &err));
    CHECK_EQ_INT(1, p.row_ctas);
    CHECK_EQ_INT(CF_SCHEDULE_PINGPONG, p.schedule);
    CHECK_EQ_INT(1, p.gelu_at_store);
    CHECK(plan_of("examples/gemm.cf", 8192, 4096, 4096, NULL, NULL, &p, &err));
    CHECK_EQ_INT(CF_SCHEDULE_COOPERATIVE, p.schedule);
    CHECK_EQ_INT(2, p.cluster_n);
    CHECK_EQ_INT(32, p.tiles_m);   /* tiles of 2 x 128 rows */
}

/* The stages the plan keeps fit its shared-memory budget, and a smaller budget (another
 * device) gets fewer stages, never a plan that does not fit. */
static void test_stages_fit(void)
{
    static const char *const specs[] = {"examples/gemm.cf", "examples/gemm_bias_gelu.cf", "examples/gemm_bias_ln.cf",
                                        "examples/gemm_ln_softmax.cf", "examples/gemm_rmsnorm_res2.cf"};
    cf_device_facts small = cf_device_facts_h200();
    small.smem_per_block = 160 * 1024;
    for (int s = 0; s < CF_ARRAY_LEN(specs); s++) {
        cf_plan p, q;
        cf_error err;
        CHECK(plan_of(specs[s], 8192, 4096, 4096, NULL, NULL, &p, &err));
        CHECK(p.smem.fits);
        CHECK(p.smem.dynamic_bytes + p.smem.static_bytes <= CF_SMEM_OPTIN);
        CHECK_EQ_INT(p.stages, p.req.stages);
        /* asked for 12, the plan keeps the deepest that fits: at least the default's */
        cf_plan deep;
        const cf_plan_request twelve = {.stages = 12};
        CHECK(plan_of(specs[s], 8192, 4096, 4096, NULL, &twelve, &deep, &err));
        CHECK(deep.smem.fits && deep.stages >= p.stages && deep.stages < 12);
        CHECK(plan_of(specs[s], 8192, 4096, 4096, &small, NULL, &q, &err));
        CHECK(q.smem.fits && q.smem.dynamic_bytes + q.smem.static_bytes <= small.smem_per_block);
        CHECK(q.stages < p.stages);
    }
    /* a tile that fits at no depth is refused, naming the limit */
    cf_device_facts tiny = cf_device_facts_h200();
    tiny.smem_per_block = 40000;
    cf_plan p;
    cf_error err;
    CHECK(!plan_of("examples/gemm_bias_ln.cf", 8192, 4096, 4096, &tiny, NULL, &p, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, err.status);
    CHECK_CONTAINS(err.msg, "over the 40000-byte limit per CTA");
}

/* More K: more time; more M: not less; and the prediction is there, in microseconds. */
static void test_model_monotone(void)
{
    static const char *const specs[] = {"examples/gemm.cf", "examples/gemm_bias_gelu.cf", "examples/gemm_bias_ln.cf",
                                        "examples/gemm_softmax.cf", "examples/gemm_ln_softmax.cf"};
    static const int64_t ms[] = {64, 512, 2048, 8192}, ns[] = {768, 4096, 5120}, ks[] = {64, 512, 4096};
    for (int s = 0; s < CF_ARRAY_LEN(specs); s++)
        for (int a = 0; a < CF_ARRAY_LEN(ms); a++)
            for (int b = 0; b < CF_ARRAY_LEN(ns); b++)
                for (int c = 0; c < CF_ARRAY_LEN(ks); c++) {
                    cf_plan p, more_k, more_m;
                    cf_error err;
                    /* one request for all three: the same kernel at three sizes */
                    CHECK(plan_of(specs[s], ms[a], ns[b], ks[c], NULL, NULL, &p, &err));
                    CHECK(plan_of(specs[s], ms[a], ns[b], 2 * ks[c], NULL, &p.req, &more_k, &err));
                    CHECK(plan_of(specs[s], 2 * ms[a], ns[b], ks[c], NULL, &p.req, &more_m, &err));
                    CHECK(p.predicted_us > 0);
                    CHECK(more_k.predicted_us > p.predicted_us);
                    CHECK(more_m.predicted_us >= p.predicted_us);
                }
    /* a plan without a shape predicts nothing */
    cf_plan p;
    cf_error err;
    CHECK(plan_of("examples/gemm_bias_ln.cf", 0, 0, 0, NULL, NULL, &p, &err));
    CHECK(p.predicted_us == 0 && p.grid_ctas == 0);
}

/* The model replaces the rules' plan outside the class the rules were fitted to (two or more
 * waves of row groups of at most 16 CTAs), and only where it predicts 10 % less time; a
 * request, even of one field, is planned by the rules. */
static void test_model_takes_over(void)
{
    static const struct { const char *spec; int64_t m, n, k; bool model; } cells[] = {
        {"examples/gemm_rmsnorm.cf", 64, 4096, 4096, true},        /* one row block: 32 of 132 SMs */
        {"examples/gemm_bias_gelu.cf", 64, 24576, 3072, true},     /* 1.45 waves of 128x128 tiles */
        {"examples/gemm_softmax.cf", 8192, 8192, 128, true},       /* rows of 64 CTAs */
        {"examples/gemm_rmsnorm.cf", 16384, 1024, 1024, false},    /* the rules' class */
        {"examples/gemm_bias_ln.cf", 4096, 2048, 512, false},
        {"examples/gemm_softmax.cf", 4096, 2048, 512, false},
    };
    for (int i = 0; i < CF_ARRAY_LEN(cells); i++) {
        cf_plan p, rules;
        cf_error err;
        CHECK(plan_of(cells[i].spec, cells[i].m, cells[i].n, cells[i].k, NULL, NULL, &p, &err));
        CHECK_EQ_INT(cells[i].model, p.rules_us > 0);
        if (p.rules_us > 0)
            CHECK(p.predicted_us < 0.9 * p.rules_us);
        /* any field requested: the rules plan the rest */
        cf_plan_request r = {.stages = p.stages};
        CHECK(plan_of(cells[i].spec, cells[i].m, cells[i].n, cells[i].k, NULL, &r, &rules, &err));
        CHECK(rules.rules_us == 0);
        if (cells[i].model)
            CHECK(rules.bm != p.bm || rules.bn != p.bn || rules.row_ctas != p.row_ctas ||
                  rules.pair_tiles != p.pair_tiles);
    }
}

/* Slices of K: the grid is a copy of the row groups per slice, all resident; the model takes
 * them where one row block of tiles leaves most SMs idle and not where the tiles fill the
 * GPU; what the kernel cannot slice is refused by name. */
static void test_split_k(void)
{
    cf_plan p;
    cf_error err;
    cf_plan_request r = {.split_k = 4, .block_m = 64};
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 64, 4096, 4096, NULL, &r, &p, &err));
    CHECK_EQ_INT(4, p.split_k);
    CHECK_EQ_INT(32, p.row_ctas);   /* 4096 columns in tiles of 128 */
    CHECK_EQ_INT(128, (int)p.grid_ctas);   /* 4 copies of one row group */
    CHECK(!p.pair_tiles && !p.cooperative && !p.fallback[0]);
    /* five copies of 32 CTAs do not fit on 132 SMs */
    r.split_k = 5;
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 64, 4096, 4096, NULL, &r, &p, &err));
    CHECK(p.grid_ctas == 0 && strstr(p.fallback, "times the K slices") != NULL);
    /* the model: at M = 64 it slices K (and predicts less than the unsliced plan) */
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 64, 4096, 4096, NULL, NULL, &p, &err));
    CHECK(p.split_k > 1 && p.grid_ctas <= p.resident_ctas);
    cf_plan one;
    cf_plan_request same = {.block_m = p.bm, .block_n = p.bn, .stages = p.stages, .split_k = 1};
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 64, 4096, 4096, NULL, &same, &one, &err));
    CHECK(p.predicted_us < one.predicted_us);
    /* a bare GEMM at M = 64 too (its default schedule, cooperative, gives way to pingpong) */
    CHECK(plan_of("examples/gemm_bias_gelu.cf", 64, 4096, 4096, NULL, NULL, &p, &err));
    CHECK(p.split_k > 1 && !p.cooperative);
    /* not where the tiles fill the GPU */
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 8192, 4096, 4096, NULL, NULL, &p, &err));
    CHECK_EQ_INT(1, p.split_k);
    /* refused, named */
    cf_plan_request coop = {.split_k = 2, .schedule = CF_SCHEDULE_COOPERATIVE};
    CHECK(!plan_of("examples/gemm.cf", 64, 4096, 4096, NULL, &coop, &p, &err));
    CHECK_CONTAINS(err.msg, "split_k 2: slices of K need one tile per warpgroup");
    CHECK_CONTAINS(err.msg, "(here: cooperative)");
    cf_plan_request pair = {.split_k = 2, .pair_tiles = 1};
    CHECK(!plan_of("examples/gemm_rmsnorm.cf", 64, 4096, 4096, NULL, &pair, &p, &err));
    CHECK_CONTAINS(err.msg, "(here: pair tiles)");
    /* a dual GEMM slices both accumulators' K where asked (the model does not choose it yet) */
    cf_plan_request dual = {.split_k = 2};
    CHECK(plan_of("examples/swiglu.cf", 64, 4096, 4096, NULL, &dual, &p, &err));
    CHECK_EQ_INT(2, p.split_k);
    CHECK(plan_of("examples/swiglu.cf", 64, 11008, 4096, NULL, NULL, &p, &err));
    CHECK_EQ_INT(1, p.split_k);
    cf_plan_request o = {0};
    CHECK_EQ_INT(CF_OK, cf_plan_override(&o, "split_k", "3", &err));
    CHECK_EQ_INT(3, o.split_k);
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_plan_override(&o, "split_k", "17", &err));
    CHECK_CONTAINS(err.msg, "--plan split_k=17: must be an integer in 1..16");
    CHECK_EQ_INT(3, o.split_k);
    /* the CLI's flag, rendered into the schedule */
    char out[1 << 16];
    CHECK_EQ_INT(0, cli("emit --split-k 4 --block-m 64 --shape M=64,N=4096,K=4096 examples/gemm_rmsnorm.cf", out,
                        sizeof out));
    CHECK_CONTAINS(out, "static constexpr int split_k = 4;");
    CHECK_EQ_INT(2, cli("emit --split-k 0 examples/gemm_rmsnorm.cf", out, sizeof out));
    CHECK_CONTAINS(out, "--split-k 0: must be an integer in 1..16");
}

/* The C API refuses a dual GEMM whose rows outgrow the row group at build time, with the
 * reason, rather than after NVRTC at its first launch (it has no wide-row path). */
static void test_dual_too_wide_refused_at_build(void)
{
    cf_graph *g = parse("tests/specs/swiglu_rmsnorm.cf");
    cf_kernel *k = NULL;
    cf_error err;
    cf_options o = cf_options_for(g, 2048, 16384, 4096);
    CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_kernel_build(g, &o, "wide", &k, &err));
    CHECK(k == NULL);
    CHECK_CONTAINS(err.msg, "a dual GEMM has no wide-row path");
    o = cf_options_for(g, 2048, 4096, 4096);
    CHECK_EQ_INT(CF_OK, cf_kernel_build(g, &o, "fits", &k, &err));
    cf_kernel_free(k);
    cf_graph_free(g);
}

static void test_overrides(void)
{
    cf_plan_request r = {0};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "block_n", "256", &err));
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "block_m", "64", &err));
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "finish", "sync", &err));
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "pair", "off", &err));
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "reduce", "global", &err));
    CHECK_EQ_INT(CF_OK, cf_plan_override(&r, "schedule", "pingpong", &err));
    CHECK(r.block_n == 256 && r.block_m == 64 && r.sync_finish == 1 && r.pair_tiles == -1 &&
          r.reduce_mode == CF_REDUCE_GLOBAL && r.schedule == CF_SCHEDULE_PINGPONG);
    cf_plan p;
    CHECK(plan_of("examples/gemm_bias_ln.cf", 16384, 1024, 1024, NULL, &r, &p, &err));
    CHECK(p.bm == 64 && p.bn == 256 && p.sync_finish && !p.late_finish && !p.pair_tiles);
    CHECK_EQ_INT(4, p.row_ctas);   /* 1024 columns in tiles of 256 */

    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_plan_override(&r, "block_n", "100", &err));
    CHECK_CONTAINS(err.msg, "--plan block_n=100: must be 64, 128, 192 or 256");
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_plan_override(&r, "stages", "1", &err));
    CHECK_CONTAINS(err.msg, "--plan stages=1: must be an integer in 2..12");
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_plan_override(&r, "late_finish", "yes", &err));
    CHECK_CONTAINS(err.msg, "--plan late_finish: follows from the other fields");
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_plan_override(&r, "tile", "128", &err));
    CHECK_CONTAINS(err.msg, "--plan tile: no such field");
    CHECK_EQ_INT(256, r.block_n);   /* a refused value leaves the field */

    /* a row group that does not divide the row: 8 column tiles over 12 CTAs */
    cf_plan_request c = {.cluster_n = 12};
    CHECK(!plan_of("examples/gemm_rmsnorm.cf", 16384, 1024, 1024, NULL, &c, &p, &err));
    CHECK_CONTAINS(err.msg, "cluster_n 12: a row of N=1024 is 8 column tiles of 128, which 12 CTAs do not divide");
    /* a DSMEM cluster is a power of two: 8 CTAs for 6 tiles is its only shape */
    cf_plan_request peer = {.cluster_n = 8, .reduce_mode = CF_REDUCE_PEER};
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 16384, 768, 1024, NULL, &peer, &p, &err));
    CHECK(p.row_ctas == 8 && !p.red_global && p.cluster_n == 8);
    c.cluster_n = 8;   /* exactly the row: taken, a CTA per tile */
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 16384, 1024, 1024, NULL, &c, &p, &err));
    CHECK(p.row_ctas == 8 && !p.pair_tiles);
    c.cluster_n = 4;   /* fewer: the wide-row path, said so */
    CHECK(plan_of("examples/gemm_rmsnorm.cf", 16384, 1024, 1024, NULL, &c, &p, &err));
    CHECK(p.wide);
    /* a combination the kernel cannot run, named */
    cf_plan_request coop = {.schedule = CF_SCHEDULE_COOPERATIVE};
    CHECK(!plan_of("examples/gemm_softmax.cf", 4096, 1024, 1024, NULL, &coop, &p, &err));
    CHECK_CONTAINS(err.msg, "schedule cooperative: epilogues with row reductions need the pingpong schedule");
}

/* The same kernel from the CLI (`emit --shape`), from the C API (cf_options_for, then
 * cf_kernel_build) and from the internal request, at shapes where the plan pairs tiles,
 * multicasts, adds a finisher or goes cooperative. */
static void test_cli_and_api_agree(void)
{
    static const struct {
        const char *spec;
        int64_t m, n, k;
    } cases[] = {
        {"examples/gemm_bias_ln.cf", 8192, 4096, 4096},  {"examples/gemm_softmax.cf", 16384, 512, 1024},
        {"examples/gemm_rmsnorm.cf", 16384, 2048, 1024}, {"examples/gemm.cf", 8192, 4096, 4096},
        {"examples/gemm_ln_softmax.cf", 4096, 2048, 512}, {"examples/gemm_bias_gelu.cf", 2048, 5120, 1024},
        /* a dual GEMM (two accumulators: its own tile) and plans the cost model chose */
        {"examples/swiglu.cf", 2048, 11008, 4096},       {"examples/gemm_rmsnorm.cf", 64, 4096, 4096},
        {"examples/gemm_softmax.cf", 8192, 8192, 128},
    };
    static char out[1 << 18];
    for (int i = 0; i < CF_ARRAY_LEN(cases); i++) {
        cf_graph *g = parse(cases[i].spec);
        cf_kernel *api = NULL, *req = NULL;
        cf_error err;
        cf_options o = cf_options_for(g, cases[i].m, cases[i].n, cases[i].k);
        CHECK(o.m == cases[i].m && o.n == cases[i].n && o.k == cases[i].k && o.block_n && o.cluster_n);
        CHECK_EQ_INT(CF_OK, cf_kernel_build(g, &o, cases[i].spec, &api, &err));
        CHECK_EQ_INT(CF_OK, cf_kernel_build_req(g, NULL, cases[i].m, cases[i].n, cases[i].k, cases[i].spec, &req, &err));
        char args[600];
        snprintf(args, sizeof args, "emit --shape M=%lld,N=%lld,K=%lld %s", (long long)cases[i].m,
                 (long long)cases[i].n, (long long)cases[i].k, cases[i].spec);
        CHECK_EQ_INT(0, cli(args, out, sizeof out));
        if (api && req) {
            CHECK(strcmp(cf_kernel_source(api), cf_kernel_source(req)) == 0);
            CHECK(strcmp(cf_kernel_source(api), out) == 0);
            const cf_plan *a = cf_kernel_plan(api), *b = cf_kernel_plan(req);
            CHECK(a->row_ctas == b->row_ctas && a->pair_tiles == b->pair_tiles && a->multicast == b->multicast &&
                  a->schedule == b->schedule && a->stages == b->stages && a->grid_ctas == b->grid_ctas &&
                  a->predicted_us == b->predicted_us);
        }
        /* a field changed from the plan's choice is taken as asked */
        cf_kernel_free(api);
        api = NULL;
        o.stages = 3;
        CHECK_EQ_INT(CF_OK, cf_kernel_build(g, &o, cases[i].spec, &api, &err));
        CHECK_EQ_INT(3, api ? cf_kernel_plan(api)->stages : 0);
        cf_kernel_free(api);
        cf_kernel_free(req);
        cf_graph_free(g);
    }
}

/* explain prints every field of the plan and the prediction; --plan reaches the plan, and its
 * errors are bad usage (exit 2) with the field named. */
static void test_cli_plan(void)
{
    static char out[1 << 18];
    CHECK_EQ_INT(0, cli("explain --shape M=8192,N=5120,K=1024 examples/gemm_rmsnorm.cf", out, sizeof out));
    static const char *const lines[] = {"plan:\n", "  tile: 128x128", "  row group: ",
                                        "  tile map: CTA r of a row group takes column tiles 2r and 2r+1",
                                        "  hardware cluster: ",
                                        "  stages: ", "  schedule: ", "exchange: global (through L2)", "  finish: ",
                                        "  pair tiles: ", "  multicast: ", "  gather early: ",
                                        "  finisher warpgroup: ", "  gelu at store: ", "  threads: ",
                                        "  shared memory: ", "  tiles: 64 x 40", "  grid: ", "  fallback: none",
                                        "predicted: "};
    for (int i = 0; i < CF_ARRAY_LEN(lines); i++)
        CHECK_CONTAINS(out, lines[i]);
    /* a model's choice not taken is shown beside the plan; one taken says so */
    CHECK_EQ_INT(0, cli("explain --shape M=2048,N=5120,K=5120 examples/gemm_rmsnorm.cf", out, sizeof out));
    CHECK_CONTAINS(out, "model's choice (not taken: the rules' class, or under 10% less time): tile ");
    CHECK(!strstr(out, "chosen by: "));
    CHECK_EQ_INT(0, cli("explain --shape M=64,N=4096,K=4096 examples/gemm_rmsnorm.cf", out, sizeof out));
    CHECK_CONTAINS(out, "chosen by: the cost model (the rules' plan: predicted ");
    CHECK(!strstr(out, "model's choice (not taken"));
    /* without a shape: the plan's decisions, no grid and no prediction */
    CHECK_EQ_INT(0, cli("explain examples/gemm_rmsnorm.cf", out, sizeof out));
    CHECK_CONTAINS(out, "  grid: unknown without a shape");
    CHECK(!strstr(out, "predicted: "));
    CHECK_EQ_INT(0, cli("emit --shape M=16384,N=1024,K=1024 --plan block_n=256,block_m=64,finish=sync "
                        "examples/gemm_bias_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "bn = 256;");
    CHECK_CONTAINS(out, "bm = 64;");
    CHECK_CONTAINS(out, "late_finish = false;");
    /* the old flags and --plan set the same fields: the same source */
    static char flags[1 << 18];
    CHECK_EQ_INT(0, cli("emit --shape M=16384,N=1024,K=1024 --block-n 256 --block-m 64 --sync-finish "
                        "examples/gemm_bias_ln.cf", flags, sizeof flags));
    CHECK(strcmp(out, flags) == 0);
    CHECK_EQ_INT(2, cli("emit --plan block_n=100 examples/gemm_bias_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "--plan block_n=100: must be 64, 128, 192 or 256");
    CHECK_EQ_INT(2, cli("emit --plan gather_early=on examples/gemm_bias_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "--plan gather_early: follows from the other fields");
    CHECK_EQ_INT(2, cli("emit --plan stages examples/gemm_bias_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "--plan: expected key=value, got 'stages'");
    CHECK_EQ_INT(2, cli("emit --shape M=4096,N=1024,K=1024 --plan cluster=12 examples/gemm_bias_ln.cf", out,
                        sizeof out));
    CHECK_CONTAINS(out, "which 12 CTAs do not divide");
}

/* The plan decides which [M,N] inputs come through the operand ring, explain names them, and
 * Ψ renders exactly that: a residual with a light first part goes through the ring; a heavy first
 * part at long K (all_elementwise, 1.06 ms element by element against 1.66 through the ring) does
 * not, the same at a K of two k-blocks does; an f32 [M,N] input never does. */
static void test_tile_inputs(void)
{
    cf_plan p;
    cf_error err;
    CHECK(plan_of("examples/gemm_residual_ln.cf", 8192, 768, 768, NULL, NULL, &p, &err));
    CHECK_EQ_INT(1, __builtin_popcount(p.tin_args));
    CHECK(strcmp(p.tin_names, "R") == 0);
    CHECK(plan_of("tests/specs/all_elementwise.cf", 4096, 4096, 1024, NULL, NULL, &p, &err));
    CHECK_EQ_INT(0, (int)p.tin_args);
    CHECK(plan_of("tests/specs/all_elementwise.cf", 4096, 4096, 128, NULL, NULL, &p, &err));
    CHECK(strcmp(p.tin_names, "R") == 0);
    CHECK(plan_of("examples/gemm_bias_ln.cf", 8192, 4096, 4096, NULL, NULL, &p, &err));
    CHECK_EQ_INT(0, (int)p.tin_args);
    static char out[1 << 18];
    CHECK_EQ_INT(0, cli("explain --shape M=8192,N=768,K=768 examples/gemm_residual_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "  tile inputs: R\n");
    CHECK_EQ_INT(0, cli("emit --shape M=8192,N=768,K=768 examples/gemm_residual_ln.cf", out, sizeof out));
    CHECK_CONTAINS(out, "num_tin = 1;            /* [M,N] inputs fetched through the operand ring: R */");
    CHECK_EQ_INT(0, cli("explain --shape M=4096,N=4096,K=1024 tests/specs/all_elementwise.cf", out, sizeof out));
    CHECK_CONTAINS(out, "  tile inputs: none through the ring\n");
}

/* A residual before LayerNorm finishes every tile at once (late, it spills); LayerNorm without
 * the residual, and a residual before RMSNorm, keep what they had; a request is kept. */
static void test_residual_ln_finishes_at_once(void)
{
    cf_plan p;
    cf_error err;
    CHECK(plan_of("examples/gemm_residual_ln.cf", 8192, 768, 768, NULL, NULL, &p, &err));
    CHECK(p.sync_finish && !p.late_finish && !p.pair_tiles);
    CHECK(plan_of("examples/gemm_residual_ln.cf", 2048, 1024, 4096, NULL, NULL, &p, &err));
    CHECK(p.sync_finish && !p.late_finish);
    CHECK(plan_of("examples/gemm_bias_ln.cf", 8192, 768, 3072, NULL, NULL, &p, &err));
    CHECK(p.late_finish);
    cf_plan_request late = {.sync_finish = -1};
    CHECK(plan_of("examples/gemm_residual_ln.cf", 8192, 768, 768, NULL, &late, &p, &err));
    CHECK(p.late_finish);
}

int main(int argc, char **argv)
{
    /* argv[0] is <build>/tests/test_plan: the CLI is <build>/comfuse */
    snprintf(bin, sizeof bin, "%s", argc > 0 ? argv[0] : "build/tests/test_plan");
    for (int i = 0; i < 2; i++) {
        char *slash = strrchr(bin, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(bin, sizeof bin, "build");
    }
    snprintf(bin + strlen(bin), sizeof bin - strlen(bin), "/comfuse");
    test_row_groups();
    test_tile_inputs();
    test_residual_ln_finishes_at_once();
    test_stages_fit();
    test_model_monotone();
    test_model_takes_over();
    test_split_k();
    test_dual_too_wide_refused_at_build();
    test_overrides();
    test_cli_and_api_agree();
    test_cli_plan();
    return tu_finish("test_plan");
}
