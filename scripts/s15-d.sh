#!/usr/bin/env bash
# session 15 call (untracked): exp/gather-early variant 3 (loads before the last wgmma wait): checks, A/B
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH" OUT_DIR=${OUT:-/tmp}
if [ -z "${CF_CACHE_DIR:-}" ]; then export CF_CACHE_DIR=$(mktemp -d); [ -f build/cfge.tgz ] && tar -xzf build/cfge.tgz -C "$CF_CACHE_DIR"; fi
E=examples
make -j16 all >/dev/null 2>&1 || { echo build failed; exit 1; }
checks() {
for sp in gemm_rmsnorm "gemm_softmax --pair-tiles off" "gemm_rmsnorm --pair-tiles off"; do
  read -r s o <<<"$sp"
  for sh in M=4096,N=2048,K=512 M=16384,N=1024,K=1024 M=1000,N=1000,K=1000 M=129,N=72,K=136 M=257,N=3960,K=136 M=5000,N=1000,K=520 M=300,N=8200,K=136 M=8192,N=4096,K=4096; do
    echo "check $E/$s.cf $sh 256 31 $o"
  done
done
echo "check tests/specs/softmax_inf_bf16.cf M=300,N=1000,K=256 0 32 --pair-tiles off"
echo "check tests/specs/softmax_scaled_inf.cf M=300,N=1000,K=256 0 32 --pair-tiles off"
}
cases=("gemm_rmsnorm M=4096,N=2048,K=512" "gemm_softmax M=4096,N=2048,K=512" "gemm_rmsnorm M=16384,N=1024,K=1024"
       "gemm_softmax M=16384,N=1024,K=1024" "gemm_rmsnorm M=16384,N=2048,K=1024" "gemm_softmax M=16384,N=2048,K=1024"
       "gemm_rmsnorm M=8192,N=4096,K=4096" "gemm_softmax M=8192,N=4096,K=4096")
if [ "${1:-}" = --compile-only ]; then
  export CF_CACHE_DIR=build/cfge; mkdir -p build/cfge
  { checks | awk '{ o=""; for (i=6;i<=NF;i++) o=o" "$i; print "build/comfuse compile --shape " $3 o " " $2 }'
    for c in "${cases[@]}"; do read -r sp sh <<<"$c"; echo "build/comfuse compile --shape $sh $E/$sp.cf"; echo "build/comfuse compile --pair-tiles off --shape $sh $E/$sp.cf"; done
    for s in gemm_rmsnorm gemm_softmax; do echo "build/comfuse compile --pair-tiles off --shape M=2200,N=2048,K=512 $E/$s.cf"; done; } > /tmp/cmds.txt
  for d in 0 1 3; do CF_GATHER_EARLY=$d xargs -P 16 -I{} sh -c '{} >/dev/null 2>&1' < /tmp/cmds.txt; done
  tar -czf build/cfge.tgz -C build/cfge . && echo "packed $(find build/cfge -name '*.cubin' | wc -l) cubins"; exit 0
fi
export CF_GATHER_EARLY=3
checks | timeout 150 xargs -P 12 -d '\n' -I{} bash -c "scripts/gpu-check-job {}" | grep -v '^ok'
echo "early=3 checks passed: $(grep -c 'check passed' "$OUT_DIR/checks.log") of $(checks | wc -l)"
log=$(mktemp)
for s in gemm_rmsnorm gemm_softmax; do for t in racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $t --error-exitcode 9 build/comfuse run --check --pair-tiles off --shape M=2200,N=2048,K=512 $E/$s.cf >"$log" 2>&1
  echo "$t $s early=3 unpaired: rc=$? $(grep -m1 'SUMMARY' "$log")"
done; done
unset CF_GATHER_EARLY
. bench/turns.sh
echo "fused/cuBLAS per turn: main default | unpaired + early 1 | unpaired + early 3 [ratio]"
for c in "${cases[@]}"; do
  read -r sp sh <<<"$c"
  variant_ratio() { case $1 in 0) bench_ratio build/comfuse "$E/$sp.cf" "$sh" ;; 1) CF_GATHER_EARLY=1 bench_ratio build/comfuse "$E/$sp.cf" "$sh" --pair-tiles off ;;
                    2) CF_GATHER_EARLY=3 bench_ratio build/comfuse "$E/$sp.cf" "$sh" --pair-tiles off ;; esac; }
  run_turns "$(printf '%-16s %-22s' "$sp" "$sh")" main e1 e3
done
