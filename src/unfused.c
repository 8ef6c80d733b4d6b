/* unfused.c — the unfused path: cuBLASLt for each GEMM, row kernels between.
 *
 * It runs every graph with one or two GEMMs whose epilogues are elementwise
 * ops and row reductions, including those Φ does not fuse (two GEMMs over one
 * X, as in SwiGLU; B2B).  The graph is cut at its GEMMs into pieces:
 *
 *   - every GEMM writes its output to an f32 buffer [M, N_j] (cuBLASLt);
 *   - a value belongs to the piece of the last GEMM it depends on; piece j runs
 *     right after GEMM j, and computes the outputs in it and the computed left
 *     operand of a later GEMM (S of F(X*W1)*W2, stored in that GEMM's dtype);
 *   - a piece is itself a graph, built with the builder over buffers: its own
 *     GEMM stays a matmul (the row kernel's accumulator is that GEMM's f32
 *     output), an earlier GEMM's output is an f32 [M, N] input, everything
 *     else is copied, each node with its spec location.  Φ lowers the piece
 *     like any single-GEMM graph and rows.c makes its row kernel, so a piece
 *     Φ cannot lower is rejected with Φ's message, pointing into the spec.
 *
 * Values a piece needs from before its GEMM are recomputed from the buffers
 * (SwiGLU's silu(X*Wg) in the piece after X*Wu), except per-row ([M]) values
 * over another N (a B2B's second epilogue scaled by a statistic of the first):
 * the earlier piece writes those to f32 [M] buffers, the later one reads them.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

/* Where a piece graph's input lives, or where its output goes. */
typedef enum uf_bind_kind {
    UF_GEMM_A,     /* the piece's own GEMM's operands (the row kernel never      */
    UF_GEMM_B,     /* reads them; the host model computes the accumulator)       */
    UF_INPUT,      /* an input of the graph (index)                               */
    UF_GEMM_OUT,   /* the f32 output buffer of GEMM index                         */
    UF_OUTPUT,     /* an output of the graph (index)                              */
    UF_OPERAND,    /* the computed left operand of GEMM index                     */
    UF_ROWVAL,     /* the f32 [M] buffer of row value index (cf_unfused.row_node) */
} uf_bind_kind;

typedef struct uf_bind {
    uf_bind_kind kind;
    int index;
} uf_bind;

typedef struct uf_piece {
    int gemm;              /* runs after this GEMM, over its f32 output         */
    cf_graph *graph;       /* dims numbered as the original's                   */
    uf_bind *in, *out;     /* by the piece graph's input / output index         */
    int *param;            /* by piece param index: the original's param index  */
    cf_ir *ir;
    cf_rows *rows;         /* after cf_unfused_build                            */
} uf_piece;

struct cf_unfused {
    const cf_graph *g;
    int n_gemms, n_pieces;
    cf_unfused_gemm gemm[2];
    uf_piece piece[2];
    /* [M] values a piece over another N reads: kept in f32 buffers */
    int n_rows;
    cf_value *row_node;
    cf_rt_devptr *row_buf;
    size_t *row_bytes;
    /* run time: buffers and plans, (re)made when a launch needs more */
    cf_rt_devptr c[2], operand[2];
    size_t c_bytes[2], operand_bytes[2];
    cf_rt_cublas_plan *plan[2];
    int64_t plan_shape[2][3];
    cf_rt_devptr blas_ws;  /* the plans' one workspace (their GEMMs run one after the other) */
    size_t blas_ws_bytes;
    uint64_t *pin, *pout;  /* a piece's launch tables (the largest piece's size) */
    double *pparams;
};

/* ---- the decomposition ------------------------------------------------------- */

typedef struct uf_ctx {
    const cf_graph *g;
    cf_unfused *u;
    cf_error *err;
    bool *live, *in_piece;
    bool *row_cut;         /* an [M] value kept in a buffer for a piece over another N */
    signed char *seg;      /* the last GEMM a value depends on; -1: none        */
    cf_value *map;         /* original node -> piece graph node                 */
} uf_ctx;

__attribute__((format(printf, 3, 4)))
static cf_status reject(uf_ctx *c, cf_value v, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_loc loc = v >= 0 ? c->g->nodes[v].loc : (cf_loc){0};
    return cf_errorf(c->err, CF_ERR_UNSUPPORTED, loc, "the unfused path cannot run this graph: %s", msg);
}

static const char *nm(uf_ctx *c, cf_value v, char *buf, size_t n) { return cf_graph_node_name(c->g, v, buf, n); }

static int gemm_of(const cf_unfused *u, cf_value v)
{
    for (int j = 0; j < u->n_gemms; j++)
        if (u->gemm[j].node == v)
            return j;
    return -1;
}

static void mark_live(uf_ctx *c)
{
    const cf_graph *g = c->g;
    for (int i = 0; i < g->n_outputs; i++)
        c->live[g->outputs[i].value] = true;
    for (int v = g->n_nodes - 1; v >= 0; v--)
        for (int k = 0; k < 2 && c->live[v]; k++)
            if (g->nodes[v].src[k] >= 0)
                c->live[g->nodes[v].src[k]] = true;
}

/* The GEMMs (at most two) and what no row kernel can run: layout changes and
 * reductions over M. */
static cf_status find_gemms(uf_ctx *c)
{
    const cf_graph *g = c->g;
    char b1[96];
    for (int v = 0; v < g->n_nodes; v++) {
        const cf_node *n = &g->nodes[v];
        if (!c->live[v])
            continue;
        if (n->op == CF_OP_TRANSPOSE)
            return reject(c, v, "'%s' is a transpose; a row kernel runs elementwise ops and row reductions only",
                          nm(c, v, b1, sizeof b1));
        if (cf_op_class_of(n->op) == CF_OPC_REDUCE && n->axis == 0)
            return reject(c, v, "'%s' reduces over %s (the rows); a row kernel reduces over a row's columns only",
                          nm(c, v, b1, sizeof b1), cf_graph_dim_name(g, g->nodes[n->src[0]].dims[0]));
        if (n->op != CF_OP_MATMUL)
            continue;
        if (c->u->n_gemms == 2)
            return reject(c, v, "'%s' is a third matmul; the unfused path runs at most two GEMMs",
                          nm(c, v, b1, sizeof b1));
        c->u->gemm[c->u->n_gemms++].node = v;
    }
    if (c->u->n_gemms == 0)
        return reject(c, -1, "nothing to run: no output depends on a matmul");
    return CF_OK;
}

