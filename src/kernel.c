/* kernel.c — the fused-kernel object: Φ + Ψ + NVRTC, then launches.
 *
 * cf_kernel_build lowers and generates source; cf_kernel_compile turns it
 * into a cubin through the cache (no GPU needed); cf_kernel_launch checks the
 * shapes and alignments, builds the TMA descriptors and the kernel's parameter
 * block, and launches on a persistent grid of thread-block clusters.
 */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

/* Indices of the kernel's exported configuration (cf_kernel_info in
 * src/device/cf_sm90.cuh). */
#define DEVICE_HEADER_VERSION 7 /* CF_SM90_VERSION this host code packs arguments for */

enum {
    INFO_VERSION, INFO_SMEM, INFO_BM, INFO_BN, INFO_TILE_M, INFO_STAGES, INFO_CLUSTER_N, INFO_B_NK,
    INFO_IN_F16, INFO_NUM_OUT, INFO_PINGPONG, INFO_THREADS, INFO_STG_CHUNKS, INFO_GROUP_M,
    INFO_A_BOX_ROWS, INFO_B_BOX, INFO_ROW_CTAS, INFO_RED_GLOBAL, INFO_NUM_RED, INFO_LATE_FINISH, INFO_OUT_BOX_ROWS,
    INFO_TIN_ARGS, INFO_SPLIT_K, INFO_COUNT
};

/* What a TMA descriptor encodes (the tensor's name only words errors): equal keys give equal
 * descriptors, so a launch copies the cached 128 bytes instead of calling cuTensorMapEncodeTiled
 * (host time in the driver, three or more times a launch). */
typedef struct tmap_key {
    uint64_t ptr, rows, cols, pitch;
    uint32_t box_rows, box_cols, dtype, swizzle;
} tmap_key;
_Static_assert(sizeof(tmap_key) == 48, "no padding: keys are compared with memcmp");

struct tmap {
    tmap_key key;
    bool valid;
    unsigned char desc[128];
};

/* cuBLASLt plans the wide path keeps (Python's M buckets call one kernel at several M) */
#define WIDE_BLAS_PLANS 4

struct cf_kernel {
    const cf_graph *graph;
    cf_ir *ir;
    cf_b2b *b2b;         /* a B2B graph: two fused kernels (b2b.c), and nothing below but
                            plan (its first kernel's) and compiled is used */
    cf_plan plan;        /* every launch decision (plan.c); Psi rendered it */
    cf_strbuf src;
    cf_rt_cubin cubin;
    bool compiled;
    const cf_rt_cubin *owner;   /* a phase of a B2B kernel: that kernel's cubin (cf_kernel_adopt) */
    int info[INFO_COUNT];
    /* loaded on the first launch */
    cf_rt_module module;
    cf_rt_func func;
    int max_clusters;
    /* Row partials exchanged through L2 (CF_RED_GLOBAL): 8-byte slots, and
     * the epoch / finished-CTA counters the kernel keeps; see cf_reduce.cuh and prepare_exchange. */
    cf_rt_devptr xchg, xsync;
    size_t xchg_bytes;     /* allocated                                                       */
    size_t xchg_high;      /* the most bytes any launch on these slots may have posted into   */
    size_t xchg_last;      /* the last launch's bytes, when every launch was issued here (no CUDA graph) */
    bool captured;         /* a launch was captured into a CUDA graph: replays post unseen     */
    int64_t prepared_m;    /* the largest M cf_kernel_prepare was given: the slots' first size */
    /* split_k: per tile, a counter of the K slices posted (zero between launches: the kernel
     * resets it), then the slices' partial accumulators (see prepare_split) */
    cf_rt_devptr split;
    int64_t split_tiles;   /* the tiles it holds counters and partials for */
    cf_rt_devptr *retired; /* outgrown slots, freed with the kernel (see grow_exchange)        */
    int n_retired;
    /* The TMA descriptor of each IR arg's last launch and what it encodes (see tensor_map). */
    struct tmap *maps;
    /* Rows wider than a cluster: our GEMM into an f32 buffer, then the row
     * kernel (rows.c) runs the epilogue; built on the first such launch. */
    /* By IR arg: the padded copy of a tensor TMA cannot address in place (see staging). */
    struct padded {
        cf_rt_devptr buf;
        size_t bytes;
    } *padded;
    struct {
        cf_graph *graph;     /* X, W -> C = X @ W as f32                          */
        cf_kernel *gemm;
        cf_rows *rows;
        cf_rt_devptr c;
        size_t c_bytes;
        struct {                   /* cuBLASLt's GEMM at the last few M, one workspace */
            cf_rt_cublas_plan *plan;
            int64_t m;
        } blas[WIDE_BLAS_PLANS];
        int blas_next;             /* the entry the next new M replaces */
        cf_rt_devptr blas_ws;
        bool no_blas;              /* cuBLASLt is missing or has no algorithm: ours only */
    } wide;
};

void cf_kernel_free(cf_kernel *k)
{
    if (!k)
        return;
    cf_b2b_free(k->b2b);
    if (k->module)
        cf_rt_module_unload(k->module, NULL);
    if (k->wide.c)
        cf_rt_free(k->wide.c, NULL);
    if (k->xchg)
        cf_rt_free(k->xchg, NULL);
    if (k->xsync)
        cf_rt_free(k->xsync, NULL);
    if (k->split)
        cf_rt_free(k->split, NULL);
    for (int i = 0; i < k->n_retired; i++)
        cf_rt_free(k->retired[i], NULL);
    free(k->retired);
    free(k->maps);
    for (int i = 0; k->padded && i < k->ir->n_args; i++)
        if (k->padded[i].buf)
            cf_rt_free(k->padded[i].buf, NULL);
    free(k->padded);
    cf_rows_free(k->wide.rows);
    for (int i = 0; i < WIDE_BLAS_PLANS; i++)
        cf_rt_cublas_plan_free(k->wide.blas[i].plan);
    if (k->wide.blas_ws)
        cf_rt_free(k->wide.blas_ws, NULL);
    cf_kernel_free(k->wide.gemm);
    cf_graph_free(k->wide.graph);
    cf_rt_cubin_free(&k->cubin);
    cf_sb_free(&k->src);
    cf_ir_free(k->ir);
    free(k);
}

/* A B2B graph's two kernels (b2b.c), planned at dims, or else at the first GEMM's M, N, K. */
static cf_status build_b2b(cf_kernel *k, const cf_plan_request *req, int64_t M, int64_t N, int64_t K,
                           const int64_t *dims, const char *title, cf_error *err)
{
    const int64_t mnk[3] = {M, N, K};
    cf_status st = cf_b2b_build(k->graph, req, dims, mnk, title, &k->b2b, err);
    if (st == CF_OK)
        k->plan = *cf_kernel_plan(cf_b2b_part(k->b2b, 0));
    return st;
}

/* Φ declined g (err says why).  A B2B graph whose second epilogue reads per-row values of the
 * first has no single B2B IR, but the split runs it (the first kernel stores those values); the
 * split's own reason, if it declines too, follows Φ's. */
