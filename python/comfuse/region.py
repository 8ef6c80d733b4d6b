"""Finding GEMM + epilogue regions in an FX graph and translating them to a cf_graph.

A region starts at a matmul (`@`, torch.matmul, torch.mm, F.linear, nn.Linear) whose
operands are computed outside it, and grows, in graph order, over every node that
consumes a region value and that the fusion domain can express: elementwise ops and
activations, row reductions over the last dim, LayerNorm / RMSNorm / softmax /
log_softmax (decomposed into the primitives of CF_OPS in comfuse.h), casts, eval-mode dropout.
Every other operand must be a tensor computed outside the region that broadcasts as a
scalar, an [N] row vector (bias, gamma), an [M] column (keepdim statistics) or a full
[M, N] tile (a residual).  Values are classified by shape:

    TILE   lead + (N,)        VEC_M  lead + (1,) (keepdim) or lead        VEC_N  (N,)

where lead is the matmul's X.shape[:-1] (M = its product).

A dual GEMM: a second matmul reading the same X, with weights of the same shape, layout
and dtype (LLaMA's gate_proj and up_proj), joins the region when the two results meet in
an elementwise node the region absorbs (silu(a) * b, gelu(a) * b, any f(a) op g(b)); the
cf_graph then has inputs X, W, W2 and both GEMMs enter one epilogue (Φ's dual GEMM).  A
matmul that repeats the region's own GEMM (lin(x) written twice) is read as that GEMM's
value.  Nothing here needs a GPU.
"""
import operator

import torch
import torch.nn.functional as F

from . import capi

TILE, VEC_M, VEC_N, SCALAR = "tile", "vec_m", "vec_n", "scalar"
PARAM = "param"        # a scalar computed at run time (dynamo's SymFloat eps): a cf param
DT = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


class NotFusible(Exception):
    """A node or region outside the domain; the message is the one-line reason."""


# ---- shape queries: metadata, not values -----------------------------------
# `F.layer_norm(h, (h.shape[-1],), ...)` reads h's shape, not its values: symbolic_trace records
# getattr(h, "shape") then getitem(., -1) (or h.size(-1)).  Such a query of a region value
# neither ends the region nor makes the value an output; the rewrite answers it from the GEMM's
# operands (h's last dim is W's N, the others are X's).

def whole_shape(node):
    """t when node is getattr(t, "shape") or t.size(), else None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if (node.op == "call_function" and node.target is getattr and node.args[1:] == ("shape",)) or \
            (node.op == "call_method" and node.target == "size" and len(node.args) == 1 and not node.kwargs):
        return node.args[0]
    return None


def tail_slice(node):
    """t when node is t.shape[-1:] (the last dim as a one-entry shape), else None."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is operator.getitem):
        return None
    t, sl = whole_shape(node.args[0]), node.args[1]
    m = meta(t) if t is not None else None
    if m is None or not isinstance(sl, slice) or sl.stop is not None or sl.step not in (None, 1):
        return None
    return t if sl.start in (-1, len(m[0]) - 1) else None


def shape_base(node):
    """The tensor whose shape node queries when node is t.shape or t.size(), every use of which
    is an integer-indexed dim or the last dim as a shape (t.shape[-1:]), or t.size(i); else None."""
    t = whole_shape(node)
    if t is not None and node.users and all(
            u.op == "call_function" and u.target is operator.getitem and
            (isinstance(u.args[1], int) or tail_slice(u) is t) for u in node.users):
        return t
    if isinstance(node, torch.fx.Node) and node.op == "call_method" and node.target == "size" and \
            len(node.args) == 2 and isinstance(node.args[1], int):
        return node.args[0]
    return None


def shape_dim(node):
    """(t, i) when node is one dim of t's shape (t.shape[i], t.size()[i], t.size(i)), else None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "call_method" and node.target == "size" and len(node.args) == 2:
        b = shape_base(node)
        return (b, node.args[1]) if b is not None else None
    if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[1], int) and \
            shape_base(node.args[0]) is not None:
        return shape_base(node.args[0]), node.args[1]
    return None


def is_shape_query(node):
    """node reads only a tensor's shape (t.shape, t.size(), t.size(i), an index or slice of one)."""
    return whole_shape(node) is not None or shape_dim(node) is not None or tail_slice(node) is not None


# ---- shapes and dtypes from node metadata ---------------------------------

def _tok(d):
    if isinstance(d, int):
        return d
    try:
        return int(d)            # a SymInt with a hint is still symbolic: keep it so
    except Exception:
        pass
    return ("sym", str(d))


def meta(node):
    """(shape tokens, dtype) of a node's tensor value, or None when not a tensor."""
    if not isinstance(node, torch.fx.Node):
        return None
    v = node.meta.get("example_value", node.meta.get("val"))
    if isinstance(v, torch.Tensor):
        return tuple(_sym_tok(d) for d in v.shape), v.dtype
    tm = node.meta.get("tensor_meta")
    if tm is not None and hasattr(tm, "shape"):
        return tuple(_sym_tok(d) for d in tm.shape), tm.dtype
    return None


def _sym_tok(d):
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        try:
            from torch.fx.experimental.symbolic_shapes import is_concrete_int
            if is_concrete_int(d):
                return int(d)
        except ImportError:
            pass
        return ("sym", str(d))
    return _tok(d)


def is_scalar_node(node):
    """A node whose value is a Python number at run time (dynamic=True makes float
    attributes such as eps graph inputs)."""
    v = node.meta.get("example_value", node.meta.get("val"))
    return isinstance(v, (float, int, torch.SymFloat, torch.SymInt)) and not isinstance(v, bool)


def _static(d):
    return isinstance(d, int)


# ---- what each FX node computes ---------------------------------------------