/* One GEMM's operands: B an input, both bf16 or f16, A an input of B's dtype
 * or a value an earlier piece computes (stored in B's dtype for cuBLASLt). */
static cf_status check_gemm(uf_ctx *c, int j)
{
    const cf_graph *g = c->g;
    cf_unfused_gemm *m = &c->u->gemm[j];
    const cf_node *mm = &g->nodes[m->node];
    cf_value a = mm->src[0], b = mm->src[1];
    const cf_node *an = &g->nodes[a], *bn = &g->nodes[b];
    char b1[96], b2[96];
    if (bn->op != CF_OP_INPUT)
        return reject(c, m->node, "the right operand of '%s' is '%s', a computed value; a GEMM's weight must be "
                      "a graph input", nm(c, m->node, b1, sizeof b1), nm(c, b, b2, sizeof b2));
    if (bn->dtype != CF_BF16 && bn->dtype != CF_F16)
        return reject(c, b, "GEMM operand '%s' is %s; cuBLASLt runs bf16 or f16 GEMMs here", bn->name,
                      cf_dtype_name(bn->dtype));
    if (an->op == CF_OP_INPUT && an->dtype != bn->dtype)
        return reject(c, m->node, "'%s' mixes %s and %s operands; both must have the same dtype",
                      nm(c, m->node, b1, sizeof b1), cf_dtype_name(an->dtype), cf_dtype_name(bn->dtype));
    if (an->op != CF_OP_INPUT && c->seg[a] < 0)
        return reject(c, m->node, "the left operand of '%s' is '%s', computed from inputs only; a row kernel "
                      "runs after a GEMM, not before the first (prologue)", nm(c, m->node, b1, sizeof b1),
                      nm(c, a, b2, sizeof b2));
    if (j > 0 && mm->dims[0] != c->u->gemm[0].dim_m)   /* outputs are row-wise over one M */
        return reject(c, m->node, "'%s' runs over %s rows and '%s' over %s; the unfused path runs GEMMs over one M",
                      nm(c, m->node, b1, sizeof b1), cf_graph_dim_name(g, mm->dims[0]),
                      nm(c, c->u->gemm[0].node, b2, sizeof b2), cf_graph_dim_name(g, c->u->gemm[0].dim_m));
    m->dim_m = mm->dims[0];
    m->dim_n = mm->dims[1];
    m->dim_k = an->dims[1];
    m->dtype = bn->dtype;
    m->b_is_nk = mm->axis == 1;
    m->a_input = an->op == CF_OP_INPUT ? an->index : -1;
    m->b_input = bn->index;
    m->piece = -1;
    return CF_OK;
}

static void assign_segments(uf_ctx *c)
{
    const cf_graph *g = c->g;
    for (int v = 0; v < g->n_nodes; v++) {
        int j = gemm_of(c->u, v);
        signed char s = -1;
        for (int k = 0; k < 2; k++)
            if (g->nodes[v].src[k] >= 0 && c->seg[g->nodes[v].src[k]] > s)
                s = c->seg[g->nodes[v].src[k]];
        c->seg[v] = j > s ? (signed char)j : s;
    }
}

/* Whether piece k has anything to compute: an output, a later GEMM's A, or a
 * row value a later piece reads. */
static bool is_sink_of(uf_ctx *c, int k, cf_value v) { return c->seg[v] == k; }

/* Whether piece k reads v, a per-row ([M]) value of an earlier piece over
 * another N, from a buffer: it cannot recompute it over its own columns (a
 * value over the same N it recomputes from the GEMM buffers instead). */
static bool reads_row_value(uf_ctx *c, int k, cf_value v)
{
    const cf_node *n = &c->g->nodes[v];
    const int s = c->seg[v];
    return s >= 0 && s < k && n->rank == 1 && n->op != CF_OP_INPUT && n->op != CF_OP_MATMUL &&
           n->dims[0] == c->u->gemm[k].dim_m && c->u->gemm[s].dim_n != c->u->gemm[k].dim_n;
}

static bool piece_has_sinks(uf_ctx *c, int k)
{
    for (int v = 0; v < c->g->n_nodes; v++)
        if (c->row_cut[v] && is_sink_of(c, k, v))
            return true;
    for (int i = 0; i < c->g->n_outputs; i++)
        if (is_sink_of(c, k, c->g->outputs[i].value))
            return true;
    for (int j = 0; j < c->u->n_gemms; j++)
        if (c->u->gemm[j].a_input < 0 && is_sink_of(c, k, c->g->nodes[c->u->gemm[j].node].src[0]))
            return true;
    return false;
}

/* Marks what piece k's sinks need, stopping at GEMMs and at the row values of
 * earlier pieces it reads (buffers); marks those row values as row_cut. */
static void close_piece(uf_ctx *c, int k)
{
    const cf_graph *g = c->g;
    memset(c->in_piece, 0, (size_t)g->n_nodes * sizeof *c->in_piece);
    for (int v = 0; v < g->n_nodes; v++)
        if (c->row_cut[v] && is_sink_of(c, k, v))
            c->in_piece[v] = true;
    for (int i = 0; i < g->n_outputs; i++)
        if (is_sink_of(c, k, g->outputs[i].value))
            c->in_piece[g->outputs[i].value] = true;
    for (int j = 0; j < c->u->n_gemms; j++) {
        cf_value a = g->nodes[c->u->gemm[j].node].src[0];
        if (c->u->gemm[j].a_input < 0 && is_sink_of(c, k, a))
            c->in_piece[a] = true;
    }
    for (int v = g->n_nodes - 1; v >= 0; v--) {
        if (!c->in_piece[v] || g->nodes[v].op == CF_OP_MATMUL)
            continue;
        if (reads_row_value(c, k, v)) {
            c->row_cut[v] = true;
            continue;
        }
        for (int s = 0; s < 2; s++)
            if (g->nodes[v].src[s] >= 0)
                c->in_piece[g->nodes[v].src[s]] = true;
    }
}

