/* cli_opts.c — the options shared by explain/emit/compile/run/bench: parsed into cli_opts
 * and checked (--shape against the spec's dims, --param against its params, kernel options
 * against their sets) without running anything, so fuzz/fuzz_cli.c can drive it. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_kernel_opts_usage[] =
    "kernel options (default: chosen from --shape):\n"
    "  --shape D=n,...     sizes of the spec's dims, e.g. M=8192,N=4096,K=4096\n"
    "  --block-m 64|128    rows of a consumer warpgroup's tile\n"
    "  --block-n 64|128|192|256\n"
    "  --stages S          shared-memory pipeline depth\n"
    "  --schedule pingpong|cooperative|finisher\n"
    "                      the two consumer warpgroups on tiles of their own, one's\n"
    "                      epilogue under the other's mainloop; or both on one tile\n"
    "                      of 2 x block-m rows (elementwise epilogues; the default\n"
    "                      for a bare GEMM from K = 4096, with --cluster 2); or\n"
    "                      pingpong with a fourth warpgroup that finishes the tiles\n"
    "                      that finish late (reductions through L2; chosen where it\n"
    "                      keeps up; where no tile finishes late, pingpong, with a\n"
    "                      note on stderr)\n"
    "  --cluster C         CTAs along N that share a row block (any count up to 64\n"
    "                      with --reduce-mode global; 1, 2, 4, 8, 16 for DSMEM): a\n"
    "                      thread-block cluster for DSMEM, plain co-resident CTAs\n"
    "                      for global\n"
    "  --reduce-mode peer|leader|global\n"
    "                      row reductions across those CTAs: DSMEM all-to-all, DSMEM\n"
    "                      via rank 0, or through L2 (the default)\n"
    "  --sync-finish       through L2, finish every tile before the next mainloop\n"
    "  --late-finish       post the row partials, park the tile in shared memory and\n"
    "                      finish it after the next mainloop; needs the stages to\n"
    "                      leave room, 5 at 128x128 (default: late, but at once for\n"
    "                      four reductions at K <= 512)\n"
    "  --pair-tiles on|off with a late finish after the epilogue's only exchange:\n"
    "                      each CTA takes two adjacent column tiles of a row block\n"
    "                      (one per warpgroup) and posts one row partial for both,\n"
    "                      so --cluster counts CTAs of two tiles (default: on where\n"
    "                      it applies and no tile shape is given)\n"
    "  --multicast on|off  through L2, pairs of adjacent CTAs of a row group run as\n"
    "                      hardware clusters of 2 and multicast the X rows they\n"
    "                      share (default: on from K = 4096)\n"
    "  --split-k S         K in S slices, each on its own copy of the grid (all\n"
    "                      resident); slice 0 adds the others' partial\n"
    "                      accumulators through L2 and runs the epilogue (default:\n"
    "                      the cost model's choice, for shapes that leave SMs idle)\n"
    "  --plan key=value[,key=value]\n"
    "                      override fields of the plan (`explain --shape` prints\n"
    "                      it): block_m, block_n, stages, cluster, reduce\n"
    "                      (peer|leader|global), schedule, finish (sync|late),\n"
    "                      pair (on|off), multicast (on|off), split_k; the flags\n"
    "                      above set the same fields\n";

/* CF_ERR_INVALID_ARG: options the library refuses (a tile too large for the registers, a
 * cluster a reduce mode cannot take) are bad usage too */
int cli_exit_code(cf_status st)
{
    return st == CF_OK ? 0 : st == CF_ERR_UNSUPPORTED ? 3 : st == CF_ERR_INVALID_ARG ? 2 : 1;
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
    if (st == CF_OK && ir)
        st = cf_lower(*g, ir, &err);
    if (st != CF_OK)
        fprintf(stderr, "comfuse: %s\n", err.msg);
    return st;
}

/* ---- options ------------------------------------------------------------ */

static bool parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* One DIM=SIZE of --shape into o->dims. */
static bool shape_token(const cf_graph *g, char *tok, cli_opts *o)
{
    char *eq = strchr(tok, '=');
    int64_t v;
    if (!eq) {
        fprintf(stderr, "comfuse: --shape: expected DIM=SIZE, got '%s'\n", tok);
        return false;
    }
    *eq = 0;
    int d = -1;
    for (int i = 0; i < cf_graph_num_dims(g); i++)
        if (strcmp(cf_graph_dim_name(g, i), tok) == 0)
            d = i;
    if (d < 0) {
        fprintf(stderr, "comfuse: --shape: the spec has no dim '%s'\n", tok);
        return false;
    }
    if (o->dims[d] > 0) {
        fprintf(stderr, "comfuse: --shape: dim %s is given twice\n", tok);
        return false;
    }
    if (!parse_int(eq + 1, 1, (int64_t)1 << 31, &v)) {
        fprintf(stderr, "comfuse: --shape: size of %s must be an integer in [1, 2^31], got '%s'\n", tok, eq + 1);
        return false;
    }
    o->dims[d] = v;
    return true;
}