static cf_status build_b2b_unlowered(cf_kernel *k, const cf_plan_request *req, int64_t M, int64_t N, int64_t K,
                                     const int64_t *dims, const char *title, cf_error *err)
{
    cf_error phi = err ? *err : (cf_error){0}, e2;
    if (!cf_b2b_shaped(k->graph))
        return CF_ERR_UNSUPPORTED;
    cf_status st = build_b2b(k, req, M, N, K, dims, title, &e2);
    if (st == CF_ERR_UNSUPPORTED)
        cf_errorf(err, st, (cf_loc){0}, "%s\n  and not as two fused kernels either: %s", phi.msg, e2.msg);
    else if (st != CF_OK && err)
        *err = e2;
    return st;
}

/* Lowers g, plans the kernel at M, N, K (0: unknown) or at dims (when not NULL) from req, and
 * renders the plan. */
static cf_status build_kernel(const cf_graph *g, const cf_plan_request *req, int64_t M, int64_t N, int64_t K,
                              const int64_t *dims, const char *title, cf_kernel **out, cf_error *err)
{
    cf_error_clear(err);
    if (!g || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_build: NULL argument");
    *out = NULL;
    cf_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    k->graph = g;
    cf_status st = cf_lower(g, &k->ir, err);
    if ((st == CF_OK && k->ir->n_gemms == 2) || st == CF_ERR_UNSUPPORTED) {
        st = st == CF_OK ? build_b2b(k, req, M, N, K, dims, title, err)
                         : build_b2b_unlowered(k, req, M, N, K, dims, title, err);
        if (st != CF_OK)
            cf_kernel_free(k);
        else
            *out = k;
        return st;
    }
    if (st == CF_OK && dims) {
        const cf_dim d[3] = {k->ir->dim_m, k->ir->dim_n, k->ir->dim_k};
        M = d[0] >= 0 ? dims[d[0]] : 0, N = d[1] >= 0 ? dims[d[1]] : 0, K = d[2] >= 0 ? dims[d[2]] : 0;
    }
    if (st == CF_OK)
        st = cf_plan_make(k->ir, M, N, K, NULL, req, &k->plan, err);
    if (st == CF_OK)
        st = cf_codegen(k->ir, &k->plan, title, &k->src, err);
    if (st == CF_OK && (!(k->padded = calloc((size_t)k->ir->n_args, sizeof *k->padded)) ||
                        !(k->maps = calloc((size_t)k->ir->n_args, sizeof *k->maps))))
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    if (st != CF_OK) {
        cf_kernel_free(k);
        return st;
    }
    *out = k;
    return CF_OK;
}

cf_status cf_kernel_build_req(const cf_graph *g, const cf_plan_request *req, int64_t M, int64_t N, int64_t K,
                              const char *title, cf_kernel **out, cf_error *err)
{
    return build_kernel(g, req, M, N, K, NULL, title, out, err);
}

cf_status cf_kernel_build_dims(const cf_graph *g, const cf_plan_request *req, const int64_t *dims,
                               const char *title, cf_kernel **out, cf_error *err)
{
    return build_kernel(g, req, 0, 0, 0, dims, title, out, err);
}

cf_status cf_kernel_build(const cf_graph *g, const cf_options *opt, const char *title, cf_kernel **out,
                          cf_error *err)
{
    cf_error_clear(err);
    if (!g || !out)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_build: NULL argument");
    /* the request the options make needs the IR (the plan's own choices at their shape) */
    cf_ir *ir = NULL;
    cf_status st = cf_lower(g, &ir, err);
    if (st == CF_ERR_UNSUPPORTED && cf_b2b_shaped(g))   /* the split plans each kernel itself */
        return cf_kernel_build_req(g, NULL, opt ? opt->m : 0, opt ? opt->n : 0, opt ? opt->k : 0, title, out, err);
    if (st != CF_OK)
        return st;
    const cf_plan_request req = cf_plan_request_of(ir, opt);
    cf_ir_free(ir);
    st = cf_kernel_build_req(g, &req, opt ? opt->m : 0, opt ? opt->n : 0, opt ? opt->k : 0, title, out, err);
    /* a dual GEMM whose rows outgrow the row group has no wide-row path: say so now, not after
     * NVRTC at the first launch (a caller can still fuse one of the GEMMs, or run unfused) */
    if (st == CF_OK && (*out)->ir->dual && (*out)->plan.wide) {
        st = cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0}, "cannot fuse: %s", (*out)->plan.fallback);
        cf_kernel_free(*out);
        *out = NULL;
    }
    return st;
}

const cf_ir *cf_kernel_ir(const cf_kernel *k) { return k ? k->ir : NULL; }
const cf_plan_request *cf_kernel_options(const cf_kernel *k) { return k ? &k->plan.req : NULL; }
const cf_plan *cf_kernel_plan(const cf_kernel *k) { return k ? &k->plan : NULL; }
const cf_b2b *cf_kernel_b2b(const cf_kernel *k) { return k ? k->b2b : NULL; }
const char *cf_kernel_source(const cf_kernel *k)
{
    return !k ? NULL : k->b2b ? cf_b2b_source(k->b2b) : k->src.data;
}
const char *cf_kernel_ptx(const cf_kernel *k)
{
    return !k || !k->compiled ? NULL : k->b2b ? cf_b2b_ptx(k->b2b) : k->cubin.ptx;
}

/* Reads the int array `symbol` (a byte-initialised .global array) out of the PTX into v[n]. */
cf_status cf_ptx_ints(const char *ptx, const char *symbol, int *v, int n, cf_error *err)
{
    char key[64];
    snprintf(key, sizeof key, "%s[", symbol);
    const char *p = ptx ? strstr(ptx, key) : NULL;
    const char *brace = p ? strchr(p, '{') : NULL;
    if (!brace || n > 64)
        return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0}, "compiled kernel has no %s in its PTX", symbol);
    unsigned char bytes[4 * 64] = {0};
    const char *q = brace + 1;
    for (int i = 0; i < 4 * n; i++) {
        char *end;
        long x = strtol(q, &end, 10);
        if (end == q)
            break;
        bytes[i] = (unsigned char)x;
        q = end;
        while (*q == ' ' || *q == ',')
            q++;
        if (*q == '}')
            break;
    }
    for (int i = 0; i < n; i++)
        v[i] = bytes[4 * i] | bytes[4 * i + 1] << 8 | bytes[4 * i + 2] << 16 | bytes[4 * i + 3] << 24;
    return CF_OK;
}

/* Reads k's configuration (cf_kernel_info, or `symbol` of a kernel that holds k's schedule
 * beside another's) out of the PTX, so it is known without a GPU. */
