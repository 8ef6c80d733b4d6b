/* test_unfused.c — the unfused path (unfused.c): how graphs with one or two
 * GEMMs are cut into pieces, what it rejects and where, the row kernels it
 * compiles for each piece (NVRTC, no GPU), the host model of a launch against
 * the float64 reference (the decomposition and every binding table, with
 * numbers), and the launch's argument checks before any GPU call. */
#include "cf_internal.h"
#include "test_util.h"

#include <stdint.h>

static cf_graph *parse_text(const char *name, const char *text)
{
    cf_graph *g = NULL;
    cf_error err;
    if (cf_spec_parse(text, strlen(text), name, &g, &err) != CF_OK) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return NULL;
    }
    return g;
}

static cf_graph *parse_path(const char *path)
{
    cf_graph *g = NULL;
    cf_error err;
    if (cf_spec_parse_file(path, &g, &err) != CF_OK) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return NULL;
    }
    return g;
}

/* A B2B whose second epilogue reads the first's values again (N1 = N2 = N):
 * O = h @ W2 + h, h = relu(X @ W1) -- Φ rejects it, the unfused path recomputes h. */
static const char residual_b2b[] = "input X: bf16[M, K]\n"
                                   "input W1: bf16[K, N]\n"
                                   "input W2: bf16[N, N]\n"
                                   "h = relu(X @ W1)\n"
                                   "output O: bf16 = h @ W2 + h\n";

/* SwiGLU with a bias, a runtime scale and a row statistic of both GEMMs. */
static const char swiglu_param[] = "input X: f16[M, K]\n"
                                   "input Wg: f16[N, K]\n"
                                   "input Wu: f16[N, K]\n"
                                   "input b: f32[N]\n"
                                   "param s\n"
                                   "g = X @ Wg + b\n"
                                   "u = X @ Wu\n"
                                   "h = silu(g) * u * s\n"
                                   "output H: f32 = h\n"
                                   "output Z: f32 = max(h) - mean(g)\n";

/* (X @ W1) @ W2 with nothing between and the first GEMM kept as an output too. */
static const char bare_b2b[] = "input X: bf16[M, K]\n"
                               "input W1: bf16[K, N1]\n"
                               "input W2: bf16[N2, N1]\n"
                               "p = X @ W1\n"
                               "output P: f32 = p\n"
                               "output O: bf16 = p @ W2\n";

/* The second epilogue reads per-row values of the first (over N1, not N2):
 * they are kept in f32 [M] buffers between the pieces. */
static const char rowstat_b2b[] = "input X: bf16[M, K]\n"
                                  "input W1: bf16[K, N1]\n"
                                  "input W2: bf16[N1, N2]\n"
                                  "x = X @ W1\n"
                                  "h = relu(x)\n"
                                  "r = rsqrt(mean(square(x)) + 1e-6)\n"
                                  "output O: bf16 = (h @ W2) * r + sum(h)\n"
                                  "output R: f32 = r\n";

/* Outputs that depend on no GEMM (an input kept, work on inputs alone) run in the first piece,
 * as the fused kernel runs them in its epilogue. */
static const char no_gemm_outputs[] = "input X: bf16[M, K]\n"
                                      "input W: bf16[K, N]\n"
                                      "input b: f32[M, N]\n"
                                      "input c: bf16[M]\n"
                                      "output Y: bf16 = X @ W\n"
                                      "output Z: f32 = b * 2\n"
                                      "output C: f16 = c\n"
                                      "output L: f32 = log(abs(c) + 1)\n";

/* ---- decomposition ---------------------------------------------------------------- */

typedef struct shape_case {
    const char *name, *text;   /* a path when text is NULL                                   */
    int gemms, pieces;
    int piece_gemm[2];         /* the GEMM each piece runs after                              */
    bool computed_a1;          /* the second GEMM's A comes from a piece (B2B)                */
    bool nk;                   /* the first GEMM's weight is [N,K]                            */
    int stages0;               /* stages of the first piece's epilogue                        */
} shape_case;

