#!/usr/bin/env bash
# session 15 call B (untracked): exp/direct-store correctness and same-call A/B (env CF_DIRECT_STORE)
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH" OUT_DIR=${OUT:-/tmp}
if [ -z "${CF_CACHE_DIR:-}" ]; then export CF_CACHE_DIR=$(mktemp -d); [ -f build/cfds.tgz ] && tar -xzf build/cfds.tgz -C "$CF_CACHE_DIR"; fi
E=examples
make -j16 all >/dev/null 2>&1 || { echo build failed; exit 1; }
checks() {
for sp in gemm_rmsnorm gemm_bias_ln gemm_softmax gemm_ln_softmax; do
  for sh in M=4096,N=2048,K=512 M=16384,N=1024,K=1024 M=1000,N=1000,K=1000 M=129,N=72,K=136 M=257,N=1536,K=256 \
      M=3000,N=520,K=2056 M=77,N=200,K=64 M=1,N=8,K=8 M=257,N=3960,K=136; do
    echo "check $E/$sp.cf $sh 256 11"
  done
  echo "check $E/$sp.cf M=4096,N=2048,K=512 256 12 --late-finish"
  echo "check $E/$sp.cf M=16384,N=2048,K=1024 256 12"
  echo "check $E/$sp.cf M=64,N=32768,K=256 0 12"
done
for sp in gemm_rmsnorm gemm_bias_ln gemm_softmax; do for p in on off; do
  echo "check $E/$sp.cf M=1000,N=1000,K=1000 0 13 --pair-tiles $p"; echo "check $E/$sp.cf M=4096,N=2048,K=512 256 13 --pair-tiles $p"; done; done
for s in ln_big_mean_bf16 softmax_inf_bf16 ln_big_mean softmax_inf softmax_scaled_inf; do echo "check tests/specs/$s.cf M=512,N=1024,K=512 0 14"; done
}
if [ "${1:-}" = --compile-only ]; then
  export CF_CACHE_DIR=build/cfds; rm -rf build/cfds; mkdir -p build/cfds
  { checks | awk '{ o=""; for (i=6;i<=NF;i++) o=o" "$i; print "build/comfuse compile --shape " $3 o " " $2 }'
    for sp in gemm_rmsnorm gemm_bias_ln gemm_softmax gemm_ln_softmax; do for sh in M=4096,N=2048,K=512 M=16384,N=1024,K=1024 M=16384,N=2048,K=1024 M=8192,N=4096,K=4096; do
      echo "build/comfuse compile --shape $sh $E/$sp.cf"; done; done
    echo "build/comfuse compile --shape M=2200,N=2048,K=512 $E/gemm_bias_ln.cf"
    echo "build/comfuse compile --shape M=200,N=512,K=128 $E/gemm_rmsnorm.cf"; } > /tmp/cmds.txt
  for d in 0 1; do CF_DIRECT_STORE=$d xargs -P 16 -I{} sh -c '{} >/dev/null 2>&1' < /tmp/cmds.txt; done
  tar -czf build/cfds.tgz -C build/cfds . && echo "packed $(find build/cfds -name '*.cubin' | wc -l) cubins"; exit 0
fi
export CF_DIRECT_STORE=1
checks | timeout 200 xargs -P 12 -d '\n' -I{} bash -c "scripts/gpu-check-job {}" | grep -v '^ok'
echo "direct checks passed: $(grep -c 'check passed' "$OUT_DIR/checks.log") of $(checks | wc -l)"
log=$(mktemp)
for t in racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $t --error-exitcode 9 build/comfuse run --check --shape M=2200,N=2048,K=512 $E/gemm_bias_ln.cf >"$log" 2>&1
  echo "$t LN direct: rc=$? $(grep -m1 'SUMMARY' "$log")"
done
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 build/comfuse run --check --shape M=200,N=512,K=128 $E/gemm_rmsnorm.cf >"$log" 2>&1
echo "memcheck RMS direct: rc=$? $(grep -m1 'SUMMARY' "$log")"
unset CF_DIRECT_STORE
. bench/turns.sh
echo "fused/cuBLAS per turn: TMA store (main) | direct [ratio]"
for c in "gemm_rmsnorm M=4096,N=2048,K=512" "gemm_bias_ln M=4096,N=2048,K=512" "gemm_softmax M=4096,N=2048,K=512" \
    "gemm_bias_ln M=16384,N=1024,K=1024" "gemm_bias_ln M=16384,N=2048,K=1024" "gemm_rmsnorm M=16384,N=1024,K=1024" \
    "gemm_softmax M=16384,N=1024,K=1024" "gemm_ln_softmax M=16384,N=1024,K=1024" "gemm_ln_softmax M=16384,N=2048,K=1024" \
    "gemm_rmsnorm M=16384,N=2048,K=1024" "gemm_softmax M=16384,N=2048,K=1024" "gemm_bias_ln M=8192,N=4096,K=4096" \
    "gemm_rmsnorm M=8192,N=4096,K=4096" "gemm_softmax M=8192,N=4096,K=4096"; do
  read -r sp sh <<<"$c"
  variant_ratio() { CF_DIRECT_STORE=$1 bench_ratio build/comfuse "$E/$sp.cf" "$sh"; }
  run_turns "$(printf '%-16s %-22s' "$sp" "$sh")" main direct
done
