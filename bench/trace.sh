#!/usr/bin/env bash
# Where each CTA's cycles go, per example: `comfuse bench` with CF_TRACE=1 (clock64 stamps per
# tile: period between accumulators, epilogue length, first-tile and tail latency).
#   bench/trace.sh [SHAPE ...]      (default: two workload shapes)
set -uo pipefail
cd "$(dirname "$0")/.."
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)} CF_TRACE=1
[ -x build/comfuse ] || make -j"$(nproc)" all >/dev/null
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(M=16384,N=1024,K=1024 M=4096,N=2048,K=512)
for shape in "${shapes[@]}"; do
    for spec in examples/gemm.cf examples/gemm_bias_gelu.cf examples/gemm_rmsnorm.cf examples/gemm_bias_ln.cf \
        examples/gemm_softmax.cf examples/gemm_ln_softmax.cf; do
        timeout 120 build/comfuse bench --iters 40 --shape "$shape" "$spec" 2>&1 |
            awk -v s="$(basename "$spec" .cf)" -v sh="$shape" '
                /^BENCH/ { split($0, f, "\t"); printf "%-16s %-22s fused/cuBLAS %.3f\n", s, sh, f[8] }
                /trace/ { print "   " $0 } /comfuse:/ { print s, sh, $0 }'
    done
done
