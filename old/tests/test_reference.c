/* test_reference.c — the float64 reference on hand-computed cases, and the
 * host half-precision conversions. */
#include "cf_internal.h"
#include "test_util.h"

#include <float.h>
#include <stdint.h>

static uint16_t bf(double v) { return cf_f32_to_bf16((float)v); }

static bool near(double a, double b, double tol) { return fabs(a - b) <= tol; }

/* bits of a float */
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- matmul, both weight layouts ----------------------------------------- */

static const double X23[2][3] = {{1, 2, 3}, {4, 5, 6}};
static const double W34[3][4] = {{1, 0, -1, 2}, {2, 1, 0, -2}, {0, 3, 1, 1}};
static const double XW[2][4] = {{5, 11, 2, 1}, {14, 23, 2, 4}};

typedef struct mm_fixture {
    cf_graph *g;
    cf_dim M, N, K;
    cf_value acc;
    uint16_t x[6], w[12];
    int64_t dims[3];
    const void *inputs[8];
} mm_fixture;

/* X [M,K] bf16 and W bf16 as [K,N] or [N,K]; more inputs may follow. */
static void mm_setup(mm_fixture *f, bool nk)
{
    memset(f, 0, sizeof *f);
    f->g = cf_graph_new();
    f->M = cf_graph_dim(f->g, "M");
    f->N = cf_graph_dim(f->g, "N");
    f->K = cf_graph_dim(f->g, "K");
    cf_value X = cf_graph_input(f->g, "X", CF_BF16, 2, (cf_dim[]){f->M, f->K});
    cf_value W = cf_graph_input(f->g, "W", CF_BF16, 2, nk ? (cf_dim[]){f->N, f->K} : (cf_dim[]){f->K, f->N});
    f->acc = cf_graph_matmul(f->g, X, W);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++)
            f->x[i * 3 + k] = bf(X23[i][k]);
    for (int k = 0; k < 3; k++)
        for (int n = 0; n < 4; n++)
            f->w[nk ? n * 3 + k : k * 4 + n] = bf(W34[k][n]);
    f->dims[f->M] = 2;
    f->dims[f->N] = 4;
    f->dims[f->K] = 3;
    f->inputs[0] = f->x;
    f->inputs[1] = f->w;
}

static cf_status run1(mm_fixture *f, double *out, const double *params, cf_error *err)
{
    cf_bindings b = {f->dims, f->inputs, params};
    double *outs[1] = {out};
    return cf_reference_run(f->g, &b, outs, err);
}

static void test_matmul(void)
{
    for (int nk = 0; nk < 2; nk++) {
        mm_fixture f;
        mm_setup(&f, nk);
        CHECK_EQ_INT(CF_OK, cf_graph_output(f.g, "Y", f.acc, CF_F32));
        double y[8] = {0};
        cf_error err;
        CHECK_EQ_INT(CF_OK, run1(&f, y, NULL, &err));
        for (int i = 0; i < 2; i++)
            for (int n = 0; n < 4; n++)
                CHECK(y[i * 4 + n] == XW[i][n]);
        cf_graph_free(f.g);
    }
}

/* A matmul large enough to use several threads and every tail of the
 * blocking, against a naive loop (small integers: both sums are exact). */
