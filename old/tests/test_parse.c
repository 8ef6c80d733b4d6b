/* test_parse.c — the .cf lexer and parser: examples, equivalence with the
 * builder API, golden diagnostics and robustness against hostile input. */
#include "cf_internal.h"
#include "test_util.h"

#include <stdint.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------- */

static cf_graph *parse_ok(const char *src)
{
    cf_graph *g = NULL;
    cf_error err;
    cf_status st = cf_spec_parse(src, strlen(src), "t.cf", &g, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK)
        fprintf(stderr, "unexpected parse error:\n%s\n", err.msg);
    return g;
}

/* Parses src (named t.cf), expects status st and a message that starts with
 * prefix, contains key, and ends with the source line of the error location
 * and a caret under col.  Returns the message for further checks. */
static void expect_err_n(const char *src, size_t len, cf_status st, const char *prefix, const char *key,
                         const char *line_text, int col)
{
    cf_graph *g = (cf_graph *)(uintptr_t)1; /* must be reset to NULL */
    cf_error err;
    cf_status got = cf_spec_parse(src, len, "t.cf", &g, &err);
    CHECK_EQ_INT(st, got);
    CHECK(g == NULL);
    if (g && g != (cf_graph *)(uintptr_t)1)
        cf_graph_free(g);
    CHECK_EQ_INT(st, err.status);
    if (strncmp(err.msg, prefix, strlen(prefix)) != 0) {
        tu_failed++;
        fprintf(stderr, "expected prefix \"%s\" in:\n%s\n", prefix, err.msg);
    } else {
        tu_passed++;
    }
    CHECK_CONTAINS(err.msg, key);
    CHECK_EQ_INT(0, strcmp(err.file, "t.cf"));
    if (line_text) {
        char want[512];
        int n = snprintf(want, sizeof want, "\n%s\n", line_text);
        for (int i = 1; i < col && n < (int)sizeof want - 2; i++)
            want[n++] = line_text[i - 1] == '\t' ? '\t' : ' ';
        want[n++] = '^';
        want[n] = '\0';
        const char *nl = strchr(err.msg, '\n');
        CHECK(nl && strcmp(nl, want) == 0);
        if (!nl || strcmp(nl, want) != 0)
            fprintf(stderr, "caret context: wanted\n%s\ngot\n%s\n", want, nl ? nl : "(none)");
        CHECK_EQ_INT(col, err.col);
    }
}

static void expect_err(const char *src, cf_status st, const char *prefix, const char *key,
                       const char *line_text, int col)
{
    expect_err_n(src, strlen(src), st, prefix, key, line_text, col);
}

/* Node-by-node comparison: the parser must build exactly the API's graph. */
static void check_same_graph(const cf_graph *a, const cf_graph *b)
{
    CHECK_EQ_INT(a->n_nodes, b->n_nodes);
    CHECK_EQ_INT(a->n_dims, b->n_dims);
    CHECK_EQ_INT(a->n_inputs, b->n_inputs);
    CHECK_EQ_INT(a->n_params, b->n_params);
    CHECK_EQ_INT(a->n_outputs, b->n_outputs);
    if (a->n_nodes != b->n_nodes)
        return;
    int bad = 0;
    for (int i = 0; i < a->n_nodes; i++) {
        const cf_node *x = &a->nodes[i], *y = &b->nodes[i];
        bool same = x->op == y->op && x->rank == y->rank && x->src[0] == y->src[0] &&
                    x->src[1] == y->src[1] && x->dtype == y->dtype && x->axis == y->axis &&
                    x->index == y->index && x->cval == y->cval &&
                    (x->rank < 1 || x->dims[0] == y->dims[0]) && (x->rank < 2 || x->dims[1] == y->dims[1]);
        if (!same) {
            bad++;
            fprintf(stderr, "node %d differs: %s(%d,%d) vs %s(%d,%d)\n", i, cf_op_name(x->op), x->src[0],
                    x->src[1], cf_op_name(y->op), y->src[0], y->src[1]);
        }
    }
    CHECK_EQ_INT(0, bad);
    for (int i = 0; i < a->n_dims && i < b->n_dims; i++)
        CHECK_EQ_INT(0, strcmp(a->dim_names[i], b->dim_names[i]));
    for (int i = 0; i < a->n_outputs && i < b->n_outputs; i++) {
        CHECK_EQ_INT(a->outputs[i].value, b->outputs[i].value);
        CHECK_EQ_INT(a->outputs[i].dtype, b->outputs[i].dtype);
        CHECK_EQ_INT(0, strcmp(a->outputs[i].name, b->outputs[i].name));
    }
}

