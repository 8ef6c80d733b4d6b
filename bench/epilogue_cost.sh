#!/usr/bin/env bash
# What an epilogue instruction costs beside the other warpgroup's wgmma: synthetic epilogues of
# k chained FMAs (x * 1.0001 + 0.001: one FFMA each) or k chained tanh (one MUFU op each) after
# the GEMM, k = 1 .. 24, benched beside cuBLASLt in one process each (GPU machine).  The slope of
# fused time over k, per output element, is the cost the plan's model charges an epilogue
# instruction (src/plan.c, epilogue_instr_per_elem and EPI_EXPOSED).
#   bench/epilogue_cost.sh [SHAPE ...]      (default: two shapes, one K-short, one K-long)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export PATH="/usr/local/cuda/bin:$PATH"
make -j"$(nproc)" all >/dev/null 2>&1 || { echo "epilogue_cost: build failed" >&2; exit 1; }
export CF_CACHE_DIR=${CF_CACHE_DIR:-$(mktemp -d)}
dir=build/epilogue-cost
mkdir -p "$dir"
ks=(1 2 4 8 16 24)   # from 1: a bare GEMM (k = 0) takes another plan
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(M=8192,N=3072,K=768 M=8192,N=4096,K=4096)
spec() {   # KIND K -> path
    local f="$dir/$1_$2.cf" prev=x0
    {
        echo "# bench/epilogue_cost.sh: $2 chained $1 ops after the GEMM"
        echo "input X: bf16[M, K]"
        echo "input W: bf16[N, K]"
        echo "x0 = X @ W"
        for i in $(seq 1 "$2"); do
            if [ "$1" = fma ]; then echo "x$i = $prev * 1.0001 + 0.001"; else echo "x$i = tanh($prev)"; fi
            prev=x$i
        done
        echo "output Y: bf16 = $prev"
    } >"$f"
    echo "$f"
}
for kind in fma mufu; do for k in "${ks[@]}"; do for s in "${shapes[@]}"; do
    echo "build/comfuse compile --shape $s $(spec $kind "$k")"
done; done; done | xargs -P "$(nproc)" -I{} sh -c '{} >/dev/null 2>&1'   # NVRTC first, in parallel
printf '%-6s %3s %-22s %10s %10s %8s\n' kind k shape fused_ms cublas_ms ratio
for kind in fma mufu; do for s in "${shapes[@]}"; do for k in "${ks[@]}"; do
    timeout 120 build/comfuse bench --iters 100 --shape "$s" "$dir/${kind}_$k.cf" 2>/dev/null |
        awk -v kind="$kind" -v k="$k" -v s="$s" -F'\t' '/^BENCH/ { printf "%-6s %3d %-22s %10.4f %10.4f %8.3f\n", kind, k, s, $4, $5, $8 }'
done; done; done | tee "$dir/results.txt"
# the slope per shape and kind: microseconds per chained op over the whole output, and per element
awk 'NR > 0 { key = $1 " " $3; n[key]++; sx[key] += $2; sy[key] += $4; sxx[key] += $2 * $2; sxy[key] += $2 * $4 }
     END { for (key in n) { d = n[key] * sxx[key] - sx[key] ^ 2; if (d <= 0) continue
           b = (n[key] * sxy[key] - sx[key] * sy[key]) / d
           split(key, a, " "); split(a[2], f, /[=,]/); elems = f[2] * f[4]
           printf "%-6s %-22s  +%.4f ms per op  (%.3f ns per op per 1000 elements)\n", a[1], a[2], b, b * 1e6 / elems * 1000 } }' "$dir/results.txt"
