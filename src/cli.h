/* cli.h — shared by the CLI's source files (not part of the library). */
#ifndef CF_CLI_H
#define CF_CLI_H

#include "cf_internal.h"

typedef struct cli_opts {
    const char *spec;            /* path of the .cf file                          */
    const char *shape_text;      /* as given (argv), for reports; "" without      */
    bool have_shape;
    int64_t dims[CF_MAX_DIMS];   /* by cf_dim                                     */
    double *params;              /* runtime scalars by param index (as many as the */
    bool *params_set;            /* spec has; cli_opts_free)                      */
    const char **param_text;     /* the --param values as given                   */
    int n_param_text;
    cf_options kopt;             /* 0 fields: chosen from the shape               */
    int schedule_asked;          /* --schedule as given (0: none)                 */
    bool check;
    bool unfused;                /* run / emit: the unfused path (cuBLAS + rows)  */
    int64_t check_rows;          /* 0: all rows (or a sample for huge shapes)     */
    uint64_t seed;
    int iters;
} cli_opts;

void cli_opts_free(cli_opts *o);

/* `run` and `bench`: they build what they time themselves, so a graph the
 * fused kernel cannot take yet still runs on the unfused path. */
int cli_run(const cf_graph *g, const cli_opts *o);
int cli_bench(const cf_graph *g, const cli_opts *o);
/* Notes on stderr about the compiled kernel k: a --schedule it does not run, and a wgmma
 * pipeline ptxas serialised. */
void cli_note_kernel(const cli_opts *o, const cf_kernel *k);
/* "cluster 1x1, row reductions over 8 CTAs through L2": a kernel's CTA layout. */
const char *cli_layout_text(const cf_resources *r, char *buf, size_t n);

#endif
