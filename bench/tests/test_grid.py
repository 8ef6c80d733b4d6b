"""CPU tests of bench/grid.py: its cell table, its JSON and plot writing, and the parsing it
shares with compare.py (bench/common.py).  No GPU, no torch:  python3 -m pytest bench/tests"""
import json
import math
import os
import sys

import pytest

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import common  # noqa: E402
import grid  # noqa: E402

ROOT = os.path.dirname(BENCH)
SEVEN = {"gemm_bias_gelu", "gemm_bias_gelu_erf", "gemm_bias_ln", "gemm_rmsnorm", "gemm_softmax",
         "gemm_ln_softmax", "gemm_residual_ln", "gemm_rmsnorm_res2", "swiglu"}


def test_grid_has_48_named_cells_of_every_workload_and_m():
    cells = grid.CELLS
    assert len(cells) >= 48
    assert {c["workload"] for c in cells} == SEVEN
    assert {64, 512, 2048, 8192} <= {c["M"] for c in cells}
    for w in SEVEN:  # every workload at small and large M
        ms = {c["M"] for c in cells if c["workload"] == w}
        assert min(ms) <= 512 and max(ms) >= 2048, (w, ms)
    assert {32000, 50257, 128256} <= {c["N"] for c in cells}
    assert {64, 128} <= {c["K"] for c in cells}  # attention scores: K = head dim
    keys = [grid.key_of(c) for c in cells]
    assert len(keys) == len(set(keys)), "a cell twice"
    for c in cells:
        name = grid.cell_name(c)
        assert c["model"] and c["layer"] and name.startswith(c["model"])
        assert f"N={c['N']}" in name and f"K={c['K']}" in name and f"M={c['M']}" in name
        assert c["M"] > 0 and c["N"] > 0 and c["K"] > 0 and c["N"] <= 262144


def test_every_workload_has_a_spec_and_a_torch_function():
    for w in SEVEN:
        path = common.spec_path(ROOT, w)
        assert os.path.isfile(path), path
        assert callable(common.ALL_WORKLOADS[w])
        text = open(path).read()
        # the residual workloads take R: bf16[M, N], and their torch versions take it as r
        assert ("input R: bf16[M, N]" in text) == (w in common.RESIDUAL), w
    assert "H" in open(common.spec_path(ROOT, "gemm_rmsnorm_res2")).read().split("output Y")[0]


def test_quick_is_a_dozen_cells_of_every_workload():
    q = grid.select(grid.CELLS, quick=True)
    assert 10 <= len(q) <= 16
    assert {c["workload"] for c in q} == SEVEN


def test_cells_filter_matches_workload_or_name_case_insensitively():
    only = grid.select(grid.CELLS, filt="gemm_rmsnorm_res2")
    assert only and all(c["workload"] == "gemm_rmsnorm_res2" for c in only)
    llama3 = grid.select(grid.CELLS, filt="llama-3 8b lm_head,GPT-2 xl lm_head")
    assert {c["N"] for c in llama3} == {128256, 50257}
    assert grid.select(grid.CELLS, filt="no such model") == []
    assert grid.select(grid.CELLS, quick=True, filt="gemm_softmax") == \
        [c for c in grid.select(grid.CELLS, quick=True) if c["workload"] == "gemm_softmax"]


def test_dual_cells_take_both_weights_and_the_k_2n_baseline():
    c = mk("swiglu", 2048, 11008)
    assert grid.bound_of(c) == (grid.BOUND_DUAL, "dual GEMM vs [K, 2N]")
    assert "input Wu: bf16[K, N]" in open(common.spec_path(ROOT, "swiglu")).read()
    cat = []

    class T:
        def cat(self, ts, dim=0):
            cat.append((ts, dim))
            return "Wcat"
    class W(str):
        def t(self):
            return self + ".t"
    inputs = ["x", "wg", "b", "g", "be", "wu"]
    assert c["layout"] == "nk"        # nn.Linear's weights: [N, K], cuBLAS's TN GEMM over the view
    T.cat = lambda self, ts, dim=0: cat.append((ts, dim)) or W("Wcat")
    assert grid.cublas_operands(T(), c, inputs) == ("x", "Wcat.t") and cat == [(["wg", "wu"], 0)]
    kn = dict(c, layout="kn")
    assert grid.cublas_operands(T(), kn, inputs) == ("x", "Wcat") and cat[-1] == (["wg", "wu"], 1)
    assert grid.cublas_operands(T(), mk("gemm_rmsnorm", 64, 4096), ["x", W("wg")] + inputs[2:5]) == ("x", "wg.t")


