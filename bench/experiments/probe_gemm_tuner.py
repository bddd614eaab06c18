"""Probe: does a GEMM folder's tuner keep the tile bench finds fastest? (GPU-only)

A kernel with a GEMM (linear_gelu, layernorm_linear, a generic chain with a GEMM head) times
its candidates once per bucket of M (templates/_common/shared.py, _gemm_tile) and keeps the
fastest, the library path (cuBLAS, then one pass) among them. bench times the kept one by a
CUDA-graph replay, L2 flushed without dirty lines (fa_testing.gpu_time_us). Until 2026-12-03
the tuner timed with triton's do_bench (L2 zeroed before each call, the call itself timed),
and a generic chain's forward kept a Triton tile at 15.5 µs where its library form ran 12.7
(docs/benchmarks/h200-generic-gemm-2026-12-03.json); it now times a graph replay
(_gemm_time_ms). This probe makes the folder's first call
(the tuner's choice), then forces every candidate in turn and times each both ways:

  do_bench  triton.testing.do_bench(gemm_fused), as the tuner did until 2026-12-03 (median)
  tuner     the tuner's timer now (_gemm_time_ms: a CUDA-graph replay after an L2 read sweep)
  bench     fa_testing.gpu_time_us of the call's CUDA-graph replay, median µs

Then (-kernels) the forward's kernels under torch.profiler, 10 calls after a warm-up, mean
device µs a call: gemm_fused with the library path forced, against gemm_cublas (the same
cuBLAS call and pointwise kernel, which bench times as the library op `cublas_pointwise`
and which ran 4.5 µs faster on 2026-12-03, unexplained), and torch.compile of the traced chain
(cuBLAS and one Inductor kernel).

Usage: python3 bench/experiments/probe_gemm_tuner.py [-kernels] FOLDER...  (generic GEMM folders)
"""
import importlib.util
import pathlib
import sys

import torch
import triton

import probekit  # beside this file


def load(folder, name):
    spec = importlib.util.spec_from_file_location(f"_t_{abs(hash(str(folder)))}_{name}", folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    args = sys.argv[1:]
    show_kernels = "-kernels" in args
    for arg in [a for a in args if a != "-kernels"]:
        folder = pathlib.Path(arg).resolve()
        sys.path.insert(0, str(folder))
        fat = load(folder, "fa_testing")
        case = load(folder, "case")
        kernel = load(folder, "kernel")
        adapter = load(folder, "adapter")
        dt = fat.DTYPES[case.DTYPE]
        inputs = adapter.make_inputs(case.SHAPES, dt, case.PARAMS, "cuda", 0)

        def call():
            return adapter.fused(kernel, inputs, case.PARAMS)

        call()
        torch.cuda.synchronize()
        keys = list(kernel._GEMM_TUNED)
        if len(keys) != 1:
            print(f"{folder.name}: {len(keys)} tuned buckets, want 1")
            continue
        key = keys[0]
        kept = kernel._GEMM_TUNED[key]
        kernel._GEMM_EAGER.pop(key, None)  # each candidate is forced through _GEMM_TUNED below
        m = 1
        for d in case.SHAPES[1][:-1]:
            m *= d
        bucket = 16 if m <= 16 else 1 << (m - 1).bit_length()
        k = case.SHAPES[1][-1]
        cands = kernel._gemm_candidates(bucket, k, torch.empty((), dtype=fat.DTYPES[case.GEMM["dtype"]]).element_size())
        cands = cands + [kernel.GEMM_LIBRARY]
        print(f"{folder.name}: M={m} bucket={bucket} kept {kept}")
        for t in cands:
            kernel._GEMM_TUNED[key] = t
            try:
                old = triton.testing.do_bench(call, warmup=5, rep=20, return_mode="median") * 1e3
                tuner = kernel._gemm_time_ms(call) * 1e3
                replay = fat.graph_replay(call)
                gpu = fat.gpu_time_us(replay)[0] if replay is not None else float("nan")
            except Exception as e:  # noqa: BLE001 - a tile that does not compile here
                print(f"  {str(t):28s} failed: {type(e).__name__}")
                continue
            mark = " <- kept" if t == kept else ""
            print(f"  {str(t):28s} do_bench {old:7.1f} µs  tuner {tuner:7.1f} µs  bench {gpu:7.1f} µs{mark}")
        if show_kernels:
            kernel._GEMM_TUNED[key] = kernel.GEMM_LIBRARY
            xs = [inputs[n] for n in adapter.NAMES]
            if not case.GEMM["bias"]:
                xs.insert(2, None)
            ref = load(folder, "reference")
            compiled = torch.compile(ref.chain)
            gemm_args = [t for t in xs[:3] if t is not None]
            for label, fn in (("gemm_fused (library path)", lambda: kernel.gemm_fused(*xs)),
                              ("gemm_cublas", lambda: kernel.gemm_cublas(*xs)),
                              ("torch.compile", lambda: compiled(*gemm_args, *xs[3:]))):
                us = probekit.device_times(fn)
                print(f"  {label}: {sum(us.values()):.1f} µs in {len(us)} kernels")
                for name, t in us.most_common():
                    print(f"    {t:7.1f}  {name[:100]}")
        kernel._GEMM_TUNED[key] = kept
        sys.path.remove(str(folder))


if __name__ == "__main__":
    main()
