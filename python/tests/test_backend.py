"""torch.compile(backend=comfuse.backend) on the CPU: the regions dynamo's graphs yield
(plain layers, transformers' BERT layer and LLaMA decoder layer), dynamic batch, and
results identical to eager (on the CPU every region runs its PyTorch fallback)."""
import pytest
import torch

import comfuse
import layers

BF = torch.bfloat16


def _compile(mod):
    torch._dynamo.reset()
    n0 = len(comfuse.backend_reports())
    return torch.compile(mod, backend=comfuse.backend), lambda: comfuse.backend_reports()[n0:]


def _regions(reports):
    """label -> line, over every graph compiled, for the regions comfuse would fuse on a GPU."""
    out = {}
    for r in reports:
        for line in r.lines():
            if "fell back at run time" in line or ": fused" in line:
                out[line.split("[")[1].split("]")[0]] = line
    return out


@pytest.mark.parametrize("name", sorted(layers.PLAIN))
def test_plain_layers_through_dynamo(name):
    torch.manual_seed(0)
    mod = layers.PLAIN[name](64, 128).to(BF).eval()
    c, reports = _compile(mod)
    with torch.no_grad():
        for lead in ((2, 8), (3, 8), (5, 8)):         # the second size makes the graph dynamic
            args = layers.inputs_for(name, lead, 64, 128, BF, "cpu")
            got, want = c(*args), mod(*args)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                assert torch.equal(g, w)
    regs = [_regions([r]) for r in reports()]
    assert len(regs) == 2, "one static graph, then one dynamic graph"
    assert all(len(r) == 1 for r in regs), regs
    line = list(regs[1].values())[0]
    assert "N=128 K=64 bf16" in line and "CPU tensors" in line


def test_bert_layer_regions():
    tr = pytest.importorskip("transformers")
    from transformers.models.bert.modeling_bert import BertLayer
    cfg = tr.BertConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4)
    cfg._attn_implementation = "sdpa"
    layer = BertLayer(cfg).eval().to(BF)
    c, reports = _compile(layer)
    x = torch.randn(2, 16, 128, dtype=BF)
    with torch.no_grad():
        assert torch.equal(c(x)[0], layer(x)[0])
    regs = _regions(reports())
    assert set(regs) == {"linear->identity->add->layer_norm", "linear->gelu_erf"}, regs
    n_ln = sum(l.count("layer_norm") for r in reports() for l in r.lines())
    assert n_ln == 2                                  # attention output and FFN output blocks


def test_llama_decoder_layer_regions():
    tr = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
    cfg = tr.LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=1)
    cfg._attn_implementation = "sdpa"
    layer = LlamaDecoderLayer(cfg, 0).eval().to(BF)
    rope = LlamaRotaryEmbedding(cfg)
    x = torch.randn(2, 16, 128, dtype=BF)
    pos = torch.arange(16)[None].expand(2, 16)
    pe = rope(x, pos)
    c, reports = _compile(layer)
    with torch.no_grad():
        got = c(x, position_embeddings=pe, position_ids=pos)
        want = layer(x, position_embeddings=pe, position_ids=pos)
    assert torch.equal(got[0] if isinstance(got, tuple) else got, want[0] if isinstance(want, tuple) else want)
    regs = _regions(reports())
    # o_proj + residual + RMSNorm (post_attention_layernorm); gate and up as one dual GEMM with
    # SiLU * product; down + residual
    assert set(regs) == {"linear->add->identity->pow->mean->add->rsqrt->mul->identity->mul",
                         "linear+linear->silu->mul", "linear->add"}, regs
    assert "(dual GEMM: gate_proj, up_proj)" in regs["linear+linear->silu->mul"]
    lines = [l for r in reports() for l in r.lines()]
    # q_proj and k_proj/v_proj read one X too, but nothing combines them elementwise: no dual
    assert sum("dual GEMM" in l for l in lines) == 1, lines
    assert all("up_proj" not in l or "dual GEMM" in l for l in lines)     # up_proj is not left bare
    mods = {m.label: m for r in reports() for m in r.modules}
    # the residual sum feeds the next residual add and the RMSNorm: both are outputs
    assert len(mods["linear->add->identity->pow->mean->add->rsqrt->mul->identity->mul"].out_cls) == 2
    assert len(mods["linear->add"].out_cls) == 1


