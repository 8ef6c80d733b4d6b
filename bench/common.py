"""What bench/compare.py and bench/grid.py share: the PyTorch versions of the
examples/*.cf workloads (for eager and torch.compile), the GPU timer, and
running and parsing `comfuse bench`.

Importable without torch (the grid's cell table and its JSON/plot writing are
tested on CPU machines); the functions that need torch need it only when called.
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the GPU image has torch
    torch = F = None

try:
    from triton.testing import do_bench
except ImportError:  # pragma: no cover - the GPU image has triton
    do_bench = None


# Each takes (x, w, b, g, be) like compare.py always did; the workloads with a
# full [M, N] residual input take it as a sixth argument r (see RESIDUAL).
def gemm(x, w, b, g, be):
    return x @ w


def gemm_bias_gelu(x, w, b, g, be):
    return F.gelu(x @ w + b, approximate="tanh").to(torch.bfloat16)


def gemm_bias_gelu_erf(x, w, b, g, be):
    return F.gelu(x @ w + b).to(torch.bfloat16)


def gemm_bias_ln(x, w, b, g, be):
    y = 0.5 * (x @ w).float() + b
    return F.layer_norm(y, (y.shape[-1],), g, be, eps=1e-5).to(torch.bfloat16)


def gemm_rmsnorm(x, w, b, g, be):
    y = (x @ w).float()
    return (y * torch.rsqrt(y.square().mean(-1, keepdim=True) + 1e-6) * g).to(torch.bfloat16)


def gemm_softmax(x, w, b, g, be):
    return torch.softmax(0.125 * (x @ w).float(), dim=-1).to(torch.bfloat16)


def gemm_ln_softmax(x, w, b, g, be):
    y = F.layer_norm((x @ w).float() + b, (w.shape[1],), g, be, eps=1e-5)
    return torch.softmax(0.5 * y, dim=-1).to(torch.bfloat16)


def gemm_residual_ln(x, w, b, g, be, r):
    """examples/gemm_residual_ln.cf: LayerNorm(X @ W + bias + R)."""
    h = (x @ w).float() + b + r.float()
    return F.layer_norm(h, (h.shape[-1],), g, be, eps=1e-5).to(torch.bfloat16)


def gemm_rmsnorm_res2(x, w, b, g, be, r):
    """examples/gemm_rmsnorm_res2.cf: H = X @ W + R and RMSNorm(H), both stored."""
    h = (x @ w).float() + r.float()
    y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * g
    return h.to(torch.bfloat16), y.to(torch.bfloat16)


def swiglu(x, w, b, g, be, w2):
    """examples/swiglu.cf: silu(X @ Wg) * (X @ Wu), two GEMMs over one X (the gated MLP)."""
    return F.silu(x @ w) * (x @ w2)


WORKLOADS = {f.__name__: f for f in (gemm, gemm_bias_gelu, gemm_bias_gelu_erf, gemm_bias_ln, gemm_rmsnorm,
                                     gemm_softmax, gemm_ln_softmax)}
# Workloads with a residual R: bf16[M, N] input; torch versions take it as r.
RESIDUAL = {f.__name__: f for f in (gemm_residual_ln, gemm_rmsnorm_res2)}
# Dual GEMMs: a second weight W2 [K, N] over the same X; torch versions take it as w2, and their
# cuBLAS baseline is one GEMM over both weights side by side ([K, 2N]), as `comfuse bench`'s.
DUAL = {f.__name__: f for f in (swiglu,)}
ALL_WORKLOADS = {**WORKLOADS, **RESIDUAL, **DUAL}


def time_ms(fn):
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=100, return_mode="median")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        fn()
    times = []
    for _ in range(50):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


FLUSH_BYTES = 256 << 20   # over five times the H200's 50 MB L2, as `comfuse bench` and do_bench flush


def graph_ms(fn, reps=20, turns=10):
    """fn's GPU time per call with its host work taken out, from a cold L2 as every other
    column is timed: reps of (an L2 flush, fn) captured in one CUDA graph (after warm-up on a
    side stream), the graph replayed turns times, less the same graph of flushes alone; the
    median.  (Without the flush a replay reads weights that fit in L2 from L2, and beats any
    flushed figure at small M.)"""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)

    def capture(with_fn):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps):
                flush.zero_()
                if with_fn:
                    fn()
        g.replay()
        return g

    graphs = (capture(True), capture(False))
    torch.cuda.synchronize()
    times = []
    for _ in range(turns):
        t = []
        for g in graphs:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            t.append(a.elapsed_time(b))
        times.append((t[0] - t[1]) / reps)
    return sorted(times)[len(times) // 2]


BENCH_FIELDS = ("fused_ms", "cublaslt_ms", "floor_ms", "unfused_ms", "fused_over_cublaslt", "unfused_over_cublaslt",
                "predicted_ms")


def parse_bench(stdout):
    """The BENCH line of `comfuse bench` as a dict of BENCH_FIELDS (None where '-'
    or absent), or None when there is no BENCH line."""
    def num(s):
        try:
            v = float(s)
        except ValueError:
            return None
        return v if v > 0 else None
    for line in stdout.splitlines():
        if line.startswith("BENCH\t"):
            vals = [num(v) for v in line.split("\t")[3:]]
            vals += [None] * (len(BENCH_FIELDS) - len(vals))
            return dict(zip(BENCH_FIELDS, vals))
    return None


# A layout: "kn", W given as [K, N] (x @ w, GPT-2's Conv1D), or "nk", as [N, K] (nn.Linear's weight).
_W_KN = re.compile(r"^input (W\w*): (bf16|f16)\[K, (N[0-9]*)\]", re.M)


def nk_spec_text(text):
    """An example spec with its weights declared [N, K] (as scripts/gpu-check's variants)."""
    return _W_KN.sub(r"input \1: \2[\3, K]", text)


def spec_path(root, name, layout="kn"):
    """examples/NAME.cf, or for layout "nk" its [N, K] variant, written under build/specs-nk."""
    path = os.path.join(root, "examples", name + ".cf")
    if layout == "kn":
        return path
    out = os.path.join(root, "build", "specs-nk", name + ".cf")
    with open(path) as f:
        text = nk_spec_text(f.read())
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if not os.path.exists(out) or open(out).read() != text:
        # a name of its own per writer: the grid's compile threads share one pid
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), prefix=name + ".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, out)      # concurrent writers of the same text: either wins whole
    return out


