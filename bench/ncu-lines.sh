#!/usr/bin/env bash
# Where the fused kernel's warps stall, by line of its generated source (GPU machine, ncu):
#   bench/ncu-lines.sh SPEC SHAPE [kernel options]      e.g. examples/gemm_bias_ln.cf M=16384,N=2048,K=1024
# Profiles one launch (ncu --section SourceCounters) of a kernel compiled with line tables
# (CF_LINEINFO=1), disassembles the very cubin it ran (from the kernel cache) and prints
# bench/ncu_lines.py's table.  Files stay in $OUT (or a temp dir): kernel.cu, prof.ncu-rep,
# sass.csv, kernel.sass.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/ncu-lines.sh SPEC SHAPE [kernel options]" >&2; exit 2; }
spec=$1 shape=$2
shift 2
export PATH="/usr/local/cuda/bin:$PATH" CF_LINEINFO=1 CF_CACHE_DIR=$(mktemp -d)
out=${OUT:-$(mktemp -d)}
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "ncu-lines: build failed" >&2; exit 1; }
build/comfuse emit --shape "$shape" "$@" "$spec" >"$out/kernel.cu" || exit 1
timeout 300 ncu --kernel-name cf_gemm_kernel --launch-skip 2 --launch-count 1 --section SourceCounters -f \
    -o "$out/prof" build/comfuse bench --iters 2 --shape "$shape" "$@" "$spec" >"$out/ncu.log" 2>&1 ||
    { tail -5 "$out/ncu.log"; exit 1; }
ncu --import "$out/prof.ncu-rep" --page source --csv --print-source sass >"$out/sass.csv" || exit 1
# cache entries: a 72-byte header (cubin length at byte 16), then the cubin (src/cache.c)
for entry in "$CF_CACHE_DIR"/*.cubin; do
    python3 -c 'import struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<Q", d, 16)[0]
open(sys.argv[2], "wb").write(d[72:72 + n])' "$entry" "$out/k.cubin" || continue
    nvdisasm -gi "$out/k.cubin" >"$out/kernel.sass" 2>/dev/null && grep -q 'text.cf_gemm_kernel' "$out/kernel.sass" && break
done
grep -q 'text.cf_gemm_kernel' "$out/kernel.sass" 2>/dev/null || { echo "ncu-lines: no cf_gemm_kernel cubin in the cache" >&2; exit 1; }
python3 bench/ncu_lines.py "$out/sass.csv" "$out/kernel.sass" "$out/kernel.cu"
