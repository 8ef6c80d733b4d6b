#!/usr/bin/env python3
"""PyTorch's own error on the workloads, for comparison with `comfuse run --check`.

    python3 bench/accuracy.py [--rows R] [--shape M,N,K]

Inputs are drawn as `comfuse run` draws them (uniform; the GEMM operands scaled by
1.7 / K^(1/4), the vectors in [-1, 1)), rounded to bf16.  The reference is float64 from
those bf16 inputs; the error printed is the relative Frobenius norm over R rows, the
measure `comfuse run --check` prints.  Runs on the GPU machine.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import WORKLOADS  # noqa: E402


def reference(name, x, w, b, g, be):
    z = x.double() @ w.double()
    b, g, be = b.double(), g.double(), be.double()

    def ln(y):
        mu = y.mean(-1, keepdim=True)
        var = ((y - mu) ** 2).mean(-1, keepdim=True)
        return (y - mu) / torch.sqrt(var + 1e-5) * g + be

    if name == "gemm_bias_gelu":
        return F.gelu(z + b, approximate="tanh")
    if name == "gemm_bias_ln":
        return ln(0.5 * z + b)
    if name == "gemm_rmsnorm":
        return z * torch.rsqrt(z.square().mean(-1, keepdim=True) + 1e-6) * g
    if name == "gemm_softmax":
        return torch.softmax(0.125 * z, dim=-1)
    if name == "gemm_ln_softmax":
        return torch.softmax(0.5 * ln(z + b), dim=-1)
    raise KeyError(name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--shape", default="16384,1024,1024")
    a = ap.parse_args()
    m, n, k = (int(v) for v in a.shape.split(","))
    torch.manual_seed(1)
    s = 1.7 / k ** 0.25
    u = lambda *shape: torch.rand(*shape, device="cuda") * 2 - 1  # noqa: E731
    x = (u(m, k) * s).bfloat16()
    w = (u(k, n) * s).bfloat16()
    b, g, be = u(n), u(n), u(n)
    print(f"rel. Frobenius error against float64, {a.rows} of {m} rows, M={m} N={n} K={k}")
    print(f"{'workload':18} {'eager':>10} {'compile':>10}")
    for name in ("gemm_bias_gelu", "gemm_bias_ln", "gemm_rmsnorm", "gemm_softmax", "gemm_ln_softmax"):
        fn = WORKLOADS[name]
        ref = reference(name, x[: a.rows], w, b, g, be)
        errs = []
        for f in (fn, torch.compile(fn)):
            y = f(x, w, b, g, be)[: a.rows].double()
            errs.append(((y - ref).norm() / ref.norm()).item())
        print(f"{name:18} {errs[0]:10.3e} {errs[1]:10.3e}")


if __name__ == "__main__":
    main()
