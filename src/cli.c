/* cli.c — `comfuse explain | emit | compile | run | bench`. */
#include "cf_internal.h"

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
    "  explain SPEC          print the Fusion Spec IR: stages, nodes, edges, bypasses\n"
    "  emit SPEC             print the generated CUDA source of the fused kernel\n"
    "  compile SPEC          compile the kernel (NVRTC, sm_90a) into the cache\n"
    "  run SPEC --shape ...  run on the GPU; --check compares with the CPU reference\n"
    "  bench SPEC --shape .. time the fused kernel beside cuBLAS and the unfused path\n"
    "\n"
    "`comfuse <command> --help` describes each command.  Exit status: 0 on\n"
    "success, 1 on an error, 2 on bad usage, 3 when the spec is outside the\n"
    "fusion domain (fall back to unfused execution).\n";

static const char explain_usage[] =
    "usage: comfuse explain SPEC.cf\n"
    "\n"
    "Parses SPEC, lowers it to the Fusion Spec IR and prints it: the runtime\n"
    "parameter table (A), then for each GEMM's epilogue its stages (one per\n"
    "row reduction, nested as the reduction's PostOp), each node with its\n"
    "category (accumulator, broadcast, compute, reduction, placeholder, store,\n"
    "matmul), shape, operands and edges, and the values carried from one stage\n"
    "to the next (bypass).  Needs no GPU.\n";

static int exit_code(cf_status st)
{
    return st == CF_OK ? 0 : st == CF_ERR_UNSUPPORTED ? 3 : 1;
}

static bool wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}

/* Parses and lowers SPEC; prints the error and returns its status on failure. */
static cf_status load_spec(const char *path, cf_graph **g, cf_ir **ir)
{
    cf_error err;
    cf_status st = cf_spec_parse_file(path, g, &err);
    if (st == CF_OK)
        st = cf_lower(*g, ir, &err);
    if (st != CF_OK)
        fprintf(stderr, "comfuse: %s\n", err.msg);
    return st;
}

static int cmd_explain(int argc, char **argv)
{
    if (wants_help(argc, argv)) {
        fputs(explain_usage, stdout);
        return 0;
    }
    if (argc != 1) {
        fputs(explain_usage, stderr);
        return 2;
    }
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    cf_status st = load_spec(argv[0], &g, &ir);
    if (st == CF_OK)
        cf_ir_print(ir, stdout);
    cf_ir_free(ir);
    cf_graph_free(g);
    return exit_code(st);
}

static int cmd_unavailable(const char *name, int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "comfuse %s: not available yet in this build (it arrives with the GPU code "
                    "generator); `comfuse explain` works today\n", name);
    return 1;
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
        return cmd_unavailable(cmd, argc - 2, argv + 2);
    fprintf(stderr, "comfuse: unknown command '%s'\n\n%s", cmd, usage);
    return 2;
}
