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

# M buckets, powers of two: a bucket's kernel is planned for its largest M (cf_options_for), and
# the plan's compile-time choices (tile, split K, ring depth) change with M up to about 8192
# rows: the plan for 4096 rows run at 512 skipped the split K that the plan for 512 takes
# (RMSNorm 512x4096x4096: 1.56x the time, graph-replayed).  Each bucket compiles once (disk-cached).
BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 1 << 31)

_lock = threading.Lock()
_kernels = {}          # (recipe, bucket) -> capi.Kernel
_failed = {}           # (recipe, bucket) -> the CfError its build or compile raised
_compile_ms = {}       # (recipe, bucket) -> ms its build + compile took (NVRTC or the disk cache)
_stats = {"compiles": 0, "compile_ms": 0.0, "first_compile_ms": None, "disk_cache_hits": 0,
          "kernel_cache_hits": 0, "fused_calls": 0, "fallback_calls": 0, "fallback_reasons": {}}
_logged = set()
_regions = weakref.WeakSet()   # every FusedRegion alive (warmup_all)
# nn.Module's global hook registries (dicts filled in place): FusedRegion.__call__ defers
# to nn.Module.__call__ when any is set
_GLOBAL_HOOKS = tuple(d for d in (getattr(torch.nn.modules.module, n, None) for n in
                                  ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                                   "_global_backward_pre_hooks")) if isinstance(d, dict))


