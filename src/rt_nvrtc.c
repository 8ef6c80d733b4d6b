/* rt_nvrtc.c — NVRTC, loaded at run time: sm_90a CUBINs from CUDA source,
 * through the kernel cache, with the ptxas -v figures read from the log.
 *
 * Uses the driver layer's loading helpers (rt_cuda.h) and cache.c, which only
 * stores bytes: on a miss this file compiles and hands the cache the bytes. */
#include "rt_cuda.h"

#include <nvrtc.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVRTC_FUNCS(X)                                                                 \
    X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)              \
    X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

static struct nvrtc_table {
#define X(f) __typeof__(&f) f;
    NVRTC_FUNCS(X)
#undef X
} nv;

static const cf_rt_sym nvrtc_syms[] = {
#define X(f) {CF_RT_SYM(f), offsetof(struct nvrtc_table, f), false},
    NVRTC_FUNCS(X)
#undef X
};

static pthread_mutex_t nvrtc_mu = PTHREAD_MUTEX_INITIALIZER;
static bool nvrtc_tried;
static cf_status nvrtc_status;
static char nvrtc_msg[1024];
static const char *nvrtc_path;
static int nvrtc_major, nvrtc_minor;

cf_status cf_rt_nvrtc_load(int *major, int *minor, const char **path, cf_error *err)
{
    pthread_mutex_lock(&nvrtc_mu);
    if (!nvrtc_tried) {
        nvrtc_tried = true;
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        char tried[700];
        /* CF_NVRTC_PATH names the one library to use: never fall back past it */
        const char *env = getenv("CF_NVRTC_PATH");
        const bool forced = env && *env;
        void *lib = cf_rt_open_first(env, names, forced ? 0 : CF_ARRAY_LEN(names), &nvrtc_path, tried,
                               sizeof tried);
        const char *missing = NULL;
        if (!lib && forced) {
            nvrtc_status = CF_ERR_NVRTC;
            snprintf(nvrtc_msg, sizeof nvrtc_msg, "CF_NVRTC_PATH names a library that cannot be loaded: %s",
                     tried);
        } else if (!lib) {
            nvrtc_status = CF_ERR_NVRTC;
            snprintf(nvrtc_msg, sizeof nvrtc_msg,
                     "NVRTC not found (set CF_NVRTC_PATH or CUDA_HOME); tried %s", tried);
        } else if (!dlsym(lib, "nvrtcCreateProgram") || !dlsym(lib, "nvrtcVersion")) {
            nvrtc_status = CF_ERR_NVRTC;
            snprintf(nvrtc_msg, sizeof nvrtc_msg, "%s%s is not an NVRTC library (no nvrtcCreateProgram)",
                     forced ? "CF_NVRTC_PATH=" : "", nvrtc_path);
        } else if ((missing = cf_rt_load_syms(lib, &nv, nvrtc_syms, CF_ARRAY_LEN(nvrtc_syms)))) {
            nvrtc_status = CF_ERR_NVRTC;
            snprintf(nvrtc_msg, sizeof nvrtc_msg, "%s lacks %s: too old an NVRTC", nvrtc_path,
                     missing);
        } else if (nv.nvrtcVersion(&nvrtc_major, &nvrtc_minor) != NVRTC_SUCCESS) {
            nvrtc_status = CF_ERR_NVRTC;
            snprintf(nvrtc_msg, sizeof nvrtc_msg, "nvrtcVersion failed in %s", nvrtc_path);
        } else {
            nvrtc_status = CF_OK;
        }
    }
    pthread_mutex_unlock(&nvrtc_mu);
    if (nvrtc_status != CF_OK)
        return cf_errorf(err, nvrtc_status, (cf_loc){0}, "%s", nvrtc_msg);
    if (major)
        *major = nvrtc_major;
    if (minor)
        *minor = nvrtc_minor;
    if (path)
        *path = nvrtc_path;
    return CF_OK;
}

