/* test_cache.c — SHA-256, the cache key, entries on disk (atomic writes,
 * corruption), cf_rt_compile through the cache, and two processes racing on
 * the same kernel.  Needs NVRTC (part of the required toolchain), not a GPU. */
#include "cf_internal.h"
#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char root[256];

static const char *hex_of(const void *p, size_t n)
{
    static char hex[65];
    unsigned char d[32];
    cf_sha256(p, n, d);
    cf_sha256_hex(d, hex);
    return hex;
}

static void test_sha256(void)
{
    CHECK(strcmp(hex_of("", 0),
                 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0);
    CHECK(strcmp(hex_of("abc", 3),
                 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(strcmp(hex_of(m448, strlen(m448)),
                 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0);
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    CHECK(strcmp(hex_of(m896, strlen(m896)),
                 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1") == 0);
    /* Padding boundaries. */
    static const struct { size_t n; const char *hex; } as[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    char a[1000];
    memset(a, 'a', sizeof a);
    for (int i = 0; i < CF_ARRAY_LEN(as); i++)
        CHECK_CONTAINS(hex_of(a, as[i].n), as[i].hex);
    /* One million 'a', fed in uneven pieces. */
    cf_sha256_ctx s;
    cf_sha256_init(&s);
    size_t left = 1000000, piece = 1;
    while (left) {
        size_t k = piece < left ? piece : left;
        cf_sha256_update(&s, a, k);
        left -= k;
        piece = piece * 7 % 997 + 1;
    }
    unsigned char d[32];
    char hex[65];
    cf_sha256_final(&s, d);
    cf_sha256_hex(d, hex);
    CHECK_CONTAINS(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_key(void)
{
    const char *opts[] = {"--gpu-architecture=sm_90a", "-std=c++17"};
    const char *hn[] = {"a.cuh"}, *ht[] = {"int a;"}, *ht2[] = {"int b;"};
    char k0[65], k[65];
    cf_cache_key("src", "k", 13, 0, opts, 2, hn, ht, 1, k0);
    CHECK_EQ_INT(64, strlen(k0));
    cf_cache_key("src", "k", 13, 0, opts, 2, hn, ht, 1, k);
    CHECK(strcmp(k0, k) == 0);
    cf_cache_key("src2", "k", 13, 0, opts, 2, hn, ht, 1, k);
    CHECK(strcmp(k0, k) != 0);
    cf_cache_key("src", "k2", 13, 0, opts, 2, hn, ht, 1, k);
    CHECK(strcmp(k0, k) != 0);
    cf_cache_key("src", "k", 13, 1, opts, 2, hn, ht, 1, k);
    CHECK(strcmp(k0, k) != 0);
    cf_cache_key("src", "k", 13, 0, opts, 1, hn, ht, 1, k);
    CHECK(strcmp(k0, k) != 0);
    cf_cache_key("src", "k", 13, 0, opts, 2, hn, ht2, 1, k);
    CHECK(strcmp(k0, k) != 0);
    cf_cache_key("src", "k", 13, 0, opts, 2, hn, ht, 0, k);
    CHECK(strcmp(k0, k) != 0);
    /* Field boundaries matter: {"ab","c"} and {"a","bc"} differ. */
    const char *o1[] = {"ab", "c"}, *o2[] = {"a", "bc"};
    char k1[65], k2[65];
    cf_cache_key("s", "k", 13, 0, o1, 2, NULL, NULL, 0, k1);
    cf_cache_key("s", "k", 13, 0, o2, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);
    /* Comments are not part of the key (the first line names the spec, labels name
     * nodes); the lines they span are (they number the code after them), a comment
     * still separates tokens, and text inside literals is code. */
    cf_cache_key("/* Generated from a.cf */\nint x; // x.3\n", "k", 13, 0, opts, 2, NULL, NULL, 0, k1);
    cf_cache_key("/* Generated from /elsewhere/b.cf */\nint x; // v3\n", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) == 0);
    cf_cache_key("/* Generated from a.cf\n * two lines */\nint x; // x.3\n", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);
    cf_cache_key("/* Generated from a.cf */\nint y; // x.3\n", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);
    cf_cache_key("int a/* */b;", "k", 13, 0, opts, 2, NULL, NULL, 0, k1);
    cf_cache_key("int ab;", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);
    cf_cache_key("int a /* one */ b;", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);   /* "a" " " " " "b" against "a" " " "b" */
    cf_cache_key("int a/* two */b;", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) == 0);
    cf_cache_key("const char *s = \"/* a */\";", "k", 13, 0, opts, 2, NULL, NULL, 0, k1);
    cf_cache_key("const char *s = \"/* b */\";", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) != 0);
    cf_cache_key("char c = '\\''; /* a */", "k", 13, 0, opts, 2, NULL, NULL, 0, k1);
    cf_cache_key("char c = '\\''; /* b */", "k", 13, 0, opts, 2, NULL, NULL, 0, k2);
    CHECK(strcmp(k1, k2) == 0);
}

/* Counts <dir>'s entries: *.cubin files and anything else. */
static void count_dir(const char *dir, int *entries, int *others)
{
    *entries = *others = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        size_t n = strlen(e->d_name);
        if (n == 64 + 6 && !strcmp(e->d_name + 64, ".cubin") && e->d_name[0] != '.')
            ++*entries;
        else
            ++*others;
    }
    closedir(d);
}

static void fresh_dir(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", root, name);
    setenv("CF_CACHE_DIR", buf, 1);
    cf_cache_mem_clear();
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    if (fd >= 0 && pread(fd, &c, 1, off) == 1) {
        c ^= 0x5a;
        CHECK(pwrite(fd, &c, 1, off) == 1);
    }
    if (fd >= 0)
        close(fd);
}

static void test_entries(void)
{
    char dir[700], note[512] = "", path[1200];
    fresh_dir(dir, sizeof dir, "raw/nested/dir");
    char got[1024];
    bool writable = false;
    CHECK(cf_cache_dir(got, sizeof got, &writable, note, sizeof note));   /* mkdir -p */
    CHECK(strcmp(got, dir) == 0);
    CHECK(writable);
    setenv("CF_CACHE_READONLY", "1", 1);   /* read, never written */
    CHECK(cf_cache_dir(got, sizeof got, &writable, note, sizeof note));
    CHECK(!writable);
    CHECK_CONTAINS(note, "is read-only (CF_CACHE_READONLY=1)");
    unsetenv("CF_CACHE_READONLY");
    unsigned char bin[300];
    for (int i = 0; i < (int)sizeof bin; i++)
        bin[i] = (unsigned char)(i * 31);
    char ptx[] = "// ptx text", log[] = "ptxas info : Used 8 registers";
    cf_cache_entry c = {.part = {bin, (unsigned char *)ptx, (unsigned char *)log},
                        .size = {sizeof bin, strlen(ptx), strlen(log)}};
    const char *key = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    CHECK(cf_cache_store(dir, key, &c, note, sizeof note));
    cf_cache_entry_path(dir, key, path, sizeof path);
    CHECK_EQ_INT(72 + 300 + strlen(ptx) + strlen(log), file_size(path));
    cf_cache_entry r = {0};
    CHECK_EQ_INT(CF_CACHE_FOUND, cf_cache_load(dir, key, &r, note, sizeof note));
    CHECK(r.size[0] == sizeof bin && r.part[0] && !memcmp(r.part[0], bin, sizeof bin));
    CHECK(r.part[1] && !strcmp((char *)r.part[1], ptx) && r.part[2] && !strcmp((char *)r.part[2], log));
    CHECK(r.size[1] == strlen(ptx) && r.size[2] == strlen(log));
    cf_cache_entry_free(&r);
    CHECK(r.part[0] == NULL && r.size[0] == 0);

    /* Bytes, not text: NULs inside a part and an empty part come back as stored. */
    unsigned char nuls[5] = {'a', 0, 'b', 0, 0};
    cf_cache_entry raw = {.part = {nuls, NULL, nuls}, .size = {sizeof nuls, 0, 2}};
    CHECK(cf_cache_store(dir, key, &raw, note, sizeof note));
    CHECK_EQ_INT(CF_CACHE_FOUND, cf_cache_load(dir, key, &r, note, sizeof note));
    CHECK(r.size[0] == sizeof nuls && !memcmp(r.part[0], nuls, sizeof nuls));
    CHECK(r.size[1] == 0 && r.part[1] && r.part[1][0] == 0 && r.size[2] == 2 && !memcmp(r.part[2], "a", 2));
    cf_cache_entry_free(&r);

    /* The in-process table hands out copies. */
    cf_cache_mem_clear();
    CHECK(!cf_cache_mem_get(key, &r));
    cf_cache_mem_put(key, &c);
    bin[0] ^= 1;   /* the table kept its own bytes */
    CHECK(cf_cache_mem_get(key, &r));
    CHECK(r.size[0] == sizeof bin && r.part[0] && r.part[0][0] == (unsigned char)(bin[0] ^ 1));
    CHECK(r.part[1] && !strcmp((char *)r.part[1], ptx));
    bin[0] ^= 1;
    cf_cache_entry_free(&r);
    cf_cache_mem_clear();
    CHECK_EQ_INT(CF_CACHE_ABSENT, cf_cache_load(dir, "nope", &r, note, sizeof note));

    /* Truncated, byte-flipped (payload, header length, magic): detected and removed. */
    static const long offs[] = {-1, 72 + 10, 20, 0};
    for (int i = 0; i < CF_ARRAY_LEN(offs); i++) {
        CHECK(cf_cache_store(dir, key, &c, note, sizeof note));
        if (offs[i] < 0)
            CHECK(truncate(path, file_size(path) - 7) == 0);
        else
            flip_byte(path, offs[i]);
        note[0] = '\0';
        CHECK_EQ_INT(CF_CACHE_CORRUPT, cf_cache_load(dir, key, &r, note, sizeof note));
        CHECK_CONTAINS(note, "corrupt cache entry");
        CHECK_CONTAINS(note, path);
        CHECK_EQ_INT(-1, file_size(path));
        CHECK(r.part[0] == NULL);
    }
    int entries, others;
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(0, entries + others);

    /* A FIFO (open blocked forever) or a dir in an entry's place: a miss, left alone. */
    for (int i = 0; i < 2; i++) {
        CHECK((i == 0 ? mkfifo(path, 0644) : mkdir(path, 0755)) == 0);
        note[0] = '\0';
        alarm(20);   /* a hang fails the test */
        CHECK_EQ_INT(CF_CACHE_ABSENT, cf_cache_load(dir, key, &r, note, sizeof note));
        alarm(0);
        CHECK_CONTAINS(note, "is not a regular file: ignored");
        CHECK(r.part[0] == NULL);
        struct stat fst;
        CHECK(lstat(path, &fst) == 0 && (i == 0 ? S_ISFIFO(fst.st_mode) : S_ISDIR(fst.st_mode)));
        if (i == 0) {   /* a store replaces the FIFO with an entry */
            CHECK(cf_cache_store(dir, key, &c, note, sizeof note));
            CHECK_EQ_INT(CF_CACHE_FOUND, cf_cache_load(dir, key, &r, note, sizeof note));
            cf_cache_entry_free(&r);
            unlink(path);
        } else {   /* over a dir it fails, and says so */
            CHECK(!cf_cache_store(dir, key, &c, note, sizeof note));
            CHECK_CONTAINS(note, "cannot write cache entry");
            rmdir(path);
        }
    }
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(0, entries + others);

    /* A dir that cannot be created: a regular file sits in the path. */
    char file[600];
    snprintf(file, sizeof file, "%s/plainfile", root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    setenv("CF_CACHE_DIR", dir, 1);
    CHECK(!cf_cache_dir(got, sizeof got, &writable, note, sizeof note));
    CHECK_CONTAINS(note, "cannot create cache dir");
    setenv("CF_CACHE_DIR", file, 1);   /* the file itself */
    CHECK(!cf_cache_dir(got, sizeof got, &writable, note, sizeof note));
    CHECK_CONTAINS(note, "is not a directory");
    CHECK(!cf_cache_store(dir, key, &c, note, sizeof note));
    CHECK_CONTAINS(note, "temp file");

    /* Fallbacks: XDG_CACHE_HOME/comfuse, then HOME/.cache/comfuse. */
    unsetenv("CF_CACHE_DIR");
    char xdg[600];
    snprintf(xdg, sizeof xdg, "%s/xdg", root);
    setenv("XDG_CACHE_HOME", xdg, 1);
    CHECK(cf_cache_dir(got, sizeof got, &writable, note, sizeof note));
    CHECK_CONTAINS(got, "/xdg/comfuse");
    unsetenv("XDG_CACHE_HOME");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    snprintf(xdg, sizeof xdg, "%s/home", root);
    setenv("HOME", xdg, 1);
    CHECK(cf_cache_dir(got, sizeof got, &writable, note, sizeof note));
    CHECK_CONTAINS(got, "/home/.cache/comfuse");
    if (home)
        setenv("HOME", home, 1);
    free(home);
}

static const char *KSRC =
    "extern \"C\" __global__ void cached_k(float *x, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) x[i] = x[i] * 2.0f + 1.0f;\n"
    "}\n";

static bool same_bytes(const cf_rt_cubin *a, const cf_rt_cubin *b)
{
    return a->cubin && b->cubin && a->cubin_size == b->cubin_size &&
           !memcmp(a->cubin, b->cubin, a->cubin_size) && a->ptx && b->ptx &&
           !strcmp(a->ptx, b->ptx);
}

static void test_compile_cache(void)
{
    char dir[512];
    fresh_dir(dir, sizeof dir, "compile");
    cf_error err = {0};
    cf_rt_cubin first, c;
    cf_status st = cf_rt_compile(KSRC, "cached_k", NULL, 0, &first, &err);
    CHECK_EQ_INT(CF_OK, st);
    if (st != CF_OK) {
        fprintf(stderr, "compile failed: %s\n", err.msg);
        return;
    }
    CHECK_EQ_INT(CF_RT_CACHE_MISS, first.cache);
    CHECK(first.stored);
    CHECK(first.cubin_size > 0 && first.compile_ms > 0);
    CHECK_CONTAINS(first.cache_path, dir);
    CHECK_CONTAINS(first.cache_path, first.key);
    CHECK(first.registers > 0);
    int entries, others;
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(1, entries);
    CHECK_EQ_INT(0, others);

    /* Second compile: a hit from disk (table cleared), then from memory. */
    cf_cache_mem_clear();
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
    CHECK(same_bytes(&first, &c));
    CHECK_EQ_INT(first.registers, c.registers);
    CHECK(c.compile_ms == 0);
    cf_rt_cubin_free(&c);
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_HIT_MEMORY, c.cache);
    CHECK(same_bytes(&first, &c));
    cf_rt_cubin_free(&c);

    /* Different options: a different key and a second entry. */
    const char *opt[] = {"-DSCALE=3"};
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", opt, 1, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_MISS, c.cache);
    CHECK(strcmp(c.key, first.key) != 0);
    cf_rt_cubin_free(&c);
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(2, entries);

    /* A truncated entry and a byte-flipped entry are each rebuilt. */
    for (int round = 0; round < 2; round++) {
        if (round == 0)
            CHECK(truncate(first.cache_path, file_size(first.cache_path) / 2) == 0);
        else
            flip_byte(first.cache_path, file_size(first.cache_path) - 100);
        cf_cache_mem_clear();
        st = cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err);
        CHECK_EQ_INT(CF_OK, st);
        CHECK_EQ_INT(CF_RT_CACHE_REBUILT, c.cache);
        CHECK_CONTAINS(c.cache_note, round == 0 ? "payload length" : "checksum mismatch");
        CHECK(c.stored);
        CHECK(same_bytes(&first, &c));
        cf_rt_cubin_free(&c);
        cf_cache_mem_clear();
        CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
        CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
        cf_rt_cubin_free(&c);
    }

    /* A sound entry without a CUBIN (the cache stores any bytes; the runtime wants a
     * CUBIN): rebuilt and stored over. */
    cf_cache_entry empty = {.part = {NULL, (unsigned char *)"x", NULL}, .size = {0, 1, 0}};
    char note[512] = "";
    char cdir[1024];
    bool w = false;
    CHECK(cf_cache_dir(cdir, sizeof cdir, &w, note, sizeof note) && w);
    CHECK(cf_cache_store(cdir, first.key, &empty, note, sizeof note));
    cf_cache_mem_clear();
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_REBUILT, c.cache);
    CHECK(c.stored && same_bytes(&first, &c));
    cf_rt_cubin_free(&c);
    cf_cache_mem_clear();
    cf_cache_mem_put(first.key, &empty);   /* the same in the in-process table: a miss there */
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
    CHECK(same_bytes(&first, &c));
    cf_rt_cubin_free(&c);

    /* CF_ASSERT_CACHED=1: hits pass, a miss is an error. */
    setenv("CF_ASSERT_CACHED", "1", 1);
    cf_cache_mem_clear();
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    cf_rt_cubin_free(&c);
    const char *opt2[] = {"-DNEVER_COMPILED"};
    CHECK_EQ_INT(CF_ERR_IO, cf_rt_compile(KSRC, "cached_k", opt2, 1, &c, &err));
    CHECK_CONTAINS(err.msg, "CF_ASSERT_CACHED=1");
    CHECK_CONTAINS(err.msg, "cached_k");
    cf_rt_cubin_free(&c);
    unsetenv("CF_ASSERT_CACHED");

    /* no_cache: compiles, touches nothing. */
    cf_rt_compile_opts nc = {.no_cache = true};
    CHECK_EQ_INT(CF_OK, cf_rt_compile_ex(KSRC, "cached_k", &nc, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_DISABLED, c.cache);
    CHECK(same_bytes(&first, &c));
    cf_rt_cubin_free(&c);
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(2, entries);
    CHECK_EQ_INT(0, others);

    /* An unusable cache dir still compiles, and says why it did not cache. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/plainfile/sub", root);
    setenv("CF_CACHE_DIR", bad, 1);
    cf_cache_mem_clear();
    st = cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err);
    CHECK_EQ_INT(CF_OK, st);
    CHECK_EQ_INT(CF_RT_CACHE_DISABLED, c.cache);
    CHECK(!c.stored);
    CHECK_CONTAINS(c.cache_note, "cannot create cache dir");
    CHECK(same_bytes(&first, &c));
    cf_rt_cubin_free(&c);
    /* A read-only cache holding the entry is read (CF_CACHE_READONLY=1, or a dir without
     * write permission where permission bits stop us); a miss there compiles, stores
     * nothing, and says why. */
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1 && geteuid() == 0)
            break;   /* permission bits do not stop root */
        setenv("CF_CACHE_DIR", dir, 1);
        if (mode == 0)
            setenv("CF_CACHE_READONLY", "1", 1);
        else
            chmod(dir, 0500);
        cf_cache_mem_clear();
        setenv("CF_ASSERT_CACHED", "1", 1);
        CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
        unsetenv("CF_ASSERT_CACHED");
        CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
        CHECK(same_bytes(&first, &c));
        cf_rt_cubin_free(&c);
        const char *opt3[] = {"-DREAD_ONLY_MISS"};
        CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", opt3, 1, &c, &err));
        CHECK_EQ_INT(CF_RT_CACHE_MISS, c.cache);
        CHECK(!c.stored);
        CHECK_CONTAINS(c.cache_note, mode == 0 ? "is read-only (CF_CACHE_READONLY=1)" : "is not writable");
        cf_rt_cubin_free(&c);
        count_dir(dir, &entries, &others);
        CHECK_EQ_INT(2, entries);
        unsetenv("CF_CACHE_READONLY");
        chmod(dir, 0755);
    }
    /* A FIFO in place of the entry: compile neither blocks nor fails; the entry is rewritten. */
    setenv("CF_CACHE_DIR", dir, 1);
    cf_cache_mem_clear();
    CHECK(unlink(first.cache_path) == 0 && mkfifo(first.cache_path, 0644) == 0);
    alarm(60);   /* a hang fails the test */
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    alarm(0);
    CHECK_EQ_INT(CF_RT_CACHE_MISS, c.cache);
    CHECK(c.stored);
    cf_rt_cubin_free(&c);
    cf_cache_mem_clear();
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "cached_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
    cf_rt_cubin_free(&c);
    cf_rt_cubin_free(&first);
}

/* Child of test_race: compile the shared source into $CF_CACHE_DIR. */
static int race_child(void)
{
    cf_error err = {0};
    cf_rt_cubin c;
    cf_status st = cf_rt_compile(KSRC, "race_k", NULL, 0, &c, &err);
    if (st != CF_OK)
        fprintf(stderr, "child %d: %s\n", (int)getpid(), err.msg);
    int ok = st == CF_OK && c.stored;
    cf_rt_cubin_free(&c);
    return ok ? 0 : 1;
}

static void test_race(void)
{
    char dir[512];
    fresh_dir(dir, sizeof dir, "race");
    enum { KIDS = 4 };
    pid_t kids[KIDS];
    for (int i = 0; i < KIDS; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            execl("/proc/self/exe", "test_cache", "--race-child", (char *)NULL);
            _exit(127);
        }
    }
    int ok = 0;
    for (int i = 0; i < KIDS; i++) {
        int ws = 0;
        if (kids[i] > 0 && waitpid(kids[i], &ws, 0) == kids[i] && WIFEXITED(ws) &&
            WEXITSTATUS(ws) == 0)
            ok++;
    }
    CHECK_EQ_INT(KIDS, ok);
    int entries, others;
    count_dir(dir, &entries, &others);
    CHECK_EQ_INT(1, entries);
    CHECK_EQ_INT(0, others);   /* no temp files left */
    cf_error err = {0};
    cf_rt_cubin c, fresh;
    CHECK_EQ_INT(CF_OK, cf_rt_compile(KSRC, "race_k", NULL, 0, &c, &err));
    CHECK_EQ_INT(CF_RT_CACHE_HIT_DISK, c.cache);
    cf_rt_compile_opts nc = {.no_cache = true};
    CHECK_EQ_INT(CF_OK, cf_rt_compile_ex(KSRC, "race_k", &nc, &fresh, &err));
    CHECK(same_bytes(&c, &fresh));
    cf_rt_cubin_free(&c);
    cf_rt_cubin_free(&fresh);
}

/* GEMM + bias + GELU as the C builder makes it, named like examples/gemm_bias_gelu.cf. */
static cf_graph *build_gemm_bias_gelu(void)
{
    cf_graph *g = cf_graph_new();
    cf_dim M = cf_graph_dim(g, "M"), K = cf_graph_dim(g, "K"), N = cf_graph_dim(g, "N");
    cf_value X = cf_graph_input(g, "X", CF_BF16, 2, (cf_dim[]){M, K});
    cf_value W = cf_graph_input(g, "W", CF_BF16, 2, (cf_dim[]){K, N});
    cf_value bias = cf_graph_input(g, "bias", CF_F32, 1, (cf_dim[]){N});
    cf_value y = cf_graph_unary(g, CF_OP_GELU, cf_graph_binary(g, CF_OP_ADD, cf_graph_matmul(g, X, W), bias));
    cf_graph_output(g, "Y", y, CF_BF16);
    return g;
}

/* Builds and compiles g's fused kernel titled title (its first line names it);
 * r gets the kernel's resources: its cache path and whether it was a hit. */
static cf_status compile_graph(const cf_graph *g, const char *title, cf_resources *r)
{
    cf_kernel *k = NULL;
    cf_error err = {0};
    cf_status st = cf_kernel_build(g, NULL, title, &k, &err);
    if (st == CF_OK) {
        CHECK_CONTAINS(cf_kernel_source(k), title ? title : "<graph>");
        st = cf_kernel_compile(k, &err);
    }
    if (st == CF_OK)
        st = cf_kernel_resources(k, r, &err);
    if (st != CF_OK)
        fprintf(stderr, "%s: %s\n", title ? title : "<graph>", err.msg);
    cf_kernel_free(k);
    return st;
}

/* Issue 28, item 6: the same kernel from a spec at two paths and from the C
 * builder (unnamed values: other labels in comments) is one cache entry (the
 * key once held the spec's path). */
static void test_same_kernel_one_entry(void)
{
    char dir[512], copy[600], cmd[1400];
    fresh_dir(dir, sizeof dir, "provenance");
    snprintf(copy, sizeof copy, "%s/elsewhere.cf", root);
    snprintf(cmd, sizeof cmd, "cp examples/gemm_bias_gelu.cf %s", copy);
    CHECK_EQ_INT(0, system(cmd));
    cf_graph *g1 = NULL, *g2 = NULL, *g3 = build_gemm_bias_gelu();
    cf_error err = {0};
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file("examples/gemm_bias_gelu.cf", &g1, &err));
    CHECK_EQ_INT(CF_OK, cf_spec_parse_file(copy, &g2, &err));
    CHECK_EQ_INT(CF_OK, cf_graph_error(g3)->status);
    cf_resources r1, r2, r3;
    /* the table is cleared before each compile: every hit comes from the disk */
    if (g1 && g2 && compile_graph(g1, "examples/gemm_bias_gelu.cf", &r1) == CF_OK &&
        (cf_cache_mem_clear(), compile_graph(g2, copy, &r2)) == CF_OK) {
        CHECK(!r1.cache_hit);
        CHECK(r2.cache_hit);
        CHECK(strcmp(r1.cache_path, r2.cache_path) == 0);
        cf_cache_mem_clear();
        CHECK_EQ_INT(CF_OK, compile_graph(g3, NULL, &r3));
        CHECK(r3.cache_hit);
        CHECK(strcmp(r1.cache_path, r3.cache_path) == 0);
        int entries, others;
        count_dir(dir, &entries, &others);
        CHECK_EQ_INT(1, entries);
        CHECK_EQ_INT(0, others);
    } else {
        CHECK(!"compiling gemm_bias_gelu failed");
    }
    cf_graph_free(g1);
    cf_graph_free(g2);
    cf_graph_free(g3);
}

static void rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            rm_rf(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--race-child"))
        return race_child();
    snprintf(root, sizeof root, "/tmp/cf_test_cache.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_sha256();
    test_key();
    test_entries();
    cf_error err = {0};
    cf_status st = cf_rt_nvrtc_load(NULL, NULL, NULL, &err);
    CHECK_EQ_INT(CF_OK, st);   /* NVRTC is required: fail, never skip */
    if (st == CF_OK) {
        test_compile_cache();
        test_race();
        test_same_kernel_one_entry();
    } else {
        fprintf(stderr, "NVRTC missing: %s\n", err.msg);
    }
    cf_cache_mem_clear();
    rm_rf(root);
    return tu_finish("test_cache");
}
