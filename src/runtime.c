/* runtime.c — NVRTC, the CUDA driver and cuBLASLt, all loaded at run time.
 *
 * Nothing here links against libcuda, libnvrtc or libcublasLt: each library
 * is dlopen'ed on first use and called through one table of function
 * pointers whose types come from the toolkit headers (types only).  So the
 * library, the CLI and every CPU test build and pass on a machine without a
 * GPU; what needs one fails with CF_ERR_NO_DEVICE.
 *
 * Sections: loading helpers, NVRTC and cf_rt_compile (through cache.c), the
 * driver (init, modules, launch, memory, streams, events), TMA tensor maps,
 * cuBLASLt.
 */
#include "cf_internal.h"

#include <cuda.h>
#include <cublasLt.h>
#include <nvrtc.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STR_(x) #x
#define SYM(x) STR_(x)   /* the exported name after cuda.h's _v2 renames */

typedef struct sym_ref {
    const char *name;
    size_t off;
    bool optional;
} sym_ref;


/* Fills the table at base from lib; NULL or the first missing required name. */
static const char *load_syms(void *lib, void *base, const sym_ref *syms, int n)
{
    for (int i = 0; i < n; i++) {
        void *p = dlsym(lib, syms[i].name);
        if (!p && !syms[i].optional)
            return syms[i].name;
        memcpy((char *)base + syms[i].off, &p, sizeof p);
    }
    return NULL;
}

/* dlopen of the first name that loads: env_path, then names, then each of
 * names under $CUDA_HOME/lib64 and /usr/local/cuda/lib64.  On failure, tried
 * gets the list of names and the last dlerror(). */
static void *open_first(const char *env_path, const char *const *names, int n,
                        const char **loaded, char *tried, size_t tried_n)
{
    static char loaded_buf[3][1024];
    static int loaded_i;
    char cand[1024];
    const char *home = getenv("CUDA_HOME");
    const char *dirs[2] = {home && *home ? home : NULL, "/usr/local/cuda"};
    size_t used = 0;
    tried[0] = '\0';
    for (int pass = 0; pass < 4; pass++) {
        int count = pass == 0 ? (env_path && *env_path ? 1 : 0) : n;
        for (int i = 0; i < count; i++) {
            if (pass == 0)
                snprintf(cand, sizeof cand, "%s", env_path);
            else if (pass == 1)
                snprintf(cand, sizeof cand, "%s", names[i]);
            else if (dirs[pass - 2])
                snprintf(cand, sizeof cand, "%s/lib64/%s", dirs[pass - 2], names[i]);
            else
                continue;
            void *lib = dlopen(cand, RTLD_NOW | RTLD_LOCAL);
            if (lib) {
                int slot = loaded_i++ % 3;
                snprintf(loaded_buf[slot], sizeof loaded_buf[slot], "%s", cand);
                *loaded = loaded_buf[slot];
                return lib;
            }
            const char *e = dlerror();
            if (used < tried_n) {
                int w = snprintf(tried + used, tried_n - used, "%s%s", used ? ", " : "", cand);
                used += w > 0 ? (size_t)w : 0;
            }
            if (e && pass <= 1 && i == 0 && used < tried_n) {
                int w = snprintf(tried + used, tried_n - used, " (%s)", e);
                used += w > 0 ? (size_t)w : 0;
            }
        }
    }
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ==== NVRTC ================================================================ */

#define NVRTC_FUNCS(X)                                                                 \
    X(nvrtcGetErrorString) X(nvrtcVersion) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog)              \
    X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

static struct nvrtc_table {
#define X(f) __typeof__(&f) f;
    NVRTC_FUNCS(X)
#undef X
} nv;

