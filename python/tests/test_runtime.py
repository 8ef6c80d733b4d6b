"""A fused region's call path on the CPU, with the launch stood in for: what it caches
(the kernel per M bucket, the launch's ctypes block) and what it still checks on every
call.  On the CPU the device check fails first, so here it accepts CPU tensors: every
other check, the output allocation and the launch arguments run as on the GPU."""
import pytest
import torch

import comfuse
import layers
from comfuse import capi, runtime

BF = torch.bfloat16


class FakeKernel:
    def __init__(self, key):
        self.key = key
        self.launches = []

    def launch(self, dims, inputs, outputs, stream=None, params=()):
        self.launches.append((tuple(dims), list(inputs), list(outputs), stream, list(params)))


@pytest.fixture
def host(monkeypatch):
    """Launches recorded instead of run; returns the list of kernels get_kernel built."""
    built = []

    def get_kernel(graph, recipe, m, n, k):
        built.append(FakeKernel((recipe, runtime.bucket_of(m))))
        return built[-1]

    def why_not(self, args):     # the real checks, with CPU tensors standing for CUDA ones
        ts = [args[i] for i in self._t_idx]
        return self._why_not_operands(ts, ts[0].get_device())
    monkeypatch.setattr(runtime, "get_kernel", get_kernel)
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: 0x5EED)
    monkeypatch.setattr(runtime.FusedRegion, "why_not", why_not)
    return built


def _region(name, k=64, n=128):
    mod = layers.PLAIN[name](k, n).to(BF).eval()
    f = comfuse.fuse(mod)
    return mod, f


def test_kernel_is_looked_up_once_per_bucket(host):
    mod, f = _region("linear_bias_ln")
    with torch.no_grad():
        x = torch.randn(3, 5, 64, dtype=BF)
        f(x)
        (m,) = f.regions()
        assert len(host) == 1 and host[0].key[1] == runtime.bucket_of(15)
        s0 = comfuse.stats()
        for lead in ((3, 5), (7,), (2, 30)):           # M = 15, 7, 60: one bucket
            f(torch.randn(*lead, 64, dtype=BF))
        s1 = comfuse.stats()
        assert len(host) == 1, "a new M in the same bucket built a kernel"
        assert s1["fused_calls"] - s0["fused_calls"] == 3
        assert s1["kernel_cache_hits"] - s0["kernel_cache_hits"] == 3
        f(torch.randn(300, 64, dtype=BF))              # the next bucket: one more kernel
        assert len(host) == 2 and host[1].key[1] == runtime.bucket_of(300)
        assert [d[0][0] for d in host[0].launches] == [15, 15, 7, 60] and host[1].launches[0][0] == (300, 128, 64)
    assert m.last == "fused"


def test_launch_gets_this_calls_pointers_and_fresh_outputs(host):
    mod, f = _region("residual_rmsnorm")
    with torch.no_grad():
        outs = []
        for lead in ((4, 8), (4, 8), (9,)):
            x, res = layers.inputs_for("residual_rmsnorm", lead, 64, 128, BF, "cpu")
            outs.append(f(x, res))
            (m,) = f.regions()
            dims, ins, ptrs, stream, params = host[0].launches[-1]
            assert ins[0] == x.data_ptr() and ins[1] == mod.proj.weight.data_ptr()
            assert res.data_ptr() in ins and mod.weight.data_ptr() in ins
            assert ptrs == [o.data_ptr() for o in outs[-1]] and stream == 0x5EED and params == []
            assert [tuple(o.shape) for o in outs[-1]] == [lead + (128,)] * 2
            assert all(o.dtype == BF for o in outs[-1])
    # each call's outputs are its own (a reused buffer would be overwritten by the next call)
    assert outs[0][0].data_ptr() != outs[1][0].data_ptr()


@pytest.mark.parametrize("bad", ["non_contiguous", "dtype", "weight_layout", "misaligned", "broadcast_residual"])
def test_checks_still_run_after_the_first_fused_call(host, bad):
    mod, f = _region("residual_rmsnorm")
    with torch.no_grad():
        x, res = layers.inputs_for("residual_rmsnorm", (6,), 64, 128, BF, "cpu")
        f(x, res)
        (m,) = f.regions()
        assert m.last == "fused"
        n = len(host[0].launches)
        w = mod.proj.weight
        if bad == "non_contiguous":
            x = torch.randn(64, 6, dtype=BF).t()
        elif bad == "dtype":
            res = res.half()
        elif bad == "weight_layout":      # [K, N] where the kernel reads nn.Linear's [N, K]
            mod.proj.weight.data = torch.randn(64, 128, dtype=BF)
        elif bad == "misaligned":
            x = torch.randn(6 * 64 + 1, dtype=BF)[1:].view(6, 64)
        else:
            res = res[:1]                 # broadcasts in PyTorch, not a [M, N] tile
        if bad == "weight_layout":        # the fallback is PyTorch: the error eager gives
            with pytest.raises(RuntimeError, match="cannot be multiplied"):
                f(x, res)
        else:
            f(x, res)
        mod.proj.weight.data = w
    assert len(host[0].launches) == n, "an operand the kernel cannot take was launched"
    assert m.last != "fused"