static void test_matmul_large(void)
{
    const int64_t M = 133, K = 301, N = 203;
    for (int nk = 0; nk < 2; nk++) {
        cf_graph *g = cf_graph_new();
        cf_dim dm = cf_graph_dim(g, "M"), dn = cf_graph_dim(g, "N"), dk = cf_graph_dim(g, "K");
        cf_value X = cf_graph_input(g, "X", CF_F16, 2, (cf_dim[]){dm, dk});
        cf_value W = cf_graph_input(g, "W", CF_F32, 2, nk ? (cf_dim[]){dn, dk} : (cf_dim[]){dk, dn});
        cf_graph_output(g, "Y", cf_graph_matmul(g, X, W), CF_F32);
        uint16_t *x = malloc(sizeof *x * M * K);
        float *w = malloc(sizeof *w * K * N);
        double *y = malloc(sizeof *y * M * N);
        for (int64_t i = 0; i < M * K; i++)
            x[i] = cf_f32_to_f16((float)((i * 7) % 13 - 6));
        for (int64_t i = 0; i < K * N; i++)
            w[i] = (float)((i * 5) % 11 - 5);
        x[5 * K + 7] = cf_f32_to_f16(NAN); /* row 5 becomes all NaN */
        int64_t dims[3] = {M, N, K};
        const void *in[2] = {x, w};
        cf_bindings b = {dims, in, NULL};
        double *outs[1] = {y};
        cf_error err;
        CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, outs, &err));
        int bad = 0, nan_ok = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double r = 0;
                for (int64_t k = 0; k < K; k++)
                    r += (double)cf_f16_to_f32(x[i * K + k]) * (nk ? w[j * K + k] : w[k * N + j]);
                if (i == 5)
                    nan_ok += isnan(y[i * N + j]);
                else if (r != y[i * N + j])
                    bad++;
            }
        CHECK_EQ_INT(0, bad);
        CHECK_EQ_INT(N, nan_ok);
        free(x);
        free(w);
        free(y);
        cf_graph_free(g);
    }
}

/* ---- broadcasts -------------------------------------------------------------- */

static void test_bias_and_column_vector(void)
{
    mm_fixture f;
    mm_setup(&f, false);
    cf_value bias = cf_graph_input(f.g, "bias", CF_F32, 1, (cf_dim[]){f.N});
    cf_value col = cf_graph_input(f.g, "col", CF_BF16, 1, (cf_dim[]){f.M});
    cf_value alpha = cf_graph_param(f.g, "alpha");
    cf_graph_output(f.g, "Yb", cf_graph_binary(f.g, CF_OP_ADD, f.acc, bias), CF_F32);
    cf_graph_output(f.g, "Yc", cf_graph_binary(f.g, CF_OP_SUB, col, f.acc), CF_F32); /* vector first */
    cf_graph_output(f.g, "Ya", cf_graph_binary(f.g, CF_OP_MUL, f.acc, alpha), CF_BF16);
    /* [M] + [N] is not allowed, but [M] * scalar stays [M] */
    cf_graph_output(f.g, "Ym", cf_graph_binary(f.g, CF_OP_MUL, col, cf_graph_const(f.g, 3)), CF_F32);
    CHECK_EQ_INT(CF_OK, cf_graph_error(f.g)->status);
    float biasv[4] = {10, 20, 30, 40};
    uint16_t colv[2] = {bf(1), bf(2)};
    f.inputs[2] = biasv;
    f.inputs[3] = colv;
    double params[1] = {-0.5};
    double yb[8], yc[8], ya[8], ym[2];
    double *outs[4] = {yb, yc, ya, ym};
    cf_bindings b = {f.dims, f.inputs, params};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_reference_run(f.g, &b, outs, &err));
    const double ebias[8] = {15, 31, 32, 41, 24, 43, 32, 44};
    const double ecol[8] = {-4, -10, -1, 0, -12, -21, 0, -2};
    int bad = 0;
    for (int i = 0; i < 8; i++)
        bad += yb[i] != ebias[i] || yc[i] != ecol[i] || ya[i] != -0.5 * XW[i / 4][i % 4];
    CHECK_EQ_INT(0, bad);
    CHECK(ym[0] == 3 && ym[1] == 6);
    cf_graph_free(f.g);
}

/* ---- normalizations ------------------------------------------------------------ */

/* One [R, C] f32 input "x" over dims R, C. */
static cf_value row_input(cf_graph *g, cf_dim *R, cf_dim *C)
{
    *R = cf_graph_dim(g, "R");
    *C = cf_graph_dim(g, "C");
    return cf_graph_input(g, "x", CF_F32, 2, (cf_dim[]){*R, *C});
}

