"""Probe: is the wide, bimodal spread of the memory-bound templates the timing or the kernels?

On the H200, several memory-bound templates measured far above their bandwidth floor with a
wide p20..p80 spread (add_layernorm, rmsnorm_pyops, dropout_add, bias_gelu tanh at fp16
16384x3072), while eager and torch.compile of the same cases were tight. Two hypotheses:

A. Timing. ``do_bench`` enqueues an L2 flush (zeroing 256 MB), records the start event, calls
   ``fn`` and records the end event. The fused providers run a Python wrapper (checks,
   ``torch.empty``, autotuner dispatch, launch) before their kernel reaches the GPU; when that
   CPU time exceeds the GPU time of the flush, the GPU idles between the start event and the
   kernel and the idle time is measured.
B. The kernels. One program per row with few warps leaves bandwidth on the table.

Experiments, in this order (each a unit; see --budget-s):

1. ``timing``: for each case, providers ``fused`` (the template through its adapter, as the
   harness loads it), ``eager`` (the reference chain) and ``compile`` (torch.compile of the
   reference), each timed by
     a  ``do_bench(fn, quantiles=[0.5, 0.2, 0.8])`` as the harness does (L2 flushed per call);
     b  ``do_bench(graph.replay)`` of a CUDA graph of one ``fn`` call (L2 still flushed, host
        overhead out);
     c  ``do_bench_cudagraph(fn)`` (many calls in one graph; no L2 flush);
     d  as a, with a GPU spin (``torch.cuda._sleep``) enqueued after the flush and longer than
        ``fn``'s host time, so the kernel is queued before the start event is reached: if
        a > d ~ b, hypothesis A holds;
   three times each, providers and methods interleaved, and the host time of one call
   (``cpu_us_per_call``: median over 10 batches of 20 calls, synchronising between batches
   only; ``cpu200_us_per_call``: one loop of 200 calls, synchronising at the end).
2. ``rows``: standalone copies of the add_layernorm and rmsnorm (llama casting) forward
   kernels (single-block path) with a 2-D ``[ROWS, BLOCK_N]`` tile per program, swept over
   num_warps (2, 4, 8, 16) x ROWS (1, 2, 4) at 8192x4096 bf16, each checked against the
   reference on the GPU and timed by method b; plus torch copies of the same bytes
   (``copy_`` of a buffer moving the same bytes; ``torch.add``) as the achievable ceiling.

Cases: add_layernorm bf16 8192x4096; rmsnorm_pyops llama bf16 8192x4096; dropout_add p=0.1
with bias bf16 8192x4096; bias_gelu tanh fp16 16384x3072; bias_gelu tanh and erf bf16
8192x16384; swiglu bf16 8192x11008; mask_softmax bool (scale 0.125) bf16 8x16x1024x1024.

Output: one JSON object per line on stdout: a header (GPU, versions, copy bandwidth, L2 flush
time), then one line per (experiment, case, variant, method) with median_us, p20_us, p80_us
(for timing: the median of the three repeats' medians, p20/p80 of the repeat closest to it;
all repeats in ``runs``), floor_us (adapter.nbytes / measured copy bandwidth), pct_of_floor
(100 * floor / median: 100 = at the floor), cpu_us_per_call and error (null when none), for
timing also fused_vs_eager_max_abs (a look at the outputs on the device; null with dropout);
last a
line listing what the budget skipped. A readable summary goes to stderr.

Usage:
  python probe_rows.py [--budget-s 200] [--rep 50] [--warmup 25] [--repeats 3] [--no-compile]
                       [--only SUBSTRING ...]
  TRITON_INTERPRET=1 python probe_rows.py --check
--budget-s: no new unit starts after this many seconds (one in flight finishes). --check runs
on the CPU under the Triton interpreter at interpreter shapes: every case's adapter and
params against the reference, every row variant against the reference, and the experiment
plumbing with a stand-in timer (no timing); exit status 1 if anything is wrong.
"""

