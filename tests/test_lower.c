/* test_lower.c — Φ: stage structure, bypass, CSE, B2B, diagnostics, goldens. */
#include "cf_internal.h"
#include "test_util.h"

static cf_ir *lower_src(const char *src, cf_status *st_out, cf_error *err)
{
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    cf_status st = cf_spec_parse(src, strlen(src), "t.cf", &g, err);
    if (st == CF_OK)
        st = cf_lower(g, &ir, err);
    if (st_out)
        *st_out = st;
    if (st != CF_OK)
        cf_graph_free(g);
    return ir; /* the graph is freed with free_ir() */
}

static void free_ir(cf_ir *ir)
{
    if (!ir)
        return;
    cf_graph *g = (cf_graph *)ir->graph;
    cf_ir_free(ir);
    cf_graph_free(g);
}

static cf_ir *lower_file(const char *path)
{
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    cf_error err;
    if (cf_spec_parse_file(path, &g, &err) != CF_OK || cf_lower(g, &ir, &err) != CF_OK) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        cf_graph_free(g);
        return NULL;
    }
    return ir;
}

static const cf_ir_spec *stage(const cf_ir *ir, int gi, int k)
{
    const cf_ir_spec *sp = ir->epi[gi];
    while (sp && k-- > 0)
        sp = sp->post;
    return sp;
}

static int count_kind(const cf_ir_spec *sp, cf_ir_kind kind)
{
    int n = 0;
    for (int i = 0; i < sp->n_nodes; i++)
        n += sp->nodes[i]->kind == kind;
    return n;
}

/* A placeholder in stage k carrying the graph value named name (bypass). */
static bool has_bypass(const cf_ir_spec *sp, const char *name)
{
    for (int i = 0; i < sp->n_nodes; i++) {
        const cf_ir_node *n = sp->nodes[i];
        if (n->kind == CF_IR_PLACEHOLDER && !n->is_stat && n->name && strcmp(n->name, name) == 0)
            return true;
    }
    return false;
}

/* No graph value is computed by more than one IR node (nothing recomputed). */
static bool computed_once(const cf_ir *ir)
{
    int n = ir->graph->n_nodes;
    int *seen = calloc((size_t)n, sizeof *seen);
    bool ok = true;
    for (int gi = 0; gi < ir->n_gemms; gi++)
        for (const cf_ir_spec *sp = ir->epi[gi]; sp; sp = sp->post)
            for (int i = 0; i < sp->n_nodes; i++) {
                const cf_ir_node *x = sp->nodes[i];
                if ((x->kind == CF_IR_COMPUTE || x->kind == CF_IR_REDUCE) && seen[x->origin]++)
                    ok = false;
            }
    free(seen);
    return ok;
}

static void test_layernorm(void)
{
    cf_ir *ir = lower_file("examples/gemm_bias_ln.cf");
    CHECK(ir != NULL);
    if (!ir)
        return;
    CHECK_EQ_INT(1, ir->n_gemms);
    CHECK_EQ_INT(3, cf_ir_num_stages(ir));
    /* stage 0: mean; stage 1: variance of x - mean; stage 2: normalise */
    CHECK_EQ_INT(CF_OP_MEAN, stage(ir, 0, 0)->terminal->op);
    CHECK_EQ_INT(CF_OP_MEAN, stage(ir, 0, 1)->terminal->op);
    CHECK_EQ_INT(CF_IR_STORE, stage(ir, 0, 2)->terminal->kind);
    CHECK(has_bypass(stage(ir, 0, 1), "x"));  /* x carried, not recomputed */
    CHECK(has_bypass(stage(ir, 0, 2), "d"));  /* x - mean carried into the normalise stage */
    CHECK_EQ_INT(1, count_kind(stage(ir, 0, 0), CF_IR_ACC));
    CHECK_EQ_INT(0, count_kind(stage(ir, 0, 1), CF_IR_ACC));
    CHECK_EQ_INT(1, count_kind(stage(ir, 0, 2), CF_IR_STORE));
    CHECK(computed_once(ir));
    /* rsqrt(var + eps) is a per-row value, computed once per row */
    bool per_row_rsqrt = false;
    const cf_ir_spec *s2 = stage(ir, 0, 2);
    for (int i = 0; i < s2->n_nodes; i++)
        if (s2->nodes[i]->kind == CF_IR_COMPUTE && s2->nodes[i]->op == CF_OP_RSQRT)
            per_row_rsqrt = s2->nodes[i]->shape == CF_SHAPE_VEC_M;
    CHECK(per_row_rsqrt);
    free_ir(ir);
}