def test_layouts_follow_the_models_code():
    """nn.Linear's [N, K] weights everywhere but GPT-2's Conv1D layers; the [N, K] spec is the
    example's with its weights flipped, and the torch function takes them as [N, K]."""
    lay = {(c["model"], c["layer"]): c["layout"] for c in grid.CELLS}
    assert {v for (m, l), v in lay.items() if m.startswith("GPT-2") and "lm_head" in l} == {"nk"}
    assert {v for (m, l), v in lay.items() if m.startswith("GPT-2") and "c_fc" in l} == {"kn"}
    assert {v for (m, l), v in lay.items() if not m.startswith("GPT-2")} == {"nk"}
    text = open(common.spec_path(ROOT, "swiglu", "nk")).read()
    assert "input Wg: bf16[N, K]" in text and "input Wu: bf16[N, K]" in text and "[K, N]" not in text
    assert common.with_layout(common.gemm, "kn") is common.gemm
    assert common.with_layout(common.swiglu, "nk").__name__ == "swiglu_nk"
    assert common.nk_spec_text("input W: f16[K, N]\ninput W2: bf16[K, N2]\n") == \
        "input W: f16[N, K]\ninput W2: bf16[N2, K]\n"


def test_nk_specs_written_by_many_threads_at_once(tmp_path):
    """The grid compiles its cells from a pool of threads (one pid): each writer of build/specs-nk
    needs a temporary file of its own, else one's rename takes another's file from under it."""
    import concurrent.futures
    names = ["swiglu", "gemm_rmsnorm", "gemm_bias_ln", "gemm_softmax"] * 8
    for attempt in range(8):   # a fresh tree each time: the race is in the first writes
        root = tmp_path / str(attempt)
        root.mkdir()
        os.symlink(os.path.join(ROOT, "examples"), root / "examples")
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            paths = list(ex.map(lambda n: common.spec_path(str(root), n, "nk"), names))
        for n, p in zip(names, paths):
            assert open(p).read() == common.nk_spec_text(open(os.path.join(ROOT, "examples", n + ".cf")).read())
        assert sorted(os.listdir(root / "build" / "specs-nk")) == sorted(n + ".cf" for n in set(names))


def mk(workload, m, n, k=4096):
    return grid.cell(workload, "Model", "layer", "short", m, "desc", n, k)


def test_bounds_follow_issue_29():
    assert grid.bound_of(mk("gemm_rmsnorm", 2048, 4096)) == (1.15, "default")
    assert grid.bound_of(mk("gemm_rmsnorm", 64, 4096))[0] == 1.3
    assert grid.bound_of(mk("gemm_softmax", 512, 50257)) == (1.3, "wide rows")
    assert grid.bound_of(mk("gemm_ln_softmax", 2048, 768))[0] == 1.35
    assert grid.bound_of(mk("gemm_ln_softmax", 64, 1600))[0] == 1.35  # the looser of the two
    assert grid.bound_of(mk("gemm_bias_gelu", 8192, 24576))[0] == 1.15  # no row: not "wide"
    assert grid.in_main_set(mk("gemm_rmsnorm", 512, 16384))
    assert not grid.in_main_set(mk("gemm_rmsnorm", 64, 4096))
    assert not grid.in_main_set(mk("gemm_softmax", 2048, 32000))


