#!/usr/bin/env python3
"""The grid of issue 29: comfuse's fused kernel on layers of published models,
beside cuBLAS doing the GEMM alone, torch.compile and PyTorch eager, one run.

    python3 bench/grid.py [--quick] [--cells FILTER] [--out DIR] [--comfuse BIN]
    python3 bench/grid.py --compile-only      # no GPU: does every cell's kernel compile?
    python3 bench/grid.py --check             # GPU, no torch: is every cell's kernel right?
    python3 bench/grid.py --list              # the cells, nothing run
    python3 bench/grid.py --from-json J --repredict   # no GPU: this build's cost model against
                                              # J's measurements, each cell at its measured plan

Every cell is one layer of a published model configuration (named by model and
layer; M is batch x sequence, or a decode batch) with the epilogue of one of the
examples/*.cf workloads; the vocabulary heads (32000 .. 256000 columns) are the
wide rows.  Where the spec's epilogue differs from the real layer's (BERT's
exact-erf GELU run as the tanh form, a residual left out, Gemma's (1 + g)
folded into gamma, the spec's fixed scales) the cell's name says so.  Weights are in the
model's own layout: [N, K] as nn.Linear stores them (comfuse runs the example's [N, K] variant,
torch computes x @ w.t(), cuBLAS's baseline is that TN GEMM), [K, N] for GPT-2's Conv1D layers.

Per cell it prints (the table also to DIR/grid.txt), and writes to DIR/grid.json
(after every cell, so a run cut short keeps what it measured) and plots to DIR/grid.png:
  fused_ms      comfuse's fused kernel (`comfuse bench`: CUDA events, L2 flushed, median)
  cublas_ms     torch `x @ w` alone (triton do_bench: CUDA events, L2 flushed, median)
  compile_ms    torch.compile(dynamic=False) of the same function (common.py)
  compile_graph_ms
                the same compiled function replayed from a CUDA graph: its GPU time without the
                host work (guards, launches) that compile_ms includes at small shapes, L2 flushed
                before each call as for every other column (common.graph_ms).  "faster than
                torch.compile" is judged against the better of the two
  fused_graph_ms, cublas_graph_ms
                the same function through comfuse's Python entry (comfuse.fuse), and torch's
                `x @ w`, timed as compile_graph_ms: "faster than torch.compile" compares
                fused_graph_ms with compile_graph_ms where both were measured (GPU time against
                GPU time), else fused_ms with the better of compile's two figures
  fused_torch_ms
                comfuse.fuse's call timed as cuBLAS's column is (common.time_ms: triton's do_bench,
                back-to-back launches), where fused_ms comes from `comfuse bench`'s turns beside
                cuBLASLt with a sync after each; at the biggest cells the two differ by up to 10 %:
                back to back the card runs our kernels at lower clocks under its power cap
                (bench/sustained.py); ratios["fused_torch/cublas"]
  eager_ms      the same function in eager PyTorch
  unfused_ms    comfuse's unfused path (cuBLASLt GEMM, then its row kernel), where bench prints it
  cublaslt_ms, fused_over_cublaslt
                bench's own cuBLASLt GEMM and its median per-turn ratio (clock drift cancelled)
  ratios        fused/cuBLAS: `comfuse bench`'s median per-turn ratio to its cuBLASLt GEMM (fused_over_cublaslt,
                both timed alike in one process; fused/cublas_torch is fused_ms over torch's do_bench figure,
                which runs hot and flattered the big cells by up to 10 %); compile/cuBLAS, eager/cuBLAS,
                unfused/cuBLAS, fused/compile
  bound         the issue's bound on fused/cuBLAS for the cell: 1.15; 1.35 for chained
                reductions (LN + softmax); 1.3 for M <= 128 and rows wider than 16384
  predicted_ms  the plan's cost model (src/plan.c), as `comfuse bench` prints it beside the
                measurement; ratios["fused/predicted"] is measured over predicted
  and spill_bytes, plan, wide_row_path (from `comfuse compile`), compile_s (torch.compile's
  first call), status and notes (what failed or was skipped).

The comfuse kernels are NVRTC-compiled first, all cells in parallel (as
scripts/gpu-check does), while torch.compile compiles each cell's function
(one compiled function per workload, dynamic=False, its recompile limit raised
so that every shape keeps its own graph); the timing starts after both.
--deadline (480 s by default) stops starting new work so that the JSON and the
plot are written within about 8 minutes, under a 10-minute job limit.

Tests (CPU, neither torch nor a GPU): python3 -m pytest bench/tests
"""
import argparse
import concurrent.futures
import datetime
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

T0 = time.time()  # --deadline counts from here: importing torch is part of the run
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = "comfuse-grid/1"

# Bounds on fused/cuBLAS from issue 29's "Done when".
BOUND_DEFAULT = 1.15
BOUND_CHAINED = 1.35     # chained reductions (LN + softmax)
BOUND_SMALL_OR_WIDE = 1.3  # M <= 128, and rows wider than 16384
WIDE_N = 16384
SMALL_M = 128

# Workloads whose epilogue chains several row reductions (the 1.35 bound).
CHAINED = {"gemm_ln_softmax"}
# Workloads without a row reduction: wide rows are no special case for them.
ELEMENTWISE = {"gemm", "gemm_bias_gelu", "gemm_bias_gelu_erf", "swiglu"}
# Dual GEMMs: issue 31's bound against cuBLAS doing one GEMM over both weights ([K, 2N]).
BOUND_DUAL = 1.05


def cell(workload, model, layer, short, m, m_desc, n, k, quick=False):
    """A cell; its weights are [N, K] as nn.Linear stores them (and an attention score's keys),
    but for GPT-2's Conv1D layers (mlp.c_fc, mlp.c_proj and the c_proj-shaped synthetic
    cell), which store theirs [K, N] and compute x @ w."""
    layout = "kn" if model.startswith("GPT-2") and ("c_fc" in layer or "c_proj" in layer) else "nk"
    return {"workload": workload, "model": model, "layer": layer, "short": short,
            "M": m, "m_desc": m_desc, "N": n, "K": k, "quick": quick, "layout": layout}


