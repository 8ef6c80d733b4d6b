#!/usr/bin/env bash
# Epilogue probes on the GPU machine: identity, bias+GELU, one tanh per element, six FFMAs per
# element, GELU with f16x2 tanh -- each timed beside cuBLASLt in turns (and cuBLASLt's own
# GELU_BIAS epilogue beside plain cuBLASLt), with a clock64 trace of where each CTA's time goes
# (mainloop / epilogue / tensor gaps between tiles / head / tail).  See docs/perf-notes.md v10.
#   bench/probe.sh [M,N,K ...]
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
[ -f build/probe/p_kn_id.cubin ] || VARIANTS_SET=probe NJOBS=8 bash tests/gpu/build_cubins.sh build/probe >/dev/null || exit 1
build/gpu/gemm_harness >/dev/null 2>&1; [ $? -eq 2 ] || bash tests/gpu/build_host.sh || exit 1
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(16384,1024,1024 4096,2048,512 16384,2048,1024 8192,4096,4096)
build/gpu/gemm_harness build/probe --probe "${shapes[@]}" 2>&1 | grep -v '^loaded'
