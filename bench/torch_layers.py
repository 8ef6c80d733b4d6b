#!/usr/bin/env python3
"""Eager vs torch.compile (Inductor) vs torch.compile(backend=comfuse.backend), layer by layer.

    python3 bench/torch_layers.py [--m 16384] [--k 1024] [--n 1024] [--iters 50] [--models]

Each plain-PyTorch layer (Linear->bias->LayerNorm, Linear->GELU, projection->softmax,
residual+RMSNorm) is timed four ways with CUDA events (median of --iters, after warm-up),
under torch.no_grad(), in bf16: eager, Inductor, comfuse.backend (the rest eager) and
comfuse.inductor_backend (the rest through Inductor).  For comfuse two more columns: the fused kernel alone
(cf_kernel_launch through ctypes on the region's own inputs: what `comfuse bench` times in
C) and the region call (checks, output allocation, launch): their difference is the Python
launch overhead.  host_r and host_k are the host µs of one region call and of one bare
launch (perf_counter around the call after a sync): the CPU time an idle GPU waits for.
--models adds a BERT layer and a LLaMA decoder layer end to end, with the regions the
comfuse backend fused in them (the LLaMA MLP's gate_proj and up_proj as one dual GEMM) and
its fused and fallback call counts.
gated_mlp rows: LLaMA's MLP, down(silu(gate(x)) * up(x)) with N = --mlp-n (default 11008)
and K = --k; its dual region (gate, up, SiLU, product in one kernel) is compared in the
line below it with cuBLAS doing one GEMM over the two weights concatenated ([K, 2N]).
The C figure for the same shape: build/comfuse bench --shape M=..,N=..,K=.. SPEC.
"""
import argparse
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))

import comfuse  # noqa: E402
import layers  # noqa: E402
from comfuse import runtime  # noqa: E402


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def host_us(fn, iters):
    """Median host time of one call in µs: what it costs the CPU before control returns
    (the launch is asynchronous), the gap an idle GPU sees before the kernel starts."""
    fn()
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)


def region_args(fused):
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append((mod, i))) for m in fused.regions()]
    return hooks, seen


def kernel_alone(mod, args):
    """A closure launching the region's compiled kernel directly on its inputs."""
    x = args[0]
    m = x.numel() // mod.K
    kern, _ = mod.kernel_for(m)
    outs, _ = mod._launch(args)
    ins, params = mod._split(args)
    ins = [a.data_ptr() for a in ins]
    ptrs = [o.data_ptr() for o in outs]
    stream = torch.cuda.current_stream().cuda_stream

    def run():
        kern.launch((m, mod.N, mod.K), ins, ptrs, stream, params)
    return run


def region_rows(mods, call, iters):
    """Lines for each fused region of a compiled model, timed at the model's shapes: its
    PyTorch sub-graph (what eager runs in its place), the region call, its kernel alone."""
    seen = {}

    def keep(mod, inputs, outputs):     # (a hook's non-None result would replace the output)
        seen.setdefault(mod, inputs)
    hooks = [m.register_forward_hook(keep) for m in mods]
    call()
    for h in hooks:
        h.remove()
    out = []
    for mod, rargs in seen.items():
        label = mod.label + (" (dual GEMM: %s)" % ", ".join(mod.dual) if mod.dual else "")
        if mod.last != "fused":
            out.append("    region %-40s N=%d K=%d: %s" % (label, mod.N, mod.K, mod.last))
            continue
        t_eager = time_ms(lambda: mod.fallback(*rargs), iters)
        t_region = time_ms(lambda: mod(*rargs), iters)
        t_kernel = time_ms(kernel_alone(mod, rargs), iters)
        extra = ""
        if mod.dual:
            extra = "  cuBLAS [K, 2N] GEMM %.4f ms" % time_ms(concat_gemm(rargs), iters)
        out.append("    region %-40s N=%d K=%d: eager ops %.4f  region %.4f  kernel %.4f ms%s"
                   % (label, mod.N, mod.K, t_eager, t_region, t_kernel, extra))
    return out


def concat_gemm(rargs):
    """A dual region's reference: cuBLAS doing one GEMM over both weights concatenated
    (X @ [Wg; Wu]^T, [M, 2N]), what `comfuse bench` compares a dual GEMM with."""
    x, wg, wu = rargs[0], rargs[1], rargs[2]
    w = torch.cat([wg, wu], 0 if wg.shape[1] == x.shape[-1] else 1)      # [2N, K] or [K, 2N]
    if wg.shape[1] == x.shape[-1]:
        return lambda: torch.nn.functional.linear(x, w)
    return lambda: x @ w


