/* test_ir.c — cf_ir_verify, the one check of an IR (Φ runs it after lowering, the
 * interpreter before it runs one): each way an IR can be malformed is caught and
 * named, and undoing the damage makes the IR valid again. */
#include "cf_internal.h"
#include "test_util.h"

static cf_graph *parse(const char *path)
{
    cf_graph *g = NULL;
    cf_error err;
    if (cf_spec_parse_file(path, &g, &err) != CF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    return g;
}

static cf_ir_node *node(cf_ir *ir, int id)
{
    for (int e = 0; e < ir->n_gemms; e++)
        for (cf_ir_spec *s = ir->epi[e]; s; s = s->post)
            for (int i = 0; i < s->n_nodes; i++)
                if (s->nodes[i]->id == id)
                    return s->nodes[i];
    return NULL;
}

static cf_ir_spec *stage(cf_ir *ir, int e, int depth)
{
    cf_ir_spec *s = ir->epi[e];
    while (s && depth-- > 0)
        s = s->post;
    return s;
}

/* cf_ir_verify fails with CF_ERR_INTERNAL and a message holding `what`. */
#define EXPECT_BAD(ir, what)                                                 \
    do {                                                                     \
        cf_error ve_;                                                         \
        CHECK_EQ_INT(CF_ERR_INTERNAL, cf_ir_verify(ir, &ve_));                \
        CHECK_CONTAINS(ve_.msg, what);                                        \
    } while (0)

#define EXPECT_OK(ir)                                                        \
    do {                                                                     \
        cf_error ve_ = {0};                                                   \
        cf_status vs_ = cf_ir_verify(ir, &ve_);                                \
        CHECK_EQ_INT(CF_OK, vs_);                                             \
        if (vs_ != CF_OK)                                                     \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ve_.msg);      \
    } while (0)

/* Sets field to v, expects `what`, puts the old value back. */
#define TAMPER(ir, field, v, what)                                           \
    do {                                                                     \
        __typeof__(field) *p_ = &(field), old_ = *p_;                        \
        *p_ = (v);                                                           \
        EXPECT_BAD(ir, what);                                                \
        *p_ = old_;                                                          \
    } while (0)

/* The frame, the arg table and the node ids (checks that were the interpreter's). */
static void test_frame_and_args(cf_ir *ir)
{
    TAMPER(ir, ir->n_gemms, 3, "3 GEMMs");
    TAMPER(ir, ir->n_gemms, 2, "the epilogues do not match the 2 GEMM(s)");
    TAMPER(ir, ir->dim_k, 99, "dim 1 of the IR is 99");
    TAMPER(ir, ir->n_nodes, -1, "n_nodes is -1");
    /* args: a0 X, a1 W, a2 bias, a3 gamma, a4 beta, a5 Y */
    TAMPER(ir, ir->args[0].dtype, CF_F16, "has dtype f16, the input bf16");
    TAMPER(ir, ir->args[1].b_is_nk, true, "does not have the shape the IR uses it with");
    TAMPER(ir, ir->args[2].index, 42, "names input 42 of 5");
    TAMPER(ir, ir->args[5].index, 7, "output arg 'Y' names output 7 of 1");
    TAMPER(ir, ir->args[2].kind, (cf_arg_kind)99, "arg 2 has kind 99");
    TAMPER(ir, ir->args[2].kind, CF_ARG_GEMM2_B, "a GEMM2_B arg without B2B");
    TAMPER(ir, ir->args[2].kind, CF_ARG_SCALAR, "scalar arg 'bias' names param 2 of 0");
    cf_ir_arg save = ir->args[2];
    ir->args[2] = ir->args[0];   /* a second GEMM_A */
    EXPECT_BAD(ir, "2 GEMM_A");
    ir->args[2] = save;
    /* ids: unique, in range; no NULL node */
    TAMPER(ir, node(ir, 1)->id, 0, "id 0 is used twice");
    TAMPER(ir, node(ir, 1)->id, 1000, "with id 1000 (n_nodes 22)");
    TAMPER(ir, ir->epi[0]->nodes[1], NULL, "with id -1");
    TAMPER(ir, stage(ir, 0, 1)->depth, 5, "stage depths are not consecutive");
    EXPECT_OK(ir);
}