/* "M=8192,N=4096,K=4096": every dim of the spec must get a size, once. */
static bool parse_shape(const cf_graph *g, const char *text, cli_opts *o)
{
    char *buf = strdup(text);   /* as long as it is: no token is cut */
    bool ok = buf != NULL;
    if (!ok)
        fprintf(stderr, "comfuse: out of memory\n");
    o->shape_text = text;
    for (char *tok = ok ? strtok(buf, ",") : NULL; tok && ok; tok = strtok(NULL, ","))
        ok = shape_token(g, tok, o);
    free(buf);
    if (!ok)
        return false;
    for (int i = 0; i < cf_graph_num_dims(g); i++)
        if (o->dims[i] <= 0) {
            fprintf(stderr, "comfuse: --shape: no size given for dim %s\n", cf_graph_dim_name(g, i));
            return false;
        }
    o->have_shape = true;
    return true;
}

void cli_opts_free(cli_opts *o)
{
    free(o->params);
    free(o->params_set);
    free(o->param_text);
    o->params = NULL;
    o->params_set = NULL;
    o->param_text = NULL;
}

/* The --param NAME=VALUE options, into tables as long as g's params.
 * Returns 0, else the exit code. */
static int set_params(const cf_graph *g, cli_opts *o)
{
    const int n_params = cf_graph_num_params(g);
    o->params = calloc((size_t)n_params + 1, sizeof *o->params);
    o->params_set = calloc((size_t)n_params + 1, sizeof *o->params_set);
    if (!o->params || !o->params_set) {
        fprintf(stderr, "comfuse: out of memory\n");
        return 1;
    }
    for (int i = 0; i < o->n_param_text; i++) {
        const char *text = o->param_text[i], *eq = strchr(text, '=');
        char *end = NULL;
        double val = eq ? strtod(eq + 1, &end) : 0;
        int idx = -1;
        for (int p = 0; eq && p < n_params; p++) {
            const char *name = cf_graph_param_name(g, p);
            if (strlen(name) == (size_t)(eq - text) && strncmp(name, text, (size_t)(eq - text)) == 0)
                idx = p;
        }
        if (!eq || idx < 0 || end == eq + 1 || *end) {
            fprintf(stderr, "comfuse: --param %s: expected NAME=VALUE naming a param of the spec\n", text);
            return 2;
        }
        o->params[idx] = val;
        o->params_set[idx] = true;
    }
    return 0;
}

/* The kernel options that take a number, each with the values it may take (cf_kernel_build
 * checks the same sets, and the combinations); a value outside is bad usage (exit 2). */
static const struct {
    const char *flag, *allowed;
    int lo, hi;
    bool pow2;
} tile_opts[] = {
    {"--block-m", "64 or 128", 64, 128, true},
    {"--block-n", "64, 128, 192 or 256", 64, 256, false},
    {"--stages", "an integer in 2..12", 2, 12, false},
    {"--cluster", "1..64 (1, 2, 4, 8 or 16 with --reduce-mode peer or leader)", 1, 64, false},
    {"--split-k", "an integer in 1..16", 1, CF_SPLIT_K_MAX, false},
};

static int tile_option(const char *flag)
{
    for (int i = 0; i < CF_ARRAY_LEN(tile_opts); i++)
        if (strcmp(flag, tile_opts[i].flag) == 0)
            return i + 1;
    return 0;
}

static bool set_tile_option(cli_opts *o, const char *flag, const char *v)
{
    const int i = tile_option(flag) - 1;
    int64_t x = 0;
    bool ok = parse_int(v, tile_opts[i].lo, tile_opts[i].hi, &x) &&
              (tile_opts[i].pow2 ? (x & (x - 1)) == 0 : i != 1 || x % 64 == 0);
    if (!ok) {
        fprintf(stderr, "comfuse: %s %s: must be %s\n", flag, v, tile_opts[i].allowed);
        return false;
    }
    int *field[] = {&o->kopt.block_m, &o->kopt.block_n, &o->kopt.stages, &o->kopt.cluster_n, &o->kopt.split_k};
    *field[i] = (int)x;
    if (field[i] == &o->kopt.stages)
        o->stages_asked = (int)x;   /* must fit as asked (cli_build_kernel) */
    return true;
}

/* "on" 1, "off" -1 (cf_options' forced settings), anything else 0 */
static int on_off(const char *v) { return strcmp(v, "on") == 0 ? 1 : strcmp(v, "off") == 0 ? -1 : 0; }

/* --plan key=value[,key=value]: fields of the plan's request, as the flags set them. */
static bool set_plan(cli_opts *o, const char *text)
{
    char *buf = strdup(text);
    bool ok = buf != NULL;
    if (!ok)
        fprintf(stderr, "comfuse: out of memory\n");
    char *save = NULL;
    for (char *tok = ok ? strtok_r(buf, ",", &save) : NULL; tok && ok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        cf_error err;
        if (!eq) {
            fprintf(stderr, "comfuse: --plan: expected key=value, got '%s'\n", tok);
            ok = false;
            break;
        }
        *eq = 0;
        const int stages = o->kopt.stages, schedule = o->kopt.schedule;
        if (cf_plan_override(&o->kopt, tok, eq + 1, &err) != CF_OK) {
            fprintf(stderr, "comfuse: %s\n", err.msg);
            ok = false;
        }
        if (o->kopt.stages != stages)
            o->stages_asked = o->kopt.stages;   /* must fit as asked, as --stages */
        if (o->kopt.schedule != schedule)
            o->schedule_asked = o->kopt.schedule;
    }
    free(buf);
    return ok;
}