static int row_slot(const cf_unfused *u, cf_value v)
{
    for (int i = 0; i < u->n_rows; i++)
        if (u->row_node[i] == v)
            return i;
    return -1;
}

/* The row values later pieces read (each piece's closure, the last first, so
 * a piece knows the row values it must write before it is built). */
static cf_status find_row_values(uf_ctx *c)
{
    cf_unfused *u = c->u;
    for (int k = u->n_gemms - 1; k >= 0; k--)
        close_piece(c, k);
    for (int v = 0; v < c->g->n_nodes; v++)
        u->n_rows += c->row_cut[v];
    size_t n = (size_t)u->n_rows + 1;
    u->row_node = calloc(n, sizeof *u->row_node);
    u->row_buf = calloc(n, sizeof *u->row_buf);
    u->row_bytes = calloc(n, sizeof *u->row_bytes);
    if (!u->row_node || !u->row_buf || !u->row_bytes)
        return CF_ERR_NO_MEMORY;
    for (int v = 0, i = 0; v < c->g->n_nodes; v++)
        if (c->row_cut[v])
            u->row_node[i++] = v;
    return CF_OK;
}

static bool name_taken(const cf_graph *g, const char *name)
{
    for (int i = 0; i < g->n_inputs; i++)
        if (strcmp(g->nodes[g->inputs[i]].name, name) == 0)
            return true;
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->nodes[g->params[i]].name, name) == 0)
            return true;
    for (int i = 0; i < g->n_outputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0)
            return true;
    return false;
}

/* A name for a tensor the piece adds (a buffer, its GEMM's operands) that no
 * input, param or output of the graph or the piece has. */