static const shape_case shapes[] = {
    {"examples/gemm_bias_ln.cf", NULL, 1, 1, {0}, false, false, 3},
    {"examples/gemm_softmax.cf", NULL, 1, 1, {0}, false, false, 3},
    {"examples/swiglu.cf", NULL, 2, 1, {1}, false, false, 1},
    {"tests/specs/swiglu_nk.cf", NULL, 2, 1, {1}, false, true, 2},
    {"examples/b2b_gelu.cf", NULL, 2, 2, {0, 1}, true, false, 1},
    {"examples/b2b_ln.cf", NULL, 2, 2, {0, 1}, true, false, 3},
    {"examples/b2b_softmax.cf", NULL, 2, 2, {0, 1}, true, false, 3},
    {"residual_b2b.cf", residual_b2b, 2, 2, {0, 1}, true, false, 1},
    {"swiglu_param.cf", swiglu_param, 2, 1, {1}, false, true, 3},
    {"bare_b2b.cf", bare_b2b, 2, 2, {0, 1}, true, false, 1},
    {"rowstat_b2b.cf", rowstat_b2b, 2, 2, {0, 1}, true, false, 3},
    {"no_gemm_outputs.cf", no_gemm_outputs, 1, 1, {0}, false, false, 1},
};

static cf_graph *load(const shape_case *c)
{
    return c->text ? parse_text(c->name, c->text) : parse_path(c->name);
}

static void test_decompose(void)
{
    for (int i = 0; i < CF_ARRAY_LEN(shapes); i++) {
        const shape_case *c = &shapes[i];
        cf_graph *g = load(c);
        cf_unfused *u = NULL;
        cf_error err;
        CHECK(g != NULL);
        CHECK_EQ_INT(CF_OK, g ? cf_unfused_plan(g, &u, &err) : CF_ERR_INTERNAL);
        if (!u) {
            fprintf(stderr, "%s: %s\n", c->name, err.msg);
            cf_graph_free(g);
            continue;
        }
        CHECK_EQ_INT(c->gemms, cf_unfused_num_gemms(u));
        CHECK_EQ_INT(c->pieces, cf_unfused_num_pieces(u));
        for (int p = 0; p < c->pieces && p < cf_unfused_num_pieces(u); p++) {
            CHECK_EQ_INT(c->piece_gemm[p], cf_unfused_piece_gemm(u, p));
            const cf_ir *ir = cf_unfused_piece_ir(u, p);
            CHECK(ir && ir->n_gemms == 1);   /* each piece: one GEMM's epilogue */
        }
        const cf_unfused_gemm *m0 = cf_unfused_gemm_at(u, 0), *m1 = cf_unfused_gemm_at(u, 1);
        CHECK(m0 && m0->a_input >= 0);
        CHECK_EQ_INT(c->nk, m0->b_is_nk);
        if (c->gemms == 2)
            CHECK_EQ_INT(c->computed_a1, m1->a_input < 0);
        CHECK(cf_unfused_gemm_at(u, 2) == NULL);
        CHECK_EQ_INT(c->stages0, cf_unfused_piece_ir(u, 0)->n_stages[0]);
        /* the first piece's accumulator is its GEMM's output over that GEMM's N */
        const cf_unfused_gemm *pm = cf_unfused_gemm_at(u, cf_unfused_piece_gemm(u, 0));
        CHECK_EQ_INT(pm->dim_n, cf_unfused_piece_ir(u, 0)->dim_n);
        CHECK_EQ_INT(pm->dim_m, cf_unfused_piece_ir(u, 0)->dim_m);
        cf_unfused_free(u);
        cf_graph_free(g);
    }
}

/* SwiGLU's piece: the other GEMM's output is an f32 [M, N] input; the B2B
 * first piece stores S in W2's dtype and the second stores O. */