/* ---- examples ------------------------------------------------------------------ */

typedef struct ex_input {
    const char *name;
    cf_dtype dtype;
    int rank;
    const char *d0, *d1;
} ex_input;

static void check_example(const char *path, int n_inputs, const ex_input *ins, const char *out_name,
                          const char *od0, const char *od1)
{
    cf_graph *g = NULL;
    cf_error err;
    cf_status st = cf_spec_parse_file(path, &g, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(n_inputs, cf_graph_num_inputs(g));
    CHECK_EQ_INT(0, cf_graph_num_params(g));
    CHECK_EQ_INT(1, cf_graph_num_outputs(g));
    for (int i = 0; i < n_inputs && i < cf_graph_num_inputs(g); i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        CHECK(t.name && strcmp(t.name, ins[i].name) == 0);
        CHECK_EQ_INT(ins[i].dtype, t.dtype);
        CHECK_EQ_INT(ins[i].rank, t.rank);
        CHECK_EQ_INT(0, strcmp(cf_graph_dim_name(g, t.dims[0]), ins[i].d0));
        if (ins[i].rank == 2)
            CHECK_EQ_INT(0, strcmp(cf_graph_dim_name(g, t.dims[1]), ins[i].d1));
    }
    cf_tensor_info o = cf_graph_output_info(g, 0);
    CHECK(o.name && strcmp(o.name, out_name) == 0);
    CHECK_EQ_INT(CF_BF16, o.dtype);
    CHECK_EQ_INT(2, o.rank);
    CHECK_EQ_INT(0, strcmp(cf_graph_dim_name(g, o.dims[0]), od0));
    CHECK_EQ_INT(0, strcmp(cf_graph_dim_name(g, o.dims[1]), od1));
    /* every node carries the file it came from */
    const cf_node *n = cf_graph_node(g, g->outputs[0].value);
    CHECK(n && n->loc.file && strcmp(n->loc.file, path) == 0 && n->loc.line > 0);
    cf_graph_free(g);
}

static int count_op(const cf_graph *g, cf_op op)
{
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        k += g->nodes[i].op == op;
    return k;
}

static void test_examples(void)
{
    const ex_input X = {"X", CF_BF16, 2, "M", "K"}, W = {"W", CF_BF16, 2, "K", "N"};
    const ex_input bias = {"bias", CF_F32, 1, "N", 0}, gamma = {"gamma", CF_F32, 1, "N", 0},
                   beta = {"beta", CF_F32, 1, "N", 0};
    check_example("examples/gemm_bias_gelu.cf", 3, (ex_input[]){X, W, bias}, "Y", "M", "N");
    check_example("examples/gemm_bias_ln.cf", 5, (ex_input[]){X, W, bias, gamma, beta}, "Y", "M", "N");
    check_example("examples/gemm_rmsnorm.cf", 3, (ex_input[]){X, W, gamma}, "Y", "M", "N");
    check_example("examples/gemm_softmax.cf", 2, (ex_input[]){X, W}, "Y", "M", "N");
    check_example("examples/gemm_ln_softmax.cf", 5, (ex_input[]){X, W, bias, gamma, beta}, "Y", "M", "N");
    const ex_input W1 = {"W1", CF_BF16, 2, "K", "N1"}, b1 = {"b1", CF_F32, 1, "N1", 0},
                   W2 = {"W2", CF_BF16, 2, "N1", "N2"}, g1 = {"gamma", CF_F32, 1, "N1", 0},
                   be1 = {"beta", CF_F32, 1, "N1", 0};
    check_example("examples/b2b_gelu.cf", 4, (ex_input[]){X, W1, b1, W2}, "O", "M", "N2");
    check_example("examples/b2b_ln.cf", 6, (ex_input[]){X, W1, b1, g1, be1, W2}, "O", "M", "N2");
    check_example("examples/b2b_softmax.cf", 3, (ex_input[]){X, W1, W2}, "O", "M", "N2");

    /* the reduction counts that define each workload */
    cf_graph *g = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file("examples/gemm_ln_softmax.cf", &g, &err));
    if (g) {
        CHECK_EQ_INT(2, count_op(g, CF_OP_MEAN));
        CHECK_EQ_INT(1, count_op(g, CF_OP_RMAX));
        CHECK_EQ_INT(1, count_op(g, CF_OP_SUM));
        CHECK_EQ_INT(1, count_op(g, CF_OP_MATMUL));
        cf_graph_free(g);
    }
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file("examples/b2b_softmax.cf", &g, &err));
    if (g) {
        CHECK_EQ_INT(2, count_op(g, CF_OP_MATMUL));
        CHECK_EQ_INT(1, count_op(g, CF_OP_EXP));
        cf_graph_free(g);
    }
}