_UNARY_FN = {
    torch.neg: "neg", operator.neg: "neg", torch.abs: "abs", operator.abs: "abs", torch.exp: "exp",
    torch.log: "log", torch.sqrt: "sqrt", torch.rsqrt: "rsqrt", torch.square: "square",
    torch.reciprocal: "reciprocal", torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid",
    F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh", F.silu: "silu",
}
_UNARY_METHOD = {"neg": "neg", "abs": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
                 "square": "square", "reciprocal": "reciprocal", "relu": "relu", "sigmoid": "sigmoid",
                 "tanh": "tanh"}
_BINARY_FN = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", torch.subtract: "sub",
    operator.mul: "mul", torch.mul: "mul", torch.multiply: "mul", operator.truediv: "div",
    torch.div: "div", torch.true_divide: "div", torch.maximum: "max", torch.minimum: "min",
    torch.pow: "pow", operator.pow: "pow", torch.rsub: "rsub",
}
_BINARY_METHOD = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "true_divide": "div",
                  "maximum": "max", "minimum": "min", "pow": "pow", "__rsub__": "rsub", "rsub": "rsub"}
_REDUCE = {"sum": "sum", "mean": "mean", "amax": "rmax", "amin": "rmin"}
_IDENTITY_METHOD = {"float", "half", "bfloat16", "to", "type", "type_as", "contiguous", "clone"}
_DTYPE_METHOD = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}


def _gelu_fns():
    fns = {F.gelu}
    try:
        fns.add(torch._C._nn.gelu)
    except AttributeError:
        pass
    return fns


def _linear_fns():
    fns = {F.linear}
    try:
        fns.add(torch._C._nn.linear)
    except AttributeError:
        pass
    return fns


_GELU = _gelu_fns()
_LINEAR = _linear_fns()
_RMS_NORM = {getattr(F, "rms_norm", None), getattr(torch, "rms_norm", None)} - {None}
_LAYER_NORM = {F.layer_norm, torch.layer_norm}
_SOFTMAX = {torch.softmax, F.softmax, torch.special.softmax}
_LOG_SOFTMAX = {torch.log_softmax, F.log_softmax, torch.special.log_softmax}
_DROPOUT = {F.dropout, torch.dropout}


def _arg(node, i, name, default=None):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _last_dim(dim, rank):
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return isinstance(dim, int) and (dim == -1 or dim == rank - 1)


class Step:
    """One node's computation: kind in matmul/unary/binary/reduce/identity/layer_norm/
    rms_norm/softmax/log_softmax/squeeze_in; operands are Nodes or Python numbers."""

    def __init__(self, kind, op=None, operands=(), **attrs):
        self.kind, self.op, self.operands, self.attrs = kind, op, list(operands), attrs


def describe(node):
    """The Step a node computes, or NotFusible naming why it is outside the domain."""
    t, a = node.target, node.args
    m = meta(node)
    rank = len(m[0]) if m else 0
    what = _node_desc(node)
    if node.op == "call_function":
        if t in (operator.matmul, torch.matmul, torch.mm):
            return Step("matmul", operands=a[:2], layout="kn")
        if t in _LINEAR:
            return Step("matmul", operands=[a[0], a[1], _arg(node, 2, "bias")], layout="nk")
        if t in _UNARY_FN:
            if node.kwargs.get("inplace") or (t is F.relu and len(a) > 1 and a[1]):
                raise NotFusible("%s is in-place" % what)
            return Step("unary", _UNARY_FN[t], a[:1])
        if t in _GELU:
            approx = _arg(node, 1, "approximate", "none")
            return Step("unary", "gelu" if approx == "tanh" else "gelu_erf", a[:1])
        if t in _BINARY_FN:
            alpha = node.kwargs.get("alpha", 1)
            if node.kwargs.get("rounding_mode") is not None:
                raise NotFusible("%s uses rounding_mode" % what)
            return Step("binary", _BINARY_FN[t], a[:2], alpha=alpha)
        if t in (torch.clamp, torch.clip):
            return Step("clamp", operands=a[:1], lo=_arg(node, 1, "min"), hi=_arg(node, 2, "max"))
        if t in (torch.mean, torch.sum, torch.amax, torch.amin):
            return _reduce_step(node, t.__name__, a[0], _arg(node, 1, "dim"), _arg(node, 2, "keepdim", False))
        if t in _LAYER_NORM:
            return Step("layer_norm", operands=[a[0], _arg(node, 2, "weight"), _arg(node, 3, "bias")],
                        shape=_arg(node, 1, "normalized_shape"), eps=_arg(node, 4, "eps", 1e-5))
        if t in _RMS_NORM:
            return Step("rms_norm", operands=[a[0], _arg(node, 2, "weight")],
                        shape=_arg(node, 1, "normalized_shape"), eps=_arg(node, 3, "eps"))
        if t in _SOFTMAX or t in _LOG_SOFTMAX:
            if not _last_dim(_arg(node, 1, "dim"), rank):
                raise NotFusible("%s is not over the last dim" % what)
            return Step("softmax" if t in _SOFTMAX else "log_softmax", operands=a[:1])
        if t in _DROPOUT:
            p, train = _arg(node, 1, "p", 0.5), _arg(node, 2, "training", True)
            if train and p:
                raise NotFusible("%s is training-mode dropout" % what)
            return Step("identity", operands=a[:1])
        if t is torch.unsqueeze:
            return Step("unsqueeze", operands=a[:1], dim=_arg(node, 1, "dim"))
        raise NotFusible("%s is outside the fusion domain" % what)
    if node.op == "call_method":
        if t.endswith("_") and not t.startswith("__"):
            raise NotFusible("%s is in-place" % what)
        if t in ("matmul", "mm", "__matmul__"):
            return Step("matmul", operands=a[:2], layout="kn")
        if t in _UNARY_METHOD:
            return Step("unary", _UNARY_METHOD[t], a[:1])
        if t in _BINARY_METHOD:
            return Step("binary", _BINARY_METHOD[t], a[:2], alpha=node.kwargs.get("alpha", 1))
        if t in ("clamp", "clip"):
            return Step("clamp", operands=a[:1], lo=_arg(node, 1, "min"), hi=_arg(node, 2, "max"))
        if t in _REDUCE:
            return _reduce_step(node, t, a[0], _arg(node, 1, "dim"), _arg(node, 2, "keepdim", False))
        if t in ("softmax", "log_softmax"):
            if not _last_dim(_arg(node, 1, "dim"), rank):
                raise NotFusible("%s is not over the last dim" % what)
            return Step(t, operands=a[:1])
        if t in _IDENTITY_METHOD:
            return _cast_step(node)
        if t == "unsqueeze":
            return Step("unsqueeze", operands=a[:1], dim=_arg(node, 1, "dim"))
        raise NotFusible("%s is outside the fusion domain" % what)
    raise NotFusible("%s is outside the fusion domain" % what)


