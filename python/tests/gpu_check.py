#!/usr/bin/env python3
"""The PyTorch frontend on a GPU, end to end (run on the H200 after `make`):

    python3 python/tests/gpu_check.py [--small] [--inductor]

1. A BERT layer and a LLaMA decoder layer built by `transformers` from config objects
   with random weights (nothing downloaded), through torch.compile(backend=comfuse.backend)
   at two batch sizes of one M bucket: outputs against eager bf16 (both measured against
   the same layer in float32), the regions fused, and no NVRTC compile for the second size.
   The LLaMA layer's gate_proj and up_proj must fuse as one dual GEMM (with SiLU * product).
2. The plain-PyTorch layers (Linear->bias->LayerNorm, Linear->GELU, projection->softmax,
   residual+RMSNorm) through comfuse.fuse and the backend.
3. LLaMA's MLP, down(act(gate(x)) * up(x)) in nn.Linear (SwiGLU; GeGLU, tanh form, with
   biases; f16), through comfuse.fuse and the backend at two batch sizes: gate and up as one
   dual-GEMM region, fused, outputs against eager within bf16 tolerance.
Prints one line per region (the log) and comfuse.stats(); exits 1 on any failure.
"""
import argparse
import logging
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import comfuse  # noqa: E402
import layers  # noqa: E402

failures = []
DEV = "cuda"


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def check(name, got, eager16, ref32):
    """got must be as close to float32 as eager bf16 is, within a bf16 step."""
    e_fused, e_eager = rel(got, ref32), rel(eager16, ref32)
    ok = e_fused <= 2 * e_eager + 5e-3 and rel(got, eager16) < 3e-2
    print("  %-40s vs fp32: fused %.2e  eager %.2e   fused vs eager %.2e  %s"
          % (name, e_fused, e_eager, rel(got, eager16), "ok" if ok else "FAIL"))
    if not ok:
        failures.append(name)


def fused_lines(reports):
    return [l for r in reports for l in r.lines() if ": fused" in l]


def run_model(name, make, inputs_for, batches, min_fused, be=None, want_dual=False):
    be = be or comfuse.backend
    print("== %s (%s)" % (name, be.__name__))
    torch.manual_seed(0)
    model = make().eval()
    ref = make().eval()
    ref.load_state_dict(model.state_dict())
    model = model.to(DEV, torch.bfloat16)
    ref = ref.to(DEV, torch.float32)
    torch._dynamo.reset()
    n0 = len(comfuse.backend_reports())
    compiled = torch.compile(model, backend=be)
    compiles = []
    with torch.no_grad():
        for b in batches:
            args, kwargs = inputs_for(b, torch.bfloat16)
            args32 = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            kw32 = {k: (tuple(t.float() for t in v) if isinstance(v, tuple) else v) for k, v in kwargs.items()}
            s0 = comfuse.stats()
            got = first(compiled(*args, **kwargs))
            compiles.append(comfuse.stats()["compiles"] - s0["compiles"])
            check("%s batch %d" % (name, b), got, first(model(*args, **kwargs)), first(ref(*args32, **kw32)))
    lines = fused_lines(comfuse.backend_reports()[n0:])
    for r in comfuse.backend_reports()[n0:]:
        for l in r.lines():
            print("  " + l)
    print("  NVRTC compiles per batch size: %s" % compiles)
    if len({l.split(":")[0] for l in lines}) < min_fused:
        failures.append("%s: fewer than %d fused regions" % (name, min_fused))
    if compiles[-1] != 0:
        failures.append("%s: the second batch size compiled %d kernels" % (name, compiles[-1]))
    if want_dual and not any("dual GEMM: gate_proj, up_proj" in l for l in lines):
        failures.append("%s: gate_proj and up_proj not fused as a dual GEMM" % name)


def bert(small):
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer
    h, inter, heads = (256, 1024, 4) if small else (768, 3072, 12)
    cfg = BertConfig(hidden_size=h, intermediate_size=inter, num_attention_heads=heads)
    cfg._attn_implementation = "sdpa"
    seq = 128

    def inputs(b, dt):
        return (torch.randn(b, seq, h, device=DEV, dtype=dt),), {}
    return lambda: BertLayer(cfg), inputs


