#!/usr/bin/env python3
"""One table, one run: comfuse's fused kernel beside cuBLAS doing the GEMM alone,
PyTorch eager and torch.compile of the same function, for every single-GEMM
workload of shared/workloads.md.  Runs on the GPU machine (PyTorch there).

    python3 bench/compare.py [--quick] [--workloads gemm_bias_ln,...] [--out FILE]

comfuse numbers come from `build/comfuse bench` (CUDA events, L2 flushed, median);
the PyTorch ones from triton.testing.do_bench (CUDA events, L2 flushed, median),
all on the same inputs' shapes, in the same process tree and minutes.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import WORKLOADS, comfuse_bench, time_ms, torch  # noqa: E402  (the workloads live in common.py)

SHAPES = [(8192, 4096, 4096), (16384, 1024, 1024), (16384, 2048, 1024), (4096, 2048, 512)]
QUICK = [(16384, 1024, 1024), (4096, 2048, 512)]


def fmt(v, w=8):
    return f"{v:{w}.4f}" if v is not None else f"{'-':>{w}}"


def ratio(a, b, w=7):
    return f"{a / b:{w}.3f}" if a is not None and b is not None else f"{'-':>{w}}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two shapes per workload")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--deadline", type=float, default=0, help="stop starting new rows after this many seconds")
    ap.add_argument("--shapes", default=None, help="only these shapes, e.g. 16384,1024,1024;4096,2048,512")
    ap.add_argument("--comfuse", default=None, help="the comfuse binary to time (default: this tree's build)")
    ap.add_argument("--bench-args", default="", help="options passed to `comfuse bench`, e.g. --sync-finish")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = args.comfuse or os.path.join(root, "build", "comfuse")
    shapes = QUICK if args.quick else SHAPES
    if args.shapes:
        shapes = [tuple(int(d) for d in s.split(",")) for s in args.shapes.split(";")]
        if any(len(s) != 3 for s in shapes):
            ap.error("--shapes: M,N,K triples separated by ';'")
    torch.manual_seed(0)
    dev = "cuda"
    rows = []
    t_start = time.time()
    header = (f"{'workload':<16} {'M,N,K':<18} {'comfuse':>8} {'cuBLAS':>8} {'compile':>8} {'eager':>8} "
              f"{'unfused':>8} {'floor':>8} {'/cuBLAS':>7} {'/compile':>8}")
    for name in args.workloads.split(","):
        fn = WORKLOADS[name]
        for (m, n, k) in shapes:
            if args.deadline and time.time() - t_start > args.deadline:
                print(f"# deadline reached: {name} {m}x{n}x{k} not run", flush=True)
                continue
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(k, n, device=dev, dtype=torch.bfloat16) / k ** 0.5
            b = torch.randn(n, device=dev)
            g = torch.rand(n, device=dev) + 0.5
            be = torch.randn(n, device=dev)
            t0 = time.time()
            compiled = torch.compile(fn, dynamic=False)
            compiled(x, w, b, g, be)
            torch.cuda.synchronize()
            compile_s = time.time() - t0
            t_eager = time_ms(lambda: fn(x, w, b, g, be))
            t_compile = time_ms(lambda: compiled(x, w, b, g, be))
            t_mm = time_ms(lambda: x @ w)
            fused, cublaslt, floor, unfused = comfuse_bench(root, binary, args.bench_args.split(), name, m, n, k)
            rows.append((name, f"{m},{n},{k}", fused, t_mm, t_compile, t_eager, unfused, floor))
            print(f"# {name} {m}x{n}x{k}: torch.compile took {compile_s:.1f} s; cuBLASLt in comfuse bench "
                  f"{fmt(cublaslt).strip()} ms", flush=True)
    lines = [header] + [
        f"{r[0]:<16} {r[1]:<18} {fmt(r[2])} {fmt(r[3])} {fmt(r[4])} {fmt(r[5])} {fmt(r[6])} {fmt(r[7])} "
        f"{ratio(r[2], r[3])} {ratio(r[2], r[4], 8)}" for r in rows]
    print("\ntimes in ms (median); comfuse = fused kernel, cuBLAS = torch x @ w alone, compile = torch.compile,")
    print("unfused = cuBLASLt GEMM + comfuse row kernel; /cuBLAS and /compile: comfuse time over theirs\n")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
