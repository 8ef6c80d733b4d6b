"""The fused region as a PyTorch operator, opaque to Inductor (comfuse.inductor_backend).

Inductor retraces the graph it is given; a FusedRegion module would be traced into (its
ctypes launch cannot be), so the region becomes comfuse::region(idx, inputs), whose fake
implementation gives the output shapes from X's leading dims.

The operator is defined through torch.library.Library, not torch.library.custom_op: the
latter's Python dispatch wrapper cost about 20 us a call (measured on the CPU: 19.6 us
against 7.2 us for the same op defined here), more than the launch it wraps.  It has no
autograd formula; inductor_backend leaves graphs that need gradients to Inductor whole.
"""
from typing import List

import torch

from . import region as R

_registry = []


def register(mod):
    _registry.append(mod)
    return len(_registry) - 1


_lib = torch.library.Library("comfuse", "DEF")
_lib.define("region(int idx, Tensor[] inputs, float[] scalars) -> Tensor[]")


def region_call(idx: int, inputs: List[torch.Tensor], scalars: List[float]) -> List[torch.Tensor]:
    mod = _registry[idx]
    it, sc = iter(inputs), iter(scalars)
    outs, fused = mod.run([next(sc) if c == R.PARAM else next(it) for c in mod.in_cls])
    if fused:
        return list(outs)        # fresh tensors from torch.empty: no aliasing to look for
    # a custom op's outputs may alias neither its inputs nor each other (the fallback's might)
    taken = {t.untyped_storage().data_ptr() for t in inputs}
    res = []
    for o in outs:
        p = o.untyped_storage().data_ptr()
        res.append(o.clone() if p in taken else o)
        taken.add(p)
    return res


_lib.impl("region", region_call, "CompositeExplicitAutograd")


@torch.library.register_fake("comfuse::region")
def _region_fake(idx, inputs, scalars):
    mod = _registry[idx]
    lead = tuple(inputs[0].shape[:-1])
    out = []
    for c, keep, dt in zip(mod.out_cls, mod.out_keep, mod.out_dt):
        shape = lead + (mod.N,) if c == R.TILE else (lead + (1,) if keep else lead)
        out.append(inputs[0].new_empty(shape, dtype=dt))
    return out
