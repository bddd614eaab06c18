"""Probe: where do the pointwise templates lose time against the floor on a GPU?

Standalone variants of two slow cases of the first H200 run (erf GELU in bf16 at
8192x16384: 191 us against a 126.5 us floor; bias+dropout+residual in bf16 at 8192x4096:
111 us against 47.4 us), each a unit:

- gelu (y = gelu(x + b)): libdevice erf (``tl.math.erf``); an Abramowitz-Stegun 7.1.26 erf
  (one exp, one reciprocal, five FMAs, |error| < 1.5e-7) with the reciprocal as ``1.0 / d``;
  the same with ``tl.fdiv(1.0, d, ieee_rounding=False)`` (note: Triton 3.6's semantic layer
  ignores ``ieee_rounding`` and emits the same divide as ``/``; the PTX counts below say what
  each variant really compiles to); the same with ``rcp.approx.ftz.f32`` as inline PTX (GPU
  only: the interpreter cannot run inline asm); and the tanh GELU (the memory-bound
  reference).
- dropout (y = r + dropout(x + b)): one Philox draw per element (``tl.rand``) vs one
  ``tl.randint4x`` draw per 8 elements split into 16-bit lanes (p resolution 2**-16; the
  dropout_add template's current scheme).

Each variant is swept over 1-D tiles (BLOCK, num_warps), one CUDA-graph replay timing per
tile; the best tile is then timed three times by each method:
  a  ``do_bench(launch, quantiles=[0.5, 0.2, 0.8])`` (L2 flushed per call, host launch included);
  b  ``do_bench(graph.replay)`` of a CUDA graph of one launch (L2 flushed, host overhead out).
The result is checked against torch (gelu: max |err| vs exact-erf GELU of the bf16-rounded
x + b; dropout: keep rate), and the PTX of the best tile is summarised (counts of the
floating-point opcodes: div, rcp, ex2, fma, ...).

Output: one JSON object per line on stdout (a header with the copy bandwidth, then
experiment, case, variant, method, median_us, p20_us, p80_us, floor_us, pct_of_floor = 100 *
floor / median, block, num_warps, runs, error, plus max_err / kept / ptx_ops), a readable
summary on stderr.

Usage:
  python probe_pointwise.py [--budget-s 60] [--rep 50] [--warmup 25] [--repeats 3]
  TRITON_INTERPRET=1 python probe_pointwise.py --check
--budget-s: no new unit starts after this many seconds. --check runs the variants on the CPU
under the Triton interpreter, no timing: in fp32, each erf GELU within 1e-6 (abs) of F.gelu
(exact erf, computed in float64 from the fp32 x + b), the tanh GELU within 1e-6 of
F.gelu(approximate="tanh") (likewise), each dropout's keep
rate within 1% of 1 - p and every output either r or r + (x + b) / (1 - p); exit status 1 if
one is wrong.
"""

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
from collections import Counter

CHECK = "--check" in sys.argv
if CHECK:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
Q = [0.5, 0.2, 0.8]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


SUMMARY = []


def emit(obj):
    obj = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in obj.items()}
    print(json.dumps(obj), flush=True)
    if "experiment" in obj:
        SUMMARY.append(obj)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------

@triton.jit
def _erf_poly(x, t):
    # Abramowitz & Stegun 7.1.26 given t = 1 / (1 + 0.3275911 |x|); |error| <= 1.5e-7
    ax = tl.abs(x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    y = 1.0 - poly * tl.exp(-ax * ax)
    return tl.where(x < 0, -y, y)


@triton.jit
def _erf_as(x):
    return _erf_poly(x, 1.0 / (1.0 + 0.3275911 * tl.abs(x)))


@triton.jit
def _erf_as_fdiv(x):
    return _erf_poly(x, tl.fdiv(1.0, 1.0 + 0.3275911 * tl.abs(x), ieee_rounding=False))


@triton.jit
def _erf_as_rcp(x):
    d = 1.0 + 0.3275911 * tl.abs(x)
    t = tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [d],
                                  dtype=tl.float32, is_pure=True, pack=1)
    return _erf_poly(x, t)


GELU_VARIANTS = {0: "erf libdevice", 1: "erf A&S 1.0/d", 3: "erf A&S tl.fdiv", 4: "erf A&S rcp.approx asm",
                 2: "tanh"}


@triton.jit
def _gelu_k(X, B, Y, N, numel, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(B + offs % N, mask=m, other=0.0).to(tl.float32)
    x = (x + b).to(Y.dtype.element_ty).to(tl.float32)
    if VARIANT == 0:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif VARIANT == 1:
        y = 0.5 * x * (1.0 + _erf_as(x * 0.7071067811865476))
    elif VARIANT == 3:
        y = 0.5 * x * (1.0 + _erf_as_fdiv(x * 0.7071067811865476))
    elif VARIANT == 4:
        y = 0.5 * x * (1.0 + _erf_as_rcp(x * 0.7071067811865476))
    else:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (2.0 / (1.0 + tl.exp(-2.0 * inner)))
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=m)


