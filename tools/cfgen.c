/* cfgen — random epilogue graphs as .cf specs, for the GPU property test.
 *
 *   cfgen --seed S --count N --out DIR    DIR/g<S>_<i>.cf for i < N, and DIR/index.tsv
 *   cfgen --case SEED --out DIR           one graph from a case seed (as a header names it)
 *
 * The graphs come from tests/gen.c (cfgen_gpu), the generator the CPU property
 * test uses; the same seed writes the same bytes on every machine, so cubins
 * compiled ahead for a seed hit the cache where the specs run.  Each spec's
 * header names its seed, shape, params and the command that runs it; index.tsv
 * has one row per graph, and Φ's verdict: graphs it rejects are counted by
 * reason.  Accepted graphs go through cfgen_screen (tests/gen.c) once per path
 * (fused, unfused): where `run --check` could fail without a defect the index
 * says why, and scripts/gpu-check leaves that check out.  Exit status 1 when a graph cannot be written or does not parse
 * back to what Φ decided for the original, or when Φ accepts a graph that was
 * given a feature it must reject. */
#include "gen.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_REASONS 32

typedef struct tally {
    int graphs, accepted, reds[6], out_tile[5], out_vec[5], in_tile, in_vm, in_vn, with_params, nonfinite;
    int odd_pitch, nk, f16, screened[2];
    char reason[MAX_REASONS][160];
    int reason_n[MAX_REASONS], n_reasons;
    int errors;
} tally;

/* Φ's message without its location, names or detail: "'_' is a transpose". */
static void reason_of(const char *msg, char *out, size_t n)
{
    const char *s = strstr(msg, "cannot fuse: ");
    s = s ? s + strlen("cannot fuse: ") : msg;
    size_t j = 0;
    for (bool quoted = false; *s && *s != '\n' && *s != ';' && *s != ',' && j + 2 < n; s++) {
        if (*s == '\'') {
            quoted = !quoted;
            if (quoted)
                out[j++] = '_';
        } else if (!quoted)
            out[j++] = *s == '\t' ? ' ' : *s;
    }
    out[j] = 0;
}

static void count_reason(tally *t, const char *r)
{
    for (int i = 0; i < t->n_reasons; i++)
        if (strcmp(t->reason[i], r) == 0) {
            t->reason_n[i]++;
            return;
        }
    if (t->n_reasons < MAX_REASONS) {
        snprintf(t->reason[t->n_reasons], sizeof t->reason[0], "%s", r);
        t->reason_n[t->n_reasons++] = 1;
    }
}

typedef struct kinds {
    int out_tile, out_vec, out_other, in_tile, in_vm, in_vn;
    bool nk;
} kinds;

static kinds kinds_of(const cfgen_case *c)
{
    kinds k = {0};
    const cf_graph *g = c->g;
    cf_dim M = cf_graph_dim((cf_graph *)g, "M");
    for (int i = 0; i < g->n_outputs; i++) {
        cf_tensor_info t = cf_graph_output_info(g, i);
        if (t.rank == 2)
            k.out_tile++;
        else if (t.rank == 1 && t.dims[0] == M)
            k.out_vec++;
        else
            k.out_other++;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        if (strcmp(t.name, "X") == 0 || strcmp(t.name, "W") == 0) {
            k.nk |= strcmp(t.name, "W") == 0 && t.dims[0] != cf_graph_dim((cf_graph *)g, "K");
            continue;
        }
        if (t.rank == 2)
            k.in_tile++;
        else if (t.dims[0] == M)
            k.in_vm++;
        else
            k.in_vn++;
    }
    return k;
}

static int clamp(int v, int hi) { return v < hi ? v : hi; }