/* Edges and stages. */
static void test_edges_and_stages(cf_ir *ir)
{
    cf_ir_spec *s0 = stage(ir, 0, 0), *s2 = stage(ir, 0, 2);
    TAMPER(ir, node(ir, 8)->args[0], node(ir, 4), "edges must stay inside a stage");
    TAMPER(ir, node(ir, 2)->args[0], node(ir, 4), "not in topological order");
    TAMPER(ir, node(ir, 2)->stage, 1, "filed under the wrong stage");
    TAMPER(ir, node(ir, 9)->nargs, 3, "3 args");
    TAMPER(ir, node(ir, 9)->shape, (cf_shape)17, "shape 17");
    TAMPER(ir, ir->n_stages[0], 2, "n_stages says 2");
    TAMPER(ir, s2->terminal, NULL, "has no terminal");
    TAMPER(ir, s0->terminal, node(ir, 4), "a reduction must be its stage's last node and terminal");
    /* a store has no value to use: v16 made a store of d.11 into Y, which v18 reads */
    cf_ir_node *v16 = node(ir, 16);
    const cf_ir_node saved = *v16;
    v16->kind = CF_IR_STORE, v16->nargs = 1, v16->arg = 5;
    EXPECT_BAD(ir, "which has no value inside its stage");
    *v16 = saved;
    /* a second accumulator (v1, the constant, made a tile accumulator) */
    cf_ir_node *v1 = node(ir, 1);
    const cf_ir_node saved1 = *v1;
    v1->kind = CF_IR_ACC, v1->shape = CF_SHAPE_TILE;
    EXPECT_BAD(ir, "2 accumulator entries");
    *v1 = saved1;
    TAMPER(ir, node(ir, 0)->shape, CF_SHAPE_VEC_M, "the accumulator enters only stage 0, as a tile");
    EXPECT_OK(ir);
}

/* Each node kind's own rules. */
static void test_kinds(cf_ir *ir)
{
    /* broadcasts: bias.3 */
    TAMPER(ir, node(ir, 3)->src, (cf_bcast_src)9, "broadcast source 9");
    TAMPER(ir, node(ir, 3)->arg, 99, "refers to arg 99 of 6");
    TAMPER(ir, node(ir, 3)->src, CF_BC_VEC_M, "refers to a vec[N] arg, expected vec[M]");
    TAMPER(ir, node(ir, 3)->shape, CF_SHAPE_SCALAR, "a broadcast of a vec[N] has the narrower shape scalar");
    TAMPER(ir, node(ir, 3)->nargs, 1, "an edge leaves its stage");
    ir->args[2].kind = CF_ARG_TENSOR;   /* bias as a [M,N] tensor: it is [N] */
    TAMPER(ir, node(ir, 3)->src, CF_BC_TENSOR, "does not have the shape the IR uses it with");
    ir->args[2].kind = CF_ARG_VEC_N;
    /* computes: d.8 = sub(x.6, mu.7), v9 = square(d.8) */
    TAMPER(ir, node(ir, 8)->shape, CF_SHAPE_VEC_N, "operands span");
    TAMPER(ir, node(ir, 9)->op, CF_OP_SUM, "not an elementwise op");
    TAMPER(ir, node(ir, 9)->op, (cf_op)CF_OP_COUNT, "not an elementwise op");
    TAMPER(ir, node(ir, 9)->op, CF_OP_ADD, "wrong arity");
    /* reductions: mu.5 */
    TAMPER(ir, node(ir, 5)->op, CF_OP_ADD, "reduces with op");
    TAMPER(ir, node(ir, 5)->shape, CF_SHAPE_TILE, "one operand and give a per-row value");
    /* placeholders: x.6 (bypass of x.4), mu.7 (statistic of mu.5), d.11 (bypass of d.8) */
    TAMPER(ir, node(ir, 11)->ref, node(ir, 4), "not in the previous stage");
    TAMPER(ir, node(ir, 7)->ref, node(ir, 4), "must refer to the previous stage's reduction");
    TAMPER(ir, node(ir, 7)->ref, NULL, "must refer to a node of the previous stage");
    TAMPER(ir, node(ir, 6)->ref, node(ir, 5), "bypass carries mu.5, which has no value");
    TAMPER(ir, node(ir, 6)->shape, CF_SHAPE_VEC_M, "placeholder shape differs from its source");
    cf_ir_node *mu7 = node(ir, 7);
    mu7->args[0] = node(ir, 6);
    TAMPER(ir, mu7->nargs, 1, "placeholder with 1 args");
    /* stores: Y.21 */
    TAMPER(ir, node(ir, 21)->arg, 0, "refers to a gemm_a arg, expected output");
    TAMPER(ir, node(ir, 21)->shape, CF_SHAPE_VEC_M, "writes output 'Y', which has another shape");
    TAMPER(ir, node(ir, 21)->shape, CF_SHAPE_VEC_N, "store must write a tile or per-row value");
    /* every output written: Y.21 made a compute */
    cf_ir_node *y = node(ir, 21);
    const cf_ir_node saved = *y;
    y->kind = CF_IR_COMPUTE, y->op = CF_OP_SQUARE;
    EXPECT_BAD(ir, "no STORE writes output 'Y'");
    *y = saved;
    EXPECT_OK(ir);
}

