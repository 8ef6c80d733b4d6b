"""Execution on a CUDA GPU (sm_90a): fused kernels against PyTorch.  Skipped without one;
the lead runs these on the H200 (see python/tests/gpu_check.py for the model-level check)."""
import pytest
import torch

import comfuse
import layers

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", sorted(layers.PLAIN))
def test_plain_layer_fused_matches_eager(name, dtype):
    torch.manual_seed(0)
    k, n = 512, 1024
    mod = layers.PLAIN[name](k, n).to("cuda", dtype).eval()
    f = comfuse.fuse(mod)
    with torch.no_grad():
        for lead in ((4, 96), (1000,)):                  # two M, two buckets
            args = layers.inputs_for(name, lead, k, n, dtype, "cuda")
            got = _as_tuple(f(*args))
            (m,) = f.regions()
            assert m.last == "fused", m.last
            # the region's own ops in float32 on the same inputs: the fused kernel's math
            want = _as_tuple(m.fallback(*[a.float() for a in _region_args(f, args)]))
            for g, w in zip(got, want):
                assert g.dtype == dtype and g.shape == w.shape
                assert _rel(g, w) < 1e-2, (name, lead, _rel(g, w))


def _region_args(f, args):
    """The fused region's own inputs for this call (captured by a forward hook)."""
    seen = []
    (m,) = f.regions()
    h = m.register_forward_hook(lambda mod, i, o: seen.append(i))
    f(*args)
    h.remove()
    return seen[0]