def test_inductor_backend_keeps_regions_opaque():
    """comfuse.inductor_backend: regions become comfuse::region calls, Inductor compiles
    the rest (here the two bare GEMMs); the same results as eager on the CPU."""
    import torch.nn.functional as F

    def mlp(x, wg, wu, wd):
        return F.linear(F.silu(F.linear(x, wg)) * F.linear(x, wu), wd)
    torch.manual_seed(0)
    args = (torch.randn(5, 64, dtype=BF), torch.randn(128, 64, dtype=BF), torch.randn(128, 64, dtype=BF),
            torch.randn(64, 128, dtype=BF))
    torch._dynamo.reset()
    n0 = len(comfuse.backend_reports())
    c = torch.compile(mlp, backend=comfuse.inductor_backend)
    with torch.no_grad():
        got = c(*args)
    want = mlp(*args)
    assert ((got.float() - want.float()).norm() / want.float().norm()).item() < 1e-2
    (rep,) = comfuse.backend_reports()[n0:]
    assert [m.label for m in rep.modules] == ["linear+linear->silu->mul"]
    assert rep.modules[0].last.startswith("CPU tensors")   # the op ran, through its fallback


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_gated_mlp_through_dynamo(act):
    """The gated MLP under torch.compile (parameters are graph inputs, named by dynamo): one
    dual region, at three batch sizes (static, then dynamic) with eager's results."""
    torch.manual_seed(0)
    mod = layers.GatedMLP(64, 128, act=act, bias=True).to(BF).eval()
    c, reports = _compile(mod)
    with torch.no_grad():
        for lead in ((2, 8), (3, 8), (5, 8)):
            x = torch.randn(*lead, 64, dtype=BF)
            assert torch.equal(c(x), mod(x))
    regs = [_regions([r]) for r in reports()]
    assert len(regs) == 2 and all(len(r) == 1 for r in regs), regs
    line = list(regs[1].values())[0]
    assert "(dual GEMM: gate_proj, up_proj) N=128 K=64 bf16" in line and "CPU tensors" in line, line
    (m,) = reports()[1].modules
    assert m.in_cls[:3] == ["X", "W", "W2"]


def test_backend_in_training_keeps_autograd():
    torch.manual_seed(0)
    mod = layers.LinearBiasLN(64, 128).to(BF).train()
    c, reports = _compile(mod)
    x = torch.randn(4, 64, dtype=BF, requires_grad=True)
    c(x).float().square().sum().backward()
    g_c, gw_c = x.grad.clone(), mod.lin.weight.grad.clone()
    x.grad = None
    mod.zero_grad()
    mod(x).float().square().sum().backward()
    assert torch.equal(g_c, x.grad) and torch.equal(gw_c, mod.lin.weight.grad)
    (rep,) = reports()
    assert "autograd needs gradients" in rep.modules[0].last


def test_dynamic_true_makes_eps_a_runtime_scalar():
    """dynamic=True turns float attributes (eps) into graph inputs: they become cf params,
    bound per launch; the translation still matches PyTorch in float64."""
    torch.manual_seed(0)
    mod = layers.ResidualRMSNorm(64, 128, eps=1e-2).to(BF).eval()
    torch._dynamo.reset()
    n0 = len(comfuse.backend_reports())
    c = torch.compile(mod, backend=comfuse.backend, dynamic=True)
    seen = []
    with torch.no_grad():
        args = layers.inputs_for("residual_rmsnorm", (3, 8), 64, 128, BF, "cpu")
        assert all(torch.equal(g, w) for g, w in zip(c(*args), mod(*args)))
        (rep,) = comfuse.backend_reports()[n0:]
        (m,) = rep.modules
        assert "param" in m.in_cls
        h = m.register_forward_hook(lambda mod_, i, o: seen.append(i))
        c(*args)
        h.remove()
    inputs = seen[0]
    ref = m.reference(*inputs)
    want = m.fallback(*[a.double() if torch.is_tensor(a) else a for a in inputs])
    for r, w in zip(ref, want):
        assert ((r - w.double()).norm() / w.double().norm()).item() < 2e-3
    k = comfuse.Kernel(m.graph, m.graph.options_for(4096, 128, 64))
    assert k.n_params == 1
    k.compile()                       # NVRTC; the kernel reads eps from its parameter block