/* Records the failed call's text and NVRTC's name for the code, then fails. */
#define CF_NVRTC_CHECK(expr)                                                                 \
    do {                                                                                     \
        nvrtcResult r_ = (expr);                                                             \
        if (r_ != NVRTC_SUCCESS) {                                                           \
            st = cf_errorf(err, CF_ERR_NVRTC, (cf_loc){0}, "%s failed: %s (rt_nvrtc.c:%d)",   \
                           cf_rt_call_text(#expr), nv.nvrtcGetErrorString(r_), __LINE__);      \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

const char *cf_rt_cache_result_name(cf_rt_cache_result r)
{
    static const char *const names[] = {"disabled", "miss", "hit (memory)", "hit (disk)",
                                        "rebuilt"};
    _Static_assert(CF_ARRAY_LEN(names) == CF_RT_CACHE_RESULT_COUNT, "names out of sync");
    return (unsigned)r < CF_RT_CACHE_RESULT_COUNT ? names[r] : "?";
}

void cf_rt_cubin_free(cf_rt_cubin *c)
{
    if (!c)
        return;
    free(c->cubin);
    free(c->ptx);
    free(c->log);
    c->cubin = NULL;
    c->ptx = c->log = NULL;
    c->cubin_size = c->ptx_size = c->log_size = 0;
}

/* The number just before `what` in [line, end), or -1. */
static int number_before(const char *line, const char *end, const char *what)
{
    size_t wl = strlen(what);
    for (const char *p = line; p + wl <= end; p++) {
        if (memcmp(p, what, wl) != 0)
            continue;
        const char *q = p;
        while (q > line && q[-1] == ' ')
            q--;
        const char *digits_end = q;
        while (q > line && q[-1] >= '0' && q[-1] <= '9')
            q--;
        if (q == digits_end)
            return -1;
        return atoi(q);
    }
    return -1;
}

static int imax(int a, int b) { return a > b ? a : b; }

/* ptxas -v lines, per entry:
 *   ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
 *   ptxas info    : Function properties for _Z1kPf
 *       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 8 registers, used 0 barriers, 16 bytes smem, 360 bytes cmem[0] */
static bool parse_pass(cf_rt_cubin *c, const char *name)
{
    bool any = false, in_entry = name == NULL;
    const char *log = c->log;
    for (const char *line = log; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!end)
            end = line + strlen(line);
        const char *ce = strstr(line, "Compiling entry function");
        if (ce && ce < end) {
            if (name) {
                /* 'name' (extern "C") or a mangled '_Z<len><name>...'. */
                const char *q = strchr(line, '\'');
                const char *q2 = q && q < end ? strchr(q + 1, '\'') : NULL;
                char mangled[CF_MAX_NAME + 16];
                size_t nl = strlen(name);
                int ml = snprintf(mangled, sizeof mangled, "_Z%zu%s", nl, name);
                in_entry = q2 && (((size_t)(q2 - q - 1) == nl && !memcmp(q + 1, name, nl)) ||
                                  (q2 - q - 1 >= ml && !memcmp(q + 1, mangled, (size_t)ml)));
            }
        } else if (in_entry) {
            int v;
            if ((v = number_before(line, end, " bytes stack frame")) >= 0)
                c->stack_bytes = imax(c->stack_bytes, v);
            if ((v = number_before(line, end, " bytes spill stores")) >= 0)
                c->spill_store_bytes = imax(c->spill_store_bytes, v);
            if ((v = number_before(line, end, " bytes spill loads")) >= 0)
                c->spill_load_bytes = imax(c->spill_load_bytes, v);
            if ((v = number_before(line, end, " registers")) >= 0) {
                any = true;
                c->registers = imax(c->registers, v);
                v = number_before(line, end, " bytes smem");
                c->smem_bytes = imax(c->smem_bytes, imax(v, 0));
                if ((v = number_before(line, end, " barriers")) >= 0)
                    c->barriers = imax(c->barriers, v);
            }
        }
        line = *end ? end + 1 : end;
    }
    return any;
}

void cf_rt_parse_ptxas(cf_rt_cubin *c, const char *name)
{
    c->wgmma_serialized = c->log && strstr(c->log, "C7515") != NULL;
    for (int pass = 0; pass < 2; pass++) {
        c->registers = c->spill_store_bytes = c->spill_load_bytes = -1;
        c->stack_bytes = c->smem_bytes = c->barriers = -1;
        if (!c->log || parse_pass(c, pass == 0 ? name : NULL) || !name)
            return;
    }
}

static cf_status nvrtc_compile(const char *src, const char *name, const char *const *opts,
                               int n_opts, const char *const *hn, const char *const *ht, int nh,
                               cf_rt_cubin *out, cf_error *err)
{
    cf_status st = CF_OK;
    nvrtcProgram prog = NULL;
    char progname[CF_MAX_NAME + 8];
    snprintf(progname, sizeof progname, "%s.cu", name);
    double t0 = cf_rt_now_ms();
    CF_NVRTC_CHECK(nv.nvrtcCreateProgram(&prog, src, progname, nh, (const char **)ht,
                                        (const char **)hn));
    nvrtcResult rc = nv.nvrtcCompileProgram(prog, n_opts, (const char **)opts);
    size_t log_n = 0;
    CF_NVRTC_CHECK(nv.nvrtcGetProgramLogSize(prog, &log_n));
    out->log = malloc(log_n + 1);
    if (!out->log) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory for the NVRTC log");
        goto fail;
    }
    out->log[0] = '\0';
    if (log_n)
        CF_NVRTC_CHECK(nv.nvrtcGetProgramLog(prog, out->log));
    /* NOTE: NVRTC 13.0's log can hold a NUL before the ptxas messages: treat it
     * as bytes (the size counts the final NUL) and keep what follows. */
    size_t n = log_n ? log_n - 1 : 0;
    for (size_t i = 0; i < n; i++)
        if (out->log[i] == '\0')
            out->log[i] = '\n';
    while (n && (out->log[n - 1] == '\n' || out->log[n - 1] == ' '))
        n--;
    out->log[n] = '\0';
    out->log_size = n;
    if (rc != NVRTC_SUCCESS) {
        const size_t room = 1700;
        st = cf_errorf(err, CF_ERR_NVRTC, (cf_loc){0},
                       "NVRTC could not compile '%s' (%s):\n%.*s%s", progname,
                       nv.nvrtcGetErrorString(rc), (int)(n < room ? n : room), out->log,
                       n < room ? "" : "\n... (log truncated)");
        goto fail;
    }
    size_t cubin_n = 0, ptx_n = 0;
    CF_NVRTC_CHECK(nv.nvrtcGetCUBINSize(prog, &cubin_n));
    if (cubin_n == 0) {
        st = cf_errorf(err, CF_ERR_NVRTC, (cf_loc){0},
                       "NVRTC produced an empty CUBIN for '%s' (is the target a real sm_ arch?)",
                       progname);
        goto fail;
    }
    CF_NVRTC_CHECK(nv.nvrtcGetPTXSize(prog, &ptx_n));
    out->cubin = malloc(cubin_n);
    out->ptx = malloc(ptx_n + 1);
    if (!out->cubin || !out->ptx) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory for a CUBIN");
        goto fail;
    }
    CF_NVRTC_CHECK(nv.nvrtcGetCUBIN(prog, (char *)out->cubin));
    out->ptx[0] = '\0';
    if (ptx_n)
        CF_NVRTC_CHECK(nv.nvrtcGetPTX(prog, out->ptx));
    out->ptx[ptx_n] = '\0';
    out->cubin_size = cubin_n;
    out->ptx_size = strlen(out->ptx);
    out->compile_ms = cf_rt_now_ms() - t0;
fail:
    if (prog)
        nv.nvrtcDestroyProgram(&prog);
    if (st != CF_OK) {
        free(out->cubin);
        free(out->ptx);
        out->cubin = NULL;
        out->ptx = NULL;
        out->cubin_size = out->ptx_size = 0;
    }
    return st;
}

cf_status cf_rt_compile(const char *src, const char *name, const char *const *extra_opts,
                        int n_extra, cf_rt_cubin *out, cf_error *err)
{
    cf_rt_compile_opts o = {.extra_opts = extra_opts, .n_extra = n_extra};
    return cf_rt_compile_ex(src, name, &o, out, err);
}

static bool env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* What one compile hands NVRTC, and what its key hashes: the base options, the
 * extra ones (and -lineinfo), every embedded header and the extra ones. */
typedef struct compile_in {
    const char **opts, **hn, **ht;
    int n_opts, nh;
} compile_in;

static void compile_in_free(compile_in *in)
{
    free(in->opts);
    free(in->hn);
    free(in->ht);
}

static cf_status compile_in_make(const cf_rt_compile_opts *o, compile_in *in, cf_error *err)
{
    static const char *const base[] = {CF_RT_ARCH_OPT, "-std=c++17", "--ptxas-options=-v"};
    /* CF_LINEINFO=1: line tables in the cubin, so a profiler maps SASS to the generated source */
    const bool lineinfo = env_flag("CF_LINEINFO");
    const int nb = CF_ARRAY_LEN(base), ne = cf_rt_n_device_headers;
    in->n_opts = nb + o->n_extra + lineinfo;
    in->nh = ne + o->n_headers;
    in->opts = malloc(sizeof *in->opts * (size_t)in->n_opts);
    in->hn = malloc(sizeof *in->hn * (size_t)(in->nh + 1));
    in->ht = malloc(sizeof *in->ht * (size_t)(in->nh + 1));
    if (!in->opts || !in->hn || !in->ht)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    for (int i = 0; i < in->n_opts - lineinfo; i++)
        in->opts[i] = i < nb ? base[i] : o->extra_opts[i - nb];
    if (lineinfo)
        in->opts[in->n_opts - 1] = "-lineinfo";
    for (int i = 0; i < in->nh; i++) {
        in->hn[i] = i < ne ? cf_rt_device_header_names[i] : o->header_names[i - ne];
        in->ht[i] = i < ne ? cf_rt_device_header_texts[i] : o->header_texts[i - ne];
    }
    return CF_OK;
}

/* The cache keeps three byte strings per key: the CUBIN, its PTX and the log. */
static cf_cache_entry entry_of(const cf_rt_cubin *c)
{
    return (cf_cache_entry){.part = {c->cubin, (unsigned char *)c->ptx, (unsigned char *)c->log},
                            .size = {c->cubin_size, c->ptx_size, c->log_size}};
}

/* Moves e's bytes into c (false, e freed, for an entry without a CUBIN). */
static bool take_entry(cf_rt_cubin *c, cf_cache_entry *e)
{
    if (e->size[0] == 0) {
        cf_cache_entry_free(e);
        return false;
    }
    c->cubin = e->part[0];
    c->ptx = (char *)e->part[1];
    c->log = (char *)e->part[2];
    c->cubin_size = e->size[0];
    c->ptx_size = e->size[1];
    c->log_size = e->size[2];
    return true;
}

/* Where a compile's entry lives on disk, when anywhere. */
typedef struct cache_place {
    char dir[1024];
    bool use_dir, writable, rebuilt;
} cache_place;

/* Fills out from the in-process table or the disk; true on a hit. */
static bool cache_lookup(cf_rt_cubin *out, cache_place *pl)
{
    cf_cache_entry e = {0};
    if (cf_cache_mem_get(out->key, &e) && take_entry(out, &e)) {
        out->cache = CF_RT_CACHE_HIT_MEMORY;
        return true;
    }
    /* a read-only dir is still read (its note says why nothing is stored) */
    pl->use_dir = cf_cache_dir(pl->dir, sizeof pl->dir, &pl->writable, out->cache_note,
                               sizeof out->cache_note);
    if (!pl->use_dir)
        return false;
    char note[512] = "";
    cf_cache_entry_path(pl->dir, out->key, out->cache_path, sizeof out->cache_path);
    cf_cache_lookup lk = cf_cache_load(pl->dir, out->key, &e, note, sizeof note);
    if (note[0] && pl->writable)
        snprintf(out->cache_note, sizeof out->cache_note, "%s", note);
    if (lk == CF_CACHE_FOUND && take_entry(out, &e)) {
        out->cache = CF_RT_CACHE_HIT_DISK;
        out->stored = true;
        cf_cache_entry v = entry_of(out);
        cf_cache_mem_put(out->key, &v);
        return true;
    }
    pl->rebuilt = lk != CF_CACHE_ABSENT;   /* corrupt, or (forged) without a CUBIN */
    return false;
}

/* After a compile: the disk entry (where writable) and the in-process one. */
static void cache_store(cf_rt_cubin *out, const cache_place *pl)
{
    cf_cache_entry v = entry_of(out);
    out->cache = pl->use_dir ? (pl->rebuilt ? CF_RT_CACHE_REBUILT : CF_RT_CACHE_MISS)
                             : CF_RT_CACHE_DISABLED;
    if (pl->use_dir && pl->writable) {
        char note[512] = "";
        out->stored = cf_cache_store(pl->dir, out->key, &v, note, sizeof note);
        if (!out->stored)
            snprintf(out->cache_note, sizeof out->cache_note, "%s", note);
    }
    cf_cache_mem_put(out->key, &v);
}

static cf_status check_args(const char *name, const cf_rt_compile_opts *o, cf_error *err)
{
    if (strlen(name) >= CF_MAX_NAME)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel name '%.*s...' too long",
                         32, name);
    if (o->n_extra < 0 || o->n_headers < 0 || (o->n_extra && !o->extra_opts) ||
        (o->n_headers && (!o->header_names || !o->header_texts)))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rt_compile: bad options");
    return CF_OK;
}

