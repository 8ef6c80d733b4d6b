#!/usr/bin/env bash
# `make install` into a scratch prefix; a program that includes only the installed comfuse.h
# (no src/ on the include path) builds through pkg-config, against the static and the shared
# library, and lowers a spec.  Prints one "test_install: N passed, N failed" line.
set -u
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pass=0 fail=0
ok() { if "$@" >"$dir/log" 2>&1; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "test_install: failed: $*"; tail -5 "$dir/log"; fi; }
ok make --no-print-directory install BUILD="$build" PREFIX="$dir/usr" >/dev/null
ok test -f "$dir/usr/include/comfuse.h" -a -f "$dir/usr/lib/pkgconfig/comfuse.pc"
cat >"$dir/use.c" <<'C'
#include <comfuse.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    const char *spec = "input X: bf16[M, K]\ninput W: bf16[K, N]\noutput Y: bf16 = gelu(X @ W)\n";
    cf_graph *g = NULL;
    cf_ir *ir = NULL;
    cf_error err;
    if (cf_spec_parse(spec, strlen(spec), "use.cf", &g, &err) != CF_OK || cf_lower(g, &ir, &err) != CF_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("%s %d %s\n", CF_VERSION, cf_ir_num_stages(ir), cf_op_name(CF_OP_GELU));
    cf_ir_free(ir);
    cf_graph_free(g);
    return 0;
}
C
export PKG_CONFIG_PATH="$dir/usr/lib/pkgconfig"
if command -v pkg-config >/dev/null; then
    flags=$(pkg-config --cflags comfuse) libs=$(pkg-config --libs --static comfuse)
else   # the .pc file's own fields, read as pkg-config would
    flags="-I$dir/usr/include" libs="-L$dir/usr/lib -lcomfuse -lm -ldl -lpthread"
fi
ok cc -std=c11 -Wall -Wextra -Werror -pedantic $flags "$dir/use.c" -o "$dir/use_static" "$dir/usr/lib/libcomfuse.a" -lm -ldl -lpthread
ok "$dir/use_static"
ok cc -std=c11 -Wall -Wextra -Werror $flags "$dir/use.c" -o "$dir/use_shared" $libs
ok sh -c "LD_LIBRARY_PATH='$dir/usr/lib' '$dir/use_shared' >'$dir/out'"
ok grep -qx "$(sed -n 's/^#define CF_VERSION "\(.*\)"/\1/p' include/comfuse.h) 1 gelu" "$dir/out"
echo "test_install: $pass passed, $fail failed"
[ "$fail" = 0 ]