static void test_layernorm(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim R, C;
    cf_value x = row_input(g, &R, &C);
    cf_value mu = cf_graph_reduce(g, CF_OP_MEAN, x, -1);
    cf_value d = cf_graph_binary(g, CF_OP_SUB, x, mu);
    cf_value var = cf_graph_reduce(g, CF_OP_MEAN, cf_graph_unary(g, CF_OP_SQUARE, d), -1);
    cf_value y = cf_graph_binary(g, CF_OP_MUL, d,
                                 cf_graph_unary(g, CF_OP_RSQRT,
                                                cf_graph_binary(g, CF_OP_ADD, var, cf_graph_const(g, 0.0))));
    cf_graph_output(g, "y", y, CF_F32);
    cf_graph_output(g, "mu", mu, CF_F32);
    cf_graph_output(g, "var", var, CF_F32);
    float xv[8] = {1, 2, 3, 4, 10, 10, 10, 14};
    int64_t dims[2] = {2, 4};
    const void *in[1] = {xv};
    cf_bindings b = {dims, in, NULL};
    double yv[8], muv[2], varv[2];
    double *outs[3] = {yv, muv, varv};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, outs, &err));
    CHECK(muv[0] == 2.5 && varv[0] == 1.25);
    CHECK(muv[1] == 11 && varv[1] == 3); /* d = -1 -1 -1 3: (1+1+1+9)/4 */
    const double e0[4] = {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738};
    int bad = 0;
    for (int i = 0; i < 4; i++)
        bad += !near(yv[i], e0[i], 1e-15) || !near(yv[4 + i], (i == 3 ? 3 : -1) / sqrt(3.0), 1e-15);
    CHECK_EQ_INT(0, bad);
    cf_graph_free(g);
}

static void test_softmax(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim R, C;
    cf_value x = row_input(g, &R, &C);
    cf_value e = cf_graph_unary(g, CF_OP_EXP, cf_graph_binary(g, CF_OP_SUB, x, cf_graph_reduce(g, CF_OP_RMAX, x, 1)));
    cf_graph_output(g, "p", cf_graph_binary(g, CF_OP_DIV, e, cf_graph_reduce(g, CF_OP_SUM, e, 1)), CF_F32);
    /* row 1 would overflow exp() without the max subtraction */
    float xv[6] = {1, 2, 3, 1001, 1002, 1003};
    int64_t dims[2] = {2, 3};
    const void *in[1] = {xv};
    cf_bindings b = {dims, in, NULL};
    double p[6];
    double *outs[1] = {p};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, outs, &err));
    const double ep[3] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    int bad = 0;
    for (int i = 0; i < 6; i++)
        bad += !near(p[i], ep[i % 3], 1e-15);
    CHECK_EQ_INT(0, bad);
    cf_graph_free(g);
}

/* Axis-0 reductions and transpose: the reference runs what Φ rejects. */
static void test_axis0_and_transpose(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim R, C;
    cf_value x = row_input(g, &R, &C);
    cf_graph_output(g, "colsum", cf_graph_reduce(g, CF_OP_SUM, x, 0), CF_F32);
    cf_graph_output(g, "colmin", cf_graph_reduce(g, CF_OP_RMIN, x, 0), CF_F32);
    cf_value t = cf_graph_transpose(g, x);
    cf_graph_output(g, "t", t, CF_F32);
    cf_graph_output(g, "tmean", cf_graph_reduce(g, CF_OP_MEAN, t, 1), CF_F32); /* = column means */
    float xv[6] = {1, 2, 3, 4, -5, 6};
    int64_t dims[2] = {2, 3};
    const void *in[1] = {xv};
    cf_bindings b = {dims, in, NULL};
    double cs[3], cm[3], tv[6], tm[3];
    double *outs[4] = {cs, cm, tv, tm};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, outs, &err));
    CHECK(cs[0] == 5 && cs[1] == -3 && cs[2] == 9);
    CHECK(cm[0] == 1 && cm[1] == -5 && cm[2] == 3);
    CHECK(tv[0] == 1 && tv[1] == 4 && tv[2] == 2 && tv[3] == -5 && tv[4] == 3 && tv[5] == 6);
    CHECK(tm[0] == 2.5 && tm[1] == -1.5 && tm[2] == 4.5);
    cf_graph_free(g);
}