def _reduce_step(node, name, x, dim, keepdim):
    xm = meta(x)
    if not xm or not _last_dim(dim, len(xm[0])):
        raise NotFusible("%s does not reduce over the last dim only" % _node_desc(node))
    if node.kwargs.get("dtype") not in (None, torch.float32, torch.bfloat16, torch.float16):
        raise NotFusible("%s accumulates in %s" % (_node_desc(node), node.kwargs.get("dtype")))
    return Step("reduce", _REDUCE[name], [x], keepdim=bool(keepdim))


def _cast_step(node):
    """.float() / .to(dtype) / .type_as(t) / .contiguous(): values are f32 inside the
    kernel, so a cast is the identity there (the region's outputs are stored in their
    own dtype).  .to(device) or a copy to another layout is not a cast."""
    t = node.target
    for x in list(node.args[1:]) + list(node.kwargs.values()):
        if isinstance(x, torch.dtype) or x is None or isinstance(x, bool):
            continue
        if t == "type_as" and isinstance(x, torch.fx.Node):
            continue
        if isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target is getattr \
                and x.args[1:] == ("dtype",):
            continue      # x.to(t.dtype), as symbolic_trace records it
        if t == "contiguous" and x == torch.contiguous_format:
            continue
        raise NotFusible("%s is not a plain dtype cast" % _node_desc(node))
    return Step("identity", operands=node.args[:1])


def _node_desc(node):
    t = node.target
    name = t if isinstance(t, str) else getattr(t, "__name__", str(t))
    return "'%s' (%s %s)" % (node.name, node.op.replace("call_", ""), name)


# ---- normalising nn.Module calls (symbolic_trace keeps them as leaves) ------

def normalize_modules(gm):
    """Rewrites call_module nodes of the leaf modules we fuse into the functional
    form with get_attr nodes for their parameters, so matching sees one form."""
    mods = dict(gm.named_modules())
    g = gm.graph
    for node in list(g.nodes):
        _fold_dtype_query(g, node)
        if node.op != "call_module":
            continue
        mod = mods.get(node.target)
        rep = _module_call(g, node, mod)
        if rep is not None:
            rep.meta = dict(node.meta)
            node.replace_all_uses_with(rep)
            g.erase_node(node)
    g.lint()
    gm.recompile()


def _fold_dtype_query(g, node):
    """t.dtype (a getattr node under symbolic_trace) becomes the constant dtype, so a
    later .to(t.dtype) is a plain cast and does not read t's values."""
    if node.op != "call_function" or node.target is not getattr or node.args[1:] != ("dtype",):
        return
    m = meta(node.args[0])
    if m is None:
        return
    for u in list(node.users):
        u.args = torch.fx.node.map_arg(u.args, lambda a: m[1] if a is node else a)
        u.kwargs = torch.fx.node.map_arg(u.kwargs, lambda a: m[1] if a is node else a)
    g.erase_node(node)


def _module_call(g, node, mod):
    nn = torch.nn
    x = node.args[0] if node.args else None

    def attr(name):
        p = getattr(mod, name, None)
        if p is None:
            return None
        a = g.get_attr(node.target + "." + name)
        a.meta["val"] = p.detach()
        return a

    with g.inserting_before(node):
        if isinstance(mod, nn.Linear):
            return g.call_function(F.linear, (x, attr("weight"), attr("bias")))
        if isinstance(mod, nn.LayerNorm):
            return g.call_function(F.layer_norm, (x, tuple(mod.normalized_shape), attr("weight"), attr("bias"),
                                                  mod.eps))
        if hasattr(nn, "RMSNorm") and isinstance(mod, nn.RMSNorm) and hasattr(F, "rms_norm"):
            return g.call_function(F.rms_norm, (x, tuple(mod.normalized_shape), attr("weight"), mod.eps))
        if isinstance(mod, nn.GELU):
            return g.call_function(F.gelu, (x,), {"approximate": mod.approximate})
        simple = {nn.ReLU: F.relu, nn.SiLU: F.silu, nn.Sigmoid: torch.sigmoid, nn.Tanh: torch.tanh}
        for cls, fn in simple.items():
            if type(mod) is cls and not getattr(mod, "inplace", False):
                return g.call_function(fn, (x,))
        if isinstance(mod, nn.Softmax):
            return g.call_function(torch.softmax, (x, mod.dim))
        if isinstance(mod, nn.LogSoftmax):
            return g.call_function(torch.log_softmax, (x, mod.dim))
        if isinstance(mod, nn.Dropout) and not mod.inplace:
            return g.call_function(F.dropout, (x, mod.p, mod.training))
        if isinstance(mod, nn.Identity):
            return g.call_function(torch.nn.functional.dropout, (x, 0.0, False))
    return None


# ---- regions ------------------------------------------------------------------

