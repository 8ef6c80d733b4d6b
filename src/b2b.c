/* b2b.c — a B2B graph O = G(F(X*W1)*W2) as one kernel of two phases, or two fused kernels.
 *
 * The graphs are the pieces unfused.c cuts the B2B graph into at its GEMMs (one cut, shared with
 * the unfused path), each Φ -> plan -> Ψ as a single-GEMM graph:
 *
 *   piece 1: X*W1 and F, storing S = F(X*W1) [M, N1] in W2's dtype into a buffer the object
 *            owns (and the graph's outputs over N1, and the per-row values of F the second
 *            epilogue reads, f32 [M], e.g. tests/specs/b2b_rowstat.cf);
 *   piece 2: S*W2 and the second epilogue, which reads those [M] values as inputs.
 *
 * One kernel (src/device/cf_sm90_b2b.cuh): both pieces' generated files, each in a namespace of
 * its own, under a kernel whose CTAs take phase-1 and phase-2 tiles from one stream on one ring;
 * a phase-2 tile waits for its row block's S through counters in device memory.  It needs both
 * pieces planned alike (pingpong, the same tile and ring, every tile finished in its own epilogue,
 * no slices of K or hardware clusters, no reduction in G): the first piece is planned so, the
 * second at the first's tile.  Where that plan does not come out (a request against it, a row
 * wider than a row group at launch), the pieces run as two kernels, S through device memory.
 *
 * The unfused path rounds S the same way (its row kernel stores S in W2's dtype before the
 * second GEMM), so both paths, and the reference, agree on what S is.  A piece that recomputes
 * an [M, N] value from the other GEMM's f32 output (only the unfused path keeps it) is declined,
 * with the reason, and such graphs stay on the unfused path.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

struct cf_b2b {
    const cf_graph *g;
    cf_unfused *u;         /* the cut: the pieces' graphs, bindings and run-time buffers */
    cf_kernel *part[2];    /* piece i's fused kernel (a phase of the one kernel)          */
    cf_strbuf src, ptx;    /* the one kernel's, or both parts' one after the other        */
    char why_two[200];     /* why the pieces run as two kernels ("" for one)              */
    /* the one kernel */
    cf_rt_cubin cubin;
    bool compiled;
    int smem, threads;     /* its dynamic shared memory and block (cf_b2b_info)           */
    cf_rt_module module;
    cf_rt_func func;
    int max_ctas;          /* CTAs resident at once                                       */
    cf_rt_devptr ready;    /* per row block: S landed, S used (cf_sm90_b2b.cuh)           */
    size_t ready_bytes;
    cf_rt_devptr *retired; /* outgrown counters, freed with the object                    */
    int n_retired;
};