def fake_records():
    cells = grid.select(grid.CELLS, quick=True)
    recs = []
    for i, c in enumerate(cells):
        r = grid.new_record(i, c)
        if i == 3:  # a cell cut by the deadline keeps its nulls
            r["status"] = "skipped: deadline"
        else:
            r.update(fused_ms=1.0 + 0.1 * i, cublas_ms=1.0, compile_ms=1.2, eager_ms=2.0, unfused_ms=None,
                     fused_torch_ms=1.05 + 0.1 * i)
            r["status"] = "measured"
        recs.append(grid.finish_record(r))
    return recs


def test_json_has_every_column_and_the_prediction(tmp_path):
    recs = fake_records()
    path = str(tmp_path / "grid.json")
    grid.write_json(path, {"device": "test"}, recs)
    doc = json.load(open(path))
    assert doc["schema"] == grid.SCHEMA and doc["device"] == "test"
    assert len(doc["cells"]) == len(recs)
    r0, r3 = doc["cells"][0], doc["cells"][3]
    for key in ("name", "model", "layer", "M", "N", "K", "fused_ms", "cublas_ms", "compile_ms", "eager_ms",
                "unfused_ms", "bound", "within_bound", "faster_than_compile", "ratios"):
        assert key in r0, key
    assert "predicted_ms" in r0 and r0["predicted_ms"] is None   # a binary without the model: null
    assert r0["ratios"]["fused/predicted"] is None
    assert r0["layout"] in ("kn", "nk") and r0["ratios"]["fused_torch/cublas"] == pytest.approx(1.05)
    assert r3["fused_torch_ms"] is None and r3["ratios"]["fused_torch/cublas"] is None
    r1 = dict(recs[1], predicted_ms=0.5)
    assert grid.finish_record(r1)["ratios"]["fused/predicted"] == pytest.approx(1.1 / 0.5)
    assert "0.5000" in grid.row_line(r1) and "2.200" in grid.row_line(r1)
    assert r0["ratios"]["fused/cublas"] == pytest.approx(1.0)
    assert r0["ratios"]["compile/cublas"] == pytest.approx(1.2)
    assert r0["ratios"]["fused/compile"] == pytest.approx(1.0 / 1.2)
    assert r0["ratios"]["unfused/cublas"] is None
    assert r0["within_bound"] is True and r0["faster_than_compile"] is True
    assert r3["fused_ms"] is None and r3["within_bound"] is None and r3["status"] == "skipped: deadline"
    s = doc["summary"]
    assert s["measured"] == len(recs) - 1
    measured = [r for r in recs if r["status"] == "measured"]
    want = math.exp(sum(math.log(r["fused_ms"]) for r in measured) / len(measured))
    assert s["geomean_fused_over_cublas_all"] == pytest.approx(want)
    over = [r["label"] for r in measured if r["fused_ms"] > r["bound"]]
    assert over and s["over_bound"] == over  # fused/cuBLAS grows past 1.15 in the fake data
    assert s["slower_than_compile"] == [r["label"] for r in measured if r["fused_ms"] >= 1.2]
    assert not os.path.exists(path + ".tmp")


def test_from_json_rederives_the_verdicts_from_the_recorded_times(tmp_path, capsys):
    """--from-json: a run recorded with fused/cuBLAS over torch's figure is judged again by
    bench's per-turn ratio to cuBLASLt (like for like), which is what the verdicts now use."""
    recs = fake_records()
    for r in recs:
        r["ratios"]["fused/cublas"] = 0.5   # a stale verdict the recorded file carries
        if r["status"] == "measured":
            r["fused_over_cublaslt"] = 2.0   # over every bound
    src = str(tmp_path / "old.json")
    grid.write_json(src, {"device": "FakeGPU", "started": "then"}, recs)
    out = tmp_path / "new"
    assert grid.main(["--from-json", src, "--out", str(out), "--cells", "no such cell"]) == 0
    doc = json.load(open(out / "grid.json"))
    measured = [c for c in doc["cells"] if c["status"] == "measured"]
    assert measured and all(c["ratios"]["fused/cublas"] == 2.0 and c["within_bound"] is False for c in measured)
    assert all(c["ratios"]["fused/cublas_torch"] == pytest.approx(c["fused_ms"] / c["cublas_ms"]) for c in measured)
    assert doc["summary"]["within_bound"] == 0 and doc["device"] == "FakeGPU"
    assert "geomean fused/cuBLAS" in open(out / "grid.txt").read() and "OVER" in capsys.readouterr().out