static void test_piece_args(void)
{
    cf_graph *g = parse_path("examples/swiglu.cf");
    cf_unfused *u = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, g ? cf_unfused_plan(g, &u, &err) : CF_ERR_INTERNAL);
    const cf_ir *ir = u ? cf_unfused_piece_ir(u, 0) : NULL;
    int tensors = 0, outs = 0;
    for (int i = 0; ir && i < ir->n_args; i++) {
        if (ir->args[i].kind == CF_ARG_TENSOR) {
            tensors++;
            CHECK_EQ_INT(CF_F32, ir->args[i].dtype);
            CHECK(strcmp(ir->args[i].name, "g") == 0);   /* named after the GEMM it holds */
        }
        outs += ir->args[i].kind == CF_ARG_OUTPUT;
    }
    CHECK_EQ_INT(1, tensors);
    CHECK_EQ_INT(1, outs);
    cf_unfused_free(u);
    cf_graph_free(g);

    g = parse_path("examples/b2b_ln.cf");
    u = NULL;
    CHECK_EQ_INT(CF_OK, g ? cf_unfused_plan(g, &u, &err) : CF_ERR_INTERNAL);
    ir = u ? cf_unfused_piece_ir(u, 0) : NULL;
    int s_out = 0;
    for (int i = 0; ir && i < ir->n_args; i++)
        if (ir->args[i].kind == CF_ARG_OUTPUT) {
            s_out++;
            CHECK_EQ_INT(CF_BF16, ir->args[i].dtype);
        }
    CHECK_EQ_INT(1, s_out);
    ir = u ? cf_unfused_piece_ir(u, 1) : NULL;
    CHECK(ir && ir->n_stages[0] == 1 && ir->epi[0]->n_nodes == 2);   /* the accumulator and O's store */
    cf_unfused_free(u);
    cf_graph_free(g);
}

/* ---- what it rejects ---------------------------------------------------------------- */

static const struct {
    const char *text, *want;
} rejects[] = {
    {"input X: bf16[M, K]\ninput A: bf16[K, K]\ninput B: bf16[K, K]\ninput C: bf16[K, N]\n"
     "output Y: bf16 = ((X @ A) @ B) @ C\n",
     "r.cf:5:"},
    {"input X: bf16[M, K]\ninput A: bf16[K, K]\ninput B: bf16[K, K]\ninput C: bf16[K, N]\n"
     "output Y: bf16 = ((X @ A) @ B) @ C\n",
     "is a third matmul; the unfused path runs at most two GEMMs"},
    {"input X: bf16[M, K]\ninput W: bf16[K, N]\nx = X @ W\noutput Y: f32 = x - sum(x, axis=0)\n",
     "reduces over M (the rows)"},
    {"input X: bf16[M, K]\ninput W: bf16[K, N]\ninput V: bf16[K, N]\noutput Y: bf16 = X @ (W * V)\n",
     "a GEMM's weight must be a graph input"},
    {"input X: bf16[M, K]\ninput W: bf16[K, N]\nx = relu(X)\noutput Y: bf16 = x @ W\n",
     "computed from inputs only; a row kernel runs after a GEMM"},
    {"input X: bf16[M, K]\ninput W: f32[K, N]\noutput Y: bf16 = X @ W\n", "cuBLASLt runs bf16 or f16 GEMMs"},
    {"input X: bf16[M, K]\ninput Z: bf16[P, K]\ninput W: bf16[K, N]\noutput Y: bf16 = X @ W\n"
     "output V: bf16 = Z @ W\n",
     "'V' runs over P rows and 'Y' over M; the unfused path runs GEMMs over one M"},
};

static void test_rejects(void)
{
    for (int i = 0; i < CF_ARRAY_LEN(rejects); i++) {
        cf_graph *g = parse_text("r.cf", rejects[i].text);
        cf_unfused *u = (cf_unfused *)1;
        cf_error err = {0};
        CHECK(g != NULL);
        if (!g)
            continue;
        CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_unfused_plan(g, &u, &err));
        CHECK(u == NULL);
        CHECK_CONTAINS(err.msg, rejects[i].want);
        CHECK_CONTAINS(err.msg, "r.cf:");   /* every rejection points into the spec */
        cf_graph_free(g);
    }
    cf_error err;
    cf_unfused *u = NULL;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_unfused_plan(NULL, &u, &err));
}

/* rowstat_b2b: the first piece writes r, sum(h) and S; the second reads r and
 * sum(h) from [M] buffers, not recomputing them over N2. */
