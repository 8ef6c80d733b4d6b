/* ir.c — the Fusion Spec IR: names, the verifier and the printer. */
#include "cf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    "accumulator", "broadcast", "compute", "reduction", "placeholder", "store", "matmul",
};
_Static_assert(CF_ARRAY_LEN(kind_names) == CF_IR_KIND_COUNT, "kind_names out of sync");

static const char *const shape_names[] = {"scalar", "vec[N]", "vec[M]", "tile[M,N]"};
_Static_assert(CF_ARRAY_LEN(shape_names) == CF_SHAPE_COUNT, "shape_names out of sync");

static const char *const arg_kind_names[] = {
    "gemm_a", "gemm_b", "gemm2_b", "scalar", "vec[N]", "vec[M]", "tensor[M,N]", "output",
};
_Static_assert(CF_ARRAY_LEN(arg_kind_names) == CF_ARG_KIND_COUNT, "arg_kind_names out of sync");

static const char *const bcast_names[] = {"const", "param", "row-vector", "column-vector", "tensor"};
_Static_assert(CF_ARRAY_LEN(bcast_names) == CF_BC_COUNT, "bcast_names out of sync");

const char *cf_ir_kind_name(cf_ir_kind k) { return (unsigned)k < CF_IR_KIND_COUNT ? kind_names[k] : "?"; }
const char *cf_shape_name(cf_shape s) { return (unsigned)s < CF_SHAPE_COUNT ? shape_names[s] : "?"; }
const char *cf_arg_kind_name(cf_arg_kind k) { return (unsigned)k < CF_ARG_KIND_COUNT ? arg_kind_names[k] : "?"; }

const char *cf_ir_node_label(const cf_ir_node *n, char *buf, size_t len)
{
    if (n->name)
        snprintf(buf, len, "%s.%d", n->name, n->id);
    else
        snprintf(buf, len, "v%d", n->id);
    return buf;
}

void cf_ir_free(cf_ir *ir)
{
    if (!ir)
        return;
    cf_arena_free(&ir->arena);
    free(ir);
}

int cf_ir_num_stages(const cf_ir *ir) { return ir ? ir->n_stages[0] : 0; }

/* ---- verifier ---------------------------------------------------------- */

cf_shape cf_shape_join(cf_shape a, cf_shape b)
{
    if (a == b || b == CF_SHAPE_SCALAR)
        return a;
    if (a == CF_SHAPE_SCALAR)
        return b;
    return CF_SHAPE_TILE;
}

static bool in_prefix(const cf_ir_spec *sp, int i, const cf_ir_node *x)
{
    for (int j = 0; j < i; j++)
        if (sp->nodes[j] == x)
            return true;
    return false;
}

static cf_status bad(cf_error *err, const cf_ir_node *n, const char *what)
{
    char b[96];
    return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0}, "malformed IR at stage %d node %s: %s",
                     n ? n->stage : -1, n ? cf_ir_node_label(n, b, sizeof b) : "-", what);
}

