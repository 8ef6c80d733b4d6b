/* cli.c — `comfuse explain | emit | compile | run | bench`. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: comfuse <command> [options] SPEC.cf\n"
    "\n"
    "Fuses a GEMM with the epilogue that follows it (elementwise ops, row\n"
    "reductions such as LayerNorm, RMSNorm, Softmax) into one Hopper kernel.\n"
    "\n"
    "commands:\n"
    "  explain SPEC          print the Fusion Spec IR (stages, nodes, edges, bypasses)\n"
    "                        and the kernel's plan with its predicted time\n"
    "  emit SPEC             print the generated CUDA source of the fused kernel\n"
    "                        (--unfused: of the unfused path's row kernel)\n"
    "  compile SPEC          compile the kernel (NVRTC, sm_90a) into the cache; no GPU needed\n"
    "  run SPEC --shape ...  run on the GPU; --check compares with the float64 reference\n"
    "  bench SPEC --shape .. time the fused kernel beside cuBLAS doing the GEMM alone\n"
    "                        and the unfused path (cuBLAS GEMM, then a row kernel)\n"
    "\n"
    "`comfuse <command> --help` describes each command.  Exit status: 0 on\n"
    "success, 1 on an error, 2 on bad usage (kernel options included), 3 when the spec is outside what\n"
    "comfuse can fuse (fall back to unfused execution), 4 when a check fails.\n";

static const char explain_usage[] =
    "usage: comfuse explain SPEC.cf\n"
    "\n"
    "Parses SPEC, lowers it to the Fusion Spec IR and prints it: the runtime\n"
    "parameter table (A), then for each GEMM's epilogue its stages (one per\n"
    "row reduction, nested as the reduction's PostOp), each node with its\n"
    "category (accumulator, broadcast, compute, reduction, placeholder, store,\n"
    "matmul), shape, operands and edges, and the values carried from one stage\n"
    "to the next (bypass).  Then the plan (src/plan.c): every launch decision,\n"
    "one a line, and with --shape the grid and the cost model's predicted time;\n"
    "then the fused kernel's resources: registers, spills, shared memory, cluster\n"
    "shape (compiled with NVRTC for the kernel options below, chosen from --shape\n"
    "when given).  A B2B graph runs, until there is a single B2B kernel, as two\n"
    "fused kernels with S through device memory: both plans are printed.  Needs\n"
    "no GPU.\n\n";

static const char emit_usage[] =
    "usage: comfuse emit [kernel options] [--unfused] SPEC.cf\n"
    "\n"
    "Prints the CUDA C source of the fused kernel that Ψ generates for SPEC:\n"
    "the epilogue parameter struct and the epilogue, over the hand-written\n"
    "sm_90a mainloop of src/device/cf_sm90.cuh.  --unfused prints instead the\n"
    "unfused path's row kernels (cf_rows_kernel: the epilogue over a GEMM output\n"
    "read from memory, a cluster of CTAs per row; one after each GEMM with an epilogue).\n"
    "Needs no GPU.\n\n";

static const char compile_usage[] =
    "usage: comfuse compile [kernel options] [--ptx] [--unfused] SPEC.cf\n"
    "\n"
    "Generates the kernel and compiles it with NVRTC for sm_90a into the\n"
    "kernel cache ($CF_CACHE_DIR, else $XDG_CACHE_HOME/comfuse), then prints\n"
    "its resource use: registers, spills, shared memory, cluster shape.\n"
    "--ptx also prints the PTX.  --unfused compiles the unfused path's row\n"
    "kernels instead (what `run --unfused` loads).  Needs NVRTC, not a GPU.\n\n";

static const char run_usage[] =
    "usage: comfuse run --shape D=n,... [--check] [--unfused] [--rows R] [--seed S]\n"
    "                   [--param NAME=VALUE]... [kernel options] SPEC.cf\n"
    "\n"
    "Runs the fused kernel on the GPU with fresh random inputs and outputs\n"
    "poisoned with NaN, three times: on other inputs over all M rows, then over\n"
    "M/2, then on the real inputs into re-poisoned outputs (the launch checked:\n"
    "no state a kernel keeps between launches may leak into it).  --check\n"
    "compares every element of the checked rows\n"
    "with the float64 CPU reference and prints the max and relative Frobenius\n"
    "errors (pass: <= 1e-2 for 16-bit outputs, 2e-3 for f32; non-finite values\n"
    "must match).  All rows are checked unless --rows R asks for an even sample\n"
    "of R rows (each output row depends only on its own input rows).\n"
    "--unfused runs (and checks) the unfused path instead: cuBLASLt writes each\n"
    "GEMM's output to an f32 buffer, and after each GEMM a row kernel runs the\n"
    "epilogue over it (carried values through an f32 scratch buffer; B2B's\n"
    "S = F(X*W1) stored in W2's dtype for the second GEMM).  It runs every spec\n"
    "with one or two GEMMs, two over one X (SwiGLU) included.  Without it, a\n"
    "spec the fused kernel cannot take yet exits with status 3.\n\n";

static const char bench_usage[] =
    "usage: comfuse bench --shape D=n,... [--iters N] [kernel options] SPEC.cf\n"
    "\n"
    "Times the fused kernel beside cuBLASLt doing the GEMMs alone and beside the\n"
    "unfused path (cuBLASLt GEMMs, then the row kernels, timed together), in the\n"
    "same process, launch by launch in turns so clock drift cancels (median of N\n"
    "event-timed launches each after a warm-up, L2 flushed before each), and\n"
    "prints TFLOP/s, GB/s and the ratios to cuBLAS and to the physical floor\n"
    "max(FLOPs / 790 TFLOP/s, bytes / 4.3 TB/s).  The ratio to cuBLAS is the\n"
    "median over turns of the two launches' ratio (one clock state per turn: the\n"
    "card runs faster for its first launches after idle).\n"
    "A path comfuse cannot build for the spec is reported as not available.\n"
    "The last line, BENCH<TAB>spec<TAB>shape<TAB>fused_ms<TAB>cublas_ms<TAB>floor_ms\n"
    "<TAB>unfused_ms<TAB>fused/cublas<TAB>unfused/cublas ('-' for a path not\n"
    "available), is for scripts.  CF_BENCH_SAMPLES=1 also prints every launch's\n"
    "time (SAMPLE<TAB>implementation<TAB>turn<TAB>ms; 0 is cuBLAS).\n\n";

/* Builds the kernel, and with compile also compiles what a launch at the shape runs; frees it
 * on failure. */