/* B2B: the matmul that ends the first epilogue. */
static void test_b2b(void)
{
    cf_graph *g = parse("examples/b2b_gelu.cf");
    cf_ir *ir = NULL;
    cf_error err;
    CHECK(g && cf_lower(g, &ir, &err) == CF_OK);
    if (!ir) {
        cf_graph_free(g);
        return;
    }
    EXPECT_OK(ir);
    /* a0 X, a1 W1, a2 b1, a3 W2, a4 O; O.4 = h.3 x W2 */
    cf_ir_node *mm = node(ir, 4);
    CHECK(mm && mm->kind == CF_IR_MATMUL);
    if (mm) {
        TAMPER(ir, mm->arg, 2, "refers to a vec[N] arg, expected gemm2_b");
        TAMPER(ir, mm->shape, CF_SHAPE_VEC_M, "the B2B matmul must end the first epilogue");
        TAMPER(ir, ir->args[3].index, 2, "does not have the shape the IR uses it with");
        TAMPER(ir, ir->args[3].kind, CF_ARG_VEC_N, "0 GEMM2_B args for 2 GEMM(s)");
        TAMPER(ir, ir->n_gemms, 1, "the epilogues do not match the 1 GEMM(s)");
        const cf_ir_node saved = *mm;
        mm->kind = CF_IR_COMPUTE, mm->op = CF_OP_GELU;
        EXPECT_BAD(ir, "0 MATMUL terminals for 2 GEMM(s)");
        *mm = saved;
        EXPECT_OK(ir);
    }
    cf_ir_free(ir);
    cf_graph_free(g);
}

/* Dual GEMM (SwiGLU): two accumulators in one epilogue, each naming its weight; the second
 * weight shaped and laid out like the first. */
static void test_dual(void)
{
    cf_graph *g = parse("examples/swiglu.cf");
    cf_ir *ir = NULL;
    cf_error err;
    CHECK(g && cf_lower(g, &ir, &err) == CF_OK);
    if (!ir) {
        cf_graph_free(g);
        return;
    }
    EXPECT_OK(ir);
    /* a0 X, a1 Wg, a2 Wu, a3 H; g.0 and u.1 the accumulators */
    cf_ir_node *g0 = node(ir, 0), *u1 = node(ir, 1);
    CHECK(g0 && u1 && g0->kind == CF_IR_ACC && u1->kind == CF_IR_ACC);
    if (g0 && u1) {
        CHECK(!cf_ir_acc_second(ir, g0));
        CHECK(cf_ir_acc_second(ir, u1));
        TAMPER(ir, ir->dual, false, "a GEMM2_B arg without B2B or a dual GEMM");
        TAMPER(ir, ir->args[2].b_is_nk, true, "the dual GEMM's weights have different layouts");
        TAMPER(ir, ir->args[2].kind, CF_ARG_VEC_N, "0 GEMM2_B args for 1 GEMM(s)");
        TAMPER(ir, u1->arg, 1, "has 2 accumulator entries (0 of X*W2), not one of each");
        TAMPER(ir, g0->arg, 2, "has 2 accumulator entries (2 of X*W2), not one of each");
        TAMPER(ir, u1->arg, 3, "must name its weight");
        TAMPER(ir, g0->arg, -1, "must name its weight");
        TAMPER(ir, u1->stage, 1, "node filed under the wrong stage");
        const cf_ir_node saved = *u1;
        u1->kind = CF_IR_BCAST, u1->src = CF_BC_CONST;
        EXPECT_BAD(ir, "has 1 accumulator entries (0 of X*W2)");
        *u1 = saved;
        EXPECT_OK(ir);
        ir->n_gemms = 2;
        ir->epi[1] = ir->epi[0];
        EXPECT_BAD(ir, "a dual GEMM with 2 GEMM epilogues");
        ir->n_gemms = 1;
        ir->epi[1] = NULL;
        EXPECT_OK(ir);
    }
    cf_ir_free(ir);
    cf_graph_free(g);
}

int main(void)
{
    cf_graph *g = parse("examples/gemm_bias_ln.cf");
    cf_ir *ir = NULL;
    cf_error err;
    CHECK(g && cf_lower(g, &ir, &err) == CF_OK);
    if (ir) {
        EXPECT_OK(ir);
        CHECK_EQ_INT(22, ir->n_nodes);   /* the ids the tests below name (comfuse explain) */
        if (ir->n_nodes == 22) {
            test_frame_and_args(ir);
            /* outside a dual GEMM an accumulator names no weight */
            TAMPER(ir, node(ir, 0)->arg, 1, "an accumulator names arg 1 outside a dual GEMM");
            test_edges_and_stages(ir);
            test_kinds(ir);
        }
    }
    CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_ir_verify(NULL, &err));
    cf_ir_free(ir);
    cf_graph_free(g);
    test_b2b();
    test_dual();
    return tu_finish("test_ir");
}