def llama(small):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    h, inter, heads, kv = (256, 704, 4, 2) if small else (1024, 2816, 16, 4)
    cfg = LlamaConfig(hidden_size=h, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv, num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    rope = LlamaRotaryEmbedding(cfg).to(DEV)
    seq = 128

    def inputs(b, dt):
        x = torch.randn(b, seq, h, device=DEV, dtype=dt)
        pos = torch.arange(seq, device=DEV)[None].expand(b, seq)
        cos, sin = rope(x.float(), pos)
        return (x,), {"position_embeddings": (cos.to(dt), sin.to(dt)), "position_ids": pos}
    return lambda: LlamaDecoderLayer(cfg, 0), inputs


def plain_layers(small):
    print("== plain PyTorch layers (fuse and backend)")
    k, n = (256, 512) if small else (1024, 1024)
    for name in sorted(layers.PLAIN):
        torch.manual_seed(0)
        m32 = layers.PLAIN[name](k, n).to(DEV).eval()
        m16 = layers.PLAIN[name](k, n).to(DEV).eval()
        m16.load_state_dict(m32.state_dict())
        m16 = m16.to(torch.bfloat16)
        f = comfuse.fuse(m16)
        c = torch.compile(m16, backend=comfuse.backend)
        with torch.no_grad():
            for lead in ((8, 512), (3000,)):
                args = layers.inputs_for(name, lead, k, n, torch.bfloat16, DEV)
                want16, want32 = first(m16(*args)), first(m32(*[a.float() for a in args]))
                check("%s fuse %s" % (name, lead), first(f(*args)), want16, want32)
                check("%s backend %s" % (name, lead), first(c(*args)), want16, want32)
        for line in f.report.lines():
            print("  " + line)
            if ": fused" not in line:
                failures.append("%s not fused" % name)


def gated_mlps(small):
    """LLaMA's MLP: the dual-GEMM region (gate and up over one X) fused and right, at two
    batch sizes, through comfuse.fuse and comfuse.backend."""
    print("== gated MLPs (dual GEMM: gate_proj, up_proj)")
    k, n = (256, 704) if small else (4096, 11008)         # LLaMA-7B's MLP at full size
    cases = [("swiglu", "silu", False, torch.bfloat16), ("geglu_tanh bias", "gelu_tanh", True, torch.bfloat16),
             ("swiglu f16", "silu", False, torch.float16)]
    for name, act, bias, dt in cases:
        torch.manual_seed(0)
        m32 = layers.GatedMLP(k, n, act=act, bias=bias).to(DEV).eval()
        m16 = layers.GatedMLP(k, n, act=act, bias=bias).to(DEV).eval()
        m16.load_state_dict(m32.state_dict())
        m16 = m16.to(dt)
        f = comfuse.fuse(m16)
        torch._dynamo.reset()
        n0 = len(comfuse.backend_reports())
        c = torch.compile(m16, backend=comfuse.backend)
        with torch.no_grad():
            for lead in ((2, 128), (16, 128)):               # M = 256 and 2048
                x = torch.randn(*lead, k, device=DEV, dtype=dt)
                want16, want32 = m16(x), m32(x.float())
                check("%s fuse %s" % (name, lead), f(x), want16, want32)
                check("%s backend %s" % (name, lead), c(x), want16, want32)
                duals = [m for m in f.regions() if m.dual]
                if len(duals) != 1 or duals[0].last != "fused":
                    failures.append("%s %s: dual region not fused (%s)" % (name, lead,
                                                                          duals[0].last if duals else "none"))
        for line in f.report.lines() + [l for r in comfuse.backend_reports()[n0:] for l in r.lines()]:
            print("  " + line)
        if not any("dual GEMM: gate_proj, up_proj" in l and ": fused" in l
                   for r in comfuse.backend_reports()[n0:] for l in r.lines()):
            failures.append("%s backend: no fused dual GEMM" % name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true", help="tiny layers (quick)")
    ap.add_argument("--inductor", action="store_true",
                    help="the models also through comfuse.inductor_backend (Triton compiles: slower)")
    ap.add_argument("--compile-only", action="store_true",
                    help="no GPU: trace everything on the CPU and NVRTC-compile every region's kernels "
                         "into $CF_CACHE_DIR (carry it to the GPU machine)")
    ap.add_argument("--dry-run-cpu", action="store_true",
                    help="exercise the script on the CPU (everything falls back; for its own testing)")
    a = ap.parse_args()
    global DEV
    if a.dry_run_cpu or a.compile_only:
        DEV = "cpu"
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if DEV == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU")
        return 1
    print("comfuse %s, library %s, torch %s, %s" % (comfuse.__version__, comfuse.library_path(), torch.__version__,
                                                  torch.cuda.get_device_name() if DEV == "cuda" else "CPU"))
    make, inputs = bert(a.small)
    run_model("BERT layer", make, inputs, (4, 12), 3)
    make, inputs = llama(a.small)
    run_model("LLaMA decoder layer", make, inputs, (4, 12), 3, want_dual=True)
    if a.inductor:
        make, inputs = bert(a.small)
        run_model("BERT layer", make, inputs, (4, 12), 3, comfuse.inductor_backend)
        make, inputs = llama(a.small)
        run_model("LLaMA decoder layer", make, inputs, (4, 12), 3, comfuse.inductor_backend, want_dual=True)
    plain_layers(a.small)
    gated_mlps(a.small)
    if a.compile_only:
        n = comfuse.warmup_all()
        print("gpu_check --compile-only: %d regions, %s" % (n, comfuse.stats()))
        return 0
    s = comfuse.stats()
    print("stats: %s" % s)
    print("gpu_check: %s" % ("all ok" if not failures else "FAILED: %s" % "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