/* ---- NaN and Inf ----------------------------------------------------------- */

static void test_nan_inf(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim R, C;
    cf_value x = row_input(g, &R, &C);
    cf_graph_output(g, "rmax", cf_graph_reduce(g, CF_OP_RMAX, x, 1), CF_F32);
    cf_graph_output(g, "rmin", cf_graph_reduce(g, CF_OP_RMIN, x, 1), CF_F32);
    cf_graph_output(g, "sum", cf_graph_reduce(g, CF_OP_SUM, x, 1), CF_F32);
    cf_graph_output(g, "relu", cf_graph_unary(g, CF_OP_RELU, x), CF_F32);
    cf_graph_output(g, "max1", cf_graph_binary(g, CF_OP_MAX, x, cf_graph_const(g, 1)), CF_F32);
    /* rows: NaN in the middle; +inf; -inf and +inf; NaN first */
    float xv[12] = {1, NAN, 2, 1, INFINITY, 2, -INFINITY, INFINITY, 0, NAN, -3, 5};
    int64_t dims[2] = {4, 3};
    const void *in[1] = {xv};
    cf_bindings b = {dims, in, NULL};
    double mx[4], mn[4], s[4], r[12], m1[12];
    double *outs[5] = {mx, mn, s, r, m1};
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_reference_run(g, &b, outs, &err));
    CHECK(isnan(mx[0]) && isnan(mn[0]) && isnan(s[0]));
    CHECK(mx[1] == INFINITY && mn[1] == 1 && s[1] == INFINITY);
    CHECK(mx[2] == INFINITY && mn[2] == -INFINITY && isnan(s[2]));
    CHECK(isnan(mx[3]) && isnan(mn[3]) && isnan(s[3])); /* NaN first must still win */
    CHECK(isnan(r[1]) && r[4] == INFINITY && r[6] == 0 && r[10] == 0 && r[11] == 5);
    CHECK(isnan(m1[1]) && isnan(m1[9]) && m1[6] == 1 && m1[7] == INFINITY && m1[5] == 2);
    cf_graph_free(g);
}

/* ---- conversions ------------------------------------------------------------ */

