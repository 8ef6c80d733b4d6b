/* test_rows.c — the unfused path's row kernel (rows.c): the generated source
 * of every single-GEMM example has the structure the design promises (a
 * column loop per stage, one CTA reduction per REDUCE, MEAN divided by N,
 * scratch writes only for carried computed TILE values), compiles with NVRTC
 * for sm_90a, B2B is rejected, and launches check their arguments. */
#include "cf_internal.h"
#include "test_util.h"

#include <unistd.h>

static int count(const char *text, const char *needle)
{
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = text; p && (p = strstr(p, needle)) != NULL; p += len)
        n++;
    return n;
}

static cf_status lower_file(const char *path, cf_graph **g, cf_ir **ir)
{
    cf_error err;
    *g = NULL;
    *ir = NULL;
    cf_status st = cf_spec_parse_file(path, g, &err);
    if (st == CF_OK)
        st = cf_lower(*g, ir, &err);
    if (st != CF_OK)
        fprintf(stderr, "%s: %s\n", path, err.msg);
    return st;
}

static int count_reduces(const cf_ir *ir, cf_op op)
{
    int n = 0;
    for (const cf_ir_spec *s = ir->epi[0]; s; s = s->post)
        n += s->terminal && s->terminal->kind == CF_IR_REDUCE && (op == CF_OP_COUNT || s->terminal->op == op);
    return n;
}

/* Each example: a value recomputed in later stages (instead of stored) and
 * how often it is defined (twice a stage that uses it: the unrolled loop and
 * its tail), and lines it must hold. */
static const struct {
    const char *spec;
    const char *recomputed;
    int defs;
    const char *must[4];
} cases[] = {
    {"examples/gemm.cf", "const float Y_0 = ", 0, {"store_bf16(Y_out, idx, Y_0);"}},
    {"examples/gemm_bias_gelu.cf", NULL, 0, {"load_f32(bias_in, col)", "op_gelu_tanh("}},
    {"examples/gemm_bias_ln.cf", "const float x_4 = (v2 + bias_3);", 6, {"rsqrtf("}},
    {"examples/gemm_rmsnorm.cf", NULL, 0, {"const float x_3 = cf_c;  /* bypass of x.0 */"}},
    {"examples/gemm_softmax.cf", "const float e_7 = op_exp(v6);", 4,
     {"cf_row_reduce<CF_MAX>(m_3_part, cf_red, cf_xred, cf_turn);", "op_exp("}},
    {"examples/gemm_ln_softmax.cf", NULL, 0, {"cf_row_reduce<CF_MAX>", "op_exp("}},
    {"tests/specs/all_elementwise.cf", NULL, 0,
     {"store_f32(Z_out, idx,", "store_f16(H_out, idx,", "load_f32(rs_in, row)", "float alpha_prm"}},
};

static void test_sources(void)
{
    for (int i = 0; i < CF_ARRAY_LEN(cases); i++) {
        cf_graph *g;
        cf_ir *ir;
        CHECK_EQ_INT(CF_OK, lower_file(cases[i].spec, &g, &ir));
        if (!ir) {
            cf_graph_free(g);
            continue;
        }
        cf_strbuf a = {0}, b = {0};
        cf_error err;
        CHECK_EQ_INT(CF_OK, cf_rows_generate(ir, cases[i].spec, &a, &err));
        CHECK_EQ_INT(CF_OK, cf_rows_generate(ir, cases[i].spec, &b, &err));
        CHECK(a.data && b.data && strcmp(a.data, b.data) == 0); /* deterministic */
        const char *src = a.data ? a.data : "";
        const char *kernel = strstr(src, "extern \"C\" __global__");
        CHECK(kernel != NULL);
        if (!kernel)
            kernel = src;
        CHECK_CONTAINS(src, "cf_rows_kernel(const float *__restrict__ C, long long M, int N, int cf_cache");
        /* the first loop reads C and copies it for the later loops, which read it back */
        CHECK_EQ_INT(2, count(kernel, "const float cf_c = C[idx];"));
        CHECK_EQ_INT(2, count(kernel, "cf_row[col - col0] = cf_c;"));
        CHECK_EQ_INT(2 * (ir->n_stages[0] - 1), count(kernel, "const float cf_c = cf_cache ? cf_row[col - col0] : C[idx];"));
        CHECK_EQ_INT(0, count(src, "#include"));
        /* a column loop per stage that touches the tile, one reduction per REDUCE */
        int n_red = count_reduces(ir, CF_OP_COUNT);
        CHECK_EQ_INT(ir->n_stages[0] - 1, n_red);
        /* each stage: trips of 8 columns without bounds tests, then the tail one at a time */
        CHECK_EQ_INT(ir->n_stages[0], count(kernel, "for (; base + 7 * (int)blockDim.x < col1; base += 8 * blockDim.x)"));
        CHECK_EQ_INT(ir->n_stages[0], count(kernel, "for (int col = base; col < col1; col += blockDim.x)"));
        CHECK_EQ_INT(n_red, count(kernel, "= cf_row_reduce<"));
        CHECK_EQ_INT(n_red ? 1 : 0, count(src, "__shared__ float cf_red[32];"));
        CHECK_EQ_INT(n_red ? 1 : 0, count(src, "__shared__ float cf_xred[2];"));
        CHECK_EQ_INT(count_reduces(ir, CF_OP_MEAN), count(kernel, "_part, cf_red, cf_xred, cf_turn) / (float)N;"));
        CHECK_EQ_INT(count_reduces(ir, CF_OP_RMAX), count(kernel, "= cf_row_reduce<CF_MAX>"));
        /* a CTA leaves only when its cluster's peers have read its last partial */
        CHECK_EQ_INT(n_red ? 1 : 0, count(kernel, "cf_cluster_sync();  /* peers may still read"));
        CHECK_CONTAINS(kernel, "const unsigned cf_split = cf_cluster_size(), cf_rank = cf_cluster_rank();");
        /* nothing goes through memory between stages: later stages recompute from C */
        CHECK_EQ_INT(0, count(src, "_carry"));
        CHECK_EQ_INT(0, count(src, "scratch"));
        CHECK_CONTAINS(kernel, "= cf_c;");
        if (cases[i].recomputed)
            CHECK_EQ_INT(cases[i].defs ? cases[i].defs : 2 * ir->n_stages[0], count(kernel, cases[i].recomputed));
        for (int j = 0; j < 4 && cases[i].must[j]; j++)
            CHECK_CONTAINS(src, cases[i].must[j]);
        cf_sb_free(&a);
        cf_sb_free(&b);
        cf_ir_free(ir);
        cf_graph_free(g);
    }
}