static void test_examples_stage_counts(void)
{
    static const struct {
        const char *file;
        int gemms, stages0, stages1;
        cf_op reds[4];
    } cases[] = {
        {"examples/gemm_bias_gelu.cf", 1, 1, 0, {0}},
        {"examples/gemm_rmsnorm.cf", 1, 2, 0, {CF_OP_MEAN}},
        {"examples/gemm_softmax.cf", 1, 3, 0, {CF_OP_RMAX, CF_OP_SUM}},
        {"examples/gemm_ln_softmax.cf", 1, 5, 0, {CF_OP_MEAN, CF_OP_MEAN, CF_OP_RMAX, CF_OP_SUM}},
        {"examples/b2b_gelu.cf", 2, 1, 1, {0}},
        {"examples/b2b_ln.cf", 2, 3, 1, {CF_OP_MEAN, CF_OP_MEAN}},
        {"examples/b2b_softmax.cf", 2, 3, 1, {CF_OP_RMAX, CF_OP_SUM}},
    };
    for (int c = 0; c < CF_ARRAY_LEN(cases); c++) {
        cf_ir *ir = lower_file(cases[c].file);
        CHECK(ir != NULL);
        if (!ir)
            continue;
        CHECK_EQ_INT(cases[c].gemms, ir->n_gemms);
        CHECK_EQ_INT(cases[c].stages0, ir->n_stages[0]);
        if (cases[c].gemms == 2) {
            CHECK_EQ_INT(cases[c].stages1, ir->n_stages[1]);
            CHECK_EQ_INT(CF_IR_MATMUL, stage(ir, 0, ir->n_stages[0] - 1)->terminal->kind);
            CHECK_EQ_INT(CF_IR_ACC, ir->epi[1]->nodes[0]->kind);
        }
        for (int k = 0; k + 1 < ir->n_stages[0]; k++)
            CHECK_EQ_INT(cases[c].reds[k], stage(ir, 0, k)->terminal->op);
        CHECK(computed_once(ir));
        CHECK_EQ_INT(CF_OK, cf_ir_verify(ir, NULL));
        free_ir(ir);
    }
}

static void test_cse_and_determinism(void)
{
    /* The same mean written twice is one reduction; 0.5*acc twice is one node. */
    const char *src = "input X: bf16[M, K]\ninput W: bf16[N, K]\n"
                      "a = 0.5 * (X @ W)\nb = 0.5 * matmul(X, W)\n"
                      "output Y: f32 = (a - mean(a)) + (b - mean(b)) * 2\n";
    cf_error err;
    cf_ir *ir = lower_src(src, NULL, &err);
    CHECK(ir != NULL);
    if (!ir)
        return;
    CHECK_EQ_INT(2, ir->n_stages[0]);
    CHECK(ir->args[1].b_is_nk);
    CHECK(computed_once(ir));
    /* Dirty the heap first: lowering must not depend on what malloc returns
     * (a memcmp over struct padding once made CSE depend on it). */
    for (int i = 0; i < 64; i++) {
        size_t n = (size_t)(i + 1) * 4096;
        unsigned char *junk = malloc(n);
        if (junk) {
            memset(junk, 0xA5 + i, n);
            free(junk);
        }
    }
    cf_ir *ir2 = lower_src(src, NULL, &err);
    cf_strbuf s1 = {0}, s2 = {0};
    cf_ir_format(ir, &s1);
    cf_ir_format(ir2, &s2);
    CHECK(s1.data && s2.data && strcmp(s1.data, s2.data) == 0);
    cf_sb_free(&s1);
    cf_sb_free(&s2);
    free_ir(ir);
    free_ir(ir2);
}