static const sym_ref nvrtc_syms[] = {
#define X(f) {SYM(f), offsetof(struct nvrtc_table, f), false},
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
        void *lib = open_first(env, names, forced ? 0 : CF_ARRAY_LEN(names), &nvrtc_path, tried,
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
        } else if ((missing = load_syms(lib, &nv, nvrtc_syms, CF_ARRAY_LEN(nvrtc_syms)))) {
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
            st = cf_errorf(err, CF_ERR_NVRTC, (cf_loc){0}, "%s failed: %s (runtime.c:%d)",   \
                           strip_table(#expr), nv.nvrtcGetErrorString(r_), __LINE__);          \
            goto fail;                                                                       \
        }                                                                                    \
    } while (0)

/* "nv.nvrtcFoo(a)" -> "nvrtcFoo(a)" in messages (the tables are nv, cu, lt). */
static const char *strip_table(const char *text)
{
    return strlen(text) > 3 && text[2] == '.' ? text + 3 : text;
}

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
    double t0 = now_ms();
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
    out->compile_ms = now_ms() - t0;
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
    double t0 = now_ms();
    if (!name || !*name)
        name = "kernel";
    if (strlen(name) >= CF_MAX_NAME)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "kernel name '%.*s...' too long",
                         32, name);
    if (o->n_extra < 0 || o->n_headers < 0 || (o->n_extra && !o->extra_opts) ||
        (o->n_headers && (!o->header_names || !o->header_texts)))
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "cf_rt_compile: bad options");
    int major, minor;
    cf_status st = cf_rt_nvrtc_load(&major, &minor, NULL, err);
    if (st != CF_OK)
        return st;

    static const char *const base[] = {CF_RT_ARCH_OPT, "-std=c++17", "--ptxas-options=-v"};
    /* CF_LINEINFO=1: line tables in the cubin, so a profiler maps SASS to the generated source */
    const bool lineinfo = env_flag("CF_LINEINFO");
    int n_opts = CF_ARRAY_LEN(base) + o->n_extra + lineinfo;
    int nh = cf_rt_n_device_headers + o->n_headers;
    const char **opts = malloc(sizeof *opts * (size_t)n_opts);
    const char **hn = malloc(sizeof *hn * (size_t)(nh + 1));
    const char **ht = malloc(sizeof *ht * (size_t)(nh + 1));
    if (!opts || !hn || !ht) {
        st = cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
        goto done;
    }
    for (int i = 0; i < n_opts - lineinfo; i++)
        opts[i] = i < CF_ARRAY_LEN(base) ? base[i] : o->extra_opts[i - CF_ARRAY_LEN(base)];
    if (lineinfo)
        opts[n_opts - 1] = "-lineinfo";
    for (int i = 0; i < nh; i++) {
        bool emb = i < cf_rt_n_device_headers;
        hn[i] = emb ? cf_rt_device_header_names[i] : o->header_names[i - cf_rt_n_device_headers];
        ht[i] = emb ? cf_rt_device_header_texts[i] : o->header_texts[i - cf_rt_n_device_headers];
    }
    cf_cache_key(src, name, major, minor, opts, n_opts, hn, ht, nh, out->key);

    char dir[1024] = "";
    bool use_dir = false, writable = false, rebuilt = false;
    if (o->no_cache) {
        snprintf(out->cache_note, sizeof out->cache_note, "caching off for this compile");
    } else {
        if (cf_cache_mem_get(out->key, out)) {
            out->cache = CF_RT_CACHE_HIT_MEMORY;
            goto hit;
        }
        /* a read-only dir is still read (its note says why nothing is stored) */
        use_dir = cf_cache_dir(dir, sizeof dir, &writable, out->cache_note, sizeof out->cache_note);
        if (use_dir) {
            char note[512] = "";
            cf_cache_entry_path(dir, out->key, out->cache_path, sizeof out->cache_path);
            cf_cache_lookup lk = cf_cache_load(dir, out->key, out, note, sizeof note);
            if (note[0] && writable)
                snprintf(out->cache_note, sizeof out->cache_note, "%s", note);
            if (lk == CF_CACHE_FOUND) {
                out->cache = CF_RT_CACHE_HIT_DISK;
                out->stored = true;
                cf_cache_mem_put(out->key, out);
                goto hit;
            }
            rebuilt = lk == CF_CACHE_CORRUPT;
        }
        if (env_flag("CF_ASSERT_CACHED")) {
            st = cf_errorf(err, CF_ERR_IO, (cf_loc){0},
                           "CF_ASSERT_CACHED=1 but kernel '%s' is not cached (%s%s%s)", name,
                           use_dir ? out->cache_path : "no cache dir",
                           out->cache_note[0] ? ": " : "", out->cache_note);
            goto done;
        }
    }
    st = nvrtc_compile(src, name, opts, n_opts, hn, ht, nh, out, err);
    if (st != CF_OK)
        goto done;
    out->cache = use_dir ? (rebuilt ? CF_RT_CACHE_REBUILT : CF_RT_CACHE_MISS)
                         : CF_RT_CACHE_DISABLED;
    if (use_dir && writable) {
        char note[512] = "";
        out->stored = cf_cache_store(dir, out->key, out, note, sizeof note);
        if (!out->stored)
            snprintf(out->cache_note, sizeof out->cache_note, "%s", note);
    }
    if (!o->no_cache)
        cf_cache_mem_put(out->key, out);
hit:
    cf_rt_parse_ptxas(out, name);
done:
    free(opts);
    free(hn);
    free(ht);
    out->total_ms = now_ms() - t0;
    return st;
}

/* ==== the CUDA driver ======================================================== */

