"""Running a planned region: the kernel cache, M buckets, launches and the fallback.

A FusedRegion replaces a region's nodes in the FX graph.  Each call checks that the
fused kernel applies to these tensors (CUDA, dtypes, shapes, contiguity, alignment,
no autograd) and otherwise runs the region's own sub-graph in PyTorch, so a call is
never wrong, only unfused.  Launches go on torch.cuda.current_stream(): no host sync,
no copies, outputs from PyTorch's caching allocator.
"""
import logging
import os
import threading
import time
import weakref

import torch

from . import capi
from . import region as R

log = logging.getLogger("comfuse")

# M buckets: the plan (cf_options_for) may differ for small M; each bucket compiles once.
BUCKETS = (256, 4096, 1 << 31)

_lock = threading.Lock()
_kernels = {}          # (recipe, bucket) -> capi.Kernel
_failed = {}           # (recipe, bucket) -> the CfError its build or compile raised
_compile_ms = {}       # (recipe, bucket) -> ms its build + compile took (NVRTC or the disk cache)
_stats = {"compiles": 0, "compile_ms": 0.0, "first_compile_ms": None, "disk_cache_hits": 0,
          "kernel_cache_hits": 0, "fused_calls": 0, "fallback_calls": 0, "fallback_reasons": {}}
_logged = set()
_regions = weakref.WeakSet()   # every FusedRegion alive (warmup_all)


def bucket_of(m):
    for b in BUCKETS:
        if m <= b:
            return b
    return BUCKETS[-1]


def stats(reset=False):
    """Counters: kernels compiled (and their NVRTC ms; first_compile_ms is the first
    call's), in-process kernel cache hits, on-disk cache hits, fused and fallback calls
    with the reasons."""
    with _lock:
        out = dict(_stats)
        out["fallback_reasons"] = dict(_stats["fallback_reasons"])
        out["kernels"] = len(_kernels)
        if reset:
            _stats.update(compiles=0, compile_ms=0.0, first_compile_ms=None, disk_cache_hits=0,
                          kernel_cache_hits=0, fused_calls=0, fallback_calls=0, fallback_reasons={})
    return out


def _cf_device():
    try:
        return int(os.environ.get("CF_DEVICE", "0"))
    except ValueError:
        return -1


def get_kernel(graph, recipe, m, n, k):
    """The compiled kernel for (recipe, M bucket), compiling on first use.  One kernel
    object per key: its launches must not overlap in time on different streams (the
    L2 exchange slots are the object's; see cf_kernel_launch), as with a cuBLAS
    workspace.  Under CUDA-graph capture, warm up (one launch at the largest M) first."""
    b = bucket_of(m)
    key = (recipe, b)
    with _lock:
        kern = _kernels.get(key)
        if kern is not None:
            _stats["kernel_cache_hits"] += 1
            return kern
        if key in _failed:
            raise _failed[key]     # a failed compile is not retried on every call
    t0 = time.perf_counter()
    try:
        kern = capi.Kernel(graph, graph.options_for(min(b, 1 << 20), n, k), "comfuse_torch")
        kern.compile()
    except capi.CfError as e:
        with _lock:
            _failed[key] = e
        raise
    ms = (time.perf_counter() - t0) * 1e3
    res = kern.resources()
    with _lock:
        _stats["compiles"] += 1
        _stats["compile_ms"] += ms
        if _stats["first_compile_ms"] is None:
            _stats["first_compile_ms"] = ms
        _stats["disk_cache_hits"] += bool(res.get("cache_hit"))
        _kernels.setdefault(key, kern)
        _compile_ms[key] = ms
        return _kernels[key]