static cf_status parse_info(cf_kernel *k, const char *ptx, const char *symbol, cf_error *err)
{
    cf_status st = cf_ptx_ints(ptx, symbol, k->info, INFO_COUNT, err);
    if (st != CF_OK)
        return st;
    if (k->info[INFO_VERSION] != DEVICE_HEADER_VERSION || k->info[INFO_BM] != k->plan.bm || k->info[INFO_BN] != k->plan.bn)
        return cf_errorf(err, CF_ERR_INTERNAL, (cf_loc){0},
                         "kernel configuration mismatch (header version %d, BM %d, BN %d)", k->info[INFO_VERSION],
                         k->info[INFO_BM], k->info[INFO_BN]);
    return CF_OK;
}

cf_status cf_kernel_compile(cf_kernel *k, cf_error *err)
{
    cf_error_clear(err);
    if (!k)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_compile: NULL kernel");
    if (k->compiled)
        return CF_OK;
    if (k->b2b) {
        cf_status st = cf_b2b_compile(k->b2b, err);
        k->compiled = st == CF_OK;
        return st;
    }
    /* CF_TRACE=1 (diagnostics, bench): per-tile clock64 stamps, see cf_sm90.cuh; CF_TRACE=2 also
     * times the mainloop's waits */
    const char *trace_env = getenv("CF_TRACE");
    const bool trace = trace_env && *trace_env && strcmp(trace_env, "0");
    const char *const trace_opt[] = {trace && !strcmp(trace_env, "2") ? "-DCF_TRACE=2" : "-DCF_TRACE=1"};
    cf_status st = cf_rt_compile(k->src.data, "cf_gemm_kernel", trace ? trace_opt : NULL, trace ? 1 : 0,
                                 &k->cubin, err);
    if (st == CF_OK)
        st = parse_info(k, k->cubin.ptx, "cf_kernel_info", err);
    k->compiled = st == CF_OK;
    return st;
}

cf_status cf_kernel_adopt(cf_kernel *k, const cf_rt_cubin *owner, const char *symbol, cf_error *err)
{
    cf_status st = parse_info(k, owner->ptx, symbol, err);
    k->owner = st == CF_OK ? owner : NULL;
    return st;
}

/* A B2B kernel's: its first kernel's, with both compiles' time and cache state. */
static cf_status b2b_resources(const cf_b2b *b, cf_resources *r, cf_error *err)
{
    cf_resources r2;
    cf_status st = cf_kernel_resources(cf_b2b_part(b, 0), r, err);
    if (st == CF_OK)
        st = cf_kernel_resources(cf_b2b_part(b, 1), &r2, err);
    if (st == CF_OK && !cf_b2b_one_kernel(b)) {   /* one kernel: one compile, counted once */
        r->compile_ms += r2.compile_ms;
        r->cache_hit = r->cache_hit && r2.cache_hit;
    }
    return st;
}

cf_status cf_kernel_resources(const cf_kernel *k, cf_resources *r, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !r)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_resources: NULL argument");
    if (!k->compiled && !k->owner)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_resources: compile the kernel first");
    if (k->b2b)
        return b2b_resources(k->b2b, r, err);
    const cf_rt_cubin *c = k->compiled ? &k->cubin : k->owner;   /* a phase: the one kernel's figures */
    memset(r, 0, sizeof *r);
    r->threads = k->info[INFO_THREADS];
    r->registers = c->registers;
    r->spill_bytes = (c->spill_store_bytes > 0 ? c->spill_store_bytes : 0) +
                     (c->spill_load_bytes > 0 ? c->spill_load_bytes : 0);
    r->stack_bytes = c->stack_bytes > 0 ? c->stack_bytes : 0;
    r->smem_bytes = k->info[INFO_SMEM];
    r->static_smem_bytes = c->smem_bytes > 0 ? c->smem_bytes : 0;
    r->cluster_n = k->info[INFO_CLUSTER_N];
    r->block_m = k->info[INFO_BM];
    r->block_n = k->info[INFO_BN];
    r->stages = k->info[INFO_STAGES];
    r->resident_ctas = k->max_clusters * k->info[INFO_CLUSTER_N];
    r->row_ctas = k->info[INFO_ROW_CTAS];
    r->schedule = !k->info[INFO_PINGPONG] ? CF_SCHEDULE_COOPERATIVE
                  : k->info[INFO_THREADS] > 384 ? CF_SCHEDULE_FINISHER
                                                : CF_SCHEDULE_PINGPONG;
    r->reduce_mode = !k->info[INFO_NUM_RED] ? 0 : k->info[INFO_RED_GLOBAL] ? CF_REDUCE_GLOBAL
                                                                          : k->plan.reduce_mode;
    r->late_finish = k->info[INFO_LATE_FINISH] != 0;
    r->pair_tiles = k->plan.pair_tiles;
    r->gather_early = k->plan.gather_early;
    r->wgmma_serialized = c->wgmma_serialized;
    r->gelu_at_store = k->plan.gelu_at_store;
    r->split_k = k->info[INFO_SPLIT_K] > 1 ? k->info[INFO_SPLIT_K] : 1;
    r->cache_hit = c->cache == CF_RT_CACHE_HIT_DISK || c->cache == CF_RT_CACHE_HIT_MEMORY;
    r->compile_ms = c->compile_ms;
    snprintf(r->cache_path, sizeof r->cache_path, "%s", c->stored ? c->cache_path : "");
    snprintf(r->cache_note, sizeof r->cache_note, "%s", c->cache_note);
    return CF_OK;
}

/* ---- launching ------------------------------------------------------------ */

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* The parameter block cf_gemm_args of the device header, packed by the C
 * layout rules both compilers follow: three or more 128-byte TMA descriptors
 * (64-byte aligned; X, W, a dual GEMM's W2, the outputs, the tile inputs), output
 * pointers, M N K, output pitches, then the generated cf_epi_params. */
typedef struct args_layout {
    size_t tma_out, tma_in, xchg, out_ptr, mnk, out_ld, epi, size;
} args_layout;

static args_layout layout_of(const cf_ir *ir, int n_out, int n_tin, size_t *epi_size, size_t *epi_align)
{
    args_layout l;
    l.tma_out = ir->dual ? 384 : 256;
    l.tma_in = l.tma_out + 128 * (size_t)n_out;
    l.xchg = l.tma_in + 128 * (size_t)n_tin; /* xchg, xsync, split_ws, split_cnt */
    l.out_ptr = l.xchg + 32;
    l.mnk = l.out_ptr + 8 * (size_t)n_out;
    l.out_ld = l.mnk + 12;
    cf_cg_epi_layout(ir, NULL, epi_size, epi_align);
    l.epi = align_up(l.out_ld + 4 * (size_t)n_out, *epi_align);
    l.size = align_up(l.epi + *epi_size, 64);
    return l;
}

/* The generated cf_epi_params at epi: scalars, input and per-row output pointers (offsets as
 * many as the spec has args). */
static cf_status fill_epi(const cf_ir *ir, const cf_launch_args *a, unsigned char *epi, cf_error *err)
{
    size_t size, align, *offs = malloc(((size_t)ir->n_args + 1) * sizeof *offs);
    if (!offs)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_cg_epi_layout(ir, offs, &size, &align);
    cf_status st = CF_OK;
    for (int i = 0; i < ir->n_args && st == CF_OK; i++) {
        const cf_ir_arg *x = &ir->args[i];
        unsigned char *dst = epi + offs[i];
        if (x->kind == CF_ARG_SCALAR) {
            float v = (float)a->params[x->index];
            memcpy(dst, &v, 4);
        } else if (x->kind == CF_ARG_OUTPUT && cf_graph_output_info(ir->graph, x->index).rank == 1) {
            uint64_t ptr = a->outputs[x->index];
            memcpy(dst, &ptr, 8);
        } else if (x->kind == CF_ARG_VEC_N || x->kind == CF_ARG_VEC_M || x->kind == CF_ARG_TENSOR) {
            uint64_t ptr = a->inputs[x->index];
            if (ptr % cf_dtype_size(x->dtype))
                st = cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                           "input '%s': device pointer 0x%llx is not aligned to its %s elements", x->name,
                           (unsigned long long)ptr, cf_dtype_name(x->dtype));
            else
                memcpy(dst, &ptr, 8);
        }
    }
    free(offs);
    return st;
}

