#!/usr/bin/env bash
# Where each CTA's cycles go: `comfuse bench` with CF_TRACE=1 (clock64 stamps per tile: period
# between accumulators, epilogue length, first-tile and tail latency; the grid's span on
# %globaltimer beside the traced launch's event-timed length).
#   bench/trace.sh [SHAPE ...]                    every example at each shape (default: two
#                                                 workload shapes)
#   bench/trace.sh --case "SPEC SHAPE [bench options]" ...   those cases, e.g. plan variants:
#       --case "examples/gemm_rmsnorm.cf M=64,N=4096,K=4096 --plan multicast=off"
set -uo pipefail
cd "$(dirname "$0")/.."
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)} CF_TRACE=1
[ -x build/comfuse ] || make -j"$(nproc)" all >/dev/null
cases=()
if [ "${1:-}" = --case ]; then
    while [ $# -ge 2 ] && [ "$1" = --case ]; do cases+=("$2"); shift 2; done
    [ $# -eq 0 ] || { echo "usage: bench/trace.sh [SHAPE ...] | --case \"SPEC SHAPE [options]\" ..." >&2; exit 2; }
else
    shapes=("$@")
    [ ${#shapes[@]} -gt 0 ] || shapes=(M=16384,N=1024,K=1024 M=4096,N=2048,K=512)
    for shape in "${shapes[@]}"; do
        for spec in examples/gemm.cf examples/gemm_bias_gelu.cf examples/gemm_rmsnorm.cf examples/gemm_bias_ln.cf \
            examples/gemm_softmax.cf examples/gemm_ln_softmax.cf; do
            cases+=("$spec $shape")
        done
    done
fi
for c in "${cases[@]}"; do
    read -r spec shape opts <<<"$c"
    # shellcheck disable=SC2086
    timeout 120 build/comfuse bench --iters 40 --shape "$shape" $opts "$spec" 2>&1 |
        awk -v s="$(basename "$spec" .cf)" -v sh="$shape" -v o="$opts" '
            /^BENCH/ { split($0, f, "\t"); printf "%-16s %-22s %s fused/cuBLAS %.3f\n", s, sh, o, f[8] }
            /trace/ { print "   " $0 } /comfuse:/ { print s, sh, $0 }'
done
