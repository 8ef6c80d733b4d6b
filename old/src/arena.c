/* arena.c — bump allocation for graph strings and IR nodes. */
#include "cf_internal.h"

#include <stdlib.h>
#include <string.h>

struct cf_arena_block {
    cf_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK = 64 * 1024 };

void *cf_arena_alloc(cf_arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (a->limit && a->used_total + size > a->limit)
        return NULL;
    cf_arena_block *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > ARENA_BLOCK ? size : ARENA_BLOCK;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += size;
    a->used_total += size;
    memset(p, 0, size);
    return p;
}

char *cf_arena_strndup(cf_arena *a, const char *s, size_t n)
{
    char *p = cf_arena_alloc(a, n + 1);
    if (p)
        memcpy(p, s, n);
    return p;
}

char *cf_arena_strdup(cf_arena *a, const char *s)
{
    return cf_arena_strndup(a, s, strlen(s));
}

void cf_arena_free(cf_arena *a)
{
    cf_arena_block *b = a->head;
    while (b) {
        cf_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used_total = 0;
}