static cf_status load_module(cf_kernel *k, cf_error *err)
{
    cf_status st = cf_rt_init(err);
    if (st == CF_OK)
        st = cf_rt_module_load(k->cubin.cubin, &k->module, err);
    if (st == CF_OK)
        st = cf_rt_module_get_func(k->module, "cf_gemm_kernel", &k->func, err);
    if (st == CF_OK)
        st = cf_rt_func_prepare(k->func, k->info[INFO_SMEM], k->info[INFO_CLUSTER_N], err);
    if (st == CF_OK)
        st = cf_rt_max_active_clusters(k->func, k->info[INFO_CLUSTER_N], k->info[INFO_THREADS],
                                       k->info[INFO_SMEM], &k->max_clusters, err);
    if (st == CF_OK && k->max_clusters < 1)
        st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                       "no cluster of %d CTAs with %d bytes of shared memory fits on this GPU",
                       k->info[INFO_CLUSTER_N], k->info[INFO_SMEM]);
    if (st != CF_OK && k->module) {
        cf_rt_module_unload(k->module, NULL);
        k->module = NULL;
    }
    return st;
}

/* ---- the L2 exchange's slots --------------------------------------------------------------
 * 8 bytes per (row tile, reduction, rank, row), and the counters {epoch 1, 0 CTAs counted in}.  A
 * launch writes every slot of its own row tiles and reads only those.  A reader takes a slot for
 * its launch's post when it holds the launch's epoch (one partial: 32 bits, the same again only
 * 2^32 - 1 launches later) or a pair's 8-bit tag (epoch % 255 + 1: the same again 255 launches
 * later; cf_reduce.cuh).  Consecutive launches' tags differ, so what the previous launch posted is
 * never taken for a new post, but a post older than that could be.  Hence the invariant: after
 * any launch, every slot holds that launch's post or zero (no epoch or tag is 0), and a launch
 * that posts into fewer bytes than the last zeroes the rest first, on its stream.  That memset is
 * needed, not defensive: without it a later launch at a larger M reads the tail's pairs as its own
 * once in 255 launches (a wrong LayerNorm or softmax, no error).  It is done once per shrink, not
 * on every launch at the smaller M, while the host has issued every launch (xchg_last is then
 * exactly what the last one posted); a CUDA graph replays launches the host does not see, so once
 * one was captured every launch zeroes up to the most any launch has posted (xchg_high), the
 * order-independent form, and a captured launch records that memset in the graph. */

/* Room in k->retired for old (a buffer about to be replaced; none when 0), taken before the new
 * allocation so that, once it succeeds, retiring the old cannot fail. */
static cf_status reserve_retired(cf_kernel *k, cf_rt_devptr old, cf_error *err)
{
    if (!old)
        return CF_OK;
    cf_rt_devptr *r = realloc(k->retired, ((size_t)k->n_retired + 1) * sizeof *r);
    if (!r)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    k->retired = r;
    return CF_OK;
}

/* *p of *size bytes, or of need (less) where that many do not fit: a buffer sized ahead for the
 * prepared M falls back to what this launch needs.  *size is what was allocated. */
static cf_status malloc_or_need(cf_rt_devptr *p, size_t *size, size_t need, cf_error *err)
{
    cf_status st = cf_rt_malloc(p, *size, err);
    if (st != CF_OK && *size > need && (st = cf_rt_malloc(p, need, err)) == CF_OK) {
        cf_error_clear(err);
        *size = need;
    }
    return st;
}

/* Slots for at least bytes: also for the prepared M, and at least twice the old, so an M growing
 * launch by launch reallocates a few times at most.  The old slots are kept until the kernel is
 * freed: a launch may still read them, on any stream, and a captured graph points at them;
 * freeing them now would take a device synchronisation (a stream-ordered free is ordered after
 * this stream's work only).  The doubling bounds what is kept to less than the slots in use. */
static cf_status grow_exchange(cf_kernel *k, size_t bytes, size_t tile_bytes, cf_rt_stream stream, cf_error *err)
{
    const size_t tile_m = (size_t)k->info[INFO_TILE_M];
    size_t want = bytes;
    if (k->prepared_m > 0 && want < tile_bytes * (((size_t)k->prepared_m + tile_m - 1) / tile_m))
        want = tile_bytes * (((size_t)k->prepared_m + tile_m - 1) / tile_m);
    if (want < 2 * k->xchg_bytes)
        want = 2 * k->xchg_bytes;
    cf_status st = reserve_retired(k, k->xchg, err);
    if (st != CF_OK)
        return st;
    cf_rt_devptr p = 0;
    st = malloc_or_need(&p, &want, bytes, err);   /* the prepared or doubled size, else this launch's */
    if (st == CF_OK && (st = cf_rt_memset_d8_async(p, 0, want, stream, err)) != CF_OK)
        cf_rt_free(p, NULL);
    if (st != CF_OK)
        return st;
    if (k->xchg)
        k->retired[k->n_retired++] = k->xchg;
    k->xchg = p;
    k->xchg_bytes = want;
    k->xchg_high = k->xchg_last = 0;   /* all zero */
    return CF_OK;
}

