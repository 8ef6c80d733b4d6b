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
    cf_plan_request kopt;        /* 0 fields: the plan chooses (from the shape)  */
    int stages_asked;            /* --stages, which must fit as asked (0: none)   */
    int schedule_asked;          /* --schedule as given (0: none)                 */
    bool check;
    bool unfused;                /* run / emit: the unfused path (cuBLAS + rows)  */
    int64_t check_rows;          /* 0: all rows (or a sample for huge shapes)     */
    uint64_t seed;
    int iters;
} cli_opts;

/* The options of argv (after the verb) into o, the spec parsed into *g; help is the verb's
 * usage, printed for --help (with cli_kernel_opts_usage).  Returns 0, -1 after --help, else
 * the exit code (the error printed).  Runs nothing; free with cli_opts_free and
 * cf_graph_free whatever it returns. */
int cli_parse_opts(int argc, char **argv, const char *help, cli_opts *o, cf_graph **g, bool *want_ptx);
void cli_opts_free(cli_opts *o);
/* 0 on CF_OK, 3 for CF_ERR_UNSUPPORTED, 2 for CF_ERR_INVALID_ARG, else 1. */
int cli_exit_code(cf_status st);
extern const char cli_kernel_opts_usage[];

/* `run` and `bench`: they build what they time themselves, so a graph the
 * fused kernel cannot take yet still runs on the unfused path. */
int cli_run(const cf_graph *g, const cli_opts *o);
int cli_bench(const cf_graph *g, const cli_opts *o);
/* Builds the fused kernel for o (an unfit --stages refused), and with compile compiles every
 * kernel a launch at o's shape runs; NULL and an error on failure. */
cf_status cli_build_kernel(const cli_opts *o, const cf_graph *g, bool compile, cf_kernel **k, cf_error *err);
/* Notes on stderr about the compiled kernel k: a --schedule it does not run, and a wgmma
 * pipeline ptxas serialised. */
void cli_note_kernel(const cli_opts *o, const cf_kernel *k);
/* "cluster 1x1, row reductions over 8 CTAs through L2": a kernel's CTA layout. */
const char *cli_layout_text(const cf_resources *r, char *buf, size_t n);

#endif
