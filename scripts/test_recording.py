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
import compile_vs_advice  # noqa: E402
import expected_counts  # noqa: E402
import fake_kernels  # noqa: E402
import record_corpus  # noqa: E402
import record_models  # noqa: E402
import record_trim  # noqa: E402

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
    assert e["ops"] == ["linear", "mul", "clamp", "gelu"] and e["steps"] == 1 and e["file"] == "scale_clamp_gelu_fp32.json.gz"
    assert manifest["torch"] == torch.__version__
    for e in manifest["traces"]:
        check_recording(str(tmp_path), e["name"], 1)


def spec(name):
    return next(s for s in record_models.SPECS if s.name == name)


def test_models_record_and_time_the_custom_convnet(tmp_path):
    s = spec("convnet_ln2d_train_fp16")  # written here: needs no transformers
    assert record_models.record_traces([s], str(tmp_path), True, CPU) == 0
    manifest = json.load(open(tmp_path / "manifest.json"))
    (e,) = manifest["traces"]
    assert (e["model"], e["mode"], e["dtype"], e["steps"]) == (s.model, "train", "autocast_fp16", 1)
    check_recording(str(tmp_path), s.name, 1)

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


# ---- trimming (record_trim.py) ---------------------------------------------------------------


def kineto_two_steps():
    """A Kineto trace of two steps, each one op launching one kernel, with everything the
    profiler writes that the reader skips."""
    def step(i, t):
        return [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t,
             "dur": 90, "args": {"External id": 10 * i + 1, "Record function id": 100 * i + 1}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": t + 1, "dur": 20,
             "args": {"External id": 10 * i + 2, "Record function id": 100 * i + 2, "Input Dims": [[4, 4]],
                      "Input type": ["float"], "Sequence number": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 2,
             "dur": 5, "args": {"correlation": 1000 + i, "External id": 10 * i + 2, "cbid": 211}},
            {"ph": "X", "cat": "kernel", "name": "relu_kernel", "pid": 0, "tid": 7, "ts": t + 50, "dur": 3,
             "args": {"correlation": 1000 + i, "stream": 7, "device": 0, "grid": [1, 1, 1], "block": [128, 1, 1],
                      "registers per thread": 16, "est. achieved occupancy %": 3, "queued": 0}},
            {"ph": "s", "cat": "ac2g", "id": 1000 + i, "pid": 1, "tid": 1, "ts": t + 2},
            {"ph": "f", "cat": "ac2g", "id": 1000 + i, "pid": 0, "tid": 7, "ts": t + 50, "bp": "e"},
            {"ph": "s", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 1, "ts": t + 1},
            {"ph": "f", "cat": "fwdbwd", "id": i, "pid": 1, "tid": 2, "ts": t + 30, "bp": "e"},
            {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{i}", "pid": 0, "tid": 7,
             "ts": t + 50, "dur": 3, "args": {}},
        ]
    return {
        "schemaVersion": 1, "baseTimeNanoseconds": 5,
        "traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}}]
        + step(0, 100) + step(1, 200)
        + [{"ph": "i", "cat": "cpu_instant_event", "name": "x", "pid": 1, "tid": 1, "ts": 300, "s": "t"}],
    }


def et_two_steps():
    def node(id_, name, rf, parent):
        return {"id": id_, "name": name, "ctrl_deps": parent,
                "inputs": {"values": [[5, 6, 0, 16, 4, "cuda:0"], 2, [1, 2]], "shapes": [[4, 4], [], [[], []]],
                           "types": ["Tensor(float)", "Int", "GenericList[Int,Int]"], "strides": [[4, 1], [], []]},
                "outputs": {"values": [], "shapes": [], "types": [], "strides": []},
                "attrs": [{"name": "rf_id", "type": "uint64", "value": rf},
                          {"name": "op_schema", "type": "string", "value": "aten::relu(Tensor self) -> Tensor"}]}
    return {"schema": "1.1.1-chakra.0.0.4", "pid": 1, "nodes": [
        node(1, "[pytorch|profiler|execution_trace|process]", 0, 0),
        node(2, "[pytorch|profiler|execution_trace|thread]", 0, 1),
        node(4, "aten::relu", 2, 3), node(3, "ProfilerStep#0", 1, 2),
        node(6, "aten::relu", 102, 5), node(5, "ProfilerStep#1", 101, 2)]}


