"""comfuse for PyTorch: fuse a GEMM with the epilogue that follows it into one sm_90a kernel.

    import comfuse
    layer = comfuse.fuse(torch.nn.Sequential(nn.Linear(1024, 1024), nn.LayerNorm(1024)))
    y = layer(x)                                            # traced and compiled on first call
    model = torch.compile(model, backend=comfuse.backend)    # or the whole model
    print("\\n".join(comfuse.explain(layer, x)))            # one line per region
    comfuse.stats()                                         # compile time, cache hits, fallbacks

Two projections of one input that meet elementwise (LLaMA's silu(gate(x)) * up(x), GeGLU)
fuse as one dual GEMM: one kernel loads each X tile once for both weights.
Regions comfuse cannot fuse (an op outside the domain, a dtype, CPU tensors, autograd
needing gradients, no GPU) run through PyTorch unchanged.  Set logging for "comfuse"
to INFO to see one line per region saying whether it was fused.
"""
import logging

from ._lib import LibraryNotFound, path as library_path  # noqa: F401
from .capi import CfError, Graph, Kernel, parse_spec  # noqa: F401
from .runtime import BUCKETS, stats, warmup_all  # noqa: F401

__version__ = "0.1.0"
__all__ = ["fuse", "backend", "inductor_backend", "explain", "warmup", "warmup_all", "stats", "library_path",
           "parse_spec", "Graph", "Kernel", "CfError", "LibraryNotFound"]

log = logging.getLogger("comfuse")


class _Fused:
    """fuse(fn): traced on the first call; see fuse()."""

    def __init__(self, fn):
        self.fn = fn
        self.gm = None
        self.report = None

    def _trace(self, args):
        import torch
        import torch.fx as fx
        from torch.fx.passes.shape_prop import ShapeProp
        from . import rewrite
        from .region import normalize_modules
        try:
            gm = fx.symbolic_trace(self.fn)
            normalize_modules(gm)
            ShapeProp(gm).propagate(*args)
        except Exception as e:   # noqa: BLE001 - torch.fx cannot trace it: let dynamo capture it
            why = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:120])
            self._via_dynamo(why)
            return
        if isinstance(self.fn, torch.nn.Module):
            gm.train(self.fn.training)
        self.report = rewrite.rewrite(gm)
        self.gm = gm

    def _via_dynamo(self, why):
        """torch.fx could not trace fn (control flow, modules called from a function):
        torch.compile with comfuse's backend captures it instead, graph by graph."""
        import torch
        from . import rewrite
        reports = []

        def collect(gm, example_inputs):
            reports.append(rewrite.rewrite(gm))
            return gm.forward
        self.report = rewrite.MultiReport(reports, "torch.fx could not trace it (%s); captured by dynamo" % why)
        self.gm = torch.compile(self.fn, backend=collect, dynamic=None)
        log.info("comfuse: %s", self.report.note)

    def __call__(self, *args):
        if self.gm is None:
            self._trace(args)
        return self.gm(*args)

    def regions(self):
        return self.report.all_modules() if self.report else []


def fuse(fn):
    """Wraps fn (an nn.Module or a function of tensors): on its first call fn is traced
    with torch.fx, every matmul + epilogue region that comfuse can fuse is replaced by a
    fused kernel launched on the current CUDA stream, and the rest runs as written."""
    if isinstance(fn, _Fused):
        return fn
    return _Fused(fn)


def backend(gm, example_inputs):
    """A torch.compile backend: torch.compile(model, backend=comfuse.backend).

    Each fusible matmul + epilogue region of the FX graph dynamo captured becomes one
    call of a fused kernel (or, per call, of the region's own ops when the kernel does
    not apply: see explain()).  Everything else runs eagerly, op by op, as the captured
    graph has it: nothing else is compiled, so a region's time and the rest's are
    PyTorch's own and what comfuse changes is measured alone, compile time is NVRTC's
    only, and there is no second code generator whose bugs could be ours.
    comfuse.inductor_backend sends the rest through Inductor instead (regions as opaque
    custom ops), for the best end-to-end time.
    Dynamic M works: kernels are keyed by graph, N, K, dtype and an M bucket."""
    from . import rewrite
    report = rewrite.rewrite(gm)
    _backend_reports.append(report)
    for line in report.lines():
        log.debug("comfuse: %s", line)
    return gm.forward


def inductor_backend(gm, example_inputs):
    """Like backend, but the rest of the graph goes through Inductor (torch.compile's
    default): each fused region is an opaque custom op (comfuse::region) in the graph
    Inductor compiles, so Inductor fuses what comfuse does not (attention's softmax,
    norms without a GEMM before them).  Graphs that need gradients are left to Inductor
    whole (the fused kernel has no backward)."""
    import torch
    from torch._inductor.compile_fx import compile_fx
    from . import rewrite
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        log.info("comfuse: a graph that needs gradients: left to Inductor whole")
        return compile_fx(gm, example_inputs)
    report = rewrite.rewrite(gm, opaque=True)
    _backend_reports.append(report)
    # comfuse::region names its region by an index into this process's registry: a graph
    # cached on disk by another process must not be reused
    with torch._inductor.config.patch(fx_graph_cache=False):
        return compile_fx(gm, example_inputs)


_backend_reports = []


def backend_reports():
    """The Report of every graph comfuse.backend compiled, in order."""
    return list(_backend_reports)


def explain(fn, *args):
    """Runs fn once on args and returns one line per region: fused, or why not."""
    f = fuse(fn)
    f(*args)
    return f.report.lines()


def warmup(fn, *args, ms=None):
    """Traces fn with args (if not yet) and compiles every fused region's kernel for the
    M buckets of the given M values (default: every bucket), so no later call compiles.
    Returns the number of kernels now cached."""
    f = fuse(fn)
    if f.gm is None:
        f._trace(args)
    for m in f.regions():
        m.warmup(ms or BUCKETS)
    return stats()["kernels"]