def with_layout(fn, layout):
    """fn taking its weights as [N, K] tensors (nn.Linear's), each used through .t() as the
    workload's x @ w does: the traced graph reads a contiguous [N, K] weight, as a model's."""
    if layout == "kn":
        return fn
    # one signature per kind, not *rest: a weight reached through a varargs tuple is traced as
    # a getitem, which Φ's dual-GEMM match does not take for an input
    if fn.__name__ in DUAL:
        def nk(x, w, b, g, be, w2):
            return fn(x, w.t(), b, g, be, w2.t())
    elif fn.__name__ in RESIDUAL:
        def nk(x, w, b, g, be, r):
            return fn(x, w.t(), b, g, be, r)
    else:
        def nk(x, w, b, g, be):
            return fn(x, w.t(), b, g, be)
    nk.__name__ = fn.__name__ + "_nk"
    return nk


def shape_arg(m, n, k):
    return f"M={m},N={n},K={k}"


def run_bench(root, binary, extra, name, m, n, k, iters=100, timeout=300, layout="kn"):
    """One `comfuse bench`: (dict of BENCH_FIELDS or None, the command's output)."""
    cmd = [binary, "bench", "--iters", str(iters), "--shape", shape_arg(m, n, k), *extra,
           spec_path(root, name, layout)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s: {' '.join(cmd)}\n"
    return parse_bench(out.stdout), out.stdout + out.stderr


def comfuse_bench(root, binary, extra, name, m, n, k):
    """Returns (fused, cublas, floor, unfused) in ms from one `comfuse bench`; None where absent."""
    vals, log = run_bench(root, binary, extra, name, m, n, k)
    if vals is None:
        sys.stderr.write(f"comfuse bench {name} {m}x{n}x{k} failed:\n{log}\n")
        return None, None, None, None
    return vals["fused_ms"], vals["cublaslt_ms"], vals["floor_ms"], vals["unfused_ms"]
