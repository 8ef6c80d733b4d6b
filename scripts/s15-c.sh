#!/usr/bin/env bash
# session 15 call (untracked): exp/gather-early correctness and same-call A/B (env CF_GATHER_EARLY 0/1/2)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH" OUT_DIR=${OUT:-/tmp}
if [ -z "${CF_CACHE_DIR:-}" ]; then export CF_CACHE_DIR=$(mktemp -d); [ -f build/cfge.tgz ] && tar -xzf build/cfge.tgz -C "$CF_CACHE_DIR"; fi
E=examples
make -j16 all >/dev/null 2>&1 || { echo build failed; exit 1; }
checks() {
for sp in gemm_rmsnorm gemm_bias_ln "gemm_softmax --pair-tiles off" "gemm_rmsnorm --pair-tiles off"; do
  read -r s o <<<"$sp"
  for sh in M=4096,N=2048,K=512 M=16384,N=1024,K=1024 M=1000,N=1000,K=1000 M=129,N=72,K=136 M=257,N=3960,K=136 M=5000,N=1000,K=520; do
    echo "check $E/$s.cf $sh 256 21 $o"
  done
done
echo "check tests/specs/ln_big_mean_bf16.cf M=512,N=1024,K=512 0 22"
}
cases=("gemm_rmsnorm M=4096,N=2048,K=512" "gemm_bias_ln M=4096,N=2048,K=512" "gemm_bias_ln M=16384,N=1024,K=1024"
       "gemm_softmax M=4096,N=2048,K=512 --pair-tiles off" "gemm_rmsnorm M=16384,N=1024,K=1024 --pair-tiles off"
       "gemm_softmax M=16384,N=1024,K=1024 --pair-tiles off")
if [ "${1:-}" = --compile-only ]; then
  export CF_CACHE_DIR=build/cfge; rm -rf build/cfge; mkdir -p build/cfge
  { checks | awk '{ o=""; for (i=6;i<=NF;i++) o=o" "$i; print "build/comfuse compile --shape " $3 o " " $2 }'
    for c in "${cases[@]}"; do read -r sp sh o <<<"$c"; echo "build/comfuse compile --shape $sh $o $E/$sp.cf"; done
    echo "build/comfuse compile --shape M=2200,N=2048,K=512 $E/gemm_rmsnorm.cf"; } > /tmp/cmds.txt
  for d in 0 1 2; do CF_GATHER_EARLY=$d xargs -P 16 -I{} sh -c '{} >/dev/null 2>&1' < /tmp/cmds.txt; done
  for d in 0 1 2; do CF_TRACE=1 CF_GATHER_EARLY=$d build/comfuse compile --shape M=4096,N=2048,K=512 $E/gemm_rmsnorm.cf >/dev/null 2>&1 & done; wait
  tar -czf build/cfge.tgz -C build/cfge . && echo "packed $(find build/cfge -name '*.cubin' | wc -l) cubins"; exit 0
fi
for d in 1 2; do
  export CF_GATHER_EARLY=$d
  checks | timeout 120 xargs -P 12 -d '\n' -I{} bash -c "scripts/gpu-check-job {}" | grep -v '^ok'
  echo "early=$d checks passed: $(grep -c 'check passed' "$OUT_DIR/checks.log") (cumulative) of $(checks | wc -l) each"
done
log=$(mktemp)
for t in racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $t --error-exitcode 9 build/comfuse run --check --shape M=2200,N=2048,K=512 $E/gemm_rmsnorm.cf >"$log" 2>&1
  echo "$t RMS early=2: rc=$? $(grep -m1 'SUMMARY' "$log")"
done
unset CF_GATHER_EARLY
. bench/turns.sh
echo "fused/cuBLAS per turn: main | early before part 1 | early after stage 0's loop [ratio]"
for c in "${cases[@]}"; do
  read -r sp sh o <<<"$c"
  variant_ratio() { CF_GATHER_EARLY=$1 bench_ratio build/comfuse "$E/$sp.cf" "$sh" $o; }
  run_turns "$(printf '%-16s %-22s %s' "$sp" "$sh" "$o")" main early1 early2
done
for d in 0 1 2; do echo "trace early=$d:"; CF_TRACE=1 CF_GATHER_EARLY=$d timeout 60 build/comfuse bench --iters 40 --shape M=4096,N=2048,K=512 $E/gemm_rmsnorm.cf 2>&1 | grep -E "trace" | head -5; done
