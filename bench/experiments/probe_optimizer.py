"""What an Adam/AdamW step costs as foreach, as fused=True and as torch.compile of the step,
for the parameter lists that traces recorded (GPU probe; prints JSON lines).

fuseadvise's optimizer finding ("use fused=True") predicts the fused step's GPU time as 7/4
of the traced step's addcdiv update at a measured pace (patterns/optimizer.go). This probe
measures the fused step against the foreach step the profiled traces ran, on the parameter
tensors one step updates (an execution trace's lists with --et, an analysis's "optimizers"
entries, or --case).
Per case it builds the parameters (torch.randn in the case's dtype, nn.Parameter on cuda)
and one gradient each (randn * 1e-2), with lr=1e-3, weight_decay=0.01 for AdamW and 0 for
Adam, default betas and eps, and runs three variants, each on its own parameters made from
the same seed:

  foreach   torch.optim.AdamW(params, foreach=True): the multi-tensor kernels
  fused     fused=True: one _fused_adamw_ kernel per chunk of tensors
  compile   the foreach optimizer with torch.compile(opt.step) (the PyTorch recipe
            "Compiling the optimizer"); compile_s is the wall time of its first 5 steps,
            the compilation included (unless --no-compile)

and measures for each:

  correct   5 steps from the same parameters and gradients; max |p - p_foreach| /
            max |p_foreach| over all tensors, which fails the case ("ok": false, the
            reasons in "why") above 1e-5 for fp32 and 2e-2 for bf16/fp16, as do parameters
            that are no longer finite (nonfinite_<variant>: pure-fp16 foreach Adam divides
            by zero where exp_avg_sq underflows, eps=1e-8 being 0 in fp16; fused computes in
            fp32 and does not)
  GPU time  after 3 warm-up steps (optimizer state made), 30 steps timed one by one with
            CUDA events around opt.step() only, each after an L2 flush that writes one
            256 MiB buffer and then reads another (fa_testing.L2Flush: no dirty lines left
            whose write-back would land in the timed step); median, p20, p80 in us. The
            window holds the step's launches too: where the host launches slower than the
            GPU runs (many small tensors) it is the host's pace
  wall      20 back-to-back opt.step() calls, one synchronize at the end, over 20: the
            step as an eager training loop pays it (no flush)
  kernels   the CUDA kernels of one step under torch.profiler (no flush), their GPU time
            added up (kernel_us_<variant>: the GPU busy time a trace shows for the step,
            without the gaps where the GPU waits for the host, which the event window above
            holds where many small tensors make the step host-paced), and for foreach the
            GPU time of its _foreach_addcdiv_ kernels (addcdiv_us): the analysis estimates
            the fused step's GPU time as 7/4 of that update's (rule_fused_us, from this run's
            addcdiv)

and a copy ceiling: the bytes the fused step must move (7 x element size x parameters:
param, grad, exp_avg and exp_avg_sq read, param, exp_avg and exp_avg_sq written) moved by an
elementwise copy (torch.mul(src, 1.0, out=dst) over fp32, an SM kernel like the fused step:
see copy_ceiling.py for why not a memcpy), timed the same way; fused_us / copy_us is how far
the fused step is from the memory bound.

Cases run smallest first, so that --budget (default 500 s) drops the biggest: once the
elapsed time passes it no case starts and no compile variant starts, and the skipped ones
are named on stderr (a compile under way runs on: 52 s for 172 fp32 tensors). One JSON
object per case goes to stdout (and to --out, as JSONL); the header (GPU, clocks, torch and
triton versions) and progress go to stderr.

--dry-run tests the plumbing on the CPU: tiny timings by perf_counter, no flush, no kernel
count, no compile. Without it and without CUDA the probe says so and exits 2.

Measured on the H200 (2026-12-02, one run of ad-hoc --case shapes, median us per step):
AdamW bf16 2048x8192*4,2048*10 (67M params, 940 MB moved): foreach 979 (32 kernels), fused
361 (5), compile 314 (2; 6 s to compile), copy 221. AdamW fp32 768x768*48,768*100,3072x768*24
(172 tensors, 85M params): foreach 3898 (42 kernels), fused 692 (9), compile 1800 (13; 52 s),
copy 559. Adam fp16 1024x1024*4: foreach 363 with 1.7M of 4.2M parameters inf after 5 steps,
fused 142 and compile 210 finite.

Usage: python3 bench/experiments/probe_optimizer.py [--case NAME:DTYPE:SHAPES]... [--optimizer CLASS]
           [--et FILE]... [--out FILE] [--budget SECONDS] [--no-compile] [--dry-run] [ANALYSIS.json ...]
  --et FILE      an execution trace (.et.json.gz): its first Adam/AdamW step's parameters,
                 from the lists its _foreach_addcdiv_ updates took (Kineto records the
                 shapes of short lists only)
  ANALYSIS.json  the output of `fuseadvise analyze -format json TRACE` (its "optimizers")
  SHAPES         a step's parameters, e.g. 2048x8192*4,2048*10 (dims x-separated, *count;
                 "()" is a 0-d tensor); NAME is a label, or Adam / AdamW to pick the class
                 (else --optimizer's, AdamW by default)
"""
import argparse
import json
import math
import pathlib
import re
import sys
import time
import warnings