/* Writes one graph's spec and index row; false on a defect (reported). */
static bool one(uint64_t cseed, const char *dir, const char *file, FILE *index, tally *t)
{
    cfgen_case c = cfgen_gpu(cseed);
    char shape[160], params[1200], path[4096], reason[160] = "", hdr[4096];
    cfgen_shape_text(&c, shape, sizeof shape);
    cfgen_params_text(&c, params, sizeof params);
    cf_ir *ir = NULL;
    cf_error err;
    cf_status st = cf_lower(c.g, &ir, &err);
    int nred = st == CF_OK ? cf_ir_num_stages(ir) - 1 : -1;
    if (st != CF_OK)
        reason_of(err.msg, reason, sizeof reason);
    kinds k = kinds_of(&c);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char screen[2][200] = {"-", "-"};
    bool judged[2] = {true, true};
    if (st == CF_OK) {   /* one screen for both paths: each keeps X*W in f32 */
        judged[0] = judged[1] = cfgen_screen(&c, screen[0], sizeof screen[0]);
        memcpy(screen[1], screen[0], sizeof screen[1]);
    }

    /* the header: everything needed to reproduce and run it */
    size_t at = (size_t)snprintf(hdr, sizeof hdr, "cfgen case seed 0x%016" PRIx64 " (build/cfgen --case 0x%016" PRIx64
                                 " --out DIR rewrites it)\nshape: %s\nparams: %s\nalign: %s\n",
                                 cseed, cseed, shape, params[0] ? params : "-", cfgen_align_name(c.align));
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, "run: build/comfuse run --check --shape %s", shape);
    for (char *p = params; *p && at < sizeof hdr;) {
        size_t len = strcspn(p, ",");
        at += (size_t)snprintf(hdr + at, sizeof hdr - at, " --param %.*s", (int)len, p);
        p += len + (p[len] == ',');
    }
    at += (size_t)snprintf(hdr + at, sizeof hdr - at, " %s  (and with --unfused)\n", path);
    if (st == CF_OK)
        snprintf(hdr + at, sizeof hdr - at, "phi: accepts (%d reductions)\nscreen, fused: %s%s\nscreen, unfused: %s%s",
                 nred, screen[0], judged[0] ? "" : " (scripts/gpu-check does not run it)", screen[1],
                 judged[1] ? "" : " (scripts/gpu-check does not run it)");
    else
        snprintf(hdr + at, sizeof hdr - at, "phi: rejects: %s", reason);

    bool ok = true;
    cf_strbuf sb = {0};
    if (!cfgen_write_spec(c.g, hdr, &sb)) {
        fprintf(stderr, "cfgen: case 0x%016" PRIx64 ": the graph cannot be written as a spec\n", cseed);
        ok = false;
    }
    /* the spec must parse back to a graph Φ judges the same way */
    cf_graph *back = NULL;
    cf_ir *ir2 = NULL;
    if (ok && cf_spec_parse(sb.data, sb.len, path, &back, &err) != CF_OK) {
        fprintf(stderr, "cfgen: case 0x%016" PRIx64 ": the written spec does not parse: %s\n", cseed, err.msg);
        ok = false;
    }
    if (ok && (cf_lower(back, &ir2, &err) == CF_OK) != (st == CF_OK)) {
        fprintf(stderr, "cfgen: case 0x%016" PRIx64 ": Φ %s the spec but %s the graph\n", cseed,
                ir2 ? "accepts" : "rejects", st == CF_OK ? "accepts" : "rejects");
        ok = false;
    }
    if (st == CF_OK && c.planted != CFGEN_REJ_NONE) {
        fprintf(stderr, "cfgen: case 0x%016" PRIx64 ": Φ accepts a graph with a %s, which it must reject\n", cseed,
                cfgen_reject_name(c.planted));
        ok = false;
    }
    FILE *f = ok ? fopen(path, "w") : NULL;
    if (ok && (!f || fwrite(sb.data, 1, sb.len, f) != sb.len || fclose(f) != 0)) {
        fprintf(stderr, "cfgen: %s: %s\n", path, strerror(errno));
        ok = false;
    }
    if (index)
        fprintf(index, "%s\t0x%016" PRIx64 "\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", file, cseed,
                shape, params[0] ? params : "-", cfgen_align_name(c.align), k.nk ? "NK" : "KN",
                cf_dtype_name(c.g->nodes[c.g->inputs[0]].dtype), nred, k.out_tile, k.out_vec + k.out_other, k.in_tile,
                k.in_vm, k.in_vn, cf_graph_num_params(c.g), c.nonfinite, st == CF_OK ? "accept" : "reject",
                st == CF_OK ? "-" : reason, screen[0], screen[1]);

    t->graphs++;
    if (st == CF_OK) {
        t->accepted++;
        t->reds[clamp(nred, 5)]++;
        t->out_tile[clamp(k.out_tile, 4)]++;
        t->out_vec[clamp(k.out_vec, 4)]++;
        t->in_tile += k.in_tile > 0;
        t->in_vm += k.in_vm > 0;
        t->in_vn += k.in_vn > 0;
        t->with_params += cf_graph_num_params(c.g) > 0;
        t->nonfinite += c.nonfinite;
        t->odd_pitch += c.align == CFGEN_ODD_PITCH;
        t->nk += k.nk;
        t->f16 += c.g->nodes[c.g->inputs[0]].dtype == CF_F16;
        t->screened[0] += !judged[0];
        t->screened[1] += !judged[1];
    } else
        count_reason(t, reason);
    t->errors += !ok;
    cf_sb_free(&sb);
    cf_ir_free(ir);
    cf_ir_free(ir2);
    cf_graph_free(back);
    cf_graph_free(c.g);
    return ok;
}

