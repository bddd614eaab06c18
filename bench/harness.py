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
3. Timing: each provider is captured once in a CUDA graph (after its warm-up call) and the
   graph's replay is timed with ``triton.testing.do_bench(replay, warmup, rep,
   quantiles=[0.5, 0.2, 0.8])``, which flushes L2 before every call: GPU time only. Timing
   the Python call itself measured the host instead whenever a provider's per-call CPU time
   (argument checks, allocations, the autotuner's dispatch) exceeded the GPU time of the L2
   flush plus the kernels — the GPU then idles between do_bench's start event and the
   kernel. A provider that cannot be captured is timed as a plain call (``timing`` says
   which). Repeated ``--repeats`` times with the providers interleaved; the reported median is
   the median of the repeats' medians and the spread their min..max. When the fused kernel
   takes under ``--graph-below-us`` (or its floor does), every provider is timed with
   ``do_bench_cudagraph`` instead (many back-to-back calls in one graph, no flush: the
   steady state of a decode loop).
4. Floor: the fewest bytes the chain must move (adapter.nbytes) over the measured copy
   bandwidth, or its FLOPs over the measured GEMM rate, whichever is larger.
5. Copy ceiling: an elementwise copy on the SMs (``dst = src * 1`` over fp32; a ``copy_`` is
   a memcpy, slower inside a CUDA graph) moving the same bytes,
   timed like the providers (``copy_us``, the median). The floor assumes the bandwidth of a
   1 GiB copy, which smaller working sets never reach; the copy's time is what the memory
   system delivers at this size. Omitted when it fails (out of memory).
6. Launches: kernels launched by one call of each provider, counted with torch.profiler.
7. The autotuner's chosen config for each autotuned Triton kernel in kernel.py.

Usage: python harness.py [--max-autotune] [--repeats N] [--rep MS] [--warmup MS] DIR...
"""

import argparse
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
    tag = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    modname = f"_fab_{tag}_{name}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


class Bench:
    def __init__(self, args):
        import torch
        import triton
        from triton.testing import do_bench, do_bench_cudagraph

        self.torch, self.triton = torch, triton
        self.do_bench, self.do_bench_cudagraph = do_bench, do_bench_cudagraph
        self.args = args
        self.gemm_rates = {}

    def time(self, fn, graph):
        """Median, p20, p80 in microseconds."""
        q = [0.5, 0.2, 0.8]
        if graph:
            r = self.do_bench_cudagraph(fn, rep=self.args.rep, quantiles=q)
        else:
            r = self.do_bench(fn, warmup=self.args.warmup, rep=self.args.rep, quantiles=q)
        return [v * 1e3 for v in r]

    def copy_bandwidth(self):
        """Device-to-device copy of 1 GiB: bytes read + written per second."""
        torch = self.torch
        n = 1 << 28
        x = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
        y = torch.empty_like(x)
        med, _, _ = self.time(lambda: y.copy_(x), graph=False)
        del x, y
        return 2 * n * 4 / (med * 1e-6)

    def copy_time(self, nbytes, graph, fat):
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
            replay = None if graph else fat.graph_replay(fn)
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
        return "; ".join(out)

    def run_folder(self, folder):
        torch = self.torch
        sys.path.insert(0, str(folder))  # adapter.py imports fa_testing from its folder
        for m in ("fa_testing",):
            sys.modules.pop(m, None)
        case = load(folder, "case")
        fat = load(folder, "fa_testing")
        kernel = load(folder, "kernel")
        ref = load(folder, "reference")
        adapter = load(folder, "adapter")
        manifest = {}
        if (folder / "manifest.json").exists():
            manifest = json.loads((folder / "manifest.json").read_text())
        shapes, params = case.SHAPES, case.PARAMS
        dt = fat.DTYPES[case.DTYPE]
        res = {"pattern": case.PATTERN, "name": folder.name, "shape": shapes[0] if shapes else [],
               "shapes": shapes, "dtype": case.DTYPE, "correct": False}
        pred = manifest.get("est_fused_us")
        if isinstance(pred, (int, float)):
            res["predicted_us"] = pred

        try:
            fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, params, "cuda", 0)
            fat.run_case(kernel, ref, adapter, shapes, case.DTYPE, params, "cuda", 1)
        except Exception as e:  # a wrong kernel is reported, never timed
            res["error"] = ("GPU check failed: " + str(e))[:2000]
            return res
        res["correct"] = True

        inputs = adapter.make_inputs(shapes, dt, params, "cuda", 0)
        providers = {
            "fused": lambda: adapter.fused(kernel, inputs, params),
            "eager": lambda: adapter.reference(ref, inputs, params),
        }
        torch._dynamo.reset()
        comp = torch.compile(lambda inp: adapter.reference(ref, inp, params))
        providers["compile"] = lambda: comp(inputs)
        if self.args.max_autotune:
            compm = torch.compile(lambda inp: adapter.reference(ref, inp, params),
                                  mode="max-autotune-no-cudagraphs")
            providers["compile_max"] = lambda: compm(inputs)
        if hasattr(adapter, "gemm_only"):
            providers["gemm_only"] = lambda: adapter.gemm_only(inputs, params)

        for name, fn in list(providers.items()):
            try:
                t0 = time.time()
                fn()
                torch.cuda.synchronize()
                if name.startswith("compile"):
                    res[f"{name}_compile_s"] = round(time.time() - t0, 2)
            except Exception as e:
                log(f"{folder.name}: {name} failed: {e}")
                res[f"{name}_error"] = str(e)[:500]
                del providers[name]

        # Microsecond-scale cases are timed as CUDA-graph replays: do_bench alone would time
        # the host's launch overhead of whichever provider has the most Python per call.
        nbytes = int(adapter.nbytes(shapes, dt, params))
        med0 = self.time(providers["fused"], graph=False)[0]
        graph = med0 < self.args.graph_below_us or nbytes / self.copy_bw * 1e6 < self.args.graph_below_us
        res["cuda_graph"] = graph
        timed, timing = {}, {}
        for name, fn in providers.items():
            replay = None if graph else fat.graph_replay(fn)
            timed[name] = replay or fn
            timing[name] = "cudagraph" if graph else ("graph-replay" if replay else "call")
        res["timing"] = timing
        runs = {name: [] for name in providers}
        for _ in range(self.args.repeats):
            for name, fn in timed.items():
                try:
                    runs[name].append(self.time(fn, graph))
                except Exception as e:  # e.g. a provider that cannot be captured in a graph
                    log(f"{folder.name}: timing {name} (graph={graph}) failed: {e}; plain do_bench")
                    timing[name] = "call"
                    runs[name].append(self.time(providers[name], False))
        for name, rs in runs.items():
            meds = sorted(r[0] for r in rs)
            med = meds[len(meds) // 2]
            mid = min(rs, key=lambda r: abs(r[0] - med))
            key = {"compile_max": "compile_max_autotune", "gemm_only": "gemm_only"}.get(name, name)
            res[f"{key}_us"] = med
            if name in ("fused", "eager", "compile"):
                res[f"{key}_p20_us"] = mid[1]
                res[f"{key}_p80_us"] = mid[2]
                res[f"{key}_spread_us"] = [meds[0], meds[-1]]

        copy_us = self.copy_time(nbytes, graph, fat)
        if copy_us is not None:
            res["copy_us"] = copy_us

        res["bytes"] = nbytes
        floor = nbytes / self.copy_bw * 1e6
        if hasattr(adapter, "flops"):
            flops = float(adapter.flops(shapes, dt, params))
            res["flops"] = flops
            floor = max(floor, flops / self.gemm_rate(dt) * 1e6)
        res["floor_us"] = floor
        res["launches"] = self.launches(providers["fused"])
        res["eager_launches"] = self.launches(providers["eager"])
        res["config"] = self.configs(kernel)
        return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--max-autotune", action="store_true",
                    help='also time torch.compile(mode="max-autotune-no-cudagraphs")')
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=25.0)
    ap.add_argument("--rep", type=float, default=100.0)
    ap.add_argument("--graph-below-us", type=float, default=30.0)
    args = ap.parse_args()

    if os.environ.get("TRITON_INTERPRET") == "1":
        emit({"error": "TRITON_INTERPRET=1 is set: bench needs the compiled kernels on a GPU"})
        return 2
    import torch
    import triton

    if not torch.cuda.is_available():
        emit({"error": "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"})
        return 2
    b = Bench(args)
    b.copy_bw = b.copy_bandwidth()
    emit({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
          "copy_tbps": b.copy_bw / 1e12})
    for d in args.dirs:
        folder = pathlib.Path(d).resolve()
        t0 = time.time()
        try:
            res = b.run_folder(folder)
        except Exception as e:
            traceback.print_exc()
            res = {"name": folder.name, "correct": False, "error": f"harness error: {e}"[:2000]}
        res = {k: (finite(v) if isinstance(v, float) else v) for k, v in res.items()}
        log(f"{folder.name}: {time.time() - t0:.1f} s")
        emit(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
