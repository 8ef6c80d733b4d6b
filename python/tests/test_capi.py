"""The ctypes layer over include/comfuse.h: loading, the graph builder, Φ, kernels."""
import os
import subprocess
import sys

import pytest

import comfuse
from comfuse import _lib, capi

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ln_graph(w_nk=True, out_dtype="bf16"):
    g = capi.Graph()
    M, N, K = g.dim("M"), g.dim("N"), g.dim("K")
    X = g.input("X", "bf16", [M, K])
    W = g.input("W", "bf16", [N, K] if w_nk else [K, N])
    b = g.input("bias", "f32", [N])
    x = g.binary("add", g.matmul(X, W), b)
    d = g.binary("sub", x, g.reduce("mean", x))
    var = g.reduce("mean", g.unary("square", d))
    y = g.binary("mul", d, g.unary("rsqrt", g.binary("add", var, g.const(1e-5))))
    g.output("Y", y, out_dtype)
    return g


def test_op_table_matches_library():
    lib = _lib.lib()
    assert lib.cf_status_name(len(_lib.STATUS)).decode() == "unknown status"   # same count as cf_status
    assert lib.cf_status_name(len(_lib.STATUS) - 1).decode() != "unknown status"
    assert _lib.CF_ERR_UNSUPPORTED == 5 and _lib.CF_ERR_NO_DEVICE == 9
    for i, kw in enumerate(_lib.OPS):
        assert lib.cf_op_name(i).decode() == kw
    assert lib.cf_op_name(len(_lib.OPS)).decode() == "?"   # no op the package does not know


def test_missing_library_is_a_clear_error():
    env = dict(os.environ, COMFUSE_LIB="/nonexistent/libcomfuse.so", PYTHONPATH=os.path.dirname(comfuse.__path__[0]))
    code = "import comfuse, comfuse._lib as L\ntry:\n    L.lib()\nexcept comfuse.LibraryNotFound as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "libcomfuse.so not found" in out.stdout and "/nonexistent/libcomfuse.so" in out.stdout
    assert "COMFUSE_LIB" in out.stdout


def test_graph_introspection_and_lowering():
    g = _ln_graph()
    assert g.num_inputs() == 3 and g.num_outputs() == 1
    assert g.input_info(1) == ("W", "bf16", 2, (1, 2))      # [N, K]: nn.Linear's layout
    assert g.output_info(0)[:3] == ("Y", "bf16", 2)
    ir = g.lower()
    assert ir.num_stages() == 3                             # two reductions
    text = g.explain()
    assert "nn.Linear layout" in text and "reduction" in text


def test_builder_error_is_raised_with_its_message():
    g = capi.Graph()
    M, N, K = g.dim("M"), g.dim("N"), g.dim("K")
    X = g.input("X", "bf16", [M, K])
    v = g.input("v", "f32", [K])
    g.binary("add", g.matmul(X, g.input("W", "bf16", [K, N])), v)
    with pytest.raises(capi.CfError) as e:
        g.check()
    assert e.value.status_name == "CF_ERR_SHAPE" and "do not broadcast" in str(e.value)


def test_lower_rejects_outside_domain():
    g = capi.Graph()
    M, N, K = g.dim("M"), g.dim("N"), g.dim("K")
    y = g.matmul(g.input("X", "bf16", [M, K]), g.input("W", "bf16", [K, N]))
    g.output("Y", g.binary("add", y, g.reduce("sum", y, 0)), "bf16")   # [N] broadcast of a column sum
    with pytest.raises(capi.CfError) as e:
        g.lower()
    assert e.value.unsupported and "only row reductions" in str(e.value)


def test_spec_parse_matches_builder():
    with open(os.path.join(REPO, "examples", "gemm_bias_ln.cf")) as f:
        g = capi.parse_spec(f.read(), "gemm_bias_ln.cf")
    assert g.num_inputs() == 5 and "3 stages" in g.explain()
    with pytest.raises(capi.CfError) as e:
        capi.parse_spec("input X: bf16[M, K]\noutput Y = X @\n", "bad.cf")
    assert e.value.status_name == "CF_ERR_PARSE" and "bad.cf:2" in str(e.value)