#define DRV_FUNCS(X)                                                                       \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) \
    X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem)             \
    X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData)   \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuModuleGetGlobal) X(cuFuncGetAttribute) X(cuFuncSetAttribute)      \
    X(cuOccupancyMaxActiveClusters) X(cuLaunchKernelEx) X(cuMemAlloc) X(cuMemFree)            \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpy2DAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemsetD16) \
    X(cuMemsetD32) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)               \
    X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)                \
    X(cuEventElapsedTime) X(cuTensorMapEncodeTiled)

static struct drv_table {
#define X(f) __typeof__(&f) f;
    DRV_FUNCS(X)
#undef X
} cu;

static const sym_ref drv_syms[] = {
#define X(f) {SYM(f), offsetof(struct drv_table, f), false},
    DRV_FUNCS(X)
#undef X
};

static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int drv_state;            /* 0 untried, 1 ready, 2 failed */
static cf_status drv_status;
static char drv_msg[1024];
static CUdevice drv_dev;
static CUcontext drv_ctx;
static int drv_ordinal;
static _Thread_local bool ctx_current;

static const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN_CODE";
    return s;
}

static const char *cu_string(CUresult r)
{
    const char *s = NULL;
    if (!cu.cuGetErrorString || cu.cuGetErrorString(r, &s) != CUDA_SUCCESS || !s)
        return "unknown error";
    return s;
}

static cf_status cu_fail(cf_error *err, CUresult r, const char *text, int line)
{
    return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "%s failed: %s (%s) (runtime.c:%d)",
                     strip_table(text), cu_name(r), cu_string(r), line);
}

/* Records the failed call's text, the code's name and string, then fails. */
#define CF_CU_CHECK(expr)                                     \
    do {                                                      \
        CUresult r_ = (expr);                                 \
        if (r_ != CUDA_SUCCESS) {                             \
            st = cu_fail(err, r_, #expr, __LINE__);           \
            goto fail;                                        \
        }                                                     \
    } while (0)

static void drv_init_locked(void)
{
    drv_status = CF_ERR_NO_DEVICE;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(drv_msg, sizeof drv_msg,
                 "CUDA driver libcuda.so.1 not found (no GPU on this machine?): %s",
                 e ? e : "dlopen failed");
        return;
    }
    const char *missing = load_syms(lib, &cu, drv_syms, CF_ARRAY_LEN(drv_syms));
    if (missing) {
        snprintf(drv_msg, sizeof drv_msg,
                 "CUDA driver libcuda.so.1 lacks %s: the driver is too old for comfuse", missing);
        return;
    }
    CUresult r = cu.cuInit(0);
    int count = 0;
    if (r != CUDA_SUCCESS) {
        snprintf(drv_msg, sizeof drv_msg, "cuInit failed: %s (%s)", cu_name(r), cu_string(r));
        return;
    }
    if ((r = cu.cuDeviceGetCount(&count)) != CUDA_SUCCESS || count == 0) {
        snprintf(drv_msg, sizeof drv_msg, "no CUDA device: cuDeviceGetCount gave %d (%s)", count,
                 cu_name(r));
        return;
    }
    const char *dev_env = getenv("CF_DEVICE");
    drv_ordinal = 0;
    if (dev_env && *dev_env) {
        char *end;
        long v = strtol(dev_env, &end, 10);
        if (*end || v < 0 || v >= count) {
            drv_status = CF_ERR_INVALID_ARG;
            snprintf(drv_msg, sizeof drv_msg, "CF_DEVICE=%s: not a device ordinal (0..%d)",
                     dev_env, count - 1);
            return;
        }
        drv_ordinal = (int)v;
    }
    if ((r = cu.cuDeviceGet(&drv_dev, drv_ordinal)) != CUDA_SUCCESS ||
        (r = cu.cuDevicePrimaryCtxRetain(&drv_ctx, drv_dev)) != CUDA_SUCCESS) {
        snprintf(drv_msg, sizeof drv_msg, "cannot open device %d: %s (%s)", drv_ordinal,
                 cu_name(r), cu_string(r));
        return;
    }
    drv_status = CF_OK;
}

cf_status cf_rt_init(cf_error *err)
{
    int s = atomic_load(&drv_state);
    if (s == 0) {
        pthread_mutex_lock(&drv_mu);
        if (atomic_load(&drv_state) == 0) {
            drv_init_locked();
            atomic_store(&drv_state, drv_status == CF_OK ? 1 : 2);
        }
        pthread_mutex_unlock(&drv_mu);
        s = atomic_load(&drv_state);
    }
    if (s != 1)
        return cf_errorf(err, drv_status, (cf_loc){0}, "%s", drv_msg);
    if (!ctx_current) {
        CUresult r = cu.cuCtxSetCurrent(drv_ctx);
        if (r != CUDA_SUCCESS)
            return cu_fail(err, r, "cuCtxSetCurrent(primary context)", __LINE__);
        ctx_current = true;
    }
    return CF_OK;
}