def bench_layer(name, make, args, iters):
    mod = make()
    eager = time_ms(lambda: mod(*args), iters)
    torch._dynamo.reset()
    ind = torch.compile(mod)
    t_ind = time_ms(lambda: ind(*args), iters)
    torch._dynamo.reset()
    cf = torch.compile(mod, backend=comfuse.backend)
    t_cf = time_ms(lambda: cf(*args), iters)
    torch._dynamo.reset()
    cfi = torch.compile(mod, backend=comfuse.inductor_backend)
    t_cfi = time_ms(lambda: cfi(*args), iters)
    f = comfuse.fuse(mod)
    f(*args)
    hooks, seen = region_args(f)
    f(*args)
    for h in hooks:
        h.remove()
    t_kernel = t_region = h_kernel = h_region = float("nan")
    status = "; ".join(f.report.lines())
    if seen and seen[0][0].last == "fused":
        rmod, rargs = seen[0]
        launch = kernel_alone(rmod, rargs)
        t_kernel = time_ms(launch, iters)
        t_region = time_ms(lambda: rmod(*rargs), iters)
        h_kernel, h_region = host_us(launch, iters), host_us(lambda: rmod(*rargs), iters)
        status = "fused"
    print("%-22s %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %7.1f %7.1f   %s"
          % (name, eager, t_ind, t_cf, t_cfi, t_region, t_kernel, h_region, h_kernel, status))
    if seen and seen[0][0].dual:
        rmod, rargs = seen[0]
        print("    region %s (dual GEMM: %s) N=%d K=%d: %s; cuBLAS [K, 2N] GEMM %.4f ms"
              % (rmod.label, ", ".join(rmod.dual), rmod.N, rmod.K, rmod.last, time_ms(concat_gemm(rargs), iters)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=16384)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--models", action="store_true", help="also a BERT layer and a LLaMA decoder layer")
    ap.add_argument("--mlp-n", type=int, default=11008, help="the gated MLP's intermediate size (0: no MLP rows)")
    a = ap.parse_args()
    torch.manual_seed(0)
    dt = torch.bfloat16
    print("M=%d K=%d N=%d bf16, %s, median of %d (ms)" % (a.m, a.k, a.n, torch.cuda.get_device_name(), a.iters))
    print("%-22s %9s %9s %9s %9s %9s %9s %7s %7s" % ("layer", "eager", "inductor", "comfuse", "cf+ind", "region",
                                                     "kernel", "host_r", "host_k"))
    with torch.no_grad():
        for name in sorted(layers.PLAIN):
            args = layers.inputs_for(name, (a.m,), a.k, a.n, dt, "cuda")
            bench_layer(name, lambda: layers.PLAIN[name](a.k, a.n).to("cuda", dt).eval(), args, a.iters)
        for act in ("silu", "gelu_tanh") if a.mlp_n else ():
            x = torch.randn(a.m, a.k, device="cuda", dtype=dt)
            bench_layer("gated_mlp_" + act, lambda: layers.GatedMLP(a.k, a.mlp_n, act=act).to("cuda", dt).eval(),
                        (x,), a.iters)
        if a.models:
            sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
            import gpu_check
            for label, (make, inputs) in (("bert_layer", gpu_check.bert(False)), ("llama_layer", gpu_check.llama(False))):
                args, kwargs = inputs(max(1, a.m // 128), dt)

                def mk(make=make):
                    return make().to("cuda", dt).eval()
                m0 = mk()
                eager = time_ms(lambda: m0(*args, **kwargs), a.iters)
                torch._dynamo.reset()
                ind = torch.compile(m0)
                t_ind = time_ms(lambda: ind(*args, **kwargs), a.iters)
                torch._dynamo.reset()
                n0, s0 = len(comfuse.backend_reports()), comfuse.stats()
                cf = torch.compile(m0, backend=comfuse.backend)
                t_cf = time_ms(lambda: cf(*args, **kwargs), a.iters)
                s1 = comfuse.stats()
                regions = [l for r in comfuse.backend_reports()[n0:] for l in r.lines()]
                rows = region_rows([m for r in comfuse.backend_reports()[n0:] for m in r.modules],
                                   lambda: cf(*args, **kwargs), a.iters)
                torch._dynamo.reset()
                cfi = torch.compile(m0, backend=comfuse.inductor_backend)
                t_cfi = time_ms(lambda: cfi(*args, **kwargs), a.iters)
                print("%-22s %9.4f %9.4f %9.4f %9.4f" % (label, eager, t_ind, t_cf, t_cfi))
                print("    comfuse backend: %d fused calls, %d fallback calls %s"
                      % (s1["fused_calls"] - s0["fused_calls"], s1["fallback_calls"] - s0["fallback_calls"],
                         s1["fallback_reasons"]))
                for line in regions:
                    print("    " + line)
                print("\n".join(rows))
    print("stats: %s" % comfuse.stats())


if __name__ == "__main__":
    main()