D64 = "decode, batch 64"
# (workload, model, layer as named in the model's code, short label for the plot, M, how M arises, N, K)
CELLS = [
    # GEMM + bias + GELU (tanh): FFN up-projections.  BERT uses the exact erf GELU (run as tanh
    # here); Gemma's GeGLU is gelu(x W_gate) * (x W_up): the gate half, no bias (bias = 0 in torch too).
    cell("gemm_bias_gelu", "BERT-base", "FFN-up (intermediate.dense) + bias + GELU (tanh form)", "FFN-up+GELU",
         8192, "batch 16 x seq 512", 3072, 768, quick=True),
    cell("gemm_bias_gelu", "BERT-base", "FFN-up (intermediate.dense) + bias + GELU (tanh form)", "FFN-up+GELU",
         512, "batch 1 x seq 512", 3072, 768),
    cell("gemm_bias_gelu", "BERT-large", "FFN-up (intermediate.dense) + bias + GELU (tanh form)", "FFN-up+GELU",
         2048, "batch 4 x seq 512", 4096, 1024),
    cell("gemm_bias_gelu", "GPT-2 XL", "mlp.c_fc + bias + GELU (tanh)", "c_fc+GELU",
         8192, "batch 8 x seq 1024", 6400, 1600),
    cell("gemm_bias_gelu", "GPT-2 XL", "mlp.c_fc + bias + GELU (tanh)", "c_fc+GELU", 64, D64, 6400, 1600, quick=True),
    cell("gemm_bias_gelu", "Gemma 2B", "mlp.gate_proj + GELU (tanh), GeGLU's up-multiply left out", "gate_proj+GELU",
         2048, "batch 1 x seq 2048", 16384, 2048),
    cell("gemm_bias_gelu", "Gemma 7B", "mlp.gate_proj + GELU (tanh), GeGLU's up-multiply left out", "gate_proj+GELU",
         8192, "batch 1 x seq 8192", 24576, 3072),
    cell("gemm_bias_gelu", "Gemma 7B", "mlp.gate_proj + GELU (tanh), GeGLU's up-multiply left out", "gate_proj+GELU",
         64, D64, 24576, 3072),
    # The exact (erf) GELU, as BERT's config ("hidden_act": "gelu") and F.gelu's default run it.
    cell("gemm_bias_gelu_erf", "BERT-base", "FFN-up (intermediate.dense) + bias + GELU (erf, as HF runs it)",
         "FFN-up+GELU(erf)", 8192, "batch 16 x seq 512", 3072, 768),
    cell("gemm_bias_gelu_erf", "BERT-base", "FFN-up (intermediate.dense) + bias + GELU (erf, as HF runs it)",
         "FFN-up+GELU(erf)", 512, "batch 1 x seq 512", 3072, 768, quick=True),
    cell("gemm_bias_gelu_erf", "BERT-large", "FFN-up (intermediate.dense) + bias + GELU (erf, as HF runs it)",
         "FFN-up+GELU(erf)", 2048, "batch 4 x seq 512", 4096, 1024),
    # Gated MLPs: act(x W_gate) * (x W_up) as one dual GEMM (LLaMA, Mistral, Qwen2: SwiGLU).
    cell("swiglu", "LLaMA-2 7B", "mlp: silu(gate_proj(x)) * up_proj(x)", "gate/up SwiGLU",
         2048, "batch 1 x seq 2048", 11008, 4096, quick=True),
    cell("swiglu", "LLaMA-2 7B", "mlp: silu(gate_proj(x)) * up_proj(x)", "gate/up SwiGLU",
         512, "batch 1 x seq 512", 11008, 4096),
    cell("swiglu", "LLaMA-2 7B", "mlp: silu(gate_proj(x)) * up_proj(x)", "gate/up SwiGLU", 64, D64, 11008, 4096),
    cell("swiglu", "LLaMA-3 8B", "mlp: silu(gate_proj(x)) * up_proj(x)", "gate/up SwiGLU",
         4096, "batch 1 x seq 4096", 14336, 4096),
    cell("swiglu", "Qwen2 1.5B", "mlp: silu(gate_proj(x)) * up_proj(x)", "gate/up SwiGLU",
         2048, "batch 1 x seq 2048", 8960, 1536),
    # GEMM + 0.5 scale + bias + LayerNorm: post-LN output projections with the residual left out
    # (gemm_residual_ln below has it); the spec's 0.5 scale is in the torch version too.
    cell("gemm_bias_ln", "BERT-base", "FFN-out (output.dense) + bias + LayerNorm, residual left out",
         "FFN-out+LN", 8192, "batch 16 x seq 512", 768, 3072, quick=True),
    cell("gemm_bias_ln", "BERT-base", "FFN-out (output.dense) + bias + LayerNorm, residual left out",
         "FFN-out+LN", 512, "batch 1 x seq 512", 768, 3072),
    cell("gemm_bias_ln", "BERT-base", "attention.output.dense + bias + LayerNorm, residual left out",
         "attn-out+LN", 2048, "batch 4 x seq 512", 768, 768),
    cell("gemm_bias_ln", "BERT-large", "FFN-out (output.dense) + bias + LayerNorm, residual left out",
         "FFN-out+LN", 2048, "batch 4 x seq 512", 1024, 4096),
    cell("gemm_bias_ln", "BERT-large", "FFN-out (output.dense) + bias + LayerNorm, residual left out",
         "FFN-out+LN", 64, "batch 64 x one token", 1024, 4096),
    cell("gemm_bias_ln", "GPT-2 XL", "mlp.c_proj + bias + the next block's ln_1, residual left out",
         "c_proj+LN", 8192, "batch 8 x seq 1024", 1600, 6400),
    cell("gemm_bias_ln", "GPT-2 XL", "mlp.c_proj + bias + the next block's ln_1, residual left out",
         "c_proj+LN", 64, D64, 1600, 6400, quick=True),
    # GEMM + RMSNorm: pre-norm projections with the residual left out (gemm_rmsnorm_res2 has it).
    cell("gemm_rmsnorm", "LLaMA-2 7B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         64, D64, 4096, 4096, quick=True),
    cell("gemm_rmsnorm", "LLaMA-2 7B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         512, "batch 1 x seq 512", 4096, 4096),
    cell("gemm_rmsnorm", "LLaMA-2 7B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         2048, "batch 1 x seq 2048", 4096, 4096),
    cell("gemm_rmsnorm", "LLaMA-2 7B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         8192, "batch 2 x seq 4096", 4096, 4096, quick=True),
    cell("gemm_rmsnorm", "LLaMA-2 7B", "mlp.down_proj + RMSNorm, residual left out", "down_proj+RMSNorm",
         2048, "batch 1 x seq 2048", 4096, 11008),
    cell("gemm_rmsnorm", "LLaMA-2 13B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         2048, "batch 1 x seq 2048", 5120, 5120),
    cell("gemm_rmsnorm", "LLaMA-2 70B", "self_attn.o_proj + RMSNorm, residual left out", "o_proj+RMSNorm",
         512, "batch 1 x seq 512", 8192, 8192),
    cell("gemm_rmsnorm", "Gemma 2B", "mlp.down_proj + RMSNorm ((1 + g) folded into gamma), residual left out",
         "down_proj+RMSNorm", 8192, "batch 1 x seq 8192", 2048, 16384),
    # GEMM + scaled softmax: attention scores (K = head dim, N = keys; rows of one head, or of the
    # query heads sharing one KV head under GQA / MQA), and softmax over a vocabulary head.
    cell("gemm_softmax", "BERT-base", "attention scores Q K^T / 8 + softmax, one head (head dim 64)",
         "scores+softmax", 512, "seq 512", 512, 64),
    cell("gemm_softmax", "LLaMA-2 7B", "attention scores + softmax (scale 0.125), one head (head dim 128)",
         "scores+softmax", 2048, "seq 2048", 2048, 128, quick=True),
    cell("gemm_softmax", "LLaMA-2 7B", "attention scores + softmax (scale 0.125), chunked prefill (head dim 128)",
         "scores+softmax", 64, "a 64-token chunk against 4096 keys", 4096, 128),
    cell("gemm_softmax", "LLaMA-3 8B", "attention scores + softmax (scale 0.125), GQA group (head dim 128)",
         "GQA scores+softmax", 8192, "4 query heads x seq 2048 on one KV head", 2048, 128),
    cell("gemm_softmax", "LLaMA-3 8B", "attention scores + softmax (scale 0.125), one head (head dim 128)",
         "scores+softmax", 8192, "seq 8192", 8192, 128),
    cell("gemm_softmax", "Gemma 2B", "attention scores + softmax (scale 0.125), MQA (head dim 256)",
         "MQA scores+softmax", 8192, "8 query heads x seq 1024 on the one KV head", 1024, 256),
    cell("gemm_softmax", "LLaMA-2 7B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         64, D64, 32000, 4096, quick=True),
    cell("gemm_softmax", "LLaMA-2 7B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         2048, "batch 1 x seq 2048", 32000, 4096),
    cell("gemm_softmax", "GPT-2 XL", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         512, "batch 1 x seq 512", 50257, 1600, quick=True),
    cell("gemm_softmax", "GPT-2 XL", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         2048, "batch 2 x seq 1024", 50257, 1600),
    cell("gemm_softmax", "LLaMA-3 8B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         64, D64, 128256, 4096),
    cell("gemm_softmax", "LLaMA-3 8B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         512, "batch 1 x seq 512", 128256, 4096),
    cell("gemm_softmax", "Qwen2 1.5B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         64, D64, 151936, 1536),
    cell("gemm_softmax", "Gemma 2B", "lm_head + softmax over the vocabulary (scale 0.125)", "lm_head+softmax",
         64, D64, 256000, 2048),
    # GEMM + bias + LayerNorm + softmax: four chained reductions.  No published layer has this
    # epilogue; the cells take real layers' (N, K) and M.
    cell("gemm_ln_softmax", "BERT-base", "FFN-out shape, LayerNorm then softmax (chained, synthetic)",
         "FFN-out LN+softmax", 2048, "batch 4 x seq 512", 768, 3072, quick=True),
    cell("gemm_ln_softmax", "LLaMA-2 7B", "o_proj shape, LayerNorm then softmax (chained, synthetic)",
         "o_proj LN+softmax", 512, "batch 1 x seq 512", 4096, 4096),
    cell("gemm_ln_softmax", "LLaMA-2 7B", "o_proj shape, LayerNorm then softmax (chained, synthetic)",
         "o_proj LN+softmax", 8192, "batch 2 x seq 4096", 4096, 4096),
    cell("gemm_ln_softmax", "GPT-2 XL", "c_proj shape, LayerNorm then softmax (chained, synthetic)",
         "c_proj LN+softmax", 64, D64, 1600, 6400),
    cell("gemm_ln_softmax", "LLaMA-2 7B", "lm_head shape, LayerNorm then softmax over the vocabulary (synthetic)",
         "lm_head LN+softmax", 512, "batch 1 x seq 512", 32000, 4096),
    # GEMM + bias + residual + LayerNorm: post-LN blocks (BERT), examples/gemm_residual_ln.cf.
    cell("gemm_residual_ln", "BERT-base", "attention.output.dense + bias + residual + LayerNorm",
         "attn-out+res+LN", 8192, "batch 16 x seq 512", 768, 768, quick=True),
    cell("gemm_residual_ln", "BERT-base", "FFN-out (output.dense) + bias + residual + LayerNorm",
         "FFN-out+res+LN", 8192, "batch 16 x seq 512", 768, 3072),
    cell("gemm_residual_ln", "BERT-base", "FFN-out (output.dense) + bias + residual + LayerNorm",
         "FFN-out+res+LN", 512, "batch 1 x seq 512", 768, 3072),
    cell("gemm_residual_ln", "BERT-large", "FFN-out (output.dense) + bias + residual + LayerNorm",
         "FFN-out+res+LN", 2048, "batch 4 x seq 512", 1024, 4096),
    cell("gemm_residual_ln", "BERT-large", "attention.output.dense + bias + residual + LayerNorm",
         "attn-out+res+LN", 8192, "batch 16 x seq 512", 1024, 1024),
    cell("gemm_residual_ln", "BERT-large", "FFN-out (output.dense) + bias + residual + LayerNorm",
         "FFN-out+res+LN", 64, "batch 64 x one token", 1024, 4096),
    # GEMM + residual + RMSNorm storing the sum too: pre-norm blocks (LLaMA, Mistral, Gemma),
    # examples/gemm_rmsnorm_res2.cf (H = the new residual stream, Y = the next norm's output).
    cell("gemm_rmsnorm_res2", "LLaMA-2 7B", "self_attn.o_proj + residual + post_attention_layernorm (RMSNorm)",
         "o_proj+res+RMSNorm", 64, D64, 4096, 4096, quick=True),
    cell("gemm_rmsnorm_res2", "LLaMA-2 7B", "self_attn.o_proj + residual + post_attention_layernorm (RMSNorm)",
         "o_proj+res+RMSNorm", 512, "batch 1 x seq 512", 4096, 4096),
    cell("gemm_rmsnorm_res2", "LLaMA-2 7B", "self_attn.o_proj + residual + post_attention_layernorm (RMSNorm)",
         "o_proj+res+RMSNorm", 2048, "batch 1 x seq 2048", 4096, 4096),
    cell("gemm_rmsnorm_res2", "LLaMA-2 7B", "self_attn.o_proj + residual + post_attention_layernorm (RMSNorm)",
         "o_proj+res+RMSNorm", 8192, "batch 2 x seq 4096", 4096, 4096, quick=True),
    cell("gemm_rmsnorm_res2", "LLaMA-2 7B", "mlp.down_proj + residual + next input_layernorm (RMSNorm)",
         "down_proj+res+RMSNorm", 2048, "batch 1 x seq 2048", 4096, 11008),
    cell("gemm_rmsnorm_res2", "LLaMA-2 13B", "self_attn.o_proj + residual + post_attention_layernorm (RMSNorm)",
         "o_proj+res+RMSNorm", 2048, "batch 1 x seq 2048", 5120, 5120),
    cell("gemm_rmsnorm_res2", "Mistral 7B", "mlp.down_proj + residual + next input_layernorm (RMSNorm)",
         "down_proj+res+RMSNorm", 8192, "batch 2 x seq 4096", 4096, 14336),
    cell("gemm_rmsnorm_res2", "LLaMA-2 70B", "mlp.down_proj + residual + next input_layernorm (RMSNorm)",
         "down_proj+res+RMSNorm", 512, "batch 1 x seq 512", 8192, 28672),
    cell("gemm_rmsnorm_res2", "Gemma 7B", "self_attn.o_proj + residual + RMSNorm ((1 + g) folded into gamma)",
         "o_proj+res+RMSNorm", 2048, "batch 1 x seq 2048", 3072, 4096),
    cell("gemm_rmsnorm_res2", "Gemma 2B", "mlp.down_proj + residual + RMSNorm ((1 + g) folded into gamma)",
         "down_proj+res+RMSNorm", 64, D64, 2048, 16384),
]


def cell_name(c):
    return f"{c['model']} {c['layer']}: M={c['M']} ({c['m_desc']}) N={c['N']} K={c['K']}"


def cell_label(c):
    """Short enough for the plot's axis."""
    return f"{c['model']} {c['short']}  {c['M']}x{c['N']}x{c['K']}"


def bound_of(c):
    """(bound on fused/cuBLAS, why) for a cell, from issue 29: the loosest that applies."""
    b, why = BOUND_DEFAULT, "default"
    wide = c["N"] > WIDE_N and c["workload"] not in ELEMENTWISE
    if c["M"] <= SMALL_M or wide:
        b, why = BOUND_SMALL_OR_WIDE, "M<=128" if c["M"] <= SMALL_M else "wide rows"
    if c["workload"] in CHAINED and BOUND_CHAINED > b:
        b, why = BOUND_CHAINED, "chained reductions"
    if c["workload"] in common.DUAL:
        b, why = BOUND_DUAL, "dual GEMM vs [K, 2N]"
    return b, why


def in_main_set(c):
    """The issue's geomean set: M >= 512 and N <= 16384."""
    return c["M"] >= 512 and c["N"] <= WIDE_N


def select(cells, quick=False, filt=None):
    """--quick keeps the cells marked quick; --cells keeps those whose workload or name
    contains one of the comma-separated terms (case-insensitive)."""
    out = [c for c in cells if c["quick"] or not quick]
    if filt:
        terms = [t.strip().lower() for t in filt.split(",") if t.strip()]
        out = [c for c in out if any(t in (c["workload"] + " " + cell_name(c)).lower() for t in terms)]
    return out


def ratio(a, b):
    return a / b if a is not None and b is not None and b > 0 else None


def geomean(vals):
    vals = [v for v in vals if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def new_record(i, c):
    b, why = bound_of(c)
    return {
        "id": i, "name": cell_name(c), "label": cell_label(c), "model": c["model"], "layer": c["layer"],
        "workload": c["workload"], "layout": c["layout"],
        "spec": os.path.relpath(common.spec_path(ROOT, c["workload"], c["layout"]), ROOT), "M": c["M"], "N": c["N"],
        "K": c["K"], "m_desc": c["m_desc"], "bound": b, "bound_kind": why, "main_set": in_main_set(c),
        "fused_ms": None, "cublas_ms": None, "compile_ms": None, "compile_graph_ms": None, "eager_ms": None,
        "unfused_ms": None, "fused_graph_ms": None, "cublas_graph_ms": None, "fused_torch_ms": None,
        "floor_ms": None, "cublaslt_ms": None, "fused_over_cublaslt": None,
        "predicted_ms": None,  # the plan's cost model (`comfuse bench`'s BENCH line)
        "compile_s": None, "status": "not run", "notes": [],
    }


def finish_record(r):
    """Fills the ratios and the verdicts from the times."""
    # fused/cuBLAS like for like: `comfuse bench`'s median per-turn ratio to the cuBLASLt GEMM it
    # times in the same process, launch by launch (both from the same clock state).  Against torch's
    # do_bench figure, which runs hot (power-capped clocks at the big cells, 5-12 % lower), the
    # event-timed kernel looked up to 10 % better than it is; that ratio stays as fused/cublas_torch.
    lt = r.get("fused_over_cublaslt")
    r["ratios"] = {
        "fused/cublas": lt if lt is not None else ratio(r["fused_ms"], r["cublas_ms"]),
        "fused/cublas_torch": ratio(r["fused_ms"], r["cublas_ms"]),
        "compile/cublas": ratio(r["compile_ms"], r["cublas_ms"]),
        "eager/cublas": ratio(r["eager_ms"], r["cublas_ms"]),
        "unfused/cublas": ratio(r["unfused_ms"], r["cublas_ms"]),
        "fused/compile": ratio(r["fused_ms"], r["compile_ms"]),
        "fused/predicted": ratio(r["fused_ms"], r["predicted_ms"]),
    }
    f = r["ratios"]["fused/cublas"]
    r["within_bound"] = None if f is None else f <= r["bound"]
    best = min((t for t in (r["compile_ms"], r.get("compile_graph_ms")) if t is not None), default=None)
    r["ratios"]["fused/compile_best"] = ratio(r["fused_ms"], best)
    r["ratios"]["fused_graph/compile_graph"] = ratio(r.get("fused_graph_ms"), r.get("compile_graph_ms"))
    r["ratios"]["fused_graph/cublas_graph"] = ratio(r.get("fused_graph_ms"), r.get("cublas_graph_ms"))
    r["ratios"]["fused_torch/cublas"] = ratio(r.get("fused_torch_ms"), r.get("cublas_ms"))
    # like for like: both GPU times from CUDA-graph replays (no host work, L2 flushed) where
    # both were measured; else the fused kernel against the better of compile's two figures
    fc = r["ratios"]["fused_graph/compile_graph"]
    if fc is None:
        fc = r["ratios"]["fused/compile_best"]
    r["faster_than_compile"] = None if fc is None else fc < 1.0
    return r


def summarize(records):
    done = [r for r in records if r.get("ratios") and r["ratios"]["fused/cublas"] is not None]
    main = [r for r in done if r["main_set"]]
    return {
        "cells": len(records),
        "measured": len(done),
        "geomean_fused_over_cublas_main": geomean([r["ratios"]["fused/cublas"] for r in main]),
        "main_cells": len(main),
        "geomean_fused_over_cublas_all": geomean([r["ratios"]["fused/cublas"] for r in done]),
        # the same set replayed back to back from CUDA graphs (sustained load: the power-capped clocks)
        "geomean_fused_over_cublas_graph_main": geomean([r["ratios"]["fused_graph/cublas_graph"] for r in main
                                                         if r["ratios"].get("fused_graph/cublas_graph") is not None]),
        "geomean_compile_over_cublas_all": geomean([r["ratios"]["compile/cublas"] for r in done]),
        "geomean_fused_over_predicted_all": geomean([r["ratios"]["fused/predicted"] for r in done
                                                     if r["ratios"]["fused/predicted"] is not None]),
        "within_bound": sum(1 for r in done if r["within_bound"]),
        "faster_than_compile": sum(1 for r in done if r["faster_than_compile"]),
        "compared_with_compile": sum(1 for r in done if r["faster_than_compile"] is not None),
        "over_bound": [r["label"] for r in done if r["within_bound"] is False],
        "slower_than_compile": [r["label"] for r in done if r["faster_than_compile"] is False],
    }


def write_json(path, meta, records):
    doc = {"schema": SCHEMA, **meta, "summary": summarize(records), "cells": records}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)  # a reader never sees half a file
    return doc


def fmt(v, w=8, p=4):
    return f"{v:{w}.{p}f}" if v is not None else f"{'-':>{w}}"


HEADER = (f"{'#':>3} {'cell':<40} {'M':>5} {'N':>6} {'K':>5} {'fused':>8} {'cuBLASLt':>8} {'cuBLAS':>8} {'compile':>8} "
          f"{'eager':>8} {'unfused':>8} {'pred':>8} {'f/cuB':>6} {'c/cuB':>6} {'f/pred':>6} {'bound':>5}")


def row_line(r):
    rt = r.get("ratios") or {}
    flag = {True: "", False: " OVER", None: ""}[r.get("within_bound")]
    if r.get("faster_than_compile") is False:
        flag += " >compile"
    label = r["label"].rsplit("  ", 1)[0]  # model and short layer name; the shape has columns
    return (f"{r['id']:>3} {label:<40} {r['M']:>5} {r['N']:>6} {r['K']:>5} {fmt(r['fused_ms'])} "
            f"{fmt(r.get('cublaslt_ms'))} {fmt(r['cublas_ms'])} {fmt(r['compile_ms'])} {fmt(r['eager_ms'])} {fmt(r['unfused_ms'])} "
            f"{fmt(r['predicted_ms'])} {fmt(rt.get('fused/cublas'), 6, 3)} {fmt(rt.get('compile/cublas'), 6, 3)} "
            f"{fmt(rt.get('fused/predicted'), 6, 3)} {r['bound']:>5.2f}{flag}")


def print_table(records, summary, out=None):
    out = out or sys.stdout
    print("\ntimes in ms (median); fused = comfuse's kernel and cuBLASLt = the GEMM alone, timed in turns in one\n"
          "process (`comfuse bench`); cuBLAS = torch x @ w alone and compile = torch.compile (do_bench),",
          file=out)
    print("unfused = comfuse's cuBLASLt GEMM + row kernel; pred = the plan's cost model (src/plan.c);", file=out)
    print("f/cuB: fused over cuBLASLt (median of per-turn ratios); c/cuB: compile over cuBLAS; f/pred: fused\n"
          "measured over predicted;", file=out)
    print("OVER: fused/cuBLAS above the cell's bound; >compile: slower than torch.compile (the better of its\n"
          "host-timed figure, the compile column, and its CUDA-graph replay, compile_graph_ms in the JSON).\n", file=out)
    print(HEADER, file=out)
    for r in records:
        print(row_line(r), file=out)
    s = summary
    g = s["geomean_fused_over_cublas_main"]
    print(f"\n{s['measured']}/{s['cells']} cells measured; geomean fused/cuBLAS over the {s['main_cells']} cells "
          f"with M >= 512 and N <= {WIDE_N}: {fmt(g, 0, 3).strip()} (issue 29: <= 1.08); over all: "
          f"{fmt(s['geomean_fused_over_cublas_all'], 0, 3).strip()}; torch.compile/cuBLAS over all: "
          f"{fmt(s['geomean_compile_over_cublas_all'], 0, 3).strip()}", file=out)
    if s.get("geomean_fused_over_cublas_graph_main") is not None:
        print(f"the same set replayed back to back from CUDA graphs (sustained load): geomean fused/cuBLAS "
              f"{fmt(s['geomean_fused_over_cublas_graph_main'], 0, 3).strip()}", file=out)
    print(f"within their bound: {s['within_bound']}/{s['measured']}; faster than torch.compile: "
          f"{s['faster_than_compile']}/{s['compared_with_compile']}; geomean measured/predicted: "
          f"{fmt(s['geomean_fused_over_predicted_all'], 0, 3).strip()}", file=out)


CLIP = (0.5, 5.0)  # the plot's x range; bars beyond it are clipped and labelled with their value


def write_plot(path, records, title="comfuse grid"):
    """Per cell, fused/cuBLAS and torch.compile/cuBLAS as horizontal bars on a log axis,
    lines at 1.0 and at the issue's bounds, each cell's own bound marked.  Returns False
    (and says why) where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.stderr.write("grid: matplotlib not installed, no plot written\n")
        return False
    n = len(records)
    fig, ax = plt.subplots(figsize=(13, max(4.0, 0.34 * n + 1.8)))
    h = 0.38
    lo, hi = CLIP
    for i, r in enumerate(records):
        y = n - 1 - i  # first cell at the top
        rt = r.get("ratios") or {}
        for dy, key, color, name in ((h / 2, "fused/cublas", "tab:blue", "comfuse fused / cuBLAS"),
                                     (-h / 2, "compile/cublas", "tab:orange", "torch.compile / cuBLAS")):
            v = rt.get(key)
            if v is None:
                ax.text(lo * 1.02, y + dy, "n/a", va="center", fontsize=6, color=color)
                continue
            shown = min(max(v, lo), hi)
            ax.barh(y + dy, shown - lo, left=lo, height=h, color=color, label=name if i == 0 else None)
            if v > hi or v < lo:
                ax.text(shown, y + dy, f" {v:.2f}", va="center", ha="right" if v > hi else "left",
                        fontsize=6, color="white" if v > hi else color)
        ax.plot([r["bound"], r["bound"]], [y - 0.48, y + 0.48], color="red", lw=1.2)
        if i and r["workload"] != records[i - 1]["workload"]:  # a rule between workloads
            ax.axhline(y + 0.5, color="gray", lw=0.5)
        if i == 0 or r["workload"] != records[i - 1]["workload"]:
            ax.text(hi * 0.98, y + 0.3, r["workload"], ha="right", va="center", fontsize=7, style="italic",
                    color="dimgray")
    for x, style, name in ((1.0, "-", "1.0 (cuBLAS)"), (BOUND_DEFAULT, "--", "1.15"),
                           (BOUND_SMALL_OR_WIDE, ":", "1.3 (M<=128, wide rows)"),
                           (BOUND_CHAINED, "-.", "1.35 (chained reductions)")):
        ax.axvline(x, color="black" if x == 1.0 else "gray", ls=style, lw=0.9, label=name)
    ax.plot([], [], color="red", lw=1.2, label="the cell's bound")
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ticks = [0.5, 0.75, 1.0, 1.15, 1.3, 1.5, 2.0, 3.0, 5.0]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(range(n))
    ax.set_yticklabels([r["label"] for r in reversed(records)], fontsize=7)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel(f"time / cuBLAS GEMM alone (log; clipped to [{lo:g}, {hi:g}])")
    ax.grid(axis="x", which="major", lw=0.3)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))   # the title above the legend
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---- comfuse compile (CPU: NVRTC) ----

SPILLS = re.compile(r"spills (\d+) bytes")


def plan_of(text):
    """(the kernel's launch plan as `compile` prints it, whether launches take the wide-row path)."""
    plan = next((line.strip() for line in text.splitlines() if line.strip().startswith("tile ")), None)
    return plan, "wide-row path" in text


def compile_cmd(binary, c):
    return [binary, "compile", "--shape", common.shape_arg(c["M"], c["N"], c["K"]),
            common.spec_path(ROOT, c["workload"], c["layout"])]


def compile_one(binary, c, timeout=600):
    """(ok, spill bytes or None, the end of the output) for one `comfuse compile --shape`."""
    try:
        out = subprocess.run(compile_cmd(binary, c), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, None, f"timed out after {timeout} s"
    text = out.stdout + out.stderr
    spills = [int(s) for s in SPILLS.findall(text)]
    return out.returncode == 0, (max(spills) if spills else None), text


def compile_all(binary, cells, jobs):
    """Compiles every distinct (workload, shape) of cells, jobs at a time: {key: result}."""
    keys = {}
    for c in cells:
        keys.setdefault(key_of(c), c)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {k: pool.submit(compile_one, binary, c) for k, c in keys.items()}
        return {k: f.result() for k, f in futs.items()}


def key_of(c):
    return (c["workload"], c["layout"], c["M"], c["N"], c["K"])


def compile_only(binary, cells, jobs, out_dir):
    t0 = time.time()
    results = compile_all(binary, cells, jobs)
    fails = 0
    report = []
    for i, c in enumerate(cells):
        ok, spills, text = results[key_of(c)]
        fails += not ok
        tail = "" if ok else " | ".join(line for line in text.strip().splitlines()[-3:])
        plan, wide = plan_of(text)
        print(f"{'ok  ' if ok else 'FAIL'} {i:>3} {c['workload']:<18} {common.shape_arg(c['M'], c['N'], c['K']):<24} "
              f"spills {spills if spills is not None else '-':>4}  {'wide ' if wide else '     '}{cell_label(c)}"
              f"{('  ' + tail) if tail else ''}")
        report.append({"id": i, "name": cell_name(c), "workload": c["workload"], "M": c["M"], "N": c["N"],
                       "K": c["K"], "ok": ok, "spill_bytes": spills, "plan": plan, "wide_row_path": wide,
                       "log": None if ok else text[-2000:]})
    spilling = [r for r in report if r["spill_bytes"]]
    print("(wide: launches take the wide-row path, the GEMM to f32 then the row kernel)")
    print(f"\ngrid --compile-only: {len(cells) - fails}/{len(cells)} cells compile ({len(results)} kernels, "
          f"{time.time() - t0:.0f} s, {jobs} at a time); {len(spilling)} spill registers"
          + (f" (up to {max(r['spill_bytes'] for r in spilling)} bytes)" if spilling else ""))
    with open(os.path.join(out_dir, "compile.json"), "w") as f:
        json.dump({"schema": SCHEMA + "/compile", "cells": report}, f, indent=1)
    return 1 if fails else 0


# ---- comfuse run --check (GPU, no torch) ----

REL_FRO = re.compile(r"rel Frobenius ([0-9.eE+-]+)")


def check_one(binary, c, rows, seed, timeout=300):
    """(ok, worst relative Frobenius error or None, output) for one `comfuse run --check`."""
    cmd = [binary, "run", "--check", "--rows", str(rows), "--seed", str(seed), "--shape",
           common.shape_arg(c["M"], c["N"], c["K"]), common.spec_path(ROOT, c["workload"], c["layout"])]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, None, f"timed out after {timeout} s: {' '.join(cmd)}"
    text = out.stdout + out.stderr
    errs = [float(e) for e in REL_FRO.findall(text)]
    # a right answer from a kernel whose wgmma pipeline ptxas serialised is still a defect (gpu-check-job)
    ok = out.returncode == 0 and "serialised the wgmma pipeline" not in text
    return ok, (max(errs) if errs else None), text


def check_cells(binary, cells, jobs, rows, out_dir):
    """Correctness at the grid's shapes: every cell's kernel against the float64 reference on an
    even sample of rows, jobs at a time (the reference is CPU-bound)."""
    t0 = time.time()
    compiled = compile_all(binary, cells, max(jobs, os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = [pool.submit(check_one, binary, c, rows, i + 1) for i, c in enumerate(cells)]
        results = [f.result() for f in futs]
    fails, report = 0, []
    for i, (c, (ok, err, text)) in enumerate(zip(cells, results)):
        fails += not ok
        tail = "" if ok else "  " + " | ".join(text.strip().splitlines()[-3:])
        shape = common.shape_arg(c["M"], c["N"], c["K"])
        print(f"{'ok  ' if ok else 'FAIL'} {i:>3} {c['workload']:<18} {shape:<24} rel_fro "
              f"{err if err is not None else '-':<10} {cell_label(c)}{tail}")
        report.append({"id": i, "name": cell_name(c), "workload": c["workload"], "M": c["M"], "N": c["N"],
                       "K": c["K"], "ok": ok, "rel_frobenius": err, "rows": rows,
                       "compiled": compiled[key_of(c)][0], "log": None if ok else text[-2000:]})
    print(f"\ngrid --check: {len(cells) - fails}/{len(cells)} cells right ({rows} rows each, "
          f"{time.time() - t0:.0f} s)")
    with open(os.path.join(out_dir, "check.json"), "w") as f:
        json.dump({"schema": SCHEMA + "/check", "cells": report}, f, indent=1)
    return 1 if fails else 0


# ---- the GPU run ----

def make_inputs(torch, c):
    m, n, k = c["M"], c["N"], c["K"]
    dev = "cuda"
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w_dims = (n, k) if c["layout"] == "nk" else (k, n)
    w = torch.randn(*w_dims, device=dev, dtype=torch.bfloat16) / k ** 0.5
    b = torch.randn(n, device=dev)
    if c["workload"] == "gemm_bias_gelu" and c["model"].startswith("Gemma"):
        b.zero_()  # Gemma's projections have no bias (comfuse's spec adds one: same cost)
    g = torch.rand(n, device=dev) + 0.5
    be = torch.randn(n, device=dev)
    args = [x, w, b, g, be]
    if c["workload"] in common.RESIDUAL:
        args.append(torch.randn(m, n, device=dev, dtype=torch.bfloat16))
    if c["workload"] in common.DUAL:
        args.append(torch.randn(*w_dims, device=dev, dtype=torch.bfloat16) / k ** 0.5)
    return args


def cublas_operands(torch, c, inputs):
    """(X, W) of cuBLAS's GEMM alone, W as a [K, N] operand (a transposed view of an [N, K]
    weight: cuBLAS's TN GEMM, as nn.Linear runs): a dual GEMM's weights side by side, [K, 2N]."""
    nk = c["layout"] == "nk"
    w = torch.cat([inputs[1], inputs[5]], 0 if nk else 1) if c["workload"] in common.DUAL else inputs[1]
    return inputs[0], (w.t() if nk else w)


def raise_recompile_limits(torch):
    """One compiled function per workload keeps a graph per shape: allow them all."""
    import torch._dynamo
    cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 4096))


def timed(r, key, fn):
    """r[key] = fn's median ms; a failure (out of memory, a torch error) is a note, not the end of the run."""
    try:
        r[key] = common.time_ms(fn)
    except Exception as e:
        r["notes"].append(f"{key} failed: {type(e).__name__}: {str(e)[:300]}")


COMPILE_SHARE = 0.55  # of --deadline for torch.compile (beside NVRTC); the timing takes the rest


def gpu_run(args, cells, binary, out_dir):
    import torch
    raise_recompile_limits(torch)
    t_start = T0
    deadline = (t_start + args.deadline) if args.deadline else None
    json_path = os.path.join(out_dir, "grid.json")
    png_path = os.path.join(out_dir, "grid.png")
    meta = {"started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "comfuse": binary,
            "git": git_rev(), "bench_iters": args.iters, "bench_args": args.bench_args,
            "predicted_ms": "the plan's cost model (src/plan.c, `comfuse bench`)"}
    records = [finish_record(new_record(i, c)) for i, c in enumerate(cells)]

    # NVRTC for every cell in the background, torch.compile meanwhile.
    comp = {}
    nvrtc = threading.Thread(target=lambda: comp.update(compile_all(binary, cells, args.jobs)), daemon=True)
    nvrtc.start()
    compiled = {(name, lay): torch.compile(common.with_layout(common.ALL_WORKLOADS[name], lay), dynamic=False)
                for name, lay in sorted({(c["workload"], c["layout"]) for c in cells})}
    torch.manual_seed(0)
    for c, r in zip(cells, records):
        if deadline and time.time() > t_start + COMPILE_SHARE * args.deadline:
            r["notes"].append(f"torch.compile skipped: past {COMPILE_SHARE:.0%} of the deadline")
            continue
        t0 = time.time()
        try:
            inputs = make_inputs(torch, c)
            compiled[(c["workload"], c["layout"])](*inputs)
            torch.cuda.synchronize()
            r["compile_s"] = round(time.time() - t0, 2)
        except Exception as e:  # a compile failure is a finding, not the end of the run
            r["notes"].append(f"torch.compile failed: {type(e).__name__}: {str(e)[:300]}")
        inputs = None
        print(f"# torch.compile {r['label']}: {r['compile_s']} s", flush=True)
    nvrtc.join()
    t_compiled = time.time()
    meta["compile_phase_s"] = round(t_compiled - t_start, 1)  # NVRTC beside torch.compile, torch import included
    print(f"# compiled in {meta['compile_phase_s']} s", flush=True)
    for c, r in zip(cells, records):
        ok, spills, text = comp.get(key_of(c), (False, None, "the compile thread gave no result"))
        r["spill_bytes"] = spills
        r["plan"], r["wide_row_path"] = plan_of(text)
        if not ok:
            r["notes"].append("comfuse compile failed: " + text.strip()[-300:])

    extra = args.bench_args.split()
    for c, r in zip(cells, records):
        if deadline and time.time() > deadline:
            r["status"] = "skipped: deadline"
            continue
        fn = common.with_layout(common.ALL_WORKLOADS[c["workload"]], c["layout"])
        cfn = compiled[(c["workload"], c["layout"])]
        inputs = make_inputs(torch, c)
        timed(r, "eager_ms", lambda: fn(*inputs))
        if r["compile_s"] is not None:
            t0 = time.time()
            cfn(*inputs)
            torch.cuda.synchronize()
            if time.time() - t0 > 1.0:
                r["notes"].append(f"torch.compile recompiled at timing ({time.time() - t0:.1f} s)")
            timed(r, "compile_ms", lambda: cfn(*inputs))
            try:
                r["compile_graph_ms"] = common.graph_ms(lambda: cfn(*inputs))
            except Exception as e:  # a function that cannot be captured keeps its host-timed figure
                r["notes"].append(f"compile_graph_ms failed: {type(e).__name__}: {str(e)[:200]}")
        fused_graph(r, fn, inputs, torch)
        x, w = cublas_operands(torch, c, inputs)
        timed(r, "cublas_ms", lambda: x @ w)
        try:
            r["cublas_graph_ms"] = common.graph_ms(lambda: x @ w)
        except Exception as e:
            r["notes"].append(f"cublas_graph_ms failed: {type(e).__name__}: {str(e)[:200]}")
        inputs = x = w = None
        torch.cuda.empty_cache()  # leave comfuse's process the memory
        vals, log = common.run_bench(ROOT, binary, extra, c["workload"], c["M"], c["N"], c["K"], iters=args.iters,
                                     layout=c["layout"])
        if vals is None:
            r["notes"].append("comfuse bench failed: " + log.strip()[-400:])
        else:
            for key in ("fused_ms", "unfused_ms", "floor_ms", "cublaslt_ms", "fused_over_cublaslt", "predicted_ms"):
                r[key] = vals[key]
        r["status"] = "measured"
        finish_record(r)
        print(row_line(r), flush=True)
        write_json(json_path, meta, records)
    meta["timing_phase_s"] = round(time.time() - t_compiled, 1)
    meta["wall_s"] = round(time.time() - t_start, 1)
    write_outputs(out_dir, meta, records)
    for r in records:
        for note in r["notes"]:
            print(f"# {r['id']} {r['label']}: {note}")
    skipped = [str(r["id"]) for r in records if r["status"] != "measured"]
    if skipped:
        print(f"# not measured (deadline): cells {','.join(skipped)}; rerun them with --cells or a later --deadline")
    print(f"\nwrote {json_path} and {png_path} ({meta['wall_s']} s)")
    return 0


def write_outputs(out_dir, meta, records):
    """A run's grid.json, its table (here and in grid.txt) and grid.png."""
    doc = write_json(os.path.join(out_dir, "grid.json"), meta, records)
    print_table(records, doc["summary"])
    with open(os.path.join(out_dir, "grid.txt"), "w") as f:
        print_table(records, doc["summary"], out=f)
    write_plot(os.path.join(out_dir, "grid.png"), records,
               title=f"comfuse vs cuBLAS and torch.compile, {meta.get('device', '?')}, {meta.get('started', '?')}")
    return doc


def fused_graph(r, fn, inputs, torch):
    """fused_graph_ms: the same torch function through comfuse's Python entry (comfuse.fuse),
    replayed from a CUDA graph as compile_graph_ms is (common.graph_ms): the fused kernel's GPU
    time without host work, like for like with torch.compile's.  Only where every region of it
    ran fused (else it would time PyTorch's fallback)."""
    try:
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import comfuse
        f = comfuse.fuse(fn)
        with torch.no_grad():
            f(*inputs)
            torch.cuda.synchronize()
            regions = f.regions()
            if not regions or any(m.last != "fused" for m in regions):
                r["notes"].append("fused_graph_ms: comfuse.fuse did not fuse every region: "
                                  + ", ".join(str(m.last) for m in regions))
                return
            r["fused_graph_ms"] = common.graph_ms(lambda: f(*inputs))
            r["fused_torch_ms"] = common.time_ms(lambda: f(*inputs))
    except Exception as e:  # the figure is missing, the run goes on
        r["notes"].append(f"fused_graph_ms failed: {type(e).__name__}: {str(e)[:200]}")


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="a dozen cells, every workload")
    ap.add_argument("--cells", default=None, metavar="FILTER",
                    help="only cells whose workload or name contains one of these comma-separated terms")
    ap.add_argument("--out", default=None, metavar="DIR", help="where grid.json and grid.png go ($OUT, else ./grid-out)")
    ap.add_argument("--comfuse", default=None, metavar="BIN", help="the comfuse binary (default: build/comfuse)")
    ap.add_argument("--compile-only", action="store_true",
                    help="no GPU: `comfuse compile --shape` every cell and report the failures")
    ap.add_argument("--check", action="store_true",
                    help="GPU, no torch: `comfuse run --check` every cell against the float64 reference instead")
    ap.add_argument("--rows", type=int, default=32, help="--check: rows checked per cell (an even sample)")
    ap.add_argument("--check-jobs", type=int, default=6, help="--check: checks at a time")
    ap.add_argument("--list", action="store_true", help="print the selected cells and stop")
    ap.add_argument("--from-json", default=None, metavar="JSON",
                    help="no GPU: re-derive a run's ratios, verdicts, table and plot from its recorded times")
    ap.add_argument("--repredict", action="store_true",
                    help="with --from-json: this build's cost model at each recorded cell's plan, beside its measurement (no GPU)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="comfuse compiles at a time")
    ap.add_argument("--iters", type=int, default=100, help="`comfuse bench --iters`")
    ap.add_argument("--bench-args", default="", help="options passed to `comfuse bench`")
    ap.add_argument("--deadline", type=float, default=480,
                    help="seconds from the start after which no new cell starts (0: none); torch.compile "
                         f"stops starting at {COMPILE_SHARE * 100:.0f}%% of it (default %(default)s: done in ~8 min)")
    return ap.parse_args(argv)


PLAN_TILE = re.compile(r"tile (\d+)x(\d+)")
PLAN_STAGES = re.compile(r"(\d+) stages")
PLAN_SLICES = re.compile(r"K in (\d+) slices")
PLAN_ROW = re.compile(r"over (\d+) CTAs")


def plan_overrides(plan):
    """`explain --plan` fields that rebuild a launch plan as `compile` printed it (plan_of)."""
    tile, stages = PLAN_TILE.search(plan), PLAN_STAGES.search(plan)
    if not tile or not stages:
        return None
    slices = PLAN_SLICES.search(plan)
    ov = [f"block_m={tile.group(1)}", f"block_n={tile.group(2)}", f"stages={stages.group(1)}",
          f"split_k={slices.group(1) if slices else 1}"]
    row = PLAN_ROW.search(plan)
    if row:   # a row group: its CTAs, the pair of tiles, multicast (hardware pairs), the finish
        ov += [f"cluster={row.group(1)}", "pair=" + ("on" if "two column tiles" in plan else "off"),
               "multicast=" + ("on" if "cluster 2x1" in plan else "off"),
               "finish=" + ("late" if "finished late" in plan else "sync")]
    if "finisher" in plan:
        ov.append("schedule=finisher")
    return ",".join(ov)


PREDICTED = re.compile(r"^predicted: ([\d.]+) us", re.M)


def repredict_cells(doc, binary):
    """[(record, predicted µs or None, why not)] for a recorded run's measured cells, each plan
    rebuilt with `explain --plan` and predicted by this build."""
    out = []
    for r in doc["cells"]:
        ov = plan_overrides(r.get("plan") or "")
        if r.get("fused_ms") is None or not ov:
            continue
        cmd = [binary, "explain", "--shape", common.shape_arg(r["M"], r["N"], r["K"]), "--plan", ov,
               common.spec_path(ROOT, r["workload"], r["layout"])]
        res = subprocess.run(cmd, capture_output=True, text=True)
        pred = PREDICTED.search(res.stdout)
        out.append((r, float(pred.group(1)) if not res.returncode and pred else None,
                    (res.stderr.strip() or "no prediction")[:90]))
    return out


def model_fit(rows):
    """(cells, geomean, log-sd, lowest, highest) of measured/predicted over the rebuilt cells off
    the wide-row path; None without any."""
    logs = [math.log(r["fused_ms"] * 1e3 / p) for r, p, _ in rows if p and not r.get("wide_row_path")]
    if not logs:
        return None
    mean = sum(logs) / len(logs)
    sd = (sum((x - mean) ** 2 for x in logs) / len(logs)) ** 0.5
    return len(logs), math.exp(mean), sd, math.exp(min(logs)), math.exp(max(logs))


def repredict(path, binary):
    """This build's cost model against a recorded run: measured/predicted per cell, and its
    geomean and spread (log standard deviation) over the cells off the wide-row path.  A change
    to the model is checked here, without a GPU, before a run measures the plans it picks."""
    with open(path) as f:
        rows = repredict_cells(json.load(f), binary)
    for r, p, why in rows:
        if p is None:
            print(f"{r['id']:>3} {r['label']:<44} not rebuilt: {why}")
            continue
        print(f"{r['id']:>3} {r['label']:<44} measured {r['fused_ms'] * 1e3:9.1f} us  predicted {p:9.1f} us  "
              f"{r['fused_ms'] * 1e3 / p:5.2f}{'  (wide rows)' if r.get('wide_row_path') else ''}")
    fit = model_fit(rows)
    if not fit:
        print("repredict: no cell rebuilt")
        return 1
    n, gm, sd, lo, hi = fit
    print(f"\n{n} cells (wide rows left out, {sum(1 for _, p, _ in rows if p is None)} not rebuilt): "
          f"measured/predicted geomean {gm:.3f}, log-sd {sd:.3f}, range {lo:.2f} .. {hi:.2f}")
    return 0


def rederive(path, out_dir):
    """The verdicts of a recorded run under this script's rules: its times as measured, ratios,
    bounds' verdicts, summary, table and plot computed again (after a change of how they are judged)."""
    with open(path) as f:
        doc = json.load(f)
    records = [finish_record(r) for r in doc["cells"]]
    meta = {k: v for k, v in doc.items() if k not in ("schema", "summary", "cells")}
    os.makedirs(out_dir, exist_ok=True)
    write_outputs(out_dir, meta, records)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.repredict:
        if not args.from_json:
            sys.stderr.write("grid: --repredict needs --from-json (the measurements to predict)\n")
            return 2
        return repredict(args.from_json, args.comfuse or os.path.join(ROOT, "build", "comfuse"))
    if args.from_json:   # the recorded run's cells, whatever --cells says
        return rederive(args.from_json, args.out or os.environ.get("OUT") or "grid-out")
    cells = select(CELLS, args.quick, args.cells)
    if not cells:
        sys.stderr.write(f"grid: no cell matches --cells {args.cells!r}\n")
        return 2
    if args.list:
        for i, c in enumerate(cells):
            b, why = bound_of(c)
            print(f"{i:>3} {c['workload']:<18} bound {b:.2f} ({why})  {cell_name(c)}")
        return 0
    out_dir = args.out or os.environ.get("OUT") or "grid-out"
    os.makedirs(out_dir, exist_ok=True)
    binary = args.comfuse or os.path.join(ROOT, "build", "comfuse")
    if not os.access(binary, os.X_OK):
        sys.stderr.write(f"grid: {binary} is not an executable (run make first, or pass --comfuse BIN)\n")
        return 2
    if args.compile_only:
        return compile_only(binary, cells, args.jobs, out_dir)
    if args.check:
        return check_cells(binary, cells, args.check_jobs, args.rows, out_dir)
    return gpu_run(args, cells, binary, out_dir)


if __name__ == "__main__":
    sys.exit(main())
