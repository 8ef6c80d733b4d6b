#!/usr/bin/env bash
# Row-reduction exchange modes side by side (docs/perf-notes.md v8): each line is one
# kernel timed in turns with cuBLASLt doing the GEMM alone, in one process.
#   1. the mainloop alone (identity epilogue) at hardware cluster sizes 1..8;
#   2. RMSNorm and LayerNorm with a row over 2, 4, 8, 16 CTAs (N = CTAs x 128) in each
#      mode: DSMEM peer-to-peer, DSMEM leader-follower, L2 (global);
#   3. the four reduction workloads at the workloads.md shapes with the default options.
#   bench/modes.sh [--quick]     --quick: parts 1 and 3 at one shape
set -uo pipefail
cd "$(dirname "$0")/.."
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
make -j"$(nproc)" all >/dev/null || exit 1
quick=0
[ "${1:-}" = --quick ] && quick=1
cases=()
add() { cases+=("$*"); }
for c in 1 2 4 8; do
    add gemm M=16384,N=1024,K=1024 --block-m 128 --block-n 128 --stages $([ $c -le 2 ] && echo 6 || echo 4) --cluster $c
done
if [ $quick = 0 ]; then
    for c in 2 4 8 16; do
        for spec in gemm_rmsnorm gemm_bias_ln; do
            for mode in peer leader global; do
                add $spec M=16384,N=$((c * 128)),K=1024 --block-m 128 --block-n 128 --cluster $c --reduce-mode $mode
            done
        done
    done
fi
shapes="M=8192,N=4096,K=4096 M=16384,N=1024,K=1024 M=16384,N=2048,K=1024 M=4096,N=2048,K=512"
[ $quick = 1 ] && shapes="M=16384,N=1024,K=1024"
for shape in $shapes; do
    for spec in gemm_bias_ln gemm_rmsnorm gemm_softmax gemm_ln_softmax; do add $spec $shape; done
done
# NVRTC first, in parallel: the timing loop then only loads cubins from the cache.
printf '%s\n' "${cases[@]}" | xargs -P "$(nproc)" -I{} sh -c 'set -- {}; s=$1 sh=$2; shift 2; build/comfuse compile --shape $sh "$@" examples/$s.cf >/dev/null 2>&1'
for c in "${cases[@]}"; do
    set -- $c
    spec=$1 shape=$2
    shift 2
    timeout 120 build/comfuse bench --iters 60 --shape "$shape" "$@" "examples/$spec.cf" 2>&1 |
        awk -F'\t' -v s="$spec" -v sh="$shape" -v o="$*" \
            '/fused kernel:/ { sub(/^ +fused kernel: +/, ""); k = $0 }
             /^BENCH/ { printf "%-16s %-22s %-62s ratio %.3f  (%.4f / %.4f ms)  %s\n", s, sh, o, $8, $4, $5, k }
             /comfuse( bench)?:/ { print s, sh, o, $0 }'
done
