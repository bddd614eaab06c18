"""Shared memory of the attention kernels for sm_90 at every tile candidate, without a GPU.

Compiles templates/attention/kernel.py's three kernels (forward, dK/dV, dQ) for an H100/H200
target through the template's own host code (a training call's launches captured, not run, and
compiled with Triton's own specialization: templates/_common/sm90.py) at every tile of the
kernel's lists (the decode lists at 8 queries, the others at 256), for each mask and bias kind and dropout, fp32 and bf16 (fp16 compiles as bf16
does), head dims 64 and 128, and prints one JSON object per launch: the shared memory Triton
allocates (``metadata.shared``, bytes; a launch above the H200's 232448 fails with
OutOfResources) and whether the kernel's own bound (``_fits``) admits the tile.

    python bench/experiments/probe_attention_smem.py [--dtypes fp32,bf16] [--variants none,causal,...] > OUT.jsonl

docs/benchmarks/probe-attention-smem-2026-12-02.jsonl is its output for Triton 3.6; the
template's test_tile_bound_holds_on_recorded_compiles checks ``_fits`` against it (a tile it
admits must fit). About 750 compiles: some 25 minutes on 2 cores.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "templates" / "_common"), str(ROOT / "templates" / "attention")]

import sm90  # noqa: E402

# the variants: each a way the kernels load or compute the scores' mask and bias
VARIANTS = {
    "none": {},
    "causal": {"mask_kind": "causal"},
    "bool": {"mask_kind": "bool", "mask_fill": "min"},
    "additive": {"mask_kind": "additive"},  # the mask in the case's dtype
    "additive-fp32": {"mask_kind": "additive", "mask_dtype": "fp32"},  # BERT's fp32 mask on 16-bit q
    "bias": {"mask_kind": "bool", "mask_fill": "min", "bias_kind": "additive"},  # T5: its gradient too
    "alibi": {"mask_kind": "causal", "bias_kind": "alibi"},
    "dropout": {"p": 0.1},
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load(name):
    spec = importlib.util.spec_from_file_location(f"attn_{name}", ROOT / "templates" / "attention" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--sq", default="256,8", help="query lengths: 256 (the main lists), 8 (the decode lists)")
    args = ap.parse_args()
    kernel, adapter = load("kernel"), load("adapter")
    kernel._TUNE = False  # the forced tile for the kind probed, the first candidate for the others
    for vname in args.variants.split(","):
        v = VARIANTS[vname]
        params = dict({"mask_kind": "none", "mask_fill": float("-inf"), "p": 0.0, "bias_kind": "none",
                       "scale": 0.125}, **v)
        for dname in args.dtypes.split(","):
            if vname == "additive-fp32" and dname == "fp32":
                continue
            for Sq, D in [(int(n), D) for n in args.sq.split(",") for D in (128, 64)]:
                shapes = adapter._shapes(1, 2, Sq, 256, D, params, mask="full", bias="head")
                inp = adapter.make_inputs(shapes, DTYPES[dname], params, "cpu", 0)
                q, k, vv, mask, bias = inp["q"], inp["k"], inp["v"], inp["mask"], adapter._bias(inp)
                kw = (params["scale"], params["mask_kind"], params["mask_fill"], params["bias_kind"], params["p"])

                def train():
                    plan = kernel._plan(q, k, vv, mask, bias, *kw)
                    o, lse = kernel._forward(q, k, vv, mask, bias, plan, 0)
                    kernel._backward(torch.empty_like(o), q, k, vv, o, lse, mask, bias, plan, 0,
                                     params["bias_kind"] == "additive")

                tb = adapter.tile_bytes(dname, params)
                lists = (("fwd", kernel.FWD_TILES), ("dkdv", kernel.DKDV_TILES), ("dq", kernel.DQ_TILES)) if Sq > 16 else \
                    (("fwd", kernel.FWD_TILES_DECODE), ("dkdv", kernel.DKDV_TILES_DECODE), ("dq", kernel.DQ_TILES_DECODE))
                for kind, tiles in lists:
                    for tile in tiles:
                        with kernel.forced_tiles({kind: tile}):
                            launches = [x for x in sm90.capture(kernel, train) if x.name == kernel._KIND_NAMES[kind]]
                        for launch in launches:
                            try:
                                shared = sm90.compile_sm90(launch).metadata.shared
                            except Exception as e:  # noqa: BLE001 - recorded: a tile that does not compile
                                shared = f"{type(e).__name__}: {str(e)[:200]}"
                            print(json.dumps({"variant": vname, "dtype": dname, "sq": Sq, "head_dim": D, "tile_bytes": tb,
                                              "kind": kind, "tile": list(tile), "shared": shared,
                                              "admitted": kernel._fits(tile, D, q.element_size(), kind, tb)}),
                                  flush=True)


if __name__ == "__main__":
    main()
