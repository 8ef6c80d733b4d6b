/* cache.c — the on-disk kernel cache and the in-process table in front of it.
 *
 * It stores bytes under a key and knows nothing of what they are or how they
 * were made: an entry holds CF_CACHE_PARTS byte strings (rt_nvrtc.c keeps a
 * CUBIN, its PTX and the NVRTC log there), and the caller compiles on a miss
 * and stores the result.
 *
 * An entry is one file <dir>/<hex key>.cubin:
 *
 *     off  size  field
 *       0     8  magic "CFCUBIN\0"
 *       8     4  format version (CACHE_FORMAT), little-endian
 *      12     4  header size (HDR_SIZE)
 *      16     8  length of part 0 (the cubin)
 *      24     8  length of part 1 (the ptx)
 *      32     8  length of part 2 (the log)
 *      40    32  SHA-256 of the payload
 *      72     .  payload: the parts in order (no NULs between them)
 *
 * Writers fill a mkstemp file in the same dir, fsync it and rename() it over
 * the entry, so readers see either no entry or a complete one; two processes
 * compiling the same kernel both rename and either result is valid.  A reader
 * that finds a bad entry (magic, version, lengths, checksum) removes it and
 * the caller rebuilds it.
 */
#include "cf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CACHE_FORMAT = 1, HDR_SIZE = 72 };
static const char MAGIC[8] = "CFCUBIN";   /* + its NUL */
/* NOTE: bump when anything about what goes into a key or an entry changes. */
static const char KEY_DOMAIN[] = "comfuse-kernel-cache-v2";
#define MAX_PART ((uint64_t)1 << 30)

/* ---- the key ------------------------------------------------------------- */

/* Every field is length-prefixed so no two field lists hash alike. */
static void put_field(cf_sha256_ctx *s, const void *p, size_t n)
{
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)n >> (8 * i));
    cf_sha256_update(s, len, 8);
    cf_sha256_update(s, p, n);
}

static void put_str(cf_sha256_ctx *s, const char *str)
{
    put_field(s, str ? str : "", str ? strlen(str) : 0);
}

/* The source as the compiler sees it: each comment becomes one space (so no
 * tokens join) plus the newlines it spanned (so with -lineinfo every line keeps
 * its number); string and character literals are copied as they are.  Comments
 * never reach the cubin, and the generators' comments name where a kernel came
 * from (the spec's path in the first line, node names in labels), so the key
 * hashes this form: the same kernel reached from another path, from the C API
 * or with other names is one entry.  (A C++ raw string is read as plain text.) */
typedef struct code_sink {
    cf_sha256_ctx *s;   /* NULL: only count                                      */
    size_t len;
} code_sink;

static void sink_put(code_sink *k, const char *p, size_t n)
{
    if (k->s)
        cf_sha256_update(k->s, p, n);
    k->len += n;
}

static const char *skip_comment(const char *p, code_sink *k)
{
    bool line = p[1] == '/';
    sink_put(k, " ", 1);
    for (p += 2; *p; p++) {
        if (line && *p == '\n')
            return p;                          /* the newline stays code */
        if (!line && p[0] == '*' && p[1] == '/')
            return p + 2;
        if (*p == '\n')
            sink_put(k, "\n", 1);
        if (line && p[0] == '\\' && p[1] == '\n') {  /* a // comment continued */
            sink_put(k, "\n", 1);
            p++;
        }
    }
    return p;
}

static void code_of(const char *src, code_sink *k)
{
    const char *p = src ? src : "", *run = p;
    while (*p) {
        if (*p == '"' || *p == '\'') {
            char q = *p++;
            while (*p && *p != q && *p != '\n')
                p += p[0] == '\\' && p[1] ? 2 : 1;
            if (*p == q)
                p++;
        } else if (p[0] == '/' && (p[1] == '*' || p[1] == '/')) {
            sink_put(k, run, (size_t)(p - run));
            run = p = skip_comment(p, k);
        } else {
            p++;
        }
    }
    sink_put(k, run, (size_t)(p - run));
}