class Region:
    """A matmul (or a dual GEMM's two) and the epilogue nodes fused with it.

    nodes: region nodes in graph order (the matmul first; a dual GEMM's second matmul,
    mm2, next); inputs: external operand nodes in cf input order (X, W, [W2,] then first
    use), roles[i] what input i is ("X", "W", "W2", TILE, VEC_M, VEC_N): a node may be
    both X and a residual; outputs: region nodes read outside.  cls[n]: TILE / VEC_M of
    every region node; in_cls[e]: the class of an external read by the epilogue.
    """

    def __init__(self, index, mm):
        self.index = index
        self.mm = mm
        self.nodes = [mm]
        self.cls = {mm: TILE}
        self.keep = {mm: True}        # VEC_M values: shape lead + (1,) (True) or lead
        self.steps = {}
        self.inputs = []
        self.roles = []
        self.in_cls = {}
        self.outputs = []
        self.N = self.K = None
        self.dtype = None             # of the GEMM operands
        self.lead = None
        self.reason = None            # why it is not fused (None: fusible)
        self.tail_reason = None       # why the region stops where it does
        self.graph = None             # capi.Graph once translated
        self.recipe = None            # hashable description: the kernel cache key
        self.wt_node = None           # x @ w.t(): the .t() node the matmul reads
        self.mm2 = None               # a dual GEMM's second matmul (X @ W2), nodes[1]
        self.wt_node2 = None          # its .t() node
        self.min_end = 2              # plan keeps at least nodes[:min_end] (a dual: its combination)
        self.dual_notes = []          # why mm did not pair with a matmul over the same X
        self.planned = False
        self.alias = {}               # a matmul that repeats one of the region's GEMMs -> that GEMM

    def substitute(self, old, new):
        """An external input was replaced (another region's output became a getitem)."""
        self.inputs = [new if e is old else e for e in self.inputs]
        if old in self.in_cls:
            self.in_cls[new] = self.in_cls.pop(old)
        for s in self.steps.values():
            s.operands = [new if o is old else o for o in s.operands]
        if self.wt_node is old:
            self.wt_node = new
        if self.wt_node2 is old:
            self.wt_node2 = new

    def gemms(self):
        return [self.mm] if self.mm2 is None else [self.mm, self.mm2]

    def n_gemm_inputs(self):
        """X, W (and W2): the leading cf inputs."""
        return 2 if self.mm2 is None else 3

    def dual_names(self):
        """The two projections' names (from their weights) of a dual GEMM, else None."""
        if self.mm2 is None:
            return None
        return [gemm_name(m, self.steps[m]) for m in self.gemms()]

    def label(self):
        parts = []
        for n in self.nodes:
            if n is self.mm2:
                continue
            s = self.steps.get(n)
            parts.append(s.op if s is not None and s.op else (s.kind if s is not None else n.name))
        head = ["linear" if self.steps[m].attrs.get("layout") == "nk" else "matmul"
                for m in self.gemms() if m in self.steps]
        return "->".join(["+".join(head)] + parts[1:])


def gemm_name(mm, step):
    """A readable name for a matmul: its weight's module path tail (gate_proj), from a
    get_attr target (mlp.gate_proj.weight) or a dynamo placeholder
    (l_self_modules_mlp_modules_gate_proj_parameters_weight_); else the node's name."""
    w = step.operands[1] if len(step.operands) > 1 else None
    if not isinstance(w, torch.fx.Node):
        return mm.name
    if w.op == "get_attr" and isinstance(w.target, str):
        parts = w.target.split(".")
        return parts[-2] if len(parts) > 1 and parts[-1] == "weight" else parts[-1]
    name = w.name
    if "_parameters_" in name:
        return name.split("_parameters_")[0].split("_modules_")[-1]
    return name.strip("_")[2:] if name.startswith("l_") else name


def _wt_source(w):
    """x @ w.t(): the matmul reads w ([N, K]) transposed; returns (node, layout)."""
    if isinstance(w, torch.fx.Node):
        tr = (w.op == "call_method" and w.target in ("t", "T")) or \
             (w.op == "call_function" and w.target in (torch.t,))
        if not tr and w.op in ("call_method", "call_function") and w.target in ("transpose", torch.transpose):
            dims = tuple(w.args[1:3])
            tr = dims in ((0, 1), (1, 0), (-1, -2), (-2, -1))
        if tr:
            src = w.args[0]
            sm = meta(src)
            if sm and len(sm[0]) == 2:
                return src, "nk"
    return w, "kn"


def _gemm_shape(mm, step):
    """(w source, wt node, N, K, dtype, lead) of a matmul step, normalising x @ w.t() to an
    [N, K] weight (step is updated); NotFusible outside what the GEMM takes."""
    x, w = step.operands[0], step.operands[1]
    wt = None
    if step.attrs["layout"] == "kn":
        w0 = w
        w, layout = _wt_source(w)
        if w is not w0:
            wt = w0            # the fallback sub-graph recomputes the transpose view
        step.attrs["layout"] = layout
        step.operands[1] = w
    xm, wm = meta(x), meta(w)
    if xm is None or wm is None:
        raise NotFusible("matmul operands have no shape information")
    if len(xm[0]) < 2 or len(wm[0]) != 2:
        raise NotFusible("matmul of shapes %s x %s: only [.., K] x 2-D weights fuse" % (list(xm[0]), list(wm[0])))
    if xm[1] not in (torch.bfloat16, torch.float16) or wm[1] != xm[1]:
        raise NotFusible("matmul operands are %s x %s; the tensor-core GEMM takes bf16 or f16, both alike"
                         % (xm[1], wm[1]))
    K = xm[0][-1]
    N, Kw = (wm[0][0], wm[0][1]) if step.attrs["layout"] == "nk" else (wm[0][1], wm[0][0])
    if not _static(K) and _static(Kw):
        K = Kw          # a dynamic X whose K the weight fixes (each call checks x.shape[-1])
    if not (_static(K) and _static(N)) or K != Kw:
        raise NotFusible("N and K must be static and agree (got K=%s, W %s)" % (K, list(wm[0])))
    return w, wt, N, K, xm[1], xm[0][:-1]


def start_region(index, mm, step):
    r = Region(index, mm)
    r.steps[mm] = step
    w, r.wt_node, r.N, r.K, r.dtype, r.lead = _gemm_shape(mm, step)
    r.inputs = [step.operands[0], w]
    r.roles = ["X", "W"]
    bias = step.operands[2] if len(step.operands) > 2 else None
    if bias is not None:
        _classify_external(r, bias, TILE, mm)
    return r