/* The kernel the plan makes of o's request at o's shape. */
static cf_status build_planned(const cli_opts *o, const cf_graph *g, cf_kernel **k, cf_error *err)
{
    return cf_kernel_build_dims(g, &o->kopt, o->have_shape ? o->dims : NULL, o->spec, k, err);
}

cf_status cli_build_kernel(const cli_opts *o, const cf_graph *g, bool compile, cf_kernel **k, cf_error *err)
{
    cf_status st = build_planned(o, g, k, err);
    if (st == CF_OK && o->stages_asked && cf_kernel_options(*k)->stages != o->stages_asked)
        st = cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                       "--stages %d: this plan fits at most %d stages in shared memory", o->stages_asked,
                       cf_kernel_options(*k)->stages);
    if (st == CF_OK && compile)   /* with a shape, exactly the kernels run and bench launch there */
        st = o->have_shape ? cf_kernel_prepare(*k, o->dims, err) : cf_kernel_compile(*k, err);
    if (st == CF_OK && compile)
        cli_note_kernel(o, *k);
    if (st != CF_OK) {
        cf_kernel_free(*k);
        *k = NULL;
    }
    return st;
}

/* Builds (and optionally compiles) the kernel; prints errors. */
static cf_status make_kernel(const cli_opts *o, const cf_graph *g, bool compile, cf_kernel **k)
{
    cf_error err;
    cf_status st = cli_build_kernel(o, g, compile, k, &err);
    if (st != CF_OK)
        fprintf(stderr, "comfuse: %s\n", err.msg);
    return st;
}

/* `emit --unfused`: the row kernels of the unfused path, one after each GEMM
 * that has an epilogue (no NVRTC, no GPU). */
static int emit_unfused(const cf_graph *g, const cli_opts *o)
{
    cf_unfused *u = NULL;
    cf_error err;
    cf_status st = cf_unfused_plan(g, &u, &err);
    for (int i = 0; st == CF_OK && i < cf_unfused_num_pieces(u); i++) {
        cf_strbuf src = {0};
        char t[512], b1[96];
        snprintf(t, sizeof t, "%s, the row kernel after GEMM '%s'", o->spec,
                 cf_graph_node_name(g, cf_unfused_gemm_at(u, cf_unfused_piece_gemm(u, i))->node, b1, sizeof b1));
        if ((st = cf_rows_generate(cf_unfused_piece_ir(u, i), t, &src, &err)) == CF_OK)
            printf("%s%s", i ? "\n" : "", src.data);
        cf_sb_free(&src);
    }
    if (st != CF_OK)
        fprintf(stderr, "comfuse emit: %s\n", err.msg);
    cf_unfused_free(u);
    return cli_exit_code(st);
}