/* Per-row ([M]) outputs, min/max, a runtime scalar and VEC_N values carried
 * over stages (recomputed per column, never stored). */
static void test_row_outputs(void)
{
    static const char spec[] =
        "input X: bf16[M, K]\n"
        "input W: bf16[N, K]\n"
        "input b: f32[N]\n"
        "input r: bf16[M]\n"
        "param t\n"
        "x = X @ W + b * t\n"
        "mu = mean(x)\n"
        "lo = min(x)\n"
        "hi = max(x - mu)\n"
        "output S: f32 = mu * r\n"
        "output H: bf16 = hi - lo\n"
        "output Y: f16 = (x - mu) * exp(b * t) / (hi - lo)\n";
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_spec_parse(spec, sizeof spec - 1, "rowout.cf", &g, &err));
    CHECK_EQ_INT(CF_OK, g ? cf_lower(g, &ir, &err) : CF_ERR_INTERNAL);
    if (!ir) {
        cf_graph_free(g);
        return;
    }
    cf_strbuf sb = {0};
    CHECK_EQ_INT(CF_OK, cf_rows_generate(ir, "rowout.cf", &sb, &err));
    const char *src = sb.data ? sb.data : "";
    CHECK_CONTAINS(src, "if (threadIdx.x == 0)  /* output S: f32 [M], one per row */");
    CHECK_CONTAINS(src, "store_f32(S_out, row, S_11);");
    CHECK_CONTAINS(src, "store_bf16(H_out, row, H_23);");
    CHECK_CONTAINS(src, "store_f16(Y_out, idx, Y_26);");
    CHECK_CONTAINS(src, "const float r_10 = load_bf16(r_in, row);");
    CHECK_CONTAINS(src, "= cf_row_reduce<CF_MIN>(lo_9_part, cf_red, cf_xred, cf_turn);");
    CHECK_CONTAINS(src, "float lo_9_part = __int_as_float(0x7f800000);");
    CHECK_CONTAINS(src, "float hi_18_part = __int_as_float((int)0xff800000);");
    CHECK_CONTAINS(src, "const float v19 = v3;  /* bypass of v13 */");  /* b * t, recomputed */
    /* x is carried over three stages: each recomputes it (loop and tail), none stores it */
    CHECK_EQ_INT(8, count(src, "const float x_4 = (v0 + v3);"));
    CHECK_EQ_INT(4, count(src, "const float x_14 = x_4;  /* bypass of x.7 */"));
    CHECK_EQ_INT(0, count(src, "_carry"));
    cf_rt_cubin c;
    cf_status st = cf_rt_compile(src, "cf_rows_kernel", NULL, 0, &c, &err);
    if (st != CF_OK)
        fprintf(stderr, "rowout.cf: %s\n", err.msg);
    CHECK_EQ_INT(CF_OK, st);
    cf_rt_cubin_free(&c);
    cf_sb_free(&sb);
    cf_ir_free(ir);
    cf_graph_free(g);
}