def add_second_gemm(r, mm2, step2):
    """Makes r (a fresh region of r.mm alone) a dual GEMM with mm2, a matmul over the same X:
    NotFusible when the two GEMMs differ in N, K, dtype or weight layout, or W2 is computed."""
    w2, wt2, N, K, dt, lead = _gemm_shape(mm2, step2)
    step = r.steps[r.mm]
    if (N, K, dt, lead) != (r.N, r.K, r.dtype, r.lead):
        raise NotFusible("'%s' is %sx%s %s, '%s' %sx%s %s" % (r.mm.name, r.N, r.K, DT.get(r.dtype), mm2.name, N, K,
                                                             DT.get(dt)))
    if step2.attrs["layout"] != step.attrs["layout"]:
        raise NotFusible("'%s' and '%s' hold their weights in different layouts ([N, K] and [K, N]); a dual GEMM "
                         "takes one" % (r.mm.name, mm2.name))
    if not isinstance(w2, torch.fx.Node) or w2.op not in ("placeholder", "get_attr"):
        raise NotFusible("the weight of '%s' is computed ('%s'); a dual GEMM's weights are inputs"
                         % (mm2.name, getattr(w2, "name", w2)))
    r.mm2, r.wt_node2 = mm2, wt2
    r.nodes.insert(1, mm2)
    r.steps[mm2] = step2
    r.cls[mm2] = TILE
    r.keep[mm2] = True
    # W2 is the third cf input: after X and W, before the first bias
    r.inputs.insert(2, w2)
    r.roles.insert(2, "W2")
    bias2 = step2.operands[2] if len(step2.operands) > 2 else None
    if bias2 is not None:
        _classify_external(r, bias2, TILE, mm2)


def _classify_external(r, e, against, at):
    """Class of external operand e combined with a region value of class `against`."""
    if not isinstance(e, torch.fx.Node):
        if isinstance(e, (int, float)) and not isinstance(e, bool):
            return SCALAR
        raise NotFusible("%s has a non-numeric operand %r" % (_node_desc(at), e))
    em = meta(e)
    if em is None and is_scalar_node(e):
        if e not in r.in_cls:
            r.in_cls[e] = PARAM
            r.inputs.append(e)
            r.roles.append(PARAM)
        return SCALAR
    if em is None:
        raise NotFusible("%s reads '%s', which is not a tensor" % (_node_desc(at), e.name))
    shape, dt = em
    if dt not in DT:
        raise NotFusible("%s reads '%s' of dtype %s" % (_node_desc(at), e.name, dt))
    lead = r.lead
    if shape == lead + (r.N,):
        c = TILE
    elif shape == lead + (1,) and r.N != 1:
        c = VEC_M
    elif len(shape) >= 1 and shape[-1] == r.N and all(d == 1 for d in shape[:-1]) and len(shape) <= len(lead) + 1:
        c = VEC_N
    else:
        raise NotFusible("%s reads '%s' of shape %s, which is not a scalar, [N], [M] or [M, N] operand of the "
                         "GEMM output %s" % (_node_desc(at), e.name, list(shape), list(lead + (r.N,))))
    if against == VEC_M and c == VEC_N:
        raise NotFusible("%s combines a per-row value with an [N] vector" % _node_desc(at))
    if e in r.in_cls and r.in_cls[e] != c:
        raise NotFusible("'%s' is read both as %s and as %s" % (e.name, r.in_cls[e], c))
    # (an X or W node read again by the epilogue is a second cf input on the same pointer)
    if e not in r.in_cls:
        r.in_cls[e] = c
        r.inputs.append(e)
        r.roles.append(c)
    return c


def _combine(a, b):
    if TILE in (a, b):
        return TILE
    if VEC_N in (a, b):
        return VEC_N
    if VEC_M in (a, b):
        return VEC_M
    return SCALAR


_WIDENS = {(torch.bfloat16, torch.float32), (torch.float16, torch.float32)}
_CASTS = {"float", "to", "type", "type_as", "half", "bfloat16"}


def widened_source(e):
    """The tensor an external operand is an exact cast of (r.float() of a bf16 residual), else
    e.  Values are f32 inside the kernel, which widens a narrow input as it loads it: reading
    the source saves PyTorch writing an f32 copy and the kernel reading twice the bytes."""
    while isinstance(e, torch.fx.Node) and e.op == "call_method" and e.target in _CASTS:
        src, em = e.args[0], meta(e)
        sm = meta(src)
        if em is None or sm is None or sm[0] != em[0] or not (sm[1] == em[1] or (sm[1], em[1]) in _WIDENS):
            break
        try:
            if describe(e).kind != "identity":
                break
        except NotFusible:
            break
        e = src
    return e


def try_absorb(r, node, step):
    """Adds node to r when it fits the domain; NotFusible otherwise (r unchanged)."""
    nm = meta(node)
    if nm is None or nm[1] not in DT:
        raise NotFusible("%s produces %s, not a bf16/f16/f32 tensor" % (_node_desc(node), nm and nm[1]))
    step.operands = [o if o in r.cls else widened_source(o) for o in step.operands]
    ops = step.operands
    in_r = [o for o in ops if isinstance(o, torch.fx.Node) and o in r.cls]
    if not in_r:
        raise NotFusible("%s reads no region value" % _node_desc(node))
    base = r.cls[in_r[0]]
    for o in in_r:
        base = _combine(base, r.cls[o])
    if base == VEC_N:
        raise NotFusible("%s mixes per-row and per-column values" % _node_desc(node))
    saved = list(r.inputs), list(r.roles), dict(r.in_cls)
    try:
        cls = _check_step(r, node, step, base, nm)
    except NotFusible:
        r.inputs, r.roles, r.in_cls = list(saved[0]), list(saved[1]), dict(saved[2])
        raise
    r.nodes.append(node)
    r.steps[node] = step
    r.cls[node] = cls
    if cls == VEC_M:
        r.keep[node] = len(nm[0]) == len(r.lead) + 1
    return cls