static void summary(const tally *t)
{
    printf("cfgen: %d graphs, %d accepted by Φ, %d rejected\n", t->graphs, t->accepted, t->graphs - t->accepted);
    printf("  accepted, by reductions: 0:%d 1:%d 2:%d 3:%d 4:%d >4:%d\n", t->reds[0], t->reds[1], t->reds[2], t->reds[3],
           t->reds[4], t->reds[5]);
    printf("  accepted, by [M, N] outputs: 1:%d 2:%d 3:%d >3:%d; by [M] outputs: 0:%d 1:%d 2:%d 3:%d >3:%d\n",
           t->out_tile[1], t->out_tile[2], t->out_tile[3], t->out_tile[4], t->out_vec[0], t->out_vec[1],
           t->out_vec[2], t->out_vec[3], t->out_vec[4]);
    printf("  accepted, with inputs: [M, N] %d, [M] %d, [N] %d, params %d; NaN/Inf planted %d; odd pitches %d; "
           "[N, K] weights %d; f16 %d\n",
           t->in_tile, t->in_vm, t->in_vn, t->with_params, t->nonfinite, t->odd_pitch, t->nk, t->f16);
    printf("  accepted but left out by the conditioning screen (the check could fail without a defect): fused %d, "
           "unfused %d\n",
           t->screened[0], t->screened[1]);
    for (int i = 0; i < t->n_reasons; i++)
        printf("  rejected %d: %s\n", t->reason_n[i], t->reason[i]);
}

static int usage(void)
{
    fprintf(stderr, "usage: cfgen --seed S --count N --out DIR\n       cfgen --case SEED --out DIR\n");
    return 2;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 0);
    return s[0] && *end == 0 && errno == 0;
}

int main(int argc, char **argv)
{
    uint64_t seed = 0, one_case = 0, count = 0;
    const char *dir = NULL;
    bool have_seed = false, have_case = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (strcmp(a, "--seed") == 0 && parse_u64(v, &seed))
            have_seed = true;
        else if (strcmp(a, "--case") == 0 && parse_u64(v, &one_case))
            have_case = true;
        else if (strcmp(a, "--count") == 0 && parse_u64(v, &count) && count <= 1000000)
            ;
        else if (strcmp(a, "--out") == 0)
            dir = v;
        else
            return usage();
    }
    if (!dir || have_seed == have_case || (have_seed && count == 0))
        return usage();
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cfgen: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    tally t = {0};
    char file[96];
    if (have_case) {
        snprintf(file, sizeof file, "case%016" PRIx64 ".cf", one_case);
        bool ok = one(one_case, dir, file, NULL, &t);
        printf("%s/%s\n", dir, file);
        return ok ? 0 : 1;
    }
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/index.tsv", dir);
    FILE *index = fopen(ipath, "w");
    if (!index) {
        fprintf(stderr, "cfgen: %s: %s\n", ipath, strerror(errno));
        return 1;
    }
    fprintf(index, "file\tcase_seed\tshape\tparams\talign\tweight\tgemm\treductions\tout_tiles\tout_vecs\tin_tiles\t"
                   "in_vec_m\tin_vec_n\tparams_n\tnonfinite\tphi\treason\tscreen_fused\tscreen_unfused\n");
    for (uint64_t i = 0; i < count; i++) {
        snprintf(file, sizeof file, "g%" PRIu64 "_%" PRIu64 ".cf", seed, i);
        one(cfgen_case_seed(seed, (int)i), dir, file, index, &t);
    }
    if (fclose(index) != 0) {
        fprintf(stderr, "cfgen: %s: %s\n", ipath, strerror(errno));
        return 1;
    }
    summary(&t);
    if (t.errors)
        fprintf(stderr, "cfgen: %d graphs could not be written faithfully (above)\n", t.errors);
    return t.errors ? 1 : 0;
}