def test_launch_uses_the_current_stream_without_sync():
    torch.manual_seed(0)
    mod = layers.LinearGELU(256, 512).to("cuda", torch.bfloat16).eval()
    f = comfuse.fuse(mod)
    x = torch.randn(4096, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = f(x).clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.cuda._sleep(50_000_000)               # the launch queues behind this
            y = f(x)
        assert not s.query()                            # nothing waited for the GPU
        torch.cuda.current_stream().wait_stream(s)
        assert torch.equal(y, ref)


def test_cuda_graph_capture():
    torch.manual_seed(0)
    mod = layers.LinearBiasLN(256, 512).to("cuda", torch.bfloat16).eval()
    f = comfuse.fuse(mod)
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        f(x)                                            # warm: compiled, loaded, slots allocated
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = f(x)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert f.regions()[0].last == "fused"
        assert _rel(y, mod(x)) < 1e-2


def test_l2_exchange_across_m_and_graph_replays():
    """A row of 4096 reduces through L2, in slots tagged with the launch epoch (a LayerNorm's
    pair tag comes round every 255 launches).  M shrinking and growing within one bucket (its
    slots sized once for the bucket, no sync) and replays of a graph captured at one M, mixed
    over more than 255 launches, all match eager: no launch takes a stale slot for its own."""
    torch.manual_seed(0)
    mod = layers.LinearBiasLN(512, 4096).to("cuda", torch.bfloat16).eval()
    f = comfuse.fuse(mod)
    ms = (2100, 4096, 2500, 3000, 2200)                 # one bucket (2049..4096)
    xs = {m: torch.randn(m, 512, device="cuda", dtype=torch.bfloat16) for m in ms}
    with torch.no_grad():
        want = {m: mod(x) for m, x in xs.items()}
        f(xs[2100])                                     # warm: compiled, loaded, slots allocated
        (region,) = f.regions()
        assert region.last == "fused", region.last
        assert region._kern[4096].resources()["reduce_mode"] == 3   # CF_REDUCE_GLOBAL
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = f(xs[2500])
        gen = torch.Generator().manual_seed(1)
        for i in range(600):
            if i % 5 == 2:
                g.replay()
                assert _rel(yg, want[2500]) < 1e-2, i
                continue
            m = ms[int(torch.randint(len(ms), (1,), generator=gen))]
            assert _rel(f(xs[m]), want[m]) < 1e-2, (i, m)
        assert region.last == "fused", region.last


def test_backend_two_batch_sizes_and_cache():
    torch.manual_seed(0)
    mod = layers.ResidualRMSNorm(512, 1024).to("cuda", torch.bfloat16).eval()
    c = torch.compile(mod, backend=comfuse.backend)
    with torch.no_grad():
        for b in (8, 24, 40):
            x = torch.randn(b, 16, 512, device="cuda", dtype=torch.bfloat16)
            r = torch.randn(b, 16, 1024, device="cuda", dtype=torch.bfloat16)
            for g, w in zip(c(x, r), mod(x, r)):
                assert _rel(g, w) < 1e-2
        before = comfuse.stats()
        c(x, r)
        after = comfuse.stats()
    assert after["compiles"] == before["compiles"] and after["fused_calls"] > before["fused_calls"]
    assert any("fused" in l for rep in comfuse.backend_reports() for l in rep.lines())


def test_misaligned_operand_falls_back():
    mod = layers.LinearGELU(256, 512).to("cuda", torch.bfloat16).eval()
    f = comfuse.fuse(mod)
    buf = torch.randn(64 * 256 + 1, device="cuda", dtype=torch.bfloat16)
    x = buf[1:].view(64, 256)                              # 2-byte offset: TMA cannot read it
    with torch.no_grad():
        y = f(x)
        assert "16-byte aligned" in f.regions()[0].last
        assert torch.equal(y, mod(x))


def test_inductor_backend_fuses_on_the_gpu():
    torch.manual_seed(0)
    mod = layers.LinearBiasLN(512, 1024).to("cuda", torch.bfloat16).eval()
    torch._dynamo.reset()
    n0 = len(comfuse.backend_reports())
    c = torch.compile(mod, backend=comfuse.inductor_backend)
    with torch.no_grad():
        for b in (64, 200):
            x = torch.randn(b, 16, 512, device="cuda", dtype=torch.bfloat16)
            assert _rel(c(x), mod(x)) < 1e-2
    mods = [m for r in comfuse.backend_reports()[n0:] for m in r.modules]
    assert mods and all(m.last == "fused" for m in mods)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act,bias", [("silu", False), ("gelu", True), ("gelu_tanh", False)])
def test_gated_mlp_dual_region_matches_eager(act, bias, dtype):
    """LLaMA's MLP: gate_proj and up_proj as one dual-GEMM region (X loaded once for both
    weights), fused at two M (two buckets); its outputs against the region's own ops in
    float32, and the whole MLP against eager."""
    torch.manual_seed(0)
    k, n = 1024, 2816
    mod = layers.GatedMLP(k, n, act=act, bias=bias).to("cuda", dtype).eval()
    f = comfuse.fuse(mod)
    with torch.no_grad():
        for lead in ((2, 100), (8, 512)):
            x = torch.randn(*lead, k, device="cuda", dtype=dtype)
            y = f(x)
            (m,) = [r for r in f.regions() if r.dual]
            assert m.last == "fused", m.last
            assert m.dual == ["gate_proj", "up_proj"]
            rargs = _dual_args(f, x)
            (got,) = m(*rargs)
            (want,) = m.fallback(*[a.float() for a in rargs])
            assert got.dtype == dtype and _rel(got, want) < 1e-2, (lead, _rel(got, want))
            assert _rel(y, mod(x)) < 2e-2


def _dual_args(f, x):
    seen = []
    (m,) = [r for r in f.regions() if r.dual]
    h = m.register_forward_hook(lambda mod, i, o: seen.append(i))
    f(x)
    h.remove()
    return seen[0]


def test_operand_order_gets_its_own_kernel():
    """h - r and r - h in one process: before the recipe named operands, both regions keyed
    the kernel cache alike and the second ran the first's kernel (a wrong sign)."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    w = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(300, 256, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(300, 512, device="cuda", dtype=torch.bfloat16)
    fa = comfuse.fuse(lambda x, w, r: F.linear(x, w) - r)
    fb = comfuse.fuse(lambda x, w, r: r - F.linear(x, w))
    with torch.no_grad():
        ya, yb = fa(x, w, r), fb(x, w, r)
    assert fa.regions()[0].last == "fused" and fb.regions()[0].last == "fused"
    assert _rel(ya, F.linear(x, w) - r) < 1e-2 and _rel(yb, r - F.linear(x, w)) < 1e-2


def test_vocabulary_rows_at_several_m():
    """A vocabulary head's log-softmax (rows wider than a row group: the GEMM into f32, a cuBLASLt
    plan for each M over the kernel's one workspace, then the row kernel split over a cluster of
    CTAs while rows are few), at three M in one process, against float32."""
    import torch.nn.functional as F
    torch.manual_seed(0)
    k, n = 512, 32000
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    f = comfuse.fuse(lambda x, w: F.log_softmax(F.linear(x, w), dim=-1))
    with torch.no_grad():
        for m in (64, 80, 700):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            got = f(x, w)
            assert f.regions()[0].last == "fused", f.regions()[0].last
            want = F.log_softmax(F.linear(x.float(), w.float()), dim=-1)
            assert got.shape == (m, n) and _rel(got, want) < 1e-2, (m, _rel(got, want))