import argparse
import hashlib
import importlib.util
import json
import math
import os
import pathlib
import statistics
import sys
import time
import traceback

CHECK = "--check" in sys.argv
if CHECK:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
sys.path.insert(0, str(TEMPLATES / "_common"))

import fa_testing as fat  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
Q = [0.5, 0.2, 0.8]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def finite(v):
    return v if not isinstance(v, float) or math.isfinite(v) else None


SUMMARY = []


def emit(obj):
    obj = {k: finite(v) for k, v in obj.items()}
    print(json.dumps(obj), flush=True)
    if "experiment" in obj:
        SUMMARY.append(obj)


# ----------------------------------------------------------------------------------------------
# Loading a template through its adapter, as the harness does
# ----------------------------------------------------------------------------------------------

def load_template(pattern):
    folder = TEMPLATES / pattern
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    tag = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    mods = {}
    for name in ("kernel", "reference", "adapter"):
        modname = f"_probe_{tag}_{name}"
        if modname not in sys.modules:
            spec = importlib.util.spec_from_file_location(modname, folder / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
        mods[name] = sys.modules[modname]
    return mods["kernel"], mods["reference"], mods["adapter"]


# (case name, pattern, dtype, SHAPES, PARAMS): SHAPES and PARAMS as in a generated case.py
CASES = {
    "add_layernorm": ("add_layernorm bf16 8192x4096", "add_layernorm", "bf16",
                      [[8192, 4096]], {"eps": 1e-5}),
    "rmsnorm": ("rmsnorm_pyops llama bf16 8192x4096", "rmsnorm_pyops", "bf16",
                [[8192, 4096], [4096]], {"eps": 1e-6, "casting": "llama"}),
    "dropout_add": ("dropout_add p=0.1 bias bf16 8192x4096", "dropout_add", "bf16",
                    [[8192, 4096]], {"has_bias": True, "p": 0.1}),
    "gelu_tanh_fp16": ("bias_gelu tanh fp16 16384x3072", "bias_gelu", "fp16",
                       [[16384, 3072], [3072]], {"approximate": "tanh", "has_bias": True}),
    "gelu_tanh_bf16": ("bias_gelu tanh bf16 8192x16384", "bias_gelu", "bf16",
                       [[8192, 16384], [16384]], {"approximate": "tanh", "has_bias": True}),
    "gelu_erf_bf16": ("bias_gelu erf bf16 8192x16384", "bias_gelu", "bf16",
                      [[8192, 16384], [16384]], {"approximate": "none", "has_bias": True}),
    "swiglu": ("swiglu bf16 8192x11008", "swiglu", "bf16", [[8192, 11008]], {}),
    "mask_softmax": ("mask_softmax bool bf16 8x16x1024x1024", "mask_softmax", "bf16",
                     [[8, 16, 1024, 1024], [8, 1, 1024, 1024]],
                     {"mask_kind": "bool", "mask_fill": float("-inf"), "scale": 0.125, "p": 0.0}),
}


# ----------------------------------------------------------------------------------------------
# Row-kernel variants: the templates' single-block forward with [ROWS, BLOCK_N] per program
# ----------------------------------------------------------------------------------------------

_RNE_BF16 = tl.constexpr(INTERPRET)


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)


@triton.jit
def _add_ln_rows(X, R, W, B, S, Y, MEAN, RSTD, M, N, eps,
                 ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # s = x + r (written), y = layer_norm(s) * w + b; contiguous [M, N], N <= BLOCK_N
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + offs, mask=mask, other=0.0).to(tl.float32)
    s = _cast(x + r, S.dtype.element_ty)
    tl.store(S + offs, s, mask=mask)
    s = tl.where(mask, s.to(tl.float32), 0.0)
    mean = tl.sum(s, axis=1) / N
    d = tl.where(mask, s - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)
    y = d * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(Y + offs, _cast(y, Y.dtype.element_ty), mask=mask)
    tl.store(MEAN + rows, mean, mask=rmask)
    tl.store(RSTD + rows, rstd, mask=rmask)