#define INIT()                             \
    do {                                   \
        if ((st = cf_rt_init(err)) != CF_OK) \
            return st;                     \
    } while (0)

cf_status cf_rt_device_info_get(cf_rt_device_info *info, cf_error *err)
{
    cf_status st;
    INIT();
    memset(info, 0, sizeof *info);
    info->ordinal = drv_ordinal;
    CF_CU_CHECK(cu.cuDeviceGetName(info->name, (int)sizeof info->name, drv_dev));
    static const struct { CUdevice_attribute a; size_t off; } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, offsetof(cf_rt_device_info, cc_major)},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, offsetof(cf_rt_device_info, cc_minor)},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, offsetof(cf_rt_device_info, sm_count)},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
         offsetof(cf_rt_device_info, smem_optin)},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
         offsetof(cf_rt_device_info, smem_per_sm)},
        {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, offsetof(cf_rt_device_info, l2_bytes)},
        {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, offsetof(cf_rt_device_info, clock_khz)},
    };
    for (int i = 0; i < CF_ARRAY_LEN(attrs); i++)
        CF_CU_CHECK(cu.cuDeviceGetAttribute((int *)((char *)info + attrs[i].off), attrs[i].a,
                                           drv_dev));
    CF_CU_CHECK(cu.cuDeviceTotalMem(&info->total_mem, drv_dev));
    CF_CU_CHECK(cu.cuDriverGetVersion(&info->driver_version));
fail:
    return st;
}

cf_status cf_rt_module_load(const void *cubin, cf_rt_module *mod, cf_error *err)
{
    cf_status st;
    INIT();
    CUmodule m = NULL;
    CF_CU_CHECK(cu.cuModuleLoadData(&m, cubin));
    *mod = m;
fail:
    return st;
}

cf_status cf_rt_module_unload(cf_rt_module mod, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuModuleUnload((CUmodule)mod));
fail:
    return st;
}

cf_status cf_rt_module_get_global(cf_rt_module mod, const char *name, cf_rt_devptr *p, size_t *bytes,
                                  cf_error *err)
{
    cf_status st;
    INIT();
    CUdeviceptr d = 0;
    size_t n = 0;
    CF_CU_CHECK(cu.cuModuleGetGlobal(&d, &n, (CUmodule)mod, name));
    *p = (cf_rt_devptr)d;
    *bytes = n;
fail:
    return st;
}

cf_status cf_rt_module_get_func(cf_rt_module mod, const char *name, cf_rt_func *f, cf_error *err)
{
    cf_status st;
    INIT();
    CUfunction fn = NULL;
    CUresult r = cu.cuModuleGetFunction(&fn, (CUmodule)mod, name);
    if (r != CUDA_SUCCESS)
        return cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                         "cuModuleGetFunction(\"%s\") failed: %s (%s) "
                         "(is the kernel extern \"C\"?)",
                         name, cu_name(r), cu_string(r));
    *f = fn;
    return CF_OK;
}

cf_status cf_rt_func_get_attrs(cf_rt_func f, cf_rt_func_attrs *a, cf_error *err)
{
    cf_status st;
    INIT();
    CUfunction fn = f;
    memset(a, 0, sizeof *a);
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->const_bytes, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                      fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->ptx_version, CU_FUNC_ATTRIBUTE_PTX_VERSION, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->binary_version, CU_FUNC_ATTRIBUTE_BINARY_VERSION, fn));
    CF_CU_CHECK(cu.cuFuncGetAttribute(&a->max_dynamic_smem,
                                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn));
fail:
    return st;
}

cf_status cf_rt_func_prepare(cf_rt_func f, int dyn_smem, int cluster, cf_error *err)
{
    cf_status st;
    INIT();
    CUfunction fn = f;
    CF_CU_CHECK(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      dyn_smem));
    if (cluster > 8)
        CF_CU_CHECK(cu.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                          1));
fail:
    return st;
}

cf_status cf_rt_max_active_clusters(cf_rt_func f, int cluster, int block, int dyn_smem, int *n,
                                    cf_error *err)
{
    cf_status st;
    INIT();
    if (cluster < 1 || block < 1)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "cluster size %d / block %d must be positive", cluster, block);
    CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION};
    attr.value.clusterDim.x = (unsigned)cluster;
    attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg = {.gridDimX = (unsigned)cluster, .gridDimY = 1, .gridDimZ = 1,
                          .blockDimX = (unsigned)block, .blockDimY = 1, .blockDimZ = 1,
                          .sharedMemBytes = (unsigned)dyn_smem, .attrs = &attr, .numAttrs = 1};
    CF_CU_CHECK(cu.cuOccupancyMaxActiveClusters(n, (CUfunction)f, &cfg));
