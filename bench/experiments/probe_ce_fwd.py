"""Probe: which forward serves cross_entropy's log-sum-exp best (GPU).

On the H200 (docs/benchmarks/h200.md, 2026-12-05) the template's forward ran at 1.19x its
floor at Llama-3's vocabulary (8192 x 128256 bf16: 32 chunks of 4096 a row) but 1.76-2.09x
at 4096 rows of 8192 and of 30522 and 1.89x at 8192 x 50257. Its loop does two block-wide
reductions (max, then the sum of exponentials) a chunk, each a round of shuffles and a
barrier across the program's 8 warps, and a row's fixed work (the target's logit, two
stores) is spread over fewer chunks at the short rows. This probe times the alternatives:

  current        the template: _ce_fwd, _plan's chunk and warps (4096, 8)
  block=B warps=W  the template's kernel at other chunks and warps (2048/4, 4096/16, 8192/16)
  lanes=B        a running max and sum per lane (one exp more an element: the rescale), both
                 reduced once a row (the Triton softmax tutorial's online form), chunk B
  eager, compile the reference chain (logits.float(), F.cross_entropy) and torch.compile of it,
                 for scale (--compile)

Each case times the forward's first kernel alone (the per-row log-sum-exp and loss; the
mean's one-program sum is the same for every variant), captured in a CUDA graph and replayed
by fa_testing.gpu_time_us, the harness's method: L2 flushed before each replay without dirty
lines, CUDA events around the replay, median and p20/p80. Every variant's log-sum-exp is
checked against torch.logsumexp of the fp32 logits (max abs difference in the table).

Output: a table on stdout (case, variant, median, p20, p80 in us, x the floor: the logits
read once and 16 bytes a row over the measured copy bandwidth, the lse's max difference);
with --json one JSON object per row.

Usage, from the repository root:
  python bench/experiments/probe_ce_fwd.py [--only SUBSTRING] [--compile] [--json]
  TRITON_INTERPRET=1 python bench/experiments/probe_ce_fwd.py --smoke
--smoke runs every variant at tiny shapes on the CPU under the Triton interpreter (their
results checked, nothing timed).
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "templates" / "_common"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import fa_testing as fat  # noqa: E402

kernel = fat.load_sibling(str(ROOT / "templates" / "cross_entropy" / "kernel.py"), "kernel")
ref = fat.load_sibling(str(ROOT / "templates" / "cross_entropy" / "kernel.py"), "reference")

# (rows, classes): the measured cases (BERT's and GPT-2's traces, the anchors)
CASES = [(4096, 8192), (2048, 8192), (4096, 30522), (8192, 50257), (8192, 128256)]
SMOKE = [(5, 300), (3, 1000), (7, 129)]


@triton.jit
def _ce_fwd_lanes(X, T, LOSS, LSE, V, sxm, sxv, st, ignore_index, BLOCK_V: tl.constexpr):
    """The template's _ce_fwd with a running max and sum per lane, reduced once a row."""
    row = tl.program_id(0).to(tl.int64)
    X += row * sxm
    offs = tl.arange(0, BLOCK_V).to(tl.int64)
    m = tl.full([BLOCK_V], float("-inf"), tl.float32)
    s = tl.full([BLOCK_V], 0.0, tl.float32)
    start = 0
    while start < V:
        cols = start + offs
        x = tl.load(X + cols * sxv, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
        start += BLOCK_V
    mx = tl.max(m, axis=0)
    sh = tl.where(mx == float("-inf"), 0.0, mx)
    lse = mx + tl.log(tl.sum(s * tl.exp(m - sh), axis=0))
    t = tl.load(T + row * st)
    ignored = t == ignore_index
    inside = (t >= 0) & (t < V)
    xt = tl.load(X + t.to(tl.int64) * sxv, mask=inside & (t != ignore_index), other=0.0).to(tl.float32)
    loss = tl.where(ignored, 0.0, tl.where(inside, lse - xt, float("nan")))
    tl.store(LOSS + row, loss)
    tl.store(LSE + row, lse)


def copy_bandwidth():
    """A device-to-device copy of 1 GiB, bytes read + written per second (the harness's)."""
    n = 1 << 28
    x = torch.empty(n, dtype=torch.float32, device="cuda").normal_()
    y = torch.empty_like(x)
    med, _, _ = fat.gpu_time_us(lambda: y.copy_(x))
    return 2 * n * 4 / (med * 1e-6)


def variants(V, smoke):
    """name -> (kernel, BLOCK_V, warps, extra constexprs)."""
    block, warps = kernel._plan(V, kernel.MAX_BLOCK_V)
    out = {"current": (kernel._ce_fwd, block, warps, {"SMOOTH": False})}
    sizes = [(64, 1), (128, 4)] if smoke else [(2048, 4), (4096, 16), (8192, 16)]
    for b, w in sizes:
        out[f"block={b} warps={w}"] = (kernel._ce_fwd, b, w, {"SMOOTH": False})
    for b, w in ([(64, 1)] if smoke else [(1024, 4), (2048, 8), (4096, 16)]):
        out[f"lanes={b} warps={w}"] = (_ce_fwd_lanes, b, w, {})
    return out


def call(k, block, warps, extra, x, t, loss, lse):
    M, V = x.shape
    args = (x, t, loss, lse, V, x.stride(0), x.stride(1), t.stride(0), -100)
    if k is kernel._ce_fwd:
        args = args + (0.0,)
    k[(M,)](*args, num_warps=warps, **extra, BLOCK_V=block)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    copy_bw = None
    if not args.smoke:
        fat.require_cuda("probe_ce_fwd")
        copy_bw = copy_bandwidth()
    rows = []
    for M, V in SMOKE if args.smoke else CASES:
        name = f"{M}x{V} bf16"
        if args.only not in name:
            continue
        g = fat.gen(0)
        x = fat.randn([M, V], torch.bfloat16, device, g, std=3.0)
        t = torch.randint(0, V, (M,), generator=g).to(device)
        t[::5] = -100
        want = torch.logsumexp(x.float(), 1)
        floor = (2 * M * V + 16 * M) / copy_bw * 1e6 if copy_bw else None
        for vname, (k, block, warps, extra) in variants(V, args.smoke).items():
            loss = torch.empty(M, dtype=torch.float32, device=device)
            lse = torch.empty(M, dtype=torch.float32, device=device)
            fn = lambda: call(k, block, warps, extra, x, t, loss, lse)  # noqa: E731
            fn()
            err = (lse - want).abs().max().item()
            row = {"case": name, "variant": vname, "lse_max_diff": err}
            if not args.smoke:
                replay = fat.graph_replay(fn)
                med, p20, p80 = fat.gpu_time_us(replay or fn)
                row.update(median_us=med, p20_us=p20, p80_us=p80, x_floor=med / floor if floor else None)
            rows.append(row)
        if not args.smoke:
            for pname, f in [("eager", lambda: ref.cross_entropy(x, t))] + (
                    [("compile", torch.compile(lambda: ref.cross_entropy(x, t)))] if args.compile else []):
                f()
                med, p20, p80 = fat.gpu_time_us(fat.graph_replay(f) or f)
                rows.append({"case": name, "variant": pname, "median_us": med, "p20_us": p20, "p80_us": p80,
                             "x_floor": med / floor if floor else None})
    for r in rows:
        if args.json:
            print(json.dumps(r))
        else:
            print(f"{r['case']:18s} {r['variant']:22s} " + " ".join(
                f"{k}={v:.4g}" for k, v in r.items() if isinstance(v, float)))
    bad = [r for r in rows if r.get("lse_max_diff", 0) > 1e-3]
    if bad:
        print(f"probe_ce_fwd: {len(bad)} variant(s) off torch.logsumexp: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
