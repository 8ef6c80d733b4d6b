/* test_gen.c — the random graph generator (tests/gen.c) and its .cf writer.
 *
 * The writer round-trips: parse(write(g)) lowers to the same IR text and
 * gives bit-identical float64 reference outputs.  GPU-mode graphs depend on
 * their seed alone, cover the classes the GPU property test promises (shapes,
 * layouts, dtypes, output and input kinds, NaN/Inf, features Φ rejects), and
 * every one Φ accepts emits a kernel (cf_kernel_build, no NVRTC); the
 * conditioning screen passes sound graphs and stops the ones a check at
 * f32 would fail without a defect. */
#include "cf_internal.h"
#include "gen.h"
#include "test_util.h"

#include <stdint.h>

/* Names every computed node v<index>, as the writer does, so IR texts compare. */
static void name_like_writer(cf_graph *g)
{
    char name[32];
    for (int v = 0; v < g->n_nodes; v++)
        if (cf_op_class_of(g->nodes[v].op) != CF_OPC_LEAF && !g->nodes[v].name) {
            snprintf(name, sizeof name, "v%d", v);
            cf_graph_set_name(g, v, name);
        }
}

static char *ir_text(const cf_ir *ir)
{
    cf_strbuf sb = {0};
    cf_ir_format(ir, &sb);
    return sb.data;
}

typedef struct run_out {
    int n;
    double **v;
    int64_t *len;
} run_out;

static void run_free(run_out *r)
{
    for (int i = 0; i < r->n; i++)
        free(r->v[i]);
    free(r->v);
    free(r->len);
}

/* The reference on g with small dims looked up by name, inputs from seed. */
static cf_status reference(const cf_graph *g, uint64_t seed, run_out *out)
{
    int64_t dims[CF_MAX_DIMS];
    for (int d = 0; d < cf_graph_num_dims(g); d++) {
        const char *n = cf_graph_dim_name(g, d);
        dims[d] = n[0] == 'M' ? 3 : n[0] == 'K' ? 5 : strcmp(n, "N") == 0 ? 19 : 7;
    }
    cfgen_rng r = {seed};
    int ni = cf_graph_num_inputs(g), np = cf_graph_num_params(g);
    void **in = calloc((size_t)ni + 1, sizeof *in);
    double *params = calloc((size_t)np + 1, sizeof *params);
    for (int i = 0; i < ni; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        int64_t n = dims[t.dims[0]] * (t.rank == 2 ? dims[t.dims[1]] : 1);
        in[i] = calloc((size_t)n, cf_dtype_size(t.dtype));
        for (int64_t e = 0; e < n; e++) {
            float x = (float)cfgen_unif(&r, -1.5, 1.5);
            if (t.dtype == CF_F32)
                ((float *)in[i])[e] = x;
            else
                ((uint16_t *)in[i])[e] = t.dtype == CF_BF16 ? cf_f32_to_bf16(x) : cf_f32_to_f16(x);
        }
    }
    for (int i = 0; i < np; i++)
        params[i] = cfgen_unif(&r, -2, 2);
    out->n = cf_graph_num_outputs(g);
    out->v = calloc((size_t)out->n, sizeof *out->v);
    out->len = calloc((size_t)out->n, sizeof *out->len);
    for (int o = 0; o < out->n; o++) {
        cf_tensor_info t = cf_graph_output_info(g, o);
        out->len[o] = t.rank == 0 ? 1 : dims[t.dims[0]] * (t.rank == 2 ? dims[t.dims[1]] : 1);
        out->v[o] = calloc((size_t)out->len[o], sizeof **out->v);
    }
    cf_bindings b = {dims, (const void *const *)in, params};
    cf_error err;
    cf_status st = cf_reference_run(g, &b, out->v, &err);
    for (int i = 0; i < ni; i++)
        free(in[i]);
    free(in);
    free(params);
    return st;
}

static bool same_outputs(const run_out *a, const run_out *b)
{
    if (a->n != b->n)
        return false;
    for (int o = 0; o < a->n; o++) {
        if (a->len[o] != b->len[o])
            return false;
        for (int64_t i = 0; i < a->len[o]; i++) {
            double x = a->v[o][i], y = b->v[o][i];
            if (!(x == y || (isnan(x) && isnan(y))))
                return false;
        }
    }
    return true;
}