static void test_per_row_output_and_stat_reuse(void)
{
    /* The mean is both an output ([M]) and used two stages later. */
    const char *src = "input X: bf16[M, K]\ninput W: bf16[K, N]\n"
                      "x = X @ W\nmu = mean(x)\nm = max(x - mu)\n"
                      "output Y = (x - mu) / m + mu\noutput MU: f32 = mu\n";
    cf_error err;
    cf_ir *ir = lower_src(src, NULL, &err);
    CHECK(ir != NULL);
    if (!ir)
        return;
    CHECK_EQ_INT(3, ir->n_stages[0]);
    CHECK(has_bypass(stage(ir, 0, 2), "mu"));
    CHECK(!has_bypass(stage(ir, 0, 2), "x")); /* only x - mu is needed later, and it is carried */
    CHECK_EQ_INT(2, count_kind(stage(ir, 0, 2), CF_IR_PLACEHOLDER) - 1);
    CHECK(computed_once(ir));
    const cf_ir_spec *s1 = stage(ir, 0, 1);
    bool mu_stored = false;
    for (int i = 0; i < s1->n_nodes; i++)
        if (s1->nodes[i]->kind == CF_IR_STORE && s1->nodes[i]->shape == CF_SHAPE_VEC_M)
            mu_stored = true;
    CHECK(mu_stored);
    free_ir(ir);
}

static void expect_reject(const char *src, cf_status want, const char *needle)
{
    cf_status st;
    cf_error err;
    cf_ir *ir = lower_src(src, &st, &err);
    CHECK(ir == NULL);
    CHECK_EQ_INT(want, st);
    CHECK_CONTAINS(err.msg, needle);
    free_ir(ir);
}

