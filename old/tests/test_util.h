/* test_util.h — tiny assertion helpers shared by the CPU tests. */
#ifndef TEST_UTIL_H
#define TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tu_failed, tu_passed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            tu_passed++;                                                             \
        } else {                                                                     \
            tu_failed++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define CHECK_EQ_INT(expected, expr)                                                  \
    do {                                                                              \
        long long e_ = (long long)(expected), v_ = (long long)(expr);                 \
        if (e_ == v_) {                                                               \
            tu_passed++;                                                              \
        } else {                                                                      \
            tu_failed++;                                                              \
            fprintf(stderr, "%s:%d: %s => %lld, expected %lld\n", __FILE__, __LINE__, \
                    #expr, v_, e_);                                                   \
        }                                                                             \
    } while (0)

/* Passes when haystack contains needle; prints both otherwise. */
#define CHECK_CONTAINS(haystack, needle)                                                  \
    do {                                                                                  \
        const char *h_ = (haystack), *n_ = (needle);                                      \
        if (h_ && strstr(h_, n_)) {                                                       \
            tu_passed++;                                                                  \
        } else {                                                                          \
            tu_failed++;                                                                  \
            fprintf(stderr, "%s:%d: expected to find \"%s\" in:\n%s\n", __FILE__, __LINE__, \
                    n_, h_ ? h_ : "(null)");                                              \
        }                                                                                 \
    } while (0)

/* The closing line every test prints: "<name>: N passed, N failed". */
static int tu_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, tu_passed, tu_failed);
    return tu_failed ? 1 : 0;
}

#endif