void cf_b2b_free(cf_b2b *b)
{
    if (!b)
        return;
    if (b->module)
        cf_rt_module_unload(b->module, NULL);
    if (b->ready)
        cf_rt_free(b->ready, NULL);
    for (int i = 0; i < b->n_retired; i++)
        cf_rt_free(b->retired[i], NULL);
    free(b->retired);
    cf_rt_cubin_free(&b->cubin);
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
    snprintf(t, sizeof t, "%s, B2B %s %d of 2: GEMM '%s' and its epilogue%s", title ? title : "<graph>",
             b->why_two[0] ? "kernel" : "phase", i + 1,
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

/* The request that plans the first piece for the one kernel: what req leaves open, chosen so. */
static cf_plan_request one_kernel_request(const cf_plan_request *req)
{
    cf_plan_request r = req ? *req : (cf_plan_request){0};
    r.schedule = r.schedule ? r.schedule : CF_SCHEDULE_PINGPONG;
    r.sync_finish = r.sync_finish ? r.sync_finish : 1;
    r.pair_tiles = r.pair_tiles ? r.pair_tiles : -1;
    r.multicast = r.multicast ? r.multicast : -1;
    r.split_k = r.split_k ? r.split_k : 1;
    r.reduce_mode = r.reduce_mode ? r.reduce_mode : CF_REDUCE_GLOBAL;
    return r;
}

/* Why piece i's plan p cannot be a phase of the one kernel (first: the first piece's), or NULL. */
static const char *phase_blocker(const cf_kernel *k, int i, const cf_plan *first)
{
    const cf_plan *p = cf_kernel_plan(k);
    /* F's row reductions tie a row group to N1's column tiles: N2's fewer tiles then fall unevenly
     * on its CTAs, and each phase-1 tile waits for its row's partials (docs/performance.md) */
    if (i == 0 && p->reductions > 0)
        return "its row reductions tie a row group to N1's tiles (one kernel ran 1.1-1.6x two kernels' time)";
    if (p->schedule != CF_SCHEDULE_PINGPONG)
        return "its schedule is not pingpong";
    if (p->late_finish || p->has_finisher)
        return "its tiles finish late";
    if (p->split_k > 1)
        return "it slices K";
    if (p->cluster_n > 1)
        return "it runs in hardware clusters";
    if (p->row_ctas > 1 && !p->red_global && p->reductions > 0)
        return "its row reductions go through DSMEM";
    if (cf_kernel_ir(k)->dual)
        return "it is a dual GEMM";
    if (i == 1 && p->reductions > 0)
        return "the second epilogue has row reductions";
    if (i == 1 && (p->bm != first->bm || p->bn != first->bn || p->stages != first->stages))
        return "the second GEMM's tile or ring differs from the first's";
    if (i == 1 && p->smem.static_bytes + first->smem.static_bytes +
                          (p->smem.dynamic_bytes > first->smem.dynamic_bytes ? p->smem.dynamic_bytes
                                                                             : first->smem.dynamic_bytes) >
                      (first->smem_limit ? first->smem_limit : CF_SMEM_OPTIN))
        return "both phases' shared memory does not fit";
    return NULL;
}

/* Both pieces, planned for the one kernel where they can be (see the top of the file), else
 * each as its own kernel from req. */
static cf_status build_parts(cf_b2b *b, const cf_plan_request *req, const int64_t *dims, const char *title,
                             cf_error *err)
{
    const cf_plan_request one = one_kernel_request(req);
    const char *why = NULL;
    char b1[96];
    cf_status st = build_part(b, 0, &one, dims, title, err);
    if (st == CF_OK && !(why = phase_blocker(b->part[0], 0, NULL))) {
        const cf_plan *p = cf_kernel_plan(b->part[0]);
        cf_plan_request second = one;
        second.block_m = p->bm, second.block_n = p->bn, second.stages = p->stages;
        second.cluster_n = 0, second.reduce_mode = 0;   /* G has no reductions: a row group is one CTA */
        st = build_part(b, 1, &second, dims, title, err);
        if (st == CF_OK)
            why = phase_blocker(b->part[1], 1, p);
        else
            why = "the second GEMM has no plan at the first's tile";
    } else if (st != CF_OK) {
        why = "the first GEMM has no plan for it";
    }
    if (!why)
        return CF_OK;
    const int at = b->part[1] ? 1 : 0;   /* the piece whose plan failed it */
    snprintf(b->why_two, sizeof b->why_two, "not one kernel: at GEMM '%s', %s",
             cf_graph_node_name(b->g, cf_unfused_gemm_at(b->u, at)->node, b1, sizeof b1), why);
    for (int i = 0; i < 2; i++) {
        cf_kernel_free(b->part[i]);
        b->part[i] = NULL;
    }
    cf_error_clear(err);
    st = CF_OK;
    for (int i = 0; i < 2 && st == CF_OK; i++)
        st = build_part(b, i, req, dims, title, err);
    return st;
}

/* Cuts piece i's generated file before its kernel: the rest goes into namespace ns. */
static void wrap_phase(cf_strbuf *sb, const char *ns, int i, const char *src)
{
    const char *cut = strstr(src, "#include \"cf_sm90_kernel.cuh\"");
    cf_sb_printf(sb, "// ---- phase %d ----\nnamespace %s {\n%.*s}  // namespace %s\n\n", i + 1, ns,
                 (int)(cut ? cut - src : (ptrdiff_t)strlen(src)), src, ns);
}

/* The one kernel's file: both pieces' schedules and epilogues, then the kernel over them. */
static void one_kernel_source(cf_b2b *b)
{
    cf_sb_puts(&b->src, "// comfuse: one B2B kernel, two GEMM phases (src/device/cf_sm90_b2b.cuh)\n"
                        "#include \"cf_trace.h\"\n\n");
    wrap_phase(&b->src, "cf_p1", 0, cf_kernel_source(b->part[0]));
    wrap_phase(&b->src, "cf_p2", 1, cf_kernel_source(b->part[1]));
    cf_sb_puts(&b->src, "#include \"cf_sm90_b2b.cuh\"\n");
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
    if (st == CF_OK)
        st = build_parts(b, req, dims ? dims : at, title, err);
    if (st == CF_OK && !b->why_two[0])
        one_kernel_source(b);
    for (int i = 0; i < 2 && st == CF_OK && b->why_two[0]; i++)
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
bool cf_b2b_one_kernel(const cf_b2b *b) { return b && !b->why_two[0]; }

/* The one kernel: NVRTC (through the cache), then each phase's configuration from its PTX. */
static cf_status compile_one(cf_b2b *b, cf_error *err)
{
    int v[2];
    cf_status st = cf_rt_compile(b->src.data, "cf_b2b_kernel", NULL, 0, &b->cubin, err);
    for (int i = 0; i < 2 && st == CF_OK; i++)
        st = cf_kernel_adopt(b->part[i], &b->cubin, i ? "cf_kernel_info_2" : "cf_kernel_info", err);
    if (st == CF_OK && (st = cf_ptx_ints(b->cubin.ptx, "cf_b2b_info", v, 2, err)) == CF_OK) {
        b->smem = v[0], b->threads = v[1];
        cf_sb_puts(&b->ptx, b->cubin.ptx);
    }
    return st;
}

cf_status cf_b2b_compile(cf_b2b *b, cf_error *err)
{
    cf_status st = CF_OK;
    if (b->compiled)
        return CF_OK;
    if (!b->why_two[0]) {
        st = compile_one(b, err);
    } else {
        for (int i = 0; i < 2 && st == CF_OK; i++)
            st = cf_kernel_compile(b->part[i], err);
        for (int i = 0; i < 2 && st == CF_OK; i++)
            cf_sb_printf(&b->ptx, "%s// ---- B2B kernel %d of 2 ----\n%s", i ? "\n" : "", i + 1,
                         cf_kernel_ptx(b->part[i]));
    }
    if (st == CF_OK && b->ptx.oom)
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    b->compiled = st == CF_OK;
    return st;
}

cf_status cf_b2b_prepare(cf_b2b *b, const int64_t *dims, cf_error *err)
{
    cf_status st = cf_b2b_compile(b, err);
    for (int i = 0; i < 2 && st == CF_OK && b->why_two[0]; i++)
        st = cf_kernel_prepare(b->part[i], dims, err);
    return st;
}

/* The pieces as two launches, S through device memory (each compiled on its own first). */
static cf_status launch_two(cf_b2b *b, const cf_launch_args *a, cf_error *err)
{
    cf_status st = CF_OK;
    for (int i = 0; i < 2 && st == CF_OK; i++) {
        cf_launch_args pa;
        if ((st = cf_unfused_piece_args(b->u, i, a, &pa, err)) == CF_OK)
            st = cf_kernel_launch(b->part[i], &pa, err);
    }
    return st;
}

static cf_status load_one(cf_b2b *b, cf_error *err)
{
    cf_status st = cf_rt_init(err);
    if (st == CF_OK)
        st = cf_rt_module_load(b->cubin.cubin, &b->module, err);
    if (st == CF_OK)
        st = cf_rt_module_get_func(b->module, "cf_b2b_kernel", &b->func, err);
    if (st == CF_OK)
        st = cf_rt_func_prepare(b->func, b->smem, 1, err);
    if (st == CF_OK)
        st = cf_rt_max_active_clusters(b->func, 1, b->threads, b->smem, &b->max_ctas, err);
    if (st == CF_OK && b->max_ctas < 1)
        st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "the B2B kernel (%d bytes of shared memory) does not fit on "
                       "this GPU", b->smem);
    if (st != CF_OK && b->module) {
        cf_rt_module_unload(b->module, NULL);
        b->module = 0;
    }
    return st;
}

/* The counters of `blocks` row blocks, zero (the kernel leaves them so); outgrown ones are kept
 * until the object is freed (a launch or a captured graph may still use them). */
static cf_status prepare_ready(cf_b2b *b, int64_t blocks, cf_rt_stream s, cf_error *err)
{
    const size_t need = (size_t)blocks * 8;
    if (need <= b->ready_bytes)
        return CF_OK;
    bool capturing = false;
    cf_status st = cf_rt_stream_capturing(s, &capturing, err);
    if (st == CF_OK && capturing)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "CUDA-graph capture of a B2B launch of %lld row blocks: "
                       "its counters are not allocated yet (launch it once before capture, at the largest M)",
                       (long long)blocks);
    cf_rt_devptr *r = st == CF_OK && b->ready ? realloc(b->retired, ((size_t)b->n_retired + 1) * sizeof *r) : NULL;
    if (st == CF_OK && b->ready && !r)
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    if (r)
        b->retired = r;
    cf_rt_devptr p = 0;
    const size_t bytes = need < 4096 ? 4096 : 2 * need;
    if (st == CF_OK && (st = cf_rt_malloc(&p, bytes, err)) == CF_OK &&
        (st = cf_rt_memset_d8_async(p, 0, bytes, s, err)) != CF_OK)
        cf_rt_free(p, NULL);
    if (st != CF_OK)
        return st;
    if (b->ready)
        b->retired[b->n_retired++] = b->ready;
    b->ready = p;
    b->ready_bytes = bytes;
    return CF_OK;
}

/* Whether the one kernel runs a's shape: the first phase's rows fit its row group, and TMA
 * addresses S in place (both phases use one S; a padded copy is for one kernel's side). */
static bool one_kernel_fits(const cf_b2b *b, const cf_launch_args *a)
{
    const cf_kernel *k = b->part[0];
    const cf_plan *p = cf_kernel_plan(k);
    const cf_ir *ir = cf_kernel_ir(k);
    const int64_t n1 = a->dims[ir->dim_n];
    return (ir->n_stages[0] <= 1 || n1 <= (int64_t)p->bn * p->row_ctas) &&
           (n1 * (int64_t)cf_dtype_size(cf_unfused_gemm_at(b->u, 1)->dtype)) % 16 == 0;
}

/* CTAs of a row group.  F's reductions fix it (the row's CTAs); without them, the fewest that let
 * whole groups, as many as fit and no more than row blocks, take the most of the GPU's CTAs
 * (each CTA then takes every c-th column tile of a row block in both phases). */
static int group_ctas(const cf_plan *p, const cf_ir *ir, int64_t blocks, int64_t tiles_n1, int resident)
{
    if (ir->n_stages[0] > 1)
        return p->row_ctas;
    int best = 1;
    int64_t best_used = 0;
    for (int c = 1; c <= 16 && c <= tiles_n1; c++) {
        const int64_t groups = resident / c < blocks ? resident / c : blocks, used = groups * c;
        if (used > best_used + resident / 16)   /* a larger group only for a clearly fuller GPU */
            best = c, best_used = used;
    }
    return best;
}

/* The one kernel: both phases' parameter blocks, the counters, a persistent grid of whole row
 * groups (cooperative: CTAs wait for each other). */
static cf_status launch_one(cf_b2b *b, const cf_launch_args *a, cf_error *err)
{
    _Alignas(64) unsigned char block[CF_KERNEL_PARAM_BYTES];
    size_t size[2], off = 0;
    cf_launch_args pa[2];
    cf_status st = CF_OK;
    for (int i = 0; i < 2 && st == CF_OK; i++) {   /* (piece args are valid until the next call) */
        if ((st = cf_unfused_piece_args(b->u, i, a, &pa[i], err)) != CF_OK)
            break;
        _Alignas(64) unsigned char part[CF_KERNEL_PARAM_BYTES];   /* TMA maps are encoded in place */
        if ((st = cf_kernel_pack(b->part[i], &pa[i], part, &size[i], err)) != CF_OK)
            break;
        if (off + size[i] + 16 > sizeof block)
            return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "B2B kernel parameter block over %zu bytes",
                             sizeof block);
        memcpy(block + off, part, size[i]);
        off += (size[i] + 63) / 64 * 64;   /* each phase's cf_gemm_args is 64-byte aligned */
    }
    if (st != CF_OK)
        return st;
    const cf_plan *p = cf_kernel_plan(b->part[0]);
    const cf_ir *ir = cf_kernel_ir(b->part[0]);
    const int64_t M = a->dims[ir->dim_m], tile_m = (int64_t)p->bm * (p->schedule == CF_SCHEDULE_COOPERATIVE ? 2 : 1);
    const int64_t blocks = (M + tile_m - 1) / tile_m;
    if ((st = prepare_ready(b, blocks, a->stream, err)) != CF_OK)
        return st;
    if (!b->module && (st = load_one(b, err)) != CF_OK)
        return st;
    const int64_t tiles_n1 = (a->dims[ir->dim_n] + p->bn - 1) / p->bn;
    const int c = group_ctas(p, ir, blocks, tiles_n1, b->max_ctas);
    const int32_t c32 = c;
    memcpy(block + off, &b->ready, 8);
    memcpy(block + off + 8, &c32, 4);
    int64_t groups = b->max_ctas / c;
    if (groups > blocks)
        groups = blocks;
    if (groups < 1)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "a row group of %d CTAs does not fit on this GPU at once "
                         "(%d resident)", c, b->max_ctas);
    cf_rt_launch_cfg cfg = {
        .grid = {(unsigned)(groups * c), 1, 1},
        .block = {(unsigned)b->threads, 1, 1},
        .cluster = {1, 1, 1},
        .dyn_smem = (unsigned)b->smem,
        .stream = a->stream,
        .cooperative = true,
    };
    void *params[] = {block};
    if ((st = cf_rt_launch(b->func, &cfg, params, err)) != CF_OK)
        return st;
    for (int i = 0; i < 2 && st == CF_OK; i++)   /* outputs written into padded copies, to the caller's */
        if ((st = cf_unfused_piece_args(b->u, i, a, &pa[i], err)) == CF_OK)
            st = cf_kernel_unpad_outputs(b->part[i], &pa[i], err);
    return st;
}