/* One graph: write, parse back, compare Φ's verdict, the IR and the outputs. */
static void round_trip(cfgen_case c, uint64_t seed, const char *what, int *accepted)
{
    name_like_writer(c.g);
    cf_strbuf sb = {0};
    CHECK(cfgen_write_spec(c.g, "round trip\nsecond header line", &sb));
    static const char head[] = "# round trip\n# second header line\ninput X: ";
    CHECK(sb.data && strncmp(sb.data, head, sizeof head - 1) == 0);
    cf_graph *back = NULL;
    cf_error err;
    cf_status ps = cf_spec_parse(sb.data ? sb.data : "", sb.len, "<written>", &back, &err);
    CHECK_EQ_INT(CF_OK, ps);
    if (ps != CF_OK) {
        fprintf(stderr, "%s seed 0x%llx: %s\n%s", what, (unsigned long long)seed, err.msg, sb.data);
        cf_sb_free(&sb);
        cf_graph_free(c.g);
        return;
    }
    cf_ir *i1 = NULL, *i2 = NULL;
    cf_status s1 = cf_lower(c.g, &i1, &err), s2 = cf_lower(back, &i2, &err);
    CHECK_EQ_INT(s1, s2);
    if (s1 == CF_OK && s2 == CF_OK) {
        ++*accepted;
        char *t1 = ir_text(i1), *t2 = ir_text(i2);
        bool same = t1 && t2 && strcmp(t1, t2) == 0;
        CHECK(same);
        if (!same)
            fprintf(stderr, "%s seed 0x%llx: IR differs\n--- graph\n%s--- spec\n%s", what, (unsigned long long)seed,
                    t1, t2);
        free(t1);
        free(t2);
    }
    run_out r1 = {0}, r2 = {0};
    cf_status a = reference(c.g, seed, &r1), b = reference(back, seed, &r2);
    CHECK_EQ_INT(a, b);
    if (a == CF_OK && b == CF_OK) {
        bool same = same_outputs(&r1, &r2);
        CHECK(same);
        if (!same)
            fprintf(stderr, "%s seed 0x%llx: reference outputs differ\n", what, (unsigned long long)seed);
    }
    run_free(&r1);
    run_free(&r2);
    cf_ir_free(i1);
    cf_ir_free(i2);
    cf_graph_free(back);
    cf_graph_free(c.g);
    cf_sb_free(&sb);
}

static void test_round_trip(void)
{
    int acc_cpu = 0, acc_gpu = 0;
    for (int i = 0; i < 150; i++) {
        uint64_t s = cfgen_case_seed(0xC0FFEE1234ull, i);
        round_trip(cfgen_property(s, false), s, "property", &acc_cpu);
        s = cfgen_case_seed(77, i);
        round_trip(cfgen_gpu(s), s, "gpu", &acc_gpu);
    }
    /* most of both kinds lower, so the IR comparison did run */
    CHECK(acc_cpu > 120);
    CHECK(acc_gpu > 120);
}

/* What the language cannot spell is refused, not written wrong. */
static void test_writer_refuses(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim M = cf_graph_dim(g, "M"), N = cf_graph_dim(g, "N"), K = cf_graph_dim(g, "K");
    cf_value X = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){M, K});
    cf_value W = cf_graph_input(g, "W", CF_BF16, 2, (cf_dim[]){K, N});
    cf_value y = cf_graph_binary(g, CF_OP_MUL, cf_graph_matmul(g, X, W), cf_graph_const(g, INFINITY));
    cf_graph_output(g, "Y", y, CF_BF16);
    cf_strbuf sb = {0};
    CHECK(!cfgen_write_spec(g, NULL, &sb));
    cf_sb_free(&sb);
    cf_graph_free(g);
}

static char *spec_of(uint64_t seed)
{
    cfgen_case c = cfgen_gpu(seed);
    cf_strbuf sb = {0};
    char shape[160], params[1200];
    cfgen_shape_text(&c, shape, sizeof shape);
    cfgen_params_text(&c, params, sizeof params);
    cf_sb_printf(&sb, "%s|%s|%d|%d\n", shape, params, c.align, c.planted);
    cfgen_write_spec(c.g, NULL, &sb);
    cf_graph_free(c.g);
    return sb.data;
}

