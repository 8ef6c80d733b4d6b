"""A thin Python face on the C API: cf_graph, cf_lower / cf_ir_print, cf_kernel.

Every C error becomes a CfError carrying the cf_status name and the library's
own message; nothing here knows about PyTorch.
"""
import ctypes
import os
import tempfile
import threading

from . import _lib as L


class CfError(RuntimeError):
    def __init__(self, status, msg):
        self.status = status
        self.status_name = L.STATUS[status] if 0 <= status < len(L.STATUS) else str(status)
        super().__init__("%s (%s): %s" % (self.status_name, L.lib().cf_status_name(status).decode(), msg))
        self.msg = msg

    @property
    def unsupported(self):
        return self.status == L.CF_ERR_UNSUPPORTED


def _check(st, err):
    if st != L.CF_OK:
        raise CfError(st, err.msg.decode(errors="replace"))


def _print_to_string(fn, obj):
    """Runs a C printer that takes a FILE * and returns what it wrote."""
    fd, path = tempfile.mkstemp(prefix="comfuse-", suffix=".txt")
    os.close(fd)
    try:
        f = L.libc.fopen(path.encode(), b"w")
        if not f:
            raise OSError("fopen(%s) failed" % path)
        try:
            fn(obj, f)
        finally:
            L.libc.fclose(f)
        with open(path) as fh:
            return fh.read()
    finally:
        os.unlink(path)


class Graph:
    """cf_graph: build with the methods below, then lower() or Kernel(graph)."""

    def __init__(self):
        self._lib = L.lib()
        self._g = self._lib.cf_graph_new()
        if not self._g:
            raise MemoryError("cf_graph_new")

    def __del__(self):
        g, self._g = getattr(self, "_g", None), None
        if g:
            self._lib.cf_graph_free(g)

    @property
    def handle(self):
        return self._g

    def check(self):
        """Raises the first builder error, if any (builder errors are sticky)."""
        e = self._lib.cf_graph_error(self._g).contents
        if e.status != L.CF_OK:
            raise CfError(e.status, e.msg.decode(errors="replace"))

    def dim(self, name):
        return self._lib.cf_graph_dim(self._g, name.encode())

    def input(self, name, dtype, dims):
        arr = (ctypes.c_int32 * len(dims))(*dims)
        return self._lib.cf_graph_input(self._g, name.encode(), L.DTYPES.index(dtype), len(dims), arr)

    def const(self, v):
        return self._lib.cf_graph_const(self._g, float(v))

    def param(self, name):
        return self._lib.cf_graph_param(self._g, name.encode())

    def matmul(self, a, b):
        return self._lib.cf_graph_matmul(self._g, a, b)

    def unary(self, op, x):
        return self._lib.cf_graph_unary(self._g, L.OP[op], x)

    def binary(self, op, a, b):
        return self._lib.cf_graph_binary(self._g, L.OP[op], a, b)

    def reduce(self, op, x, axis=-1):
        return self._lib.cf_graph_reduce(self._g, L.OP[op], x, axis)

    def transpose(self, x):
        return self._lib.cf_graph_transpose(self._g, x)

    def output(self, name, v, dtype):
        err_st = self._lib.cf_graph_output(self._g, name.encode(), v, L.DTYPES.index(dtype))
        if err_st != L.CF_OK:
            self.check()
            raise CfError(err_st, "cf_graph_output(%s) failed" % name)

    def set_name(self, v, name):
        self._lib.cf_graph_set_name(self._g, v, name.encode())

    def num_inputs(self):
        return self._lib.cf_graph_num_inputs(self._g)

    def num_params(self):
        return self._lib.cf_graph_num_params(self._g)

    def num_outputs(self):
        return self._lib.cf_graph_num_outputs(self._g)

    def input_info(self, i):
        t = self._lib.cf_graph_input_info(self._g, i)
        return t.name.decode(), L.DTYPES[t.dtype], t.rank, tuple(t.dims[:t.rank])

    def output_info(self, i):
        t = self._lib.cf_graph_output_info(self._g, i)
        return t.name.decode(), L.DTYPES[t.dtype], t.rank, tuple(t.dims[:t.rank])

    def lower(self):
        """cf_lower: the IR, or CfError (status CF_ERR_UNSUPPORTED when outside the domain)."""
        self.check()
        out = ctypes.c_void_p()
        err = L.cf_error()
        _check(self._lib.cf_lower(self._g, ctypes.byref(out), ctypes.byref(err)), err)
        return IR(out)

    def explain(self):
        """The lowered IR as `comfuse explain` prints it."""
        return self.lower().text()

    def options_for(self, m, n, k):
        o = self._lib.cf_options_for(self._g, m, n, k)
        return {f: getattr(o, f) for f, _ in L.cf_options._fields_}


def parse_spec(text, filename="<spec>"):
    """cf_spec_parse: a .cf spec into a Graph."""
    g = Graph.__new__(Graph)
    g._lib = L.lib()
    out = ctypes.c_void_p()
    err = L.cf_error()
    data = text.encode()
    st = g._lib.cf_spec_parse(data, len(data), filename.encode(), ctypes.byref(out), ctypes.byref(err))
    g._g = out.value
    _check(st, err)
    return g


class IR:
    def __init__(self, handle):
        self._lib = L.lib()
        self._ir = handle

    def __del__(self):
        h, self._ir = getattr(self, "_ir", None), None
        if h:
            self._lib.cf_ir_free(h)

    def num_stages(self):
        return self._lib.cf_ir_num_stages(self._ir)

    def text(self):
        return _print_to_string(self._lib.cf_ir_print, self._ir)


