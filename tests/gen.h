/* gen.h — random epilogue graphs from a seed, and the .cf writer.
 *
 * One generator serves two users: tests/test_property.c (small shapes, the
 * interpreter against the float64 reference on the CPU) and tools/cfgen.c
 * (GPU shapes, written out as .cf specs for `comfuse run --check`).  A graph
 * depends on its seed (and mode) alone, under every compiler. */
#ifndef CF_GEN_H
#define CF_GEN_H

#include "cf_internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- PRNG: splitmix64 ------------------------------------------------------ */

typedef struct cfgen_rng {
    uint64_t s;
} cfgen_rng;

uint64_t cfgen_next(cfgen_rng *r);
int cfgen_int(cfgen_rng *r, int lo, int hi);          /* uniform in [lo, hi] */
double cfgen_unif(cfgen_rng *r, double lo, double hi); /* uniform in [lo, hi) */
bool cfgen_chance(cfgen_rng *r, double p);
/* The seed of case i of a run from base seed s (test_property and cfgen agree). */
uint64_t cfgen_case_seed(uint64_t base, int i);

/* ---- graphs ------------------------------------------------------------------ */

#define CFGEN_MAX_PARAMS 64

/* Pitches of the GEMM operands and outputs: all 16-byte multiples (N, K
 * multiples of 8: what TMA takes in place), or some not (the runtime runs
 * them through padded copies). */
typedef enum { CFGEN_ALIGN16, CFGEN_ODD_PITCH } cfgen_align;

/* A feature put in on purpose that Φ must reject (GPU mode only). */
typedef enum {
    CFGEN_REJ_NONE,
    CFGEN_REJ_VEC_N_OUTPUT, /* an [N] vector output            */
    CFGEN_REJ_COL_REDUCE,   /* a reduction over M (axis=0)     */
    CFGEN_REJ_TRANSPOSE,    /* a transpose                     */
    CFGEN_REJ_PROLOGUE,     /* relu(X) @ W                     */
    CFGEN_REJ_SCALAR_OUTPUT,
    CFGEN_REJ_COUNT
} cfgen_reject;

typedef struct cfgen_case {
    cf_graph *g;
    bool b2b;
    int64_t dims[CF_MAX_DIMS];           /* indexed by cf_dim                  */
    double params[CFGEN_MAX_PARAMS + 1]; /* GPU mode: values to run with      */
    cfgen_align align;
    cfgen_reject planted;
    bool nonfinite; /* GPU mode: NaN/Inf-producing steps were planted */
} cfgen_case;

/* The CPU property test's graphs: tiny shapes (or big ones, rows long enough
 * for the threads), 10% B2B, operands of log/sqrt/1/x/pow guarded 70-75% of
 * the time.  Its draws must never change: seeds in bug reports stay valid. */
cfgen_case cfgen_property(uint64_t seed, bool big);
/* Graphs for the GPU: one GEMM, GPU-sized shapes (ragged ones, N up to 20000),
 * bf16/f16, either weight layout, several [M, N] and [M] outputs, runtime
 * params with values, [M, N] / [M] / [N] inputs, domain guards always on so
 * f32 and f64 agree on which elements are finite, NaN/Inf planted where both
 * must produce them; about 7% carry a feature Φ rejects (cfgen_case.planted). */
cfgen_case cfgen_gpu(uint64_t seed);

const char *cfgen_reject_name(cfgen_reject r);
const char *cfgen_align_name(cfgen_align a);

/* Whether `comfuse run --check` (fused, or --unfused: both keep X*W in f32)
 * can judge c's graph at its shape: false, and why, where its outputs move by
 * most of the check's tolerance when X*W moves by f32 accumulation's error,
 * where its NaN/Inf pattern moves, or where a value leaves the f32 range (in
 * float64 at 16 rows of the real N).  Such a check can fail without a defect. */
bool cfgen_screen(const cfgen_case *c, char *why, size_t n);

/* ---- the .cf writer ------------------------------------------------------------ */

/* The graph as a .cf spec that parses back to the same graph: inputs and
 * params declared in index order, every other node named v<index> in node
 * order, constants written inline.  header (may be NULL) is written first,
 * each line prefixed "# ".  Returns false when the graph holds something the
 * language cannot spell. */
bool cfgen_write_spec(const cf_graph *g, const char *header, cf_strbuf *out);
/* "M=..,N=..,K=.." for c's dims, in dim order. */
void cfgen_shape_text(const cfgen_case *c, char *buf, size_t n);
/* "p0=0.5,p1=-1.25" (empty when the graph has no params). */
void cfgen_params_text(const cfgen_case *c, char *buf, size_t n);

#endif