/* ---- equivalence with the builder API --------------------------------------------- */

static void test_same_as_api(void)
{
    /* gemm_bias_ln, statement for statement */
    cf_graph *p = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file("examples/gemm_bias_ln.cf", &p, &err));
    cf_graph *g = cf_graph_new();
    cf_dim M = cf_graph_dim(g, "M"), K = cf_graph_dim(g, "K"), N = cf_graph_dim(g, "N");
    cf_value X = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){M, K});
    cf_value W = cf_graph_input(g, "W", CF_BF16, 2, (cf_dim[]){K, N});
    cf_value bias = cf_graph_input(g, "bias", CF_F32, 1, (cf_dim[]){N});
    cf_value gamma = cf_graph_input(g, "gamma", CF_F32, 1, (cf_dim[]){N});
    cf_value beta = cf_graph_input(g, "beta", CF_F32, 1, (cf_dim[]){N});
    cf_value half = cf_graph_const(g, 0.5);
    cf_value mm = cf_graph_matmul(g, X, W);
    cf_value x = cf_graph_binary(g, CF_OP_ADD, cf_graph_binary(g, CF_OP_MUL, half, mm), bias);
    cf_value mu = cf_graph_reduce(g, CF_OP_MEAN, x, -1);
    cf_value d = cf_graph_binary(g, CF_OP_SUB, x, mu);
    cf_value var = cf_graph_reduce(g, CF_OP_MEAN, cf_graph_unary(g, CF_OP_SQUARE, d), -1);
    cf_value eps = cf_graph_const(g, 1e-5);
    cf_value r = cf_graph_unary(g, CF_OP_RSQRT, cf_graph_binary(g, CF_OP_ADD, var, eps));
    cf_value y = cf_graph_binary(g, CF_OP_ADD,
                                 cf_graph_binary(g, CF_OP_MUL, cf_graph_binary(g, CF_OP_MUL, d, r), gamma),
                                 beta);
    cf_graph_output(g, "Y", y, CF_BF16);
    CHECK_EQ_INT(CF_OK, cf_graph_error(g)->status);
    if (p) {
        check_same_graph(p, g);
        /* assignments name their nodes; inputs keep their declared names */
        CHECK(p->nodes[x].name && strcmp(p->nodes[x].name, "x") == 0);
        CHECK(p->nodes[mu].name && strcmp(p->nodes[mu].name, "mu") == 0);
        CHECK(p->nodes[var].name && strcmp(p->nodes[var].name, "var") == 0);
        CHECK(p->nodes[y].name && strcmp(p->nodes[y].name, "Y") == 0);
        /* locations: the '@' of line 9 "x   = 0.5 * (X @ W) + bias" */
        CHECK_EQ_INT(9, p->nodes[mm].loc.line);
        CHECK_EQ_INT(16, p->nodes[mm].loc.col);
        CHECK_EQ_INT(10, p->nodes[mu].loc.line); /* the call token 'mean' */
        CHECK_EQ_INT(7, p->nodes[mu].loc.col);
        CHECK_EQ_INT(0, p->cur_loc.line); /* reset for later API calls */
    }
    cf_graph_free(p);
    cf_graph_free(g);

    /* every construct: params, matmul(), [N,K] weights, axis=, transpose,
     * pow, unary minus, elementwise max, calls by name, output reuse */
    const char *src =
        "# all the constructs\n"
        "input X: f16[M, K]; input Wt: f32[N, K]\n"
        "input c: f32[M]\n"
        "param alpha\n"
        "param beta: f32\n"
        "a = matmul(X, Wt)\n"
        "b = add(a, c) - -2 * alpha ** 2 ** -1\n"
        "r = sum(b, axis=0) ; r2 = max(b, axis=-1); r3 = min(b, axis=1)\n"
        "t = transpose(\n"
        "      b\n"
        "    )\n"
        "output Y: f32 = max(b, beta) / (r2 + r3) + -abs(b)\n"
        "output Z: f16 = Y * 2.5e0 + .5 - 3. + r[0:0]\n";
    /* r[0:0] is not an expression: first check the error, then the valid spec */
    expect_err(src, CF_ERR_PARSE, "t.cf:13:40: expected end of statement near '['", "",
               "output Z: f16 = Y * 2.5e0 + .5 - 3. + r[0:0]", 40);
    char fixed[1024];
    snprintf(fixed, sizeof fixed, "%.*s", (int)(strstr(src, " + r[0:0]") - src), src);
    strcat(fixed, "\noutput T = t * 1\n");
    p = parse_ok(fixed);
    g = cf_graph_new();
    M = cf_graph_dim(g, "M");
    K = cf_graph_dim(g, "K");
    N = cf_graph_dim(g, "N");
    X = cf_graph_input(g, "X", CF_F16, 2, (cf_dim[]){M, K});
    cf_value Wt = cf_graph_input(g, "Wt", CF_F32, 2, (cf_dim[]){N, K});
    cf_value c = cf_graph_input(g, "c", CF_F32, 1, (cf_dim[]){M});
    cf_value alpha = cf_graph_param(g, "alpha");
    cf_value pbeta = cf_graph_param(g, "beta");
    cf_value a = cf_graph_matmul(g, X, Wt);
    cf_value ac = cf_graph_binary(g, CF_OP_ADD, a, c);
    cf_value m2 = cf_graph_const(g, -2); /* "-2" folds to a constant */
    cf_value two = cf_graph_const(g, 2);
    cf_value m1 = cf_graph_const(g, -1);
    cf_value pw = cf_graph_binary(g, CF_OP_POW, alpha, cf_graph_binary(g, CF_OP_POW, two, m1));
    cf_value b = cf_graph_binary(g, CF_OP_SUB, ac, cf_graph_binary(g, CF_OP_MUL, m2, pw));
    cf_value rr = cf_graph_reduce(g, CF_OP_SUM, b, 0);
    cf_value r2 = cf_graph_reduce(g, CF_OP_RMAX, b, -1);
    cf_value r3 = cf_graph_reduce(g, CF_OP_RMIN, b, 1);
    cf_value t = cf_graph_transpose(g, b);
    cf_value mx = cf_graph_binary(g, CF_OP_MAX, b, pbeta);
    cf_value q = cf_graph_binary(g, CF_OP_DIV, mx, cf_graph_binary(g, CF_OP_ADD, r2, r3));
    cf_value nab = cf_graph_unary(g, CF_OP_NEG, cf_graph_unary(g, CF_OP_ABS, b));
    cf_value Y = cf_graph_binary(g, CF_OP_ADD, q, nab);
    cf_graph_output(g, "Y", Y, CF_F32);
    cf_value z = cf_graph_binary(g, CF_OP_MUL, Y, cf_graph_const(g, 2.5));
    z = cf_graph_binary(g, CF_OP_ADD, z, cf_graph_const(g, 0.5));
    z = cf_graph_binary(g, CF_OP_SUB, z, cf_graph_const(g, 3.0));
    cf_graph_output(g, "Z", z, CF_F16);
    cf_value one = cf_graph_const(g, 1);
    cf_graph_output(g, "T", cf_graph_binary(g, CF_OP_MUL, t, one), CF_BF16);
    CHECK_EQ_INT(CF_OK, cf_graph_error(g)->status);
    if (p) {
        check_same_graph(p, g);
        CHECK_EQ_INT(1, p->nodes[a].axis); /* [N,K] weight detected */
        CHECK_EQ_INT(0, p->nodes[rr].axis);
        CHECK(p->nodes[rr].name && strcmp(p->nodes[rr].name, "r") == 0);
        CHECK(p->nodes[pbeta].name && strcmp(p->nodes[pbeta].name, "beta") == 0);
        CHECK_EQ_INT(2, cf_graph_num_params(p));
        CHECK_EQ_INT(3, cf_graph_num_outputs(p));
    }
    cf_graph_free(p);
    cf_graph_free(g);

    /* "y = x" keeps the first name; -x**2 is -(x**2); CRLF line ends */
    p = parse_ok("input X: bf16[M,K]\r\ninput W: bf16[K,N]\r\nx = X @ W\r\ny = x\r\n"
                 "output Y = -x ** 2 + y\r\n");
    if (p) {
        CHECK_EQ_INT(CF_OP_ADD, p->nodes[p->outputs[0].value].op);
        const cf_node *neg = &p->nodes[p->nodes[p->outputs[0].value].src[0]];
        CHECK_EQ_INT(CF_OP_NEG, neg->op);
        CHECK_EQ_INT(CF_OP_POW, p->nodes[neg->src[0]].op);
        CHECK(strcmp(p->nodes[2].name, "x") == 0);
    }
    cf_graph_free(p);

    /* a filename of NULL reads as <spec> */
    cf_graph *pg = NULL;
    const char *bad = "output Y = Z\n";
    CHECK_EQ_INT(CF_ERR_PARSE, cf_spec_parse(bad, strlen(bad), NULL, &pg, &err));
    CHECK_CONTAINS(err.msg, "<spec>:1:12: undefined name 'Z'");
    /* a NULL err is allowed */
    CHECK_EQ_INT(CF_ERR_PARSE, cf_spec_parse(bad, strlen(bad), NULL, &pg, NULL));
    CHECK(pg == NULL);
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_spec_parse(NULL, 3, "t.cf", &pg, &err));
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_spec_parse(bad, strlen(bad), "t.cf", NULL, &err));
}

