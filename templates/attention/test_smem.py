"""The attention kernels' tiles fit in the H200's shared memory: every tile kernel.tile_candidates
offers (the untimed first one is what a CUDA-graph capture launches) compiles for sm_90 within
its 232448 bytes. A tile past it fails at launch with OutOfResources (fp32 at head dim 128 did,
with the first candidate of the old bound: 262144 bytes)."""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(__file__, "kernel")
adapter = fat.load_sibling(__file__, "adapter")

HERE = pathlib.Path(__file__).resolve().parent
# bench/experiments/probe_attention_smem.py's output (Triton 3.6, sm_90): the shared memory of
# each kernel at every tile of its list, per mask / bias kind, dtype and head dim
RECORDED = HERE.parents[1] / "docs" / "benchmarks" / "probe-attention-smem-2026-12-02.jsonl"


def _recorded():
    return [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]


def test_tile_bound_holds_on_recorded_compiles():
    """kernel._fits admits no tile whose compile needs more shared memory than the H200 has, over
    every recorded compile; and the record spans what the bound depends on."""
    rows = _recorded()
    over = []
    for r in rows:
        eb = fat.DTYPES[r["dtype"]].itemsize
        if kernel._fits(tuple(r["tile"]), r["head_dim"], eb, r["kind"], r["tile_bytes"]) and \
                (not isinstance(r["shared"], int) or r["shared"] > kernel._SMEM):
            over.append(r)
    assert not over, "\n".join(map(json.dumps, over))
    seen = {(r["variant"], r["dtype"], r["head_dim"], r["kind"]) for r in rows}
    assert {v for v, *_ in seen} >= {"none", "causal", "bool", "additive", "additive-fp32", "bias", "alibi", "dropout"}
    assert {(d, D, k) for _, d, D, k in seen} >= {(d, D, k) for d in ("fp32", "bf16") for D in (64, 128)
                                                   for k in ("fwd", "dkdv", "dq")}


@pytest.mark.parametrize("dtype,params,tile_bytes", [
    ("bf16", {}, 0),
    ("bf16", {"mask_kind": "bool"}, 1),
    ("bf16", {"mask_kind": "additive", "mask_dtype": "fp32"}, 4),
    ("fp32", {"mask_kind": "additive"}, 4),
    ("fp32", {"mask_kind": "bool", "bias_kind": "additive"}, 5),
    ("fp16", {"bias_kind": "additive"}, 2),
])
def test_tile_bytes_are_the_plans(dtype, params, tile_bytes):
    """The verifier's tile cases prune by the bytes the kernel's own plan counts (so they run the
    tiles the GPU may pick): adapter.tile_bytes == _Plan.tile_bytes for the case's inputs."""
    params = dict({"mask_kind": "none", "mask_fill": float("-inf"), "p": 0.0, "bias_kind": "none", "scale": 0.125},
                  **params)
    assert adapter.tile_bytes(dtype, params) == tile_bytes
    shapes = adapter._shapes(1, 2, 20, 20, 64, params, mask="full")
    inp = adapter.make_inputs(shapes, fat.DTYPES[dtype], params, "cpu", 0)
    plan = kernel._plan(inp["q"], inp["k"], inp["v"], inp["mask"], adapter._bias(inp), 0.125, params["mask_kind"],
                        params["mask_fill"], params["bias_kind"], 0.0)
    assert plan.tile_bytes == tile_bytes


# the largest loads per dtype: fp32 with a bool mask and an fp32 bias, bf16 with BERT's fp32 mask
_SM90_CASES = (("fp32", {"mask_kind": "bool", "mask_fill": "min", "bias_kind": "additive"}),
               ("bf16", {"mask_kind": "additive", "mask_dtype": "fp32"}))


def _sm90_untimed_tiles():
    """For each of _SM90_CASES at head dim 128: the shared memory of the forward, dK/dV and dQ
    kernels at the first tile candidate (the untimed choice: CUDA-graph capture's), compiled for
    sm_90 (sm90.capture of a training call, sm90.compile_sm90). Run by sm90.run_isolated."""
    import sm90

    kernel._TUNE = False
    out = []
    for dname, extra in _SM90_CASES:
        params = dict({"mask_kind": "none", "mask_fill": float("-inf"), "p": 0.0, "bias_kind": "none",
                       "scale": 0.125}, **extra)
        shapes = adapter._shapes(1, 2, 256, 256, 128, params, mask="full")
        inp = adapter.make_inputs(shapes, fat.DTYPES[dname], params, "cpu", 0)
        q, k, v, mask, bias = inp["q"], inp["k"], inp["v"], inp["mask"], adapter._bias(inp)
        kw = (0.125, params["mask_kind"], params["mask_fill"], params["bias_kind"], 0.0)

        def train():
            plan = kernel._plan(q, k, v, mask, bias, *kw)
            o, lse = kernel._forward(q, k, v, mask, bias, plan, 0)
            kernel._backward(torch.empty_like(o), q, k, v, o, lse, mask, bias, plan, 0, params["bias_kind"] == "additive")

        for launch in sm90.capture(kernel, train):
            if launch.name in kernel._KIND_NAMES.values():
                out.append([dname, launch.name, sm90.compile_sm90(launch).metadata.shared])
    return out


def test_untimed_tiles_fit_sm90():
    """Compiled for the H200 on the CPU, the first candidate of each kernel fits in its shared
    memory at head dim 128 with the largest mask and bias loads."""
    import sm90

    r = sm90.run_isolated(_sm90_untimed_tiles, HERE)
    assert len(r) == 3 * len(_SM90_CASES), r
    assert all(shared <= kernel._SMEM for _, _, shared in r), r
