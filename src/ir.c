/* ir.c — the Fusion Spec IR: names, the verifier (the one check of an IR, which Φ
 * and the interpreter both run) and the printer. */
#include "cf_internal.h"

#include <stdarg.h>
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

bool cf_ir_acc_second(const cf_ir *ir, const cf_ir_node *n)
{
    return n->kind == CF_IR_ACC && n->arg >= 0 && n->arg < ir->n_args && ir->args[n->arg].kind == CF_ARG_GEMM2_B;
}

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

/* a value of shape a may stand where shape b is wanted (a is no wider) */
static bool fits_in(cf_shape a, cf_shape b) { return (unsigned)a < CF_SHAPE_COUNT && cf_shape_join(a, b) == b; }

/* What the checks share: the IR, and every node by id (filled by index_nodes). */
typedef struct vctx {
    const cf_ir *ir;
    const cf_graph *g;
    const cf_ir_node **by_id;
    const cf_ir_spec **spec_of;
    cf_dim ncols[2];      /* the column dim of each epilogue */
    cf_error *err;
} vctx;

#define MAX_DEPTH 4096    /* deeper than any IR Φ makes: a cycle of stages */

static cf_status bad(const vctx *v, const cf_ir_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static cf_status bad(const vctx *v, const cf_ir_node *n, const char *fmt, ...)
{
    char what[400], b[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!n)
        return cf_errorf(v->err, CF_ERR_INTERNAL, (cf_loc){0}, "malformed IR: %s", what);
    return cf_errorf(v->err, CF_ERR_INTERNAL, (cf_loc){0}, "malformed IR at stage %d node %s: %s", n->stage,
                     cf_ir_node_label(n, b, sizeof b), what);
}

static const char *label(const cf_ir_node *n, char *b, size_t len) { return cf_ir_node_label(n, b, len); }

/* n_gemms, the epilogues and the dims. */
static cf_status verify_frame(const vctx *v)
{
    const cf_ir *ir = v->ir;
    if (ir->n_gemms != 1 && ir->n_gemms != 2)
        return bad(v, NULL, "%d GEMMs", ir->n_gemms);
    if (!ir->epi[0] || (ir->n_gemms == 2) != (ir->epi[1] != NULL))
        return bad(v, NULL, "the epilogues do not match the %d GEMM(s)", ir->n_gemms);
    if (ir->dual && ir->n_gemms != 1)
        return bad(v, NULL, "a dual GEMM with %d GEMM epilogues (its two GEMMs share one)", ir->n_gemms);
    if (ir->n_nodes < 0)
        return bad(v, NULL, "n_nodes is %d", ir->n_nodes);
    const cf_dim dims[4] = {ir->dim_m, ir->dim_k, ir->dim_n, ir->dim_n2};
    for (int i = 0; i < (ir->n_gemms == 2 ? 4 : 3); i++)
        if (dims[i] < 0 || dims[i] >= v->g->n_dims)
            return bad(v, NULL, "dim %d of the IR is %d", i, (int)dims[i]);
    return CF_OK;
}

/* Arg a names a graph input of rank `rank` over [d0, d1] and its dtype. */
static cf_status verify_input(const vctx *v, const cf_ir_arg *a, int rank, cf_dim d0, cf_dim d1)
{
    if (a->index < 0 || a->index >= v->g->n_inputs)
        return bad(v, NULL, "%s arg '%s' names input %d of %d", cf_arg_kind_name(a->kind), a->name ? a->name : "?",
                   a->index, v->g->n_inputs);
    cf_tensor_info t = cf_graph_input_info(v->g, a->index);
    if (t.rank != rank || t.dims[0] != d0 || (rank == 2 && t.dims[1] != d1))
        return bad(v, NULL, "%s arg for input '%s' does not have the shape the IR uses it with",
                   cf_arg_kind_name(a->kind), t.name);
    if (a->dtype != t.dtype)
        return bad(v, NULL, "%s arg for input '%s' has dtype %s, the input %s", cf_arg_kind_name(a->kind), t.name,
                   cf_dtype_name(a->dtype), cf_dtype_name(t.dtype));
    return CF_OK;
}

/* One arg: its index in range of what its kind names; GEMM operands of the IR's shape. */
static cf_status verify_arg(const vctx *v, int i)
{
    const cf_ir *ir = v->ir;
    const cf_graph *g = v->g;
    const cf_ir_arg *a = &ir->args[i];
    const char *nm = a->name ? a->name : "?";
    switch (a->kind) {
    case CF_ARG_GEMM_A: return verify_input(v, a, 2, ir->dim_m, ir->dim_k);
    case CF_ARG_GEMM_B:
        return a->b_is_nk ? verify_input(v, a, 2, ir->dim_n, ir->dim_k) : verify_input(v, a, 2, ir->dim_k, ir->dim_n);
    case CF_ARG_GEMM2_B:
        if (ir->dual) { /* X*W2 beside X*W1: the same shape and layout */
            if (a->b_is_nk != ir->args[1].b_is_nk)
                return bad(v, NULL, "the dual GEMM's weights have different layouts");
            return a->b_is_nk ? verify_input(v, a, 2, ir->dim_n, ir->dim_k) : verify_input(v, a, 2, ir->dim_k, ir->dim_n);
        }
        if (ir->n_gemms != 2)
            return bad(v, NULL, "a GEMM2_B arg without B2B or a dual GEMM");
        return a->b_is_nk ? verify_input(v, a, 2, ir->dim_n2, ir->dim_n) : verify_input(v, a, 2, ir->dim_n, ir->dim_n2);
    case CF_ARG_SCALAR:
        if (a->index < 0 || a->index >= g->n_params)
            return bad(v, NULL, "scalar arg '%s' names param %d of %d", nm, a->index, g->n_params);
        return CF_OK;
    case CF_ARG_VEC_N:
    case CF_ARG_VEC_M:
    case CF_ARG_TENSOR:   /* shapes: where a BCAST uses it (the epilogue decides VEC_N's) */
        if (a->index < 0 || a->index >= g->n_inputs)
            return bad(v, NULL, "%s arg '%s' names input %d of %d", cf_arg_kind_name(a->kind), nm, a->index,
                       g->n_inputs);
        return CF_OK;
    case CF_ARG_OUTPUT:
        if (a->index < 0 || a->index >= g->n_outputs)
            return bad(v, NULL, "output arg '%s' names output %d of %d", nm, a->index, g->n_outputs);
        return CF_OK;
    default: return bad(v, NULL, "arg %d has kind %d", i, (int)a->kind);
    }
}

/* The arg table: each arg sound, exactly one GEMM_A and GEMM_B (args 0 and 1), a GEMM2_B
 * exactly for B2B and dual GEMMs. */
static cf_status verify_args(const vctx *v)
{
    int count[CF_ARG_KIND_COUNT] = {0};
    if (v->ir->n_args < 2 || v->ir->args[0].kind != CF_ARG_GEMM_A || v->ir->args[1].kind != CF_ARG_GEMM_B)
        return bad(v, NULL, "the arg table does not start with the GEMM's operands");
    for (int i = 0; i < v->ir->n_args; i++) {
        cf_status st = verify_arg(v, i);
        if (st != CF_OK)
            return st;
        count[v->ir->args[i].kind]++;
    }
    if (count[CF_ARG_GEMM_A] != 1 || count[CF_ARG_GEMM_B] != 1 ||
        count[CF_ARG_GEMM2_B] != (v->ir->n_gemms == 2 || v->ir->dual))
        return bad(v, NULL, "the arg table has %d GEMM_A, %d GEMM_B and %d GEMM2_B args for %d GEMM(s)",
                   count[CF_ARG_GEMM_A], count[CF_ARG_GEMM_B], count[CF_ARG_GEMM2_B], v->ir->n_gemms);
    return CF_OK;
}

/* Every node sits in exactly one stage, under a unique id in 0..n_nodes-1. */
static cf_status index_nodes(vctx *v)
{
    const cf_ir *ir = v->ir;
    for (int e = 0; e < ir->n_gemms; e++) {
        int depth = 0;
        for (const cf_ir_spec *s = ir->epi[e]; s; s = s->post, depth++) {
            if (depth > MAX_DEPTH)
                return bad(v, NULL, "epilogue %d has a cycle of stages", e);
            if (s->depth != depth)
                return bad(v, NULL, "stage %d of epilogue %d says depth %d: stage depths are not consecutive",
                           depth, e, s->depth);
            for (int i = 0; i < s->n_nodes; i++) {
                const cf_ir_node *n = s->nodes[i];
                if (!n || n->id < 0 || n->id >= ir->n_nodes)
                    return bad(v, NULL, "stage %d of epilogue %d holds a node with id %d (n_nodes %d)", depth, e,
                               n ? n->id : -1, ir->n_nodes);
                if (v->by_id[n->id])
                    return bad(v, n, "id %d is used twice", n->id);
                v->by_id[n->id] = n;
                v->spec_of[n->id] = s;
            }
        }
    }
    return CF_OK;
}

/* x is a node of this IR (a pointer from outside it is not read). */
static bool of_ir(const vctx *v, const cf_ir_node *x)
{
    if (!x)
        return false;
    for (int id = 0; id < v->ir->n_nodes; id++)
        if (v->by_id[id] == x)
            return true;
    return false;
}

static bool has_no_value(const cf_ir_node *x)
{
    return x->kind == CF_IR_REDUCE || x->kind == CF_IR_STORE || x->kind == CF_IR_MATMUL;
}

/* The edges of node i of sp: earlier nodes of the same stage, each with a value. */
static cf_status verify_edges(const vctx *v, const cf_ir_spec *sp, int i)
{
    const cf_ir_node *n = sp->nodes[i];
    char b[96];
    if (n->nargs < 0 || n->nargs > 2)
        return bad(v, n, "%d args", n->nargs);
    for (int a = 0; a < n->nargs; a++) {
        const cf_ir_node *x = n->args[a];
        int at = -1;
        for (int j = 0; j < sp->n_nodes && at < 0; j++)
            at = sp->nodes[j] == x ? j : -1;
        if (!x || at < 0)
            return bad(v, n, "an edge leaves its stage: edges must stay inside a stage");
        if (at >= i)
            return bad(v, n, "uses %s, which comes later: not in topological order", label(x, b, sizeof b));
        if (has_no_value(x))
            return bad(v, n, "uses %s, which has no value inside its stage", label(x, b, sizeof b));
    }
    return CF_OK;
}

/* Arg index arg of n is in range and of kind want. */
static cf_status verify_arg_ref(const vctx *v, const cf_ir_node *n, cf_arg_kind want)
{
    if (n->arg < 0 || n->arg >= v->ir->n_args)
        return bad(v, n, "refers to arg %d of %d", n->arg, v->ir->n_args);
    if (v->ir->args[n->arg].kind != want)
        return bad(v, n, "refers to a %s arg, expected %s", cf_arg_kind_name(v->ir->args[n->arg].kind),
                   cf_arg_kind_name(want));
    return CF_OK;
}

static cf_status verify_bcast(const vctx *v, const cf_ir_node *n, int e)
{
    static const cf_arg_kind kind_of[CF_BC_COUNT] = {CF_ARG_SCALAR, CF_ARG_SCALAR, CF_ARG_VEC_N, CF_ARG_VEC_M,
                                                     CF_ARG_TENSOR};
    static const cf_shape natural[CF_BC_COUNT] = {CF_SHAPE_SCALAR, CF_SHAPE_SCALAR, CF_SHAPE_VEC_N, CF_SHAPE_VEC_M,
                                                  CF_SHAPE_TILE};
    _Static_assert(CF_BC_CONST == 0 && CF_BC_PARAM == 1 && CF_BC_VEC_N == 2 && CF_BC_VEC_M == 3 &&
                   CF_BC_TENSOR == 4, "bcast sources out of order");
    if ((unsigned)n->src >= CF_BC_COUNT)
        return bad(v, n, "broadcast source %d", (int)n->src);
    cf_status st = CF_OK;
    if (n->src != CF_BC_CONST && (st = verify_arg_ref(v, n, kind_of[n->src])) != CF_OK)
        return st;
    const cf_ir *ir = v->ir;
    const cf_ir_arg *a = n->src == CF_BC_CONST ? NULL : &ir->args[n->arg];
    if (n->src == CF_BC_VEC_N)
        st = verify_input(v, a, 1, v->ncols[e], -1);
    else if (n->src == CF_BC_VEC_M)
        st = verify_input(v, a, 1, ir->dim_m, -1);
    else if (n->src == CF_BC_TENSOR)
        st = verify_input(v, a, 2, ir->dim_m, v->ncols[e]);
    if (st != CF_OK)
        return st;
    if (!fits_in(natural[n->src], n->shape))
        return bad(v, n, "a broadcast of a %s has the narrower shape %s", cf_shape_name(natural[n->src]),
                   cf_shape_name(n->shape));
    return CF_OK;
}

static cf_status verify_compute(const vctx *v, const cf_ir_node *n)
{
    cf_op_class cls = (unsigned)n->op < CF_OP_COUNT ? cf_op_class_of(n->op) : CF_OPC_LEAF;
    if (cls != CF_OPC_UNARY && cls != CF_OPC_BINARY)
        return bad(v, n, "computes op %d, not an elementwise op", (int)n->op);
    if (n->nargs != (cls == CF_OPC_UNARY ? 1 : 2))
        return bad(v, n, "compute node with the wrong arity (%d args)", n->nargs);
    cf_shape s = n->args[0]->shape;
    if (n->nargs == 2)
        s = cf_shape_join(s, n->args[1]->shape);
    if (s != n->shape)
        return bad(v, n, "has shape %s but its operands span %s: not the join of its operands",
                   cf_shape_name(n->shape), cf_shape_name(s));
    return CF_OK;
}

static cf_status verify_reduce(const vctx *v, const cf_ir_spec *sp, int i)
{
    const cf_ir_node *n = sp->nodes[i];
    if ((unsigned)n->op >= CF_OP_COUNT || cf_op_class_of(n->op) != CF_OPC_REDUCE)
        return bad(v, n, "reduces with op %d, not a reduction", (int)n->op);
    if (n->nargs != 1 || n->shape != CF_SHAPE_VEC_M)
        return bad(v, n, "reduction must take one operand and give a per-row value");
    if (sp->terminal != n || i != sp->n_nodes - 1)
        return bad(v, n, "a reduction must be its stage's last node and terminal");
    return CF_OK;
}

static cf_status verify_placeholder(const vctx *v, const cf_ir_node *n, const cf_ir_spec *prev)
{
    const cf_ir_node *r = n->ref;
    char b[96];
    if (n->nargs != 0)
        return bad(v, n, "placeholder with %d args", n->nargs);
    if (!prev || !of_ir(v, r))
        return bad(v, n, "placeholder must refer to a node of the previous stage");
    if (v->spec_of[r->id] != prev || r->gemm != n->gemm)
        return bad(v, n, "refers to %s, which is not in the previous stage", label(r, b, sizeof b));
    if (n->is_stat && (r->kind != CF_IR_REDUCE || r != prev->terminal))
        return bad(v, n, "statistic placeholder must refer to the previous stage's reduction");
    if (!n->is_stat && has_no_value(r))
        return bad(v, n, "bypass carries %s, which has no value", label(r, b, sizeof b));
    if (n->shape != r->shape)
        return bad(v, n, "placeholder shape differs from its source");
    return CF_OK;
}

static cf_status verify_store(const vctx *v, const cf_ir_node *n, int e)
{
    const cf_ir *ir = v->ir;
    cf_status st;
    if (n->nargs != 1 || (n->shape != CF_SHAPE_TILE && n->shape != CF_SHAPE_VEC_M))
        return bad(v, n, "store must write a tile or per-row value to an output");
    if ((st = verify_arg_ref(v, n, CF_ARG_OUTPUT)) != CF_OK)
        return st;
    cf_tensor_info t = cf_graph_output_info(v->g, ir->args[n->arg].index);
    bool ok = n->shape == CF_SHAPE_TILE ? t.rank == 2 && t.dims[0] == ir->dim_m && t.dims[1] == v->ncols[e]
                                        : t.rank == 1 && t.dims[0] == ir->dim_m;
    if (!ok)
        return bad(v, n, "a store of shape %s writes output '%s', which has another shape", cf_shape_name(n->shape),
                   t.name);
    if (!fits_in(n->args[0]->shape, n->shape))
        return bad(v, n, "a store of shape %s stores a %s", cf_shape_name(n->shape), cf_shape_name(n->args[0]->shape));
    return CF_OK;
}

static cf_status verify_matmul(const vctx *v, const cf_ir_spec *sp, const cf_ir_node *n, int e)
{
    if (e != 0 || v->ir->n_gemms != 2 || sp->post || sp->terminal != n || n->nargs != 1 ||
        n->args[0]->shape != CF_SHAPE_TILE || n->shape != CF_SHAPE_TILE)
        return bad(v, n, "the B2B matmul must end the first epilogue with a tile operand");
    return verify_arg_ref(v, n, CF_ARG_GEMM2_B);
}

/* An accumulator enters stage 0 as a tile; a dual GEMM's name their weights. */
static cf_status verify_acc(const vctx *v, const cf_ir_spec *sp, const cf_ir_node *n)
{
    if (sp->depth != 0 || n->shape != CF_SHAPE_TILE || n->nargs != 0)
        return bad(v, n, "the accumulator enters only stage 0, as a tile");
    if (!v->ir->dual)
        return n->arg == -1 ? CF_OK : bad(v, n, "an accumulator names arg %d outside a dual GEMM", n->arg);
    if (n->arg != 1 && (n->arg < 0 || n->arg >= v->ir->n_args || v->ir->args[n->arg].kind != CF_ARG_GEMM2_B))
        return bad(v, n, "a dual GEMM's accumulator must name its weight (the GEMM_B or GEMM2_B arg)");
    return CF_OK;
}

/* Node i of stage sp (depth `depth` of epilogue e, after stage prev). */
static cf_status verify_node(const vctx *v, const cf_ir_spec *sp, const cf_ir_spec *prev, int i, int e)
{
    const cf_ir_node *n = sp->nodes[i];
    if (n->stage != sp->depth || n->gemm != e)
        return bad(v, n, "node filed under the wrong stage");
    if ((unsigned)n->shape >= CF_SHAPE_COUNT)
        return bad(v, n, "shape %d", (int)n->shape);
    cf_status st = verify_edges(v, sp, i);
    if (st != CF_OK)
        return st;
    switch (n->kind) {
    case CF_IR_ACC: return verify_acc(v, sp, n);
    case CF_IR_BCAST:
        return n->nargs != 0 ? bad(v, n, "broadcast with %d args", n->nargs) : verify_bcast(v, n, e);
    case CF_IR_COMPUTE: return verify_compute(v, n);
    case CF_IR_REDUCE: return verify_reduce(v, sp, i);
    case CF_IR_PLACEHOLDER: return verify_placeholder(v, n, prev);
    case CF_IR_STORE: return verify_store(v, n, e);
    case CF_IR_MATMUL: return verify_matmul(v, sp, n, e);
    default: return bad(v, n, "unknown node kind %d", (int)n->kind);
    }
}

static cf_status verify_epilogue(const vctx *v, int e)
{
    int depth = 0, n_acc = 0, n_second = 0;
    const cf_ir_spec *prev = NULL;
    for (const cf_ir_spec *sp = v->ir->epi[e]; sp; prev = sp, sp = sp->post, depth++) {
        int n_red = 0;
        for (int i = 0; i < sp->n_nodes; i++) {
            cf_status st = verify_node(v, sp, prev, i, e);
            if (st != CF_OK)
                return st;
            n_red += sp->nodes[i]->kind == CF_IR_REDUCE;
            n_acc += sp->nodes[i]->kind == CF_IR_ACC;
            n_second += cf_ir_acc_second(v->ir, sp->nodes[i]);
        }
        if (sp->post ? n_red != 1 : n_red != 0)
            return bad(v, NULL, "stage %d of epilogue %d: every stage but the last ends in exactly one reduction",
                       depth, e);
        if (!sp->terminal)
            return bad(v, NULL, "stage %d of epilogue %d has no terminal", depth, e);
    }
    if (v->ir->dual && (n_acc != 2 || n_second != 1))
        return bad(v, NULL, "the dual GEMM's epilogue has %d accumulator entries (%d of X*W2), not one of each",
                   n_acc, n_second);
    if (!v->ir->dual && n_acc != 1)
        return bad(v, NULL, "epilogue %d has %d accumulator entries, not one", e, n_acc);
    if (depth != v->ir->n_stages[e])
        return bad(v, NULL, "epilogue %d has %d stages, n_stages says %d", e, depth, v->ir->n_stages[e]);
    return CF_OK;
}

/* Every graph output is stored; B2B's first epilogue ends in its matmul. */
static cf_status verify_outputs(const vctx *v)
{
    const cf_ir *ir = v->ir;
    int n_matmul = 0;
    for (int id = 0; id < ir->n_nodes; id++)
        n_matmul += v->by_id[id] && v->by_id[id]->kind == CF_IR_MATMUL;
    if ((ir->n_gemms == 2) != (n_matmul == 1))
        return bad(v, NULL, "%d MATMUL terminals for %d GEMM(s)", n_matmul, ir->n_gemms);
    for (int o = 0; o < v->g->n_outputs; o++) {
        bool stored = false;
        for (int id = 0; id < ir->n_nodes && !stored; id++) {
            const cf_ir_node *n = v->by_id[id];
            stored = n && n->kind == CF_IR_STORE && ir->args[n->arg].index == o;
        }
        if (!stored)
            return bad(v, NULL, "no STORE writes output '%s'", v->g->outputs[o].name);
    }
    return CF_OK;
}

cf_status cf_ir_verify(const cf_ir *ir, cf_error *err)
{
    if (!ir || !ir->graph)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_ir_verify: no IR or no graph");
    vctx v = {.ir = ir, .g = ir->graph, .ncols = {ir->dim_n, ir->dim_n2}, .err = err};
    cf_status st = verify_frame(&v);
    if (st != CF_OK)
        return st;
    const size_t nn = ir->n_nodes > 0 ? (size_t)ir->n_nodes : 1;
    v.by_id = calloc(nn, sizeof *v.by_id);
    v.spec_of = calloc(nn, sizeof *v.spec_of);
    if (!v.by_id || !v.spec_of)
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory verifying the IR");
    if (st == CF_OK)
        st = verify_args(&v);
    if (st == CF_OK)
        st = index_nodes(&v);
    for (int e = 0; e < ir->n_gemms && st == CF_OK; e++)
        st = verify_epilogue(&v, e);
    if (st == CF_OK)
        st = verify_outputs(&v);
    free(v.by_id);
    free(v.spec_of);
    return st;
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
        if (ir->dual)
            cf_sb_printf(sb, "accumulator of %s x a%d (%s)", ir->args[0].name, n->arg, ir->args[n->arg].name);
        else
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
    cf_sb_printf(sb, "Fusion Spec IR: %s\n", ir->n_gemms == 2 ? "B2B GEMM"
                                              : ir->dual   ? "dual GEMM (two GEMMs over one X) + epilogue"
                                                           : "GEMM + epilogue");
    cf_sb_printf(sb, "GEMM 0: [%s, %s] = %s[%s, %s] x %s%s (%s, f32 accumulate)\n", dim(ir, ir->dim_m),
                 dim(ir, ir->dim_n), A->name, dim(ir, ir->dim_m), dim(ir, ir->dim_k), B->name,
                 B->b_is_nk ? "^T" : "", cf_dtype_name(A->dtype));
    for (int i = 0; ir->dual && i < ir->n_args; i++)
        if (ir->args[i].kind == CF_ARG_GEMM2_B)
            cf_sb_printf(sb, "GEMM 0': [%s, %s] = %s[%s, %s] x %s%s (%s; X loaded once for both, both accumulators "
                         "enter the epilogue)\n", dim(ir, ir->dim_m), dim(ir, ir->dim_n), A->name, dim(ir, ir->dim_m),
                         dim(ir, ir->dim_k), ir->args[i].name, ir->args[i].b_is_nk ? "^T" : "",
                         cf_dtype_name(ir->args[i].dtype));
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
    /* two operand TMA descriptors (three for a dual GEMM), one per output, xchg + xsync +
     * split_ws + split_cnt, output pointers, M N K, pitches */
    size_t head = 256 + (ir->dual ? 128 : 0) + 128 * slots + 32 + 8 * slots + 12 + 4 * slots;
    head = (head + align - 1) / align * align;
    return (head + epi + 63) / 64 * 64;
}
