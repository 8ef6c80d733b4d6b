#!/usr/bin/env bash
# Where the fused epilogue's time goes: the same GEMM with growing epilogues,
# each timed beside cuBLASLt in turns (see docs/perf-notes.md, v5).
set -uo pipefail
cd "$(dirname "$0")/.."
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
[ -x build/comfuse ] || make -j"$(nproc)" all >/dev/null
one() {
    local spec=$1 shape=$2
    shift 2
    timeout 120 build/comfuse bench --iters 60 --shape "$shape" "$@" "$spec" 2>&1 |
        awk -F'\t' -v s="$(basename "$spec" .cf)" -v sh="$shape" -v o="$*" \
            '/^BENCH/ { printf "%-16s %-24s %-30s fused %.4f  cublas %.4f  ratio %.3f\n", s, sh, o, $4, $5, $8 }
             /comfuse:/ { print s, sh, o, $0 }'
}
for spec in examples/gemm.cf tests/specs/gemm_bias.cf tests/specs/gemm_gelu.cf examples/gemm_bias_gelu.cf; do
    one $spec M=16384,N=1024,K=1024
    one $spec M=4096,N=2048,K=512
done
# Reductions without the cluster exchange (a row inside one tile) and with it.
for spec in examples/gemm.cf examples/gemm_rmsnorm.cf examples/gemm_bias_ln.cf examples/gemm_softmax.cf; do
    one $spec M=131072,N=128,K=1024
    one $spec M=16384,N=1024,K=1024
done
one examples/gemm_bias_ln.cf M=16384,N=1024,K=1024 --block-m 128 --block-n 128 --cluster 8 --stages 4 --reduce-mode peer
one examples/gemm_bias_ln.cf M=16384,N=1024,K=1024 --block-m 128 --block-n 128 --cluster 8 --stages 4 --reduce-mode leader
