#!/usr/bin/env python3
"""Clock and power under sustained load: each workload's function through comfuse.fuse and
torch's `x @ w` (the cuBLAS baseline), each replayed from a CUDA graph back to back for about
a second while nvidia-smi samples the SM clock and board power every 20 ms.  `comfuse bench`
alternates single launches with syncs between them, so the card starts each from a cooler
state; the grid's graph replays run hot.  Where the two disagree on a ratio, this says whether
the clock (the power cap) is why.  GPU machine:

    python3 bench/sustained.py [--cells swiglu:4096x14336x4096,...] [--seconds 1.0]
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

DEFAULT = "swiglu:4096x14336x4096,gemm_rmsnorm_res2:8192x4096x14336,gemm_bias_gelu:8192x24576x3072,gemm_rmsnorm:8192x4096x4096"


def sample(seconds, run):
    """run() repeatedly for `seconds` while nvidia-smi samples; (calls per second, median MHz, median W)."""
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "20"], stdout=subprocess.PIPE, text=True)
    import torch
    time.sleep(0.2)
    t0, n = time.time(), 0
    while time.time() - t0 < seconds:
        run()
        n += 1
    torch.cuda.synchronize()
    dt = time.time() - t0
    smi.terminate()
    out = smi.communicate()[0].split("\n")
    vals = [tuple(float(v) for v in l.split(",")) for l in out if l.count(",") == 1]
    vals = vals[len(vals) // 4:]            # the clock settles after the first quarter
    mhz = sorted(v[0] for v in vals)[len(vals) // 2] if vals else float("nan")
    watts = sorted(v[1] for v in vals)[len(vals) // 2] if vals else float("nan")
    return n / dt, mhz, watts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=DEFAULT)
    ap.add_argument("--seconds", type=float, default=1.0)
    a = ap.parse_args()
    import torch
    import comfuse
    import common
    import grid
    import kernels
    print("%-36s %-8s %10s %8s %8s" % ("cell", "what", "ms/call", "MHz", "W"))
    for name, m, n, k in kernels.parse_cells(a.cells):
        c = kernels.cell_of(name, m, n, k)
        args = grid.make_inputs(torch, c)
        fused = comfuse.fuse(common.ALL_WORKLOADS[name])
        x, w = grid.cublas_operands(torch, c, args)
        for what, fn in (("fused", lambda: fused(*args)), ("x @ w", lambda: x @ w)):
            fn()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(10):
                    fn()
            rate, mhz, watts = sample(a.seconds, g.replay)
            print("%-36s %-8s %10.4f %8.0f %8.0f" % ("%s %dx%dx%d" % (name, m, n, k), what, 1e3 / rate / 10, mhz, watts),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