static void test_diagnostics(void)
{
    const char *head = "input X: bf16[M, K]\ninput W: bf16[K, N]\n";
    char src[1024];
    snprintf(src, sizeof src, "%sx = X @ W\noutput Y = x * sum(x, axis=0)\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "t.cf:4:16: cannot fuse: 'sum.");
    expect_reject(src, CF_ERR_UNSUPPORTED, "reduces over M");
    snprintf(src, sizeof src, "%sx = X @ W\noutput Y = transpose(transpose(x))\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "is a transpose");
    snprintf(src, sizeof src, "%sX2 = X * 2\noutput Y = X2 @ W\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "prologue fusion is outside the domain");
    snprintf(src, sizeof src, "%sinput Z: bf16[M, K]\ninput V: bf16[K, N]\noutput Y = (X @ W) + (Z @ V)\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "independent GEMMs over different left operands ('X', 'Z')");
    /* two GEMMs over one X fuse only with weights of one shape, layout and dtype */
    snprintf(src, sizeof src, "%sinput V: bf16[K, N2]\noutput Y = (X @ W) + mean(X @ V)\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "has N columns but 'matmul.");
    snprintf(src, sizeof src, "%sinput V: bf16[N, K]\noutput Y = (X @ W) * (X @ V)\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "as [N, K]; both weights of a dual GEMM need one layout");
    snprintf(src, sizeof src, "%sinput V: f16[K, N]\noutput Y = (X @ W) * (X @ V)\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "weight 'V' is f16 but weight 'W' is bf16");
    snprintf(src, sizeof src, "%sinput V: bf16[K, N]\noutput Y = (X @ W) * (X @ (V * 2))\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "both weights of a dual GEMM must be graph inputs");
    snprintf(src, sizeof src, "%sinput V: bf16[N, N2]\ninput U: bf16[N2, N3]\noutput Y = ((X @ W) @ V) @ U\n",
             head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "third matmul");
    snprintf(src, sizeof src, "%sinput r: f32[N2]\noutput Y = (X @ W) + r\n", head);
    expect_reject(src, CF_ERR_SHAPE, "t.cf:4:20: add(");
    expect_reject(src, CF_ERR_SHAPE, "do not broadcast");
    snprintf(src, sizeof src, "%sinput R: f32[M, K]\noutput Y = (X @ W) + 1\noutput Z = R * 2\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "does not broadcast to the GEMM output [M, N]");
    snprintf(src, sizeof src, "input X: f32[M, K]\ninput W: f32[K, N]\noutput Y = X @ W\n");
    expect_reject(src, CF_ERR_UNSUPPORTED, "takes bf16 or f16");
    snprintf(src, sizeof src, "%sinput b: f32[N]\nx = X @ W\noutput Y = x\noutput B: f32 = b * 2\n", head);
    expect_reject(src, CF_ERR_UNSUPPORTED, "output 'B' is a [N] vector");
}

/* Two GEMMs over one X (SwiGLU): one epilogue entered by both accumulators, each naming its
 * weight; the second weight is GEMM2_B, shaped like GEMM_B, in either layout. */
static void test_dual(void)
{
    static const struct {
        const char *file;
        bool nk;
        int stages;
    } cases[] = {{"examples/swiglu.cf", false, 1}, {"tests/specs/swiglu_nk.cf", true, 2}};
    for (int c = 0; c < CF_ARRAY_LEN(cases); c++) {
        cf_ir *ir = lower_file(cases[c].file);
        CHECK(ir != NULL);
        if (!ir)
            continue;
        CHECK(ir->dual);
        CHECK_EQ_INT(1, ir->n_gemms);
        CHECK_EQ_INT(cases[c].stages, ir->n_stages[0]);
        CHECK(ir->n_args >= 3);
        CHECK_EQ_INT(CF_ARG_GEMM2_B, ir->args[2].kind);
        CHECK(ir->args[2].name && strcmp(ir->args[2].name, "Wu") == 0);
        CHECK_EQ_INT(cases[c].nk, ir->args[1].b_is_nk);
        CHECK_EQ_INT(cases[c].nk, ir->args[2].b_is_nk);
        const cf_ir_spec *s0 = stage(ir, 0, 0);
        CHECK_EQ_INT(2, count_kind(s0, CF_IR_ACC));
        int seen = 0;
        for (int i = 0; i < s0->n_nodes; i++) {
            const cf_ir_node *n = s0->nodes[i];
            if (n->kind != CF_IR_ACC)
                continue;
            bool second = cf_ir_acc_second(ir, n);
            CHECK(n->name && strcmp(n->name, second ? "u" : "g") == 0);
            CHECK_EQ_INT(second ? 2 : 1, n->arg);
            seen |= second ? 2 : 1;
        }
        CHECK_EQ_INT(3, seen);
        for (int k = 1; k < ir->n_stages[0]; k++)
            CHECK_EQ_INT(0, count_kind(stage(ir, 0, k), CF_IR_ACC));
        CHECK(computed_once(ir));
        cf_strbuf sb = {0};
        cf_ir_format(ir, &sb);
        CHECK_CONTAINS(sb.data, "dual GEMM (two GEMMs over one X)");
        CHECK_CONTAINS(sb.data, "accumulator of X x a2 (Wu)");
        cf_sb_free(&sb);
        free_ir(ir);
    }
    /* the dual epilogue may reduce over both accumulators and store either one */
    cf_status st;
    cf_error err;
    cf_ir *ir = lower_src("input X: f16[M, K]\ninput A: f16[K, N]\ninput B: f16[K, N]\na = X @ A\nb = X @ B\n"
                          "output P: f16 = a - mean(a * b)\noutput Q = b\n", &st, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (ir) {
        CHECK(ir->dual);
        CHECK_EQ_INT(2, ir->n_stages[0]);
        CHECK_EQ_INT(2, count_kind(stage(ir, 0, 0), CF_IR_ACC));
        CHECK_EQ_INT(1, count_kind(stage(ir, 0, 0), CF_IR_STORE));   /* Q = b at once */
    }
    free_ir(ir);
}

static void test_b2b_reject_cross_read(void)
{
    const char *src = "input X: bf16[M, K]\ninput W: bf16[K, N]\ninput V: bf16[N, N2]\n"
                      "s = relu(X @ W)\no = s @ V\noutput Y = o + mean(s)\n";
    cf_status st;
    cf_error err;
    cf_ir *ir = lower_src(src, &st, &err);
    CHECK(ir == NULL);
    CHECK_EQ_INT(CF_ERR_UNSUPPORTED, st);
    CHECK_CONTAINS(err.msg, "reads 'mean.");
    CHECK_CONTAINS(err.msg, "from before it");
    free_ir(ir);
}

/* The printed IR of every example is pinned; CF_UPDATE_GOLDEN=1 rewrites it
 * (then review the diff). */
static void test_goldens(void)
{
    static const char *names[] = {"gemm_bias_gelu", "gemm_bias_ln", "gemm_rmsnorm", "gemm_softmax",
                                  "gemm_ln_softmax", "b2b_gelu", "b2b_ln", "b2b_softmax", "swiglu"};
    bool update = getenv("CF_UPDATE_GOLDEN") != NULL;
    for (int i = 0; i < CF_ARRAY_LEN(names); i++) {
        char spec[256], gold[256];
        snprintf(spec, sizeof spec, "examples/%s.cf", names[i]);
        snprintf(gold, sizeof gold, "tests/golden/%s.ir", names[i]);
        cf_ir *ir = lower_file(spec);
        CHECK(ir != NULL);
        if (!ir)
            continue;
        cf_strbuf sb = {0};
        cf_ir_format(ir, &sb);
        if (update) {
            FILE *f = fopen(gold, "w");
            CHECK(f != NULL);
            if (f) {
                fputs(sb.data, f);
                fclose(f);
            }
        } else {
            FILE *f = fopen(gold, "r");
            CHECK(f != NULL);
            if (f) {
                static char buf[1 << 16];
                size_t n = fread(buf, 1, sizeof buf - 1, f);
                buf[n] = 0;
                fclose(f);
                bool same = strcmp(buf, sb.data) == 0;
                if (!same)
                    fprintf(stderr, "golden mismatch for %s: run `build/comfuse explain %s | diff %s -`\n",
                            names[i], spec, gold);
                CHECK(same);
            }
        }
        cf_sb_free(&sb);
        free_ir(ir);
    }
}

/* A spec built by spec_text(kind, n): "out" n [M, N] outputs, "in" n [N] inputs summed, "par"
 * n params multiplied,
 * "red" n chained reductions, "ew" n elementwise nodes. */
static char *spec_text(const char *kind, int n)
{
    size_t cap = 64 + (size_t)n * 48;
    char *s = malloc(cap), *p = s;
    p += sprintf(p, "input X: bf16[M, K]\ninput W: bf16[K, N]\nx0 = X @ W\n");
    for (int i = 0; i < n; i++) {
        if (!strcmp(kind, "out"))
            p += sprintf(p, "output Y%d: bf16 = x0 * %d\n", i, i + 1);
        else if (!strcmp(kind, "in"))
            p += sprintf(p, "input b%d: f32[N]\nx%d = x%d + b%d\n", i, i + 1, i, i);
        else if (!strcmp(kind, "par"))
            p += sprintf(p, "param p%d: f32\nx%d = x%d * p%d\n", i, i + 1, i, i);
        else if (!strcmp(kind, "red"))
            p += sprintf(p, "x%d = x%d - mean(x%d)\n", i + 1, i, i);
        else
            p += sprintf(p, "x%d = x%d * 1.5\n", i + 1, i);
    }
    if (strcmp(kind, "out") != 0)
        sprintf(p, "output Y: bf16 = x%d\n", n);
    return s;
}

/* Bad-input probe (issue 28): what one kernel cannot take is Φ's rejection (exit 3) with the
 * reason: parameters past the 4096-byte block a launch passes (NVRTC failed at 32764 bytes;
 * the launch at 4096), more nodes or reductions than code generation and NVRTC finish. */
static void test_limits(void)
{
    static const struct {
        const char *kind;
        int n;
        const char *reject;   /* NULL: lowers */
    } cases[] = {
        {"out", 27, NULL},   /* 300 + 27 * 140 = 4080 bytes (the scales are constants, not args) */
        {"out", 28, "the kernel's parameters take 4224 bytes (28 [M, N] outputs at 140 bytes each"},
        {"out", 240, "the kernel's parameters take 33920 bytes (240 [M, N] outputs"},
        {"par", 914, NULL},   /* 440 + 914 * 4 = 4096 */
        {"par", 915, "the kernel's parameters take 4160 bytes"},
        {"in", 64, NULL},
        {"in", 65, "the epilogue reads 65 inputs besides the GEMM's operands, over the limit of 64"},
        {"in", 460, "over the 4096 bytes a launch passes"},   /* 440 + 460 * 8 */
        {"in", 10000, "over the 4096 bytes a launch passes"},
        {"red", 32, NULL},
        {"red", 33, "the epilogue has 33 row reductions, over the limit of 32"},
        {"ew", 4000, NULL},
        {"ew", 5000, "nodes after Φ, over the limit of 4096 for one kernel"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *src = spec_text(cases[i].kind, cases[i].n);
        cf_status st;
        cf_error err;
        cf_ir *ir = lower_src(src, &st, &err);
        if (cases[i].reject) {
            CHECK_EQ_INT(CF_ERR_UNSUPPORTED, st);
            CHECK_CONTAINS(err.msg, cases[i].reject);
        } else {
            CHECK_EQ_INT(CF_OK, st);
            int outs;
            CHECK(ir && cf_ir_param_bytes(ir, &outs) <= CF_KERNEL_PARAM_BYTES);
        }
        free_ir(ir);
        free(src);
    }
}

int main(void)
{
    test_layernorm();
    test_examples_stage_counts();
    test_cse_and_determinism();
    test_per_row_output_and_stat_reuse();
    test_diagnostics();
    test_dual();
    test_b2b_reject_cross_read();
    test_goldens();
    test_limits();
    return tu_finish("test_lower");
}