/* Parses the options shared by emit/compile/run/bench.  Returns 0 on success,
 * else the exit code. */
int cli_parse_opts(int argc, char **argv, const char *help, cli_opts *o, cf_graph **g, bool *want_ptx)
{
    memset(o, 0, sizeof *o);
    o->shape_text = "";
    o->seed = 1;
    o->iters = 100;
    const char *shape = NULL;
    if (wants_help(argc, argv)) {
        fputs(help, stdout);
        fputs(cli_kernel_opts_usage, stdout);
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        bool takes = true;
        if (strcmp(a, "--check") == 0) {
            o->check = true;
            takes = false;
        } else if (strcmp(a, "--sync-finish") == 0 || strcmp(a, "--late-finish") == 0) {
            o->kopt.sync_finish = strcmp(a, "--sync-finish") == 0 ? 1 : -1;
            takes = false;
        } else if (strcmp(a, "--unfused") == 0) {
            o->unfused = true;
            takes = false;
        } else if (strcmp(a, "--ptx") == 0 && want_ptx) {
            *want_ptx = true;
            takes = false;
        } else if (a[0] != '-') {
            if (o->spec) {
                fprintf(stderr, "comfuse: more than one spec given ('%s', '%s')\n", o->spec, a);
                return 2;
            }
            o->spec = a;
            takes = false;
        } else if (!v) {
            fprintf(stderr, "comfuse: unknown option or missing value: %s\n%s", a, help);
            return 2;
        } else if (strcmp(a, "--shape") == 0) {
            shape = v;
        } else if (strcmp(a, "--param") == 0) {
            /* read once the spec says which params exist (set_params) */
            if (!o->param_text && !(o->param_text = calloc((size_t)argc, sizeof *o->param_text))) {
                fprintf(stderr, "comfuse: out of memory\n");
                return 1;
            }
            o->param_text[o->n_param_text++] = v;
        } else if (strcmp(a, "--seed") == 0 && parse_int(v, 0, INT64_MAX, &x)) {
            o->seed = (uint64_t)x;
        } else if (strcmp(a, "--iters") == 0 && parse_int(v, 1, 100000, &x)) {
            o->iters = (int)x;
        } else if (strcmp(a, "--rows") == 0 && parse_int(v, 0, INT64_MAX, &x)) {
            o->check_rows = x;
        } else if (tile_option(a)) {
            if (!set_tile_option(o, a, v))
                return 2;
        } else if (strcmp(a, "--schedule") == 0 && (strcmp(v, "pingpong") == 0 || strcmp(v, "cooperative") == 0 ||
                                                    strcmp(v, "finisher") == 0)) {
            o->kopt.schedule = strcmp(v, "pingpong") == 0      ? CF_SCHEDULE_PINGPONG
                               : strcmp(v, "cooperative") == 0 ? CF_SCHEDULE_COOPERATIVE
                                                               : CF_SCHEDULE_FINISHER;
            o->schedule_asked = o->kopt.schedule;
        } else if (strcmp(a, "--plan") == 0) {
            if (!set_plan(o, v))
                return 2;
        } else if (strcmp(a, "--pair-tiles") == 0 && on_off(v)) {
            o->kopt.pair_tiles = on_off(v);
        } else if (strcmp(a, "--multicast") == 0 && on_off(v)) {
            o->kopt.multicast = on_off(v);
        } else if (strcmp(a, "--reduce-mode") == 0 &&
                   (strcmp(v, "peer") == 0 || strcmp(v, "leader") == 0 || strcmp(v, "global") == 0)) {
            o->kopt.reduce_mode = strcmp(v, "peer") == 0     ? CF_REDUCE_PEER
                                  : strcmp(v, "leader") == 0 ? CF_REDUCE_LEADER
                                                             : CF_REDUCE_GLOBAL;
        } else {
            fprintf(stderr, "comfuse: bad option %s %s\n%s%s", a, v, help, cli_kernel_opts_usage);
            return 2;
        }
        if (takes)
            i++;
    }
    if (!o->spec) {
        fprintf(stderr, "comfuse: no spec given\n%s", help);
        return 2;
    }
    cf_status st = load_spec(o->spec, g, NULL);
    if (st != CF_OK)
        return cli_exit_code(st);
    int rc;
    if (shape && !parse_shape(*g, shape, o))
        return 2;
    if ((rc = set_params(*g, o)) != 0)
        return rc;
    /* what the user left open the plan chooses from the shape (cli_build_kernel) */
    return 0;
}
