/* b2b.c — a B2B graph O = G(F(X*W1)*W2) as two fused kernels, S through global memory.
 *
 * There is no single B2B kernel yet (issue 31; the paper's on-chip form moves more bytes over the
 * cluster network than S through memory does, docs/design.md), so a B2B graph runs as two ordinary fused
 * kernels, each Φ -> plan -> Ψ -> NVRTC over a single-GEMM graph.  The graphs are the pieces
 * unfused.c cuts the B2B graph into at its GEMMs (one cut, shared with the unfused path):
 *
 *   launch 1: X*W1 and F, storing S = F(X*W1) [M, N1] in W2's dtype into a buffer the object
 *             owns (and the graph's outputs over N1, and the per-row values of F the second
 *             epilogue reads, f32 [M], e.g. tests/specs/b2b_rowstat.cf);
 *   launch 2: S*W2 and the second epilogue, which reads those [M] values as inputs.
 *
 * The unfused path rounds S the same way (its row kernel stores S in W2's dtype before the
 * second GEMM), so both paths, and the reference, agree on what S is.  The fused kernel's
 * accumulator replaces the unfused path's f32 GEMM buffer.  A piece that recomputes an [M, N]
 * value from the other GEMM's f32 output (only the unfused path keeps it) is declined, with the
 * reason, and such graphs stay on the unfused path.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

struct cf_b2b {
    const cf_graph *g;
    cf_unfused *u;         /* the cut: the pieces' graphs, bindings and run-time buffers */
    cf_kernel *part[2];    /* piece i's fused kernel                                     */
    cf_strbuf src, ptx;    /* both parts', one after the other                            */
};

void cf_b2b_free(cf_b2b *b)
{
    if (!b)
        return;
    cf_kernel_free(b->part[0]);
    cf_kernel_free(b->part[1]);
    cf_unfused_free(b->u);   /* after the kernels: they hold its piece graphs */
    cf_sb_free(&b->src);
    cf_sb_free(&b->ptx);
    free(b);
}

/* Whether the cut is B2B's: two GEMMs, the second's left operand computed after the first. */
static bool is_b2b_cut(const cf_unfused *u)
{
    return cf_unfused_num_gemms(u) == 2 && cf_unfused_gemm_at(u, 0)->a_input >= 0 &&
           cf_unfused_gemm_at(u, 1)->a_input < 0;
}

/* The cut must be the B2B one: piece i right after GEMM i, reading no GEMM's f32 output. */
static cf_status check_cut(const cf_b2b *b, cf_error *err)
{
    const cf_unfused *u = b->u;
    char b1[96], b2[96];
    if (!is_b2b_cut(u))
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0}, "not a B2B graph (GEMMs: %d; the second's left "
                         "operand must be computed from the first's output)", cf_unfused_num_gemms(u));
    if (cf_unfused_num_pieces(u) != 2 || cf_unfused_piece_gemm(u, 0) != 0 || cf_unfused_piece_gemm(u, 1) != 1)
        return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0}, "B2B split: the cut at the GEMMs is not two pieces "
                         "(%d GEMMs, %d pieces)", cf_unfused_num_gemms(u), cf_unfused_num_pieces(u));
    for (int i = 0; i < 2; i++) {
        cf_value v = cf_unfused_piece_reads_gemm(u, i);
        if (v >= 0)
            return cf_errorf(err, CF_ERR_UNSUPPORTED, b->g->nodes[v].loc,
                             "B2B as two fused kernels: the epilogue of GEMM '%s' reads the output of GEMM '%s' "
                             "over its columns, which neither kernel stores (run it on the unfused path)",
                             cf_graph_node_name(b->g, cf_unfused_gemm_at(u, i)->node, b1, sizeof b1),
                             cf_graph_node_name(b->g, v, b2, sizeof b2));
    }
    return CF_OK;
}