def test_plan_overrides_rebuild_the_measured_plan():
    """--repredict rebuilds each cell's launch from the plan string `compile` printed."""
    ov = grid.plan_overrides("tile 64x192 per consumer warpgroup, 6 stages, pingpong, cluster 2x1, K in 6 slices, "
                             "row reductions over 22 CTAs through L2, tiles finished late, 384 threads")
    assert ov == "block_m=64,block_n=192,stages=6,split_k=6,cluster=22,pair=off,multicast=on,finish=late"
    ov = grid.plan_overrides("tile 64x192 per consumer warpgroup, 5 stages, pingpong, cluster 1x1, row reductions "
                             "over 22 CTAs of two column tiles each through L2, tiles finished late, 384 threads")
    assert "pair=on" in ov and "multicast=off" in ov and "split_k=1" in ov
    assert grid.plan_overrides("tile 128x128 per consumer warpgroup, 6 stages, pingpong, cluster 1x1, 384 threads") == \
        "block_m=128,block_n=128,stages=6,split_k=1"
    assert grid.plan_overrides("") is None


def test_repredict_prints_the_models_fit(tmp_path, capsys):
    """--repredict: measured over this build's prediction per cell, geomean and spread; a cell
    the binary cannot rebuild is named, not fatal; it needs --from-json."""
    recs = fake_records()
    for i, r in enumerate(recs):
        r["plan"] = "tile 128x128 per consumer warpgroup, 6 stages, pingpong, cluster 1x1, 384 threads"
        r["fused_ms"] = 0.02 if i % 2 else 0.005
        r["wide_row_path"] = False
    src = str(tmp_path / "run.json")
    grid.write_json(src, {"device": "FakeGPU"}, recs)
    fake = tmp_path / "comfuse"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *M=64,*) echo bad plan >&2; exit 2;; esac\necho 'predicted: 10.0 us'\n")
    fake.chmod(0o755)
    assert grid.main(["--from-json", src, "--repredict", "--comfuse", str(fake)]) == 0
    out = capsys.readouterr().out
    rebuilt = [r for r in recs if r["M"] != 64]
    assert len(rebuilt) >= 2 and f"{len(rebuilt)} cells" in out
    want = math.exp(sum(math.log(r["fused_ms"] * 1e3 / 10.0) for r in rebuilt) / len(rebuilt))
    assert f"geomean {want:.3f}" in out
    assert len(rebuilt) < len(recs) and "not rebuilt: bad plan" in out
    assert grid.main(["--repredict"]) == 2 and "needs --from-json" in capsys.readouterr().err


def test_table_prints_a_row_per_cell_and_the_summary(capsys):
    recs = fake_records()
    grid.print_table(recs, grid.summarize(recs))
    out = capsys.readouterr().out
    assert out.count("\n") >= len(recs) + 3
    assert "OVER" in out and ">compile" in out and "geomean" in out


def test_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    recs = fake_records()
    recs[0]["ratios"]["fused/cublas"] = 9.0  # clipped, labelled with its value
    path = str(tmp_path / "grid.png")
    assert grid.write_plot(path, recs)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert grid.write_plot(str(tmp_path / "x.png"), fake_records()) is False
    assert "matplotlib" in capsys.readouterr().err