def test_dual_region_launch_and_checks(host):
    """A dual GEMM's launch: X, W (gate), W2 (up), then the biases; one [M, N] output; a W2
    in the wrong layout is caught before the launch."""
    torch.manual_seed(0)
    mod = layers.GatedMLP(64, 128, bias=True).to(BF).eval()
    f = comfuse.fuse(mod)
    with torch.no_grad():
        x = torch.randn(2, 3, 64, dtype=BF)
        f(x)
        m = [r for r in f.regions() if r.dual][0]
        assert m.last == "fused" and host[0].key == (m.recipe, runtime.bucket_of(6))
        dims, ins, ptrs, stream, params = host[0].launches[-1]
        assert dims == (6, 128, 64)
        assert ins == [x.data_ptr(), mod.gate_proj.weight.data_ptr(), mod.up_proj.weight.data_ptr(),
                       mod.gate_proj.bias.data_ptr(), mod.up_proj.bias.data_ptr()]
        assert len(ptrs) == 1
        n = len(host[0].launches)
        w = mod.up_proj.weight
        mod.up_proj.weight.data = torch.randn(64, 128, dtype=BF)       # [K, N]: not what the kernel reads
        with pytest.raises(RuntimeError):
            f(x)
        mod.up_proj.weight.data = w
    assert len(host[0].launches) == n and m.last.startswith("operand of shape [64, 128] does not broadcast as W2")


def test_module_hooks_still_run(host):
    mod, f = _region("linear_gelu")
    with torch.no_grad():
        x = torch.randn(4, 64, dtype=BF)
        f(x)
        (m,) = f.regions()
        seen = []
        h = m.register_forward_hook(lambda mod_, i, o: seen.append(o))
        y = f(x)
        h.remove()
        f(x)
    assert len(seen) == 1 and seen[0][0] is y


@pytest.mark.skipif(torch.cuda.is_available(), reason="would launch on made-up pointers where a GPU exists")
def test_launch_block_is_built_once_and_refilled():
    g = capi.Graph()
    M, N, K = g.dim("M"), g.dim("N"), g.dim("K")
    y = g.binary("mul", g.matmul(g.input("X", "bf16", [M, K]), g.input("W", "bf16", [N, K])), g.param("s"))
    g.output("Y", y, "bf16")
    k = capi.Kernel(g, g.options_for(256, 128, 64))
    for dims, ptr, s in (((256, 128, 64), 0x1000, 0.5), ((64, 128, 64), 0x2000, 2.0)):
        with pytest.raises(capi.CfError):              # no GPU (or no NVRTC): the C launch fails
            k.launch(dims, [ptr, ptr + 0x100], [ptr + 0x200], 7, [s])
        if dims[0] == 256:
            block = k._args
        assert k._args is block
        assert list(block.dims) == list(dims) and list(block.inputs) == [ptr, ptr + 0x100]
        assert list(block.outputs) == [ptr + 0x200] and list(block.params) == [s] and block.args.stream == 7
    with pytest.raises(ValueError):
        k.launch((256, 128), [1, 2], [3], None, [1.0])   # a dim missing


def test_opaque_op_returns_the_kernels_outputs_as_they_are(host, monkeypatch):
    """comfuse::region (inductor_backend's form of a region): a fused call's outputs come
    back without the aliasing pass the fallback's outputs need."""
    from comfuse import opaque
    mod, f = _region("residual_rmsnorm")
    with torch.no_grad():
        x, res = layers.inputs_for("residual_rmsnorm", (5,), 64, 128, BF, "cpu")
        f(x, res)
        (m,) = f.regions()
        idx = opaque.register(m)
        made = []
        real_launch = m._launch

        def launch(args):
            outs, hit = real_launch(args)
            made.extend(outs)
            return outs, hit
        monkeypatch.setattr(m, "_launch", launch)
        ins = [x, mod.proj.weight, res, mod.weight]
        got = torch.ops.comfuse.region.default(idx, [ins[i] for i in m._t_idx], [])
    assert len(got) == 2 and all(g is o for g, o in zip(got, made))
    assert m.last == "fused"