/* ---- golden diagnostics ---------------------------------------------------------- */

#define H "input X: bf16[M, K]\ninput W: bf16[K, N]\n"

static void test_errors(void)
{
    expect_err(H "output Y = gelu(X @ W gelu\n", CF_ERR_PARSE, "t.cf:3:23: expected ')' near 'gelu'", "",
               "output Y = gelu(X @ W gelu", 23);
    expect_err(H "y = X $ W\n", CF_ERR_PARSE, "t.cf:3:7: unexpected character '$'", "", "y = X $ W", 7);
    expect_err(H "y = 1.2.3 * X\n", CF_ERR_PARSE, "t.cf:3:5: invalid number '1.2.3'", "", "y = 1.2.3 * X", 5);
    expect_err(H "y = 2x\n", CF_ERR_PARSE, "t.cf:3:5: invalid number '2x'", "", "y = 2x", 5);
    expect_err(H "y = 1e- * X\n", CF_ERR_PARSE, "t.cf:3:5: invalid number '1e-'", "exponent has no digits",
               "y = 1e- * X", 5);
    expect_err(H "y = 1e999 * X\n", CF_ERR_PARSE, "t.cf:3:5: number '1e999' is out of range", "",
               "y = 1e999 * X", 5);
    expect_err(H "y = softmax(X)\n", CF_ERR_PARSE, "t.cf:3:5: unknown function 'softmax' with 1 argument",
               "max/1,2", "y = softmax(X)", 5);
    expect_err(H "y = exp(X, W)\n", CF_ERR_PARSE, "t.cf:3:5: 'exp' takes 1 argument, got 2", "",
               "y = exp(X, W)", 5);
    expect_err(H "y = add(X)\n", CF_ERR_PARSE, "t.cf:3:5: 'add' takes 2 arguments, got 1", "", "y = add(X)", 5);
    expect_err(H "y = max(X, X, X)\n", CF_ERR_PARSE, "t.cf:3:5: 'max' takes 1 argument (a reduction) or 2",
               "got 3", "y = max(X, X, X)", 5);
    expect_err(H "y = foo + X\n", CF_ERR_PARSE, "t.cf:3:5: undefined name 'foo'", "", "y = foo + X", 5);
    expect_err(H "X = W\n", CF_ERR_PARSE, "t.cf:3:1: redefinition of 'X'", "(input defined at t.cf:1:7)",
               "X = W", 1);
    expect_err(H "x = X @ W\nx = X @ W\n", CF_ERR_PARSE, "t.cf:4:1: redefinition of 'x'",
               "variable defined at t.cf:3:1", "x = X @ W", 1);
    expect_err(H "output Y = X @ W\noutput Y = X @ W\n", CF_ERR_PARSE, "t.cf:4:8: redefinition of 'Y'",
               "output defined at t.cf:3:8", "output Y = X @ W", 8);
    expect_err(H "input b: f64[N]\n", CF_ERR_PARSE, "t.cf:3:10: unknown dtype 'f64'", "bf16, f16 or f32",
               "input b: f64[N]", 10);
    expect_err(H "y = sum(X, axis=2)\n", CF_ERR_PARSE, "t.cf:3:17: bad axis 2: expected 0, 1 or -1", "",
               "y = sum(X, axis=2)", 17);
    expect_err(H "y = sum(X, axis=-2)\n", CF_ERR_PARSE, "t.cf:3:17: bad axis -2", "", "y = sum(X, axis=-2)", 17);
    expect_err(H "y = sum(X, axis=1.0)\n", CF_ERR_PARSE, "t.cf:3:17: bad axis 1.0", "",
               "y = sum(X, axis=1.0)", 17);
    expect_err(H "y = sum(X, dim=1)\n", CF_ERR_PARSE, "t.cf:3:12: unknown keyword argument 'dim'", "",
               "y = sum(X, dim=1)", 12);
    expect_err(H "y = exp(X, axis=1)\n", CF_ERR_PARSE, "t.cf:3:12: 'exp' takes no axis= argument", "",
               "y = exp(X, axis=1)", 12);
    expect_err(H, CF_ERR_PARSE, "t.cf:3:1: spec declares no output", "", "", 1);
    expect_err("", CF_ERR_PARSE, "t.cf:1:1: spec declares no output", "", "", 1);
    expect_err("input s: f32[]\noutput Y = s\n", CF_ERR_PARSE, "t.cf:1:13: input 's' has rank 0", "rank 1 or 2",
               "input s: f32[]", 13);
    expect_err("input T: f32[M, N, K]\n", CF_ERR_PARSE, "t.cf:1:20: input 'T' has rank 3", "rank 1 or 2",
               "input T: f32[M, N, K]", 20);
    expect_err("input T: f32\n", CF_ERR_PARSE, "t.cf:1:13: expected '['", "", "input T: f32", 13);
    expect_err("input v: f32[128]\n", CF_ERR_PARSE, "t.cf:1:14: expected a dim name near '128'",
               "dims are symbols", "input v: f32[128]", 14);
    expect_err(H "y X\n", CF_ERR_PARSE, "t.cf:3:3: expected '=' near 'X'", "", "y X", 3);
    expect_err(H "output input = X\n", CF_ERR_PARSE, "t.cf:3:8: 'input' is a keyword", "", "output input = X", 8);
    expect_err(H "y = X W\n", CF_ERR_PARSE, "t.cf:3:7: expected end of statement near 'W'", "", "y = X W", 7);
    expect_err(H "+ X\n", CF_ERR_PARSE, "t.cf:3:1: expected a statement", "", "+ X", 1);
    expect_err(H "y = (X; W)\n", CF_ERR_PARSE, "t.cf:3:7: expected ')' near ';'", "", "y = (X; W)", 7);
    expect_err(H "y = X +\n", CF_ERR_PARSE, "t.cf:3:8: expected an expression near end of line", "", "y = X +", 8);
    expect_err(H "y = X(1)\n", CF_ERR_PARSE, "t.cf:3:5: 'X' is a value, not a function", "", "y = X(1)", 5);
    expect_err(H "param a: bf16\n", CF_ERR_PARSE, "t.cf:3:10: param 'a' must be f32", "", "param a: bf16", 10);
    expect_err(H "y = exp\n", CF_ERR_PARSE, "t.cf:3:5: undefined name 'exp'", "call it as exp(...)",
               "y = exp", 5);
    /* the error is on the line it happens on, after comments and blank lines */
    expect_err("# c\n\n" H "\n  # more\n\ty = (X @\n\t  W) + nope\n", CF_ERR_PARSE,
               "t.cf:8:9: undefined name 'nope'", "", "\t  W) + nope", 9);

    /* graph-level errors come out located too, with their own status */
    expect_err(H "output Y = X @ X\n", CF_ERR_SHAPE, "t.cf:3:14: matmul(X, X)", "same dim M",
               "output Y = X @ X", 14);
    expect_err(H "input V: bf16[N, M]\noutput Y = X @ V\n", CF_ERR_SHAPE, "t.cf:4:14: matmul(X, V)",
               "contraction dim K", "output Y = X @ V", 14);
    expect_err(H "input b: f32[K]\noutput Y = X @ W + b\n", CF_ERR_SHAPE, "t.cf:4:18: add(", "do not broadcast",
               "output Y = X @ W + b", 18);
    expect_err(H "y = X ** X\n", CF_ERR_SHAPE, "t.cf:3:7: pow(X, X)", "must be a scalar", "y = X ** X", 7);
    expect_err(H "y = mean(mean(X))\n", CF_ERR_SHAPE, "t.cf:3:5: mean(", "reductions take a matrix",
               "y = mean(mean(X))", 5);

    /* lexical robustness */
    char longname[200];
    snprintf(longname, sizeof longname, H "y = %0100d + X\n", 0);
    memset(strstr(longname, "y = ") + 4, 'a', 100);
    expect_err(longname, CF_ERR_PARSE, "t.cf:3:5: name 'aaaa", "is too long (100 characters; at most 63)",
               NULL, 0);
    static const char nul[] = "input X: bf16[M, K]\ny = X\0 + X\n";
    expect_err_n(nul, sizeof nul - 1, CF_ERR_PARSE, "t.cf:2:6: unexpected byte 0x00", "", "y = X? + X", 6);
    expect_err("input X: bf16[M, K]\ny = \xff\xfe X\n", CF_ERR_PARSE, "t.cf:2:5: unexpected byte 0xFF",
               "only ASCII", "y = ?? X", 5);
    /* non-ASCII inside comments is fine */
    cf_graph_free(parse_ok(H "# caf\xc3\xa9 \xff\noutput Y = X @ W # \x01\n"));
}