static const char *fresh_name(uf_ctx *c, cf_graph *pg, const char *base, char *buf, size_t n)
{
    snprintf(buf, n, "%s", base);
    for (char *p = buf; *p; p++)   /* an identifier (a fused kernel's field): "sum.12" -> "sum_12" */
        if (!(*p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            *p = '_';
    for (int i = 2; name_taken(c->g, buf) || name_taken(pg, buf); i++)
        snprintf(buf, n, "%.40s_%d", base, i);
    return buf;
}

/* Appends a binding (inputs and outputs are numbered in creation order). */
static bool push_bind(uf_bind **tab, int n, uf_bind b)
{
    uf_bind *t = realloc(*tab, (size_t)(n + 1) * sizeof *t);
    if (!t)
        return false;
    t[n] = b;
    *tab = t;
    return true;
}

/* The piece's copy of GEMM node v: its own GEMM stays a matmul over operands
 * the row kernel never reads (its accumulator is the GEMM's buffer); an
 * earlier GEMM is its f32 buffer, an input. */
static cf_value copy_gemm(uf_ctx *c, uf_piece *p, cf_value v)
{
    cf_graph *pg = p->graph;
    const cf_unfused_gemm *m = &c->u->gemm[gemm_of(c->u, v)];
    const cf_node *n = &c->g->nodes[v];
    char base[CF_MAX_NAME], name[CF_MAX_NAME];
    if (gemm_of(c->u, v) != p->gemm) {
        nm(c, v, base, sizeof base);   /* Φ's messages name the buffer like the GEMM */
        cf_value x = cf_graph_input(pg, fresh_name(c, pg, base, name, sizeof name), CF_F32, 2, n->dims);
        if (!push_bind(&p->in, pg->n_inputs - 1, (uf_bind){UF_GEMM_OUT, gemm_of(c->u, v)}))
            return -1;
        return x;
    }
    /* the operands' shapes as given: W keeps its layout ([K,N] or [N,K]) */
    cf_value x = cf_graph_input(pg, fresh_name(c, pg, "gemm_A", name, sizeof name), m->dtype, 2,
                                c->g->nodes[n->src[0]].dims);
    if (!push_bind(&p->in, pg->n_inputs - 1, (uf_bind){UF_GEMM_A, p->gemm}))
        return -1;
    cf_value w = cf_graph_input(pg, fresh_name(c, pg, "gemm_B", name, sizeof name), m->dtype, 2,
                                c->g->nodes[n->src[1]].dims);
    if (!push_bind(&p->in, pg->n_inputs - 1, (uf_bind){UF_GEMM_B, p->gemm}))
        return -1;
    return cf_graph_matmul(pg, x, w);
}

static cf_value copy_node(uf_ctx *c, uf_piece *p, cf_value v)
{
    cf_graph *pg = p->graph;
    const cf_node *n = &c->g->nodes[v];
    cf_value a = n->src[0] >= 0 ? c->map[n->src[0]] : -1, b = n->src[1] >= 0 ? c->map[n->src[1]] : -1;
    if (c->row_cut[v] && c->seg[v] != p->gemm) {   /* an earlier piece's row value */
        char base[CF_MAX_NAME], name[CF_MAX_NAME];
        nm(c, v, base, sizeof base);
        cf_value x = cf_graph_input(pg, fresh_name(c, pg, base, name, sizeof name), CF_F32, 1, n->dims);
        return push_bind(&p->in, pg->n_inputs - 1, (uf_bind){UF_ROWVAL, row_slot(c->u, v)}) ? x : -1;
    }
    switch (n->op) {
    case CF_OP_INPUT: {
        cf_value x = cf_graph_input(pg, n->name, n->dtype, n->rank, n->dims);
        return push_bind(&p->in, pg->n_inputs - 1, (uf_bind){UF_INPUT, n->index}) ? x : -1;
    }
    case CF_OP_PARAM: {
        int *t = realloc(p->param, (size_t)(pg->n_params + 1) * sizeof *t);
        if (!t)
            return -1;
        p->param = t;
        t[pg->n_params] = n->index;
        return cf_graph_param(pg, n->name);
    }
    case CF_OP_CONST:
        return cf_graph_const(pg, n->cval);
    case CF_OP_MATMUL:
        return copy_gemm(c, p, v);
    default:
        break;
    }
    switch (cf_op_class_of(n->op)) {
    case CF_OPC_UNARY: return cf_graph_unary(pg, n->op, a);
    case CF_OPC_BINARY: return cf_graph_binary(pg, n->op, a, b);
    case CF_OPC_REDUCE: return cf_graph_reduce(pg, n->op, a, n->axis);
    default: return -1;  /* transposes were rejected by find_gemms */
    }
}

/* The piece's sinks as outputs: the graph's outputs in it, then the left
 * operands of later GEMMs it computes. */
static cf_status add_piece_outputs(uf_ctx *c, uf_piece *p, int k)
{
    const cf_graph *g = c->g;
    cf_graph *pg = p->graph;
    for (int i = 0; i < g->n_outputs; i++) {
        const cf_output *o = &g->outputs[i];
        if (!is_sink_of(c, k, o->value))
            continue;
        cf_graph_set_loc(pg, o->loc);
        cf_graph_output(pg, o->name, c->map[o->value], o->dtype);
        if (!push_bind(&p->out, pg->n_outputs - 1, (uf_bind){UF_OUTPUT, i}))
            return CF_ERR_NO_MEMORY;
    }
    for (int j = 0; j < c->u->n_gemms; j++) {
        const cf_unfused_gemm *m = &c->u->gemm[j];
        cf_value a = g->nodes[m->node].src[0];
        if (m->a_input >= 0 || !is_sink_of(c, k, a))
            continue;
        char mname[96], base[CF_MAX_NAME], name[CF_MAX_NAME];
        snprintf(base, sizeof base, "%.40s_A", nm(c, m->node, mname, sizeof mname));
        cf_graph_set_loc(pg, g->nodes[a].loc);
        cf_graph_output(pg, fresh_name(c, pg, base, name, sizeof name), c->map[a], m->dtype);
        if (!push_bind(&p->out, pg->n_outputs - 1, (uf_bind){UF_OPERAND, j}))
            return CF_ERR_NO_MEMORY;
    }
    for (int i = 0; i < c->u->n_rows; i++) {
        cf_value v = c->u->row_node[i];
        if (!is_sink_of(c, k, v))
            continue;
        char base[CF_MAX_NAME], name[CF_MAX_NAME];
        nm(c, v, base, sizeof base);
        cf_graph_set_loc(pg, g->nodes[v].loc);
        cf_graph_output(pg, fresh_name(c, pg, base, name, sizeof name), c->map[v], CF_F32);
        if (!push_bind(&p->out, pg->n_outputs - 1, (uf_bind){UF_ROWVAL, i}))
            return CF_ERR_NO_MEMORY;
    }
    return CF_OK;
}

/* Builds piece k (after GEMM k) as a graph and lowers it. */
static cf_status make_piece(uf_ctx *c, int k)
{
    const cf_graph *g = c->g;
    uf_piece *p = &c->u->piece[c->u->n_pieces++];
    p->gemm = k;
    c->u->gemm[k].piece = c->u->n_pieces - 1;
    if (!(p->graph = cf_graph_new()))
        return cf_errorf(c->err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    for (int d = 0; d < g->n_dims; d++)
        cf_graph_dim(p->graph, g->dim_names[d]);   /* the same numbering: one dims array binds both */
    close_piece(c, k);
    cf_status st = CF_OK;
    for (int v = 0; v < g->n_nodes && st == CF_OK; v++) {
        if (!c->in_piece[v])
            continue;
        cf_graph_set_loc(p->graph, g->nodes[v].loc);
        c->map[v] = copy_node(c, p, v);
        const cf_node *pn = cf_graph_node(p->graph, c->map[v]);
        if (pn && g->nodes[v].name && pn->op != CF_OP_INPUT && pn->op != CF_OP_PARAM)
            cf_graph_set_name(p->graph, c->map[v], g->nodes[v].name);   /* readable row kernels */
        if (c->map[v] < 0 && cf_graph_error(p->graph)->status == CF_OK)
            st = CF_ERR_NO_MEMORY;
    }
    if (st == CF_OK)
        st = add_piece_outputs(c, p, k);
    if (st == CF_ERR_NO_MEMORY)
        return cf_errorf(c->err, st, (cf_loc){0}, "out of memory");
    if (cf_graph_error(p->graph)->status != CF_OK) {
        const cf_error *e = cf_graph_error(p->graph);
        return cf_errorf(c->err, CF_ERR_INTERNAL, (cf_loc){0}, "the unfused path built a bad piece: %s", e->msg);
    }
    cf_error perr;
    st = cf_lower(p->graph, &p->ir, &perr);
    if (st != CF_OK) {
        /* Φ's location (the piece's nodes carry the spec's), in front again */
        char b1[96], pre[300];
        cf_loc loc = {perr.file[0] ? perr.file : NULL, perr.line, perr.col};
        snprintf(pre, sizeof pre, "%s:%d:%d: ", perr.file, perr.line, perr.col);
        const char *msg = loc.file && strncmp(perr.msg, pre, strlen(pre)) == 0 ? perr.msg + strlen(pre) : perr.msg;
        return cf_errorf(c->err, st, loc, "the unfused path cannot run the row kernel after GEMM '%s': %s",
                         nm(c, c->u->gemm[k].node, b1, sizeof b1), msg);
    }
    return CF_OK;
}

static cf_status decompose(uf_ctx *c)
{
    const cf_graph *g = c->g;
    mark_live(c);
    cf_status st = find_gemms(c);
    if (st != CF_OK)
        return st;
    assign_segments(c);
    for (int j = 0; j < c->u->n_gemms; j++)
        if ((st = check_gemm(c, j)) != CF_OK)
            return st;
    /* Work that depends on no GEMM (a per-row output of an [M] input, an input kept as an
     * output) runs in the first piece, as the fused kernel runs it in its epilogue; what feeds
     * a GEMM was refused above. */
    for (int v = 0; v < g->n_nodes; v++)
        if (c->seg[v] < 0 && cf_op_class_of(g->nodes[v].op) != CF_OPC_LEAF)
            c->seg[v] = 0;
    for (int i = 0; i < g->n_outputs; i++)
        if (c->seg[g->outputs[i].value] < 0)
            c->seg[g->outputs[i].value] = 0;
    if ((st = find_row_values(c)) != CF_OK)
        return cf_errorf(c->err, st, (cf_loc){0}, "out of memory");
    for (int k = 0; k < c->u->n_gemms && st == CF_OK; k++)
        if (piece_has_sinks(c, k))
            st = make_piece(c, k);
    return st;
}

static cf_status alloc_tables(cf_unfused *u)
{
    int ni = 1, no = 1, np = 1;
    for (int i = 0; i < u->n_pieces; i++) {
        const cf_graph *pg = u->piece[i].graph;
        ni = pg->n_inputs > ni ? pg->n_inputs : ni;
        no = pg->n_outputs > no ? pg->n_outputs : no;
        np = pg->n_params > np ? pg->n_params : np;
    }
    u->pin = calloc((size_t)ni, sizeof *u->pin);
    u->pout = calloc((size_t)no, sizeof *u->pout);
    u->pparams = calloc((size_t)np, sizeof *u->pparams);
    return u->pin && u->pout && u->pparams ? CF_OK : CF_ERR_NO_MEMORY;
}

cf_status cf_unfused_plan(const cf_graph *g, cf_unfused **out, cf_error *err)
{
    cf_error_clear(err);
    if (!g || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_unfused_plan: NULL argument");
    *out = NULL;
    if (g->err.status != CF_OK) {
        if (err)
            *err = g->err;
        return g->err.status;
    }
    size_t n = (size_t)(g->n_nodes ? g->n_nodes : 1);
    uf_ctx c = {.g = g, .err = err};
    c.u = calloc(1, sizeof *c.u);
    c.live = calloc(n, sizeof *c.live);
    c.in_piece = calloc(n, sizeof *c.in_piece);
    c.row_cut = calloc(n, sizeof *c.row_cut);
    c.seg = calloc(n, sizeof *c.seg);
    c.map = calloc(n, sizeof *c.map);
    cf_status st = c.u && c.live && c.in_piece && c.row_cut && c.seg && c.map ? CF_OK : CF_ERR_NO_MEMORY;
    if (st == CF_OK) {
        c.u->g = g;
        st = decompose(&c);
    }
    if (st == CF_OK && alloc_tables(c.u) != CF_OK)
        st = CF_ERR_NO_MEMORY;
    if (st == CF_ERR_NO_MEMORY && (!err || err->status != CF_ERR_NO_MEMORY))
        cf_errorf(err, st, (cf_loc){0}, "out of memory planning the unfused path");
    free(c.live);
    free(c.in_piece);
    free(c.row_cut);
    free(c.seg);
    free(c.map);
    if (st != CF_OK) {
        cf_unfused_free(c.u);
        return st;
    }
    *out = c.u;
    return CF_OK;
}

/* ---- the object ----------------------------------------------------------------- */

cf_status cf_unfused_build(const cf_graph *g, const char *title, cf_unfused **out, cf_error *err)
{
    cf_unfused *u = NULL;
    cf_status st = cf_unfused_plan(g, &u, err);
    for (int i = 0; st == CF_OK && i < u->n_pieces; i++) {
        char t[512], b1[96];
        snprintf(t, sizeof t, "%s, the row kernel after GEMM '%s'", title ? title : "<graph>",
                 cf_graph_node_name(g, u->gemm[u->piece[i].gemm].node, b1, sizeof b1));
        st = cf_rows_build(u->piece[i].ir, t, &u->piece[i].rows, err);
    }
    if (st != CF_OK) {
        cf_unfused_free(u);
        return st;
    }
    *out = u;
    return CF_OK;
}

void cf_unfused_free(cf_unfused *u)
{
    if (!u)
        return;
    for (int j = 0; j < 2; j++) {
        cf_rt_cublas_plan_free(u->plan[j]);
        if (u->c[j])
            cf_rt_free(u->c[j], NULL);
        if (u->operand[j])
            cf_rt_free(u->operand[j], NULL);
    }
    if (u->blas_ws)
        cf_rt_free(u->blas_ws, NULL);
    for (int i = 0; i < 2; i++) {
        uf_piece *p = &u->piece[i];
        cf_rows_free(p->rows);
        cf_ir_free(p->ir);
        cf_graph_free(p->graph);
        free(p->in);
        free(p->out);
        free(p->param);
    }
    for (int i = 0; i < u->n_rows && u->row_buf; i++)
        if (u->row_buf[i])
            cf_rt_free(u->row_buf[i], NULL);
    free(u->row_node);
    free(u->row_buf);
    free(u->row_bytes);
    free(u->pin);
    free(u->pout);
    free(u->pparams);
    free(u);
}

int cf_unfused_num_gemms(const cf_unfused *u) { return u ? u->n_gemms : 0; }
const cf_unfused_gemm *cf_unfused_gemm_at(const cf_unfused *u, int j)
{
    return u && j >= 0 && j < u->n_gemms ? &u->gemm[j] : NULL;
}
int cf_unfused_num_pieces(const cf_unfused *u) { return u ? u->n_pieces : 0; }
const cf_ir *cf_unfused_piece_ir(const cf_unfused *u, int i)
{
    return u && i >= 0 && i < u->n_pieces ? u->piece[i].ir : NULL;
}
int cf_unfused_piece_gemm(const cf_unfused *u, int i)
{
    return u && i >= 0 && i < u->n_pieces ? u->piece[i].gemm : -1;
}
const cf_rows *cf_unfused_piece_rows(const cf_unfused *u, int i)
{
    return u && i >= 0 && i < u->n_pieces ? u->piece[i].rows : NULL;
}

/* ---- launching ----------------------------------------------------------------- */

/* Makes *p hold at least bytes (contents not kept). */
static cf_status ensure(cf_rt_devptr *p, size_t *have, size_t bytes, cf_error *err)
{
    if (bytes <= *have)
        return CF_OK;
    if (*p)
        cf_rt_free(*p, NULL);
    *p = 0;
    *have = 0;
    cf_status st = cf_rt_malloc(p, bytes, err);
    if (st == CF_OK)
        *have = bytes;
    return st;
}

static cf_status check_ptr(const char *what, const char *name, uint64_t p, cf_dtype t, cf_error *err)
{
    if (p && p % cf_dtype_size(t) == 0)
        return CF_OK;
    return cf_errorf(err, p ? CF_ERR_ALIGNMENT : CF_ERR_INVALID_ARG, (cf_loc){0},
                     "%s '%s': device pointer 0x%llx is NULL or not aligned to its %s elements", what, name,
                     (unsigned long long)p, cf_dtype_name(t));
}

/* GEMM j's sizes, buffers and plan for a launch at a->dims. */
static cf_status prepare_gemm(cf_unfused *u, int j, const cf_launch_args *a, cf_error *err)
{
    const cf_unfused_gemm *m = &u->gemm[j];
    const int64_t M = a->dims[m->dim_m], N = a->dims[m->dim_n], K = a->dims[m->dim_k];
    if (M < 1 || N < 1 || K < 1 || N > INT32_MAX || K > INT32_MAX || M > INT64_MAX / 4 / N || M > INT64_MAX / 2 / K) {
        char b1[96];
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "GEMM '%s' at M=%lld N=%lld K=%lld: sizes must be >= 1 "
                         "(N and K below 2^31)", cf_graph_node_name(u->g, m->node, b1, sizeof b1), (long long)M,
                         (long long)N, (long long)K);
    }
    const cf_graph *g = u->g;
    cf_status st = check_ptr("input", g->nodes[g->inputs[m->b_input]].name, a->inputs[m->b_input], m->dtype, err);
    if (st == CF_OK && m->a_input >= 0)
        st = check_ptr("input", g->nodes[g->inputs[m->a_input]].name, a->inputs[m->a_input], m->dtype, err);
    if (st == CF_OK)
        st = ensure(&u->c[j], &u->c_bytes[j], (size_t)M * (size_t)N * sizeof(float), err);
    if (st == CF_OK && m->a_input < 0)
        st = ensure(&u->operand[j], &u->operand_bytes[j], (size_t)M * (size_t)K * cf_dtype_size(m->dtype), err);
    const int64_t shape[3] = {M, N, K};
    if (st == CF_OK && (!u->plan[j] || memcmp(u->plan_shape[j], shape, sizeof shape) != 0)) {
        cf_rt_cublas_plan_free(u->plan[j]);   /* host objects only: the workspace stays */
        u->plan[j] = NULL;
        st = ensure(&u->blas_ws, &u->blas_ws_bytes, cf_rt_cublas_workspace_bytes(), err);
        if (st == CF_OK)
            st = cf_rt_cublas_plan_create_ws(m->dtype, CF_F32, M, N, K, m->b_is_nk, u->blas_ws, u->blas_ws_bytes,
                                             &u->plan[j], err);
        if (st == CF_OK)
            memcpy(u->plan_shape[j], shape, sizeof shape);
    }
    return st;
}

/* Where everything lives for one run: the caller's tables and the GEMM
 * outputs and computed operands (device pointers, or host ones cast). */
typedef struct uf_where {
    const uint64_t *inputs, *outputs;
    const double *params;
    uint64_t c[2], operand[2];
    const uint64_t *rows_in, *rows_out;   /* by row value (the same buffers on the GPU) */
} uf_where;

static uint64_t gemm_a_at(const cf_unfused *u, int j, const uf_where *w)
{
    return u->gemm[j].a_input >= 0 ? w->inputs[u->gemm[j].a_input] : w->operand[j];
}

/* Fills u's launch tables for piece i (the GPU launch and the host model share it). */
static void bind_piece(cf_unfused *u, int i, const uf_where *w)
{
    const uf_piece *p = &u->piece[i];
    const cf_graph *pg = p->graph;
    for (int k = 0; k < pg->n_inputs; k++) {
        const uf_bind b = p->in[k];
        u->pin[k] = b.kind == UF_INPUT      ? w->inputs[b.index]
                    : b.kind == UF_GEMM_OUT ? w->c[b.index]
                    : b.kind == UF_ROWVAL   ? w->rows_in[b.index]
                    : b.kind == UF_GEMM_A   ? gemm_a_at(u, b.index, w)
                                            : w->inputs[u->gemm[b.index].b_input];
    }
    for (int k = 0; k < pg->n_outputs; k++) {
        const uf_bind b = p->out[k];
        u->pout[k] = b.kind == UF_OUTPUT ? w->outputs[b.index]
                     : b.kind == UF_ROWVAL ? w->rows_out[b.index]
                                          : w->operand[b.index];
    }
    for (int k = 0; k < pg->n_params; k++)
        u->pparams[k] = w->params[p->param[k]];
}

static uf_where where_of(const cf_unfused *u, const cf_launch_args *a)
{
    return (uf_where){.inputs = a->inputs, .outputs = a->outputs, .params = a->params,
                      .c = {u->c[0], u->c[1]}, .operand = {u->operand[0], u->operand[1]},
                      .rows_in = u->row_buf, .rows_out = u->row_buf};
}

/* Piece i's row kernel over its GEMM's buffer, its tables bound for a. */
static cf_status run_piece(cf_unfused *u, int i, const cf_launch_args *a, cf_error *err)
{
    const uf_piece *p = &u->piece[i];
    const uf_where w = where_of(u, a);
    bind_piece(u, i, &w);
    const cf_unfused_gemm *m = &u->gemm[p->gemm];
    cf_launch_args pa = {.dims = a->dims, .inputs = u->pin, .params = u->pparams, .outputs = u->pout,
                         .stream = a->stream};
    return cf_rows_launch(p->rows, u->c[p->gemm], a->dims[m->dim_m], a->dims[m->dim_n], &pa, a->stream,
                          err);
}

cf_status cf_unfused_launch(cf_unfused *u, const cf_launch_args *a, cf_error *err)
{
    cf_error_clear(err);
    if (!u || !a || !a->dims || !a->inputs || !a->outputs || (u->g->n_params && !a->params))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "cf_unfused_launch: NULL plan, dims, inputs, outputs or params");
    for (int i = 0; i < u->n_pieces; i++)
        if (!u->piece[i].rows)
            return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                             "cf_unfused_launch: a plan without row kernels (use cf_unfused_build)");
    cf_status st = CF_OK;
    for (int j = 0; j < u->n_gemms && st == CF_OK; j++)
        st = prepare_gemm(u, j, a, err);
    for (int i = 0; i < u->n_rows && st == CF_OK; i++)
        st = ensure(&u->row_buf[i], &u->row_bytes[i],
                    (size_t)a->dims[u->g->nodes[u->row_node[i]].dims[0]] * sizeof(float), err);
    for (int j = 0; j < u->n_gemms && st == CF_OK; j++) {
        const cf_unfused_gemm *m = &u->gemm[j];
        const uf_where w = where_of(u, a);
        st = cf_rt_cublas_plan_run(u->plan[j], gemm_a_at(u, j, &w), a->inputs[m->b_input], u->c[j], a->stream, err);
        if (st == CF_OK && m->piece >= 0)
            st = run_piece(u, m->piece, a, err);
    }
    return st;
}

/* ---- a piece as a fused kernel (b2b.c) ----------------------------------------------------- */

const cf_graph *cf_unfused_piece_graph(const cf_unfused *u, int i)
{
    return u && i >= 0 && i < u->n_pieces ? u->piece[i].graph : NULL;
}

const char *cf_unfused_piece_output_role(const cf_unfused *u, int i, int o)
{
    const uf_bind_kind k = u->piece[i].out[o].kind;
    return k == UF_OUTPUT ? "output" : k == UF_OPERAND ? "operand" : "row value";
}

cf_value cf_unfused_piece_reads_gemm(const cf_unfused *u, int i)
{
    const uf_piece *p = &u->piece[i];
    for (int k = 0; k < p->graph->n_inputs; k++)
        if (p->in[k].kind == UF_GEMM_OUT)
            return u->gemm[p->in[k].index].node;
    return -1;
}

static size_t operand_bytes(const cf_unfused *u, int j, const int64_t *dims)
{
    const cf_unfused_gemm *m = &u->gemm[j];
    return m->a_input >= 0 ? 0 : (size_t)dims[m->dim_m] * (size_t)dims[m->dim_k] * cf_dtype_size(m->dtype);
}

static size_t row_bytes(const cf_unfused *u, int r, const int64_t *dims)
{
    return (size_t)dims[u->g->nodes[u->row_node[r]].dims[0]] * sizeof(float);
}

/* The computed operands' and row values' buffers for dims; allocating is not allowed while the
 * stream is captured into a CUDA graph, so a launch at a larger size than any before is refused
 * there. */
static cf_status piece_buffers(cf_unfused *u, const cf_launch_args *a, cf_error *err)
{
    bool grow = false, capturing = false;
    for (int j = 0; j < u->n_gemms; j++)
        grow = grow || operand_bytes(u, j, a->dims) > u->operand_bytes[j];
    for (int r = 0; r < u->n_rows; r++)
        grow = grow || row_bytes(u, r, a->dims) > u->row_bytes[r];
    cf_status st = grow ? cf_rt_stream_capturing(a->stream, &capturing, err) : CF_OK;
    if (st == CF_OK && capturing)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "CUDA-graph capture of a B2B launch at M=%lld: "
                         "its S buffer is not allocated for it yet (launch it once before capture, at the "
                         "largest M)", (long long)a->dims[u->gemm[0].dim_m]);
    for (int j = 0; j < u->n_gemms && st == CF_OK; j++)
        if (u->gemm[j].a_input < 0)   /* a computed left operand, written by an earlier piece */
            st = ensure(&u->operand[j], &u->operand_bytes[j], operand_bytes(u, j, a->dims), err);
    for (int r = 0; r < u->n_rows && st == CF_OK; r++)
        st = ensure(&u->row_buf[r], &u->row_bytes[r], row_bytes(u, r, a->dims), err);
    return st;
}