/* `compile --unfused`: the unfused path's row kernels into the cache (NVRTC, no GPU). */
static int compile_unfused(const cf_graph *g, const cli_opts *o)
{
    cf_unfused *u = NULL;
    cf_error err;
    cf_status st = cf_unfused_build(g, o->spec, &u, &err);
    if (st != CF_OK) {
        fprintf(stderr, "comfuse compile: %s\n", err.msg);
        return cli_exit_code(st);
    }
    printf("compiled %s for sm_90a: the unfused path, %d cuBLASLt GEMM%s and %d row kernel%s\n", o->spec,
           cf_unfused_num_gemms(u), cf_unfused_num_gemms(u) == 1 ? "" : "s", cf_unfused_num_pieces(u),
           cf_unfused_num_pieces(u) == 1 ? "" : "s");
    for (int i = 0; i < cf_unfused_num_pieces(u); i++) {
        const cf_rt_cubin *c = cf_rows_cubin(cf_unfused_piece_rows(u, i));
        char b1[96];
        printf("  after GEMM '%s': %s in %.0f ms, %d registers/thread, cubin: %s\n",
               cf_graph_node_name(g, cf_unfused_gemm_at(u, cf_unfused_piece_gemm(u, i))->node, b1, sizeof b1),
               c->cache == CF_RT_CACHE_HIT_DISK || c->cache == CF_RT_CACHE_HIT_MEMORY ? "cache hit" : "NVRTC",
               c->compile_ms, c->registers, c->cache_path[0] ? c->cache_path : "(not cached)");
    }
    cf_unfused_free(u);
    return 0;
}

const char *cli_layout_text(const cf_resources *r, char *buf, size_t n)
{
    static const char *const how[] = {"", "DSMEM peer-to-peer", "DSMEM via rank 0", "L2"};
    int len = snprintf(buf, n, "%s, cluster %dx1",
                       r->schedule == CF_SCHEDULE_COOPERATIVE ? "cooperative (one tile of 2 x block_m rows)"
                       : r->schedule == CF_SCHEDULE_FINISHER  ? "pingpong + a finisher warpgroup"
                                                              : "pingpong",
                       r->cluster_n);
    if (r->split_k > 1 && len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, ", K in %d slices", r->split_k);
    if (r->reduce_mode && r->row_ctas > 1 && len > 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, ", row reductions over %d CTAs%s through %s%s", r->row_ctas,
                 r->pair_tiles ? " of two column tiles each" : "", how[r->reduce_mode],
                 !r->late_finish    ? ""
                 : r->gather_early ? ", tiles finished late (their gather loaded as the next mainloop ends)"
                                   : ", tiles finished late");
    return buf;
}

void cli_note_kernel(const cli_opts *o, const cf_kernel *k)
{
    cf_resources r;
    if (!k || cf_kernel_resources(k, &r, NULL) != CF_OK)
        return;
    /* Ψ takes a finisher only where tiles finish late; elsewhere the kernel is PingPong's */
    if (o->schedule_asked == CF_SCHEDULE_FINISHER && r.schedule != CF_SCHEDULE_FINISHER)
        fprintf(stderr,
                "comfuse: note: --schedule finisher does not apply to this kernel, which runs pingpong: a "
                "finisher warpgroup takes tiles that finish late (row reductions through L2 over 2 or more "
                "CTAs, no --sync-finish, room to park a tile, and at most two reductions or LayerNorm then "
                "softmax with merged exchanges)\n");
    /* right answers, 30-60 % slower: easy to miss without a warning (docs/performance.md,
     * "Serialised wgmma") */
    if (r.wgmma_serialized)
        fprintf(stderr, "comfuse: WARNING: ptxas serialised the wgmma pipeline of this kernel (C7515): every "
                        "wgmma waits for the previous one\n");
}