def _expect_shape(r, node, nm, cls, keep=True):
    want = r.lead + (r.N,) if cls == TILE else (r.lead + (1,) if keep else r.lead)
    if nm[0] != want:
        raise NotFusible("%s has shape %s, expected %s" % (_node_desc(node), list(nm[0]), list(want)))


def _check_step(r, node, step, base, nm):
    k = step.kind
    ops = step.operands
    if k == "matmul":
        raise NotFusible("%s is a second GEMM (regions hold one)" % _node_desc(node))
    if k in ("unary", "identity"):
        cls = base
        if cls == VEC_M:
            _expect_shape(r, node, nm, cls, r.keep[ops[0]])
        else:
            _expect_shape(r, node, nm, cls)
        return cls
    if k == "unsqueeze":
        if base != VEC_M or r.keep[ops[0]] or step.attrs["dim"] not in (-1, len(r.lead)):
            raise NotFusible("%s is a reshape" % _node_desc(node))
        return VEC_M
    if k in ("binary", "clamp"):
        cls = base
        for o in ops:
            if isinstance(o, torch.fx.Node) and o in r.cls:
                continue
            if o is None:
                continue
            cls = _combine(cls, _classify_external(r, o, base, node))
        for o in (step.attrs.get("lo"), step.attrs.get("hi")):
            if o is not None and not isinstance(o, (int, float)):
                raise NotFusible("%s clamps to a tensor bound" % _node_desc(node))
        if k == "binary" and step.op == "pow":
            if not (isinstance(ops[1], (int, float)) and ops[0] in r.cls):
                raise NotFusible("%s: pow needs a region base and a constant exponent" % _node_desc(node))
        if not isinstance(step.attrs.get("alpha", 1), (int, float)):
            raise NotFusible("%s has a tensor alpha" % _node_desc(node))
        if cls == VEC_M:
            keeps = {r.keep[o] for o in ops if isinstance(o, torch.fx.Node) and o in r.cls}
            keeps |= {True for o in ops if isinstance(o, torch.fx.Node) and r.in_cls.get(o) == VEC_M}
            if len(keeps) != 1:
                raise NotFusible("%s mixes keepdim and squeezed row values" % _node_desc(node))
            _expect_shape(r, node, nm, cls, keeps.pop())
        else:
            _expect_shape(r, node, nm, cls)
        return cls
    if k == "reduce":
        if base != TILE:
            raise NotFusible("%s reduces a per-row value" % _node_desc(node))
        _expect_shape(r, node, nm, VEC_M, step.attrs["keepdim"])
        return VEC_M
    if k in ("softmax", "log_softmax", "layer_norm", "rms_norm"):
        if base != TILE or ops[0] not in r.cls:
            raise NotFusible("%s is not applied to the GEMM output" % _node_desc(node))
        if k in ("layer_norm", "rms_norm"):
            shp = _norm_shape(r, step.attrs["shape"], ops[1:])
            if shp != [r.N]:
                raise NotFusible("%s normalises over %s, not the last dim [%d]" % (_node_desc(node), shp, r.N))
            for o in ops[1:]:
                if o is not None and _classify_external(r, o, TILE, node) != VEC_N:
                    raise NotFusible("%s has an affine parameter that is not [N]" % _node_desc(node))
            eps = step.attrs.get("eps")
            if eps is not None and not isinstance(eps, (int, float)):
                raise NotFusible("%s has a non-constant eps" % _node_desc(node))
        _expect_shape(r, node, nm, TILE)
        return TILE
    raise NotFusible("%s is outside the fusion domain" % _node_desc(node))


def find_regions(gm):
    """All regions of gm's graph, each grown greedily; regions never overlap.  A matmul
    whose X another matmul reads too, the two results meeting in an elementwise
    combination that Φ accepts, becomes one dual-GEMM region (planned here already: a
    declined pairing leaves the matmul to grow alone)."""
    regions = []
    taken = set()
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for mm in gm.graph.nodes:
        if mm in taken or mm.op not in ("call_function", "call_method"):
            continue
        try:
            step = describe(mm)
        except NotFusible:
            continue
        if step.kind != "matmul":
            continue
        try:
            r = start_region(len(regions), mm, step)
        except NotFusible as e:
            r = Region(len(regions), mm)
            r.steps[mm] = step
            r.reason = str(e)
            regions.append(r)
            continue
        dual, notes = _find_dual(len(regions), mm, gm, order, taken)
        if dual is not None:
            r = dual
        else:
            _grow(r, gm, order, taken)
        r.dual_notes = notes
        taken.update(r.nodes)
        regions.append(r)
    return regions


def _find_dual(index, mm, gm, order, taken):
    """(the planned dual region of mm with a later matmul over the same X, or None;
    one line per pairing that met in a combination but was declined)."""
    notes = []
    x = describe(mm).operands[0]
    if not isinstance(x, torch.fx.Node):
        return None, notes
    for mm2 in sorted(x.users, key=lambda n: order[n]):
        if mm2 in taken or order[mm2] <= order[mm] or mm2.op not in ("call_function", "call_method"):
            continue
        try:
            step2 = describe(mm2)
        except NotFusible:
            continue
        if step2.kind != "matmul" or step2.operands[0] is not x:
            continue
        r = start_region(index, mm, describe(mm))
        if duplicate_gemm(r, mm2) is not None:
            continue               # lin(x) twice: the region reads mm's value again
        try:
            add_second_gemm(r, mm2, step2)
        except NotFusible as e:
            r = None
            why = str(e)
        if r is not None:
            _grow(r, gm, order, taken)
            meet = _meet_index(r)
            if meet is None:
                continue           # q/k/v over one X: nothing combines them elementwise
            r.min_end = meet + 1
            plan(r, gm)
            if not r.reason:
                return r, notes
            why = r.reason
        elif "different layouts" not in why and "is computed" not in why:
            continue               # another shape: no elementwise combination is possible
        name = gemm_name(mm2, step2)
        notes.append("no dual GEMM with '%s': %s" % (name, why))
    return None, notes