fail:
    return st;
}

cf_status cf_rt_launch(cf_rt_func f, const cf_rt_launch_cfg *c, void **args, cf_error *err)
{
    cf_status st;
    INIT();
    CUlaunchAttribute attrs[2] = {{.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION}};
    unsigned cx = c->cluster[0] ? c->cluster[0] : 1, cy = c->cluster[1] ? c->cluster[1] : 1;
    unsigned cz = c->cluster[2] ? c->cluster[2] : 1;
    attrs[0].value.clusterDim.x = cx;
    attrs[0].value.clusterDim.y = cy;
    attrs[0].value.clusterDim.z = cz;
    unsigned n_attrs = cx * cy * cz > 1 ? 1 : 0;
    if (c->cooperative) {
        attrs[n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n_attrs++].value.cooperative = 1;
    }
    CUlaunchConfig cfg = {
        .gridDimX = c->grid[0], .gridDimY = c->grid[1] ? c->grid[1] : 1,
        .gridDimZ = c->grid[2] ? c->grid[2] : 1, .blockDimX = c->block[0],
        .blockDimY = c->block[1] ? c->block[1] : 1, .blockDimZ = c->block[2] ? c->block[2] : 1,
        .sharedMemBytes = c->dyn_smem, .hStream = (CUstream)c->stream,
        .attrs = attrs, .numAttrs = n_attrs};
    if (cfg.gridDimX % cx || cfg.gridDimY % cy || cfg.gridDimZ % cz)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "grid %ux%ux%u is not a multiple of the cluster %ux%ux%u", cfg.gridDimX,
                         cfg.gridDimY, cfg.gridDimZ, cx, cy, cz);
    CF_CU_CHECK(cu.cuLaunchKernelEx(&cfg, (CUfunction)f, args, NULL));
fail:
    return st;
}

cf_status cf_rt_malloc(cf_rt_devptr *p, size_t bytes, cf_error *err)
{
    cf_status st;
    INIT();
    CUdeviceptr d = 0;
    CF_CU_CHECK(cu.cuMemAlloc(&d, bytes));
    *p = d;
fail:
    return st;
}

cf_status cf_rt_free(cf_rt_devptr p, cf_error *err)
{
    cf_status st;
    INIT();
    if (p)
        CF_CU_CHECK(cu.cuMemFree(p));
fail:
    return st;
}