import probekit  # the paths to templates/_common: fa_testing's flush, quantiles and dtypes

import torch

fat = probekit.fat

WARMUP, TIMED, WALL, CHECK = 3, 30, 20, 5  # steps: warm-up, timed one by one, back to back, checked
DRY = {"WARMUP": 1, "TIMED": 3, "WALL": 3}  # --dry-run's step counts
TOL = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2}  # max relative difference from foreach
CLASSES = {"adamw": "AdamW", "adam": "Adam"}
VARIANTS = ("foreach", "fused", "compile")
SEED = 0


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# Cases. A case is one optimizer step to reproduce: the class, the dtype and the parameter
# shapes, with the analysis's figures carried through to the output.

def parse_shapes(spec):
    """'2048x8192*4,2048*10' -> [((2048, 8192), 4), ((2048,), 10)]."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        dims, _, count = item.partition("*")
        dims = dims.strip()
        shape = () if dims in ("()", "") else tuple(int(d) for d in dims.split("x"))
        n = int(count) if count else 1
        if n < 1 or any(d < 0 for d in shape):
            raise ValueError(f"bad shape {item!r}")
        out.append((shape, n))
    return out


def make_case(source, label, optimizer, dtype, shapes, finding=None):
    """A case's record (the JSON fields it starts with) from its parts."""
    numel = sum(math.prod(s) * n for s, n in shapes)
    size = fat.DTYPES[dtype].itemsize
    case = {"source": source, "case": label, "optimizer": optimizer, "dtype": dtype,
            "tensors": sum(n for _, n in shapes), "params": numel, "bytes": 7 * size * numel}
    f = finding or {}
    steps = f.get("steps") or 0
    case["impl"] = f.get("impl")
    for key, field in (("predicted_fused_us_per_step", "est_fused_us"), ("traced_us_per_step", "gpu_time_us")):
        v = f.get(field)
        case[key] = round(v / steps, 2) if isinstance(v, (int, float)) and steps > 0 else None
    case["_shapes"] = shapes  # not printed
    return case


def cli_case(spec, default_class):
    if spec.count(":") != 2:
        raise ValueError(f"--case {spec}: not NAME:DTYPE:SHAPES")
    name, dtype, shapes = spec.split(":")
    if dtype not in fat.DTYPES:
        raise ValueError(f"--case {spec}: dtype {dtype!r} is not one of {', '.join(fat.DTYPES)}")
    return make_case("cli", name, CLASSES.get(name.lower(), default_class), dtype, parse_shapes(shapes))


def analysis_cases(path):
    """The Adam/AdamW steps of one analysis file; the others are named on stderr."""
    with open(path) as f:
        report = json.load(f)
    source = (report.get("trace") or {}).get("path") or path
    cases = []
    for i, f in enumerate(report.get("optimizers") or []):
        label = f"{f.get('optimizer')}#{i}"
        why = None
        cls = CLASSES.get(str(f.get("optimizer", "")).lower())
        if cls is None:
            why = f"optimizer {f.get('optimizer')!r} is not Adam or AdamW"
        elif f.get("dtype") not in fat.DTYPES:
            why = f"dtype {f.get('dtype')!r} is not one of {', '.join(fat.DTYPES)}"
        elif not f.get("param_shapes"):
            why = "no param_shapes"
        if why:
            log(f"skip {path}: {label}: {why}")
            continue
        try:
            shapes = [(tuple(int(d) for d in s.get("dims") or ()), int(s.get("count", 1))) for s in f["param_shapes"]]
        except (TypeError, ValueError, AttributeError) as e:
            log(f"skip {path}: {label}: bad param_shapes ({e})")
            continue
        cases.append(make_case(source, label, cls, f["dtype"], shapes, f))
    return cases