/* ---- robustness ------------------------------------------------------------------- */

static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
    size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
    char *s = malloc(hl + ul * n + tl + 1);
    memcpy(s, head, hl);
    for (size_t i = 0; i < n; i++)
        memcpy(s + hl + i * ul, unit, ul);
    memcpy(s + hl + ul * n, tail, tl + 1);
    return s;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void expect_clean_failure(const char *src, size_t len, const char *key)
{
    cf_graph *g = (cf_graph *)(uintptr_t)1;
    cf_error err;
    cf_status st = cf_spec_parse(src, len, "t.cf", &g, &err);
    CHECK(st != CF_OK);
    CHECK(g == NULL);
    CHECK_EQ_INT(st, err.status);
    if (key)
        CHECK_CONTAINS(err.msg, key);
    if (g && g != (cf_graph *)(uintptr_t)1)
        cf_graph_free(g);
}

static void test_robustness(void)
{
    /* deep nesting: parentheses, unary minus, calls and ** chains */
    char *s = repeat(H "output Y = ", "(", 100000, "X");
    expect_clean_failure(s, strlen(s), "t.cf:3:");
    cf_error err;
    cf_graph *g = NULL;
    cf_spec_parse(s, strlen(s), "t.cf", &g, &err);
    CHECK_CONTAINS(err.msg, "expression nested too deeply (more than 256 levels)");
    free(s);
    s = repeat(H "output Y = ", "-", 100000, "X");
    expect_clean_failure(s, strlen(s), "nested too deeply");
    free(s);
    s = repeat(H "output Y = ", "exp(", 50000, "X");
    expect_clean_failure(s, strlen(s), "nested too deeply");
    free(s);
    s = repeat(H "output Y = X", " ** X", 50000, "");
    expect_clean_failure(s, strlen(s), "nested too deeply");
    free(s);
    /* nesting below the limit is fine */
    char *open = repeat(H "output Y = ", "(", 200, "X @ W");
    s = repeat(open, ")", 200, "\n");
    cf_graph_free(parse_ok(s));
    free(open);
    free(s);
    /* long flat expressions are not nesting */
    s = repeat(H "output Y = X @ W", " + 1", 20000, "\n");
    g = parse_ok(s);
    CHECK(g && g->n_nodes > 40000);
    cf_graph_free(g);
    free(s);
    /* too many nodes is the graph's clean error */
    s = repeat(H "output Y = X @ W", " + 1", 40000, "\n");
    expect_clean_failure(s, strlen(s), "graph too large");
    free(s);

    /* 1 MB of random bytes, and random soups of valid tokens */
    size_t n = 1 << 20;
    char *buf = malloc(n);
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(next_rand() >> 24);
    expect_clean_failure(buf, n, "t.cf:");
    static const char *const toks[] = {"X", "W", "b", "y", "(", ")", "[", "]", "+", "-", "*", "/", "@", "**",
                                       "=", ",", ":", ";", "\n", " ", "1", ".5", "1e-5", "exp", "max", "sum",
                                       "axis", "input", "param", "output", "bf16", "f32", "M", "N", "#"};
    int ok = 0, failed_clean = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        int k = 1 + (int)(next_rand() % 40);
        const char *prefix = (iter & 1) ? H "input b: f32[N]\n" : "";
        len = (size_t)snprintf(buf, n, "%s", prefix);
        for (int i = 0; i < k; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s ", toks[next_rand() % CF_ARRAY_LEN(toks)]);
        g = (cf_graph *)(uintptr_t)1;
        cf_status st = cf_spec_parse(buf, len, "t.cf", &g, &err);
        if (st == CF_OK) {
            ok += g != NULL && cf_graph_num_outputs(g) > 0;
            cf_graph_free(g);
        } else {
            failed_clean += g == NULL && err.status == st && strncmp(err.msg, "t.cf:", 5) == 0;
        }
    }
    CHECK_EQ_INT(3000, ok + failed_clean);
    free(buf);

    /* an oversize spec is refused before parsing */
    expect_clean_failure("x", CF_SPEC_MAX_BYTES + 1, "too large");
}

