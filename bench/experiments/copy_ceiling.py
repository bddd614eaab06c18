"""Re-measure the copy ceiling (``copy_us``) of every case of a benchmark result.

``copy_us`` is a plain elementwise copy moving a case's bytes (read + write): ``dst = src *
1`` over float32, an SM kernel like the fused ones, timed like the providers (captured in a
CUDA graph and replayed under ``fa_testing.gpu_time_us``, L2 emptied of dirty lines before
every call, or with ``do_bench_cudagraph`` for the microsecond-scale cases). Copies timed
under ``triton.testing.do_bench``, whose ``cache.zero_()`` flush leaves dirty lines that are
written back inside the timed call, read 6 us slow on the H200 for 128 MiB (38.9 against
32.9 us). The first H200 runs used ``dst.copy_(src)`` over uint8, a memcpy, which inside a
CUDA graph ran at 2.7 TB/s for 1 GiB of traffic (the same copy launched normally: 4.24
TB/s): no ceiling. This script re-times a recorded result's bytes the current way.

Usage: python3 copy_ceiling.py IN.json OUT.json   (needs CUDA)
"""

import json
import pathlib
import sys

import torch
from triton.testing import do_bench_cudagraph

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "templates" / "_common"))
from fa_testing import QUANTILES, gpu_time_us, graph_replay  # noqa: E402  (the harness's timing)


def copy_us(nbytes, graph, repeats=2):
    src = torch.empty(max(1, nbytes // 8), dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    fn = lambda: torch.mul(src, 1.0, out=dst)  # noqa: E731
    meds = []
    for _ in range(repeats):
        if graph:
            meds.append(do_bench_cudagraph(fn, rep=100, quantiles=list(QUANTILES))[0] * 1e3)
        else:
            meds.append(gpu_time_us(graph_replay(fn) or fn, 25, 100)[0])
    return sorted(meds)[len(meds) // 2]


def main():
    r = json.load(open(sys.argv[1]))
    for c in r["cases"]:
        if c.get("bytes", 0) > 0 and c.get("correct"):
            c["copy_us"] = copy_us(int(c["bytes"]), bool(c.get("cuda_graph")))
            print(f"{c['name']}: {c['copy_us']:.1f} us (fused {c.get('fused_us', 0):.1f})", file=sys.stderr, flush=True)
    json.dump(r, open(sys.argv[2], "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