/* The plan of k (a single-GEMM kernel) and its resources (NVRTC; no GPU). */
static void print_kernel(const cli_opts *o, cf_kernel *k)
{
    cf_error err;
    cf_resources r;
    cf_strbuf sb = {0};
    const cf_plan *p = cf_kernel_plan(k);
    cf_plan_format(p, &sb);
    fputs(sb.data ? sb.data : "", stdout);
    cf_sb_free(&sb);
    cf_plan best;
    if (p->m && p->rules_us <= 0 &&
        cf_plan_model_choice(cf_kernel_ir(k), p->m, p->n, p->k, NULL, &best, &err) == CF_OK &&
        (best.bm != p->bm || best.bn != p->bn || best.row_ctas != p->row_ctas || best.pair_tiles != p->pair_tiles))
        printf("model's choice (not taken: the rules' class, or under 10%% less time): tile %dx%d, row "
               "group %d CTAs%s: predicted %.1f us\n", best.bm, best.bn, best.row_ctas,
               best.pair_tiles ? " of two tiles" : "", best.predicted_us);
    fflush(stdout);
    cf_status st = cf_kernel_compile(k, &err);
    if (st == CF_OK)
        st = cf_kernel_resources(k, &r, &err);
    if (st == CF_OK)
        cli_note_kernel(o, k);
    if (st != CF_OK) {
        printf("fused kernel: none (%s)\n", err.msg);
    } else {
        char lay[256];
        printf("fused kernel (%s): tile %dx%d per consumer warpgroup, %d stages, %s, %d threads\n",
               o->have_shape ? o->shape_text : "no --shape: default options", r.block_m, r.block_n, r.stages,
               cli_layout_text(&r, lay, sizeof lay), r.threads);
        printf("  registers %d/thread at launch (the consumer warpgroups raise theirs with setmaxnreg), "
               "spills %d bytes, stack frame %d bytes\n", r.registers, r.spill_bytes, r.stack_bytes);
        printf("  shared memory %d bytes dynamic (operand ring, output staging, barriers) + %d static "
               "(reduction exchange)\n", r.smem_bytes, r.static_smem_bytes);
        if (r.gelu_at_store)
            printf("  GELU of %d output%s computed by its store in packed 16-bit math (bf16: rel. error "
                   "~2.8e-3, f32 GELU ~1.7e-3)\n", r.gelu_at_store, r.gelu_at_store > 1 ? "s" : "");
    }
}

/* A B2B kernel: what it is, then each of its two kernels' plan and resources. */
static void print_b2b(const cli_opts *o, const cf_kernel *k)
{
    cf_strbuf sb = {0};
    cf_b2b_describe(cf_kernel_b2b(k), &sb);
    fputs(sb.data ? sb.data : "", stdout);
    cf_sb_free(&sb);
    for (int i = 0; i < 2; i++) {
        const cf_kernel *p = cf_b2b_part(cf_kernel_b2b(k), i);
        printf("---- B2B %s %d of 2 ----\n", cf_b2b_one_kernel(cf_kernel_b2b(k)) ? "phase" : "kernel", i + 1);
        if (!cf_kernel_ir(k))   /* no B2B IR was printed: each kernel's own */
            cf_ir_print(cf_kernel_ir(p), stdout);
        print_kernel(o, cf_b2b_part(cf_kernel_b2b(k), i));
    }
}

/* The plan and resources of the kernel(s) Ψ makes for the spec (NVRTC; no GPU). */
static void print_resources(const cli_opts *o, const cf_graph *g)
{
    cf_kernel *k = NULL;
    cf_error err;
    if (build_planned(o, g, &k, &err) != CF_OK)
        printf("fused kernel: none (%s)\n", err.msg);
    else if (cf_kernel_b2b(k))
        print_b2b(o, k);
    else
        print_kernel(o, k);
    cf_kernel_free(k);
}

static int cmd_explain(int argc, char **argv)
{
    cli_opts o;
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    int rc = cli_parse_opts(argc, argv, explain_usage, &o, &g, NULL);
    if (rc == 0) {
        cf_error err;
        cf_status st = cf_lower(g, &ir, &err);
        if (st == CF_ERR_UNSUPPORTED && cf_b2b_shaped(g)) {   /* b2b.c may still run it as two kernels */
            printf("Fusion Spec IR: none for the whole B2B graph (%s)\n", err.msg);
            fflush(stdout);
            print_resources(&o, g);
        } else if (st != CF_OK) {
            fprintf(stderr, "comfuse: %s\n", err.msg);
            rc = cli_exit_code(st);
        } else {
            cf_ir_print(ir, stdout);
            fflush(stdout);
            print_resources(&o, g);
        }
    }
    cf_ir_free(ir);
    cli_opts_free(&o);
    cf_graph_free(g);
    return rc < 0 ? 0 : rc;
}