/* The compile itself, or a hit; the caller fills in timing and the ptxas figures. */
static cf_status compile_cached(const char *src, const char *name, const cf_rt_compile_opts *o,
                                cf_rt_cubin *out, cf_error *err)
{
    int major, minor;
    cf_status st = cf_rt_nvrtc_load(&major, &minor, NULL, err);
    if (st != CF_OK)
        return st;
    compile_in in = {0};
    cache_place pl = {.use_dir = false};
    if ((st = compile_in_make(o, &in, err)) != CF_OK)
        goto done;
    cf_cache_key(src, name, major, minor, in.opts, in.n_opts, in.hn, in.ht, in.nh, out->key);
    if (o->no_cache) {
        snprintf(out->cache_note, sizeof out->cache_note, "caching off for this compile");
    } else if (cache_lookup(out, &pl)) {
        goto done;
    } else if (env_flag("CF_ASSERT_CACHED")) {
        st = cf_errorf(err, CF_ERR_IO, (cf_loc){0},
                       "CF_ASSERT_CACHED=1 but kernel '%s' is not cached (%s%s%s)", name,
                       pl.use_dir ? out->cache_path : "no cache dir",
                       out->cache_note[0] ? ": " : "", out->cache_note);
        goto done;
    }
    st = nvrtc_compile(src, name, in.opts, in.n_opts, in.hn, in.ht, in.nh, out, err);
    if (st == CF_OK && o->no_cache)
        out->cache = CF_RT_CACHE_DISABLED;
    else if (st == CF_OK)
        cache_store(out, &pl);
done:
    compile_in_free(&in);
    return st;
}

cf_status cf_rt_compile_ex(const char *src, const char *name, const cf_rt_compile_opts *o,
                           cf_rt_cubin *out, cf_error *err)
{
    static const cf_rt_compile_opts defaults;
    if (!o)
        o = &defaults;
    if (!out || !src)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rt_compile: null argument");
    memset(out, 0, sizeof *out);
    cf_rt_parse_ptxas(out, NULL);
    double t0 = cf_rt_now_ms();
    if (!name || !*name)
        name = "kernel";
    cf_status st = check_args(name, o, err);
    if (st != CF_OK)
        return st;
    st = compile_cached(src, name, o, out, err);
    if (st == CF_OK)
        cf_rt_parse_ptxas(out, name);
    out->total_ms = cf_rt_now_ms() - t0;
    return st;
}
