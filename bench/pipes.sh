#!/usr/bin/env bash
# Warp instructions per pipe, per consumer warp and tile, of the fused kernels (GPU machine, ncu):
#   bench/pipes.sh [SHAPE ...]      (default: 16384x1024x1024 and 4096x2048x512)
# One profiled launch each (ncu --metrics smsp__inst_executed_pipe_*), divided by the tiles and
# the four warps of the warpgroup that owns a tile (128x128 tiles, every default below K = 4096);
# the producer's few instructions are counted too, so compare a kernel with examples/gemm.cf's at
# the same shape.  Env: CF_CACHE_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
[ -x build/comfuse ] || make -j"$(nproc)" all >/dev/null 2>&1
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(M=16384,N=1024,K=1024 M=4096,N=2048,K=512)
pipes=$(ncu --query-metrics 2>/dev/null | awk '{print $1}' |
    grep -E '^smsp__inst_executed_pipe_(fma|fmaheavy|fmalite|fp16|alu|xu|lsu|uniform)$' | sed 's/$/.sum/' | paste -sd, -)
[ -n "$pipes" ] || { echo "pipes: ncu lists no smsp__inst_executed_pipe_* metrics" >&2; exit 1; }
echo "per consumer warp and tile: ${pipes//smsp__inst_executed_pipe_/}"
for shape in "${shapes[@]}"; do
    IFS=, read -r m n _ <<<"${shape//[MNK]=/}"
    tiles=$(( (m + 127) / 128 * ((n + 127) / 128) ))
    for spec in examples/gemm.cf examples/gemm_bias_gelu.cf examples/gemm_rmsnorm.cf examples/gemm_bias_ln.cf \
        examples/gemm_softmax.cf examples/gemm_ln_softmax.cf; do
        timeout 300 ncu --kernel-name cf_gemm_kernel --launch-skip 2 --launch-count 1 --metrics "$pipes" --csv \
            build/comfuse bench --iters 2 --shape "$shape" "$spec" 2>/dev/null |
            awk -F'","' -v s="$(basename "$spec" .cf)" -v sh="$shape" -v t="$tiles" '
                NF > 10 && $0 ~ /smsp__inst_executed_pipe/ {
                    name = $(NF - 2); gsub(/smsp__inst_executed_pipe_|\.sum/, "", name)
                    v = $NF; gsub(/[",]/, "", v); val[name] = v / (t * 4); order[++k] = name }
                END { printf "%-16s %-22s", s, sh; for (i = 1; i <= k; i++) printf " %s %.0f", order[i], val[order[i]]; print "" }'
    done
done
