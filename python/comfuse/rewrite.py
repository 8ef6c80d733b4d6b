"""Replacing planned regions of an FX GraphModule with FusedRegion calls."""
import logging
import operator

import torch
import torch.fx as fx

from . import region as R
from . import runtime

log = logging.getLogger("comfuse")


class Report:
    """What the rewrite found: one entry per region (see lines())."""

    def __init__(self, regions, modules, trace_error=None):
        self.regions = regions
        self.modules = modules          # FusedRegion per fused region, in region order
        self.trace_error = trace_error

    def lines(self):
        if self.trace_error:
            return ["whole function: fell back to PyTorch: %s" % self.trace_error]
        if not self.regions:
            return ["no matmul found: nothing to fuse"]
        out = []
        mods = {m.region.index: m for m in self.modules}
        for r in self.regions:
            head = "region %d [%s]" % (r.index, r.label() if r.steps.get(r.mm) else r.mm.name)
            dims = " N=%s K=%s %s" % (r.N, r.K, R.DT.get(r.dtype, r.dtype)) if r.N else ""
            notes = "".join("; %s" % n for n in r.dual_notes)
            if r.reason:
                out.append("%s%s: fell back: %s%s" % (head, dims, r.reason, notes))
                continue
            m = mods[r.index]
            last = m.last
            if r.mm2 is not None:
                head += " (dual GEMM: %s)" % ", ".join(r.dual_names())
            if last is None or last == "fused":
                s = "%s%s: %s (%d stages, %d outputs)" % (head, dims, "fused" if last else "fusible, not run yet",
                                                          r.graph.lower().num_stages(), len(r.outputs))
            else:
                s = "%s%s: fell back at run time: %s" % (head, dims, last)
            if r.tail_reason:
                s += "; stops before %s" % r.tail_reason
            out.append(s + notes)
        return out


    def all_modules(self):
        return list(self.modules)


class MultiReport:
    """The Reports of the graphs dynamo captured from one function (see fuse())."""

    def __init__(self, reports, note):
        self.reports = reports
        self.note = note

    def lines(self):
        out = []
        for i, r in enumerate(self.reports):
            out += ["graph %d: %s" % (i, l) for l in r.lines()]
        return out or ["no graph captured yet: %s" % self.note]

    def all_modules(self):
        return [m for r in self.reports for m in r.modules]


def _subgraph(gm, r):
    """The region as its own GraphModule (the fallback): placeholders are r.inputs."""
    g = fx.Graph()
    env = {}
    for i, e in enumerate(r.inputs):
        env[e] = g.placeholder("in%d_%s" % (i, e.name))   # a repeated node: either placeholder
    for wt in (r.wt_node, r.wt_node2):
        if wt is not None and wt not in env:
            env[wt] = g.node_copy(wt, lambda a: env[a])
    def arg(a):
        if a not in env and (R.is_shape_query(a) or R.widened_source(a) in env):
            env[a] = g.node_copy(a, arg)   # a norm's shape query, or the cast of an input the kernel widens
        return env[a]
    for n in r.nodes:
        if n in r.alias:
            env[n] = env[r.alias[n]]      # lin(x) again: the same value
            continue
        env[n] = g.node_copy(n, arg)
    g.output(tuple(env[o] for o in r.outputs))
    return fx.GraphModule(gm, g)


def _topo_sort(graph):
    """Reorders nodes topologically, keeping the original order where it is free."""
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    placed, order = set(), []

    def visit(n):
        stack = [(n, False)]
        while stack:
            cur, done = stack.pop()
            if cur in placed:
                continue
            if done:
                placed.add(cur)
                order.append(cur)
                continue
            stack.append((cur, True))
            for a in sorted(cur.all_input_nodes, key=lambda x: -pos[x]):
                if a not in placed:
                    stack.append((a, False))

    for n in nodes:
        visit(n)
    out = [n for n in order if n.op != "output"] + [n for n in order if n.op == "output"]
    prev = None
    for n in out:
        if prev is not None and prev.next is not n:
            prev.append(n)
        prev = n


