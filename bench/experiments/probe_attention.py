"""Times the attention template against the libraries in one process (the H200 check of
bench/experiments/check_attention.sh): JSON lines under --out, a short table on stdout last.

Phases, most important first, each skipped (and recorded as skipped) when the deadline
(--budget-s) would pass:
1. cases at S = 1024 (bf16, B = 4, H = 16, D = 64): "causal" (tril causal, no dropout) and
   "dropout" (p = 0.1, no mask), forward and full (forward + backward), providers fused,
   eager, compile (torch.compile of the eager chain), and adapter.library_ops' sdpa_flash,
   sdpa_efficient, sdpa_cudnn and flex (each where it accepts the case);
2. the cost of EAGER_ROUNDING: fused with it off, the same cases;
3. S = 512 and 2048;
4. each tile candidate of the fused kernels at S = 1024 (forward: the forward call; dK/dV and
   dQ: the full call with that kernel's tile forced, the others tuned).

Timing as bench/harness.py times (its functions imported, not copied): each call captured in
a CUDA graph (fa_testing.graph_replay) and its replay timed by fa_testing.gpu_time_us (L2
emptied before every call, CUDA events around the call, median); training calls built by
harness.training_call (fresh leaves, fixed upstream gradients), library ops called through
harness.call_op. Providers interleaved, --repeats times; the median of the repeats' medians.
The dropout case times each library op with its own dropout mask (timing only).

Predictions for the first run (B = 4, H = 16, S = 1024, D = 64, bf16; the former kernel's
H200 times from bench/testdata/harness-h200-attention.jsonl): the forward's interior loop
(probe_attention_sass.py, instructions per thread and key block) went from 4769 to 1290 with
dropout and from 964 to 738 without (scale 1/8: ``* scale``'s rounding skipped and the scale
folded into exp2). Time tracked instructions before (328 / 79 us for 4769 / 964), so: dropout
forward 328 -> about 95-115 us (SDPA flash 82: the rest is Philox's ~450 instructions per
tile), full 1101 -> about 450-550 (SDPA flash 322); causal forward 79 -> about 62-68 (Flex
67), full 294 -> about 265-285 (backward tiles below the diagonal skip their tests);
EAGER_ROUNDING off (738 -> 644): at most 10 % faster. A miss either way is worth a look before the next change.

    python bench/experiments/probe_attention.py --out DIR [--budget-s 330] [--repeats 2]
    python bench/experiments/probe_attention.py --dry-run   (CPU, interpreter, tiny shapes:
                                                             the plumbing only, no timing)
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
T0 = time.monotonic()


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def log(*a):
    print(f"[{time.monotonic() - T0:6.1f}s]", *a, file=sys.stderr, flush=True)


CASES = {
    "causal": {"mask_kind": "causal", "mask_fill": float("-inf"), "scale": 0.125, "p": 0.0, "bias_kind": "none"},
    "dropout": {"mask_kind": "none", "mask_fill": float("-inf"), "scale": 0.125, "p": 0.1, "bias_kind": "none"},
}


class Probe:
    def __init__(self, args):
        self.args = args
        self.harness = load(ROOT / "bench" / "harness.py", "harness")
        sys.path.insert(0, str(ROOT / "templates" / "_common"))
        self.fat = load(self.harness.timing_path(ROOT / "bench" / "harness.py"), "fa_testing")
        here = ROOT / "templates" / "attention"
        self.kernel = load(here / "kernel.py", "attn_kernel")
        self.ref = load(here / "reference.py", "attn_reference")
        self.adapter = load(here / "adapter.py", "attn_adapter")
        import torch

        self.torch = torch
        self.device = "cpu" if args.dry_run else "cuda"
        self.deadline = T0 + args.budget_s
        self.out = open(pathlib.Path(args.out) / "attention_probe.jsonl", "a") if args.out else None
        self.rows = []

    def emit(self, row):
        self.rows.append(row)
        line = json.dumps(row)
        if self.out:
            self.out.write(line + "\n")
            self.out.flush()
        log(line)

    def left(self):
        return self.deadline - time.monotonic()

    def inputs(self, case, S):
        params = CASES[case]
        B, H, D = (1, 1, 32) if self.args.dry_run else (4, 16, 64)
        shapes = self.adapter._shapes(B, H, S, S, D, params)
        dt = self.torch.bfloat16
        return params, self.adapter.make_inputs(shapes, dt, params, self.device, 0)

    def forwards(self, case, inputs, params, compiled):
        """{provider: fn(inputs) -> out}: fused, eager, compile and the library ops; refused:
        {name: why}."""
        k, ref, ad = self.kernel, self.ref, self.adapter
        fw = {
            "fused": lambda inp: ad.train(k, inp, params),
            "eager": lambda inp: ad.reference(ref, inp, params)[0],
        }
        if not self.args.dry_run:
            fw["compile"] = compiled
            ops, refused = self.harness.library_ops(ad, inputs, params)
        else:
            ops, refused = {}, {"library": "dry run"}
        for name, op in ops.items():
            fw[name] = lambda inp, op=op: self.harness.call_op(op, inp)
        return fw, refused

    def time_call(self, fn):
        """Median GPU microseconds of fn (its CUDA-graph replay where it captures)."""
        if self.args.dry_run:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e6, "dry-run"
        replay = self.fat.graph_replay(fn)
        med = self.fat.gpu_time_us(replay or fn, self.args.warmup, self.args.rep)[0]
        return med, ("graph-replay" if replay else "call")

    def calls(self, fw, inputs, mode, params):
        """{provider: zero-argument call} of one mode; errors: {provider: message}."""
        calls, errors = {}, {}
        torch = self.torch
        for name, f in fw.items():
            try:
                if mode == "forward":
                    with torch.no_grad():
                        f(inputs)  # compile, tune
                    def call(f=f):
                        with torch.no_grad():
                            return f(inputs)
                    calls[name] = call
                else:
                    c = self.harness.training_call(torch, f, inputs, ["q", "k", "v"], "full")
                    c()
                    calls[name] = c
            except Exception as e:  # noqa: BLE001 - a backend that refuses this case at run time
                errors[name] = self.harness.first_line(e)
        return calls, errors

    def compare(self, case, S, modes=("forward", "full"), providers=None, tag=""):
        torch = self.torch
        params, inputs = self.inputs(case, S)
        for mode in modes:
            if self.left() < 20:
                self.emit({"phase": "compare", "case": case, "S": S, "mode": mode, "skipped": "deadline"})
                continue
            torch._dynamo.reset()
            compiled = torch.compile(lambda inp: self.adapter.reference(self.ref, inp, params)[0], dynamic=False)
            fw, refused = self.forwards(case, inputs, params, compiled)
            if providers:
                fw = {k: v for k, v in fw.items() if k in providers}
            calls, errors = self.calls(fw, inputs, mode, params)
            runs = {name: [] for name in calls}
            how = {}
            for _ in range(self.args.repeats):
                for name, c in calls.items():
                    try:
                        us, how[name] = self.time_call(c)
                        runs[name].append(us)
                    except Exception as e:  # noqa: BLE001
                        errors[name] = self.harness.first_line(e)
            us = {n: sorted(r)[len(r) // 2] for n, r in runs.items() if r}
            row = {"phase": "compare" + tag, "case": case, "S": S, "mode": mode, "us": us, "timing": how,
                   "spread_us": {n: [min(r), max(r)] for n, r in runs.items() if r},
                   "refused": refused, "errors": errors, "eager_rounding": self.kernel.EAGER_ROUNDING}
            lib = {n: v for n, v in us.items() if n.startswith("sdpa_") or n == "flex"}
            if "fused" in us and lib:
                best = min(lib, key=lib.get)
                row["fused_over_best_library"] = round(us["fused"] / lib[best], 3)
                row["best_library"] = best
            for n in ("compile", "eager"):
                if "fused" in us and n in us:
                    row[f"{n}_over_fused"] = round(us[n] / us["fused"], 3)
            self.emit(row)

    def rounding(self, S):
        k = self.kernel
        for case in CASES:
            k.EAGER_ROUNDING = False
            k._PLANS.clear()
            try:
                self.compare(case, S, providers=("fused",), tag=":eager_rounding_off")
            finally:
                k.EAGER_ROUNDING = True
                k._PLANS.clear()

    def tiles(self, S):
        k = self.kernel
        real = k._tile_for
        lists = {"fwd": k.FWD_TILES, "dkdv": k.DKDV_TILES, "dq": k.DQ_TILES}
        for case in CASES:
            params, inputs = self.inputs(case, S)
            fw = {"fused": lambda inp: self.adapter.train(k, inp, params)}
            for kind, tiles in lists.items():
                for tile in tiles:
                    if self.left() < 15:
                        self.emit({"phase": "tiles", "case": case, "kind": kind, "tile": tile, "skipped": "deadline"})
                        continue
                    if not k._fits(tile, 64, 2, kind):
                        continue

                    def forced(kernel, kind_, *rest, kind=kind, tile=tile):
                        return tile if kind_ == kind else real(kernel, kind_, *rest)

                    k._tile_for = forced
                    try:
                        mode = "forward" if kind == "fwd" else "full"
                        calls, errors = self.calls(fw, inputs, mode, params)
                        us = self.time_call(calls["fused"])[0] if "fused" in calls else None
                        self.emit({"phase": "tiles", "case": case, "S": S, "kind": kind, "tile": list(tile),
                                   "mode": mode, "us": us, "errors": errors})
                    except Exception as e:  # noqa: BLE001 - a tile that does not compile or run
                        self.emit({"phase": "tiles", "case": case, "kind": kind, "tile": list(tile),
                                   "error": self.harness.first_line(e)})
                    finally:
                        k._tile_for = real
        names = {id(k._attn_fwd): "fwd", id(k._attn_bwd_dkdv): "dkdv", id(k._attn_bwd_dq): "dq"}
        self.emit({"phase": "tuned", "tiles": [{"kernel": names.get(key[0], "?"), "sq": key[1], "sk": key[2],
                                               "flags": str(key[6]), "tile": list(v)} for key, v in k._TUNED.items()]})

    def table(self):
        print(f"{'case':8} {'S':>5} {'mode':8} {'fused':>8} {'best lib':>18} {'ratio':>6} {'compile':>8} {'eager':>8}")
        for r in self.rows:
            if not r.get("phase", "").startswith("compare") or "us" not in r:
                continue
            us = r["us"]
            lib = r.get("best_library")
            tag = " (round off)" if r["phase"].endswith("off") else ""
            print(f"{r['case']:8} {r['S']:>5} {r['mode']:8} {us.get('fused', float('nan')):8.1f} "
                  f"{(lib or '-'):>10} {us.get(lib, float('nan')) if lib else float('nan'):7.1f} "
                  f"{r.get('fused_over_best_library', float('nan')):6} {us.get('compile', float('nan')):8.1f} "
                  f"{us.get('eager', float('nan')):8.1f}{tag}")
        for r in self.rows:
            if r.get("phase") == "tiles" and r.get("us"):
                print(f"tile {r['case']:8} {r['kind']:5} {str(r['tile']):18} {r['us']:8.1f} us ({r['mode']})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="folder for attention_probe.jsonl")
    ap.add_argument("--budget-s", type=float, default=330.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=float, default=25.0, help="ms")
    ap.add_argument("--rep", type=float, default=100.0, help="ms")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    p = Probe(args)
    if not args.dry_run:
        import torch
        import triton

        p.emit({"phase": "header", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "triton": triton.__version__})
    sizes = (32,) if args.dry_run else (1024,)
    for S in sizes:
        for case in CASES:
            p.compare(case, S)
    p.rounding(sizes[0])
    if not args.dry_run:
        for S in (512, 2048):
            for case in CASES:
                p.compare(case, S)
        p.tiles(1024)
    p.table()


if __name__ == "__main__":
    main()