def test_trim_kineto_keeps_what_the_reader_reads():
    doc = kineto_two_steps()
    out = record_trim.trim_kineto(doc)
    kept = out["traceEvents"]
    assert out["baseTimeNanoseconds"] == 5 and doc["traceEvents"][-1]["ph"] == "i"  # doc unchanged
    assert {(e["ph"], e.get("cat")) for e in kept} == {
        ("M", None), ("X", "user_annotation"), ("X", "cpu_op"), ("X", "cuda_runtime"), ("X", "kernel"),
        ("s", "fwdbwd"), ("f", "fwdbwd")}
    kernel = next(e for e in kept if e.get("cat") == "kernel")
    assert kernel["args"] == {"correlation": 1000, "stream": 7, "device": 0, "grid": [1, 1, 1], "block": [128, 1, 1]}
    op = next(e for e in kept if e.get("cat") == "cpu_op")
    assert op["args"] == doc["traceEvents"][2]["args"]  # every cpu_op argument is read
    assert next(e for e in kept if e.get("cat") == "cuda_runtime")["args"] == {"correlation": 1000, "External id": 2}
    assert kept[0]["ph"] == "M" and kept[0]["args"] == {"name": "main"}


def test_trim_et_keeps_what_the_reader_reads():
    out = record_trim.trim_et(et_two_steps())
    n = out["nodes"][2]
    assert set(n) == {"id", "name", "ctrl_deps", "inputs", "outputs", "attrs"}
    assert n["attrs"] == [{"name": "rf_id", "type": "uint64", "value": 2}]
    assert n["inputs"] == {"values": [[5, 6, 0, 16, 4, "cuda:0"], 2, [1, 2]],
                           "types": ["Tensor(float)", "Int", "GenericList[Int,Int]"]}
    assert out["schema"] == "1.1.1-chakra.0.0.4" and len(out["nodes"]) == 6


def test_cut_steps_keeps_the_first_steps_events():
    kineto, et = record_trim.cut_steps(kineto_two_steps(), et_two_steps(), 1)
    ts = sorted(e["ts"] for e in kineto["traceEvents"] if "ts" in e)
    assert ts and max(ts) < 200  # nothing of step 1 (the kernel of step 0 at 150 stays)
    assert [e["name"] for e in kineto["traceEvents"] if e.get("cat") == "kernel"] == ["relu_kernel"]
    assert [n["name"] for n in et["nodes"]] == [
        "[pytorch|profiler|execution_trace|process]", "[pytorch|profiler|execution_trace|thread]",
        "aten::relu", "ProfilerStep#0"]
    same = record_trim.cut_steps(kineto_two_steps(), et_two_steps(), 2)
    assert same == (kineto_two_steps(), et_two_steps())  # two steps or fewer: unchanged