def _meet_index(r):
    """Index in r.nodes of the first node computed from both GEMMs of a dual region."""
    dep = {r.mm: 1, r.mm2: 2}
    for i, n in enumerate(r.nodes):
        if n in dep:
            continue
        d = 0
        for o in r.steps[n].operands:
            if isinstance(o, torch.fx.Node):
                d |= dep.get(o, 0)
        dep[n] = d
        if d == 3:
            return i
    return None


def _operand_key(a):
    """Two get_attr nodes of one parameter (normalize_modules makes one per module call) are one operand."""
    if isinstance(a, torch.fx.Node) and a.op == "get_attr":
        return ("get_attr", a.target)
    return a


def _gemm_key(step):
    w, layout = step.operands[1], step.attrs["layout"]
    if layout == "kn":
        w, layout = _wt_source(w)
    bias = step.operands[2] if len(step.operands) > 2 else None
    return (_operand_key(step.operands[0]), _operand_key(w), _operand_key(bias), layout)


def duplicate_gemm(r, node):
    """The GEMM of r that node computes again (lin(x) called twice: the same X, weight and
    bias), or None.  The region reads the repeat as that GEMM's value."""
    if node.op not in ("call_function", "call_method") or r.inputs[0] not in node.all_input_nodes:
        return None
    try:
        step = describe(node)
    except NotFusible:
        return None
    if step.kind != "matmul":
        return None
    key = _gemm_key(step)
    for mm in r.gemms():
        if _gemm_key(r.steps[mm]) == key:
            return mm
    return None


def _absorb_duplicate(r, node, mm):
    r.nodes.append(node)
    r.steps[node] = Step("identity", operands=[mm])
    r.cls[node] = TILE
    r.keep[node] = True
    r.alias[node] = mm


def _grow(r, gm, order, taken):
    tainted = set()          # downstream of the region, outside it: must not feed it
    for node in gm.graph.nodes:
        if order[node] <= order[r.mm]:
            continue
        if node not in taken and node is not r.mm2:
            dup = duplicate_gemm(r, node)
            if dup is not None:
                _absorb_duplicate(r, node, dup)
                continue
        reads = [a for a in node.all_input_nodes]
        if not any(a in r.cls or a in tainted for a in reads):
            continue
        if shape_base(node) in r.cls:
            continue       # a shape query: metadata (see shape_base)
        if node.op == "output" or node in taken or any(a in tainted for a in reads):
            tainted.add(node)
            continue
        try:
            step = describe(node)
            for o in step.operands:
                if isinstance(o, torch.fx.Node) and o not in r.cls and o in tainted:
                    raise NotFusible("%s reads '%s', computed from the region outside it" % (_node_desc(node), o.name))
            try_absorb(r, node, step)
        except NotFusible as e:
            if r.tail_reason is None and "second GEMM" not in str(e):
                r.tail_reason = str(e)     # the next GEMM is a natural end: not worth a word
            tainted.add(node)


def _norm_shape(r, shp, affine):
    """A norm's normalized_shape as a list: ints, a region value's last dim (r.N) where it is
    queried (h.shape[-1], h.shape[-1:]), a region input's dims as traced (w.shape[1], g.shape),
    else the entries' names (which then do not match)."""
    if isinstance(shp, torch.fx.Node):
        t = tail_slice(shp)
        if t is not None and r.cls.get(t) == TILE:
            return [r.N]
        t = whole_shape(shp)
        if t is not None and (t in r.inputs or t in affine) and meta(t) is not None:
            return list(meta(t)[0])      # F.layer_norm(x, self.weight.shape, ...): gamma's [N]
        if shape_dim(shp) is None:
            return [shp.name]
        shp = [shp]
    elif isinstance(shp, int):
        shp = [shp]
    return [_dim_value(r, d) for d in shp]


def _is_weight_view(r, t):
    """t is the w.t() a matmul of the region reads (x @ w.t(), then w.t().shape[1] for N): its
    dims are the weight's, which the region's kernel key fixes."""
    return t is not None and t in (r.wt_node, r.wt_node2)


def _dim_value(r, d):
    """A normalised-shape entry: an int, or a region value's last dim queried (r.N)."""
    q = shape_dim(d)
    if q is None:
        return d.name if isinstance(d, torch.fx.Node) else d
    t, i = q
    m = meta(t)
    rank = len(m[0]) if m else None
    if t in r.cls and r.cls[t] == TILE and rank is not None and i in (-1, rank - 1):
        return r.N
    if (t in r.inputs or _is_weight_view(r, t)) and m is not None and -rank <= i < rank:
        return m[0][i]     # a dim of a region input (the weight's N, as w.shape[1]), as traced
    return "%s.shape[%d]" % (t.name, i)


def finish_region(r, gm):
    """Sets r.outputs (region values read outside it); None when nothing to fuse."""
    inside = set(r.nodes)
    r.outputs = [n for n in r.nodes if any(u not in inside and shape_base(u) is not n for u in n.users)]


