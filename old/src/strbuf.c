/* strbuf.c — growable strings: all generated text goes through cf_sb_printf. */
#include "cf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(cf_strbuf *sb, size_t extra)
{
    if (sb->oom)
        return false;
    if (sb->len + extra + 1 <= sb->cap)
        return true;
    size_t cap = sb->cap ? sb->cap : 256;
    while (cap < sb->len + extra + 1)
        cap *= 2;
    char *p = realloc(sb->data, cap);
    if (!p) {
        sb->oom = true;
        return false;
    }
    sb->data = p;
    sb->cap = cap;
    return true;
}

void cf_sb_vprintf(cf_strbuf *sb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0 || !reserve(sb, (size_t)n))
        return;
    vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
    sb->len += (size_t)n;
}

void cf_sb_printf(cf_strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cf_sb_vprintf(sb, fmt, ap);
    va_end(ap);
}

void cf_sb_puts(cf_strbuf *sb, const char *s)
{
    size_t n = strlen(s);
    if (!reserve(sb, n))
        return;
    memcpy(sb->data + sb->len, s, n + 1);
    sb->len += n;
}

void cf_sb_free(cf_strbuf *sb)
{
    free(sb->data);
    memset(sb, 0, sizeof *sb);
}