/* put_str of src's code (code_of): its length, then its bytes. */
static void put_code(cf_sha256_ctx *s, const char *src)
{
    code_sink count = {0};
    code_of(src, &count);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)count.len >> (8 * i));
    cf_sha256_update(s, len, 8);
    code_sink hash = {.s = s};
    code_of(src, &hash);
}

void cf_cache_key(const char *src, const char *name, int nvrtc_major, int nvrtc_minor,
                  const char *const *opts, int n_opts, const char *const *hdr_names,
                  const char *const *hdr_texts, int n_hdrs, char hex[65])
{
    cf_sha256_ctx s;
    cf_sha256_init(&s);
    char ver[64];
    snprintf(ver, sizeof ver, "%d", CACHE_FORMAT);
    put_str(&s, KEY_DOMAIN);
    put_str(&s, ver);
    put_str(&s, CF_VERSION);
    snprintf(ver, sizeof ver, "nvrtc %d.%d", nvrtc_major, nvrtc_minor);
    put_str(&s, ver);
    snprintf(ver, sizeof ver, "%d options", n_opts);
    put_str(&s, ver);
    for (int i = 0; i < n_opts; i++)
        put_str(&s, opts[i]);
    put_str(&s, name);
    put_code(&s, src);
    snprintf(ver, sizeof ver, "%d headers", n_hdrs);
    put_str(&s, ver);
    for (int i = 0; i < n_hdrs; i++) {
        put_str(&s, hdr_names[i]);
        put_str(&s, hdr_texts[i]);
    }
    unsigned char d[32];
    cf_sha256_final(&s, d);
    cf_sha256_hex(d, hex);
}

/* ---- the directory --------------------------------------------------------- */

/* Creates path like mkdir -p; true when it is a directory.  *writable: entries may be
 * written there too (else the reason in note; a read-only cache is still read). */
static bool mkdir_p(const char *path, bool *writable, char *note, size_t note_n)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        snprintf(note, note_n, "cache dir path too long");
        return false;
    }
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            snprintf(note, note_n, "cannot create cache dir '%s': %s", buf, strerror(errno));
            return false;
        }
        *p = c;
        if (c == '\0')
            break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(note, note_n, "cache dir '%s' is not a directory", path);
        return false;
    }
    if (access(path, R_OK | X_OK) != 0) {
        snprintf(note, note_n, "cache dir '%s' is not readable: %s", path, strerror(errno));
        return false;
    }
    const char *ro = getenv("CF_CACHE_READONLY");
    if (ro && *ro && strcmp(ro, "0") != 0)
        snprintf(note, note_n, "cache dir '%s' is read-only (CF_CACHE_READONLY=%s)", path, ro);
    else if (access(path, W_OK) != 0)
        snprintf(note, note_n, "cache dir '%s' is not writable: %s", path, strerror(errno));
    else
        *writable = true;
    return true;
}

