"""GPU benchmark harness of fuseadvise: fused kernel vs eager ATen vs torch.compile.

Run by ``fuseadvise bench`` (which embeds this file) over generated kernel folders; prints one
JSON object per line on stdout: first a header (GPU, versions, measured copy bandwidth), then
one line per folder. Diagnostics go to stderr.

For each folder (kernel.py, reference.py, adapter.py, case.py, fa_testing.py):

1. Correctness on the GPU first, the compiled kernel against the reference on the traced
   shapes (fa_testing.run_case: poisoned outputs, tolerance per dtype); a kernel that fails is
   not timed.
2. Providers: ``fused`` (the Triton kernel), ``eager`` (the reference chain exactly as traced),
   ``compile`` (torch.compile of the reference, default mode), optionally ``compile_max``
   (mode "max-autotune-no-cudagraphs") and, for GEMM patterns, ``gemm_only`` (the GEMM alone).
   Library ops: where the adapter defines ``library_ops(inputs, params)`` (library calls that
   compute the case's forward: F.scaled_dot_product_attention under each backend, FlexAttention,
   F.rms_norm, the cuBLASLt GELU epilogue), each op is checked against the reference on the
   GPU (outputs within adapter.tolerance; with dropout only that it runs) and timed beside the
   others, in every mode, with the same method; the case's ``library`` entry holds, per op,
   ``us`` (with p20/p80, spread, per-call wall and host time, ``peak_bytes``, ``timing``) or
   ``refused`` (the adapter's reason, or the first line of what the op raised: an SDPA backend
   refuses per case), and the summary fields ``sdpa_us``/``sdpa_backend`` (the fastest SDPA
   backend), ``flex_us``, ``library_us``/``library_op`` (the fastest other op). Attention
   cases record ``compile_sdpa``: whether Inductor rewrote the eager chain to SDPA when
   compiling it (compile_rewrote_to_sdpa).
3. GPU time: each provider is captured once in a CUDA graph (after its warm-up call) and the
   graph's replay is timed with ``fa_testing.gpu_time_us(replay, warmup, rep)``: before every
   call L2 is emptied without leaving dirty lines (a 256 MiB buffer written, then another
   read; ``triton.testing.do_bench`` only writes, and the write-back of the dirty lines it
   leaves landed inside the timed call: 4.5 us of RMSNorm bf16 8192x4096's 38.4 on the
   H200), and CUDA events around the call alone give the median, p20 and p80. GPU time only:
   timing the Python call itself measured the host instead whenever a provider's per-call
   CPU time exceeded the GPU time of the flush plus the kernels. A provider that cannot be
   captured is timed as a plain call (``timing`` says which). Repeated ``--repeats`` times
   with the providers interleaved; the reported median is the median of the repeats'
   medians and the spread their min..max. When the fused kernel takes under
   ``--graph-below-us`` (or its floor does), every provider is timed with
   ``do_bench_cudagraph`` instead (many back-to-back calls in one graph, no flush: L2-warm,
   the steady state of a decode loop).
   Per call (``<provider>_wall_us``, ``<provider>_host_us``): each provider also called as an
   eager model calls it, without a CUDA graph, by ``fa_testing.wall_time_us``: the wall time
   per call of a loop of back-to-back calls with one synchronize at the end, and the time one
   call takes to return (bursts of calls started on an idle GPU). Each repeat runs
   ``--wall-rounds`` loops of ``--wall-ms``/rounds per provider, the providers interleaved
   round by round, their order turned each round: the host's speed drifts by tens of percent
   over seconds, and one provider's loop after another's would credit that drift to one of
   them. Medians over all rounds of all repeats, the wall time's spread their 20th..80th
   percentile (provider_fields). In the training
   modes a call is ``--step-copies`` chains (``wall_copies``, default 8) on their own leaves
   with one torch.autograd.grad over all of them, its figures over that count (StepCall): a
   grad call's own engine cost (66-95 us on the H200 machine) is paid once per step in a
   model, not once per chain.
4. Floor: the fewest bytes the chain must move (adapter.nbytes) over the measured copy
   bandwidth, or its FLOPs (adapter.flops) over the measured GEMM rate, whichever is larger.
   The training modes get their own (mode_work): the backward's fewest bytes and FLOPs
   (adapter.bwd_nbytes, adapter.bwd_flops), the full mode's the forward's and the backward's
   summed, and their copy ceiling (5.) moves those bytes; an adapter without bwd_nbytes gets
   no training floor (no ``floor_us``, ``copy_us``).
5. Copy ceiling: an elementwise copy on the SMs (``dst = src * 1`` over fp32; a ``copy_`` is
   a memcpy, slower inside a CUDA graph) moving the same bytes,
   timed like the providers (``copy_us``, the median). The floor assumes the bandwidth of a
   1 GiB copy, which smaller working sets never reach; the copy's time is what the memory
   system delivers at this size. Omitted when it fails (out of memory).
6. Peak memory (``<provider>_peak_bytes``): bytes allocated at the peak of one call beyond
   what was allocated before it (outputs, temporaries; in training, saved activations and
   gradients), for fused, eager and torch.compile.
7. Launches: kernels launched by one call of the fused and the eager provider, counted with
   torch.profiler after every folder is timed (a profiler session slows every later launch).
8. The autotuner's chosen config for each autotuned Triton kernel in kernel.py.
9. Training (``--modes backward,full``), for chains with a backward: the gradients checked on
   the GPU (fa_testing.run_grad_case), then one more result line per mode, timed as above
   with the providers fused (adapter.train: the autograd.Function), eager and torch.compile
   (AOTAutograd): "backward" times torch.autograd.grad from one forward's saved state,
   "full" the forward and its backward. Every result line carries its "mode". Library ops
   train through autograd like the eager chain (an op without a derivative is refused). The
   backward mode's forward runs on the CUDA-graph capture stream (TrainingCall), so its
   backward is captured and timed by graph replay like the other modes.

The timing functions come from the templates' ``fa_testing.py`` beside this file (``fuseadvise
bench`` writes it there) or, run from a checkout, ``../templates/_common/fa_testing.py``; the
folders' own copy only checks correctness, so folders generated by an older version are
timed the same way.

Usage: python harness.py [--max-autotune] [--repeats N] [--rep MS] [--warmup MS] [--wall-ms MS]
       [--modes forward,backward,full] DIR...
"""