bool cf_b2b_shaped(const cf_graph *g)
{
    cf_unfused *u = NULL;
    const bool yes = cf_unfused_plan(g, &u, NULL) == CF_OK && is_b2b_cut(u);
    cf_unfused_free(u);
    return yes;
}

/* Part i's kernel, planned at its own GEMM's size (0: unknown). */
static cf_status build_part(cf_b2b *b, int i, const cf_plan_request *req, const int64_t *dims, const char *title,
                            cf_error *err)
{
    const cf_ir *pir = cf_unfused_piece_ir(b->u, i);
    int64_t mnk[3] = {0, 0, 0};
    const cf_dim d[3] = {pir->dim_m, pir->dim_n, pir->dim_k};
    for (int j = 0; j < 3; j++)
        mnk[j] = d[j] >= 0 && dims[d[j]] > 0 ? dims[d[j]] : 0;
    char t[512], b1[96];
    snprintf(t, sizeof t, "%s, B2B kernel %d of 2: GEMM '%s' and its epilogue%s", title ? title : "<graph>", i + 1,
             cf_graph_node_name(b->g, cf_unfused_gemm_at(b->u, i)->node, b1, sizeof b1),
             i == 0 ? ", S through global memory" : "");
    cf_status st = cf_kernel_build_req(cf_unfused_piece_graph(b->u, i), req, mnk[0], mnk[1], mnk[2], t, &b->part[i],
                                       err);
    if (st != CF_OK && err && !strstr(err->msg, "B2B")) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        cf_errorf(err, st, (cf_loc){0}, "B2B as two fused kernels, kernel %d (GEMM '%s'): %s", i + 1, b1, msg);
    }
    return st;
}

cf_status cf_b2b_build(const cf_graph *g, const cf_plan_request *req, const int64_t *dims, const int64_t *mnk,
                       const char *title, cf_b2b **out, cf_error *err)
{
    *out = NULL;
    int64_t at[CF_MAX_DIMS] = {0};
    cf_b2b *b = calloc(1, sizeof *b);
    if (!b)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    b->g = g;
    cf_status st = cf_unfused_plan(g, &b->u, err);
    if (st == CF_OK)
        st = check_cut(b, err);
    if (st == CF_OK && !dims) {   /* the first GEMM's sizes, where known */
        const cf_unfused_gemm *m = cf_unfused_gemm_at(b->u, 0);
        at[m->dim_m] = mnk ? mnk[0] : 0, at[m->dim_n] = mnk ? mnk[1] : 0, at[m->dim_k] = mnk ? mnk[2] : 0;
    }
    for (int i = 0; i < 2 && st == CF_OK; i++)
        st = build_part(b, i, req, dims ? dims : at, title, err);
    for (int i = 0; i < 2 && st == CF_OK; i++)
        cf_sb_printf(&b->src, "%s// ---- B2B kernel %d of 2 ----\n%s", i ? "\n" : "", i + 1,
                     cf_kernel_source(b->part[i]));
    if (st == CF_OK && b->src.oom)
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    if (st != CF_OK) {
        cf_b2b_free(b);
        return st;
    }
    *out = b;
    return CF_OK;
}

cf_kernel *cf_b2b_part(const cf_b2b *b, int i) { return b && i >= 0 && i < 2 ? b->part[i] : NULL; }
const char *cf_b2b_source(const cf_b2b *b) { return b->src.data; }
const char *cf_b2b_ptx(const cf_b2b *b) { return b->ptx.len ? b->ptx.data : NULL; }

cf_status cf_b2b_compile(cf_b2b *b, cf_error *err)
{
    cf_status st = CF_OK;
    for (int i = 0; i < 2 && st == CF_OK; i++)
        st = cf_kernel_compile(b->part[i], err);
    if (st == CF_OK && !b->ptx.len) {
        for (int i = 0; i < 2; i++)
            cf_sb_printf(&b->ptx, "%s// ---- B2B kernel %d of 2 ----\n%s", i ? "\n" : "", i + 1,
                         cf_kernel_ptx(b->part[i]));
        if (b->ptx.oom)
            st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    }
    return st;
}