/* One launch, or where the one kernel does not run the shape, two on a->stream. */
cf_status cf_b2b_launch(cf_b2b *b, const cf_launch_args *a, cf_error *err)
{
    for (int d = 0; d < cf_graph_num_dims(b->g); d++)
        if (a->dims[d] < 1)
            return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "dim %s=%lld: every dim must be >= 1",
                             cf_graph_dim_name(b->g, d), (long long)a->dims[d]);
    if (cf_graph_num_params(b->g) && !a->params)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "runtime scalar '%s' has no value",
                         cf_graph_param_name(b->g, 0));
    cf_status st = cf_b2b_compile(b, err);
    if (st != CF_OK)
        return st;
    return !b->why_two[0] && one_kernel_fits(b, a) ? launch_one(b, a, err) : launch_two(b, a, err);
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
    const bool one = !b->why_two[0];
    cf_sb_puts(sb, one ? "B2B: one kernel of two phases, " : "B2B: two fused kernels, ");
    s_text(b, sb);
    if (one)
        cf_sb_puts(sb, " through L2 (a row block's phase-2 tiles wait for its S; rows wider than phase 1's row "
                       "group run as two kernels)\n");
    else
        cf_sb_printf(sb, " through global memory (%s)\n", b->why_two);
    for (int i = 0; i < 2; i++) {
        const cf_graph *pg = cf_unfused_piece_graph(b->u, i);
        char b1[96];
        cf_sb_printf(sb, "  %s %d: GEMM '%s' [%s,%s] and its epilogue -> ", one ? "phase" : "kernel", i + 1,
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
                             !strcmp(role, "row value") ? (one ? " [per row, for phase 2]" : " [per row, for kernel 2]")
                                                        : "");
        }
        cf_sb_puts(sb, "\n");
    }
}