def test_parse_bench_line():
    out = ("fused ... \nBENCH\texamples/gemm_softmax.cf\tM=64,N=32000,K=4096\t0.1500\t0.1000\t0.0500\t-"
           "\t1.480\t-\n")
    v = common.parse_bench(out)
    assert v == {"fused_ms": 0.15, "cublaslt_ms": 0.1, "floor_ms": 0.05, "unfused_ms": None,
                 "fused_over_cublaslt": 1.48, "unfused_over_cublaslt": None, "predicted_ms": None}
    v = common.parse_bench(out.replace("\t-\n", "\t-\t0.1250\n"))  # the plan's prediction, ms
    assert v["predicted_ms"] == 0.125 and v["fused_ms"] == 0.15
    short = common.parse_bench("BENCH\ts\tM=1\t0.2\t0.1\n")  # older binaries: fewer fields
    assert short["fused_ms"] == 0.2 and short["unfused_ms"] is None
    assert common.parse_bench("comfuse bench: no GPU\n") is None


def test_spill_bytes_are_read_from_compile_output():
    text = "  registers 168/thread, spills 732 bytes, stack frame 224 bytes\n"
    assert [int(s) for s in grid.SPILLS.findall(text)] == [732]


def test_help_prints(capsys):
    with pytest.raises(SystemExit) as e:
        grid.main(["--help"])
    assert e.value.code == 0 and "--compile-only" in capsys.readouterr().out