cf_status cf_rt_memcpy_htod(cf_rt_devptr dst, const void *src, size_t bytes, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemcpyHtoD(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memcpy_dtoh(void *dst, cf_rt_devptr src, size_t bytes, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemcpyDtoH(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memcpy_2d_async(cf_rt_devptr dst, size_t dst_pitch, cf_rt_devptr src, size_t src_pitch,
                                size_t width_bytes, size_t rows, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = src, .srcPitch = src_pitch,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = dst, .dstPitch = dst_pitch,
                       .WidthInBytes = width_bytes, .Height = rows};
    CF_CU_CHECK(cu.cuMemcpy2DAsync(&c, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_memcpy_dtod(cf_rt_devptr dst, cf_rt_devptr src, size_t bytes, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemcpyDtoD(dst, src, bytes));
fail:
    return st;
}

cf_status cf_rt_memset_d8(cf_rt_devptr dst, uint8_t v, size_t count, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemsetD8(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_memset_d8_async(cf_rt_devptr dst, uint8_t v, size_t count, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemsetD8Async(dst, v, count, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_memset_d16(cf_rt_devptr dst, uint16_t v, size_t count, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemsetD16(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_memset_d32(cf_rt_devptr dst, uint32_t v, size_t count, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuMemsetD32(dst, v, count));
fail:
    return st;
}

cf_status cf_rt_ctx_sync(cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuCtxSynchronize());
fail:
    return st;
}

cf_status cf_rt_stream_create(cf_rt_stream *s, cf_error *err)
{
    cf_status st;
    INIT();
    CUstream cs = NULL;
    CF_CU_CHECK(cu.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    *s = cs;
fail:
    return st;
}

cf_status cf_rt_stream_destroy(cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuStreamDestroy((CUstream)s));
fail:
    return st;
}

cf_status cf_rt_stream_sync(cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuStreamSynchronize((CUstream)s));
fail:
    return st;
}

cf_status cf_rt_event_create(cf_rt_event *e, cf_error *err)
{
    cf_status st;
    INIT();
    CUevent ev = NULL;
    CF_CU_CHECK(cu.cuEventCreate(&ev, CU_EVENT_DEFAULT));
    *e = ev;
fail:
    return st;
}

cf_status cf_rt_event_destroy(cf_rt_event e, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuEventDestroy((CUevent)e));
fail:
    return st;
}

cf_status cf_rt_event_record(cf_rt_event e, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuEventRecord((CUevent)e, (CUstream)s));
fail:
    return st;
}

cf_status cf_rt_event_sync(cf_rt_event e, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuEventSynchronize((CUevent)e));
fail:
    return st;
}

cf_status cf_rt_event_elapsed_ms(cf_rt_event start, cf_rt_event end, float *ms, cf_error *err)
{
    cf_status st;
    INIT();
    CF_CU_CHECK(cu.cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
fail:
    return st;
}

/* ==== TMA tensor maps ======================================================== */

#define TWO_POW_32 ((uint64_t)1 << 32)
#define TWO_POW_40 ((uint64_t)1 << 40)

cf_status cf_rt_tma_check(const char *name, cf_dtype t, const void *dev_ptr, uint64_t rows,
                          uint64_t cols, uint64_t pitch, uint32_t box_rows, uint32_t box_cols,
                          int swizzle, cf_error *err)
{
    char who[CF_MAX_NAME + 16];
    snprintf(who, sizeof who, name ? "tensor '%s'" : "tensor", name);
    if ((unsigned)t >= CF_DTYPE_COUNT)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: bad dtype %d", who, (int)t);
    const char *tn = cf_dtype_name(t);
    uint64_t es = cf_dtype_size(t);
    if (!dev_ptr)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: null device pointer", who);
    if ((uintptr_t)dev_ptr % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: base address %p is not 16-byte aligned (TMA needs a 16-byte "
                         "aligned global address; offset %u bytes)",
                         who, dev_ptr, (unsigned)((uintptr_t)dev_ptr % 16));
    if (rows == 0 || cols == 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "%s: empty shape [%llu, %llu]",
                         who, (unsigned long long)rows, (unsigned long long)cols);
    if (rows > TWO_POW_32 || cols > TWO_POW_32)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: dimension %llu exceeds 2^32 (the TMA limit per dimension)", who,
                         (unsigned long long)(rows > TWO_POW_32 ? rows : cols));
    if (pitch < cols)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "%s: row pitch %llu elements is smaller than the %llu columns", who,
                         (unsigned long long)pitch, (unsigned long long)cols);
    if (pitch >= TWO_POW_40 / es)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: row pitch %llu elements is not below 2^40 bytes (the TMA stride "
                         "limit)", who, (unsigned long long)pitch);
    uint64_t pitch_bytes = pitch * es;
    if (pitch_bytes % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: row pitch %llu bytes is not a multiple of 16 (TMA needs 16-byte "
                         "aligned pitches; pad the leading dimension to a multiple of %llu %s "
                         "elements)",
                         who, (unsigned long long)pitch_bytes, (unsigned long long)(16 / es), tn);
    if (box_rows == 0 || box_cols == 0 || box_rows > 256 || box_cols > 256)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: box %u x %u: each box dimension must be 1..256 (TMA box limit)",
                         who, box_rows, box_cols);
    if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0},
                         "%s: swizzle %d bytes: must be 0, 32, 64 or 128", who, swizzle);
    uint64_t inner = (uint64_t)box_cols * es;
    if (inner % 16)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: inner box of %u %s elements is %llu bytes, not a multiple of 16 "
                         "(TMA needs 16-byte box rows; use a multiple of %llu columns)",
                         who, box_cols, tn, (unsigned long long)inner,
                         (unsigned long long)(16 / es));
    if (swizzle && inner > (uint64_t)swizzle)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "%s: inner box of %u %s elements is %llu bytes, more than the %d-byte "
                         "swizzle span (use at most %llu columns per box)",
                         who, box_cols, tn, (unsigned long long)inner, swizzle,
                         (unsigned long long)(swizzle / (int)es));
    return CF_OK;
}

cf_status cf_rt_tensor_map_2d_named(void *desc128, const char *name, cf_dtype t,
                                    const void *dev_ptr, uint64_t rows, uint64_t cols,
                                    uint64_t pitch, uint32_t box_rows, uint32_t box_cols,
                                    int swizzle, cf_error *err)
{
    cf_status st = cf_rt_tma_check(name, t, dev_ptr, rows, cols, pitch, box_rows, box_cols,
                                   swizzle, err);
    if (st != CF_OK)
        return st;
    if (!desc128 || (uintptr_t)desc128 % 64)
        return cf_errorf(err, CF_ERR_ALIGNMENT, (cf_loc){0},
                         "tensor map storage %p is not 64-byte aligned", desc128);
    INIT();
    _Static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap is 128 bytes");
    static const CUtensorMapDataType types[] = {CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                                CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                                CU_TENSOR_MAP_DATA_TYPE_FLOAT32};
    _Static_assert(CF_ARRAY_LEN(types) == CF_DTYPE_COUNT, "types out of sync");
    CUtensorMapSwizzle sw = swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                            : swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                            : swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                            : CU_TENSOR_MAP_SWIZZLE_NONE;
    cuuint64_t dims[2] = {cols, rows}, strides[1] = {pitch * cf_dtype_size(t)};
    cuuint32_t box[2] = {box_cols, box_rows}, estr[2] = {1, 1};
    CF_CU_CHECK(cu.cuTensorMapEncodeTiled((CUtensorMap *)desc128, types[t], 2, (void *)dev_ptr,
                                         dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
fail:
    return st;
}

cf_status cf_rt_tensor_map_2d(void *desc128, cf_dtype t, const void *dev_ptr, uint64_t rows,
                              uint64_t cols, uint64_t pitch, uint32_t box_rows,
                              uint32_t box_cols, int swizzle, cf_error *err)
{
    return cf_rt_tensor_map_2d_named(desc128, NULL, t, dev_ptr, rows, cols, pitch, box_rows,
                                     box_cols, swizzle, err);
}

/* ==== cuBLASLt ============================================================= */

#define LT_FUNCS(X)                                                                           \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                            \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)                           \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                 \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

static struct lt_table {
#define X(f) __typeof__(&f) f;
    LT_FUNCS(X)
#undef X
    __typeof__(&cublasLtGetStatusName) cublasLtGetStatusName;
} lt;

static const sym_ref lt_syms[] = {
#define X(f) {SYM(f), offsetof(struct lt_table, f), false},
    LT_FUNCS(X)
#undef X
    {"cublasLtGetStatusName", offsetof(struct lt_table, cublasLtGetStatusName), true},
};

static pthread_mutex_t lt_mu = PTHREAD_MUTEX_INITIALIZER;
static bool lt_tried;
static cf_status lt_status;
static char lt_msg[1024];

static cf_status lt_load(cf_error *err)
{
    pthread_mutex_lock(&lt_mu);
    if (!lt_tried) {
        lt_tried = true;
        static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12",
                                            "libcublasLt.so"};
        char tried[700];
        const char *path = NULL, *missing = NULL;
        void *lib = open_first(NULL, names, CF_ARRAY_LEN(names), &path, tried, sizeof tried);
        lt_status = CF_ERR_NO_DEVICE;
        if (!lib)
            snprintf(lt_msg, sizeof lt_msg, "cuBLASLt not found (needed for the cuBLAS "
                     "baseline and the unfused path); tried %s", tried);
        else if ((missing = load_syms(lib, &lt, lt_syms, CF_ARRAY_LEN(lt_syms))))
            snprintf(lt_msg, sizeof lt_msg, "%s lacks %s", path, missing);
        else
            lt_status = CF_OK;
    }
    pthread_mutex_unlock(&lt_mu);
    if (lt_status != CF_OK)
        return cf_errorf(err, lt_status, (cf_loc){0}, "%s", lt_msg);
    return CF_OK;
}

#define CF_LT_CHECK(expr)                                                                     \
    do {                                                                                      \
        cublasStatus_t s_ = (expr);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0}, "%s failed: %s (%d) (runtime.c:%d)", \
                           strip_table(#expr),                                                \
                           lt.cublasLtGetStatusName ? lt.cublasLtGetStatusName(s_) : "cuBLAS",  \
                           (int)s_, __LINE__);                                                \
            goto fail;                                                                        \
        }                                                                                     \
    } while (0)

