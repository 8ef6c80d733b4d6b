#!/usr/bin/env bash
# Times kernel configurations side by side with cuBLAS (one `comfuse bench` each)
# to choose cf_options_for's defaults.  Usage: bench/sweep.sh [filter-regex]
set -uo pipefail
cd "$(dirname "$0")/.."
filter=${1:-.}
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
[ -x build/comfuse ] || make -j"$(nproc)" all >/dev/null
one() { # spec shape options...
    local spec=$1 shape=$2
    shift 2
    echo "$spec $shape $*" | grep -qE "$filter" || return 0
    local line
    line=$(timeout 120 build/comfuse bench --iters 60 --shape "$shape" "$@" "$spec" 2>&1 | grep -E '^BENCH|comfuse:')
    printf '%-18s %-24s %-44s %s\n' "$(basename "$spec" .cf)" "$shape" "$*" \
        "$(echo "$line" | awk -F'\t' '/^BENCH/ { printf "fused %.4f  cublas %.4f  ratio %.3f", $4, $5, $8; next } { print }')"
}
for shape in M=8192,N=4096,K=4096 M=16384,N=1024,K=1024; do
    for cfg in "--cluster 1 --stages 6" "--cluster 2 --stages 6" "--cluster 2 --stages 5"; do
        one examples/gemm.cf $shape $cfg
    done
done
for shape in M=8192,N=4096,K=4096 M=16384,N=1024,K=1024 M=16384,N=2048,K=1024 M=4096,N=2048,K=512; do
    for cfg in "--cluster 1 --stages 6" "--cluster 2 --stages 6" "--cluster 1 --stages 4" \
               "--block-m 64 --block-n 256 --cluster 1 --stages 5" "--block-m 64 --block-n 256 --cluster 2 --stages 5"; do
        one examples/gemm_bias_gelu.cf $shape $cfg
    done
done
for spec in examples/gemm_bias_ln.cf examples/gemm_softmax.cf; do
    for shape in M=16384,N=1024,K=1024 M=4096,N=2048,K=512 M=16384,N=2048,K=1024; do
        n=${shape#*N=}; n=${n%%,*}
        for cfg in "--block-m 64 --block-n 128 --cluster $((n / 128)) --reduce-mode peer" \
                   "--block-m 64 --block-n 128 --cluster $((n / 128)) --reduce-mode leader" \
                   "--block-m 64 --block-n 256 --cluster $((n / 256)) --stages 4 --reduce-mode peer" \
                   "--block-m 64 --block-n 256 --cluster $((n / 256)) --stages 4 --reduce-mode leader" \
                   "--block-m 128 --block-n 128 --cluster $((n / 128)) --stages 4 --reduce-mode peer"; do
            one $spec $shape $cfg
        done
    done
done