static cf_status verify_epilogue(const cf_ir *ir, int g, cf_error *err)
{
    int depth = 0, n_acc = 0;
    const cf_ir_spec *prev = NULL;
    for (const cf_ir_spec *sp = ir->epi[g]; sp; prev = sp, sp = sp->post, depth++) {
        bool last = sp->post == NULL;
        if (sp->depth != depth)
            return bad(err, NULL, "stage depths are not consecutive");
        int n_red = 0;
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *n = sp->nodes[i];
            if (n->stage != depth || n->gemm != g)
                return bad(err, n, "node filed under the wrong stage");
            for (int a = 0; a < n->nargs; a++)
                if (!n->args[a] || !in_prefix(sp, i, n->args[a]))
                    return bad(err, n, "an edge leaves its stage or points forward");
            switch (n->kind) {
            case CF_IR_ACC:
                n_acc++;
                if (depth != 0 || n->shape != CF_SHAPE_TILE)
                    return bad(err, n, "the accumulator enters only stage 0, as a tile");
                break;
            case CF_IR_BCAST:
                if (n->src != CF_BC_CONST && (n->arg < 0 || n->arg >= ir->n_args))
                    return bad(err, n, "broadcast without a runtime parameter");
                break;
            case CF_IR_COMPUTE: {
                cf_op_class cls = cf_op_class_of(n->op);
                if (!((cls == CF_OPC_UNARY && n->nargs == 1) || (cls == CF_OPC_BINARY && n->nargs == 2)))
                    return bad(err, n, "compute node with the wrong arity");
                cf_shape s = n->args[0]->shape;
                if (n->nargs == 2)
                    s = cf_shape_join(s, n->args[1]->shape);
                if (s != n->shape)
                    return bad(err, n, "compute shape is not the join of its operands");
                break;
            }
            case CF_IR_REDUCE:
                n_red++;
                if (cf_op_class_of(n->op) != CF_OPC_REDUCE || n->nargs != 1 || n->shape != CF_SHAPE_VEC_M)
                    return bad(err, n, "reduction must take one operand and give a per-row value");
                if (sp->terminal != n || i != sp->n_nodes - 1)
                    return bad(err, n, "a reduction must be its stage's last node and terminal");
                break;
            case CF_IR_PLACEHOLDER:
                if (depth == 0 || !n->ref || n->ref->stage != depth - 1 || n->ref->gemm != g)
                    return bad(err, n, "placeholder must refer to the previous stage");
                if (n->is_stat && (n->ref->kind != CF_IR_REDUCE || n->ref != prev->terminal))
                    return bad(err, n, "statistic placeholder must refer to the previous stage's reduction");
                if (n->shape != n->ref->shape)
                    return bad(err, n, "placeholder shape differs from its source");
                break;
            case CF_IR_STORE:
                if (n->nargs != 1 || n->arg < 0 || ir->args[n->arg].kind != CF_ARG_OUTPUT ||
                    (n->shape != CF_SHAPE_TILE && n->shape != CF_SHAPE_VEC_M))
                    return bad(err, n, "store must write a tile or per-row value to an output");
                break;
            case CF_IR_MATMUL:
                if (g != 0 || ir->n_gemms != 2 || !last || sp->terminal != n || n->nargs != 1 ||
                    n->args[0]->shape != CF_SHAPE_TILE)
                    return bad(err, n, "the B2B matmul must end the first epilogue with a tile operand");
                break;
            default:
                return bad(err, n, "unknown node kind");
            }
        }
        if (last ? n_red != 0 : n_red != 1)
            return bad(err, NULL, "every stage but the last ends in exactly one reduction");
        if (!sp->terminal)
            return bad(err, NULL, "stage without a terminal");
    }
    if (n_acc != 1)
        return bad(err, NULL, "an epilogue needs exactly one accumulator entry");
    if (depth != ir->n_stages[g])
        return bad(err, NULL, "stage count mismatch");
    return CF_OK;
}

cf_status cf_ir_verify(const cf_ir *ir, cf_error *err)
{
    for (int g = 0; g < ir->n_gemms; g++) {
        cf_status st = verify_epilogue(ir, g, err);
        if (st != CF_OK)
            return st;
    }
    return CF_OK;
}

/* ---- printer ------------------------------------------------------------- */

static const char *dim(const cf_ir *ir, cf_dim d) { return cf_graph_dim_name(ir->graph, d); }