static cf_status prepare_exchange(cf_kernel *k, int64_t M, int64_t tiles_m, cf_rt_stream stream, cf_error *err)
{
    const size_t tile_bytes = (size_t)k->info[INFO_NUM_RED] * (size_t)k->info[INFO_ROW_CTAS] *
                              (size_t)k->info[INFO_BM] * 8,
                 bytes = tile_bytes * (size_t)tiles_m;
    bool capturing = false;
    cf_status st = cf_rt_stream_capturing(stream, &capturing, err);
    if (st != CF_OK)
        return st;
    /* allocating (and the counters' synchronous upload) is not allowed in a capture */
    if (capturing && (bytes > k->xchg_bytes || !k->xsync))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "CUDA-graph capture of a launch at M=%lld: the kernel's L2 exchange is not allocated for "
                         "it yet (launch it once before capture, at the largest M or after cf_kernel_prepare "
                         "for that M)", (long long)M);
    k->captured = k->captured || capturing;
    if (bytes > k->xchg_bytes && (st = grow_exchange(k, bytes, tile_bytes, stream, err)) != CF_OK)
        return st;
    const size_t posted = k->captured ? k->xchg_high : k->xchg_last;   /* bytes that may hold posts */
    if (bytes < posted && (st = cf_rt_memset_d8_async(k->xchg + bytes, 0, posted - bytes, stream, err)) != CF_OK)
        return st;
    k->xchg_last = bytes;
    k->xchg_high = bytes > k->xchg_high ? bytes : k->xchg_high;
    if (!k->xsync) {
        const uint32_t init[2] = {1, 0};
        if ((st = cf_rt_malloc(&k->xsync, sizeof init, err)) != CF_OK)
            return st;
        if ((st = cf_rt_memcpy_htod(k->xsync, init, sizeof init, err)) != CF_OK) {
            cf_rt_free(k->xsync, NULL);
            k->xsync = 0;
            return st;
        }
    }
    return CF_OK;
}

/* split_k: the counters (a word per tile, 256-byte aligned block) and the partials of `tiles`
 * tiles: row_tiles (a row block's) times the row blocks of this launch, or of the M
 * cf_kernel_prepare was given if more, so that a capture after it finds them allocated.  New
 * memory is zeroed (the counters' invariant: zero between launches); outgrown memory is kept
 * until the kernel is freed, as the exchange's (a launch or a captured graph may still use it).
 * The counters' block is the allocation's (split_tiles'), the same for every launch on it: a
 * launch at a smaller M must not write partials over counters a larger one needs zero. */
static size_t split_counter_bytes(int64_t tiles) { return align_up((size_t)tiles * 4, 256); }

static cf_status prepare_split(cf_kernel *k, int64_t row_tiles, int64_t tiles_m, cf_rt_stream stream, cf_error *err)
{
    const int64_t tile_m = k->info[INFO_TILE_M];
    const int64_t prepared = (k->prepared_m + tile_m - 1) / tile_m, need = row_tiles * tiles_m;
    int64_t tiles = row_tiles * (tiles_m > prepared ? tiles_m : prepared);
    const size_t part = (size_t)k->info[INFO_TILE_M] * (size_t)k->info[INFO_BN] * 4 *
                      (size_t)(k->info[INFO_SPLIT_K] - 1) * (k->ir->dual ? 2 : 1);   /* a dual GEMM's two */
    if (need <= k->split_tiles)
        return CF_OK;
    bool capturing = false;
    cf_status st = cf_rt_stream_capturing(stream, &capturing, err);
    if (st != CF_OK)
        return st;
    if (capturing)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "CUDA-graph capture of a launch with %lld tiles: the K slices' partials are not allocated "
                         "for it yet (launch it once before capture, at the largest M)", (long long)tiles);
    if ((st = reserve_retired(k, k->split, err)) != CF_OK)
        return st;
    cf_rt_devptr p = 0;
    const size_t need_bytes = split_counter_bytes(need) + part * (size_t)need;
    size_t bytes = split_counter_bytes(tiles) + part * (size_t)tiles;
    if ((st = malloc_or_need(&p, &bytes, need_bytes, err)) != CF_OK)   /* the prepared M's, else this launch's */
        return st;
    if (bytes == need_bytes)
        tiles = need;
    if ((st = cf_rt_memset_d8_async(p, 0, split_counter_bytes(tiles), stream, err)) != CF_OK) {
        cf_rt_free(p, NULL);
        return st;
    }
    if (k->split)
        k->retired[k->n_retired++] = k->split;
    k->split = p;
    k->split_tiles = tiles;
    return CF_OK;
}

static int64_t dim_of(const cf_launch_args *a, cf_dim d) { return d >= 0 ? a->dims[d] : 0; }

/* Column tiles of a row group: a tile per CTA, or two with pair_tiles. */
static int64_t row_group_tiles(const cf_kernel *k)
{
    return (int64_t)k->info[INFO_ROW_CTAS] * (k->plan.pair_tiles ? 2 : 1);
}

bool cf_kernel_wide(const cf_kernel *k, int64_t n)
{
    return k && !k->b2b && k->compiled && k->ir->n_stages[0] > 1 && n > (int64_t)k->info[INFO_BN] * row_group_tiles(k);
}

/* The GEMM of the wide path: the same X and W, C = X @ W kept in f32. */
static cf_status build_wide(cf_kernel *k, int64_t M, int64_t N, int64_t K, cf_error *err)
{
    if (k->ir->dual)   /* the wide path's GEMM and row kernel take one weight */
        return cf_errorf(err, CF_ERR_UNSUPPORTED, (cf_loc){0},
                         "a dual GEMM's rows of N=%lld are wider than a row group of the fused kernel holds "
                         "(%d CTAs of %d columns), and it has no wide-row path", (long long)N, k->plan.row_ctas,
                         k->plan.bn);
    const cf_ir *ir = k->ir;
    cf_tensor_info x = cf_graph_input_info(k->graph, ir->args[0].index);
    cf_tensor_info w = cf_graph_input_info(k->graph, ir->args[1].index);
    cf_graph *g = cf_graph_new();
    if (!g)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cf_dim d[CF_MAX_DIMS];
    for (int i = 0; i < cf_graph_num_dims(k->graph); i++)
        d[i] = cf_graph_dim(g, cf_graph_dim_name(k->graph, i));
    cf_value X = cf_graph_input(g, x.name, x.dtype, 2, (cf_dim[]){d[x.dims[0]], d[x.dims[1]]});
    cf_value W = cf_graph_input(g, w.name, w.dtype, 2, (cf_dim[]){d[w.dims[0]], d[w.dims[1]]});
    cf_graph_output(g, "C", cf_graph_matmul(g, X, W), CF_F32);
    k->wide.graph = g;
    if (cf_graph_error(g)->status != CF_OK) {
        if (err)
            *err = *cf_graph_error(g);
        return cf_graph_error(g)->status;
    }
    cf_status st = cf_kernel_build_req(g, NULL, M, N, K, "wide-row GEMM", &k->wide.gemm, err);
    if (st == CF_OK)
        st = cf_kernel_compile(k->wide.gemm, err);
    if (st == CF_OK)
        st = cf_rows_build(ir, "wide-row epilogue", &k->wide.rows, err);
    return st;
}

cf_status cf_kernel_prepare(cf_kernel *k, const int64_t *dims, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !dims)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_prepare: NULL argument");
    if (k->b2b) {
        cf_status st = cf_b2b_prepare(k->b2b, dims, err);
        k->compiled = st == CF_OK;
        return st;
    }
    cf_status st = cf_kernel_compile(k, err);
    const cf_ir *ir = k->ir;
    const int64_t M = ir->dim_m >= 0 ? dims[ir->dim_m] : 0, N = ir->dim_n >= 0 ? dims[ir->dim_n] : 0,
                  K = ir->dim_k >= 0 ? dims[ir->dim_k] : 0;
    if (st == CF_OK && cf_kernel_wide(k, N) && !k->wide.gemm)
        st = build_wide(k, M, N, K, err);
    if (st == CF_OK && M > k->prepared_m)
        k->prepared_m = M;   /* the L2 exchange's first allocation covers it (grow_exchange) */
    return st;
}