@triton.jit
def _rms_rows(X, W, Y, RSTD, M, N, eps, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # llama casting: n = x * rstd rounded to x's dtype, then y = n * w in y's dtype
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    n = _cast(x * rstd[:, None], X.dtype.element_ty).to(tl.float32)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    tl.store(Y + offs, _cast(n * w[None, :], Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=rmask)


def add_ln_launcher(inputs, eps, rows, warps):
    """Outputs allocated once; returns (launch, outputs)."""
    x, r, w, b = inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"]
    M, N = x.shape
    s, y = torch.empty_like(x), torch.empty_like(x)
    mean = torch.empty(M, dtype=torch.float32, device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(N)

    def launch():
        _add_ln_rows[(triton.cdiv(M, rows),)](x, r, w, b, s, y, mean, rstd, M, N, float(eps),
                                              ROWS=rows, BLOCK_N=block, num_warps=warps, num_stages=1)
    return launch, (s, y)


def rms_launcher(inputs, eps, rows, warps):
    x, w = inputs["x"], inputs["weight"]
    M, N = x.shape
    y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, w.dtype), device=x.device)
    rstd = torch.empty(M, dtype=torch.float32, device=x.device)
    block = triton.next_power_of_2(N)

    def launch():
        _rms_rows[(triton.cdiv(M, rows),)](x, w, y, rstd, M, N, float(eps),
                                           ROWS=rows, BLOCK_N=block, num_warps=warps, num_stages=1)
    return launch, (y,)


# ----------------------------------------------------------------------------------------------
# Timers
# ----------------------------------------------------------------------------------------------

def _us(r):
    return [v * 1e3 for v in r]


class GpuTimer:
    """The timing methods a-d, the host time of one call, and CUDA-graph capture."""

    def __init__(self, args):
        from triton.testing import do_bench, do_bench_cudagraph

        self.do_bench, self.do_bench_cudagraph = do_bench, do_bench_cudagraph
        self.warmup, self.rep = args.warmup, args.rep
        self.cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
        self.cycles_per_us = self._calibrate_sleep()

    def _events(self, n):
        return [torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def _calibrate_sleep(self):
        torch.cuda._sleep(100_000)
        torch.cuda.synchronize()
        best = None
        for _ in range(3):
            s, e = self._events(2)
            s.record()
            torch.cuda._sleep(2_000_000)
            e.record()
            torch.cuda.synchronize()
            us = s.elapsed_time(e) * 1e3
            best = us if best is None else min(best, us)
        return 2_000_000 / best

    def flush_us(self):
        """GPU time of one L2 flush (cache.zero_()), median of 20."""
        times = []
        for _ in range(20):
            s, e = self._events(2)
            s.record()
            self.cache.zero_()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        return statistics.median(times)

    def a(self, fn):
        return _us(self.do_bench(fn, warmup=self.warmup, rep=self.rep, quantiles=Q))

    def capture(self, fn):
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
        g.replay()
        torch.cuda.synchronize()
        return g

    def b(self, graph):
        return _us(self.do_bench(graph.replay, warmup=self.warmup, rep=self.rep, quantiles=Q))

    def c(self, fn):
        return _us(self.do_bench_cudagraph(fn, quantiles=Q))

    def d(self, fn, sleep_us):
        """do_bench's loop with a GPU spin of sleep_us between the flush and the start event."""
        cycles = int(sleep_us * self.cycles_per_us)
        fn()
        torch.cuda.synchronize()
        s, e = self._events(2)
        s.record()
        for _ in range(5):
            self.cache.zero_()
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-3)
        n_warm, n = max(1, int(self.warmup / est)), max(1, int(self.rep / est))
        for _ in range(n_warm):
            fn()
        starts, ends = self._events(n), self._events(n)
        for i in range(n):
            self.cache.zero_()
            torch.cuda._sleep(cycles)
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        t = torch.tensor([a.elapsed_time(b) for a, b in zip(starts, ends)], dtype=torch.float)
        return _us(torch.quantile(t, torch.tensor(Q, dtype=torch.float)).tolist())

    def cpu(self, fn):
        return host_time(fn, torch.cuda.synchronize, batches=10, per_batch=20, long=200)


def host_time(fn, sync, batches, per_batch, long):
    """Host microseconds per call: median over batches (sync between, not timed) and one long loop."""
    fn()
    sync()
    per = []
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        per.append((time.perf_counter() - t0) / per_batch)
    sync()
    t0 = time.perf_counter()
    for _ in range(long):
        fn()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return {"cpu_us_per_call": statistics.median(per) * 1e6,
            "cpu200_us_per_call": (t1 - t0) / long * 1e6,
            "wall200_us_per_call": (t2 - t0) / long * 1e6}


class _FakeGraph:
    def __init__(self, fn):
        self.replay = fn


class CheckTimer:
    """--check: every method calls fn once (the plumbing runs) and returns stand-in numbers."""

    cycles_per_us = 1.0

    def flush_us(self):
        return 0.0

    def a(self, fn):
        fn()
        return [1.0, 0.9, 1.1]

    def capture(self, fn):
        fn()
        return _FakeGraph(fn)

    def b(self, graph):
        graph.replay()
        return [1.0, 0.9, 1.1]

    def c(self, fn):
        return self.a(fn)

    def d(self, fn, sleep_us):
        return self.a(fn)

    def cpu(self, fn):
        return host_time(fn, lambda: None, batches=2, per_batch=1, long=2)


# ----------------------------------------------------------------------------------------------
# The experiments
# ----------------------------------------------------------------------------------------------

class Probe:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.skipped = []
        self.failures = []
        self.rows_cache = {}
        self.device = "cpu" if CHECK else "cuda"
        self.timer = CheckTimer() if CHECK else GpuTimer(args)
        self.copy_bw = 4.24e12 if CHECK else self.copy_bandwidth()

    def copy_bandwidth(self):
        """Device-to-device copy of 1 GiB, as the harness measures it: bytes read + written per second."""
        n = 1 << 28
        x = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
        y = torch.empty_like(x)
        med = self.timer.a(lambda: y.copy_(x))[0]
        del x, y
        torch.cuda.empty_cache()
        return 2 * n * 4 / (med * 1e-6)

    def wanted(self, label):
        return not self.args.only or any(s in label for s in self.args.only)

    def unit(self, label, fn, *a):
        """Runs one unit unless the budget is spent; errors are logged, emitted and survived."""
        if not self.wanted(label):
            return
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
            self.failures.append(f"{label}: {e}")
            emit({"experiment": label.split(" ")[0], "case": label, "variant": None, "method": None,
                  "error": f"{type(e).__name__}: {e}"[:1000]})
        finally:
            if not CHECK:
                torch._dynamo.reset()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()

    def floor_us(self, nbytes):
        return nbytes / self.copy_bw * 1e6

    def line(self, experiment, case, variant, method, r, floor, cpu=None, error=None, **extra):
        med = r[0] if r else None
        out = {"experiment": experiment, "case": case, "variant": variant, "method": method,
               "median_us": med, "p20_us": r[1] if r else None, "p80_us": r[2] if r else None,
               "floor_us": floor, "pct_of_floor": 100.0 * floor / med if med else None,
               "cpu_us_per_call": cpu, "error": error}
        out.update(extra)
        emit(out)

    # 1. timing methods ------------------------------------------------------------------------

    def timing(self, key):
        name, pattern, dtype, shapes, params = CASES[key]
        kernel, ref, adapter = load_template(pattern)
        dt = fat.DTYPES[dtype]
        if CHECK:
            shapes = adapter.interp_shapes(shapes)
        if CHECK:  # the adapter, params and kernel against the reference (raises: the unit reports it)
            fat.run_case(kernel, ref, adapter, shapes, dtype, params, self.device, 0)
        inputs = adapter.make_inputs(shapes, dt, params, self.device, 0)
        providers = {
            "fused": lambda: adapter.fused(kernel, inputs, params),
            "eager": lambda: adapter.reference(ref, inputs, params),
        }
        # the harness checked these kernels at these shapes; here only a cheap look on the device
        diff = None
        if params.get("p", 0.0) == 0.0:
            diff = max((g.float() - w.float()).abs().nan_to_num(0.0).max().item()
                       for g, w in zip(providers["fused"](), providers["eager"]()))
            log(f"  max|fused - eager| = {diff:.3g}")
        if not CHECK and not self.args.no_compile:
            torch._dynamo.reset()
            comp = torch.compile(lambda inp: adapter.reference(ref, inp, params))
            providers["compile"] = lambda: comp(inputs)
        floor = self.floor_us(int(adapter.nbytes(shapes, dt, params)))

        graphs, cpu = {}, {}
        for pname, fn in list(providers.items()):
            try:
                t = time.time()
                fn()
                if not CHECK:
                    torch.cuda.synchronize()
                log(f"  {pname}: first call {time.time() - t:.1f} s")
                cpu[pname] = self.timer.cpu(fn)
            except Exception as e:
                traceback.print_exc()
                self.line("timing", name, pname, "warmup", None, floor, error=f"{type(e).__name__}: {e}"[:1000])
                del providers[pname]
                continue
            try:
                graphs[pname] = self.timer.capture(fn)
            except Exception as e:
                traceback.print_exc()
                self.line("timing", name, pname, "b_graph_do_bench", None, floor,
                          error=f"capture: {type(e).__name__}: {e}"[:1000])
                if not CHECK:
                    torch.cuda.synchronize()

        methods = {
            "a_do_bench": lambda p: self.timer.a(providers[p]),
            "b_graph_do_bench": lambda p: self.timer.b(graphs[p]),
            "c_do_bench_cudagraph": lambda p: self.timer.c(providers[p]),
            "d_do_bench_busy": lambda p: self.timer.d(providers[p], self.sleep_us(cpu[p])),
        }
        runs = {(p, m): [] for p in providers for m in methods}
        errors = {}
        for _ in range(self.args.repeats):
            for p in providers:
                for m, time_it in methods.items():
                    if (p, m) in errors or (m == "b_graph_do_bench" and p not in graphs):
                        continue
                    try:
                        runs[(p, m)].append(time_it(p))
                    except Exception as e:
                        traceback.print_exc()
                        errors[(p, m)] = f"{type(e).__name__}: {e}"[:1000]
                        if not CHECK:
                            torch.cuda.synchronize()
        for p in providers:
            for m in methods:
                rs = runs[(p, m)]
                err = errors.get((p, m))
                if not rs and err is None:
                    continue  # no graph: reported above
                mid = None
                if rs:
                    meds = sorted(r[0] for r in rs)
                    med = meds[len(meds) // 2]
                    mid = min(rs, key=lambda r: abs(r[0] - med))
                    mid = [med, mid[1], mid[2]]
                extra = dict(cpu[p])
                if m == "d_do_bench_busy":
                    extra["sleep_us"] = self.sleep_us(cpu[p])
                self.line("timing", name, p, m, mid, floor, cpu=extra.pop("cpu_us_per_call"), error=err,
                          runs=rounded(rs), fused_vs_eager_max_abs=diff, **extra)
        del graphs, inputs

    def sleep_us(self, cpu):
        return min(2000.0, max(150.0, 3 * cpu["cpu_us_per_call"] + 50.0))

    # 2. row-kernel variants -------------------------------------------------------------------

    def rows_setup(self, key):
        """Inputs, floor and reference outputs for the row sweep of one case (made once)."""
        if key not in self.rows_cache:
            self.rows_cache.clear()
            self.rows_cache[key] = self._rows_setup(key)
        return self.rows_cache[key]

    def _rows_setup(self, key):
        name, pattern, dtype, shapes, params = CASES[key]
        kernel, ref, adapter = load_template(pattern)
        dtypes = ["bf16", "fp32"] if CHECK else [dtype]
        sets = []
        for d in dtypes:
            shp = [[13, 300], [300]] if CHECK else shapes
            dt = fat.DTYPES[d]
            inputs = adapter.make_inputs(shp, dt, params, self.device, 0)
            want = adapter.reference(ref, inputs, params)
            atol, rtol = adapter.tolerance(dt, shp, params)
            sets.append((d, shp, dt, inputs, want, atol, rtol))
        floor = self.floor_us(int(adapter.nbytes(shapes if not CHECK else sets[0][1], fat.DTYPES[dtype], params)))
        return name, params, sets, floor

    def rows_ceiling(self, key):
        name, params, sets, floor = self.rows_setup(key)
        d, shp, dt, inputs, want, atol, rtol = sets[0]
        x = inputs["x"]
        n = x.numel()
        # one copy kernel moving the case's bytes (reads + writes, weight vectors aside)
        streams = 4 if key == "add_layernorm" else 2
        src = torch.empty(n * streams // 2, dtype=dt, device=self.device).normal_()
        dst = torch.empty_like(src)
        g = self.timer.capture(lambda: dst.copy_(src))
        runs = [self.timer.b(g) for _ in range(self.args.repeats)]
        self.line("rows", name, f"copy_ same bytes ({streams} streams of x)", "b_graph_do_bench",
                  median_run(runs), floor, runs=rounded(runs))
        if key == "add_layernorm":
            r, s = inputs["residual"], torch.empty_like(x)
            g = self.timer.capture(lambda: torch.add(x, r, out=s))
            runs = [self.timer.b(g) for _ in range(self.args.repeats)]
            self.line("rows", name, "torch.add x + r (3 streams)", "b_graph_do_bench", median_run(runs),
                      self.floor_us(3 * n * x.element_size()), runs=rounded(runs))

    def rows_variant(self, key, rows, warps):
        name, params, sets, floor = self.rows_setup(key)
        make = add_ln_launcher if key == "add_layernorm" else rms_launcher
        eps = params["eps"]
        variant = f"ROWS={rows} num_warps={warps}"
        for d, shp, dt, inputs, want, atol, rtol in sets:
            launch, got = make(inputs, eps, rows, warps)
            launch()
            for i, (g_, w_) in enumerate(zip(got, want)):
                try:
                    fat.assert_close(g_, w_, atol, rtol, name=f"{name} {variant} {d} out{i}")
                except AssertionError as e:
                    self.failures.append(str(e))
                    self.line("rows", name, variant, None, None, floor, error=f"wrong: {e}"[:1000])
                    return
        launch = make(sets[0][3], eps, rows, warps)[0]
        g = self.timer.capture(launch)
        runs = [self.timer.b(g) for _ in range(self.args.repeats)]
        self.line("rows", name, variant, "b_graph_do_bench", median_run(runs), floor, runs=rounded(runs),
                  rows=rows, num_warps=warps)

    # ------------------------------------------------------------------------------------------

    def run(self):
        if not CHECK:
            emit({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                  "copy_tbps": self.copy_bw / 1e12, "flush_us": self.timer.flush_us(),
                  "sleep_cycles_per_us": self.timer.cycles_per_us, "rep_ms": self.args.rep,
                  "warmup_ms": self.args.warmup, "repeats": self.args.repeats,
                  "autotune": os.environ.get("FUSEADVISE_AUTOTUNE", "1")})
        else:
            emit({"check": True, "torch": torch.__version__, "triton": triton.__version__})
        first = ["add_layernorm", "rmsnorm", "dropout_add", "gelu_tanh_fp16"]
        rest = ["gelu_tanh_bf16", "gelu_erf_bf16", "swiglu", "mask_softmax"]
        for key in first:
            self.unit(f"timing {CASES[key][0]}", self.timing, key)
        for key in ("add_layernorm", "rmsnorm"):
            self.unit(f"rows {CASES[key][0]} ceiling", self.rows_ceiling, key)
            for rows in (1, 2, 4):
                for warps in (2, 4, 8, 16):
                    self.unit(f"rows {CASES[key][0]} ROWS={rows} num_warps={warps}",
                              self.rows_variant, key, rows, warps)
        self.rows_cache.clear()
        for key in rest:
            self.unit(f"timing {CASES[key][0]}", self.timing, key)
        emit({"skipped": self.skipped, "elapsed_s": round(time.time() - self.t0, 1),
              "failures": self.failures})
        summary(self.skipped, self.failures)
        return 1 if self.failures else 0


def median_run(runs):
    meds = sorted(r[0] for r in runs)
    med = meds[len(meds) // 2]
    mid = min(runs, key=lambda r: abs(r[0] - med))
    return [med, mid[1], mid[2]]


def rounded(runs):
    return [[round(v, 2) for v in r] for r in runs]


def fmt(v, w=7, p=1):
    return f"{v:{w}.{p}f}" if isinstance(v, (int, float)) else f"{'-':>{w}}"


def summary(skipped, failures):
    log("")
    log(f"{'experiment':8s} {'case':40s} {'variant':26s} {'method':22s} {'median':>7s} "
        f"{'p20':>7s} {'p80':>7s} {'floor':>7s} {'%floor':>6s} {'cpu us':>7s}")
    for o in SUMMARY:
        if o.get("error"):
            log(f"{o['experiment']:8s} {str(o['case'])[:40]:40s} {str(o['variant'])[:26]:26s} "
                f"{str(o['method'])[:22]:22s} ERROR {o['error'][:120]}")
            continue
        log(f"{o['experiment']:8s} {str(o['case'])[:40]:40s} {str(o['variant'])[:26]:26s} "
            f"{str(o['method'])[:22]:22s} {fmt(o['median_us'])} {fmt(o['p20_us'])} {fmt(o['p80_us'])} "
            f"{fmt(o['floor_us'])} {fmt(o['pct_of_floor'], 6, 0)} {fmt(o.get('cpu_us_per_call'))}")
    if skipped:
        log(f"skipped (budget): {len(skipped)} units: " + "; ".join(skipped))
    if failures:
        log(f"FAILURES: {len(failures)}")
        for f in failures:
            log("  " + f.splitlines()[0][:300])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="CPU correctness under TRITON_INTERPRET=1, no timing")
    ap.add_argument("--budget-s", type=float, default=200.0, help="start no new unit after this many seconds")
    ap.add_argument("--rep", type=float, default=50.0, help="do_bench rep (ms)")
    ap.add_argument("--warmup", type=float, default=25.0, help="do_bench warmup (ms)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile provider")
    ap.add_argument("--only", nargs="*", default=[], help="run only units whose label contains one of these")
    args = ap.parse_args()
    if CHECK:
        args.repeats = 1
    elif INTERPRET:
        emit({"error": "TRITON_INTERPRET=1 is set: timing needs the compiled kernels on a GPU (or pass --check)"})
        return 2
    elif not torch.cuda.is_available():
        emit({"error": "no CUDA GPU visible to torch"})
        return 2
    try:
        return Probe(args).run()
    except Exception as e:
        traceback.print_exc()
        emit({"error": f"probe setup failed: {type(e).__name__}: {e}"[:2000]})
        return 1


if __name__ == "__main__":
    sys.exit(main())