typedef struct coverage {
    int align[2], nk, f16, vec_out, multi_tile, multi_vec, in_tile, in_vm, in_vn, params, nonfinite, planted;
    int reds[5], ragged_m, ragged_n, wide, small_n, stress;
    bool bad_pitch, too_big;
} coverage;

static void cover(coverage *cv, const cfgen_case *c)
{
    const cf_graph *g = c->g;
    int64_t M = c->dims[0], N = c->dims[1], K = c->dims[2];
    cv->align[c->align]++;
    bool aligned = N % 8 == 0 && K % 8 == 0;
    cv->bad_pitch |= aligned != (c->align == CFGEN_ALIGN16);
    /* the float64 reference's work: gpu-check checks 256 sampled rows from M > 1024 */
    const double ref_rows = M > 1024 ? 256 : (double)M;
    cv->too_big |= M > 1 && ref_rows * (double)N * (double)K > 4.3e9;
    cv->stress += M >= 2048 && N >= 1024 && K >= 1024;
    cv->ragged_m += M % 64 != 0;
    cv->ragged_n += N % 64 != 0;
    cv->wide += N > 8192;
    cv->small_n += N < 64;
    int tiles = 0, vecs = 0, reds = 0;
    for (int i = 0; i < g->n_outputs; i++) {
        cf_tensor_info t = cf_graph_output_info(g, i);
        tiles += t.rank == 2;
        vecs += t.rank == 1 && t.dims[0] == 0;
    }
    for (int v = 0; v < g->n_nodes; v++)
        reds += cf_op_class_of(g->nodes[v].op) == CF_OPC_REDUCE && g->nodes[v].axis == 1;
    cv->reds[reds < 4 ? reds : 4]++;
    cv->vec_out += vecs > 0;
    cv->multi_tile += tiles > 1;
    cv->multi_vec += vecs > 1;
    for (int i = 2; i < g->n_inputs; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        cv->in_tile += t.rank == 2;
        cv->in_vm += t.rank == 1 && t.dims[0] == 0;
        cv->in_vn += t.rank == 1 && t.dims[0] == 1;
    }
    cf_tensor_info w = cf_graph_input_info(g, 1);
    cv->nk += w.dims[0] == 1;
    cv->f16 += w.dtype == CF_F16;
    cv->params += g->n_params > 0;
    cv->nonfinite += c->nonfinite;
    cv->planted += c->planted != CFGEN_REJ_NONE;
}

static void test_gpu_mode(void)
{
    /* the same seed writes the same bytes */
    char *a = spec_of(0x1234), *b = spec_of(0x1234), *d = spec_of(0x1235);
    CHECK(a && b && strcmp(a, b) == 0);
    CHECK(a && d && strcmp(a, d) != 0);
    free(a);
    free(b);
    free(d);

    coverage cv = {0};
    for (int i = 0; i < 400; i++) {
        cfgen_case c = cfgen_gpu(cfgen_case_seed(5, i));
        CHECK_EQ_INT(CF_OK, cf_graph_error(c.g)->status);
        cover(&cv, &c);
        cf_graph_free(c.g);
    }
    CHECK(!cv.bad_pitch);
    CHECK(!cv.too_big);
    CHECK(cv.align[CFGEN_ODD_PITCH] > 20 && cv.align[CFGEN_ALIGN16] > 300);
    CHECK(cv.nk > 120 && cv.nk < 280);
    CHECK(cv.f16 > 120 && cv.f16 < 280);
    CHECK(cv.vec_out > 60 && cv.multi_tile > 60 && cv.multi_vec > 10);
    CHECK(cv.in_tile > 30 && cv.in_vm > 30 && cv.in_vn > 30 && cv.params > 60);
    CHECK(cv.nonfinite > 40 && cv.planted > 10);
    for (int k = 0; k < 5; k++)
        CHECK(cv.reds[k] > 20);
    CHECK(cv.ragged_m > 300 && cv.ragged_n > 250 && cv.wide > 15 && cv.small_n > 15);
    CHECK(cv.stress > 20 && cv.stress < 80);   /* many tiles per CTA, long K */
}