def test_trim_folder_is_idempotent_and_sets_the_manifest(tmp_path):
    record_trim.write(str(tmp_path / "a.json.gz"), kineto_two_steps())
    record_trim.write(str(tmp_path / "a.et.json.gz"), et_two_steps())
    manifest = {"steps": 2, "traces": [{"name": "a", "file": "a.json.gz", "et_file": "a.et.json.gz",
                                         "steps": 2, "raw_bytes": 9}, {"name": "b", "error": "x"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    record_trim.trim_folder(str(tmp_path), steps=1)
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    m = json.loads(first["manifest.json"])
    e = m["traces"][0]
    assert (m["steps"], e["steps"], e["recorded_steps"], "raw_bytes" in e) == (1, 1, 2, False)
    assert e["gz_bytes"] == len(first["a.json.gz"]) and e["et_gz_bytes"] == len(first["a.et.json.gz"])
    assert record_trim.main(["-steps", "1", str(tmp_path)]) == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == first  # the same bytes again
    (tmp_path / "a.json.gz").write_bytes(b"not gzip")
    assert record_trim.main([str(tmp_path)]) == 2


@pytest.fixture(scope="module")
def fuseadvise(tmp_path_factory):
    import shutil
    import subprocess

    if shutil.which("go") is None:
        pytest.skip("no go toolchain")
    out = str(tmp_path_factory.mktemp("bin") / "fuseadvise")
    subprocess.run(["go", "build", "-o", out, "./cmd/fuseadvise"], cwd=expected_counts.REPO, check=True)
    return [out]


def analysis(bin_, folder, name, et):
    trace = os.path.join(folder, name + ".json.gz")
    report = expected_counts.analyze(bin_, trace, os.path.join(folder, name + ".et.json.gz") if et else None)
    report["trace"].pop("path", None)
    return report


def test_trimming_changes_no_analysis(tmp_path, monkeypatch, fuseadvise):
    """A recording (CPU, with fake kernels so the generic engine runs) analyzes the same before
    and after trimming, with and without its execution trace; cut to one step, it gives the
    counts of a one-step recording."""
    monkeypatch.setattr(record_corpus, "CASES", [c for c in record_corpus.CASES if c.name == "six_ops"])
    raw, one = str(tmp_path / "raw"), str(tmp_path / "one")
    record_corpus.record(one, ["fp32"], True, CPU, steps=1)
    with monkeypatch.context() as m:  # the profiler's files as written
        m.setattr(record_trim, "trim_kineto", lambda d: d)
        m.setattr(record_trim, "trim_et", lambda d: d)
        record_corpus.record(raw, ["fp32"], True, CPU, steps=2)
    name = "six_ops_fp32"
    for folder in (raw, one):
        path = os.path.join(folder, name + ".json.gz")
        record_trim.write(path, fake_kernels.fake(read_gz_json(path)))
    raw_events = read_gz_json(os.path.join(raw, name + ".json.gz"))["traceEvents"]
    assert any(e.get("cat") == "ac2g" or "est. achieved occupancy %" in e.get("args", {}) or e.get("ph") == "i"
               for e in raw_events) or any("op_schema" in json.dumps(n) for n in read_gz_json(
                   os.path.join(raw, name + ".et.json.gz"))["nodes"])  # something to trim
    before = [analysis(fuseadvise, raw, name, et) for et in (False, True)]
    trimmed = str(tmp_path / "trimmed")
    import shutil
    shutil.copytree(raw, trimmed)
    record_trim.trim_folder(trimmed)
    assert [analysis(fuseadvise, trimmed, name, et) for et in (False, True)] == before
    record_trim.trim_folder(trimmed, steps=1)
    cut = [expected_counts.counts(analysis(fuseadvise, trimmed, name, et)) for et in (False, True)]
    assert cut == [expected_counts.counts(analysis(fuseadvise, one, name, et)) for et in (False, True)]
    assert cut[1][1], "the generic engine found no chain: the check would prove nothing"


def test_known_differences_keep_their_reasons_only_while_the_counts_hold():
    new = {"a.json.gz": expected_counts.known_entries(
        {"attention": 4}, {"mul,add fp16 8": 2}, {"attention": 6}, {"mul,mul,add fp16 8": 1}),
        "b.json.gz": {}}
    assert new["a.json.gz"] == {
        "pattern attention": {"kineto": 4, "et": 6},
        "generic mul,add fp16 8": {"kineto": 2, "et": 0},
        "generic mul,mul,add fp16 8": {"kineto": 0, "et": 1}}
    old = {"reasons": {"r": "why"}, "traces": {"a.json.gz": {
        "pattern attention": {"kineto": 4, "et": 6, "reason": "r"},  # same counts: kept
        "generic mul,add fp16 8": {"kineto": 3, "et": 0, "reason": "r"},  # other counts: asked again
        "generic gone fp16 8": {"kineto": 1, "et": 0, "reason": "r"}}}}  # no longer there: dropped
    merged = expected_counts.merge_known(old, new)
    assert merged["reasons"] == {"r": "why"}
    assert {k: e["reason"] for k, e in merged["traces"]["a.json.gz"].items()} == {
        "pattern attention": "r", "generic mul,add fp16 8": "", "generic mul,mul,add fp16 8": ""}
    assert "b.json.gz" not in merged["traces"]


def test_coverage_table(tmp_path, monkeypatch):
    import record_coverage

    manifest = {"traces": [{"name": "a", "file": "a.json.gz", "et_file": "a.et.json.gz"},
                           {"name": "b", "error": "x"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    cov = {"memory_bound_us": 600.0, "compute_us": 300.0, "other_us": 100.0, "claimed_us": 150.0,
           "counted_us": 120.0, "claimed_with_backward_us": 300.0}
    cov_et = dict(cov, claimed_us=300.0, claimed_with_backward_us=450.0)
    monkeypatch.setattr(expected_counts, "analyze",
                        lambda bin_, trace, et=None: {"coverage": cov_et if et else cov})
    lines = record_coverage.table(["fa"], str(tmp_path))
    assert lines[2] == "| a | 600 | 60.0% | 150 | 25.0% | 20.0% | 50.0% | 50.0% | 75.0% |"
    assert lines[3].startswith("| all | 600 | 60.0% | 150 | 25.0% |") and len(lines) == 4


def test_compile_vs_advice_row_counts_the_backward():
    """The advice's claim on a training step is its forward's and its fused backward's saving,
    per step, against the eager step; Kineto alone and with -et side by side."""
    t = {"mode": "train", "dtype": "bf16", "eager": {"median_ms": 10.0}, "compiled": {"median_ms": 5.0}}
    kineto = {"est_saving_us": 600.0, "est_backward_saving_us": 400.0, "optimizer_saving_us": 1000.0,
              "host": {"host_bound": True, "est_saving_without_profiler_us": 1500.0}}
    et = {"est_saving_us": 1200.0, "est_backward_saving_us": 800.0}
    cells = [c.strip() for c in compile_vs_advice.row("m", t, kineto, 2, et).split("|")[1:-1]]
    # 1000 us over 2 steps = 0.5 ms, 5% of eager, 10% of compile's 50%; with -et twice that
    # and the optimizer's fused=True: 1000 us over 2 steps, 5% of eager; with the chains 20% of compile's
    assert cells[5:] == ["50.0%", "0.500 (5.0%)", "1.000 (10.0%)", "yes", "0.750", "10% / 20%", "0.500 (5.0%)", "20%"]
    cells = [c.strip() for c in compile_vs_advice.row("m", t, kineto, 2, None).split("|")[1:-1]]
    assert cells[7] == "-" and cells[10] == "10% / -"
    # the modules' advice adds to it: master weights and the drop-in nn.MultiheadAttention
    modules = dict(kineto, master_weights_saving_us=200.0, multihead_attention_saving_us=800.0)
    cells = [c.strip() for c in compile_vs_advice.row("m", t, modules, 2, None).split("|")[1:-1]]
    assert cells[11:] == ["1.000 (10.0%)", "30%"]
    del kineto["optimizer_saving_us"]  # an inference step: no optimizer
    cells = [c.strip() for c in compile_vs_advice.row("m", t, kineto, 2, None).split("|")[1:-1]]
    assert cells[11:] == ["-", "-"]