def test_list_and_bad_filter(capsys):
    assert grid.main(["--list", "--quick"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == len(grid.select(grid.CELLS, quick=True))
    assert grid.main(["--list", "--cells", "no such model"]) == 2


def test_missing_binary_is_an_error_not_a_crash(tmp_path, capsys):
    assert grid.main(["--compile-only", "--comfuse", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "not an executable" in capsys.readouterr().err


class FakeTensor:
    """Enough of a tensor for grid.make_inputs: shapes are not checked."""
    def __truediv__(self, o):
        return self

    def t(self):
        return self

    __add__ = __radd__ = __matmul__ = __truediv__

    def zero_(self):
        return self


def fake_torch(monkeypatch):
    """A torch module with the calls gpu_run makes, none of them on a GPU."""
    import types
    torch = types.ModuleType("torch")
    dynamo = types.ModuleType("torch._dynamo")
    dynamo.config = types.SimpleNamespace(cache_size_limit=8, accumulated_cache_size_limit=256)
    torch._dynamo = dynamo
    torch.__version__ = "fake"
    torch.bfloat16 = "bf16"
    torch.cuda = types.SimpleNamespace(get_device_name=lambda: "FakeGPU", synchronize=lambda: None,
                                       empty_cache=lambda: None)
    torch.compiled = []
    torch.compile = lambda fn, dynamic=None: torch.compiled.append(dynamic) or (lambda *a: None)
    torch.manual_seed = lambda s: None
    torch.randn = torch.rand = lambda *a, **k: FakeTensor()
    torch.cat = lambda ts, dim=0: FakeTensor()
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._dynamo", dynamo)
    return torch


FAKE_COMFUSE = """#!/bin/sh
case $1 in
compile) case $3 in *K=${FAIL_K:-none}) echo "comfuse compile: spec.cf:1:1: boom" >&2; exit 1 ;; esac
         echo "  tile 128x128 per consumer warpgroup, 5 stages"
         echo "  registers 168/thread, spills 8 bytes, stack frame 0 bytes"
         case $3 in *N=50257*) echo "  rows of N=50257 are wider than the row group: launches run the wide-row path" ;; esac ;;
bench) shape=$5
       case $shape in *N=32000*) echo "comfuse bench: failed on purpose" >&2; exit 1 ;; esac
       printf 'BENCH\\t%s\\t%s\\t0.0120\\t0.0100\\t0.0050\\t0.0200\\t1.150\\t2.000\\t0.0100\\n' "$6" "$shape" ;;
run) shape=$8
     case $shape in *N=50257*) echo "  check Y: max |err| 1e0, rel Frobenius 5.000e-01, FAIL"; exit 4 ;; esac
     echo "  check Y: 100 elements: max |err| 1e-3, rel Frobenius 1.250e-03, ok" ;;
esac
"""


def test_gpu_run_end_to_end_with_fakes(tmp_path, monkeypatch, capsys):
    torch = fake_torch(monkeypatch)
    times = {"n": 0}

    def fake_time_ms(fn):
        times["n"] += 1
        if times["n"] == 2:  # the first cell's torch.compile timing fails: a note, the run goes on
            raise RuntimeError("CUDA out of memory (fake)")
        return 0.010
    monkeypatch.setattr(common, "time_ms", fake_time_ms)
    binary = tmp_path / "comfuse"
    binary.write_text(FAKE_COMFUSE)
    binary.chmod(0o755)
    out = tmp_path / "out"
    rc = grid.main(["--quick", "--out", str(out), "--comfuse", str(binary), "--jobs", "2"])
    assert rc == 0
    assert torch._dynamo.config.cache_size_limit >= 1024  # a graph per shape, no silent eager fallback
    assert set(torch.compiled) == {False}  # dynamic=False, one compiled function per workload and layout
    quick = grid.select(grid.CELLS, quick=True)
    assert len(torch.compiled) == len({(c["workload"], c["layout"]) for c in quick}) > len({c["workload"] for c in quick})
    doc = json.load(open(out / "grid.json"))
    cells = doc["cells"]
    assert len(cells) == len(grid.select(grid.CELLS, quick=True)) and doc["device"] == "FakeGPU"
    assert times["n"] == 3 * len(cells)  # eager, compile, cuBLAS per cell
    ok = [c for c in cells if c["N"] != 32000]
    bad = [c for c in cells if c["N"] == 32000]
    assert bad and ok
    assert cells[0]["compile_ms"] is None and "out of memory" in cells[0]["notes"][0]
    assert cells[0]["faster_than_compile"] is None and cells[0]["fused_ms"] == 0.012
    for c in ok:
        assert c["fused_ms"] == 0.012 and c["unfused_ms"] == 0.02 and c["cublaslt_ms"] == 0.01
        assert c["fused_over_cublaslt"] == 1.15 and c["spill_bytes"] == 8 and c["predicted_ms"] == 0.01
        assert c["ratios"]["fused/predicted"] == pytest.approx(1.2)
        # like for like: bench's own per-turn ratio to cuBLASLt, not the fused event time over torch's do_bench
        assert c["ratios"]["fused/cublas"] == pytest.approx(1.15) and c["status"] == "measured"
        assert c["ratios"]["fused/cublas_torch"] == pytest.approx(1.2)
        assert c["plan"] == "tile 128x128 per consumer warpgroup, 5 stages"
        assert c["wide_row_path"] == (c["N"] == 50257)
    for c in bad:  # a failed bench is a note and nulls, not the end of the run
        assert c["fused_ms"] is None and any("bench failed" in n for n in c["notes"])
    printed = capsys.readouterr().out
    assert "geomean" in printed and "wrote" in printed
    assert "geomean" in (out / "grid.txt").read_text()
    assert doc["compile_phase_s"] >= 0 and doc["timing_phase_s"] >= 0 and doc["wall_s"] >= doc["timing_phase_s"]
    try:
        import matplotlib  # noqa: F401
        assert (out / "grid.png").exists()
    except ImportError:
        pass


def test_check_mode_reports_each_cell(tmp_path, capsys):
    binary = tmp_path / "comfuse"
    binary.write_text(FAKE_COMFUSE)
    binary.chmod(0o755)
    rc = grid.main(["--check", "--quick", "--rows", "8", "--out", str(tmp_path), "--comfuse", str(binary)])
    assert rc == 1  # the GPT-2 vocabulary cell fails on purpose
    doc = json.load(open(tmp_path / "check.json"))
    bad = [c for c in doc["cells"] if not c["ok"]]
    assert [c["N"] for c in bad] == [50257] and bad[0]["rel_frobenius"] == 0.5
    good = [c for c in doc["cells"] if c["ok"]]
    assert good and all(c["rel_frobenius"] == 1.25e-3 and c["compiled"] and c["rows"] == 8 for c in good)
    out = capsys.readouterr().out
    assert "FAIL" in out and f"{len(good)}/{len(doc['cells'])} cells right" in out


def test_a_past_deadline_still_writes_json_of_skipped_cells(tmp_path, monkeypatch, capsys):
    fake_torch(monkeypatch)
    monkeypatch.setattr(common, "time_ms", lambda fn: 0.01)
    binary = tmp_path / "comfuse"
    binary.write_text(FAKE_COMFUSE)
    binary.chmod(0o755)
    assert grid.main(["--cells", "gemm_softmax", "--deadline", "0.001", "--out", str(tmp_path),
                      "--comfuse", str(binary)]) == 0
    doc = json.load(open(tmp_path / "grid.json"))
    assert doc["cells"] and all(c["status"] == "skipped: deadline" for c in doc["cells"])
    assert all(any("torch.compile skipped" in n for n in c["notes"]) for c in doc["cells"])
    assert doc["summary"]["measured"] == 0 and doc["summary"]["geomean_fused_over_cublas_all"] is None
    assert "not measured (deadline)" in capsys.readouterr().out


def test_compile_only_reports_failures_spills_and_wide_rows(tmp_path, monkeypatch, capsys):
    binary = tmp_path / "comfuse"
    binary.write_text(FAKE_COMFUSE)
    binary.chmod(0o755)
    monkeypatch.setenv("FAIL_K", "128")
    rc = grid.main(["--compile-only", "--quick", "--out", str(tmp_path), "--comfuse", str(binary), "--jobs", "2"])
    assert rc == 1
    doc = json.load(open(tmp_path / "compile.json"))
    bad = [c for c in doc["cells"] if not c["ok"]]
    assert bad and all(c["K"] == 128 and "boom" in c["log"] for c in bad)
    good = [c for c in doc["cells"] if c["ok"]]
    assert all(c["spill_bytes"] == 8 and c["wide_row_path"] == (c["N"] == 50257) for c in good)
    out = capsys.readouterr().out
    assert f"{len(good)}/{len(doc['cells'])} cells compile" in out and "boom" in out


def test_faster_than_compile_takes_its_better_figure():
    """torch.compile is judged by the better of its host-timed and CUDA-graph-replayed times."""
    r = grid.new_record(0, grid.select(grid.CELLS, quick=True)[0])
    r.update(fused_ms=1.0, cublas_ms=1.0, compile_ms=1.2, eager_ms=2.0, status="measured")
    assert grid.finish_record(dict(r))["faster_than_compile"] is True            # no graph figure
    slow = grid.finish_record(dict(r, compile_graph_ms=0.9))
    assert slow["faster_than_compile"] is False
    assert slow["ratios"]["fused/compile_best"] == pytest.approx(1.0 / 0.9)
    assert slow["ratios"]["fused/compile"] == pytest.approx(1.0 / 1.2)           # the host-timed ratio kept
    # both replayed from a CUDA graph: GPU time against GPU time decides
    both = grid.finish_record(dict(r, compile_graph_ms=0.9, fused_graph_ms=0.8))
    assert both["faster_than_compile"] is True
    assert both["ratios"]["fused_graph/compile_graph"] == pytest.approx(0.8 / 0.9)
    assert grid.finish_record(dict(r, compile_graph_ms=0.7, fused_graph_ms=0.8))["faster_than_compile"] is False


def test_cost_model_fits_the_recorded_grid():
    """The plan's cost model against the committed grid run (bench/results/grid.json), each cell
    at the plan it was measured with: within 15 % in geomean, a spread (log-sd) under 0.16.  A
    change to the model that fits the measurements worse fails here; a new grid run replaces the
    measurements it is held to."""
    binary = os.path.join(ROOT, "build", "comfuse")
    if not os.access(binary, os.X_OK):
        pytest.skip("build/comfuse is not built")
    with open(os.path.join(ROOT, "bench", "results", "grid.json")) as f:
        rows = grid.repredict_cells(json.load(f), binary)
    n, gm, sd, lo, hi = grid.model_fit(rows)
    assert n >= 40, f"only {n} cells rebuilt"
    assert 0.85 <= gm <= 1.15 and sd < 0.16, f"measured/predicted geomean {gm:.3f}, log-sd {sd:.3f}"