/* Every graph Φ accepts emits a kernel at its own shape (no NVRTC here:
 * scripts/gpu-check compiles and runs them). */
static void test_emits(void)
{
    int built = 0, failed = 0;
    for (int i = 0; i < 60; i++) {
        uint64_t s = cfgen_case_seed(0xE317, i);
        cfgen_case c = cfgen_gpu(s);
        cf_ir *ir = NULL;
        cf_error err;
        if (cf_lower(c.g, &ir, &err) == CF_OK) {
            cf_options o = cf_options_for(c.g, c.dims[0], c.dims[1], c.dims[2]);
            cf_kernel *k = NULL;
            cf_status st = cf_kernel_build(c.g, &o, "test_gen", &k, &err);
            if (st == CF_OK && cf_kernel_source(k) && strstr(cf_kernel_source(k), "#include \"cf_sm90.cuh\""))
                built++;
            else {
                failed++;
                fprintf(stderr, "test_gen: cfgen case 0x%016llx does not emit: %s\n", (unsigned long long)s,
                        st == CF_OK ? "no kernel in the source" : err.msg);
            }
            cf_kernel_free(k);
        }
        cf_ir_free(ir);
        cf_graph_free(c.g);
    }
    CHECK_EQ_INT(0, failed);
    CHECK(built > 45);
}

/* A hand-written graph at M=40, N=300, K=64 as the screen sees it. */
static bool screened_ok(const char *body, char *why, size_t n)
{
    char src[2048];
    snprintf(src, sizeof src, "input X: bf16[M, K]\ninput W: bf16[K, N]\n%s", body);
    cfgen_case c = {0};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_spec_parse(src, strlen(src), "<screen test>", &c.g, &err));
    if (!c.g)
        return false;
    c.dims[cf_graph_dim(c.g, "M")] = 40;
    c.dims[cf_graph_dim(c.g, "N")] = 300;
    c.dims[cf_graph_dim(c.g, "K")] = 64;
    bool ok = cfgen_screen(&c, why, n);
    cf_graph_free(c.g);
    return ok;
}

static void test_screen(void)
{
    char why[200];
    /* well conditioned */
    const char *gelu = "input b: f32[N]\nv2 = gelu(matmul(X, W) + b)\noutput Y: bf16 = v2\n";
    CHECK(screened_ok(gelu, why, sizeof why));
    CHECK_CONTAINS(why, "ok");
    /* x^4 stored as f32: X*W stays f32 on both paths, so f32 accumulation's error is all it moves by */
    CHECK(screened_ok("v2 = square(square(matmul(X, W)))\noutput Y: f32 = v2\n", why, sizeof why));
    /* a row minus its own mean where every element is the row max: rounding noise only */
    const char *noise = "v2 = matmul(X, W)\nv3 = tanh(max(v2, max(v2)))\nv4 = v3 - mean(v3)\noutput Y: bf16 = v4\n"
                        "output Z: bf16 = v2\n";
    CHECK(!screened_ok(noise, why, sizeof why));
    CHECK_CONTAINS(why, "output Y moves by");
    /* beyond the f32 range */
    const char *big = "v2 = square(square(square(square(square(matmul(X, W) * 1000 + 1000)))))\noutput Y: bf16 = v2\n";
    CHECK(!screened_ok(big, why, sizeof why));
    CHECK_CONTAINS(why, "f32 range");
    /* the min of a softmax over 300 columns stored as f16: subnormals, rounding alone moves it */
    const char *tiny = "v2 = matmul(X, W)\nv6 = exp(v2 * 8 - max(v2 * 8))\nv9 = min(v6 / sum(v6))\n"
                       "output Y: f16 = v9\n";
    CHECK(!screened_ok(tiny, why, sizeof why));
    CHECK_CONTAINS(why, "subnormal");
    /* NaN where X*W < 0, -inf where 0: rounding never changes a sign, so the pattern stays */
    CHECK(screened_ok("v2 = log(matmul(X, W))\noutput Y: bf16 = v2\n", why, sizeof why));
}

int main(void)
{
    test_round_trip();
    test_writer_refuses();
    test_gpu_mode();
    test_emits();
    test_screen();
    return tu_finish("test_gen");
}