/* The wide path's GEMM through cuBLASLt, which splits K when M is small (our GEMM ran 2-4x its
 * time at M = 64 over a vocabulary); false where it cannot run well (not loaded, no algorithm,
 * operands off the 256-byte alignment its heuristic assumes, a pitch not a multiple of 8, a new M
 * inside a CUDA-graph capture, whose plan would allocate), and our GEMM runs instead. */
static bool wide_blas(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, int64_t K, uint64_t x,
                      uint64_t w, uint64_t c)
{
    if (k->wide.no_blas || x % 256 || w % 256 || c % 256 || N % 8 || K % 8)
        return false;   /* (odd pitches take cuBLAS's slow kernels: ours with padded copies is faster) */
    cf_rt_cublas_plan *plan = NULL;
    for (int i = 0; i < WIDE_BLAS_PLANS && !plan; i++)
        if (k->wide.blas[i].plan && k->wide.blas[i].m == M)
            plan = k->wide.blas[i].plan;
    if (!plan) {   /* a new M: a plan over the kernel's one workspace (allocated once, outside a capture) */
        bool capturing = true;
        if (cf_rt_stream_capturing(a->stream, &capturing, NULL) != CF_OK || capturing)
            return false;
        if (!k->wide.blas_ws && cf_rt_malloc(&k->wide.blas_ws, cf_rt_cublas_workspace_bytes(), NULL) != CF_OK) {
            k->wide.blas_ws = 0;
            k->wide.no_blas = true;
            return false;
        }
        if (cf_rt_cublas_plan_create_ws(k->ir->args[0].dtype, CF_F32, M, N, K, k->ir->args[1].b_is_nk,
                                        k->wide.blas_ws, cf_rt_cublas_workspace_bytes(), &plan, NULL) != CF_OK) {
            k->wide.no_blas = true;
            return false;
        }
        const int e = k->wide.blas_next;
        k->wide.blas_next = (e + 1) % WIDE_BLAS_PLANS;
        cf_rt_cublas_plan_free(k->wide.blas[e].plan);   /* host objects only: the workspace stays */
        k->wide.blas[e].plan = plan;
        k->wide.blas[e].m = M;
    }
    return cf_rt_cublas_plan_run(plan, x, w, c, a->stream, NULL) == CF_OK;
}

/* Rows wider than one cluster cannot be reduced on chip: C goes through
 * device memory once (f32) and the row kernel runs the epilogue over it. */
static cf_status launch_wide(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, int64_t K, cf_error *err)
{
    cf_status st = CF_OK;
    if (!k->wide.gemm && (st = build_wide(k, M, N, K, err)) != CF_OK)
        return st;
    size_t bytes = (size_t)M * (size_t)N * 4;
    if (bytes > k->wide.c_bytes) {
        if (k->wide.c)
            cf_rt_free(k->wide.c, NULL);
        k->wide.c = 0;
        k->wide.c_bytes = 0;
        if ((st = cf_rt_malloc(&k->wide.c, bytes, err)) != CF_OK)
            return st;
        k->wide.c_bytes = bytes;
    }
    /* The GEMM's graph has just X and W (inputs 0 and 1), and the same dims. */
    uint64_t c = k->wide.c, xw[2] = {a->inputs[k->ir->args[0].index], a->inputs[k->ir->args[1].index]};
    if (!wide_blas(k, a, M, N, K, xw[0], xw[1], c)) {
        cf_launch_args ga = *a;
        ga.inputs = xw;
        ga.outputs = &c;
        ga.params = NULL;
        if ((st = cf_kernel_launch(k->wide.gemm, &ga, err)) != CF_OK)
            return st;
    }
    return cf_rows_launch(k->wide.rows, k->wide.c, M, N, a, a->stream, err);
}

/* ---- staging: tensors TMA cannot address in place ---------------------------------------
 * TMA needs a 16-byte aligned base and row pitch, which a 16-bit tensor with an odd K or N (a
 * vocabulary of 50257) or an offset view does not have.  Such a tensor goes through a padded
 * copy the kernel object owns: an operand is copied in before the launch and an output out
 * after it, on the launch's stream (a 2D copy, so CUDA-graph capture holds), and the kernel
 * runs on the copy with the same logical dims.  One extra pass over that tensor. */
static bool tma_addressable(uint64_t ptr, uint64_t cols, cf_dtype t)
{
    return ptr % 16 == 0 && (cols * cf_dtype_size(t)) % 16 == 0;
}

/* The padded copy of arg (rows x cols of dtype t) at *ptr: *ptr and *pitch become the copy's;
 * an input's data is copied in. */
static cf_status pad_tensor(cf_kernel *k, int arg, uint64_t *ptr, uint64_t rows, uint64_t cols, cf_dtype t,
                            bool input, cf_rt_stream s, uint64_t *pitch, cf_error *err)
{
    const size_t es = cf_dtype_size(t), row_bytes = (size_t)cols * es, padded = (row_bytes + 15) / 16 * 16;
    if (rows > SIZE_MAX / padded)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "tensor '%s': %llu rows of %zu bytes overflow a size",
                         k->ir->args[arg].name, (unsigned long long)rows, padded);
    struct padded *p = &k->padded[arg];
    cf_status st;
    if (p->bytes < rows * padded) {
        if (p->buf)
            cf_rt_free(p->buf, NULL);
        *p = (struct padded){0};
        if ((st = cf_rt_malloc(&p->buf, rows * padded, err)) != CF_OK)
            return st;
        p->bytes = rows * padded;
    }
    if (input && (st = cf_rt_memcpy_2d_async(p->buf, padded, *ptr, row_bytes, row_bytes, rows, s, err)) != CF_OK)
        return st;
    *ptr = p->buf;
    *pitch = padded / es;
    return CF_OK;
}

/* The operand or output arg as TMA sees it: in place, or its padded copy. */
static cf_status tma_view(cf_kernel *k, int arg, uint64_t *ptr, uint64_t rows, uint64_t cols, bool input,
                          cf_rt_stream s, uint64_t *pitch, cf_error *err)
{
    const cf_dtype t = k->ir->args[arg].dtype;
    *pitch = cols;
    return tma_addressable(*ptr, cols, t) ? CF_OK : pad_tensor(k, arg, ptr, rows, cols, t, input, s, pitch, err);
}