DROPOUT_VARIANTS = {0: "tl.rand per element", 1: "randint4x, 16-bit lanes"}


@triton.jit
def _dropout_k(X, B, R, Y, N, numel, p, scale, seed, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < numel
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    b = tl.load(B + offs % N, mask=m, other=0.0).to(tl.float32)
    r = tl.load(R + offs, mask=m, other=0.0).to(tl.float32)
    z = (x + b).to(Y.dtype.element_ty).to(tl.float32)
    if VARIANT == 0:
        keep = tl.rand(seed, offs.to(tl.int32)) >= p
    else:
        # one Philox call per 8 elements: 4 x 32-bit words, each split into two 16-bit lanes
        base = pid * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
        r0, r1, r2, r3 = tl.randint4x(seed, base)
        w = tl.join(tl.join(r0, r1), tl.join(r2, r3))  # [BLOCK//8, 2, 2]
        w = tl.reshape(w, (BLOCK // 2,)).to(tl.uint32, bitcast=True)
        lanes = tl.join(w & 0xFFFF, w >> 16)  # [BLOCK//2, 2]
        u = tl.reshape(lanes, (BLOCK,))
        keep = u.to(tl.float32) >= p * 65536.0
    z = tl.where(keep, z * scale, 0.0).to(Y.dtype.element_ty).to(tl.float32)
    tl.store(Y + offs, (r + z).to(Y.dtype.element_ty), mask=m)


# ----------------------------------------------------------------------------------------------
# Timing (GPU only)
# ----------------------------------------------------------------------------------------------

def time_a(fn, args):
    from triton.testing import do_bench

    return [v * 1e3 for v in do_bench(fn, warmup=args.warmup, rep=args.rep, quantiles=Q)]


def capture(fn):
    """A CUDA graph of one fn() call, captured after warm-up on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def time_b(graph, args):
    return time_a(graph.replay, args)


def median_run(runs):
    meds = sorted(r[0] for r in runs)
    med = meds[len(meds) // 2]
    mid = min(runs, key=lambda r: abs(r[0] - med))
    return [med, mid[1], mid[2]]


FP_OP = re.compile(r"^\s*(?:@%p\d+\s+)?([a-z][a-z0-9]*(?:\.[a-z0-9]+)*)\s")


def ptx_ops(compiled):
    """Counts of the floating-point (and a few other telling) PTX opcodes of a compiled kernel."""
    try:
        ptx = compiled.asm["ptx"]
    except Exception:
        return None
    c = Counter()
    for line in ptx.splitlines():
        mt = FP_OP.match(line)
        if mt:
            op = mt.group(1)
            if any(t in op for t in (".f32", ".f16", ".bf16", "div", "rcp", "ex2", "lg2", "sqrt", "mul.hi", "mad")):
                c[op] += 1
    c["(all instructions)"] = sum(1 for ln in ptx.splitlines() if FP_OP.match(ln))
    return dict(c.most_common(25))


# ----------------------------------------------------------------------------------------------
# Units
# ----------------------------------------------------------------------------------------------

CONFIGS = [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (8192, 8), (8192, 16)]


class Probe:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.skipped, self.failures = [], []
        self.copy_bw = None

    def unit(self, label, fn, *a):
        elapsed = time.time() - self.t0
        if elapsed > self.args.budget_s:
            self.skipped.append(label)
            log(f"[{elapsed:6.1f} s] skip {label}: budget of {self.args.budget_s} s spent")
            return
        log(f"[{elapsed:6.1f} s] {label}")
        try:
            fn(*a)
        except Exception as e:
            traceback.print_exc()
            self.failures.append(f"{label}: {type(e).__name__}: {e}")
            emit({"experiment": label.split(" ")[0], "case": label, "variant": None, "method": None,
                  "error": f"{type(e).__name__}: {e}"[:1000]})
            if not CHECK:
                torch.cuda.synchronize()

    def copy_bandwidth(self):
        n = 1 << 28
        a = torch.empty(n, device="cuda").normal_()
        b = torch.empty_like(a)
        med = time_a(lambda: b.copy_(a), self.args)[0]
        del a, b
        torch.cuda.empty_cache()
        return 2 * n * 4 / (med * 1e-6)

    def sweep(self, experiment, case, variant, launch_for, floor, extra):
        """Best tile by one graph-replay timing each, then 3 x methods a and b at the best tile."""
        tried = []
        for blk, w in CONFIGS:
            try:
                tried.append((time_b(capture(lambda: launch_for(blk, w)), self.args)[0], blk, w))
            except Exception as e:
                log(f"  {variant} BLOCK={blk} warps={w}: {type(e).__name__}: {str(e)[:200]}")
                torch.cuda.synchronize()
        if not tried:
            raise RuntimeError("no tile compiled and ran")
        log("  tiles (graph us): " + ", ".join(f"{b}/{w}: {t:.1f}" for t, b, w in sorted(tried, key=lambda t: t[1:])))
        _, blk, w = min(tried)
        compiled = launch_for(blk, w)
        info = dict(extra(), ptx_ops=ptx_ops(compiled), tiles={f"{b}/{w_}": round(t, 2) for t, b, w_ in tried})
        fn = lambda: launch_for(blk, w)  # noqa: E731
        g = capture(fn)
        runs = {"a_do_bench": [], "b_graph_do_bench": []}
        for _ in range(self.args.repeats):
            runs["a_do_bench"].append(time_a(fn, self.args))
            runs["b_graph_do_bench"].append(time_b(g, self.args))
        for method, rs in runs.items():
            med = median_run(rs)
            emit({"experiment": experiment, "case": case, "variant": variant, "method": method,
                  "median_us": med[0], "p20_us": med[1], "p80_us": med[2], "floor_us": floor,
                  "pct_of_floor": 100.0 * floor / med[0], "cpu_us_per_call": None, "error": None,
                  "block": blk, "num_warps": w, "runs": [[round(v, 2) for v in r] for r in rs], **info})

    def gelu(self, v, x, bias, y, ref, floor, case):
        N = x.shape[-1]

        def launch(blk, w):
            return _gelu_k[(triton.cdiv(x.numel(), blk),)](x, bias, y, N, x.numel(), VARIANT=v, BLOCK=blk,
                                                           num_warps=w)

        def extra():
            return {"max_err": (y.float() - ref).abs().max().item()}

        self.sweep("gelu", case, GELU_VARIANTS[v], launch, floor, extra)

    def dropout(self, v, x, bias, r, y, floor, case):
        N = x.shape[-1]

        def launch(blk, w):
            return _dropout_k[(triton.cdiv(x.numel(), blk),)](x, bias, r, y, N, x.numel(), 0.1, 1 / 0.9, 1234,
                                                              VARIANT=v, BLOCK=blk, num_warps=w)

        def extra():
            return {"kept": ((y - r).abs() > 0).float().mean().item(), "kept_want": 0.9}

        self.sweep("dropout", case, DROPOUT_VARIANTS[v], launch, floor, extra)

    def run(self):
        dev = "cuda"
        self.copy_bw = self.copy_bandwidth()
        emit({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "copy_tbps": self.copy_bw / 1e12, "rep_ms": self.args.rep, "repeats": self.args.repeats,
              "has_tl_fdiv": hasattr(tl, "fdiv")})

        M, N = 8192, 16384
        case = f"bias_gelu bf16 {M}x{N}"
        x = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
        bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        floor = (2 * x.numel() + N) * 2 / self.copy_bw * 1e6
        ref = F.gelu((x + bias).float())  # exact erf of the bf16-rounded x + b
        for v in (0, 1, 3, 4, 2):
            self.unit(f"gelu {GELU_VARIANTS[v]}", self.gelu, v, x, bias, y, ref, floor, case)
        del x, bias, y, ref
        torch.cuda.empty_cache()

        M, N = 8192, 4096
        case = f"dropout_add p=0.1 bf16 {M}x{N}"
        x = torch.randn(M, N, device=dev, dtype=torch.bfloat16)
        r = torch.randn_like(x)
        bias = torch.randn(N, device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        floor = (3 * x.numel() + N) * 2 / self.copy_bw * 1e6
        for v in (0, 1):
            self.unit(f"dropout {DROPOUT_VARIANTS[v]}", self.dropout, v, x, bias, r, y, floor, case)
        return self.finish()

    def finish(self):
        emit({"skipped": self.skipped, "elapsed_s": round(time.time() - self.t0, 1), "failures": self.failures})
        log("")
        for o in SUMMARY:
            if o.get("error"):
                log(f"{o['experiment']:8s} {str(o['variant'])[:26]:26s} ERROR {o['error'][:150]}")
            elif o.get("median_us") is not None:
                tail = f"max|err| {o['max_err']:.3g}" if "max_err" in o else f"kept {o.get('kept', 0):.4f} (want 0.9)"
                log(f"{o['experiment']:8s} {o['variant'][:26]:26s} {o['method']:18s} {o['median_us']:8.1f} us "
                    f"[{o['p20_us']:.1f}, {o['p80_us']:.1f}]  floor {o['floor_us']:6.1f}  "
                    f"{o['pct_of_floor']:5.1f}% of floor  BLOCK={o['block']} warps={o['num_warps']}  {tail}")
        if self.skipped:
            log("skipped (budget): " + "; ".join(self.skipped))
        for f in self.failures:
            log("FAILED: " + f.splitlines()[0][:300])
        return 1 if self.failures else 0

    # --check: the interpreter, no timing -------------------------------------------------------

    def check_gelu(self, v):
        g = torch.Generator().manual_seed(v)
        M, N = 64, 1000
        x = torch.randn(M, N, generator=g) * 2.0
        bias = torch.randn(N, generator=g)
        y = torch.empty_like(x)
        _gelu_k[(triton.cdiv(x.numel(), 1024),)](x, bias, y, N, x.numel(), VARIANT=v, BLOCK=1024, num_warps=4)
        # the reference in float64 (of the fp32 x + b): CPU fp32 F.gelu is itself ~1e-6 off near x = 3
        want = F.gelu((x + bias).double(), approximate="tanh" if v == 2 else "none")
        err = (y.double() - want).abs().max().item()
        ok = err <= 1e-6
        emit({"experiment": "check-gelu", "case": f"fp32 {M}x{N}", "variant": GELU_VARIANTS[v], "method": None,
              "max_err": err, "error": None if ok else f"max|err| {err:.3g} > 1e-6"})
        if not ok:
            self.failures.append(f"gelu {GELU_VARIANTS[v]}: max|err| {err:.3g} > 1e-6")

    def check_dropout(self, v):
        g = torch.Generator().manual_seed(10 + v)
        M, N, p = 64, 1031, 0.1
        x = torch.randn(M, N, generator=g)
        r = torch.randn(M, N, generator=g)
        bias = torch.randn(N, generator=g)
        y = torch.empty_like(x)
        _dropout_k[(triton.cdiv(x.numel(), 1024),)](x, bias, r, y, N, x.numel(), p, 1 / (1 - p), 1234,
                                                    VARIANT=v, BLOCK=1024, num_warps=4)
        kept_val = r + (x + bias) / (1 - p)
        is_drop = (y - r).abs() <= 1e-6
        is_keep = (y - kept_val).abs() <= 1e-5 * (1 + kept_val.abs())
        kept = is_keep.float().mean().item()
        errs = []
        if abs(kept - (1 - p)) > 0.01 * (1 - p):
            errs.append(f"keep rate {kept:.4f}, want {1 - p} within 1%")
        if not bool((is_drop | is_keep).all()):
            errs.append(f"{int((~(is_drop | is_keep)).sum())} outputs are neither r nor r + (x + b) / (1 - p)")
        emit({"experiment": "check-dropout", "case": f"fp32 {M}x{N} p={p}", "variant": DROPOUT_VARIANTS[v],
              "method": None, "kept": kept, "error": "; ".join(errs) or None})
        if errs:
            self.failures.append(f"dropout {DROPOUT_VARIANTS[v]}: " + "; ".join(errs))

    def check(self):
        emit({"check": True, "torch": torch.__version__, "triton": triton.__version__,
              "has_tl_fdiv": hasattr(tl, "fdiv")})
        for v in (0, 1, 3, 2):
            self.unit(f"check-gelu {GELU_VARIANTS[v]}", self.check_gelu, v)
        log(f"check-gelu {GELU_VARIANTS[4]}: not run (the interpreter cannot run inline asm)")
        for v in (0, 1):
            self.unit(f"check-dropout {DROPOUT_VARIANTS[v]}", self.check_dropout, v)
        return self.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="CPU correctness under TRITON_INTERPRET=1, no timing")
    ap.add_argument("--budget-s", type=float, default=60.0, help="start no new unit after this many seconds")
    ap.add_argument("--rep", type=float, default=50.0, help="do_bench rep (ms)")
    ap.add_argument("--warmup", type=float, default=25.0, help="do_bench warmup (ms)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    probe = Probe(args)
    if CHECK:
        return probe.check()
    if INTERPRET:
        emit({"error": "TRITON_INTERPRET=1 is set: timing needs the compiled kernels on a GPU (or pass --check)"})
        return 2
    if not torch.cuda.is_available():
        emit({"error": "no CUDA GPU visible to torch"})
        return 2
    try:
        return probe.run()
    except Exception as e:
        traceback.print_exc()
        emit({"error": f"probe failed: {type(e).__name__}: {e}"[:2000]})
        return 1


if __name__ == "__main__":
    sys.exit(main())