/* `compile`: what was compiled and each kernel's resources (a B2B graph's: both kernels'). */
static void print_compiled(const cli_opts *o, const cf_kernel *k)
{
    const cf_b2b *b2b = cf_kernel_b2b(k);
    if (b2b) {
        cf_strbuf sb = {0};
        cf_b2b_describe(b2b, &sb);
        printf("compiled %s for sm_90a: %s", o->spec, sb.data ? sb.data : "\n");
        cf_sb_free(&sb);
    }
    for (int i = 0; i < (b2b ? 2 : 1); i++) {
        const cf_kernel *p = b2b ? cf_b2b_part(b2b, i) : k;
        cf_resources r;
        cf_error err;
        cf_kernel_resources(p, &r, &err);
        if (b2b)
            printf("B2B %s %d of 2: %s in %.0f ms\n", cf_b2b_one_kernel(b2b) ? "phase" : "kernel", i + 1,
                   r.cache_hit ? "cache hit" : "NVRTC", r.compile_ms);
        else
            printf("compiled %s for sm_90a: %s in %.0f ms\n", o->spec, r.cache_hit ? "cache hit" : "NVRTC",
                   r.compile_ms);
        char lay[256];
        printf("  tile %dx%d per consumer warpgroup, %d stages, %s, %d threads\n", r.block_m, r.block_n, r.stages,
               cli_layout_text(&r, lay, sizeof lay), r.threads);
        printf("  registers %d/thread, spills %d bytes, stack frame %d bytes, dynamic shared memory %d bytes\n",
               r.registers, r.spill_bytes, r.stack_bytes, r.smem_bytes);
        if (r.cache_path[0])
            printf("  cubin: %s\n", r.cache_path);
        else
            printf("  cubin: (not cached: %s)\n", r.cache_note[0] ? r.cache_note : "no reason recorded");
        const cf_ir *ir = cf_kernel_ir(p);
        if (o->have_shape && ir->dim_n >= 0 && cf_kernel_wide(p, o->dims[ir->dim_n]))
            printf("  rows of N=%lld are wider than the row group: launches run the wide-row path (this GEMM to "
                   "f32, then the row kernel), both compiled\n", (long long)o->dims[ir->dim_n]);
    }
}

/* emit / compile / run / bench once the options are parsed; returns the exit code. */
static int kernel_verb(const char *verb, const char *help, const cli_opts *o, const cf_graph *g, bool want_ptx)
{
    bool gpu = strcmp(verb, "run") == 0 || strcmp(verb, "bench") == 0;
    if (gpu && !o->have_shape) {
        fprintf(stderr, "comfuse %s: --shape is required\n%s", verb, help);
        return 2;
    }
    if (gpu) /* run and bench build what they time (the fused kernel may not exist yet) */
        return strcmp(verb, "run") == 0 ? cli_run(g, o) : cli_bench(g, o);
    if (o->unfused)
        return strcmp(verb, "emit") == 0 ? emit_unfused(g, o) : compile_unfused(g, o);
    cf_kernel *k = NULL;
    int rc = 0;
    cf_status st = make_kernel(o, g, strcmp(verb, "emit") != 0, &k);
    if (st != CF_OK) {
        rc = cli_exit_code(st);
    } else if (strcmp(verb, "emit") == 0) {
        fputs(cf_kernel_source(k), stdout);
    } else if (strcmp(verb, "compile") == 0) {
        print_compiled(o, k);
        if (want_ptx)
            fputs(cf_kernel_ptx(k), stdout);
    }
    cf_kernel_free(k);
    return rc;
}

static int cmd_kernel(const char *verb, int argc, char **argv)
{
    const char *help = strcmp(verb, "emit") == 0      ? emit_usage
                       : strcmp(verb, "compile") == 0 ? compile_usage
                       : strcmp(verb, "run") == 0     ? run_usage
                                                      : bench_usage;
    cli_opts o;
    cf_graph *g = NULL;
    bool want_ptx = false;
    int rc = cli_parse_opts(argc, argv, help, &o, &g, &want_ptx);
    if (rc == 0)
        rc = kernel_verb(verb, help, &o, g, want_ptx);
    cli_opts_free(&o);
    cf_graph_free(g);
    return rc < 0 ? 0 : rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("comfuse %s\n", CF_VERSION);
        return 0;
    }
    if (strcmp(cmd, "explain") == 0)
        return cmd_explain(argc - 2, argv + 2);
    if (strcmp(cmd, "emit") == 0 || strcmp(cmd, "compile") == 0 || strcmp(cmd, "run") == 0 ||
        strcmp(cmd, "bench") == 0)
        return cmd_kernel(cmd, argc - 2, argv + 2);
    fprintf(stderr, "comfuse: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