/* Outputs the kernel wrote into their padded copies, to the caller's tensors. */
static cf_status copy_out_padded(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, cf_error *err)
{
    for (int i = 0; i < k->ir->n_args; i++) {
        const cf_ir_arg *x = &k->ir->args[i];
        if (x->kind != CF_ARG_OUTPUT || cf_graph_output_info(k->graph, x->index).rank != 2 ||
            tma_addressable(a->outputs[x->index], (uint64_t)N, x->dtype))
            continue;
        const size_t row_bytes = (size_t)N * cf_dtype_size(x->dtype);
        cf_status st = cf_rt_memcpy_2d_async(a->outputs[x->index], row_bytes, k->padded[i].buf,
                                             (row_bytes + 15) / 16 * 16, row_bytes, (size_t)M, a->stream, err);
        if (st != CF_OK)
            return st;
    }
    return CF_OK;
}

/* Arg's tensor map (128B swizzled) into dst, a slot of the parameter block: the cached descriptor
 * when it encodes the same, else encoded now and cached.  A padded copy is keyed by the copy's
 * pointer and pitch, so a copy reallocated elsewhere (or a tensor newly padded) is encoded again. */
static cf_status tensor_map(cf_kernel *k, int arg, cf_dtype t, unsigned char *dst, uint64_t ptr, uint64_t rows,
                            uint64_t cols, uint64_t pitch, uint32_t box_rows, uint32_t box_cols, cf_error *err)
{
    struct tmap *m = &k->maps[arg];
    const tmap_key key = {ptr, rows, cols, pitch, box_rows, box_cols, (uint32_t)t, 128};
    if (m->valid && !memcmp(&m->key, &key, sizeof key)) {
        memcpy(dst, m->desc, sizeof m->desc);
        return CF_OK;
    }
    m->valid = false;   /* a failed encode leaves no entry */
    cf_status st = cf_rt_tensor_map_2d_named(dst, k->ir->args[arg].name, t, (const void *)(uintptr_t)ptr, rows, cols,
                                             pitch, box_rows, box_cols, 128, err);
    if (st == CF_OK) {
        memcpy(m->desc, dst, sizeof m->desc);
        m->key = key;
        m->valid = true;
    }
    return st;
}

/* [M,N] epilogue inputs the kernel fetches through its operand ring (CF_TIN_ARGS). */
static int tile_inputs(const cf_kernel *k)
{
    int n = 0;
    for (unsigned m = (unsigned)k->info[INFO_TIN_ARGS]; m; m &= m - 1)
        n++;
    return n;
}

/* Their tensor maps, in argument order: boxes of 64 columns x a scheduler tile's rows, 128B
 * swizzled (the layout cf_tin_stream reads). */
static cf_status map_tile_inputs(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, unsigned char *dst,
                                 cf_error *err)
{
    const unsigned mask = (unsigned)k->info[INFO_TIN_ARGS];
    for (int i = 0; i < k->ir->n_args && i < 32; i++) {
        if (!(mask >> i & 1u))
            continue;
        const cf_ir_arg *x = &k->ir->args[i];
        uint64_t ptr = a->inputs[x->index], ld;
        cf_status st = tma_view(k, i, &ptr, (uint64_t)M, (uint64_t)N, true, a->stream, &ld, err);
        if (st == CF_OK)
            st = tensor_map(k, i, x->dtype, dst, ptr, (uint64_t)M, (uint64_t)N, ld, (uint32_t)k->info[INFO_TILE_M], 64,
                            err);
        if (st != CF_OK)
            return st;
        dst += 128;
    }
    return CF_OK;
}

/* A dual GEMM's W2 (arg 2, Φ puts it there): shaped, laid out and boxed as W (tma_b2). */
static cf_status map_second_weight(cf_kernel *k, const cf_launch_args *a, uint64_t rows, uint64_t cols,
                                   unsigned char *dst, cf_error *err)
{
    const cf_ir_arg *W2 = &k->ir->args[2];
    CF_ASSERT(W2->kind == CF_ARG_GEMM2_B);
    uint64_t ptr = a->inputs[W2->index], ld;
    cf_status st = tma_view(k, 2, &ptr, rows, cols, true, a->stream, &ld, err);
    if (st == CF_OK)
        st = tensor_map(k, 2, W2->dtype, dst, ptr, rows, cols, ld, W2->b_is_nk ? (uint32_t)k->info[INFO_B_BOX] : 64, 64,
                        err);
    return st;
}

/* k's parameter block for a at M, N, K into block (CF_KERNEL_PARAM_BYTES): the TMA maps, the
 * output pointers and pitches, the epilogue's, and the L2 exchange's slots (prepared); the split
 * slices' pointers are the launch's.  Operands TMA cannot address are copied on a->stream. */
static cf_status pack_args(cf_kernel *k, const cf_launch_args *a, int64_t M, int64_t N, int64_t K,
                           unsigned char *block, args_layout *lp, cf_error *err)
{
    const cf_ir *ir = k->ir;
    const cf_graph *g = k->graph;
    for (int i = 0; i < g->n_params; i++)
        if (!a->params)
            return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "runtime scalar '%s' has no value",
                             cf_graph_param_name(g, i));
    int n_out = k->info[INFO_NUM_OUT];
    size_t epi_size, epi_align;
    args_layout l = layout_of(ir, n_out, tile_inputs(k), &epi_size, &epi_align);
    if (l.size > CF_KERNEL_PARAM_BYTES)   /* Φ rejects larger (cf_ir_param_bytes) */
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel parameter block of %zu bytes is too large",
                         l.size);
    *lp = l;
    memset(block, 0, l.size);
    const cf_ir_arg *A = &ir->args[0], *B = &ir->args[1];
    cf_dtype in_t = A->dtype;
    uint64_t pa = a->inputs[A->index], pb = a->inputs[B->index], lda, ldb;
    const uint64_t b_rows = B->b_is_nk ? (uint64_t)N : (uint64_t)K, b_cols = B->b_is_nk ? (uint64_t)K : (uint64_t)N;
    cf_status st;
    if ((st = tma_view(k, 0, &pa, (uint64_t)M, (uint64_t)K, true, a->stream, &lda, err)) != CF_OK ||
        (st = tma_view(k, 1, &pb, b_rows, b_cols, true, a->stream, &ldb, err)) != CF_OK)
        return st;
    st = tensor_map(k, 0, in_t, block, pa, (uint64_t)M, (uint64_t)K, lda, (uint32_t)k->info[INFO_A_BOX_ROWS], 64, err);
    if (st != CF_OK)
        return st;
    st = tensor_map(k, 1, in_t, block + 128, pb, b_rows, b_cols, ldb, B->b_is_nk ? (uint32_t)k->info[INFO_B_BOX] : 64,
                    64, err);
    if (st == CF_OK && ir->dual)
        st = map_second_weight(k, a, b_rows, b_cols, block + 256, err);
    if (st != CF_OK)
        return st;
    int o = 0;
    for (int i = 0; i < ir->n_args && o < n_out; i++) {
        const cf_ir_arg *x = &ir->args[i];
        if (x->kind != CF_ARG_OUTPUT || cf_graph_output_info(g, x->index).rank != 2)
            continue; /* per-row outputs are plain pointers in the epilogue struct */
        uint64_t ptr = a->outputs[x->index], ldo;
        if ((st = tma_view(k, i, &ptr, (uint64_t)M, (uint64_t)N, false, a->stream, &ldo, err)) != CF_OK)
            return st;
        uint32_t box_cols = (uint32_t)(128 / cf_dtype_size(x->dtype));
        st = tensor_map(k, i, x->dtype, block + l.tma_out + 128 * (size_t)o, ptr, (uint64_t)M, (uint64_t)N, ldo,
                        (uint32_t)k->info[INFO_OUT_BOX_ROWS], box_cols, err);
        if (st != CF_OK)
            return st;
        int32_t ld = (int32_t)ldo;
        memcpy(block + l.out_ptr + 8 * (size_t)o, &ptr, 8);
        memcpy(block + l.out_ld + 4 * (size_t)o, &ld, 4);
        o++;
    }
    if ((st = map_tile_inputs(k, a, M, N, block + l.tma_in, err)) != CF_OK)
        return st;
    int32_t mnk[3] = {(int32_t)M, (int32_t)N, (int32_t)K};
    memcpy(block + l.mnk, mnk, sizeof mnk);
    if ((st = fill_epi(ir, a, block + l.epi, err)) != CF_OK)
        return st;
    const int64_t tile_m = k->info[INFO_TILE_M], tiles_m = (M + tile_m - 1) / tile_m;
    const bool global = k->info[INFO_RED_GLOBAL]; /* emitted only for row groups of 2 or more */
    if (global && (st = prepare_exchange(k, M, tiles_m, a->stream, err)) != CF_OK)
        return st;
    /* xchg, xsync (then split_ws and split_cnt, the launch's) */
    uint64_t xptr[2] = {global ? k->xchg : 0, global ? k->xsync : 0};
    memcpy(block + l.xchg, xptr, sizeof xptr);
    return CF_OK;
}

