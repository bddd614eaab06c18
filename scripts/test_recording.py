"""CPU checks of the recording scripts (docs/recording.md): the corpus modules run and run the
ops they declare, all of them in patterns/generic.go's table; a recording writes a Kineto
trace with its steps and an execution trace beside it; the timing phase records eager and
compiled times or why not; the EXPECTED helpers compare what they should. The transformers
models are built and stepped only where transformers is installed (the GPU machine has it;
the pinned test venv does not).

  python -m pytest -q scripts/test_recording.py
"""

import gzip
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import expected_counts  # noqa: E402
import fake_kernels  # noqa: E402
import record_corpus  # noqa: E402
import record_models  # noqa: E402

CPU = torch.device("cpu")


def test_corpus_cases_run_their_declared_ops():
    assert len(record_corpus.CASES) >= 30
    assert record_corpus.check(["fp32", "bf16"]) == []


def test_corpus_check_reports_a_wrong_declaration(monkeypatch):
    case = record_corpus.CASES[0]
    monkeypatch.setattr(case, "ops", case.ops[:-1] + ["bogus"])
    problems = record_corpus.check(["fp32"])
    assert any(p.startswith(f"{case.name}: bogus not in") for p in problems), problems
    assert any(p.startswith(f"{case.name} fp32: runs") for p in problems), problems


def test_corpus_shapes():
    for c in record_corpus.CASES:
        assert 2 <= len(c.ops) <= 6 + 1, c.name  # 2-6 pointwise ops, and a reduction may end them
        m, k, n = c.mkn
        assert not c.residual or k == n, c.name
    kinds = {c.gemm for c in record_corpus.CASES}
    assert kinds == {"linear", "linear3d", "matmul", "bmm"}
    reductions = {"sum", "mean", "amax", "amin", "softmax", "log_softmax", "logsumexp"}
    assert sum(c.ops[-1] in reductions for c in record_corpus.CASES) >= 8
    assert sum(c.residual for c in record_corpus.CASES) >= 6


def test_generic_table(tmp_path):
    table = record_corpus.generic_table()
    assert {"mul", "gelu", "where", "softmax", "logsumexp"} <= table
    assert "addmm" not in table and "layer_norm" not in table
    bad = tmp_path / "generic.go"
    bad.write_text("package patterns\n")
    with pytest.raises(RuntimeError, match="no genericOps"):
        record_corpus.generic_table(str(bad))