static void test_row_values(void)
{
    cf_graph *g = parse_text("rowstat_b2b.cf", rowstat_b2b);
    cf_unfused *u = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, g ? cf_unfused_plan(g, &u, &err) : CF_ERR_INTERNAL);
    const cf_ir *ir0 = u ? cf_unfused_piece_ir(u, 0) : NULL, *ir1 = u ? cf_unfused_piece_ir(u, 1) : NULL;
    int out0 = 0, vec_m1 = 0, red1 = 0;
    for (int i = 0; ir0 && i < ir0->n_args; i++)
        out0 += ir0->args[i].kind == CF_ARG_OUTPUT;
    for (int i = 0; ir1 && i < ir1->n_args; i++)
        if (ir1->args[i].kind == CF_ARG_VEC_M) {
            vec_m1++;
            CHECK_EQ_INT(CF_F32, ir1->args[i].dtype);
        }
    for (const cf_ir_spec *sp = ir1 ? ir1->epi[0] : NULL; sp; sp = sp->post)
        red1 += sp->terminal && sp->terminal->kind == CF_IR_REDUCE;
    CHECK_EQ_INT(4, out0);     /* R, S for the second GEMM, and the buffers of r and sum(h) */
    CHECK_EQ_INT(2, vec_m1);   /* r and sum(h), read per row */
    CHECK_EQ_INT(0, red1);     /* nothing reduced again over N2 */
    cf_unfused_free(u);
    cf_graph_free(g);
}

/* ---- the host model against the reference ------------------------------------------- */

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static void fill(void *p, cf_dtype t, size_t n, double scale, uint64_t *s)
{
    for (size_t i = 0; i < n; i++) {
        double v = ((double)(rng(s) % 2000001) / 1e6 - 1.0) * scale;
        if (t == CF_F32)
            ((float *)p)[i] = (float)v;
        else if (t == CF_BF16)
            ((uint16_t *)p)[i] = cf_f32_to_bf16((float)v);
        else
            ((uint16_t *)p)[i] = cf_f32_to_f16((float)v);
    }
}

static size_t numel(const cf_graph *g, cf_tensor_info t, const int64_t *dims)
{
    (void)g;
    size_t n = 1;
    for (int d = 0; d < t.rank; d++)
        n *= (size_t)dims[t.dims[d]];
    return n;
}

/* Runs g's unfused plan on the host and the reference at ragged sizes; returns
 * the largest relative Frobenius error over the outputs (-1 on failure). */
static double host_vs_reference(const cf_graph *g, cf_unfused *u)
{
    int64_t dims[CF_MAX_DIMS];
    static const int64_t sizes[] = {37, 40, 29, 24, 21};   /* M, K, N, ... by declaration order */
    for (int d = 0; d < CF_MAX_DIMS; d++)
        dims[d] = sizes[d % CF_ARRAY_LEN(sizes)];
    const int ni = cf_graph_num_inputs(g), no = cf_graph_num_outputs(g);
    void *in[16] = {0};
    double *ref[8] = {0}, *got[8] = {0}, params[8] = {0.75, -1.25, 0.5, 2, 1, 1, 1, 1};
    uint64_t seed = 12345;
    double worst = 0;
    for (int i = 0; i < ni; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        size_t n = numel(g, t, dims);
        in[i] = malloc(n * cf_dtype_size(t.dtype) + 1);
        fill(in[i], t.dtype, n, t.rank == 2 && t.dtype != CF_F32 ? 0.4 : 1.0, &seed);
    }
    for (int i = 0; i < no; i++) {
        size_t n = numel(g, cf_graph_output_info(g, i), dims);
        ref[i] = calloc(n + 1, sizeof(double));
        got[i] = calloc(n + 1, sizeof(double));
    }
    cf_bindings b = {.dims = dims, .inputs = (const void *const *)in, .params = params};
    cf_error err;
    cf_status st = cf_reference_run(g, &b, ref, &err);
    if (st == CF_OK)
        st = cf_unfused_run_host(u, &b, got, &err);
    if (st != CF_OK) {
        fprintf(stderr, "host model: %s\n", err.msg);
        worst = -1;
    }
    for (int i = 0; i < no && st == CF_OK; i++) {
        size_t n = numel(g, cf_graph_output_info(g, i), dims);
        double e2 = 0, r2 = 0;
        for (size_t e = 0; e < n; e++) {
            e2 += (got[i][e] - ref[i][e]) * (got[i][e] - ref[i][e]);
            r2 += ref[i][e] * ref[i][e];
        }
        double rel = r2 > 0 ? sqrt(e2 / r2) : sqrt(e2);
        if (!(rel <= worst))   /* NaN counts as worst */
            worst = rel;
    }
    for (int i = 0; i < ni; i++)
        free(in[i]);
    for (int i = 0; i < no; i++) {
        free(ref[i]);
        free(got[i]);
    }
    return worst;
}