cf_status cf_unfused_piece_args(cf_unfused *u, int i, const cf_launch_args *a, cf_launch_args *pa, cf_error *err)
{
    CF_ASSERT(i >= 0 && i < u->n_pieces && cf_unfused_piece_reads_gemm(u, i) < 0);
    cf_status st = piece_buffers(u, a, err);
    if (st != CF_OK)
        return st;
    const uf_where w = where_of(u, a);
    bind_piece(u, i, &w);
    *pa = (cf_launch_args){.dims = a->dims, .inputs = u->pin, .params = u->pparams, .outputs = u->pout,
                           .stream = a->stream};
    return CF_OK;
}

/* ---- the host model ---------------------------------------------------------------- */

static double host_load(const void *p, cf_dtype t, size_t i)
{
    return t == CF_F32 ? ((const float *)p)[i]
           : t == CF_BF16 ? cf_bf16_to_f32(((const uint16_t *)p)[i])
                          : cf_f16_to_f32(((const uint16_t *)p)[i]);
}

/* C = A B in f64, kept as f32 like cuBLASLt's output on the GPU. */
static void host_gemm(const cf_unfused_gemm *m, const int64_t *dims, const void *A, const void *B, float *C)
{
    const int64_t M = dims[m->dim_m], N = dims[m->dim_n], K = dims[m->dim_k];
    for (int64_t r = 0; r < M; r++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += host_load(A, m->dtype, (size_t)(r * K + k)) *
                       host_load(B, m->dtype, (size_t)(m->b_is_nk ? n * K + k : k * N + n));
            C[r * N + n] = (float)acc;
        }
}