def read_gz_json(path):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def check_recording(folder, name, steps):
    kineto = read_gz_json(os.path.join(folder, name + ".json.gz"))
    names = [e.get("name") for e in kineto["traceEvents"]]
    assert [n for n in names if str(n).startswith("ProfilerStep#")] == [f"ProfilerStep#{i}" for i in range(steps)]
    ops = [e for e in kineto["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and any("Input Dims" in e.get("args", {}) for e in ops)  # record_shapes
    assert all("Record function id" in e["args"] for e in ops)  # the link to the execution trace
    et = read_gz_json(os.path.join(folder, name + ".et.json.gz"))
    assert any(n["name"].startswith("aten::") for n in et["nodes"])
    assert not os.path.exists(os.path.join(folder, name + ".json"))  # only the gzip'd copies


def test_corpus_record(tmp_path, monkeypatch):
    monkeypatch.setattr(record_corpus, "CASES", record_corpus.CASES[:2])
    assert record_corpus.record(str(tmp_path), ["fp32", "bf16"], True, CPU) == 0
    manifest = json.load(open(tmp_path / "manifest.json"))
    assert [e["name"] for e in manifest["traces"]] == [
        "scale_clamp_gelu_fp32", "scale_clamp_gelu_bf16", "swish_by_hand_fp32", "swish_by_hand_bf16"]
    e = manifest["traces"][0]
    assert e["ops"] == ["linear", "mul", "clamp", "gelu"] and e["steps"] == 2 and e["file"] == "scale_clamp_gelu_fp32.json.gz"
    assert manifest["torch"] == torch.__version__
    for e in manifest["traces"]:
        check_recording(str(tmp_path), e["name"], 2)


def spec(name):
    return next(s for s in record_models.SPECS if s.name == name)


def test_models_record_and_time_the_custom_convnet(tmp_path):
    s = spec("convnet_ln2d_train_fp16")  # written here: needs no transformers
    assert record_models.record_traces([s], str(tmp_path), True, CPU) == 0
    manifest = json.load(open(tmp_path / "manifest.json"))
    (e,) = manifest["traces"]
    assert (e["model"], e["mode"], e["dtype"], e["steps"]) == (s.model, "train", "autocast_fp16", 2)
    check_recording(str(tmp_path), s.name, 2)

    assert record_models.time_models([s], str(tmp_path), True, CPU, deadline_s=0, iters=2, compile_too=True) == 0
    t = json.load(open(tmp_path / "timing.json"))["models"][s.name]
    assert t["eager"]["median_ms"] > 0 and t["eager"]["iters"] == 2
    assert t["compiled"].startswith("skipped: deadline")
    assert record_models.time_models([s], str(tmp_path), True, CPU, 480, 2, compile_too=False) == 0
    assert json.load(open(tmp_path / "timing.json"))["models"][s.name]["compiled"] == "skipped: -no-compile"


def test_a_failing_model_is_recorded_as_failed(tmp_path):
    def broken(tiny):
        raise ValueError("no such config")

    s = record_models.Spec("broken", "Nothing", "-", "infer", "fp32", 1, broken)
    assert record_models.record_traces([s], str(tmp_path), True, CPU) == 1
    (e,) = json.load(open(tmp_path / "manifest.json"))["traces"]
    assert e["error"] == "ValueError: no such config"


def test_model_selection():
    names = [s.name for s in record_models.SPECS]
    assert len(names) == len(set(names)) >= 12
    timed = [n for b in record_models.TIMING_BATCHES for n in b]
    assert sorted(timed) == sorted(names)  # every model timed, once
    modes = {s.mode for s in record_models.SPECS}
    dtypes = {s.dtype for s in record_models.SPECS}
    assert modes == {"train", "infer", "decode"}
    assert {"fp32", "autocast_bf16", "autocast_fp16"} <= dtypes
    assert [s.name for s in record_models.select("", 2)] == record_models.TIMING_BATCHES[1]
    with pytest.raises(SystemExit, match="unknown model nope"):
        record_models.select("nope", 0)
    with pytest.raises(SystemExit, match="-batch 9"):
        record_models.select("", 9)


@pytest.mark.parametrize("name", [s.name for s in record_models.SPECS if s.build is not record_models.convnet_ln2d])
def test_transformers_models_step(name):
    pytest.importorskip("transformers")
    s = spec(name)
    model, batch = record_models.build(s, True, CPU)
    record_models.make_step(s, model, model, batch, CPU)()


def test_expected_helpers():
    report = {
        "opportunities": [{"pattern": "linear_gelu", "instances": 4}],
        "generic_chains": [
            {"ops": ["mul", "add"], "dtype": "bf16", "dims": [8, 64], "instances": 2},
            {"ops": ["mul", "add"], "dtype": "bf16", "dims": [8, 64], "instances": 1},
            {"ops": ["mul", "add"], "dtype": "fp32", "dims": [8, 64], "instances": 1},
        ],
    }
    pats, gen = expected_counts.counts(report)
    assert pats == {"linear_gelu": 4}
    assert gen == {"mul,add bf16 8x64": 3, "mul,add fp32 8x64": 1}
    assert expected_counts.differences({"a": 1, "b": 2}, {"b": 3, "c": 1}) == [
        "a: Kineto 1, execution trace 0", "b: Kineto 2, execution trace 3", "c: Kineto 0, execution trace 1"]
    assert expected_counts.covers(gen, ["linear", "gelu", "mul", "add"], True)  # linear_gelu took the GELU
    assert not expected_counts.covers(gen, ["linear", "gelu", "mul", "add"], False)
    assert not expected_counts.covers(gen, ["linear", "add", "mul"], True)


def test_fake_kernels_go_to_the_ops_that_do_work():
    def op(name, ts, dur, dims=((4, 4),)):
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"External id": ts, "Input Dims": [list(d) for d in dims]}}

    trace = {"traceEvents": [
        op("aten::linear", 0, 100), op("aten::t", 1, 5), op("aten::addmm", 10, 80),
        op("aten::div", 200, 50), op("aten::to", 205, 10, dims=((), ())), op("aten::copy_", 207, 5, dims=((), ())),
        op("aten::view", 300, 5), op("aten::softmax", 400, 50), op("aten::_softmax", 410, 30),
    ]}
    out = fake_kernels.fake(trace)
    kernels = [e for e in out["traceEvents"] if e.get("cat") == "kernel"]
    assert [k["name"] for k in kernels] == ["fake_addmm", "fake_div", "fake__softmax"]
    launches = {e["args"]["correlation"]: e for e in out["traceEvents"] if e.get("cat") == "cuda_runtime"}
    for k in kernels:
        launch = launches[k["args"]["correlation"]]
        assert launch["args"]["External id"] == k["args"]["External id"]
        assert k["ts"] > launch["ts"]
    assert out["deviceProperties"][0]["name"] == "NVIDIA H200"
