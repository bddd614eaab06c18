"""CPU checks of scripts/bench-h200.sh's merge: runs of subsets of the matrix become one result."""

import json
import pathlib
import subprocess

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent / "bench-h200.sh"
HEAD = {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "copy_tbps": 4.0, "flush_bytes": 1 << 28}


def merge(tmp_path, *runs):
    ins = []
    for i, cases in enumerate(runs):
        p = tmp_path / f"in{i}.json"
        p.write_text(json.dumps(dict(HEAD, cases=cases)))
        ins.append(str(p))
    out = tmp_path / "out.json"
    r = subprocess.run(["bash", str(SCRIPT), "merge", str(out), *ins], capture_output=True, text=True)
    return r, (json.loads(out.read_text()) if r.returncode == 0 else None)


def test_merge_keeps_every_mode_of_a_case(tmp_path):
    """A training case has one entry per mode under one name: all three survive the merge, and a
    case measured again in a later run keeps the later figures, mode by mode."""
    modes = [{"name": "a", "mode": m, "fused_us": 1.0} for m in ("forward", "backward", "full")]
    later = [{"name": "a", "mode": "full", "fused_us": 2.0}, {"name": "b", "fused_us": 3.0}]
    r, out = merge(tmp_path, modes, later)
    assert r.returncode == 0, r.stderr
    got = {(c["name"], c.get("mode", "forward")): c["fused_us"] for c in out["cases"]}
    assert got == {("a", "forward"): 1.0, ("a", "backward"): 1.0, ("a", "full"): 2.0, ("b", "forward"): 3.0}


@pytest.mark.parametrize("key", ["gpu", "flush_bytes"])
def test_merge_refuses_mixed_runs(tmp_path, key):
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    a.write_text(json.dumps(dict(HEAD, cases=[])))
    b.write_text(json.dumps(dict(HEAD, cases=[], **{key: "other"})))
    r = subprocess.run(["bash", str(SCRIPT), "merge", str(tmp_path / "o.json"), str(a), str(b)],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "merge:" in r.stderr