import argparse
import contextlib
import importlib.util
import hashlib
import json
import math
import os
import pathlib
import sys
import time
import traceback


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def emit(obj):
    print(json.dumps(obj, allow_nan=False), flush=True)


def finite(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def load(folder, name):
    return load_path(folder / f"{name}.py")


def load_path(path):
    """Imports the file path under a module name unique to it."""
    tag = hashlib.sha1(str(path.parent).encode()).hexdigest()[:12]
    modname = f"_fab_{tag}_{path.stem}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


def timing_path(here=None):
    """The fa_testing.py whose timing functions time every folder: beside the harness
    (``fuseadvise bench`` writes it there), else the checkout's templates/_common; None when
    neither exists."""
    here = pathlib.Path(here or __file__).resolve().parent
    for p in (here / "fa_testing.py", here.parent / "templates" / "_common" / "fa_testing.py"):
        if p.is_file():
            return p
    return None


# The JSON key of each provider's fields (fused_us, compile_max_autotune_wall_us, ...).
KEYS = {"fused": "fused", "eager": "eager", "compile": "compile",
        "compile_max": "compile_max_autotune", "gemm_only": "gemm_only"}
# Providers that also get quantiles and spreads.
MAIN = ("fused", "eager", "compile")


def provider_fields(name, gpu_runs, wall_runs):
    """The JSON fields of provider name from its repeated runs. gpu_runs: [median, p20, p80]
    per repeat (microseconds); wall_runs: wall_time_us's result per repeat. The median is the
    median of the repeats' (the upper one of an even count), p20 and p80 come from the repeat
    whose median is nearest it, spreads are min..max of the repeats' medians; the per-call
    spread is min..max of the rounds' figures (wall_runs: one per round of a repeat) up to four
    of them, from five on their 20th..80th percentile (the second lowest to the second highest
    of five to nine, ...): one round in ten slowed by the host (a collection, a tuning's
    leftover) would otherwise make every difference "noise" (bench.Noise)."""
    key = KEYS.get(name, name)
    out = {}
    if gpu_runs:
        meds = sorted(r[0] for r in gpu_runs)
        med = meds[len(meds) // 2]
        out[f"{key}_us"] = med
        if name in MAIN or name.startswith(LIB):
            mid = min(gpu_runs, key=lambda r: abs(r[0] - med))
            out[f"{key}_p20_us"] = mid[1]
            out[f"{key}_p80_us"] = mid[2]
            out[f"{key}_spread_us"] = [meds[0], meds[-1]]
    if wall_runs:
        walls = sorted(w["wall_us"] for w in wall_runs)
        hosts = sorted(w["host_us"] for w in wall_runs)
        out[f"{key}_wall_us"] = walls[len(walls) // 2]
        out[f"{key}_host_us"] = hosts[len(hosts) // 2]
        if name in MAIN or name.startswith(LIB):
            cut = len(walls) // 5
            out[f"{key}_wall_spread_us"] = [walls[cut], walls[-1 - cut]]
    return out


def capture_stream(torch):
    """The stream torch.cuda.graph captures on when given none (a class attribute, created
    once per process): fa_testing.graph_replay and triton's do_bench_cudagraph both capture
    there."""
    g = torch.cuda.graph
    if g.default_capture_stream is None:
        g.default_capture_stream = torch.cuda.Stream()
    return g.default_capture_stream


@contextlib.contextmanager
def on_capture_stream(torch, device):
    """Runs the block on the CUDA-graph capture stream (nothing for a CPU device), ordered
    after the work queued so far and before the work queued after it."""
    if torch.device(device).type != "cuda":
        yield
        return
    here, s = torch.cuda.current_stream(), capture_stream(torch)
    s.wait_stream(here)
    with torch.cuda.stream(s):
        yield
    here.wait_stream(s)


class TrainingCall:
    """A zero-argument call of one training mode of the chain fwd(inputs) -> output(s), on
    fresh leaves (copies of inputs[names] with requires_grad) and upstream gradients that are
    the same random tensors for every provider (a fixed seed):

    - "backward": torch.autograd.grad of the outputs of one forward, run once when the call is
      built, with retain_graph, so every call runs the same backward. That forward runs on the
      CUDA-graph capture stream: autograd runs each backward op on the stream of its forward
      op, so a forward left on the default stream put the captured backward's kernels outside
      the capture (the capture failed and the backward was timed as a plain call). Called
      from the default stream, the backward still runs there, ordered by autograd's stream
      synchronisation.
    - "full": the forward and then its backward, both inside each call.

    capturable is False for a call the harness must not capture in a CUDA graph (it times the
    plain call instead): set for a library op's backward mode with dropout. SDPA's backends
    save the forward's Philox seed and offset as CPU tensors when the forward is not captured,
    and their backward, when captured, reads them as device pointers: an illegal memory
    access that leaves the CUDA context unusable for every later case (seen on the H200 with
    sdpa_efficient, p = 0.1)."""

    capturable = True

    def __init__(self, torch, fwd, inputs, names, mode):
        self.torch, self.fwd, self.mode = torch, fwd, mode
        self.inputs, self.names = inputs, names
        self.leaves = dict(inputs)
        for n in names:
            self.leaves[n] = inputs[n].detach().clone().requires_grad_(True)
        self.wrt = [self.leaves[n] for n in names]
        device = self.wrt[0].device if self.wrt else "cpu"
        self.outs = None
        if mode == "backward":
            with on_capture_stream(torch, device):
                self.outs = self.outputs()
            outs = self.outs
        else:
            outs = self.outputs()
        g = torch.Generator(device=outs[0].device).manual_seed(1234)
        self.dys = [torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=g) for o in outs]

    def outputs(self):
        o = self.fwd(self.leaves)
        o = o if isinstance(o, (tuple, list)) else (o,)
        return [t for t in o if isinstance(t, self.torch.Tensor) and t.requires_grad]

    def __call__(self):
        grad = self.torch.autograd.grad
        if self.mode == "backward":
            return grad(self.outs, self.wrt, self.dys, retain_graph=True, allow_unused=True)
        return grad(self.outputs(), self.wrt, self.dys, allow_unused=True)


class StepCall:
    """A zero-argument call of k copies of one chain in one training mode, their backward in
    one torch.autograd.grad: the per-call host and wall figures of a training mode, over k.

    Each torch.autograd.grad call pays the autograd engine's own cost (a graph task, the hand-
    over to the CUDA device's engine thread and back: 66-95 us on the H200 machine, measured by
    bench/experiments/probe_train_host.py as the backward of x * 2) once, whatever the graph. A
    model step pays it once for all its chains, so a chain timed alone in its own grad call
    reads that much dearer than in a step, for every provider alike. Here k chains on their own
    leaves (fresh copies of the inputs, the same upstream gradients) share one grad call:
    "backward" runs the k retained backwards, "full" k forwards and then their backward, as a
    step runs its chains' forwards and then one backward."""

    def __init__(self, torch, fwd, inputs, names, mode, k):
        self.torch, self.mode, self.k = torch, mode, k
        self.calls = [TrainingCall(torch, fwd, inputs, names, mode) for _ in range(k)]
        self.wrt = [w for c in self.calls for w in c.wrt]
        self.dys = [d for c in self.calls for d in c.dys]

    def __call__(self):
        grad = self.torch.autograd.grad
        if self.mode == "backward":
            outs = [o for c in self.calls for o in c.outs]
            return grad(outs, self.wrt, self.dys, retain_graph=True, allow_unused=True)
        outs = [o for c in self.calls for o in c.outputs()]
        return grad(outs, self.wrt, self.dys, allow_unused=True)


def step_wall_time_us(timing, call, k, wall_ms):
    """timing.wall_time_us of call (a StepCall of k chains), its wall and host time over k: a
    chain's per-call cost in a training step."""
    w = timing.wall_time_us(call, wall_ms)
    return dict(w, wall_us=w["wall_us"] / k, host_us=w["host_us"] / k)


def mode_work(adapter, shapes, dt, params, mode):
    """(bytes, FLOPs) the fused chain cannot avoid in mode, the floor's figures: "forward"
    adapter.nbytes and adapter.flops, "backward" adapter.bwd_nbytes and adapter.bwd_flops,
    "full" the two summed. FLOPs are None where the adapter has none (a memory-bound chain);
    the whole is None for a training mode whose adapter has no bwd_nbytes (no backward floor)."""
    def work(nbytes, flops):
        return int(nbytes(shapes, dt, params)), None if flops is None else float(flops(shapes, dt, params))

    fwd = work(adapter.nbytes, getattr(adapter, "flops", None))
    if mode == "forward":
        return fwd
    if not hasattr(adapter, "bwd_nbytes"):
        return None
    bwd = work(adapter.bwd_nbytes, getattr(adapter, "bwd_flops", None))
    if mode == "backward":
        return bwd
    flops = None if fwd[1] is None and bwd[1] is None else (fwd[1] or 0.0) + (bwd[1] or 0.0)
    return fwd[0] + bwd[0], flops


def training_call(torch, fwd, inputs, names, mode):
    """TrainingCall(torch, fwd, inputs, names, mode): a zero-argument call of one training
    mode ("backward" or "full") of the chain fwd(inputs)."""
    return TrainingCall(torch, fwd, inputs, names, mode)


# Library ops (adapter.library_ops): each one's provider name is LIB + its name; its figures
# go under the case's "library" entry, not top-level fields.
LIB = "library:"
SDPA = "sdpa_"  # library ops named sdpa_<backend>: F.scaled_dot_product_attention under one backend
FLEX = "flex"


def first_line(e):
    """The first non-empty line of an exception's message (its type when it has none)."""
    for line in str(e).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(e).__name__


def call_op(fn, inputs):
    """Calls library op fn on a case's inputs: every library op takes the inputs dict, as
    adapter.reference does (docs/templates.md)."""
    return fn(inputs)


def library_ops(adapter, inputs, params):
    """adapter.library_ops(inputs, params) as (ops, refused): {} and {} for an adapter
    without it; an adapter whose library_ops raises refuses nothing and offers nothing (its
    error logged)."""
    if not hasattr(adapter, "library_ops"):
        return {}, {}
    try:
        ops, refused = adapter.library_ops(inputs, params)
    except Exception as e:  # noqa: BLE001
        log(f"library_ops failed: {e}")
        return {}, {}
    return dict(ops or {}), {k: first_line(v) for k, v in (refused or {}).items()}


def library_entry(fields, key):
    """A library op's entry of the case JSON from provider_fields' output under key."""
    out = {}
    for src, dst in (("us", "us"), ("p20_us", "p20_us"), ("p80_us", "p80_us"), ("spread_us", "spread_us"),
                     ("wall_us", "wall_us"), ("host_us", "host_us"), ("wall_spread_us", "wall_spread_us")):
        if f"{key}_{src}" in fields:
            out[dst] = fields[f"{key}_{src}"]
    return out


def library_summary(library):
    """The case's summary fields of its library entries: sdpa_us and sdpa_backend (the
    fastest SDPA backend that ran), flex_us, and library_us and library_op (the fastest of
    the other ops)."""
    out = {}
    timed = {k: v["us"] for k, v in library.items() if isinstance(v.get("us"), (int, float))}
    sdpa = {k: v for k, v in timed.items() if k.startswith(SDPA)}
    if sdpa:
        best = min(sdpa, key=sdpa.get)
        out["sdpa_us"], out["sdpa_backend"] = sdpa[best], best[len(SDPA):]
    if FLEX in timed:
        out["flex_us"] = timed[FLEX]
    rest = {k: v for k, v in timed.items() if not k.startswith(SDPA) and k != FLEX}
    if rest:
        best = min(rest, key=rest.get)
        out["library_us"], out["library_op"] = rest[best], best
    return out


def compile_rewrote_to_sdpa(torch, first_call):
    """Whether Inductor rewrote the chain to scaled_dot_product_attention when compiling it,
    with first_call() the call that compiles it: its joint-graph pattern pass
    (torch/_inductor/fx_passes/fuse_attention.py) counts each rewrite in
    torch._dynamo.utils.counters["inductor"]["fuse_attention"] as it makes it. The caches are
    off for that call: a graph loaded from Inductor's FX graph cache (or AOTAutograd's) is not
    pattern-matched again, so it would count nothing."""
    from torch._dynamo.utils import counters

    before = counters["inductor"]["fuse_attention"]
    with torch._inductor.config.patch(force_disable_caches=True):
        first_call()
    return counters["inductor"]["fuse_attention"] > before


class Bench:
    def __init__(self, args, timing):
        import torch
        import triton
        from triton.testing import do_bench_cudagraph

        self.torch, self.triton = torch, triton
        self.do_bench_cudagraph = do_bench_cudagraph
        self.timing = timing  # the templates' fa_testing: gpu_time_us, wall_time_us, graph_replay
        self.args = args
        self.gemm_rates = {}

    def time(self, fn, graph):
        """Median, p20, p80 in microseconds: GPU time with L2 flushed before every call, or,
        with graph, do_bench_cudagraph's back-to-back calls (L2-warm)."""
        if graph:
            r = self.do_bench_cudagraph(fn, rep=self.args.rep, quantiles=list(self.timing.QUANTILES))
            return [v * 1e3 for v in r]
        return self.timing.gpu_time_us(fn, self.args.warmup, self.args.rep)

    def copy_bandwidth(self):
        """Device-to-device copy of 1 GiB: bytes read + written per second."""
        torch = self.torch
        n = 1 << 28
        x = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
        y = torch.empty_like(x)
        med, _, _ = self.time(lambda: y.copy_(x), graph=False)
        del x, y
        return 2 * n * 4 / (med * 1e-6)

    def copy_time(self, nbytes, graph):
        """Median time in microseconds of a device copy moving nbytes (read + write), timed
        like the providers; None when it fails."""
        torch = self.torch
        src = dst = replay = None
        try:
            # an elementwise kernel on the SMs (dst = src * 1), the path the fused kernels
            # take: copy_ of same-typed tensors is a memcpy, which inside a CUDA graph ran
            # at 2.7 TB/s for 1 GiB of traffic on the H200 (the same copy_ launched normally:
            # 4.24 TB/s), so it is no ceiling
            src = torch.empty(max(1, nbytes // 8), dtype=torch.float32, device="cuda").normal_()
            dst = torch.empty_like(src)
            fn = lambda: torch.mul(src, 1.0, out=dst)
            replay = None if graph else self.timing.graph_replay(fn)
            meds = sorted(self.time(replay or fn, graph)[0] for _ in range(max(1, self.args.repeats)))
            return meds[len(meds) // 2]
        except Exception as e:
            log(f"copy of {nbytes} bytes failed: {e}")
            return None
        finally:
            del src, dst, replay

    def gemm_rate(self, dtype):
        """FLOP/s of a large square GEMM in dtype (the ceiling for GEMM-bound chains)."""
        if dtype not in self.gemm_rates:
            torch = self.torch
            n = 8192
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            med, _, _ = self.time(lambda: a @ b, graph=False)
            self.gemm_rates[dtype] = 2 * n ** 3 / (med * 1e-6)
        return self.gemm_rates[dtype]

    def launches(self, fn):
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            fn()
            torch.cuda.synchronize()
        n = 0
        for e in p.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")):
                n += 1
        return n

    def configs(self, kernel):
        from triton.runtime.autotuner import Autotuner

        out = []
        for name in sorted(vars(kernel)):
            obj = getattr(kernel, name)
            if isinstance(obj, Autotuner) and getattr(obj, "best_config", None) is not None:
                out.append(f"{name}: {obj.best_config}")
        tiles = getattr(kernel, "tile_config", None)  # a template that times its own tiles (attention)
        if callable(tiles) and tiles():
            out.append(tiles())
        return "; ".join(out)

    def load_folder(self, folder):
        """The folder's modules (case, fa_testing, kernel, reference, adapter) and manifest."""
        sys.path.insert(0, str(folder))  # adapter.py imports fa_testing from its folder
        for m in ("fa_testing",):
            sys.modules.pop(m, None)
        mods = {name: load(folder, name) for name in ("case", "fa_testing", "kernel", "reference", "adapter")}
        manifest = {}
        if (folder / "manifest.json").exists():
            manifest = json.loads((folder / "manifest.json").read_text())
        return mods, manifest

    def run_folder(self, folder):
        """The folder's results: the forward's (mode "forward"), then, for a chain with a
        backward and the modes asked for (--modes), "backward" and "full" (run_training)."""
        torch = self.torch
        mods, manifest = self.load_folder(folder)
        case, fat, kernel, ref, adapter = (mods[n] for n in ("case", "fa_testing", "kernel", "reference", "adapter"))
        shapes, params = case.SHAPES, case.PARAMS
        dt = fat.DTYPES[case.DTYPE]
        res = {"pattern": case.PATTERN, "name": folder.name, "shape": shapes[0] if shapes else [],
               "shapes": shapes, "dtype": case.DTYPE, "mode": "forward", "correct": False}
        pred = manifest.get("est_fused_us")
        if isinstance(pred, (int, float)):
            res["predicted_us"] = pred

        try:
            fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, params, "cuda", 0)
            fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, params, "cuda", 1)
        except Exception as e:  # a wrong kernel is reported, never timed
            res["error"] = ("GPU check failed: " + str(e))[:2000]
            return [res]
        res["correct"] = True

        inputs = adapter.make_inputs(shapes, dt, params, "cuda", 0)
        fused, eager = timed_calls(adapter)
        providers = {
            "fused": lambda: fused(kernel, inputs, params),
            "eager": lambda: eager(ref, inputs, params),
        }
        torch._dynamo.reset()
        comp = torch.compile(lambda inp: eager(ref, inp, params))
        providers["compile"] = lambda: comp(inputs)
        if self.args.max_autotune:
            compm = torch.compile(lambda inp: eager(ref, inp, params),
                                  mode="max-autotune-no-cudagraphs")
            providers["compile_max"] = lambda: compm(inputs)
        if hasattr(adapter, "gemm_only"):
            providers["gemm_only"] = lambda: adapter.gemm_only(inputs, params)
        ops, refused = library_ops(adapter, inputs, params)
        for name, fn in ops.items():
            why = self.check_library_op(fat, ref, adapter, fn, shapes, dt, params)
            if why:
                refused[name] = why
            else:
                providers[LIB + name] = lambda fn=fn: call_op(fn, inputs)
        if ops or refused:
            res["library"] = {name: {"refused": why} for name, why in refused.items()}
        if case.PATTERN == "attention":
            try:
                t0 = time.time()  # the compile happens here, not in measure's warm-up
                res["compile_sdpa"] = compile_rewrote_to_sdpa(torch, providers["compile"])
                res["compile_compile_s"] = round(time.time() - t0, 2)
            except Exception as e:  # noqa: BLE001 -- measure records the compile's failure
                log(f"{folder.name}: compile (forward) failed: {e}")

        nbytes, flops = mode_work(adapter, shapes, dt, params, "forward")
        floor = self.floor_us(dt, nbytes, flops)
        self.measure(res, folder, providers, floor)
        if not res["correct"]:
            return [res]

        copy_us = self.copy_time(nbytes, res["cuda_graph"])
        if copy_us is not None:
            res["copy_us"] = copy_us

        res["bytes"] = nbytes
        if flops is not None:
            res["flops"] = flops
        res["floor_us"] = floor
        res["config"] = self.configs(kernel)
        out = [res]
        training = [m for m in ("backward", "full") if m in self.args.modes]
        if training and adapter.has_backward(params):
            refused = {k: v["refused"] for k, v in res.get("library", {}).items() if "refused" in v}
            out += self.run_training(folder, mods, training, refused)
        return out

    def check_library_op(self, fat, ref, adapter, fn, shapes, dt, params):
        """Why library op fn does not stand in for the case ("" when it does): it raises on
        its first call (an SDPA backend refusing the case: the message's first line), or its
        outputs differ from the reference's on fresh inputs (adapter.tolerance). With dropout
        (params "p" > 0) the outputs differ by construction (each provider draws its own
        mask): only that it runs is checked, and the op is timed for its cost alone."""
        torch = self.torch
        inputs = adapter.make_inputs(shapes, dt, params, "cuda", 1)
        try:
            got = call_op(fn, inputs)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            return first_line(e)
        if float(params.get("p", 0) or 0) > 0:
            return ""
        got = got if isinstance(got, (tuple, list)) else (got,)
        want = adapter.reference(ref, inputs, params)
        want = want if isinstance(want, (tuple, list)) else (want,)
        atol, rtol = adapter.tolerance(dt, shapes, params)
        try:
            for i, (g, w) in enumerate(zip(got, want)):
                fat.assert_close(g, w, atol, rtol, name=f"output {i}")
        except AssertionError as e:
            return "differs from the reference: " + first_line(e)
        return ""

    def floor_us(self, dt, nbytes, flops=None):
        """The fewest bytes a mode must move over the copy bandwidth, or its FLOPs (None for a
        memory-bound chain) over the GEMM rate in dt, whichever is larger, in microseconds:
        mode_work's figures, the same for every mode."""
        floor = nbytes / self.copy_bw * 1e6
        if flops is not None:
            floor = max(floor, flops / self.gemm_rate(dt) * 1e6)
        return floor

    def measure(self, res, folder, providers, floor):
        """Times providers (name -> zero-argument call) into res: each one's warm-up call (a
        provider that fails is dropped, its error kept), GPU time per repeat (flushed graph
        replays, or back to back in one graph for microsecond-scale cases), per-call wall and
        host time, and the peak memory of one call."""
        torch = self.torch
        for name, fn in list(providers.items()):
            try:
                t0 = time.time()
                fn()
                torch.cuda.synchronize()
                if name.startswith("compile"):
                    res.setdefault(f"{name}_compile_s", round(time.time() - t0, 2))  # compiled before: kept
            except Exception as e:
                log(f"{folder.name}: {name} ({res['mode']}) failed: {e}")
                if name.startswith(LIB):  # e.g. an SDPA backend refusing the case
                    res.setdefault("library", {})[name[len(LIB):]] = {"refused": first_line(e)}
                else:
                    res[f"{name}_error"] = str(e)[:500]
                del providers[name]
        if "fused" not in providers:
            res["correct"] = False
            res["error"] = "the fused provider failed: " + res.get("fused_error", "")
            return

        # Microsecond-scale cases are timed back to back in one CUDA graph (do_bench_cudagraph):
        # a call of a few microseconds timed alone between two events is mostly the events'
        # and the launch's own overhead. Their per-call wall time is measured as for all.
        med0 = self.time(providers["fused"], graph=False)[0]
        graph = med0 < self.args.graph_below_us or floor < self.args.graph_below_us
        res["cuda_graph"] = graph
        timed, timing, graphed = {}, {}, {}
        for name, fn in providers.items():
            capture = getattr(fn, "capturable", True)  # see TrainingCall.capturable
            graphed[name] = graph and capture
            replay = self.timing.graph_replay(fn) if capture and not graph else None
            timed[name] = replay or fn
            timing[name] = "cudagraph" if graphed[name] else ("graph-replay" if replay else "call")
        res["timing"] = timing
        runs = {name: [] for name in providers}
        walls = {name: [] for name in providers}
        names, rounds, unwalled = list(providers), max(1, self.args.wall_rounds), set()
        for rep in range(self.args.repeats):
            for name, fn in timed.items():
                try:
                    runs[name].append(self.time(fn, graphed[name]))
                except Exception as e:  # e.g. a provider that cannot be captured in a graph
                    log(f"{folder.name}: timing {name} (graph={graph}) failed: {e}; timing the plain call")
                    timing[name] = "call"
                    runs[name].append(self.time(providers[name], False))
            # Per call, as an eager model calls it (the plain call, no graph), in rounds of
            # shorter loops with the providers interleaved and their order turned each round:
            # the host's speed drifts by tens of percent over seconds, and timing one provider
            # after the other would hand that drift to whichever ran in the slow second.
            for r in range(rounds):
                k = (rep * rounds + r) % len(names)
                for name in names[k:] + names[:k]:
                    if name in unwalled:
                        continue
                    try:
                        walls[name].append(self.wall_time_us(providers[name], self.args.wall_ms / rounds))
                    except Exception as e:
                        log(f"{folder.name}: per-call timing of {name} failed: {e}")
                        unwalled.add(name)
        for name in providers:
            fields = provider_fields(name, runs[name], walls[name])
            peak = self.peak_bytes(providers[name]) if name in MAIN or name.startswith(LIB) else None
            if name.startswith(LIB):
                entry = library_entry(fields, name)
                entry["timing"] = timing.pop(name)
                if peak is not None:
                    entry["peak_bytes"] = peak
                res.setdefault("library", {})[name[len(LIB):]] = entry
                continue
            res.update(fields)
            if peak is not None:
                res[f"{name}_peak_bytes"] = peak
        if res.get("library"):
            res.update(library_summary(res["library"]))
        calls = {name: w[-1]["calls"] for name, w in walls.items() if w and not name.startswith(LIB)}
        if calls:
            res["wall_calls"] = calls
        if res.get("mode", "forward") != "forward" and self.args.step_copies > 1:
            res["wall_copies"] = self.args.step_copies

    def wall_time_us(self, fn, wall_ms):
        """Per-call wall and host time of provider fn over a loop of about wall_ms
        (timing.wall_time_us): a training mode's (a TrainingCall) as a chain's share of a step,
        --step-copies chains in one grad call (StepCall), so that the autograd engine's cost
        per grad call counts once a step."""
        k = self.args.step_copies
        if isinstance(fn, TrainingCall) and k > 1:
            step = StepCall(self.torch, fn.fwd, fn.inputs, fn.names, fn.mode, k)
            return step_wall_time_us(self.timing, step, k, wall_ms)
        return self.timing.wall_time_us(fn, wall_ms)

    def peak_bytes(self, fn):
        """Bytes allocated at the peak of one call of fn beyond what was allocated before it
        (its outputs, temporaries and, in training, saved activations and gradients); None
        when it cannot be measured."""
        torch = self.torch
        try:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            out = fn()
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() - base
            del out
            return int(peak)
        except Exception as e:  # noqa: BLE001
            log(f"peak memory: {e}")
            return None

    def run_training(self, folder, mods, modes, forward_refused=None):
        """The folder's "backward" and/or "full" results: the fused chain as a training step
        calls it (adapter.train: the autograd.Function) against the eager chain and
        torch.compile of it (AOTAutograd), each on its own leaves (adapter.GRAD_INPUTS with
        requires_grad) with the same upstream gradients. backward: torch.autograd.grad from one
        forward's saved state (retain_graph); full: forward then backward. Gradients are checked
        on the GPU first (fa_testing.run_grad_case); a wrong one is reported, never timed.
        Library ops (adapter.library_ops) are timed beside them through autograd, as the eager
        chain is, except those forward_refused names (name -> reason: refused in the forward),
        which are recorded as refused with the same reason; an op without a derivative raises
        on its first call and is recorded as refused with that message."""
        torch = self.torch
        case, fat, kernel, ref, adapter = (mods[n] for n in ("case", "fa_testing", "kernel", "reference", "adapter"))
        shapes, params = case.SHAPES, case.PARAMS
        dt = fat.DTYPES[case.DTYPE]
        base = {"pattern": case.PATTERN, "name": folder.name, "shape": shapes[0] if shapes else [],
                "shapes": shapes, "dtype": case.DTYPE, "correct": False}
        out = [dict(base, mode=m) for m in modes]
        if not hasattr(adapter, "train"):
            for r in out:
                r["error"] = "no training entry point (adapter.train) in this folder"
            return out
        try:
            fat.run_grad_case(kernel, ref, adapter, shapes, case.DTYPE, params, "cuda", 0)
        except Exception as e:  # a wrong gradient is reported, never timed
            for r in out:
                r["error"] = ("GPU gradient check failed: " + str(e))[:2000]
                r["config"] = self.configs(kernel)  # the tiles that gave it
            return out
        inputs = adapter.make_inputs(shapes, dt, params, "cuda", 0)
        names = [n for n in adapter.GRAD_INPUTS if isinstance(inputs.get(n), torch.Tensor)]
        _, eager = timed_calls(adapter)
        torch._dynamo.reset()
        comp = torch.compile(lambda inp: eager(ref, inp, params))
        forwards = {
            "fused": lambda inp: adapter.train(kernel, inp, params),
            "eager": lambda inp: eager(ref, inp, params),
            "compile": comp,
        }
        # library ops train through autograd like the eager chain; the forward checked them
        ops, refused = library_ops(adapter, inputs, params)
        for name, fn in ops.items():
            if name in (forward_refused or {}):  # the forward's check refused it: not timed here either
                refused[name] = forward_refused[name]
            else:
                forwards[LIB + name] = lambda inp, fn=fn: call_op(fn, inp)
        rewrote = None
        if case.PATTERN == "attention":  # the training graph (joint forward and backward) is its own compile
            try:
                rewrote = compile_rewrote_to_sdpa(torch, lambda: training_call(torch, comp, inputs, names, "full")())
            except Exception as e:  # noqa: BLE001 -- the providers below record the failure
                log(f"{folder.name}: compile (training) failed: {e}")
        forward_floor = self.floor_us(dt, *mode_work(adapter, shapes, dt, params, "forward"))
        for r in out:
            # the mode's own floor (bytes and FLOPs of the backward, or of forward and backward),
            # recorded and deciding the timing method as the forward's does; an adapter without
            # bwd_nbytes records none, and the forward's floor decides
            work = mode_work(adapter, shapes, dt, params, r["mode"])
            floor = forward_floor if work is None else self.floor_us(dt, *work)
            # the backward mode calls one forward's backward again and again (retain_graph),
            # which a compiled backward that donates its saved buffers refuses: compile it
            # without (for this mode only; the donation lets the backward reuse saved
            # activations' memory, so compile's peak here may read higher than in training)
            def donate(mode=r["mode"]):
                return torch._functorch.config.patch(donated_buffer=False) if mode == "backward" else contextlib.nullcontext()

            if r["mode"] == "backward" or r is not out[0]:  # each mode its own compile: the full
                torch._dynamo.reset()                        # mode's with donated buffers, as a training step
                forwards["compile"] = torch.compile(lambda inp: eager(ref, inp, params))
            providers = {}
            if ops or refused:
                r["library"] = {name: {"refused": why} for name, why in refused.items()}
            if rewrote is not None:
                r["compile_sdpa"] = rewrote
            for name, fwd in forwards.items():
                try:
                    with donate():
                        providers[name] = training_call(torch, fwd, inputs, names, r["mode"])
                    if name.startswith(LIB) and r["mode"] == "backward" and float(params.get("p", 0) or 0) > 0:
                        providers[name].capturable = False  # timed as the plain call: see TrainingCall
                except Exception as e:
                    log(f"{folder.name}: {name} ({r['mode']}) failed: {e}")
                    if name.startswith(LIB):
                        r["library"][name[len(LIB):]] = {"refused": first_line(e)}
                    else:
                        r[f"{name}_error"] = str(e)[:500]
            r["correct"] = True
            if "fused" in providers:
                with donate():
                    self.measure(r, folder, providers, floor)
                if work is not None and r["correct"]:
                    r["bytes"], r["floor_us"] = work[0], floor
                    if work[1] is not None:
                        r["flops"] = work[1]
                    copy_us = self.copy_time(work[0], r["cuda_graph"])  # the mode's bytes, as the forward's
                    if copy_us is not None:
                        r["copy_us"] = copy_us
                r["config"] = self.configs(kernel)
            else:
                r["correct"] = False
                r["error"] = "the fused provider failed: " + r.get("fused_error", "")
        return out

    def count_launches(self, folder):
        """The kernel launches of one call of the fused and the eager provider of a folder
        that run_folder timed, counted with torch.profiler, as the line bench.Parse merges
        into that folder's result. Called after every folder is timed: once a profiler
        session has run, every later launch in the process costs ~5 us more host time
        (bench/experiments/probe_host_state.py), which would inflate later per-call figures."""
        case, fat = load(folder, "case"), load(folder, "fa_testing")
        kernel, ref, adapter = load(folder, "kernel"), load(folder, "reference"), load(folder, "adapter")
        params = case.PARAMS
        inputs = adapter.make_inputs(case.SHAPES, fat.DTYPES[case.DTYPE], params, "cuda", 0)
        fused, eager = timed_calls(adapter)
        return {"launch_counts": folder.name,
                "launches": self.launches(lambda: fused(kernel, inputs, params)),
                "eager_launches": self.launches(lambda: eager(ref, inputs, params))}


def timed_calls(adapter):
    """(fused, eager): the calls bench times as the model makes them. An adapter's fused_drawn
    and eager where it has them (a generic chain with a training dropout: the fused call with
    its keep mask drawn in the call, as the README tells the caller to, and the eager chain
    with its dropout drawing its own), else its fused and reference, whose checks apply one
    mask to both."""
    return getattr(adapter, "fused_drawn", adapter.fused), getattr(adapter, "eager", adapter.reference)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--max-autotune", action="store_true",
                    help='also time torch.compile(mode="max-autotune-no-cudagraphs")')
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=25.0)
    ap.add_argument("--rep", type=float, default=100.0)
    ap.add_argument("--graph-below-us", type=float, default=30.0)
    ap.add_argument("--wall-ms", type=float, default=20.0,
                    help="per-call timing a repeat: this long in loops of back-to-back plain calls")
    ap.add_argument("--wall-rounds", type=int, default=5,
                    help="per-call timing a repeat in this many loops of --wall-ms/N each, the "
                         "providers interleaved (host drift lands on all of them alike)")
    ap.add_argument("--step-copies", type=int, default=8,
                    help="training modes' per-call figures: this many chains in one grad call, over it "
                         "(the autograd engine's cost per grad call counted once a step); 1: each chain alone")
    ap.add_argument("--modes", default="forward",
                    help="comma-separated: forward (always), backward, full (chains with a backward)")
    args = ap.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in ("forward", "backward", "full")]
    if bad:
        ap.error(f"--modes: unknown mode(s) {bad}: forward, backward, full")

    if os.environ.get("TRITON_INTERPRET") == "1":
        emit({"error": "TRITON_INTERPRET=1 is set: bench needs the compiled kernels on a GPU"})
        return 2
    import torch
    import triton

    if not torch.cuda.is_available():
        emit({"error": "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"})
        return 2
    tp = timing_path()
    if tp is None:  # no JSON line: this is no GPU problem
        log("harness: no fa_testing.py beside harness.py nor in ../templates/_common: nothing to time with")
        return 2
    timing = load_path(tp)
    b = Bench(args, timing)
    b.copy_bw = b.copy_bandwidth()
    emit({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
          "copy_tbps": b.copy_bw / 1e12, "flush_bytes": timing.FLUSH_BYTES})
    timed = []
    for d in args.dirs:
        folder = pathlib.Path(d).resolve()
        t0 = time.time()
        try:
            results = b.run_folder(folder)
        except Exception as e:
            traceback.print_exc()
            results = [{"name": folder.name, "mode": "forward", "correct": False, "error": f"harness error: {e}"[:2000]}]
        log(f"{folder.name}: {time.time() - t0:.1f} s")
        for res in results:
            emit({k: (finite(v) if isinstance(v, float) else v) for k, v in res.items()})
        if results[0].get("correct"):
            timed.append(folder)
    for folder in timed:  # the profiler last (count_launches)
        try:
            emit(b.count_launches(folder))
        except Exception as e:
            log(f"{folder.name}: counting launches failed: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