def test_options_for_fills_every_field():
    o = _ln_graph().options_for(4096, 1024, 1024)
    assert o["block_m"] in (64, 128) and o["block_n"] % 16 == 0 and o["stages"] > 0 and o["cluster_n"] >= 1
    # the size the kernel is planned for travels with the options; the schedule's internals do not
    assert (o["m"], o["n"], o["k"]) == (4096, 1024, 1024) and "pair_tiles" not in o


def test_kernel_build_generates_source():
    g = _ln_graph()
    k = capi.Kernel(g, g.options_for(4096, 1024, 512))
    src = k.source()
    assert "b_nk = true;" in src and "cf_store" in src


def _nvrtc_available():
    try:
        k = capi.Kernel(_ln_graph(w_nk=False))
        k.compile()
        return k
    except capi.CfError as e:
        if e.status_name == "CF_ERR_NVRTC" and "not found" in str(e):
            return None
        raise


def test_kernel_compile_and_resources():
    k = _nvrtc_available()
    if k is None:
        pytest.skip("NVRTC not installed")
    r = k.resources()
    assert r["threads"] >= 256 and r["smem_bytes"] > 0 and r["cache_path"]
    assert r["split_k"] == 1                      # the struct's layout agrees with the C header's


def test_split_k_in_resources():
    """At a decode batch the plan slices K; resources say so (the C API's options leave it to
    the plan at the shape they were made for)."""
    g = _ln_graph()
    try:
        k = capi.Kernel(g, g.options_for(64, 4096, 4096))
        k.prepare((64, 4096, 4096))
    except capi.CfError as e:
        if e.status_name == "CF_ERR_NVRTC" and "not found" in str(e):
            pytest.skip("NVRTC not installed")
        raise
    r = k.resources()
    assert r["split_k"] > 1 and r["block_m"] == 64 and r["cache_path"]


def test_kernel_prepare():
    """prepare compiles what a launch runs (no GPU) and checks its dims like launch."""
    g = _ln_graph()
    k = capi.Kernel(g, g.options_for(256, 4096, 512))
    with pytest.raises(ValueError):
        k.prepare((256, 4096))                   # two dims where the graph has three
    try:
        k.prepare((4096, 4096, 512))
    except capi.CfError as e:
        if e.status_name == "CF_ERR_NVRTC" and "not found" in str(e):
            pytest.skip("NVRTC not installed")
        raise
    assert k.resources()["threads"] >= 256       # compiled by it


def test_launch_checks_arguments_before_the_gpu():
    g = _ln_graph()
    k = capi.Kernel(g)
    with pytest.raises(ValueError):
        k.launch([128, 256, 64], [0, 0], [0])    # two inputs where the graph has three



def test_struct_layouts_match_header(tmp_path):
    """Every ctypes struct has the size and field offsets the C header gives it (a struct that
    grew in comfuse.h but not here let cf_kernel_resources write past Python's buffer)."""
    structs = [c for c in vars(_lib).values() if isinstance(c, type) and issubclass(c, _lib.ctypes.Structure)]
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "comfuse.h"', "int main(void) {"]
    for c in structs:
        lines.append(f'    printf("{c.__name__} size %zu\\n", sizeof({c.__name__}));')
        for name, _ in c._fields_:
            lines.append(f'    printf("{c.__name__} {name} %zu\\n", offsetof({c.__name__}, {name}));')
    lines += ["    return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run(["cc", "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o", str(exe)], check=True)
    got = {}
    for line in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines():
        s, f, v = line.split()
        got[(s, f)] = int(v)
    for c in structs:
        assert got[(c.__name__, "size")] == _lib.ctypes.sizeof(c), c.__name__
        for name, _ in c._fields_:
            assert got[(c.__name__, name)] == getattr(c, name).offset, f"{c.__name__}.{name}"
