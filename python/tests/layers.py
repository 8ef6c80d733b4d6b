"""The plain-PyTorch layers the tests, tests/gpu_check.py and bench/torch_layers.py share."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LinearBiasLN(nn.Module):
    """nn.Linear -> +bias -> nn.LayerNorm (BERT's output block without the residual)."""

    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n, bias=False)
        self.bias = nn.Parameter(torch.randn(n) * 0.1)
        self.ln = nn.LayerNorm(n)

    def forward(self, x):
        return self.ln(self.lin(x) + self.bias)


class LinearGELU(nn.Module):
    def __init__(self, k, n, approximate="none"):
        super().__init__()
        self.lin = nn.Linear(k, n)
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(self.lin(x), approximate=self.approximate)


class ProjSoftmax(nn.Module):
    """x @ W (a [K, N] parameter) scaled, then softmax over the last dim."""

    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n) / k ** 0.5)

    def forward(self, x):
        return torch.softmax((x @ self.w) * 0.5, dim=-1)


class ResidualRMSNorm(nn.Module):
    """o_proj -> + residual -> RMSNorm written as LLaMA writes it; returns both."""

    def __init__(self, k, n, eps=1e-6):
        super().__init__()
        self.proj = nn.Linear(k, n, bias=False)
        self.weight = nn.Parameter(torch.ones(n) + 0.1 * torch.randn(n))
        self.eps = eps

    def forward(self, x, residual):
        h = residual + self.proj(x)
        dt = h.dtype
        v = h.to(torch.float32)
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return h, self.weight * v.to(dt)


class HandLayerNorm(nn.Module):
    """LayerNorm written out by hand after a Linear with bias."""

    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)
        self.g = nn.Parameter(torch.ones(n))
        self.b = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        h = self.lin(x)
        mu = h.mean(dim=-1, keepdim=True)
        d = h - mu
        var = (d * d).mean(dim=-1, keepdim=True)
        return d / torch.sqrt(var + 1e-5) * self.g + self.b


class GatedMLP(nn.Module):
    """LLaMA's MLP, down(act(gate(x)) * up(x)), with nn.Linear or F.linear on the same weights:
    SwiGLU (act=silu) or GeGLU (gelu, erf or tanh form)."""

    def __init__(self, k, n, act="silu", bias=False, functional=False):
        super().__init__()
        self.gate_proj = nn.Linear(k, n, bias=bias)
        self.up_proj = nn.Linear(k, n, bias=bias)
        self.down_proj = nn.Linear(n, k, bias=bias)
        self.act = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}[act]
        self.functional = functional

    def forward(self, x):
        if self.functional:
            g = F.linear(x, self.gate_proj.weight, self.gate_proj.bias)
            u = F.linear(x, self.up_proj.weight, self.up_proj.bias)
            return F.linear(self.act(g) * u, self.down_proj.weight, self.down_proj.bias)
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


PLAIN = {
    "linear_bias_ln": lambda k, n: LinearBiasLN(k, n),
    "linear_gelu": lambda k, n: LinearGELU(k, n),
    "proj_softmax": lambda k, n: ProjSoftmax(k, n),
    "residual_rmsnorm": lambda k, n: ResidualRMSNorm(k, n),
}


def inputs_for(name, m_lead, k, n, dtype, device):
    x = torch.randn(*m_lead, k, dtype=dtype, device=device)
    if name == "residual_rmsnorm":
        return (x, torch.randn(*m_lead, n, dtype=dtype, device=device))
    return (x,)