static void test_host_model(void)
{
    for (int i = 0; i < CF_ARRAY_LEN(shapes); i++) {
        cf_graph *g = load(&shapes[i]);
        cf_unfused *u = NULL;
        cf_error err;
        if (!g || cf_unfused_plan(g, &u, &err) != CF_OK) {
            CHECK(!"plan");
            cf_graph_free(g);
            continue;
        }
        double rel = host_vs_reference(g, u);
        /* B2B rounds S to 16 bits before the second GEMM (as the fused design
         * does); elsewhere only f32 rounding of a GEMM output remains */
        double tol = shapes[i].computed_a1 ? 2e-2 : 1e-5;
        if (!(rel >= 0 && rel <= tol))
            fprintf(stderr, "%s: host model vs reference: rel. Frobenius error %.3e (tolerance %.0e)\n",
                    shapes[i].name, rel, tol);
        CHECK(rel >= 0 && rel <= tol);
        cf_unfused_free(u);
        cf_graph_free(g);
    }
}

/* The model catches a wrong binding: a SwiGLU whose gate and up weights are
 * swapped is far from the reference (so the checks above can fail). */
static void test_host_model_discriminates(void)
{
    cf_graph *g = parse_path("examples/swiglu.cf");
    cf_graph *h = parse_text("swapped.cf", "input X: bf16[M, K]\ninput Wg: bf16[K, N]\ninput Wu: bf16[K, N]\n"
                                           "output H: bf16 = silu(X @ Wu) * (X @ Wg)\n");
    cf_unfused *u = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, h ? cf_unfused_plan(h, &u, &err) : CF_ERR_INTERNAL);
    if (g && u)
        CHECK(host_vs_reference(g, u) > 0.1);   /* g's reference, h's plan */
    cf_unfused_free(u);
    cf_graph_free(g);
    cf_graph_free(h);
}

/* ---- row kernels (NVRTC, no GPU) ----------------------------------------------------- */

static void test_build(void)
{
    static const struct {
        const char *spec;
        const char *must[2][2];   /* per piece */
    } builds[] = {
        {"examples/swiglu.cf", {{"load_f32(g_in, idx)", "store_bf16(H_out, idx,"}}},
        {"examples/b2b_softmax.cf",
         {{"cf_row_reduce<CF_MAX>", "store_bf16(O_A_out, idx,"}, {"store_bf16(O_out, idx,", "= C[idx];"}}},
        {"tests/specs/swiglu_nk.cf", {{"store_f32(R_out, row,", "load_f32(g_in, idx)"}}},
        {"tests/specs/b2b_rowstat.cf",
         {{"store_f32(r_out, row,", "store_bf16(matmul_10_A_out, idx,"}, {"load_f32(r_in, row)", "store_bf16(O_out"}}},
    };
    for (int i = 0; i < CF_ARRAY_LEN(builds); i++) {
        cf_graph *g = parse_path(builds[i].spec);
        cf_unfused *u = NULL;
        cf_error err;
        CHECK_EQ_INT(CF_OK, g ? cf_unfused_build(g, builds[i].spec, &u, &err) : CF_ERR_INTERNAL);
        if (!u) {
            fprintf(stderr, "%s: %s\n", builds[i].spec, err.msg);
            cf_graph_free(g);
            continue;
        }
        for (int p = 0; p < cf_unfused_num_pieces(u); p++) {
            const cf_rows *r = cf_unfused_piece_rows(u, p);
            CHECK(r && cf_rows_cubin(r) && cf_rows_cubin(r)->cubin_size > 0);
            const char *src = cf_rows_source(r);
            CHECK_CONTAINS(src, builds[i].spec);   /* the title names the spec and the GEMM */
            CHECK_CONTAINS(src, "the row kernel after GEMM");
            for (int k = 0; k < 2 && builds[i].must[p][k]; k++)
                CHECK_CONTAINS(src, builds[i].must[p][k]);
        }
        cf_unfused_free(u);
        cf_graph_free(g);
    }
}