static void test_b2b_rejected(void)
{
    static const char *specs[] = {"examples/b2b_gelu.cf", "examples/b2b_ln.cf", "examples/b2b_softmax.cf"};
    for (int i = 0; i < CF_ARRAY_LEN(specs); i++) {
        cf_graph *g;
        cf_ir *ir;
        CHECK_EQ_INT(CF_OK, lower_file(specs[i], &g, &ir));
        cf_strbuf sb = {0};
        cf_error err;
        static char sentinel;
        cf_rows *r = (cf_rows *)(void *)&sentinel; /* must come back NULL */
        CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_rows_generate(ir, specs[i], &sb, &err));
        CHECK_CONTAINS(err.msg, "B2B");
        CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_rows_build(ir, specs[i], &r, &err));
        CHECK(r == NULL);
        cf_sb_free(&sb);
        cf_ir_free(ir);
        cf_graph_free(g);
    }
}

/* NVRTC (no GPU needed): every kernel compiles for sm_90a without spills,
 * reductions use warp shuffles, and launches check shapes before any GPU use. */
static void test_build(void)
{
    for (int i = 0; i < CF_ARRAY_LEN(cases); i++) {
        cf_graph *g;
        cf_ir *ir;
        CHECK_EQ_INT(CF_OK, lower_file(cases[i].spec, &g, &ir));
        cf_rows *r = NULL;
        cf_error err;
        cf_status st = ir ? cf_rows_build(ir, cases[i].spec, &r, &err) : CF_ERR_INTERNAL;
        if (st != CF_OK)
            fprintf(stderr, "%s: %s\n", cases[i].spec, err.msg);
        CHECK_EQ_INT(CF_OK, st);
        if (!r) {
            cf_ir_free(ir);
            cf_graph_free(g);
            continue;
        }
        const cf_rt_cubin *c = cf_rows_cubin(r);
        CHECK(c && c->cubin && c->cubin_size > 0);
        CHECK_CONTAINS(c ? c->ptx : NULL, ".entry cf_rows_kernel(");
        if (ir->n_stages[0] > 1)
            CHECK_CONTAINS(c ? c->ptx : NULL, "shfl.sync.bfly");
        CHECK(c && c->registers > 0);
        CHECK_EQ_INT(0, c ? c->spill_store_bytes : -1);
        CHECK(cf_rows_source(r) && strstr(cf_rows_source(r), "cf_rows_kernel"));
        /* a C whose shape disagrees with the dims is refused before the GPU is touched */
        int64_t dims[CF_MAX_DIMS] = {0};
        dims[ir->dim_m] = 64;
        dims[ir->dim_n] = 128;
        dims[ir->dim_k] = 32;
        uint64_t ptrs[16] = {0};
        cf_launch_args a = {.dims = dims, .inputs = ptrs, .outputs = ptrs};
        CHECK_EQ_INT(CF_ERR_SHAPE, cf_rows_launch(r, 256, 64, 64, &a, NULL, &err));
        CHECK_CONTAINS(err.msg, "C is [64, 64]");
        CHECK_EQ_INT(CF_ERR_ALIGNMENT, cf_rows_launch(r, 258, 64, 128, &a, NULL, &err));
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_rows_launch(r, 256, 64, 128, NULL, NULL, &err));
        cf_rows_free(r);
        cf_ir_free(ir);
        cf_graph_free(g);
    }
    CHECK_EQ_INT(128, cf_rows_threads(1));
    CHECK_EQ_INT(128, cf_rows_threads(1000));
    CHECK_EQ_INT(256, cf_rows_threads(4096));
    CHECK_EQ_INT(512, cf_rows_threads(8192));
    CHECK_EQ_INT(512, cf_rows_threads(32768));
    /* a row is split over a cluster only while the rows cannot fill the device */
    CHECK_EQ_INT(8, cf_rows_split(64, 128256, 528));    /* a decode batch over a vocabulary */
    CHECK_EQ_INT(2, cf_rows_split(256, 32000, 528));
    CHECK_EQ_INT(1, cf_rows_split(8192, 32000, 528));   /* enough rows */
    CHECK_EQ_INT(1, cf_rows_split(64, 768, 528));        /* too few columns to share */
    CHECK_EQ_INT(1, cf_rows_split(1, 100, 528));
    /* shares in shared memory only where the rows in flight outgrow L2 */
    CHECK_EQ_INT(2, cf_rows_cache_split(2048, 32000, 1, 528));   /* 528 rows of 128 KB: 64 KB a CTA */
    CHECK_EQ_INT(2, cf_rows_cache_split(512, 32000, 1, 528));
    CHECK_EQ_INT(4, cf_rows_cache_split(2048, 50257, 1, 528));
    CHECK_EQ_INT(0, cf_rows_cache_split(64, 128256, 8, 528));    /* 33 MB: stays in L2 */
    CHECK_EQ_INT(0, cf_rows_cache_split(64, 256000, 8, 528));    /* 128 KB a CTA of 8: does not fit */
    CHECK_EQ_INT(0, cf_rows_cache_split(8192, 4096, 1, 528));    /* 8.6 MB in flight */
}

int main(void)
{
    char dir[] = "/tmp/cf_test_rows_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    setenv("CF_CACHE_DIR", dir, 1); /* NVRTC output goes to a fresh cache */
    test_sources();
    test_row_outputs();
    test_b2b_rejected();
    test_build();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK_EQ_INT(0, system(cmd));
    return tu_finish("test_rows");
}