bool cf_cache_dir(char *dir, size_t n, bool *writable, char *note, size_t note_n)
{
    *writable = false;
    const char *env = getenv("CF_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int len;
    if (env && *env)
        len = snprintf(dir, n, "%s", env);
    else if (xdg && *xdg)
        len = snprintf(dir, n, "%s/comfuse", xdg);
    else if (home && *home)
        len = snprintf(dir, n, "%s/.cache/comfuse", home);
    else {
        snprintf(note, note_n, "no cache dir: CF_CACHE_DIR, XDG_CACHE_HOME and HOME are unset");
        dir[0] = '\0';
        return false;
    }
    if (len < 0 || (size_t)len >= n || (size_t)len + 80 >= n) {
        snprintf(note, note_n, "cache dir path too long");
        dir[0] = '\0';
        return false;
    }
    while (len > 1 && dir[len - 1] == '/')
        dir[--len] = '\0';
    return mkdir_p(dir, writable, note, note_n);
}

void cf_cache_entry_path(const char *dir, const char *key, char *path, size_t n)
{
    snprintf(path, n, "%s/%s.cubin", dir, key);
}

/* ---- reading and writing entries ------------------------------------------ */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool read_all(int fd, unsigned char *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static unsigned char *dup_bytes(const unsigned char *p, size_t n)
{
    unsigned char *s = malloc(n + 1);
    if (s) {
        if (n)
            memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

void cf_cache_entry_free(cf_cache_entry *e)
{
    if (!e)
        return;
    for (int i = 0; i < CF_CACHE_PARTS; i++) {
        free(e->part[i]);
        e->part[i] = NULL;
        e->size[i] = 0;
    }
}

/* out's parts: copies of the payload's, each followed by a NUL (parts may be text). */
static bool split_parts(const unsigned char *payload, const uint64_t *len, cf_cache_entry *out)
{
    size_t off = 0;
    for (int i = 0; i < CF_CACHE_PARTS; i++) {
        out->part[i] = dup_bytes(payload + off, (size_t)len[i]);
        out->size[i] = (size_t)len[i];
        off += (size_t)len[i];
        if (!out->part[i]) {
            cf_cache_entry_free(out);
            return false;
        }
    }
    return true;
}

static cf_cache_lookup corrupt(const char *path, char *note, size_t note_n, const char *why)
{
    snprintf(note, note_n, "corrupt cache entry %s (%s): removed and rebuilt", path, why);
    unlink(path);
    return CF_CACHE_CORRUPT;
}

cf_cache_lookup cf_cache_load(const char *dir, const char *key, cf_cache_entry *out, char *note,
                              size_t note_n)
{
    char path[1200];
    cf_cache_entry_path(dir, key, path, sizeof path);
    /* O_NONBLOCK: a FIFO in the entry's place must not block the open */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return CF_CACHE_ABSENT;
    struct stat st;
    unsigned char hdr[HDR_SIZE];
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* not ours to remove: a miss (a store then renames an entry over it, or fails) */
        close(fd);
        snprintf(note, note_n, "cache entry %s is not a regular file: ignored", path);
        return CF_CACHE_ABSENT;
    }
    if (fstat(fd, &st) != 0 || st.st_size < HDR_SIZE || !read_all(fd, hdr, HDR_SIZE)) {
        close(fd);
        return corrupt(path, note, note_n, "truncated header");
    }
    if (memcmp(hdr, MAGIC, 8) != 0) {
        close(fd);
        return corrupt(path, note, note_n, "bad magic");
    }
    if (get_u32(hdr + 8) != CACHE_FORMAT || get_u32(hdr + 12) != HDR_SIZE) {
        close(fd);
        return corrupt(path, note, note_n, "unknown format version");
    }
    uint64_t len[CF_CACHE_PARTS], total = 0;
    bool too_long = false;
    for (int i = 0; i < CF_CACHE_PARTS; i++) {
        len[i] = get_u64(hdr + 16 + 8 * i);
        too_long |= len[i] > MAX_PART;
        total += len[i];
    }
    if (too_long || (uint64_t)st.st_size != HDR_SIZE + total) {
        close(fd);
        return corrupt(path, note, note_n, "payload length does not match the file size");
    }
    size_t n = (size_t)total;
    unsigned char *payload = malloc(n);
    if (!payload) {
        close(fd);
        snprintf(note, note_n, "out of memory reading %s", path);
        return CF_CACHE_ABSENT;
    }
    bool ok = read_all(fd, payload, n);
    close(fd);
    unsigned char d[32];
    if (ok)
        cf_sha256(payload, n, d);
    if (!ok || memcmp(d, hdr + 40, 32) != 0) {
        free(payload);
        return corrupt(path, note, note_n, ok ? "checksum mismatch" : "short read");
    }
    bool ok_parts = split_parts(payload, len, out);
    free(payload);
    if (!ok_parts) {
        snprintf(note, note_n, "out of memory reading %s", path);
        return CF_CACHE_ABSENT;
    }
    return CF_CACHE_FOUND;
}

/* A NULL part stores as empty. */
static size_t part_size(const cf_cache_entry *c, int i) { return c->part[i] ? c->size[i] : 0; }

static bool fsync_parts(int fd, const cf_cache_entry *c)
{
    for (int i = 0; i < CF_CACHE_PARTS; i++)
        if (!write_all(fd, c->part[i], part_size(c, i)))
            return false;
    return fsync(fd) == 0;
}

bool cf_cache_store(const char *dir, const char *key, const cf_cache_entry *c, char *note,
                    size_t note_n)
{
    char path[1200], tmp[1200];
    cf_cache_entry_path(dir, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, key);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(note, note_n, "cannot create a temp file in cache dir '%s': %s", dir,
                 strerror(errno));
        return false;
    }
    /* mkstemp makes 0600 files; entries are shareable like the dir. */
    fchmod(fd, 0644);
    unsigned char hdr[HDR_SIZE] = {0};
    memcpy(hdr, MAGIC, 8);
    put_u32(hdr + 8, CACHE_FORMAT);
    put_u32(hdr + 12, HDR_SIZE);
    cf_sha256_ctx s;
    cf_sha256_init(&s);
    for (int i = 0; i < CF_CACHE_PARTS; i++) {
        put_u64(hdr + 16 + 8 * i, part_size(c, i));
        if (part_size(c, i))   /* an empty part may be NULL */
            cf_sha256_update(&s, c->part[i], part_size(c, i));
    }
    cf_sha256_final(&s, hdr + 40);
    bool ok = write_all(fd, hdr, HDR_SIZE) && fsync_parts(fd, c);
    int e = errno;
    if (close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    /* NOTE: rename() is atomic within a file system: a concurrent writer of the
     * same key replaces a complete entry with another complete, equal one. */
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        snprintf(note, note_n, "cannot write cache entry %s: %s", path, strerror(e));
        unlink(tmp);
        return false;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return true;
}

/* ---- the in-process table -------------------------------------------------- */

enum { MEM_MAX = 256 };

typedef struct mem_entry {
    char key[65];
    cf_cache_entry e;
} mem_entry;

static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_entry *mem_tab;
static int mem_n, mem_next;

static bool copy_entry(cf_cache_entry *dst, const cf_cache_entry *src)
{
    for (int i = 0; i < CF_CACHE_PARTS; i++) {
        dst->part[i] = dup_bytes(src->part[i], part_size(src, i));
        dst->size[i] = part_size(src, i);
        if (!dst->part[i]) {
            cf_cache_entry_free(dst);
            return false;
        }
    }
    return true;
}

bool cf_cache_mem_get(const char *key, cf_cache_entry *out)
{
    bool found = false;
    pthread_mutex_lock(&mem_mu);
    for (int i = 0; i < mem_n; i++) {
        if (strcmp(mem_tab[i].key, key) == 0) {
            found = copy_entry(out, &mem_tab[i].e);
            break;
        }
    }
    pthread_mutex_unlock(&mem_mu);
    return found;
}

void cf_cache_mem_put(const char *key, const cf_cache_entry *c)
{
    pthread_mutex_lock(&mem_mu);
    for (int i = 0; i < mem_n; i++) {
        if (strcmp(mem_tab[i].key, key) == 0)
            goto done;
    }
    if (!mem_tab && !(mem_tab = calloc(MEM_MAX, sizeof *mem_tab)))
        goto done;
    int slot = mem_n < MEM_MAX ? mem_n++ : mem_next++ % MEM_MAX;   /* FIFO when full */
    mem_entry *e = &mem_tab[slot];
    cf_cache_entry_free(&e->e);
    memset(e, 0, sizeof *e);
    if (copy_entry(&e->e, c)) {
        snprintf(e->key, sizeof e->key, "%s", key);
    } else if (slot == mem_n - 1) {
        mem_n--;
    }
done:
    pthread_mutex_unlock(&mem_mu);
}

void cf_cache_mem_clear(void)
{
    pthread_mutex_lock(&mem_mu);
    for (int i = 0; i < mem_n; i++)
        cf_cache_entry_free(&mem_tab[i].e);
    free(mem_tab);
    mem_tab = NULL;
    mem_n = mem_next = 0;
    pthread_mutex_unlock(&mem_mu);
}
