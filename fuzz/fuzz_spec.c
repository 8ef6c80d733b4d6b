/* fuzz_spec.c — libFuzzer target: arbitrary bytes through the spec parser and,
 * when they parse, through Φ and the IR printer, then code generation: the fused
 * kernel's source (cf_kernel_build: Ψ, no NVRTC) and the unfused path's row
 * kernel.  Every path must end in a clean error or a result, with nothing
 * leaked (`make fuzz`). */
#include "cf_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink;

/* A message is located and terminated, its status the one returned. */
static void check_error(cf_status st, const cf_error *err)
{
    if (err->status != st || memchr(err->msg, '\0', sizeof err->msg) == NULL || !err->msg[0])
        __builtin_trap();
}

#ifndef CF_FUZZ_NO_LOWER
/* Ψ over a graph Φ took: a source or a clean rejection, never an internal error. */
static void fuzz_codegen(const cf_graph *g, const cf_ir *ir)
{
    cf_kernel *k = NULL;
    cf_error err;
    cf_status st = cf_kernel_build(g, NULL, "fuzz", &k, &err);
    if (st == CF_OK) {
        const char *src = cf_kernel_source(k);
        if (!src || !strstr(src, "cf_epilogue"))
            __builtin_trap();
        if (sink)
            fputs(src, sink);
    } else if (k || st == CF_ERR_INTERNAL) {
        __builtin_trap();
    } else {
        check_error(st, &err);
    }
    cf_kernel_free(k);
    cf_strbuf rows = {0};
    st = cf_rows_generate(ir, "fuzz", &rows, &err);
    if (st == CF_OK && (!rows.data || !strstr(rows.data, "cf_rows_kernel")))
        __builtin_trap();
    if (st != CF_OK && st != CF_ERR_UNSUPPORTED)
        __builtin_trap();   /* the row kernel takes every one-GEMM graph Φ takes */
    cf_sb_free(&rows);
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_graph *g = NULL;
    cf_error err;
    cf_status st = cf_spec_parse((const char *)data, size, "fuzz.cf", &g, &err);
    if (st != CF_OK) {
        /* a failed parse leaves no graph and a located, terminated message */
        if (g)
            __builtin_trap();
        check_error(st, &err);
        return 0;
    }
    if (!g || cf_graph_num_outputs(g) < 1)
        __builtin_trap();
#ifndef CF_FUZZ_NO_LOWER
    if (!sink)
        sink = fopen("/dev/null", "w");
    cf_ir *ir = NULL;
    st = cf_lower(g, &ir, &err);
    if (st == CF_OK) {
        if (sink)
            cf_ir_print(ir, sink);
        fuzz_codegen(g, ir);
        cf_ir_free(ir);
    } else if (ir || st == CF_ERR_INTERNAL) {
        __builtin_trap(); /* Φ may reject a graph, never fail internally */
    }
#endif
    cf_graph_free(g);
    return 0;
}