static void format_node(const cf_ir *ir, const cf_ir_node *n, cf_strbuf *sb)
{
    char l[96], a0[96], a1[96];
    cf_sb_printf(sb, "    %-14s %-11s %-9s = ", cf_ir_node_label(n, l, sizeof l), cf_ir_kind_name(n->kind),
                 cf_shape_name(n->shape));
    switch (n->kind) {
    case CF_IR_ACC:
        cf_sb_printf(sb, "accumulator of GEMM %d", n->gemm);
        break;
    case CF_IR_BCAST:
        if (n->src == CF_BC_CONST) {
            /* constants are f32 values (cf_graph_const): the shortest text that reads back */
            for (int digits = 6; digits <= 9; digits++) {
                snprintf(a0, sizeof a0, "%.*g", digits, n->cval);
                if (strtof(a0, NULL) == (float)n->cval)
                    break;
            }
            cf_sb_printf(sb, "%s %s", bcast_names[n->src], a0);
        } else
            cf_sb_printf(sb, "%s a%d (%s)", bcast_names[n->src], n->arg, ir->args[n->arg].name);
        break;
    case CF_IR_COMPUTE:
    case CF_IR_REDUCE:
        cf_sb_printf(sb, "%s(%s", cf_op_name(n->op), cf_ir_node_label(n->args[0], a0, sizeof a0));
        if (n->nargs == 2)
            cf_sb_printf(sb, ", %s", cf_ir_node_label(n->args[1], a1, sizeof a1));
        cf_sb_puts(sb, n->kind == CF_IR_REDUCE ? ") over N" : ")");
        break;
    case CF_IR_PLACEHOLDER:
        cf_sb_printf(sb, "%s of %s from stage %d", n->is_stat ? "statistic" : "bypass",
                     cf_ir_node_label(n->ref, a0, sizeof a0), n->ref->stage);
        break;
    case CF_IR_STORE:
        cf_sb_printf(sb, "store %s -> a%d (%s, %s)", cf_ir_node_label(n->args[0], a0, sizeof a0), n->arg,
                     ir->args[n->arg].name, cf_dtype_name(ir->args[n->arg].dtype));
        break;
    case CF_IR_MATMUL:
        cf_sb_printf(sb, "%s x a%d (%s) -> GEMM 1", cf_ir_node_label(n->args[0], a0, sizeof a0), n->arg,
                     ir->args[n->arg].name);
        break;
    default:
        break;
    }
    cf_sb_puts(sb, "\n");
}

static void format_args(const cf_ir *ir, cf_strbuf *sb)
{
    const cf_graph *g = ir->graph;
    cf_sb_puts(sb, "runtime parameters (A):\n");
    for (int i = 0; i < ir->n_args; i++) {
        const cf_ir_arg *a = &ir->args[i];
        cf_sb_printf(sb, "    a%-3d %-12s %-8s %-5s", i, cf_arg_kind_name(a->kind), a->name,
                     a->kind == CF_ARG_SCALAR ? "f32" : cf_dtype_name(a->dtype));
        if (a->kind == CF_ARG_GEMM_A || a->kind == CF_ARG_GEMM_B || a->kind == CF_ARG_GEMM2_B ||
            a->kind == CF_ARG_VEC_N || a->kind == CF_ARG_VEC_M || a->kind == CF_ARG_TENSOR) {
            cf_tensor_info t = cf_graph_input_info(g, a->index);
            cf_sb_printf(sb, " [%s%s%s]", dim(ir, t.dims[0]), t.rank == 2 ? ", " : "",
                         t.rank == 2 ? dim(ir, t.dims[1]) : "");
            if (a->kind == CF_ARG_GEMM_B || a->kind == CF_ARG_GEMM2_B)
                cf_sb_puts(sb, a->b_is_nk ? " (nn.Linear layout: used transposed)" : "");
        } else if (a->kind == CF_ARG_OUTPUT) {
            cf_tensor_info t = cf_graph_output_info(g, a->index);
            cf_sb_printf(sb, " [%s%s%s]", dim(ir, t.dims[0]), t.rank == 2 ? ", " : "",
                         t.rank == 2 ? dim(ir, t.dims[1]) : "");
        }
        cf_sb_puts(sb, "\n");
    }
}

