"""Recording helpers shared by record_models.py and record_corpus.py.

record() profiles a few steps of a workload the way the shared H200 traces were recorded
(../shared/traces/h200/README.md): torch.profiler with CPU and CUDA activities,
record_shapes=True, with_stack=False, and a PyTorch execution trace (ExecutionTraceObserver)
beside it, then trims both to what fuseadvise reads and gzips them (record_trim.py). Each step is wrapped in record_function("ProfilerStep#N") so that
the trace carries its step spans: without a schedule, profile.step() records none (and drops
the events of earlier cycles unless acc_events is set).

time_steps() measures a step outside the profiler: CUDA events around each call on a GPU
(perf_counter on the CPU), after warm-up calls, median of the timed ones.
"""

import os
import statistics
import sys
import time

import torch
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_trim  # noqa: E402


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def record(step, steps, out_dir, name, device):
    """Profiles `steps` calls of step() into OUT_DIR/NAME.json.gz (Kineto) and
    OUT_DIR/NAME.et.json.gz (execution trace), both trimmed (record_trim.trim_file); returns
    their sizes for the manifest (raw_bytes: the profiler's JSON before trimming)."""
    os.makedirs(out_dir, exist_ok=True)
    trace = os.path.join(out_dir, name + ".json")
    et_path = os.path.join(out_dir, name + ".et.json")
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    et = ExecutionTraceObserver().register_callback(et_path)
    sync(device)
    try:
        with profile(
            activities=activities,
            record_shapes=True,
            with_stack=False,
            execution_trace_observer=et,
            acc_events=True,
        ) as prof:
            for i in range(steps):
                with record_function(f"ProfilerStep#{i}"):
                    step()
            sync(device)
    finally:
        et.unregister_callback()
    prof.export_chrome_trace(trace)
    raw = os.path.getsize(trace)
    trace_gz, et_gz = trace + ".gz", et_path + ".gz"
    for path, gz in ((trace, trace_gz), (et_path, et_gz)):
        record_trim.trim_file(path, gz)
        os.remove(path)
    return {
        "file": os.path.basename(trace_gz),
        "et_file": os.path.basename(et_gz),
        "raw_bytes": raw,
        "gz_bytes": os.path.getsize(trace_gz),
        "et_gz_bytes": os.path.getsize(et_gz),
        "steps": steps,
        "with_stack": False,
    }


def time_steps(step, device, warmup, iters):
    """Median, min and max milliseconds of one step() over `iters` timed calls after `warmup`
    untimed ones (CUDA events on a GPU, each call synchronized; perf_counter on the CPU)."""
    for _ in range(warmup):
        step()
    sync(device)
    ms = []
    for _ in range(iters):
        if device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            ms.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t0) * 1e3)
    return {
        "median_ms": round(statistics.median(ms), 4),
        "min_ms": round(min(ms), 4),
        "max_ms": round(max(ms), 4),
        "iters": iters,
        "warmup": warmup,
    }


def environment(device):
    """The versions and device a manifest records."""
    env = {"torch": torch.__version__, "device": device.type}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        pass
    return env


def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)
