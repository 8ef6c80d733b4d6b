#!/usr/bin/env bash
# Build (if needed) and run the GPU GEMM harness.  Used as:  bash tests/gpu/run_harness.sh [--quick]
# Cubins come from build/gpu (built by tests/gpu/build_cubins.sh, here or carried); the host binary
# is rebuilt on the GPU machine when the carried one does not start there.  Logs go to $OUT.
# SANITIZE=1 also runs compute-sanitizer memcheck over every variant on two small shapes.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=build/gpu
OUTDIR=${OUT:-$B/out}
mkdir -p "$B" "$OUTDIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 | tee "$OUTDIR/gpu.txt"
if ! ls $B/*.cubin >/dev/null 2>&1; then NJOBS=16 bash tests/gpu/build_cubins.sh $B || exit 1; fi
$B/gemm_harness >/dev/null 2>&1; rc=$?
if [ $rc -ne 2 ]; then
    echo "building host harness (carried binary rc=$rc)"
    bash tests/gpu/build_host.sh || exit 1
fi
for c in $B/pp128_nk_gelu.cubin $B/coop64x256_nk_id.cubin; do
    [ -f $c ] && cuobjdump -sass $c > "$OUTDIR/$(basename $c .cubin).sass" 2>&1 && \
        echo "$(basename $c): HGMMA $(grep -c HGMMA "$OUTDIR/$(basename $c .cubin).sass") LDL/STL $(grep -c -E 'LDL|STL' "$OUTDIR/$(basename $c .cubin).sass")"
done
nvidia-smi dmon -s pc -d 1 > "$OUTDIR/dmon.txt" 2>&1 &
dmon=$!
timeout ${HARNESS_TIMEOUT:-400} $B/gemm_harness $B "$@" 2>&1 | tee "$OUTDIR/harness.log"
rc=${PIPESTATUS[0]}
kill $dmon 2>/dev/null
echo "power/clock samples during the run (dmon: pwr W, gtemp C, mclk, pclk MHz):"; awk 'NR>2 && $1 !~ /#/ {print $2, $3, $5, $6}' "$OUTDIR/dmon.txt" | sort -n -k4 | awk 'NR==1{print "min pclk:", $0} END{print "max pclk:", $0}' 
echo "harness exit $rc"
if [ -n "${NCU_KERNEL:-}" ]; then   # NCU_KERNEL="name M N K": hardware counters of that kernel and cuBLAS beside
    timeout ${NCU_TIMEOUT:-150} ncu --clock-control none -k regex:"gemm|xmma|sm90" -c 4 --metrics \
gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
        $B/gemm_harness $B --one $NCU_KERNEL 2>&1 | grep -v "^==PROF==" | tee "$OUTDIR/ncu.log" | grep -E "cf_gemm|sm90|Kernel|gemm|duration|pct|bytes|wavefronts" | cut -c1-150
fi
if [ "${SANITIZE:-0}" = 1 ]; then
    timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool memcheck $B/gemm_harness $B --sanitize 2>&1 | tail -40 | tee "$OUTDIR/memcheck.log"
fi
exit $rc
