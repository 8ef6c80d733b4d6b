/* fuzz_spec.c — libFuzzer target: arbitrary bytes through the spec parser and,
 * when they parse, through Φ and the IR printer.  Every path must end in a
 * clean error or a result, with nothing leaked (`make fuzz`). */
#include "comfuse.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cf_graph *g = NULL;
    cf_error err;
    cf_status st = cf_spec_parse((const char *)data, size, "fuzz.cf", &g, &err);
    if (st != CF_OK) {
        /* a failed parse leaves no graph and a located, terminated message */
        if (g || err.status != st || memchr(err.msg, '\0', sizeof err.msg) == NULL)
            __builtin_trap();
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
        cf_ir_free(ir);
    } else if (ir || st == CF_ERR_INTERNAL) {
        __builtin_trap(); /* Φ may reject a graph, never fail internally */
    }
#endif
    cf_graph_free(g);
    return 0;
}