def _global_hooks():
    for d in _GLOBAL_HOOKS:
        if d:
            return True
    return False


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
    workspace.  Under CUDA-graph capture, launch once first: at any M of the bucket (its
    exchange is sized for the bucket's largest), at the largest M in the open last bucket."""
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
        # the bucket's largest M: its first launch sizes the L2 exchange for all of it, so a
        # growing M neither synchronises nor reallocates (the open last bucket: this M)
        kern.prepare((b if b < BUCKETS[-1] else m, n, k))
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


def _raw_stream_fn():
    """torch's own accessor for the current stream as a CUstream int (what Inductor's
    generated code calls): torch.cuda.current_stream() builds a Stream object per call."""
    fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return fn if fn is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


_raw_stream = _raw_stream_fn()
FUSED = "fused"


def _counts(fused, cache_hit):
    with _lock:
        _stats["fused_calls"] += fused
        _stats["kernel_cache_hits"] += cache_hit


class FusedRegion(torch.nn.Module):
    """Calls the fused kernel for a region, or its PyTorch sub-graph when it cannot.

    A call's host work is what the GPU waits on between kernels, so everything that
    depends only on the region is computed here once (operand positions, dtypes, output
    shapes' tails, the device) and the kernel of each M bucket is kept on the module,
    looked up by the bucket alone (the recipe, a long tuple, is hashed only on a miss)."""

    def __init__(self, r, fallback, name):
        super().__init__()
        self.fallback = fallback
        self.name = name
        self.region = r
        self.label = r.label()
        self.dual = r.dual_names()     # [gate, up] names of a dual GEMM's projections, else None
        self.in_cls = list(r.roles)
        self.in_dt = [None if c == R.PARAM else R.meta(e)[1] for e, c in zip(r.inputs, r.roles)]
        self.out_cls = [r.cls[o] for o in r.outputs]
        self.out_keep = [r.keep.get(o, True) for o in r.outputs]
        self.out_dt = [R.meta(o)[1] for o in r.outputs]
        self.N, self.K = r.N, r.K
        self.graph = r.graph
        self.recipe = r.recipe
        self.last = None           # the last call's outcome: "fused" or the fallback reason
        self._t_idx = [i for i, c in enumerate(self.in_cls) if c != R.PARAM]
        self._p_idx = [i for i, c in enumerate(self.in_cls) if c == R.PARAM]
        self._t_dt = [self.in_dt[i] for i in self._t_idx]
        self._t_cls = [self.in_cls[i] for i in self._t_idx]
        self._w_shape = (self.N, self.K) if r.steps[r.mm].attrs["layout"] == "nk" else (self.K, self.N)
        self._out_tail = [(self.N,) if c == R.TILE else ((1,) if keep else ())
                          for c, keep in zip(self.out_cls, self.out_keep)]
        self._dev = _cf_device()   # the library reads CF_DEVICE once per process, too
        self._kern = {}            # M bucket -> capi.Kernel
        _regions.add(self)

    def extra_repr(self):
        return "%s: %s (%sN=%d, K=%d)" % (self.name, self.label, self._dual_tag(), self.N, self.K)

    def __call__(self, *args):
        # nn.Module.__call__ costs microseconds per call in hook bookkeeping: skipped
        # unless this module has hooks (tests and bench/torch_layers.py set some)
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or \
                self._backward_pre_hooks or _global_hooks():
            return super().__call__(*args)
        return self.forward(*args)

    def why_not(self, args):
        """None when the fused kernel applies to these arguments, else the reason.
        Runs on every call, so each check is in its cheapest form."""
        if len(args) != len(self.in_cls):
            return "%d operands where the region has %d" % (len(args), len(self.in_cls))
        for i in self._p_idx:
            if not isinstance(args[i], (int, float)):
                return "a scalar operand is not a number"
        ts = [args[i] for i in self._t_idx]
        for a in ts:
            if not isinstance(a, torch.Tensor):
                return "an operand is not a tensor"
        if torch.is_grad_enabled() and any(a.requires_grad for a in ts):
            return "autograd needs gradients (no backward for the fused kernel): run under torch.no_grad()"
        x = ts[0]
        if not x.is_cuda:
            return "CPU tensors (the fused kernel runs on CUDA)"
        dev = x.get_device()
        if dev != self._dev:
            return "tensors on %s, comfuse drives cuda:%d (set CF_DEVICE)" % (x.device, self._dev)
        return self._why_not_operands(ts, dev)

    def _why_not_operands(self, ts, dev):
        for a, dt in zip(ts, self._t_dt):
            if a.dtype != dt:
                return "dtype %s where the region was traced with %s" % (a.dtype, dt)
            if a.get_device() != dev:
                return "operands on several devices"
            if not a.is_contiguous():
                return "a non-contiguous operand (shape %s, stride %s)" % (list(a.shape), list(a.stride()))
            if a.data_ptr() % 16:
                return "an operand not 16-byte aligned (TMA)"
        x = ts[0]
        if x.shape[-1] != self.K:
            return "X has K=%d, traced %d" % (x.shape[-1], self.K)
        if x.numel() == 0:
            return "an empty batch"
        lead = tuple(x.shape[:-1])
        for a, c in zip(ts[1:], self._t_cls[1:]):
            if not self._shape_ok(a, c, lead):
                return "operand of shape %s does not broadcast as %s" % (list(a.shape), c)
        return None

    def _shape_ok(self, a, c, lead):
        s = a.shape
        if c == "W" or c == "W2":
            return s == self._w_shape       # the layout the kernel reads ([N, K] or [K, N])
        if c == R.TILE:
            return s[:-1] == lead and s[-1] == self.N if len(s) else False
        if c == R.VEC_M:
            return s[:-1] == lead and s[-1] == 1 if len(s) else False
        if c == R.VEC_N:
            return len(s) >= 1 and s[-1] == self.N and a.numel() == self.N and len(s) <= len(lead) + 1
        return False

    def forward(self, *args):
        return self.run(args)[0]

    def run(self, args):
        """(outputs, fused): the fused kernel's fresh outputs, or the fallback's (which
        may alias the inputs)."""
        reason = self.why_not(args)
        if reason is None:
            try:
                out, hit = self._launch(args)
            except capi.CfError as e:
                reason = "the launch failed: %s" % e
            else:
                if self.last is FUSED:
                    _counts(1, hit)            # the common case: two counters, no log
                else:
                    _counts(0, hit)
                    self._note(FUSED)
                return out, True
        self._note(reason)
        return self.fallback(*args), False

    def _note(self, outcome):
        if self.last != outcome:
            self.last = outcome        # (nn.Module.__setattr__ is slow: only on a change)
        with _lock:
            if outcome == FUSED:
                _stats["fused_calls"] += 1
            else:
                _stats["fallback_calls"] += 1
                fr = _stats["fallback_reasons"]
                fr[outcome] = fr.get(outcome, 0) + 1
            key = (id(self), outcome == FUSED)
            first = key not in _logged
            _logged.add(key)
        if first:
            if outcome == FUSED:
                ms = [v for (rec, b), v in list(_compile_ms.items()) if rec == self.recipe]
                log.info("comfuse: %s fused: %s (%sN=%d, K=%d, %s; kernel built in %s)", self.name, self.label,
                         self._dual_tag(), self.N, self.K, R.DT[self.in_dt[0]],
                         " + ".join("%.0f ms" % v for v in ms) if ms else "an earlier run")
            else:
                log.info("comfuse: %s fell back to PyTorch: %s (%s%s)", self.name, outcome, self._dual_tag(),
                         self.label)

    def _dual_tag(self):
        return "dual GEMM: %s; " % ", ".join(self.dual) if self.dual else ""

    def kernel_for(self, m):
        """(kernel for M = m, whether it was cached on this module)."""
        b = bucket_of(m)
        kern = self._kern.get(b)
        if kern is not None:
            return kern, True
        kern = self._kern[b] = get_kernel(self.graph, self.recipe, m, self.N, self.K)
        return kern, False

    def _launch(self, args):
        """(outputs, kernel cache hit) after one launch on the current stream."""
        x = args[0]
        m = x.numel() // self.K
        kern, hit = self.kernel_for(m)
        lead = x.shape[:-1]
        dev = x.device
        outs = tuple(torch.empty(lead + t, dtype=dt, device=dev) for t, dt in zip(self._out_tail, self.out_dt))
        kern.launch((m, self.N, self.K), [args[i].data_ptr() for i in self._t_idx], [o.data_ptr() for o in outs],
                    _raw_stream(x.get_device()), [float(args[i]) for i in self._p_idx])
        return outs, hit

    def _split(self, args):
        """The tensor inputs (cf_graph_input order) and the runtime scalars (cf params)."""
        return [args[i] for i in self._t_idx], [float(args[i]) for i in self._p_idx]

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
