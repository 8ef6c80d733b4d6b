"""Tracing, region matching and lowering on the CPU, and the translation checked
numerically: each region's cf_graph, run by the C float64 reference, against PyTorch
running the same region in float64."""
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import comfuse
import layers
from comfuse import region as R

torch.manual_seed(0)
BF = torch.bfloat16


def _fused(fn, *args):
    f = comfuse.fuse(fn)
    lines = comfuse.explain(f, *args)
    return f, lines


def _check_reference(f, args, rtol=2e-3):
    """Every fused region: C reference of its cf_graph == its PyTorch sub-graph in f64."""
    assert f.regions(), "no fused region"
    seen = {}

    def hook(mod, inputs, outputs):
        seen[mod] = inputs
    handles = [m.register_forward_hook(hook) for m in f.regions()]
    f(*args)
    for h in handles:
        h.remove()
    for m, inputs in seen.items():
        ref = m.reference(*inputs)
        want = m.fallback(*[a.double() if torch.is_tensor(a) else a for a in inputs])
        assert len(ref) == len(want)
        for r, w in zip(ref, want):
            assert r.shape == w.shape
            err = (r - w.double()).norm() / w.double().norm()
            assert err < rtol, "%s: relative error %.2e" % (m.label, err)
    return seen


@pytest.mark.parametrize("dtype", [BF, torch.float16])
@pytest.mark.parametrize("name", sorted(layers.PLAIN))
def test_plain_layers_fuse_and_match_reference(name, dtype):
    k, n = 64, 128
    mod = layers.PLAIN[name](k, n).to(dtype).eval()
    args = layers.inputs_for(name, (2, 8), k, n, dtype, "cpu")
    with torch.no_grad():
        f, lines = _fused(mod, *args)
        assert len(lines) == 1 and "fell back at run time: CPU tensors" in lines[0], lines
        _check_reference(f, args)
        # the fallback on CPU is PyTorch itself: bit-identical to eager
        got, want = f(*args), mod(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.equal(g, w)


EXPECT = {
    "linear_bias_ln": ("linear->add->layer_norm", 1),
    "linear_gelu": ("linear->gelu_erf", 1),
    "proj_softmax": ("matmul->mul->softmax", 1),
    "residual_rmsnorm": ("linear->add->identity->pow->mean->add->rsqrt->mul->identity->mul", 2),
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_region_matching(name):
    k, n = 64, 128
    mod = layers.PLAIN[name](k, n).to(BF).eval()
    args = layers.inputs_for(name, (3, 5), k, n, BF, "cpu")
    with torch.no_grad():
        f, _ = _fused(mod, *args)
    (m,) = f.regions()
    label, n_out = EXPECT[name]
    assert m.label == label
    assert len(m.out_cls) == n_out
    assert m.N == n and m.K == k


class Custom(nn.Module):
    def __init__(self, fn, k=64, n=128, dtype=BF, bias=True):
        super().__init__()
        self.lin = nn.Linear(k, n, bias=bias).to(dtype)
        self.fn = fn

    def forward(self, x, u):
        return self.fn(self, x, u)


EPILOGUES = {
    "gelu_tanh": lambda s, x, u: F.gelu(s.lin(x), approximate="tanh"),
    "silu_mul": lambda s, x, u: F.silu(s.lin(x)) * u,
    "relu_sigmoid_tanh": lambda s, x, u: torch.tanh(torch.relu(s.lin(x))) + torch.sigmoid(s.lin(x)),
    "log_softmax": lambda s, x, u: F.log_softmax(s.lin(x), dim=-1),
    "softmax_method": lambda s, x, u: s.lin(x).softmax(-1),
    "stats": lambda s, x, u: (s.lin(x).mean(-1, keepdim=True), s.lin(x).sum(dim=-1), torch.amax(s.lin(x), dim=-1)),
    "hand_softmax": lambda s, x, u: (lambda h: torch.exp(h - h.amax(-1, keepdim=True)) /
                                  torch.exp(h - h.amax(-1, keepdim=True)).sum(-1, keepdim=True))(s.lin(x)),
    "hand_layernorm": lambda s, x, u: layers.HandLayerNorm.forward(s.hl, x),
    "casts": lambda s, x, u: F.layer_norm(s.lin(x).float(), (128,)).to(BF),
    "clamp_div_pow": lambda s, x, u: torch.clamp(1.0 / (s.lin(x) ** 2 + 1.0), min=0.1, max=0.9) - 2 * s.lin(x),
    "rms_norm_fn": lambda s, x, u: F.rms_norm(s.lin(x), (128,), s.w, 1e-6),
    "matmul_t": lambda s, x, u: torch.sigmoid(x @ s.lin.weight.t()),
    "dropout_eval": lambda s, x, u: F.dropout(s.lin(x), 0.1, training=False) * 3,
    "sub_alpha_rsub": lambda s, x, u: torch.sub(s.lin(x), 1.5, alpha=2) + (1 - s.lin(x)),
}


def _extra(name, k=64, n=128):
    return (torch.randn(4, n, dtype=BF),)


@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_epilogue_translation(name):
    mod = Custom(EPILOGUES[name]).eval()
    mod.hl = layers.HandLayerNorm(64, 128).to(BF)
    mod.w = nn.Parameter(torch.rand(128, dtype=BF) + 0.5)
    x = torch.randn(4, 64, dtype=BF)
    args = (x,) + _extra(name)
    with torch.no_grad():
        f, lines = _fused(mod, *args)
        assert any("fell back at run time: CPU" in l for l in lines), lines
        _check_reference(f, args, rtol=5e-3)


def test_outputs_with_other_consumers():
    def fn(x, w, b, r):
        h = F.linear(x, w, b)            # read by the region and outside it
        y = F.layer_norm(h + r, (128,))
        return y, torch.cumsum(h, -1)    # cumsum is outside the domain
    args = (torch.randn(6, 64, dtype=BF), torch.randn(128, 64, dtype=BF), torch.randn(128, dtype=BF),
            torch.randn(6, 128, dtype=BF))
    f, lines = _fused(fn, *args)
    (m,) = f.regions()
    assert len(m.out_cls) == 2 and "fell back at run time" in lines[0]
    _check_reference(f, args)
    got, want = f(*args), fn(*args)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("form", ["shape", "size", "size_all", "weight", "tail", "gamma"])
def test_shape_queries_are_metadata(form):
    """F.layer_norm(h, (h.shape[-1],)) reads h's shape, not its values: the region goes on through
    the norm, h is not an output, and a query used after the region is answered from X and W
    (the fallback at another N too)."""
    def fn(x, w, g, b):
        h = x @ w
        shp = {"shape": lambda: (h.shape[-1],), "size": lambda: (h.size(-1),), "size_all": lambda: (h.size()[1],),
               "weight": lambda: (w.shape[1],), "tail": lambda: h.shape[-1:], "gamma": lambda: g.shape}[form]()
        y = F.layer_norm(h, shp, g, b)
        return y, x.new_zeros(h.shape[0] if form not in ("weight", "gamma") else 1)   # a query after the region
    args = (torch.randn(6, 64, dtype=BF), torch.randn(64, 128, dtype=BF), torch.rand(128) + 0.5, torch.randn(128))
    f, lines = _fused(fn, *args)
    (m,) = f.regions()
    assert m.label == "matmul->layer_norm", lines
    assert len(m.out_cls) == 1                 # h is not stored for its shape
    _check_reference(f, args)
    for a in (args, (args[0], torch.randn(64, 256, dtype=BF), torch.rand(256) + 0.5, torch.randn(256))):
        got, want = f(*a), fn(*a)
        assert all(torch.equal(u, v) for u, v in zip(got, want))


def test_shape_of_the_transposed_weight_is_metadata():
    """x @ w.t() with F.layer_norm(h, (w.t().shape[1],)): the transpose the matmul reads is the
    weight's view, its dims the weight's (fixed by the kernel's key), so the norm joins the region."""
    def fn(x, w, g, b):
        wt = w.t()
        return F.layer_norm(x @ wt, (wt.shape[1],), g, b)
    args = (torch.randn(6, 64, dtype=BF), torch.randn(128, 64, dtype=BF), torch.rand(128) + 0.5, torch.randn(128))
    f, lines = _fused(fn, *args)
    (m,) = f.regions()
    assert m.label == "linear->layer_norm", lines   # x @ w.t() is a linear
    _check_reference(f, args)
    assert torch.equal(f(*args), fn(*args))


def test_residual_of_the_gemm_input():
    """x + linear(x): x is both the GEMM's X and the residual tile (two cf inputs, one pointer)."""
    lin = nn.Linear(128, 128).to(BF)

    def fn(x):
        return F.layer_norm(x + lin(x), (128,))
    x = torch.randn(2, 5, 128, dtype=BF)
    with torch.no_grad():
        f, lines = _fused(fn, x)
        (m,) = f.regions()
        assert m.label == "linear->add->layer_norm" and m.in_cls[0] == "X" and m.in_cls[-1] == "tile"
        _check_reference(f, (x,))
        assert torch.equal(f(x), fn(x))


@pytest.mark.parametrize("cast", ["float", "to", "half"])
def test_widening_cast_of_an_input_is_read_narrow(cast):
    """(x @ w).float() + r.float(): the kernel reads the bf16 residual and widens it as it loads it;
    no f32 copy of r is made first, and the cast left unused is gone from the graph.  A rounding
    cast (bf16 to f16, f32 to bf16) stays a PyTorch op, and the kernel reads its result."""
    def fn(x, w, r, q):
        h = (x @ w).float()
        rr = {"float": lambda: r.float(), "to": lambda: r.to(torch.float32), "half": lambda: r.half().float()}[cast]()
        return F.layer_norm(h + rr + q.to(BF), (128,)).to(BF)
    args = (torch.randn(6, 64, dtype=BF), torch.randn(64, 128, dtype=BF), torch.randn(6, 128, dtype=BF),
            torch.randn(6, 128))
    f, lines = _fused(fn, *args)
    (m,) = f.regions()
    r_dt = torch.float16 if cast == "half" else BF
    assert m.in_dt[2:] == [r_dt, BF] and m.in_cls[2:] == ["tile", "tile"], (m.in_dt, m.in_cls)
    code = f.gm.code
    assert "float()" not in code and "float32" not in code, code
    assert "to(torch.bfloat16)" in code and ("half()" in code) == (cast == "half"), code
    _check_reference(f, args)
    assert torch.equal(f(*args), fn(*args))


def test_odd_vocabulary_fuses():
    """GPT-2's 50257 columns (rows not a multiple of 16 bytes) fuse: the C runtime pads what TMA
    cannot address, and a row this wide takes the wide-row path there."""
    lm_head = nn.Linear(72, 1001, bias=False).to(BF)

    def fn(h):
        return torch.log_softmax(lm_head(h).float(), -1)
    h = torch.randn(3, 72, dtype=BF)
    with torch.no_grad():
        f, lines = _fused(fn, h)
        (m,) = f.regions()
        assert m.N == 1001 and "fell back at run time: CPU" in lines[0], lines
        _check_reference(f, (h,))


def test_two_regions_and_a_bare_matmul():
    """LLaMA's MLP in F.linear on weights passed in: gate and up read one X and meet in
    silu(g) * u, so both GEMMs and the combination are one dual-GEMM region; down has no
    epilogue and is left to cuBLAS."""
    def fn(x, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
    args = (torch.randn(5, 64, dtype=BF), torch.randn(128, 64, dtype=BF), torch.randn(128, 64, dtype=BF),
            torch.randn(64, 128, dtype=BF))
    f, lines = _fused(fn, *args)
    assert len(lines) == 2, lines
    assert "[linear+linear->silu->mul] (dual GEMM: wg, wu) N=128 K=64 bf16" in lines[0] and "CPU tensors" in lines[0]
    assert "bare matmul" in lines[1]
    (m,) = f.regions()
    assert m.in_cls == ["X", "W", "W2"] and len(m.out_cls) == 1
    _check_reference(f, args)
    assert torch.equal(f(*args), fn(*args))


def _dual(f):
    duals = [m for m in f.regions() if m.dual]
    assert len(duals) == 1, [m.label for m in f.regions()]
    return duals[0]


@pytest.mark.parametrize("functional", [False, True], ids=["nn.Linear", "F.linear"])
@pytest.mark.parametrize("act,label", [("silu", "silu"), ("gelu", "gelu_erf"), ("gelu_tanh", "gelu")])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
def test_gated_mlp_is_one_dual_region(act, label, functional, bias):
    """SwiGLU / GeGLU MLPs (nn.Linear's [N, K] weights, with and without biases): gate_proj and
    up_proj become one dual GEMM with the activation and the product; down_proj stays a matmul
    of its own (bare: no epilogue)."""
    torch.manual_seed(3)
    mod = layers.GatedMLP(64, 128, act=act, bias=bias, functional=functional).to(BF).eval()
    x = torch.randn(2, 5, 64, dtype=BF)
    with torch.no_grad():
        f, lines = _fused(mod, x)
        assert len(lines) == 2, lines
        assert ("[linear+linear->%s->mul] (dual GEMM: gate_proj, up_proj) N=128 K=64 bf16" % label) in lines[0], lines
        assert "bare matmul" in lines[1] and "N=64 K=128" in lines[1]
        m = _dual(f)
        assert m.in_cls == ["X", "W", "W2"] + ([R.VEC_N, R.VEC_N] if bias else [])
        assert sum(1 for e in m.recipe if e[0] == "mm") == 2
        _check_reference(f, (x,))
        assert torch.equal(f(x), mod(x))


def test_dual_region_f16_and_dynamic_m():
    """f16 operands; M changes from call to call (the dual region's tensors are checked per call)."""
    torch.manual_seed(4)
    mod = layers.GatedMLP(64, 192, bias=True).half().eval()
    f = comfuse.fuse(mod)
    with torch.no_grad():
        for lead in ((3,), (2, 7), (1, 1, 4)):
            x = torch.randn(*lead, 64, dtype=torch.float16)
            assert torch.equal(f(x), mod(x))
            m = _dual(f)
            args = (x, mod.gate_proj.weight, mod.up_proj.weight, mod.gate_proj.bias, mod.up_proj.bias)
            assert m.why_not(args).startswith("CPU tensors")
            assert "W2" in m.in_cls
        assert m.N == 192 and m.K == 64 and R.DT[m.in_dt[0]] == "f16"
        _check_reference(f, (x,))


@pytest.mark.parametrize("form", ["kn", "t"])
def test_dual_with_matmul_operator(form):
    """x @ Wg * ... with [K, N] weights, and x @ W.t() (nn.Linear's [N, K] read transposed):
    a dual GEMM in either layout; the fallback recomputes both transposes."""
    def fn(x, wg, wu):
        if form == "t":
            return F.gelu(x @ wg.t(), approximate="tanh") * (x @ wu.t())
        return F.silu(x @ wg) * (x @ wu)
    shape = (128, 64) if form == "t" else (64, 128)
    args = (torch.randn(2, 3, 64, dtype=BF), torch.randn(*shape, dtype=BF), torch.randn(*shape, dtype=BF))
    f, lines = _fused(fn, *args)
    m = _dual(f)
    # x @ w.t() reads w as nn.Linear's [N, K] (labelled linear, as for one GEMM)
    assert m.label == ("linear+linear->gelu->mul" if form == "t" else "matmul+matmul->silu->mul"), m.label
    assert m._w_shape == ((128, 64) if form == "t" else (64, 128))
    assert m.region.wt_node2 is not None if form == "t" else m.region.wt_node2 is None
    _check_reference(f, args)
    assert torch.equal(f(*args), fn(*args))


def test_dual_any_elementwise_combination():
    """f(a) (op) g(b) with an epilogue after: tanh(a) + sigmoid(b + 1) * 2, then a row RMSNorm."""
    def fn(x, wg, wu, gamma):
        a = F.linear(x, wg)
        b = F.linear(x, wu)
        h = torch.tanh(a) + torch.sigmoid(b + 1.0) * 2.0
        return F.rms_norm(h, (128,), gamma, 1e-6)
    args = (torch.randn(6, 64, dtype=BF), torch.randn(128, 64, dtype=BF) / 8, torch.randn(128, 64, dtype=BF) / 8,
            torch.rand(128, dtype=BF) + 0.5)
    f, lines = _fused(fn, *args)
    m = _dual(f)
    assert m.label == "linear+linear->tanh->add->sigmoid->mul->add->rms_norm", m.label
    _check_reference(f, args)
    assert torch.equal(f(*args), fn(*args))


def test_dual_with_rows_too_wide_keeps_the_pair_and_leaves_the_norm():
    """SwiGLU then RMSNorm over rows of 8192: a dual GEMM has no wide-row path (its row group
    holds 4096 columns), so the plan keeps the pair and the product fused and leaves the
    RMSNorm to PyTorch, saying why, rather than failing at the first launch."""
    def fn(x, wg, wu, gamma):
        h = F.silu(F.linear(x, wg)) * F.linear(x, wu)
        return F.rms_norm(h, (8192,), gamma, 1e-6)
    args = (torch.randn(4, 64, dtype=BF), torch.randn(8192, 64, dtype=BF) / 8, torch.randn(8192, 64, dtype=BF) / 8,
            torch.rand(8192, dtype=BF) + 0.5)
    f, lines = _fused(fn, *args)
    m = _dual(f)
    assert m.label == "linear+linear->silu->mul", m.label
    assert any("no wide-row path" in line for line in lines), lines
    assert torch.equal(f(*args), fn(*args))


def test_dual_when_up_proj_has_another_user():
    """up_proj's raw output is also read outside the region (a cumsum): the dual region stores
    it as a second output, and that user gets it from there."""
    def fn(x, wg, wu, wd):
        u = F.linear(x, wu)
        h = F.silu(F.linear(x, wg)) * u
        return F.linear(h, wd), torch.cumsum(u, -1)
    args = (torch.randn(5, 64, dtype=BF), torch.randn(128, 64, dtype=BF), torch.randn(128, 64, dtype=BF),
            torch.randn(64, 128, dtype=BF))
    f, lines = _fused(fn, *args)
    m = _dual(f)
    assert m.label == "linear+linear->silu->mul" and "(dual GEMM: wu, wg)" in lines[0], lines
    assert len(m.out_cls) == 2
    outs = m.region.outputs
    assert {o.name for o in outs} == {m.region.mm.name, m.region.nodes[-1].name}    # u and the product
    _check_reference(f, args)
    got, want = f(*args), fn(*args)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_different_x_is_not_dual():
    """gate reads x, up reads y: two GEMMs over different X are not a dual GEMM; gate fuses with
    silu * up's result (an [M, N] input), up and down stay bare matmuls."""
    def fn(x, y, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(y, wu), wd)
    args = (torch.randn(5, 64, dtype=BF), torch.randn(5, 64, dtype=BF), torch.randn(128, 64, dtype=BF),
            torch.randn(128, 64, dtype=BF), torch.randn(64, 128, dtype=BF))
    f, lines = _fused(fn, *args)
    assert all("dual" not in l for l in lines), lines
    (m,) = f.regions()
    assert m.label == "linear->silu->mul" and m.dual is None and "W2" not in m.in_cls
    assert sum("bare matmul" in l for l in lines) == 2
    assert torch.equal(f(*args), fn(*args))


def test_dual_declined_with_a_reason():
    """x @ Wg ([K, N]) beside F.linear(x, Wu) ([N, K]): the C library's dual GEMM takes one
    weight layout, so gate fuses alone and the line says why there is no dual GEMM."""
    def fn(x, wg, wu):
        return F.silu(x @ wg) * F.linear(x, wu)
    args = (torch.randn(5, 64, dtype=BF), torch.randn(64, 128, dtype=BF), torch.randn(128, 64, dtype=BF))
    f, lines = _fused(fn, *args)
    assert "[matmul->silu->mul]" in lines[0] and "no dual GEMM with 'wu'" in lines[0] \
        and "different layouts" in lines[0], lines
    assert torch.equal(f(*args), fn(*args))


def test_repeated_linear_is_read_once():
    """lin(x) written twice (the same X, weight and bias) is one GEMM: the region reads its
    value again instead of pairing the two as a dual GEMM or leaving one to cuBLAS."""
    lin = nn.Linear(64, 128).to(BF)

    def fn(x):
        return torch.tanh(lin(x)) + torch.sigmoid(lin(x))
    x = torch.randn(4, 64, dtype=BF)
    with torch.no_grad():
        f, lines = _fused(fn, x)
        (m,) = f.regions()
        assert m.label == "linear->tanh->identity->sigmoid->add" and m.dual is None, m.label
        assert len(lines) == 1
        _check_reference(f, (x,))
        assert torch.equal(f(x), fn(x))


def test_recipe_tells_operand_order():
    """The kernel cache key (the recipe) of h - r and r - h differ: one kernel each."""
    w, r = torch.randn(128, 64, dtype=BF), torch.randn(4, 128, dtype=BF)
    x = torch.randn(4, 64, dtype=BF)
    fa, _ = _fused(lambda x, w, r: F.linear(x, w) - r, x, w, r)
    fb, _ = _fused(lambda x, w, r: r - F.linear(x, w), x, w, r)
    assert fa.regions()[0].recipe != fb.regions()[0].recipe


def test_dual_kernel_compiles(tmp_path, monkeypatch, caplog):
    """The dual region's kernel builds and NVRTC-compiles for sm_90a at both M buckets it
    would use (no GPU needed): 128x64 tiles, both weights' TMA descriptors."""
    from comfuse import runtime
    monkeypatch.setenv("CF_CACHE_DIR", str(tmp_path))
    mod = layers.GatedMLP(64, 136, bias=True).to(BF).eval()
    with torch.no_grad():
        f, _ = _fused(mod, torch.randn(3, 64, dtype=BF))
    m = _dual(f)
    opts = m.graph.options_for(4096, m.N, m.K)
    k = comfuse.Kernel(m.graph, opts)
    assert "static constexpr bool dual = true;" in k.source() and "static constexpr int bn = 64;" in k.source()
    try:
        k.compile()
    except comfuse.CfError as e:
        if "NVRTC not found" in str(e):
            pytest.skip("NVRTC not installed")
        raise
    assert k.resources()["registers"] > 0
    m.warmup((8, 1000))                 # both buckets, through the runtime's own options
    assert len([key for key in runtime._kernels if key[0] == m.recipe]) == 2
    with caplog.at_level(logging.INFO, logger="comfuse"):
        m._note("fused")                # the log line of the first fused call
    msgs = [r.getMessage() for r in caplog.records if " fused: " in r.getMessage()]
    assert len(msgs) == 1 and "linear+linear->silu->mul (dual GEMM: gate_proj, up_proj; N=136, K=64, bf16" in msgs[0]


FALLBACKS = {
    "f32 operands": (lambda x, w: torch.relu(x.float() @ w.float()), "bf16 or f16"),
    "reduce over rows": (lambda x, w: (x @ w).sum(0), "bare matmul"),
    "cumsum": (lambda x, w: torch.cumsum(x @ w, -1), "bare matmul"),
    "training dropout": (lambda x, w: F.dropout(x @ w, 0.5, training=True), "training-mode dropout"),
    "layer_norm over 2 dims": (lambda x, w: F.layer_norm((x @ w).view(2, 4, 128), (4, 128)), "bare matmul"),
    "in-place": (lambda x, w: (x @ w).relu_(), "in-place"),
    "partial broadcast": (lambda x, w: (x.view(2, 4, 64) @ w) + torch.ones(1, 4, 128, dtype=BF), "not a scalar, [N]"),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_unsupported_patterns_fall_back_with_a_reason(name, caplog):
    fn, reason = FALLBACKS[name]
    x, w = torch.randn(8, 64, dtype=BF), torch.randn(64, 128, dtype=BF)
    torch.manual_seed(1)
    with caplog.at_level(logging.INFO, logger="comfuse"):
        f, lines = _fused(fn, x, w)
    assert any(reason in l for l in lines), lines
    assert all("fused (" not in l for l in lines)
    torch.manual_seed(2)
    got = f(x, w)
    torch.manual_seed(2)
    assert torch.equal(got, fn(x, w))
    assert any("fell back" in r.getMessage() for r in caplog.records)


def test_autograd_falls_back_and_keeps_gradients():
    mod = layers.LinearGELU(64, 128).to(BF).train()
    x = torch.randn(4, 64, dtype=BF, requires_grad=True)
    f = comfuse.fuse(mod)
    lines = comfuse.explain(f, x)
    assert "autograd needs gradients" in lines[0]
    f(x).float().sum().backward()
    assert x.grad is not None and mod.lin.weight.grad is not None


def test_untraceable_function_is_captured_by_dynamo():
    def fn(x, w):
        if x.sum() > 0:           # data-dependent control flow: torch.fx cannot trace it
            return torch.relu(x @ w)
        return x @ w
    x, w = torch.randn(4, 64, dtype=BF).abs(), torch.randn(64, 128, dtype=BF)
    torch._dynamo.reset()
    f = comfuse.fuse(fn)
    lines = comfuse.explain(f, x, w)
    assert any("[matmul->relu]" in l and "CPU tensors" in l for l in lines), lines
    assert "torch.fx could not trace" in f.report.note
    assert torch.equal(f(x, w), fn(x, w))
    assert torch.equal(f(-x, w), fn(-x, w))


@pytest.mark.skipif(torch.cuda.is_available(), reason="would launch on host pointers where a GPU exists")
def test_launch_failure_falls_back(monkeypatch):
    """No CUDA driver (or any launch error): the call runs in PyTorch and says why."""
    from comfuse import runtime

    mod = layers.LinearGELU(64, 128).to(BF).eval()
    f = comfuse.fuse(mod)
    x = torch.randn(4, 64, dtype=BF)
    with torch.no_grad():
        f(x)
        (m,) = f.regions()
        monkeypatch.setattr(runtime.FusedRegion, "why_not", lambda self, args: None)
        monkeypatch.setattr(runtime, "_raw_stream", lambda index: 0)
        try:
            y = f(x)
        except comfuse.CfError:
            raise AssertionError("a launch error escaped")
    assert m.last.startswith("the launch failed: CF_ERR_")
    assert torch.equal(y, mod(x))


def test_dynamic_m_uses_one_plan():
    mod = layers.LinearBiasLN(64, 128).to(BF).eval()
    f = comfuse.fuse(mod)
    with torch.no_grad():
        for lead in ((2, 3), (7,), (1, 1, 9)):
            x = torch.randn(*lead, 64, dtype=BF)
            assert torch.equal(f(x), mod(x))
            (m,) = f.regions()
            assert m.why_not((x,) + tuple(p for p in (mod.lin.weight, mod.bias, mod.ln.weight, mod.ln.bias))) \
                .startswith("CPU tensors")


def test_buckets():
    from comfuse import runtime
    assert runtime.bucket_of(1) == runtime.bucket_of(64) != runtime.bucket_of(65)
    assert runtime.bucket_of(65) == runtime.bucket_of(128) != runtime.bucket_of(129)
    assert runtime.bucket_of(2049) == runtime.bucket_of(4096) == 4096 != runtime.bucket_of(4097)
    assert runtime.bucket_of(8193) == runtime.bucket_of(10 ** 6)
    assert runtime.bucket_of(10 ** 9) == runtime.BUCKETS[-1]


def mod_regions(mod):
    from comfuse import runtime
    return [r for r in list(runtime._regions) if r.fallback is not None and r.N == 200 and r.K == 72]


def test_warmup_compiles_each_bucket_once(caplog):
    mod = layers.LinearGELU(72, 200).to(BF).eval()       # a shape no other test compiles
    before = comfuse.stats()
    try:
        comfuse.warmup(mod, torch.randn(2, 72, dtype=BF), ms=(8, 60, 1000))
    except comfuse.CfError as e:
        if "NVRTC not found" in str(e):
            pytest.skip("NVRTC not installed")
        raise
    s = comfuse.stats()
    assert s["compiles"] - before["compiles"] == 2          # 8 and 60 share the decode bucket
    m = mod_regions(mod)[0]
    with caplog.at_level(logging.INFO, logger="comfuse"):
        m._note("fused")                                    # the first fused call's log line
        m._note("fused")                                    # logged once
    msgs = [r.getMessage() for r in caplog.records if "fused:" in r.getMessage()]
    assert len(msgs) == 1 and "linear->gelu_erf" in msgs[0] and "kernel built in" in msgs[0] and " ms" in msgs[0]
    assert s["kernel_cache_hits"] - before["kernel_cache_hits"] == 1
    assert s["first_compile_ms"] is not None and s["first_compile_ms"] > 0


@pytest.mark.parametrize("name", sorted(EPILOGUES) + ["plain:" + p for p in sorted(layers.PLAIN)])
def test_region_kernels_compile(name, tmp_path, monkeypatch):
    """Every region above builds and NVRTC-compiles for sm_90a (no GPU needed): bf16
    vectors, per-row outputs, several outputs, [N, K] and [K, N] weights."""
    monkeypatch.setenv("CF_CACHE_DIR", str(tmp_path))      # a real compile, not a cache hit
    if name.startswith("plain:"):
        p = name[6:]
        mod = layers.PLAIN[p](64, 128).to(BF).eval()
        args = layers.inputs_for(p, (4,), 64, 128, BF, "cpu")
    else:
        mod = Custom(EPILOGUES[name]).eval()
        mod.hl = layers.HandLayerNorm(64, 128).to(BF)
        mod.w = nn.Parameter(torch.rand(128, dtype=BF) + 0.5)
        args = (torch.randn(4, 64, dtype=BF),) + _extra(name)
    with torch.no_grad():
        f, _ = _fused(mod, *args)
    for m in f.regions():
        k = comfuse.Kernel(m.graph, m.graph.options_for(4096, m.N, m.K))
        try:
            k.compile()
        except comfuse.CfError as e:
            if "NVRTC not found" in str(e):
                pytest.skip("NVRTC not installed")
            raise
        r = k.resources()
        # an identical kernel compiled earlier in this process is a (memory) cache hit: the
        # cache keys on the kernel's code, not on its comments
        assert r["smem_bytes"] > 0 and r["registers"] > 0