typedef struct host_bufs {
    int n_rows;
    float *c[2];
    uint16_t *operand[2];   /* a computed left operand in its GEMM's dtype  */
    double *operand_d[2];   /* ... as the piece that computes it writes it  */
    float **rows_f;         /* row values as a reading piece sees them (f32) */
    double **rows_d;        /* ... as the writing piece writes them         */
    uint64_t *rows_in, *rows_out;
    uint64_t *in, *out;
    const void **pin;
    double **pout;
} host_bufs;

static void host_bufs_free(host_bufs *h)
{
    for (int j = 0; j < 2; j++) {
        free(h->c[j]);
        free(h->operand[j]);
        free(h->operand_d[j]);
    }
    for (int i = 0; h->rows_f && h->rows_d && i < h->n_rows; i++) {
        free(h->rows_f[i]);
        free(h->rows_d[i]);
    }
    free(h->rows_f);
    free(h->rows_d);
    free(h->rows_in);
    free(h->rows_out);
    free(h->in);
    free(h->out);
    free(h->pin);
    free(h->pout);
}

static bool host_bufs_alloc(host_bufs *h, const cf_unfused *u, const cf_bindings *b, double *const *outputs)
{
    const cf_graph *g = u->g;
    bool ok = true;
    for (int j = 0; j < u->n_gemms; j++) {
        const cf_unfused_gemm *m = &u->gemm[j];
        size_t M = (size_t)b->dims[m->dim_m], N = (size_t)b->dims[m->dim_n], K = (size_t)b->dims[m->dim_k];
        ok = ok && (h->c[j] = malloc(M * N * sizeof(float) + 1));
        if (m->a_input < 0)
            ok = ok && (h->operand[j] = malloc(M * K * 2 + 1)) && (h->operand_d[j] = malloc(M * K * sizeof(double) + 1));
    }
    h->n_rows = u->n_rows;
    h->rows_f = calloc((size_t)u->n_rows + 1, sizeof *h->rows_f);
    h->rows_d = calloc((size_t)u->n_rows + 1, sizeof *h->rows_d);
    h->rows_in = calloc((size_t)u->n_rows + 1, sizeof *h->rows_in);
    h->rows_out = calloc((size_t)u->n_rows + 1, sizeof *h->rows_out);
    ok = ok && h->rows_f && h->rows_d && h->rows_in && h->rows_out;
    for (int i = 0; ok && i < u->n_rows; i++) {
        size_t n = (size_t)b->dims[g->nodes[u->row_node[i]].dims[0]];
        ok = (h->rows_f[i] = malloc(n * sizeof(float) + 1)) && (h->rows_d[i] = malloc(n * sizeof(double) + 1));
        if (ok) {
            h->rows_in[i] = (uint64_t)(uintptr_t)h->rows_f[i];
            h->rows_out[i] = (uint64_t)(uintptr_t)h->rows_d[i];
        }
    }
    h->in = calloc((size_t)g->n_inputs + 1, sizeof *h->in);
    h->out = calloc((size_t)g->n_outputs + 1, sizeof *h->out);
    h->pin = calloc((size_t)g->n_inputs + 8, sizeof *h->pin);
    h->pout = calloc((size_t)g->n_outputs + 4, sizeof *h->pout);
    if (!ok || !h->in || !h->out || !h->pin || !h->pout)
        return false;
    for (int i = 0; i < g->n_inputs; i++)
        h->in[i] = (uint64_t)(uintptr_t)b->inputs[i];
    for (int i = 0; i < g->n_outputs; i++)
        h->out[i] = (uint64_t)(uintptr_t)outputs[i];
    return true;
}