class FusedRegion(torch.nn.Module):
    """Calls the fused kernel for a region, or its PyTorch sub-graph when it cannot."""

    def __init__(self, r, fallback, name):
        super().__init__()
        self.fallback = fallback
        self.name = name
        self.region = r
        self.label = r.label()
        self.in_cls = list(r.roles)
        self.in_dt = [None if c == R.PARAM else R.meta(e)[1] for e, c in zip(r.inputs, r.roles)]
        self.out_cls = [r.cls[o] for o in r.outputs]
        self.out_keep = [r.keep.get(o, True) for o in r.outputs]
        self.out_dt = [R.meta(o)[1] for o in r.outputs]
        self.N, self.K = r.N, r.K
        self.graph = r.graph
        self.recipe = r.recipe
        self.last = None           # the last call's outcome: "fused" or the fallback reason
        _regions.add(self)

    def extra_repr(self):
        return "%s: %s (N=%d, K=%d)" % (self.name, self.label, self.N, self.K)

    def why_not(self, args):
        """None when the fused kernel applies to these arguments, else the reason."""
        x = args[0]
        for a, c in zip(args, self.in_cls):
            if (c == R.PARAM) == isinstance(a, torch.Tensor) or (c == R.PARAM and not isinstance(a, (int, float))):
                return "an operand is not a tensor" if c != R.PARAM else "a scalar operand is not a number"
        args = [a for a, c in zip(args, self.in_cls) if c != R.PARAM]
        if torch.is_grad_enabled() and any(a.requires_grad for a in args):
            return "autograd needs gradients (no backward for the fused kernel): run under torch.no_grad()"
        if not x.is_cuda:
            return "CPU tensors (the fused kernel runs on CUDA)"
        if x.device.index != _cf_device():
            return "tensors on %s, comfuse drives cuda:%d (set CF_DEVICE)" % (x.device, _cf_device())
        for a, dt in zip(args, [d for d in self.in_dt if d is not None]):
            if a.dtype != dt:
                return "dtype %s where the region was traced with %s" % (a.dtype, dt)
            if a.device != x.device:
                return "operands on several devices"
            if not a.is_contiguous():
                return "a non-contiguous operand (shape %s, stride %s)" % (list(a.shape), list(a.stride()))
            if a.data_ptr() % 16:
                return "an operand not 16-byte aligned (TMA)"
        lead = tuple(x.shape[:-1])
        if x.shape[-1] != self.K:
            return "X has K=%d, traced %d" % (x.shape[-1], self.K)
        if x.numel() == 0:
            return "an empty batch"
        for a, c in zip(args[1:], [c for c in self.in_cls[1:] if c != R.PARAM]):
            if not self._shape_ok(a, c, lead):
                return "operand of shape %s does not broadcast as %s" % (list(a.shape), c)
        return None

    def _shape_ok(self, a, c, lead):
        s = tuple(a.shape)
        if c == "W":
            return sorted(s) == sorted((self.N, self.K)) and len(s) == 2
        if c == R.TILE:
            return s == lead + (self.N,)
        if c == R.VEC_M:
            return s == lead + (1,)
        if c == R.VEC_N:
            return s[-1] == self.N and a.numel() == self.N and len(s) <= len(lead) + 1
        return False

    def forward(self, *args):
        reason = self.why_not(args)
        if reason is None:
            try:
                out = self._launch(args)
                self._note("fused")
                return out
            except capi.CfError as e:
                reason = "the launch failed: %s" % e
        self._note(reason)
        return self.fallback(*args)

    def _note(self, outcome):
        self.last = outcome
        with _lock:
            if outcome == "fused":
                _stats["fused_calls"] += 1
            else:
                _stats["fallback_calls"] += 1
                fr = _stats["fallback_reasons"]
                fr[outcome] = fr.get(outcome, 0) + 1
            key = (id(self), outcome == "fused")
            first = key not in _logged
            _logged.add(key)
        if first:
            if outcome == "fused":
                ms = [v for (rec, b), v in list(_compile_ms.items()) if rec == self.recipe]
                log.info("comfuse: %s fused: %s (N=%d, K=%d, %s; kernel built in %s)", self.name, self.label,
                         self.N, self.K, R.DT[self.in_dt[0]],
                         " + ".join("%.0f ms" % v for v in ms) if ms else "an earlier run")
            else:
                log.info("comfuse: %s fell back to PyTorch: %s (%s)", self.name, outcome, self.label)

    def _launch(self, args):
        x = args[0]
        lead = tuple(x.shape[:-1])
        m = x.numel() // self.K
        dev = x.device
        stream = torch.cuda.current_stream(dev).cuda_stream
        kern = get_kernel(self.graph, self.recipe, m, self.N, self.K)
        outs = []
        for c, keep, dt in zip(self.out_cls, self.out_keep, self.out_dt):
            shape = lead + (self.N,) if c == R.TILE else (lead + (1,) if keep else lead)
            outs.append(torch.empty(shape, dtype=dt, device=dev))
        ins, params = self._split(args)
        kern.launch([m, self.N, self.K], [a.data_ptr() for a in ins], [o.data_ptr() for o in outs], stream, params)
        return tuple(outs)

    def _split(self, args):
        """The tensor inputs (cf_graph_input order) and the runtime scalars (cf params)."""
        ins = [a for a, c in zip(args, self.in_cls) if c != R.PARAM]
        return ins, [float(a) for a, c in zip(args, self.in_cls) if c == R.PARAM]

    def warmup(self, ms=(1,)):
        """Compiles the kernels for the buckets of these M values (no GPU needed)."""
        for m in ms:
            get_kernel(self.graph, self.recipe, m, self.N, self.K)

    def reference(self, *args):
        """The region's cf_graph run by the float64 reference (cf_reference_run) on CPU
        copies of args: what the fused kernel computes, checkable without a GPU."""
        ins, params = self._split(args)
        host = [a.detach().cpu().contiguous() for a in ins]
        x = host[0]
        lead = tuple(x.shape[:-1])
        m = x.numel() // self.K
        sizes = [m * self.N if c == R.TILE else m for c in self.out_cls]
        vals = capi.reference_run(self.graph, [m, self.N, self.K], [h.data_ptr() for h in host], sizes, params)
        outs = []
        for v, c, keep in zip(vals, self.out_cls, self.out_keep):
            shape = lead + (self.N,) if c == R.TILE else (lead + (1,) if keep else lead)
            outs.append(torch.tensor(v, dtype=torch.float64).reshape(shape))
        return tuple(outs)


def warmup_all(ms=BUCKETS):
    """Compiles every live region's kernel for the buckets of ms (no GPU needed: NVRTC
    only, into the on-disk cache that a GPU machine can then load from)."""
    n = 0
    for r in list(_regions):
        r.warmup(ms)
        n += 1
    return n
