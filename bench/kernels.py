#!/usr/bin/env python3
"""Each GPU kernel's own time, as CUPTI records it (torch.profiler), for workloads run through
comfuse.fuse beside torch's `x @ w`, L2 flushed before each call: what the fused kernel costs
on the GPU without the event's launch gap, and every other kernel a call runs (a cast PyTorch
still makes, cuBLAS's split-K reduction).  GPU machine:

    python3 bench/kernels.py [--cells gemm_rmsnorm:64x4096x4096,swiglu:64x11008x4096] [--reps 20]
"""
import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

DEFAULT = ("gemm_rmsnorm:64x4096x4096,gemm_rmsnorm:512x4096x4096,gemm_bias_ln:512x768x3072,"
           "gemm_rmsnorm_res2:8192x4096x4096,gemm_residual_ln:8192x768x768,gemm_bias_gelu_erf:8192x3072x768,"
           "swiglu:64x11008x4096")


def parse_cells(text):
    cells = []
    for item in text.split(","):
        name, dims = item.split(":")
        m, n, k = (int(v) for v in dims.lower().split("x"))
        cells.append((name, m, n, k))
    return cells


def cell_of(name, m, n, k):
    """A grid cell (grid.make_inputs, grid.cublas_operands) of the workload, weights [K, N]."""
    return {"workload": name, "model": "", "M": m, "N": n, "K": k, "layout": "kn"}


def kernel_times(torch, call, flush, reps):
    """{kernel name: [us, ...]} over reps calls, the flushes left out."""
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush.zero_()
            call()
        torch.cuda.synchronize()
    times = collections.OrderedDict()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "FillFunctor" not in e.name:
            times.setdefault(e.name, []).append(e.device_time_total)
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=DEFAULT, help="workload:MxNxK, comma-separated (bench/common.py's workloads)")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    import torch
    import comfuse
    import common
    import grid
    flush = torch.empty(common.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    for name, m, n, k in parse_cells(args.cells):
        fn = common.ALL_WORKLOADS[name]
        c = cell_of(name, m, n, k)
        a = grid.make_inputs(torch, c)
        f = comfuse.fuse(fn)
        with torch.no_grad():
            for _ in range(3):
                f(*a)
            torch.cuda.synchronize()
            print(f"== {name} {m}x{n}x{k}: regions {[str(r.last) for r in f.regions()]}")
            x, w = grid.cublas_operands(torch, c, a)   # a dual GEMM's weights side by side, [K, 2N]
            for label, call in (("fused", lambda: f(*a)), ("x @ w", lambda: x @ w)):
                for kname, ts in kernel_times(torch, call, flush, args.reps).items():
                    ts = sorted(ts)
                    print(f"   {label:6s} {len(ts):3d}x  median {ts[len(ts) // 2]:9.2f} us  {kname[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