/* Runs piece i with the IR interpreter; a computed operand it writes is then
 * rounded to its GEMM's dtype, as the row kernel's store does. */
static cf_status host_piece(cf_unfused *u, int i, host_bufs *h, const cf_bindings *b, cf_error *err)
{
    const uf_piece *p = &u->piece[i];
    uf_where w = {.inputs = h->in, .outputs = h->out, .params = b->params, .rows_in = h->rows_in,
                  .rows_out = h->rows_out};
    for (int j = 0; j < u->n_gemms; j++) {
        w.c[j] = (uint64_t)(uintptr_t)h->c[j];
        /* this piece writes the operands of later GEMMs, and its own GEMM reads its operand */
        w.operand[j] = (uint64_t)(uintptr_t)(j > p->gemm ? (void *)h->operand_d[j] : (void *)h->operand[j]);
    }
    bind_piece(u, i, &w);
    for (int k = 0; k < p->graph->n_inputs; k++)
        h->pin[k] = (const void *)(uintptr_t)u->pin[k];
    for (int k = 0; k < p->graph->n_outputs; k++)
        h->pout[k] = (double *)(uintptr_t)u->pout[k];
    cf_bindings pb = {.dims = b->dims, .inputs = h->pin, .params = u->pparams};
    cf_status st = cf_ir_interpret(p->ir, &pb, h->pout, err);
    for (int k = 0; k < p->graph->n_outputs && st == CF_OK; k++) {
        if (p->out[k].kind == UF_ROWVAL) {   /* the f32 buffer a later piece reads */
            const int r = p->out[k].index;
            size_t n = (size_t)b->dims[u->g->nodes[u->row_node[r]].dims[0]];
            for (size_t e = 0; e < n; e++)
                h->rows_f[r][e] = (float)h->rows_d[r][e];
        }
        if (p->out[k].kind != UF_OPERAND)
            continue;
        const int j = p->out[k].index;
        const cf_unfused_gemm *m = &u->gemm[j];
        size_t n = (size_t)b->dims[m->dim_m] * (size_t)b->dims[m->dim_k];
        for (size_t e = 0; e < n; e++)
            h->operand[j][e] = m->dtype == CF_BF16 ? cf_f32_to_bf16((float)h->operand_d[j][e])
                                                   : cf_f32_to_f16((float)h->operand_d[j][e]);
    }
    return st;
}

cf_status cf_unfused_run_host(cf_unfused *u, const cf_bindings *b, double *const *outputs, cf_error *err)
{
    cf_error_clear(err);
    if (!u || !b || !b->dims || !b->inputs || !outputs || (u->g->n_params && !b->params))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_unfused_run_host: NULL argument");
    host_bufs h = {0};
    cf_status st = CF_OK;
    if (!host_bufs_alloc(&h, u, b, outputs))
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    for (int j = 0; j < u->n_gemms && st == CF_OK; j++) {
        const cf_unfused_gemm *m = &u->gemm[j];
        const void *A = m->a_input >= 0 ? b->inputs[m->a_input] : (const void *)h.operand[j];
        host_gemm(m, b->dims, A, b->inputs[m->b_input], h.c[j]);
        if (m->piece >= 0)
            st = host_piece(u, m->piece, &h, b, err);
    }
    host_bufs_free(&h);
    return st;
}