def _answer_shape_queries(gm, r):
    """Shape queries of region values (R.shape_base) answered from the GEMM's operands, which
    are computed before the region: a value's last dim is W's N, the others are X's.  Then the
    region's nodes have no use left outside it but its outputs."""
    x, w = r.inputs[0], r.inputs[1]
    n_dim = 0 if r.steps[r.mm].attrs["layout"] == "nk" else -1
    for n in r.nodes:
        for u in [u for u in n.users if R.shape_base(u) is n]:
            rank = len(R.meta(n)[0])
            # t.shape[i], t.size()[i]: the getitem users; t.size(i): the query itself
            dims = [u] if u.op == "call_method" and len(u.args) == 2 else list(u.users)
            for q in dims:
                i = q.args[1]
                with gm.graph.inserting_before(r.nodes[0]):
                    if isinstance(i, slice):     # t.shape[-1:]: W's N as a one-entry shape
                        a = gm.graph.call_function(operator.getitem, (
                            gm.graph.call_method("size", (w,)), slice(n_dim, None) if n_dim else slice(0, 1)))
                    else:
                        a = gm.graph.call_method("size", (w, n_dim) if i in (-1, rank - 1) else (x, i))
                a.meta = dict(q.meta)
                q.replace_all_uses_with(a)
                if q is not u:
                    gm.graph.erase_node(q)
            gm.graph.erase_node(u)


def _erase_unused_casts(gm, casts):
    """The casts of inputs the kernel reads narrow (region.widened_source), once nothing else
    reads them: PyTorch would still run them."""
    pending = list(casts)
    while pending:
        c = pending.pop()
        if c.graph is gm.graph and not c.users and R.widened_source(c) is not c:
            src = c.args[0]
            gm.graph.erase_node(c)
            pending.append(src)   # a chain of casts: the one before may be unused now


def rewrite(gm, opaque=False):
    """Plans every region of gm and swaps the fusible ones for FusedRegion modules
    (opaque: for comfuse::region custom-op calls, which Inductor leaves alone)."""
    R.normalize_modules(gm)
    regions = R.find_regions(gm)
    mods = []
    for r in regions:
        R.plan(r, gm)
        if r.reason:
            log.info("comfuse: region %d [%s] fell back: %s%s", r.index, r.mm.name, r.reason,
                     "".join("; %s" % n for n in r.dual_notes))
            continue
        name = "comfuse_region%d" % r.index
        mod = runtime.FusedRegion(r, _subgraph(gm, r), name)
        if not opaque:
            gm.add_submodule(name, mod)
        last = r.nodes[-1]
        with gm.graph.inserting_after(last):
            if opaque:
                from . import opaque as op
                ts = [e for e, c in zip(r.inputs, r.roles) if c != R.PARAM]
                sc = [e for e, c in zip(r.inputs, r.roles) if c == R.PARAM]
                call = gm.graph.call_function(torch.ops.comfuse.region.default, (op.register(mod), ts, sc))
            else:
                call = gm.graph.call_module(name, tuple(r.inputs))
        outs = []
        with gm.graph.inserting_after(call):
            for i, o in enumerate(r.outputs):
                outs.append(gm.graph.call_function(operator.getitem, (call, i)))
        for o, rep in zip(r.outputs, outs):
            rep.meta = dict(o.meta)
            o.replace_all_uses_with(rep)
            for later in regions[r.index + 1:]:
                later.substitute(o, rep)
        _answer_shape_queries(gm, r)
        widened = [a for n in r.nodes for a in n.all_input_nodes if a not in r.cls and R.widened_source(a) is not a]
        for n in reversed(r.nodes):
            if not n.users:
                gm.graph.erase_node(n)
        _erase_unused_casts(gm, widened)
        mods.append(mod)
    _topo_sort(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return Report(regions, mods)
