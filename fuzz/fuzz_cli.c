/* fuzz_cli.c — libFuzzer target: the CLI's option parser (src/cli_opts.c) over
 * arbitrary argument lists, run from the repository root.  The first byte picks
 * one of the examples as the spec; the rest, split at newlines, is argv.
 * Nothing runs: cli_parse_opts must return an exit code or a consistent
 * cli_opts (every dim sized, kernel options inside their sets: a row group of
 * any size up to 64 CTAs through L2), and leak
 * nothing (`make fuzz`, run with its output closed). */
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64 };

static const char *const specs[] = {
    "examples/gemm.cf",         "examples/gemm_bias_gelu.cf", "examples/gemm_bias_ln.cf",
    "examples/gemm_softmax.cf", "examples/gemm_rmsnorm.cf",   "examples/b2b_ln.cf",
    "fuzz/corpus/linear_param.cf",
};

static bool one_of(int v, const int *set, int n)
{
    for (int i = 0; i < n; i++)
        if (v == set[i])
            return true;
    return false;
}

/* What parsing promised when it returned 0. */
static void check_opts(const cli_opts *o, const cf_graph *g)
{
    static const int bm[] = {64, 128}, bn[] = {64, 128, 192, 256};
    if (!o->spec || !g || !o->shape_text || !o->params || !o->params_set)
        __builtin_trap();
    for (int d = 0; o->have_shape && d < cf_graph_num_dims(g); d++)
        if (o->dims[d] < 1 || o->dims[d] > ((int64_t)1 << 31))
            __builtin_trap();
    if ((o->kopt.block_m && !one_of(o->kopt.block_m, bm, 2)) || (o->kopt.block_n && !one_of(o->kopt.block_n, bn, 4)) ||
        o->kopt.cluster_n < 0 || o->kopt.cluster_n > 64 || o->kopt.stages < 0 || o->kopt.stages > 12 ||
        o->iters < 1)
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size);   /* data[1..] with a NUL in place of each newline */
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    for (char *p = text; argc < MAX_ARGS && p < text + size - 1;) {
        argv[argc++] = p;
        char *nl = memchr(p, '\n', (size_t)(text + size - 1 - p));
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    if (data[0] & 0x80)   /* most inputs name a spec; some leave it to the arguments */
        argv[argc++] = (char *)specs[data[0] % (sizeof specs / sizeof specs[0])];
    argv[argc] = NULL;
    cli_opts o;
    cf_graph *g = NULL;
    bool ptx = false;
    int rc = cli_parse_opts(argc, argv, "usage: fuzz\n", &o, &g, (data[0] & 1) ? &ptx : NULL);
    if (rc < -1 || rc > 3)
        __builtin_trap();
    if (rc == 0)
        check_opts(&o, g);
    cli_opts_free(&o);
    cf_graph_free(g);
    free(text);
    return 0;
}