/* The C API alone: SwiGLU from the builder, no names given. */
static void test_builder_graph(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim M = cf_graph_dim(g, "M"), K = cf_graph_dim(g, "K"), N = cf_graph_dim(g, "N");
    cf_value X = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){M, K});
    cf_value Wg = cf_graph_input(g, "Wg", CF_BF16, 2, (cf_dim[]){N, K});
    cf_value Wu = cf_graph_input(g, "Wu", CF_BF16, 2, (cf_dim[]){N, K});
    cf_value gate = cf_graph_matmul(g, X, Wg);   /* node 3: one statement each, so the ids */
    cf_value up = cf_graph_matmul(g, X, Wu);     /* do not depend on argument order */
    cf_value h = cf_graph_binary(g, CF_OP_MUL, cf_graph_unary(g, CF_OP_SILU, gate), up);
    cf_graph_output(g, "H", h, CF_BF16);
    CHECK_EQ_INT(CF_OK, cf_graph_error(g)->status);
    cf_ir *ir = NULL;
    cf_kernel *k = NULL;
    cf_unfused *u = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_lower(g, &ir, &err));                  /* Φ takes it as a dual GEMM */
    CHECK(ir && ir->dual);
    cf_ir_free(ir);
    CHECK_EQ_INT(CF_OK, cf_kernel_build(g, NULL, NULL, &k, &err));   /* and Ψ its fused kernel */
    CHECK_EQ_INT(CF_OK, cf_unfused_build(g, NULL, &u, &err));   /* the fallback the header names */
    CHECK_EQ_INT(1, cf_unfused_num_pieces(u));
    const cf_rows *r = cf_unfused_piece_rows(u, 0);
    CHECK_CONTAINS(r ? cf_rows_source(r) : NULL, "from <graph>, the row kernel after GEMM 'matmul.4'");
    CHECK_CONTAINS(r ? cf_rows_source(r) : NULL, "load_f32(matmul_3_in, idx)");   /* the first GEMM's buffer */
    if (u)
        CHECK(host_vs_reference(g, u) < 1e-5);
    cf_unfused_free(u);
    cf_kernel_free(k);
    cf_graph_free(g);
}

/* ---- launch argument checks (before any GPU call) ------------------------------------- */

static void test_launch_checks(void)
{
    cf_graph *g = parse_path("examples/swiglu.cf");
    cf_unfused *u = NULL, *planned = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, g ? cf_unfused_build(g, "swiglu", &u, &err) : CF_ERR_INTERNAL);
    CHECK_EQ_INT(CF_OK, g ? cf_unfused_plan(g, &planned, &err) : CF_ERR_INTERNAL);
    int64_t dims[CF_MAX_DIMS] = {64, 64, 64};
    uint64_t in[3] = {0x1000, 0x2000, 0x3000}, out[1] = {0x4000};
    cf_launch_args a = {.dims = dims, .inputs = in, .outputs = out};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_unfused_launch(NULL, &a, &err));
    if (u) {
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_unfused_launch(u, NULL, &err));
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_unfused_launch(planned, &a, &err));
        CHECK_CONTAINS(err.msg, "use cf_unfused_build");
        dims[0] = 0;
        CHECK_EQ_INT(CF_ERR_SHAPE, cf_unfused_launch(u, &a, &err));
        CHECK_CONTAINS(err.msg, "M=0");
        dims[0] = 64;
        in[1] = 0;
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_unfused_launch(u, &a, &err));
        CHECK_CONTAINS(err.msg, "input 'Wg'");
        in[1] = 0x2001;
        CHECK_EQ_INT(CF_ERR_ALIGNMENT, cf_unfused_launch(u, &a, &err));
    }
    cf_unfused_free(u);
    cf_unfused_free(planned);
    cf_graph_free(g);
}

int main(void)
{
    test_decompose();
    test_piece_args();
    test_rejects();
    test_row_values();
    test_host_model();
    test_host_model_discriminates();
    test_build();
    test_builder_graph();
    test_launch_checks();
    return tu_finish("test_unfused");
}