struct cf_rt_cublas_plan {
    cublasLtHandle_t h;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    cf_rt_devptr ws;
    size_t ws_size;
};

enum { LT_WORKSPACE = 32 << 20 };

cf_status cf_rt_cublas_plan_create(cf_dtype t, cf_dtype c_t, int64_t M, int64_t N, int64_t K, bool b_is_nk,
                                   cf_rt_cublas_plan **out, cf_error *err)
{
    cf_status st;
    *out = NULL;
    if ((t != CF_BF16 && t != CF_F16) || (c_t != t && c_t != CF_F32))
        return cf_errorf(err, CF_ERR_DTYPE, (cf_loc){0},
                         "cuBLAS GEMM takes bf16 or f16 operands and C of theirs or f32, not %s -> %s",
                         cf_dtype_name(t), cf_dtype_name(c_t));
    if (M <= 0 || N <= 0 || K <= 0)
        return cf_errorf(err, CF_ERR_INVALID_ARG, (cf_loc){0}, "bad GEMM shape %lldx%lldx%lld",
                         (long long)M, (long long)N, (long long)K);
    INIT();
    if ((st = lt_load(err)) != CF_OK)
        return st;
    cf_rt_cublas_plan *p = calloc(1, sizeof *p);
    cublasLtMatmulPreference_t pref = NULL;
    if (!p)
        return cf_errorf(err, CF_ERR_NO_MEMORY, (cf_loc){0}, "out of memory");
    cudaDataType_t dt = t == CF_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    /* Row-major C[M,N] = A[M,K] B is column-major C^T[N,M] = B^T A^T: cuBLAS's
     * "A" is our B (N x K, or K x N transposed when B is [N,K]), its "B" is
     * our A seen as K x M, and m = N, n = M. */
    cublasOperation_t ta = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
    CF_LT_CHECK(lt.cublasLtCreate(&p->h));
    CF_LT_CHECK(lt.cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CF_LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                 sizeof ta));
    CF_LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                 sizeof tb));
    if (b_is_nk)
        CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->la, dt, (uint64_t)K, (uint64_t)N, K));
    else
        CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->la, dt, (uint64_t)N, (uint64_t)K, N));
    CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->lb, dt, (uint64_t)K, (uint64_t)M, K));
    CF_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p->lc, c_t == CF_F32 ? CUDA_R_32F : dt, (uint64_t)N,
                                              (uint64_t)M, N));
    p->ws_size = LT_WORKSPACE;
    if ((st = cf_rt_malloc(&p->ws, p->ws_size, err)) != CF_OK)
        goto fail;
    CF_LT_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
    CF_LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &p->ws_size, sizeof p->ws_size));
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    CF_LT_CHECK(lt.cublasLtMatmulAlgoGetHeuristic(p->h, p->op, p->la, p->lb, p->lc, p->lc, pref,
                                                 1, &res, &n_res));
    if (n_res < 1) {
        st = cf_errorf(err, CF_ERR_CUDA, (cf_loc){0},
                       "cuBLASLt has no algorithm for %s %lldx%lldx%lld (B %s)",
                       cf_dtype_name(t), (long long)M, (long long)N, (long long)K,
                       b_is_nk ? "[N,K]" : "[K,N]");
        goto fail;
    }
    p->algo = res.algo;
    lt.cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return CF_OK;
