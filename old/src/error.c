/* error.c — errors are values: a status plus a located message. */
#include "cf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {
    "ok", "invalid argument", "shape error", "dtype error", "parse error",
    "unsupported (outside the fusion domain)", "out of memory", "I/O error",
    "alignment error", "no CUDA device", "CUDA error", "NVRTC error",
    "check failed", "internal error",
};
_Static_assert(CF_ARRAY_LEN(status_names) == CF_STATUS_COUNT, "status_names out of sync");

const char *cf_status_name(cf_status s)
{
    return (unsigned)s < CF_STATUS_COUNT ? status_names[s] : "unknown status";
}

void cf_error_clear(cf_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

cf_status cf_errorf(cf_error *err, cf_status status, cf_loc loc, const char *fmt, ...)
{
    if (!err)
        return status;
    err->status = status;
    err->line = loc.line;
    err->col = loc.col;
    snprintf(err->file, sizeof err->file, "%s", loc.file ? loc.file : "");
    int n = 0;
    if (loc.file)
        n = snprintf(err->msg, sizeof err->msg, "%s:%d:%d: ", loc.file, loc.line, loc.col);
    if (n < 0 || (size_t)n >= sizeof err->msg)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void cf_abort(const char *file, int line, const char *what)
{
    fprintf(stderr, "comfuse: internal error at %s:%d: %s\n", file, line, what);
    abort();
}