def et_cases(path):
    """The first Adam/AdamW step of an execution trace (ExecutionTraceObserver's JSON,
    .json or .json.gz): the shapes and element type of the lists its _foreach_addcdiv_
    updates took (one per parameter group), which a Kineto trace records only for short
    lists."""
    import gzip
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        nodes = json.load(f)["nodes"]
    steps = sorted(n["id"] for n in nodes if n["name"].startswith("Optimizer.step#"))
    if not steps:
        log(f"skip {path}: no optimizer step")
        return []
    step = next(n for n in nodes if n["id"] == steps[0])
    cls = CLASSES.get(step["name"].removeprefix("Optimizer.step#").removesuffix(".step").lower())
    if cls is None:
        log(f"skip {path}: {step['name']} is not Adam or AdamW")
        return []
    end = steps[1] if len(steps) > 1 else float("inf")

    def under(i):  # the observer numbers nodes in the order they ran (no parent links kept)
        return steps[0] < i < end
    shapes, dtypes = [], set()
    for n in nodes:
        if n["name"] == "aten::_foreach_addcdiv_" and under(n["id"]):
            ins = n["inputs"]
            if "shapes" in ins:
                shapes += [tuple(s) for s in ins["shapes"][0]]
                dtypes |= set(re.findall(r"Tensor\(([^)]+)\)", ins["types"][0]))
            else:  # a trace kept without shapes and types (the repository's test data): each
                # tensor's [id, storage, offset, numel, itemsize, device]; a step's cost depends on
                # the numels only, and 4-byte parameters are fp32
                shapes += [(v[3],) for v in ins["values"][0]]
                dtypes |= {"float" if v[4] == 4 else f"{v[4]}-byte" for v in ins["values"][0]}
    names = {"float": "fp32", "c10::BFloat16": "bf16", "c10::Half": "fp16"}
    if not shapes or len(dtypes) != 1 or next(iter(dtypes)) not in names:
        log(f"skip {path}: no _foreach_addcdiv_ of one known type in its first step ({sorted(dtypes)})")
        return []
    counts = {}
    for sh in shapes:
        counts[sh] = counts.get(sh, 0) + 1
    label = pathlib.Path(path).name.removesuffix(".gz").removesuffix(".json").removesuffix(".et")
    return [make_case(path, label, cls, names[next(iter(dtypes))], sorted(counts.items()))]


# The optimizer and its parameters. Every variant makes its own from the same seed, so all
# start from identical parameters and gradients without a copy of them kept aside.

def make_params(shapes, dtype, device):
    g = torch.Generator(device=device).manual_seed(SEED)
    params = []
    for shape, n in shapes:
        for _ in range(n):
            p = torch.nn.Parameter(torch.randn(shape, dtype=dtype, device=device, generator=g))
            p.grad = torch.randn(shape, dtype=dtype, device=device, generator=g) * 1e-2
            params.append(p)
    return params


def make_step(case, params, variant):
    """opt.step of the variant's optimizer over params (its compiled step for "compile")."""
    cls = getattr(torch.optim, case["optimizer"])
    impl = {"fused": True} if variant == "fused" else {"foreach": True}
    opt = cls(params, lr=1e-3, weight_decay=0.01 if case["optimizer"] == "AdamW" else 0.0, **impl)
    if variant == "compile":
        torch._dynamo.reset()  # a fresh cache: one code object recompiled per case would hit its limit
        return opt, torch.compile(opt.step)
    return opt, opt.step


# Timing: on the GPU (flush, events, synchronize) or, with --dry-run, on the CPU.