static void format_epilogue(const cf_ir *ir, int gi, cf_strbuf *sb)
{
    char l[96], r[96];
    int n_red = ir->n_stages[gi] - 1;
    cf_dim n = gi == 0 ? ir->dim_n : ir->dim_n2;
    cf_sb_printf(sb, "epilogue of GEMM %d over [%s, %s]: %d stage%s, %d reduction%s\n", gi, dim(ir, ir->dim_m),
                 dim(ir, n), ir->n_stages[gi], ir->n_stages[gi] == 1 ? "" : "s", n_red, n_red == 1 ? "" : "s");
    for (const cf_ir_spec *sp = ir->epi[gi]; sp; sp = sp->post) {
        cf_sb_printf(sb, "  stage %d", sp->depth);
        if (sp->depth > 0) {
            const cf_ir_node *stat = NULL;
            for (int i = 0; i < sp->n_nodes; i++)
                if (sp->nodes[i]->kind == CF_IR_PLACEHOLDER && sp->nodes[i]->is_stat)
                    stat = sp->nodes[i];
            if (stat)
                cf_sb_printf(sb, " (PostOp of %s)", cf_ir_node_label(stat->ref, l, sizeof l));
        }
        cf_sb_printf(sb, ": %d node%s, terminal %s\n", sp->n_nodes, sp->n_nodes == 1 ? "" : "s",
                     sp->terminal ? cf_ir_node_label(sp->terminal, l, sizeof l) : "-");
        for (int i = 0; i < sp->n_nodes; i++)
            format_node(ir, sp->nodes[i], sb);
        bool any = false;
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *x = sp->nodes[i];
            if (x->kind != CF_IR_PLACEHOLDER || x->is_stat)
                continue;
            cf_sb_printf(sb, "%s %s", any ? "," : "    bypass in:", cf_ir_node_label(x->ref, l, sizeof l));
            any = true;
        }
        if (any)
            cf_sb_puts(sb, " (carried, not recomputed)\n");
        cf_sb_puts(sb, "    edges:");
        int col = 10;
        for (int i = 0; i < sp->n_nodes; i++) {
            const cf_ir_node *x = sp->nodes[i];
            for (int a = 0; a < x->nargs; a++) {
                char e[200];
                snprintf(e, sizeof e, " %s->%s", cf_ir_node_label(x->args[a], l, sizeof l),
                         cf_ir_node_label(x, r, sizeof r));
                if (col + (int)strlen(e) > 100) {
                    cf_sb_puts(sb, "\n          ");
                    col = 10;
                }
                cf_sb_puts(sb, e);
                col += (int)strlen(e);
            }
        }
        cf_sb_puts(sb, "\n");
    }
}

void cf_ir_format(const cf_ir *ir, cf_strbuf *sb)
{
    const cf_graph *g = ir->graph;
    const cf_ir_arg *A = &ir->args[0], *B = &ir->args[1];
    cf_sb_printf(sb, "Fusion Spec IR: %s\n", ir->n_gemms == 2 ? "B2B GEMM" : "GEMM + epilogue");
    cf_sb_printf(sb, "GEMM 0: [%s, %s] = %s[%s, %s] x %s%s (%s, f32 accumulate)\n", dim(ir, ir->dim_m),
                 dim(ir, ir->dim_n), A->name, dim(ir, ir->dim_m), dim(ir, ir->dim_k), B->name,
                 B->b_is_nk ? "^T" : "", cf_dtype_name(A->dtype));
    if (ir->n_gemms == 2)
        for (int i = 0; i < ir->n_args; i++)
            if (ir->args[i].kind == CF_ARG_GEMM2_B)
                cf_sb_printf(sb, "GEMM 1: [%s, %s] = S[%s, %s] x %s%s (S: the first epilogue, kept on chip)\n",
                             dim(ir, ir->dim_m), dim(ir, ir->dim_n2), dim(ir, ir->dim_m), dim(ir, ir->dim_n),
                             ir->args[i].name, ir->args[i].b_is_nk ? "^T" : "");
    format_args(ir, sb);
    for (int gi = 0; gi < ir->n_gemms; gi++)
        format_epilogue(ir, gi, sb);
    (void)g;
}

void cf_ir_print(const cf_ir *ir, FILE *f)
{
    cf_strbuf sb = {0};
    cf_ir_format(ir, &sb);
    if (sb.data)
        fputs(sb.data, f);
    cf_sb_free(&sb);
}

size_t cf_ir_param_bytes(const cf_ir *ir, int *tile_outputs)
{
    int n = 0;
    for (int i = 0; i < ir->n_args; i++)
        n += ir->args[i].kind == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, ir->args[i].index).rank == 2;
    *tile_outputs = n;
    const size_t slots = (size_t)(n ? n : 1);   /* CF_NUM_OUT is at least 1 */
    size_t epi, align;
    cf_cg_epi_layout(ir, NULL, &epi, &align);
    /* two operand TMA descriptors, one per output, xchg + xsync, output pointers, M N K, pitches */
    size_t head = 256 + 128 * slots + 16 + 8 * slots + 12 + 4 * slots;
    head = (head + align - 1) / align * align;
    return (head + epi + 63) / 64 * 64;
}