class Kernel:
    """cf_kernel: built (source generated) on construction; compile() runs NVRTC."""

    def __init__(self, graph, options=None, title="comfuse"):
        self._lib = L.lib()
        self.graph = graph      # the C kernel points into the graph: keep it alive
        opt = L.cf_options(**(options or {}))
        out = ctypes.c_void_p()
        err = L.cf_error()
        _check(self._lib.cf_kernel_build(graph.handle, ctypes.byref(opt), title.encode(), ctypes.byref(out),
                                         ctypes.byref(err)), err)
        self._k = out
        self.n_dims = self._lib.cf_graph_num_dims(graph.handle)
        self.n_inputs = graph.num_inputs()
        self.n_params = graph.num_params()
        self.n_outputs = graph.num_outputs()
        self._args = None           # the _LaunchArgs every launch refills (see launch)
        self._launching = threading.Lock()

    def __del__(self):
        k, self._k = getattr(self, "_k", None), None
        if k:
            self._lib.cf_kernel_free(k)

    def source(self):
        return self._lib.cf_kernel_source(self._k).decode()

    def compile(self):
        err = L.cf_error()
        _check(self._lib.cf_kernel_compile(self._k, ctypes.byref(err)), err)

    def prepare(self, dims):
        """Compiles what a launch at these dims runs (compile(), and the wide-row path's kernels)
        and sizes the launch's L2 exchange for M up to dims' M (cf_kernel_prepare)."""
        if len(dims) != self.n_dims:
            raise ValueError("prepare: %d dims given, the graph has %d" % (len(dims), self.n_dims))
        d = (ctypes.c_int64 * max(1, self.n_dims))(*dims)
        err = L.cf_error()
        _check(self._lib.cf_kernel_prepare(self._k, d, ctypes.byref(err)), err)

    def resources(self):
        r = L.cf_resources()
        err = L.cf_error()
        _check(self._lib.cf_kernel_resources(self._k, ctypes.byref(r), ctypes.byref(err)), err)
        d = {f: getattr(r, f) for f, _ in L.cf_resources._fields_}
        d["cache_path"] = r.cache_path.decode(errors="replace")
        return d

    def launch(self, dims, inputs, outputs, stream=None, params=()):
        """Launches on stream (a CUstream handle as an int; None: the default stream).
        dims are indexed by cf_dim, inputs/outputs are device pointers (ints) in the
        graph's declaration order.  Asynchronous: nothing waits for the GPU.
        The ctypes argument block is built once and refilled (building it cost more
        than the C launch); cf_kernel_launch reads it during the call only."""
        if len(dims) != self.n_dims or len(inputs) != self.n_inputs or len(outputs) != self.n_outputs \
                or len(params) != self.n_params:
            raise ValueError("launch: %d dims / %d inputs / %d outputs / %d params given, the graph has "
                             "%d / %d / %d / %d" % (len(dims), len(inputs), len(outputs), len(params),
                                                    self.n_dims, self.n_inputs, self.n_outputs, self.n_params))
        with self._launching:        # one argument block: concurrent callers take turns
            a = self._args
            if a is None:
                a = self._args = _LaunchArgs(self.n_dims, self.n_inputs, self.n_outputs, self.n_params)
            a.fill(dims, inputs, outputs, params, stream)
            st = self._lib.cf_kernel_launch(self._k, a.ref, a.err_ref)
            if st != L.CF_OK:
                raise CfError(st, a.err.msg.decode(errors="replace"))


class _LaunchArgs:
    """cf_launch_args with its arrays, allocated once per kernel."""

    def __init__(self, n_dims, n_in, n_out, n_params):
        self.dims = (ctypes.c_int64 * max(1, n_dims))()
        self.inputs = (ctypes.c_uint64 * max(1, n_in))()
        self.outputs = (ctypes.c_uint64 * max(1, n_out))()
        self.params = (ctypes.c_double * max(1, n_params))()
        self.args = L.cf_launch_args(self.dims, self.inputs, self.params, self.outputs, None)
        self.err = L.cf_error()
        self.ref, self.err_ref = ctypes.byref(self.args), ctypes.byref(self.err)
        self.n = (n_dims, n_in, n_out, n_params)

    def fill(self, dims, inputs, outputs, params, stream):
        nd, ni, no, np_ = self.n
        self.dims[:nd] = dims
        self.inputs[:ni] = inputs
        self.outputs[:no] = outputs
        if np_:
            self.params[:np_] = params
        self.args.stream = stream or None


def reference_run(graph, dims, inputs, out_sizes, params=()):
    """cf_reference_run: the graph in float64 on the CPU.  inputs are host pointers
    (ints) to row-major data in each input's declared dtype; returns one list of floats
    per output (out_sizes[i] values)."""
    lib = L.lib()
    d = (ctypes.c_int64 * len(dims))(*dims)
    i = (ctypes.c_void_p * max(1, len(inputs)))(*inputs)
    outs = [(ctypes.c_double * n)() for n in out_sizes]
    optr = (ctypes.POINTER(ctypes.c_double) * max(1, len(outs)))(
        *[ctypes.cast(o, ctypes.POINTER(ctypes.c_double)) for o in outs])
    p = (ctypes.c_double * max(1, len(params)))(*params)
    b = L.cf_bindings(d, i, p)
    err = L.cf_error()
    _check(lib.cf_reference_run(graph.handle, ctypes.byref(b), optr, ctypes.byref(err)), err)
    return [list(o) for o in outs]