class Clock:
    def __init__(self, dry):
        self.dry = dry
        self.device = "cpu" if dry else "cuda"
        self.flush = None if dry else fat.L2Flush("cuda")
        n = DRY if dry else {}
        self.warmup, self.timed, self.wall = n.get("WARMUP", WARMUP), n.get("TIMED", TIMED), n.get("WALL", WALL)

    def sync(self):
        if not self.dry:
            torch.cuda.synchronize()

    def step_us(self, step):
        """[median, p20, p80] of self.timed calls of step, timed one by one (after an L2 flush
        and between CUDA events on the GPU, by perf_counter on the CPU)."""
        if self.dry:
            times = []
            for _ in range(self.timed):
                t0 = time.perf_counter()
                step()
                times.append((time.perf_counter() - t0) * 1e6)
            return [round(t, 1) for t in fat.quantiles(times)]
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.timed)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.timed)]
        self.sync()
        for s, e in zip(starts, ends):
            self.flush()
            s.record()
            step()
            e.record()
        self.sync()
        return [round(t, 1) for t in fat.quantiles([s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)])]

    def wall_us(self, step):
        """Per-call wall time of self.wall back-to-back calls, one synchronize at the end."""
        self.sync()
        t0 = time.perf_counter()
        for _ in range(self.wall):
            step()
        self.sync()
        return round((time.perf_counter() - t0) / self.wall * 1e6, 1)

    def kernels(self, step):
        """(CUDA kernels one call of step launches, their GPU time in us added up, the GPU
        time of the kernels its aten::_foreach_addcdiv_ ops launched (None when it has
        none)); Nones with --dry-run. Profiled without a flush."""
        if self.dry:
            return None, None, None
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        self.sync()
        with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle"
            warnings.simplefilter("ignore", UserWarning)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                step()
                self.sync()
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset"))]
        addcdiv = [e for e in prof.key_averages() if e.key == "aten::_foreach_addcdiv_"]
        us = round(sum(e.device_time_total for e in addcdiv), 1) if addcdiv else None
        return len(kernels), round(sum(e.device_time for e in kernels), 1), us

    def copy_us(self, nbytes):
        """The copy ceiling: nbytes moved (half read, half written) by an fp32 elementwise
        copy, timed as the steps are."""
        src = torch.randn(max(1, nbytes // 8), dtype=torch.float32, device=self.device)
        dst = torch.empty_like(src)

        def copy():
            torch.mul(src, 1.0, out=dst)
        for _ in range(self.warmup):
            copy()
        return self.step_us(copy)[0]


# One case: the variants one after another (only the foreach result kept between them),
# then the copy ceiling.

def max_rel_diff(got, want, scale):
    return probekit.max_diff(got, want) / (scale + 1e-30)


def run_variant(case, variant, clock, reference, row):
    dtype = fat.DTYPES[case["dtype"]]
    params = make_params(case["_shapes"], dtype, clock.device)
    opt, step = make_step(case, params, variant)
    clock.sync()
    t0 = time.perf_counter()
    for _ in range(CHECK):
        step()
    clock.sync()
    if variant == "compile":
        row["compile_s"] = round(time.perf_counter() - t0, 2)
    bad = sum(int((~torch.isfinite(p)).sum()) for p in params)
    row[f"nonfinite_{variant}"] = bad
    if bad:
        row["ok"] = False
        row.setdefault("why", []).append(f"{variant}: {bad} parameters not finite after {CHECK} steps")
    if variant == "foreach":
        reference["params"] = [p.detach().clone() for p in params]
        reference["scale"] = max(p.float().abs().max().item() for p in params)
    else:
        diff = max_rel_diff([p.detach() for p in params], reference["params"], reference["scale"])
        row[f"max_rel_diff_{variant}"] = float(f"{diff:.3g}") if math.isfinite(diff) else str(diff)
        if not diff <= TOL[case["dtype"]]:
            row["ok"] = False
            row.setdefault("why", []).append(f"{variant}: max relative difference {diff:.3g} over {TOL[case['dtype']]:g}")
    for _ in range(clock.warmup):
        step()
    med, p20, p80 = clock.step_us(step)
    row.update({f"{variant}_us": med, f"{variant}_p20": p20, f"{variant}_p80": p80})
    row[f"wall_{variant}_us"] = clock.wall_us(step)
    row[f"kernels_{variant}"], row[f"kernel_us_{variant}"], addcdiv = clock.kernels(step)
    if variant == "foreach":
        row["addcdiv_us"] = addcdiv
    del opt, step, params


def free(clock):
    import gc
    gc.collect()
    if not clock.dry:
        torch.cuda.empty_cache()


def run_case(case, clock, variants, over_budget):
    row = {k: v for k, v in case.items() if not k.startswith("_")}
    for v in VARIANTS:
        row.update({f"{v}_us": None, f"{v}_p20": None, f"{v}_p80": None, f"wall_{v}_us": None, f"kernels_{v}": None})
    row.update(compile_s=None, copy_us=None, addcdiv_us=None, max_rel_diff_fused=None, max_rel_diff_compile=None, ok=True)
    row.update({f"nonfinite_{v}": None for v in VARIANTS})
    reference = {}
    for v in variants:
        if v == "compile" and over_budget():
            log(f"  {case['case']}: compile skipped (budget)")
            row.setdefault("skipped", []).append("compile")
            continue
        log(f"  {case['case']}: {v}")
        try:
            run_variant(case, v, clock, reference, row)
        except Exception as e:  # noqa: BLE001 -- one variant's failure is reported, the rest run
            row["ok"] = False
            msg = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            row.setdefault("why", []).append(f"{v}: raised {msg}")
            log(f"  {case['case']}: {v} failed: {msg}")
            if v == "foreach":  # nothing to check the others against
                break
        finally:
            free(clock)
    reference.clear()
    free(clock)
    try:
        row["copy_us"] = clock.copy_us(case["bytes"])
    except Exception as e:  # noqa: BLE001
        row.setdefault("why", []).append(f"copy: raised {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    free(clock)
    if row["fused_us"] and row["copy_us"]:
        row["fused_over_copy"] = round(row["fused_us"] / row["copy_us"], 2)
    if row["addcdiv_us"]:  # the analysis's rule, on this run's own addcdiv (no flush: L2-warm if small)
        row["rule_fused_us"] = round(row["addcdiv_us"] * 7 / 4, 1)
    return row


def header(dry):
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "none"
    if dry:
        return f"device: cpu (--dry-run), torch {torch.__version__}, triton {tv}"
    p = torch.cuda.get_device_properties(0)
    clocks = []
    if getattr(p, "clock_rate", 0):
        clocks.append(f"SM max {p.clock_rate / 1e3:.0f} MHz")
    if getattr(p, "memory_clock_rate", 0):
        clocks.append(f"memory {p.memory_clock_rate / 1e3:.0f} MHz")
    try:
        clocks.append(f"SM now {torch.cuda.clock_rate()} MHz")
    except Exception:  # noqa: BLE001 -- needs pynvml; the clocks are a courtesy
        pass
    return (f"device: {p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
            + (f", {', '.join(clocks)}" if clocks else "")
            + f"; torch {torch.__version__}, CUDA {torch.version.cuda}, triton {tv}")


def main():
    t_start = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("analyses", nargs="*", help="fuseadvise analyze -format json outputs")
    ap.add_argument("--case", action="append", default=[], metavar="NAME:DTYPE:SHAPES",
                    help="an ad-hoc case, e.g. a:bf16:2048x8192*4,2048*10 (repeatable)")
    ap.add_argument("--et", action="append", default=[], metavar="FILE",
                    help="an execution trace: its first Adam/AdamW step's parameters (repeatable)")
    ap.add_argument("--optimizer", default="AdamW", choices=sorted(CLASSES.values()),
                    help="the class of --case cases whose NAME is not a class (default AdamW)")
    ap.add_argument("--out", help="also write the JSON lines to this file")
    ap.add_argument("--budget", type=float, default=500.0, help="seconds after which no case or compile starts")
    ap.add_argument("--no-compile", action="store_true", help="leave out the torch.compile variant")
    ap.add_argument("--dry-run", action="store_true", help="the plumbing on the CPU: tiny timings, no flush, kernel count or compile")
    a = ap.parse_args()

    if not a.dry_run and not torch.cuda.is_available():
        log("probe_optimizer: needs a CUDA GPU (torch.cuda.is_available() is False); --dry-run runs on the CPU")
        return 2
    cases = []
    try:
        for spec in a.case:
            cases.append(cli_case(spec, a.optimizer))
        for path in a.analyses:
            cases.extend(analysis_cases(path))
        for path in a.et:
            cases.extend(et_cases(path))
    except (ValueError, OSError, json.JSONDecodeError) as e:
        log(f"probe_optimizer: {e}")
        return 2
    if not cases:
        log("probe_optimizer: no case (give analysis files or --case)")
        return 2
    cases.sort(key=lambda c: (c["bytes"], c["tensors"]))

    log(header(a.dry_run))
    variants = [v for v in VARIANTS if not (v == "compile" and (a.no_compile or a.dry_run))]
    clock = Clock(a.dry_run)
    over_budget = lambda: time.monotonic() - t_start > a.budget  # noqa: E731
    out = open(a.out, "w") if a.out else None
    skipped = []
    for i, case in enumerate(cases):
        if over_budget():
            skipped = cases[i:]
            break
        log(f"[{i + 1}/{len(cases)}] {case['source']}: {case['case']} {case['optimizer']} {case['dtype']}: "
            f"{case['tensors']} tensors, {case['params']:,} params, {case['bytes'] / 2**20:.1f} MiB "
            f"({time.monotonic() - t_start:.0f} s)")
        row = run_case(case, clock, variants, over_budget)
        line = json.dumps(row)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
    if out:
        out.close()
    for c in skipped:
        log(f"skipped (budget {a.budget:.0f} s): {c['source']}: {c['case']} {c['dtype']}, {c['bytes'] / 2**20:.1f} MiB")
    log(f"done in {time.monotonic() - t_start:.0f} s: {len(cases) - len(skipped)} cases run, {len(skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