static void test_bf16(void)
{
    CHECK_EQ_INT(0x3F80, cf_f32_to_bf16(1.0f));
    CHECK_EQ_INT(0xC000, cf_f32_to_bf16(-2.0f));
    CHECK_EQ_INT(0x8000, cf_f32_to_bf16(-0.0f));
    /* ties go to even: 1 + 2^-8 is halfway between 0x3F80 and 0x3F81 */
    CHECK_EQ_INT(0x3F80, cf_f32_to_bf16(1.0f + 0x1p-8f));
    CHECK_EQ_INT(0x3F82, cf_f32_to_bf16(1.0f + 3 * 0x1p-8f));
    CHECK_EQ_INT(0x3F81, cf_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)); /* just above the tie */
    CHECK_EQ_INT(0x3F80, cf_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-23f)); /* just below */
    CHECK_EQ_INT(0x7F80, cf_f32_to_bf16(INFINITY));
    CHECK_EQ_INT(0xFF80, cf_f32_to_bf16(-INFINITY));
    CHECK_EQ_INT(0x7F80, cf_f32_to_bf16(FLT_MAX)); /* rounds up past the largest bf16 */
    CHECK_EQ_INT(0x7F7F, cf_f32_to_bf16(f32_of(0x7F7F7FFFu)));
    /* subnormals keep their bits; the smallest rounds to zero */
    CHECK_EQ_INT(0x0008, cf_f32_to_bf16(0x1p-130f));
    CHECK(cf_bf16_to_f32(0x0008) == 0x1p-130f);
    CHECK_EQ_INT(0x0000, cf_f32_to_bf16(f32_of(0x00000001u)));
    CHECK_EQ_INT(0x0001, cf_f32_to_bf16(f32_of(0x00008001u)));
    /* NaNs stay NaN, including a signalling one whose payload sits in the
     * low bits (truncation would turn it into inf) */
    CHECK(isnan(cf_bf16_to_f32(cf_f32_to_bf16(NAN))));
    CHECK(isnan(cf_bf16_to_f32(cf_f32_to_bf16(f32_of(0x7F800001u)))));
    CHECK(isnan(cf_bf16_to_f32(cf_f32_to_bf16(f32_of(0xFF800001u)))));
    CHECK(cf_bf16_to_f32(0x4049) == 3.140625f);
    CHECK(cf_bf16_to_f32(0xFF80) == -INFINITY);
    /* every bf16 survives a round trip through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = cf_bf16_to_f32((uint16_t)h);
        if (bits_of(f) != h << 16)
            bad++;
        else if (isnan(f) ? !isnan(cf_bf16_to_f32(cf_f32_to_bf16(f))) : cf_f32_to_bf16(f) != h)
            bad++;
    }
    CHECK_EQ_INT(0, bad);
}

static void test_f16(void)
{
    CHECK_EQ_INT(0x3C00, cf_f32_to_f16(1.0f));
    CHECK_EQ_INT(0xC000, cf_f32_to_f16(-2.0f));
    CHECK_EQ_INT(0x8000, cf_f32_to_f16(-0.0f));
    CHECK_EQ_INT(0x7BFF, cf_f32_to_f16(65504.0f));
    CHECK_EQ_INT(0x7BFF, cf_f32_to_f16(65519.0f));
    CHECK_EQ_INT(0x7C00, cf_f32_to_f16(65520.0f)); /* the tie above the max goes to inf */
    CHECK_EQ_INT(0xFC00, cf_f32_to_f16(-1e9f));
    CHECK_EQ_INT(0x3C00, cf_f32_to_f16(1.0f + 0x1p-11f)); /* ties to even */
    CHECK_EQ_INT(0x3C02, cf_f32_to_f16(1.0f + 3 * 0x1p-11f));
    CHECK_EQ_INT(0x3C01, cf_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f));
    /* subnormals: ulp 2^-24 */
    CHECK_EQ_INT(0x0001, cf_f32_to_f16(0x1p-24f));
    CHECK_EQ_INT(0x0000, cf_f32_to_f16(0x1p-25f));     /* tie with zero: even */
    CHECK_EQ_INT(0x0001, cf_f32_to_f16(0x1.8p-25f));   /* above the tie */
    CHECK_EQ_INT(0x0002, cf_f32_to_f16(3 * 0x1p-25f)); /* 1.5 ulp: even is 2 */
    CHECK_EQ_INT(0x03FF, cf_f32_to_f16(1023 * 0x1p-24f));
    CHECK_EQ_INT(0x0400, cf_f32_to_f16(0x1p-14f));
    CHECK_EQ_INT(0x0400, cf_f32_to_f16(0x1p-14f - 0x1p-26f)); /* rounds up into the normals */
    CHECK_EQ_INT(0x8001, cf_f32_to_f16(-0x1p-24f));
    CHECK(cf_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(cf_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(cf_f16_to_f32(0x8200) == -0x1p-15f);
    CHECK(cf_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(cf_f16_to_f32(0x7C00) == INFINITY && cf_f16_to_f32(0xFC00) == -INFINITY);
    CHECK_EQ_INT(0x7C00, cf_f32_to_f16(INFINITY));
    CHECK(isnan(cf_f16_to_f32(0x7E00)) && isnan(cf_f16_to_f32(0x7C01)));
    CHECK(isnan(cf_f16_to_f32(cf_f32_to_f16(NAN))));
    CHECK(isnan(cf_f16_to_f32(cf_f32_to_f16(f32_of(0x7F800001u)))));
    /* every f16 survives a round trip through f32, and the f32 is exact */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = cf_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 31, m = h & 0x3ff;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, (int)e - 25);
        if (h & 0x8000)
            want = -want;
        if (isnan(want) ? !isnan(f) : (double)f != want || !!signbit(f) != !!(h & 0x8000))
            bad++;
        else if (isnan(f) ? !isnan(cf_f16_to_f32(cf_f32_to_f16(f))) : cf_f32_to_f16(f) != h)
            bad++;
    }
    CHECK_EQ_INT(0, bad);
}