cf_status cf_b2b_prepare(cf_b2b *b, const int64_t *dims, cf_error *err)
{
    cf_status st = cf_b2b_compile(b, err);
    for (int i = 0; i < 2 && st == CF_OK; i++)
        st = cf_kernel_prepare(b->part[i], dims, err);
    return st;
}

/* Launch 1 writes S (and the row values) into u's buffers, launch 2 reads them, on one stream. */
cf_status cf_b2b_launch(cf_b2b *b, const cf_launch_args *a, cf_error *err)
{
    for (int d = 0; d < cf_graph_num_dims(b->g); d++)
        if (a->dims[d] < 1)
            return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "dim %s=%lld: every dim must be >= 1",
                             cf_graph_dim_name(b->g, d), (long long)a->dims[d]);
    if (cf_graph_num_params(b->g) && !a->params)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "runtime scalar '%s' has no value",
                         cf_graph_param_name(b->g, 0));
    cf_status st = CF_OK;
    for (int i = 0; i < 2 && st == CF_OK; i++) {
        cf_launch_args pa;
        if ((st = cf_unfused_piece_args(b->u, i, a, &pa, err)) == CF_OK)
            st = cf_kernel_launch(b->part[i], &pa, err);
    }
    return st;
}

double cf_b2b_predict_us(const cf_b2b *b, const int64_t *dims)
{
    double us = 0;
    for (int i = 0; i < 2; i++) {
        const cf_ir *pir = cf_kernel_ir(b->part[i]);
        us += cf_kernel_predict_us(b->part[i], dims[pir->dim_m], dims[pir->dim_n], dims[pir->dim_k]);
    }
    return us;
}

/* "S [M, N1] bf16": the left operand of the second GEMM as the first kernel stores it. */
static void s_text(const cf_b2b *b, cf_strbuf *sb)
{
    const cf_unfused_gemm *m = cf_unfused_gemm_at(b->u, 1);
    cf_sb_printf(sb, "S [%s,%s] %s", cf_graph_dim_name(b->g, m->dim_m), cf_graph_dim_name(b->g, m->dim_k),
                 cf_dtype_name(m->dtype));
}

void cf_b2b_describe(const cf_b2b *b, cf_strbuf *sb)
{
    cf_sb_puts(sb, "B2B: two fused kernels, ");
    s_text(b, sb);
    cf_sb_puts(sb, " through global memory (a single B2B kernel, S kept in L2, is planned: docs/design.md)\n");
    for (int i = 0; i < 2; i++) {
        const cf_graph *pg = cf_unfused_piece_graph(b->u, i);
        char b1[96];
        cf_sb_printf(sb, "  kernel %d: GEMM '%s' [%s,%s] and its epilogue -> ", i + 1,
                     cf_graph_node_name(b->g, cf_unfused_gemm_at(b->u, i)->node, b1, sizeof b1),
                     cf_graph_dim_name(b->g, cf_unfused_gemm_at(b->u, i)->dim_m),
                     cf_graph_dim_name(b->g, cf_unfused_gemm_at(b->u, i)->dim_n));
        for (int o = 0; o < cf_graph_num_outputs(pg); o++) {
            cf_tensor_info t = cf_graph_output_info(pg, o);
            const char *role = cf_unfused_piece_output_role(b->u, i, o);
            cf_sb_puts(sb, o ? ", " : "");
            if (!strcmp(role, "operand"))
                s_text(b, sb);
            else
                cf_sb_printf(sb, "%s %s%s", t.name, cf_dtype_name(t.dtype),
                             !strcmp(role, "row value") ? " [per row, for kernel 2]" : "");
        }
        cf_sb_puts(sb, "\n");
    }
}