/* ---- files ------------------------------------------------------------------------- */

static void test_files(void)
{
    cf_graph *g = (cf_graph *)(uintptr_t)1;
    cf_error err;
    CHECK_EQ_INT(CF_ERR_IO, cf_spec_parse_file("no/such/file.cf", &g, &err));
    CHECK(g == NULL);
    CHECK_CONTAINS(err.msg, "no/such/file.cf");
    CHECK_CONTAINS(err.msg, "No such file");
    CHECK_EQ_INT(CF_ERR_IO, cf_spec_parse_file("examples", &g, &err)); /* a directory */
    CHECK(g == NULL);

    char path[] = "/tmp/test_parse_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    /* errors name the file as given */
    const char *bad = "input X: bf16[M, K]\n\noutput Y = X @ Q\n";
    CHECK_EQ_INT((long long)strlen(bad), write(fd, bad, strlen(bad)));
    CHECK_EQ_INT(CF_ERR_PARSE, cf_spec_parse_file(path, &g, &err));
    char want[128];
    snprintf(want, sizeof want, "%s:3:16: undefined name 'Q'", path);
    CHECK_EQ_INT(0, strncmp(err.msg, want, strlen(want)));
    CHECK_EQ_INT(0, strcmp(err.file, path));
    CHECK_EQ_INT(3, err.line);
    CHECK_EQ_INT(16, err.col);
    /* more than 16 MiB is refused */
    CHECK_EQ_INT(0, ftruncate(fd, (off_t)CF_SPEC_MAX_BYTES + 10));
    CHECK_EQ_INT(CF_ERR_PARSE, cf_spec_parse_file(path, &g, &err));
    CHECK_CONTAINS(err.msg, "too large");
    CHECK(g == NULL);
    close(fd);
    unlink(path);
}

int main(void)
{
    test_examples();
    test_same_as_api();
    test_errors();
    test_robustness();
    test_files();
    return tu_finish("test_parse");
}