static cf_status gemm_dims(const cf_kernel *k, const cf_launch_args *a, int64_t *M, int64_t *N, int64_t *K,
                           cf_error *err)
{
    const cf_ir *ir = k->ir;
    *M = dim_of(a, ir->dim_m), *N = dim_of(a, ir->dim_n), *K = dim_of(a, ir->dim_k);
    if (*M < 1 || *N < 1 || *K < 1 || *M > INT32_MAX || *N > INT32_MAX || *K > INT32_MAX)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0}, "M=%lld N=%lld K=%lld: every GEMM dim must be in [1, 2^31)",
                         (long long)*M, (long long)*N, (long long)*K);
    return CF_OK;
}

cf_status cf_kernel_pack(cf_kernel *k, const cf_launch_args *a, unsigned char *block, size_t *size, cf_error *err)
{
    int64_t M, N, K;
    args_layout l;
    cf_status st = gemm_dims(k, a, &M, &N, &K, err);
    if (st == CF_OK && (st = pack_args(k, a, M, N, K, block, &l, err)) == CF_OK)
        *size = l.size;
    return st;
}

cf_status cf_kernel_unpad_outputs(cf_kernel *k, const cf_launch_args *a, cf_error *err)
{
    int64_t M, N, K;
    cf_status st = gemm_dims(k, a, &M, &N, &K, err);
    return st == CF_OK ? copy_out_padded(k, a, M, N, err) : st;
}

cf_status cf_kernel_launch(cf_kernel *k, const cf_launch_args *a, cf_error *err)
{
    cf_error_clear(err);
    if (!k || !a || !a->dims || !a->inputs || !a->outputs)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_kernel_launch: NULL argument");
    cf_status st;
    if (!k->compiled && (st = cf_kernel_compile(k, err)) != CF_OK)
        return st;
    if (k->b2b)
        return cf_b2b_launch(k->b2b, a, err);
    const cf_ir *ir = k->ir;
    int64_t M, N, K;
    if ((st = gemm_dims(k, a, &M, &N, &K, err)) != CF_OK)
        return st;
    if (cf_kernel_wide(k, N))
        return launch_wide(k, a, M, N, K, err);
    if (!k->module && (st = load_module(k, err)) != CF_OK)
        return st;
    /* Persistent grid: as many row groups (of row_ctas CTAs, whole clusters) as fit at once,
     * no more than there are row-group tiles (the plan's grid, with the driver's residency). */
    int cl = k->info[INFO_CLUSTER_N], rc = k->info[INFO_ROW_CTAS];
    cf_plan at = k->plan;
    cf_plan_shape(ir, &at, M, N, K, NULL, k->max_clusters * cl);
    if (at.grid_ctas < 1)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                         "a row group of %d CTAs, times %d slices of K, does not fit on this GPU at once "
                         "(%d resident): fewer slices or wider tiles (fewer CTAs a row) would", rc,
                         at.split_k > 1 ? at.split_k : 1, k->max_clusters * cl);
    const bool split = k->info[INFO_SPLIT_K] > 1;
    /* a row block's tiles: the padded row's column tiles */
    if (split && (st = prepare_split(k, at.group_tiles / at.tiles_m * rc, at.tiles_m, a->stream, err)) != CF_OK)
        return st;
    _Alignas(64) unsigned char block[CF_KERNEL_PARAM_BYTES];
    args_layout l;
    if ((st = pack_args(k, a, M, N, K, block, &l, err)) != CF_OK)
        return st;
    uint64_t sptr[2] = {split ? k->split + split_counter_bytes(k->split_tiles) : 0, split ? k->split : 0};
    memcpy(block + l.xchg + 16, sptr, sizeof sptr);
    cf_rt_launch_cfg cfg = {
        .grid = {(unsigned)at.grid_ctas, 1, 1},
        .block = {(unsigned)k->info[INFO_THREADS], 1, 1},
        .cluster = {(unsigned)cl, 1, 1},
        .dyn_smem = (unsigned)k->info[INFO_SMEM],
        .stream = a->stream,
        .cooperative = k->info[INFO_RED_GLOBAL] || split, /* CTAs wait for each other: all must be resident */
    };
    void *params[] = {block};
    if ((st = cf_rt_launch(k->func, &cfg, params, err)) != CF_OK)
        return st;
    return copy_out_padded(k, a, M, N, err);
}

double cf_kernel_predict_us(const cf_kernel *k, int64_t M, int64_t N, int64_t K)
{
    if (k->b2b)   /* the second kernel's N2 is not among M, N, K: cf_b2b_predict_us */
        return 0;
    cf_plan at = k->plan;
    cf_device_facts dev = cf_device_facts_h200();
    if (k->module)   /* loaded: the driver's device and residency */
        cf_device_facts_query(&dev, NULL);
    cf_plan_shape(k->ir, &at, M, N, K, &dev, k->module ? k->max_clusters * k->info[INFO_CLUSTER_N] : 0);
    return at.predicted_us;
}

cf_status cf_kernel_global(const cf_kernel *k, const char *name, cf_rt_devptr *p, size_t *bytes, cf_error *err)
{
    if (!k->module)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel not loaded yet (launch it first)");
    return cf_rt_module_get_global(k->module, name, p, bytes, err);
}