fail:
    if (pref)
        lt.cublasLtMatmulPreferenceDestroy(pref);
    cf_rt_cublas_plan_free(p);
    return st;
}

cf_status cf_rt_cublas_plan_run(cf_rt_cublas_plan *p, cf_rt_devptr A, cf_rt_devptr B,
                                cf_rt_devptr C, cf_rt_stream s, cf_error *err)
{
    cf_status st;
    INIT();
    const float alpha = 1.0f, beta = 0.0f;
    CF_LT_CHECK(lt.cublasLtMatmul(p->h, p->op, &alpha, (const void *)(uintptr_t)B, p->la,
                                 (const void *)(uintptr_t)A, p->lb, &beta,
                                 (const void *)(uintptr_t)C, p->lc, (void *)(uintptr_t)C, p->lc,
                                 &p->algo, (void *)(uintptr_t)p->ws, p->ws_size,
                                 (cudaStream_t)s));
fail:
    return st;
}

void cf_rt_cublas_plan_free(cf_rt_cublas_plan *p)
{
    if (!p)
        return;
    if (p->la)
        lt.cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        lt.cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        lt.cublasLtMatrixLayoutDestroy(p->lc);
    if (p->op)
        lt.cublasLtMatmulDescDestroy(p->op);
    if (p->h)
        lt.cublasLtDestroy(p->h);
    if (p->ws)
        cf_rt_free(p->ws, NULL);
    free(p);
}

cf_status cf_rt_cublas_gemm(cf_dtype t, int64_t M, int64_t N, int64_t K, cf_rt_devptr A,
                            cf_rt_devptr B, bool b_is_nk, cf_rt_devptr C, cf_rt_stream s,
                            cf_error *err)
{
    cf_rt_cublas_plan *p;
    cf_status st = cf_rt_cublas_plan_create(t, t, M, N, K, b_is_nk, &p, err);
    if (st != CF_OK)
        return st;
    st = cf_rt_cublas_plan_run(p, A, B, C, s, err);
    if (st == CF_OK)
        st = cf_rt_stream_sync(s, err);
    cf_rt_cublas_plan_free(p);
    return st;
}
