#!/usr/bin/env bash
# Builds the host side of the harness (needs nvcc, cuda.h, cublasLt; no GPU).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o build/gpu/gemm_harness tests/gpu/gemm_harness.cu -lcuda -lcublasLt -lcublas