/* ---- invalid bindings ---------------------------------------------------------- */

static void test_invalid(void)
{
    mm_fixture f;
    mm_setup(&f, false);
    cf_value alpha = cf_graph_param(f.g, "alpha");
    cf_value unused = cf_graph_input(f.g, "unused", CF_F32, 1, (cf_dim[]){f.N});
    (void)unused;
    cf_graph_output(f.g, "Y", cf_graph_binary(f.g, CF_OP_MUL, f.acc, alpha), CF_F32);
    double y[8];
    double params[1] = {2};
    cf_error err;

    /* the unused input may stay unbound */
    f.inputs[2] = NULL;
    CHECK_EQ_INT(CF_OK, run1(&f, y, params, &err));
    CHECK(y[0] == 10);

    f.dims[f.K] = 0;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, y, params, &err));
    CHECK_CONTAINS(err.msg, "'K'");
    f.dims[f.K] = -3;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, y, params, &err));
    CHECK_CONTAINS(err.msg, "-3");
    f.dims[f.K] = 3;

    f.inputs[1] = NULL;
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, y, params, &err));
    CHECK_CONTAINS(err.msg, "'W'");
    f.inputs[1] = f.w;

    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, y, NULL, &err));
    CHECK_CONTAINS(err.msg, "alpha");

    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, NULL, params, &err));
    CHECK_CONTAINS(err.msg, "'Y'");

    cf_bindings nodims = {NULL, f.inputs, params};
    double *outs[1] = {y};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_reference_run(f.g, &nodims, outs, &err));
    cf_bindings noinputs = {f.dims, NULL, params};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_reference_run(f.g, &noinputs, outs, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_reference_run(f.g, NULL, outs, &err));
    cf_bindings ok = {f.dims, f.inputs, params};
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_reference_run(f.g, &ok, NULL, &err));

    /* sizes that cannot be allocated are refused up front */
    f.dims[f.M] = (int64_t)1 << 40;
    f.dims[f.N] = (int64_t)1 << 40;
    CHECK_EQ_INT(CF_ERR_NO_MEMORY, run1(&f, y, params, &err));
    CHECK_CONTAINS(err.msg, "do not fit");
    f.dims[f.M] = 2;
    f.dims[f.N] = 4;
    CHECK_EQ_INT(CF_OK, run1(&f, y, params, &err));
    CHECK_EQ_INT(CF_OK, err.status);

    /* a graph with a builder error is refused */
    cf_graph_binary(f.g, CF_OP_ADD, f.acc, cf_graph_input(f.g, "bad", CF_F32, 1, (cf_dim[]){f.K}));
    CHECK(cf_graph_error(f.g)->status != CF_OK);
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, run1(&f, y, params, &err));
    CHECK_CONTAINS(err.msg, "build error");
    cf_graph_free(f.g);
}

int main(void)
{
    test_matmul();
    test_matmul_large();
    test_bias_and_column_vector();
    test_layernorm();
    test_softmax();
    test_axis0_and_transpose();
    test_nan_inf();
    test_bf16();
    test_f16();
    test_invalid();
    return tu_finish("test_reference");
}
