#!/usr/bin/env bash
# Builds the kernel variants of tests/gpu/gemm_harness.cu as sm_90a cubins (one translation unit per
# variant, each exactly like a generated file: macros + epilogue params + #include "cf_sm90.cuh" +
# cf_epilogue + #include "cf_sm90_kernel.cuh").  Usage: bash tests/gpu/build_cubins.sh [outdir]   (default build/gpu)
# Needs only nvcc (no GPU).  Prints the ptxas register/spill line of every variant and fails on spills.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUTD=${1:-build/gpu}
mkdir -p "$OUTD"
NVCC=${NVCC:-nvcc}
# name | flags     (CF_HARNESS_EPI: 0 identity->bf16, 1 bias+gelu(tanh)->bf16, 2 identity->f32, 3 identity->f16)
VARIANTS=(
"pp128_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_HARNESS_EPI=0"
"pp128_nk_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_HARNESS_EPI=0"
"pp128_kn_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_HARNESS_EPI=1"
"pp128_nk_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_HARNESS_EPI=1"
"pp128s6_nk_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=1 -DCF_HARNESS_EPI=0"
"pp128s6_nk_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=1 -DCF_HARNESS_EPI=1"
"pp128cl2_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"pp128cl2_nk_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"pp128cl2_kn_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"pp128cl2_nk_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"pp128cl2s6_nk_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"pp128cl2nomc_nk_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_MULTICAST=0 -DCF_HARNESS_EPI=0"
"pp128cl4_nk_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_CLUSTER_N=4 -DCF_HARNESS_EPI=1"
"pp128cl4_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_CLUSTER_N=4 -DCF_HARNESS_EPI=0"
"pp128cl8_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_CLUSTER_N=8 -DCF_HARNESS_EPI=0"
"coop_kn_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_HARNESS_EPI=0"
"coop_nk_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_HARNESS_EPI=0"
"coop_nk_gelu|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_HARNESS_EPI=1"
"coops3_nk_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=3 -DCF_B_NK=1 -DCF_HARNESS_EPI=0"
"coopcl2_kn_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"coopcl2_nk_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"coopcl2_kn_gelu|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"coopcl2_nk_gelu|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"coopcl4_kn_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_CLUSTER_N=4 -DCF_HARNESS_EPI=0"
"pp128_nk_f32|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=1 -DCF_HARNESS_EPI=2"
"pp128cl2_kn_f16|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=5 -DCF_B_NK=0 -DCF_IN_F16=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=3"
"coop128cl2_kn_id|-DCF_PINGPONG=0 -DCF_BM=128 -DCF_BN=128 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"coop128cl2_nk_id|-DCF_PINGPONG=0 -DCF_BM=128 -DCF_BN=128 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"coop128cl2_kn_gelu|-DCF_PINGPONG=0 -DCF_BM=128 -DCF_BN=128 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"coop128cl2_nk_gelu|-DCF_PINGPONG=0 -DCF_BM=128 -DCF_BN=128 -DCF_STAGES=4 -DCF_B_NK=1 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
"coop128_kn_id|-DCF_PINGPONG=0 -DCF_BM=128 -DCF_BN=128 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_HARNESS_EPI=0"
"coop_kn_gelu|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=4 -DCF_B_NK=0 -DCF_HARNESS_EPI=1"
"coops3_kn_id|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=3 -DCF_B_NK=0 -DCF_HARNESS_EPI=0"
"coops3_kn_gelu|-DCF_PINGPONG=0 -DCF_BM=64 -DCF_BN=256 -DCF_STAGES=3 -DCF_B_NK=0 -DCF_HARNESS_EPI=1"
"pp128s6_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=0 -DCF_HARNESS_EPI=0"
"pp128s6_kn_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=0 -DCF_HARNESS_EPI=1"
"pp128cl2s6_kn_id|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=0"
"pp128cl2s6_kn_gelu|-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=0 -DCF_CLUSTER_N=2 -DCF_HARNESS_EPI=1"
)
# VARIANTS_SET=probe: hand-written epilogue probes (traced: -DCF_TRACE), timed beside cuBLASLt by
#   VARIANTS_SET=probe bash tests/gpu/build_cubins.sh build/probe && bash tests/gpu/build_host.sh &&
#   build/gpu/gemm_harness build/probe --probe 16384,1024,1024 4096,2048,512
if [ "${VARIANTS_SET:-}" = probe ]; then
P="-DCF_BM=128 -DCF_BN=128 -DCF_STAGES=6 -DCF_B_NK=0"
VARIANTS=(
"p_kn_id|$P -DCF_HARNESS_EPI=0 -DCF_TRACE=1"
"p_kn_gelu|$P -DCF_HARNESS_EPI=1 -DCF_TRACE=1"
"p_kn_gelu_constbias|$P -DCF_HARNESS_EPI=12 -DCF_TRACE=1"
"p_kn_ffma6|$P -DCF_HARNESS_EPI=5 -DCF_TRACE=1"
"p_kn_tanh|$P -DCF_HARNESS_EPI=4 -DCF_TRACE=1"
)
fi
pids=()
for v in "${VARIANTS[@]}"; do
    name=${v%%|*}; flags=${v#*|}
    (
        $NVCC -gencode=arch=compute_90a,code=sm_90a -cubin -std=c++17 -O3 -Xptxas -v \
            -DCF_HARNESS_KERNEL_TU $flags -Isrc/device tests/gpu/gemm_harness.cu \
            -o "$OUTD/$name.cubin" > "$OUTD/$name.ptxas.log" 2>&1 || { echo "FAILED $name"; cat "$OUTD/$name.ptxas.log"; exit 1; }
        regs=$(grep -E "Used [0-9]+ registers" "$OUTD/$name.ptxas.log" | sed -E 's/.*Used ([0-9]+) registers.*/\1/')
        spill=$(grep -E "spill stores" "$OUTD/$name.ptxas.log" | sed -E 's/.* ([0-9]+) bytes spill stores.*/\1/')
        warn=$(grep -c -E "warning|C75" "$OUTD/$name.ptxas.log" || true)
        printf "%-22s regs %-4s spill %-4s warnings %s\n" "$name" "$regs" "$spill" "$warn"
        [ "$spill" = 0 ] && [ "$warn" = 0 ] || { cat "$OUTD/$name.ptxas.log"; exit 1; }
    ) &
    pids+=($!)
    # at most NJOBS at once
    if [ ${#pids[@]} -ge ${NJOBS:-4} ]; then wait "${pids[0]}" || exit 1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
ls "$OUTD"/*.cubin | wc -l