def translate(r, gm=None):
    """Builds r.graph (a capi.Graph) and r.recipe; returns the graph."""
    g = capi.Graph()
    rec = []
    M, N, K = g.dim("M"), g.dim("N"), g.dim("K")
    dims_of = {TILE: [M, N], VEC_M: [M], VEC_N: [N]}
    dt = DT[r.dtype]
    step = r.steps[r.mm]
    val = {}
    x_v = g.input("X", dt, [M, K])
    w_dims = [N, K] if step.attrs["layout"] == "nk" else [K, N]
    w_v = g.input("W", dt, w_dims)
    rec += [("X", dt), ("W", dt, step.attrs["layout"])]
    if r.mm2 is not None:
        w2_v = g.input("W2", dt, w_dims)       # add_second_gemm checked: one shape, layout, dtype
        rec.append(("W2", dt, step.attrs["layout"]))
    base = r.n_gemm_inputs()
    for i, (e, c) in enumerate(zip(r.inputs[base:], r.roles[base:])):
        if c == PARAM:
            val[e] = g.param("p%d" % i)
            rec.append(("param",))
            continue
        edt = DT[meta(e)[1]]
        val[e] = g.input("in%d" % i, edt, dims_of[c])
        rec.append(("in", edt, c))
    def operand(o):
        if isinstance(o, torch.fx.Node):
            return val[o]
        rec.append(("const", float(o)))
        return g.const(o)

    # each record names its operands (cf values, numbered in build order), so the recipe --
    # the kernel cache key -- tells `h - r` from `r - h`
    def B(op, a, b):
        rec.append(("bin", op, a, b))
        return g.binary(op, a, b)

    def U(op, a):
        rec.append(("un", op, a))
        return g.unary(op, a)

    def R(op, a):
        rec.append(("red", op, a))
        return g.reduce(op, a, -1)

    def C(v):
        rec.append(("const", float(v)))
        return g.const(v)

    for mm, wv in zip(r.gemms(), (w_v, w2_v) if r.mm2 is not None else (w_v,)):
        s = r.steps[mm]
        acc = g.matmul(x_v, wv)
        rec.append(("mm", acc))
        if len(s.operands) > 2 and s.operands[2] is not None:
            acc = B("add", acc, val[s.operands[2]])
        val[mm] = acc
        g.set_name(acc, mm.name)
    for node in r.nodes[1:]:
        if node is r.mm2:
            continue
        s = r.steps[node]
        ops = s.operands
        k = s.kind
        if k in ("identity", "unsqueeze"):
            v = val[ops[0]]
        elif k == "unary":
            v = U(s.op, val[ops[0]])
        elif k == "clamp":
            v = val[ops[0]]
            if s.attrs["lo"] is not None:
                v = B("max", v, C(s.attrs["lo"]))
            if s.attrs["hi"] is not None:
                v = B("min", v, C(s.attrs["hi"]))
        elif k == "binary":
            a, b = ops[0], ops[1]
            op = s.op
            if op == "rsub":
                a, b, op = b, a, "sub"
            alpha = s.attrs.get("alpha", 1)
            if op == "pow" and b == 2:
                v = U("square", operand(a))
            elif op == "pow" and b == 0.5:
                v = U("sqrt", operand(a))
            else:
                bv = operand(b)
                if alpha != 1:
                    bv = B("mul", bv, C(alpha))
                v = B(op, operand(a), bv)
        elif k == "reduce":
            v = R(s.op, val[ops[0]])
        elif k == "softmax" or k == "log_softmax":
            xv = val[ops[0]]
            m = R("rmax", xv)
            d = B("sub", xv, m)
            if k == "softmax":
                e = U("exp", d)
                v = B("div", e, R("sum", e))
            else:
                v = B("sub", d, U("log", R("sum", U("exp", d))))
        elif k == "layer_norm":
            xv = val[ops[0]]
            d = B("sub", xv, R("mean", xv))
            var = R("mean", U("square", d))
            v = B("mul", d, U("rsqrt", B("add", var, C(s.attrs["eps"]))))
            if ops[1] is not None:
                v = B("mul", v, val[ops[1]])
            if ops[2] is not None:
                v = B("add", v, val[ops[2]])
        elif k == "rms_norm":
            xv = val[ops[0]]
            eps = s.attrs["eps"]
            if eps is None:
                eps = torch.finfo(meta(ops[0])[1]).eps
            v = B("mul", xv, U("rsqrt", B("add", R("mean", U("square", xv)), C(eps))))
            if ops[1] is not None:
                v = B("mul", v, val[ops[1]])
        else:
            raise NotFusible("internal: step %s" % k)
        val[node] = v
        rec.append(("=", r.nodes.index(node)))
        g.set_name(v, node.name)
    for i, o in enumerate(r.outputs):
        odt = DT[meta(o)[1]]
        g.output("out%d" % i, val[o], odt)
        rec.append(("out", r.nodes.index(o), odt))
    g.check()
    r.graph = g
    r.recipe = tuple(rec) + (("N", r.N), ("K", r.K))
    return g


def plan(r, gm):
    """Outputs, graph and Φ for a grown region.  When Φ rejects the whole region the
    longest prefix it accepts is kept (the rejected tail stays in PyTorch)."""
    if r.reason or r.planned:
        return r
    r.planned = True
    full = list(r.nodes)
    first_err = None
    for end in range(len(full), r.min_end - 1, -1):
        r.nodes = full[:end]
        finish_region(r, gm)
        try:
            g = translate(r, gm)
            g.lower()
            if r.mm2 is not None:
                # A dual GEMM has no wide-row path: cf_kernel_build refuses rows its row group
                # cannot hold, and a shorter prefix (the reduction left to PyTorch) may fit.
                capi.Kernel(g, g.options_for(4096, r.N, r.K), "plan")
            if end < len(full) and r.tail_reason is None:
                r.tail_reason = first_err
            _prune_inputs(r)
            return r
        except (capi.CfError, NotFusible) as e:
            if first_err is None:
                first_err = str(e)
    r.nodes = full[:1]
    r.graph = None
    if r.mm2 is not None:
        r.reason = first_err or "no combination of the two GEMMs fuses"
        return r
    r.reason = first_err or ("bare matmul with no epilogue%s: left to PyTorch (cuBLAS)"
                             % ("; " + r.tail_reason if r.tail_reason else ""))
    return r


def _prune_inputs(r):
    """Drops inputs only the removed tail read (translate ran on the kept nodes)."""
    used = set(o for o in r.steps[r.mm].operands[2:] if isinstance(o, torch.fx.Node))   # the bias
    for n in r.nodes[1:]:
        used.update(o for o in r.steps[n].operands if isinstance(o, torch.fx.Node))
    base = r.n_gemm_inputs()
    keep = [i for i in range(len(r.inputs)) if i < base or r.inputs[i] in used]
    if len(keep) != len(r.inputs):
        r.inputs = [r.inputs[i] for i in keep]
        r.roles = [r.roles[i] for i in keep]
        r.in_cls = {e: c for e, c in r.in_cls.items() if e in used}
        translate(r)
