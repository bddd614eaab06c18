"""Probe: dropout_add's backward with the bias gradient (GPU): which tiles and how many
programs serve it best.

dropout_add's backward in training (templates/dropout_add, DropoutAddFunction.backward with
the Linear's bias, `gemm_bias`) writes dz = dy * keep / (1 - p) and sums dz's columns into
fp32 partial sums in the same pass, then adds the partial sums up (`_part_sums`): two
launches. On an H100 (docs/benchmarks/h200.md, "dropout_add with the Linear's bias") it took
12.2 µs at BERT's 4096x768 bf16 (its floor 6.2, torch.compile 9.8) but 9.2 at 4096x1024 (floor
8.3). The knobs: _TILE_BYTES (the pointwise tile's bytes: BLOCK_M x BLOCK_N) and DB_PROGRAMS
(about how many programs share the rows, so the partial sums are DB_PROGRAMS / column blocks
rows of fp32).

For each case, the template's backward as it is ("current") and each knob setting, timed as
bench times a backward (CUDA-graph replay, L2 flushed, median/p20/p80 µs), checked against
eager's gradients (dz and the bias gradient), and torch.compile of eager's backward with
--compile. Prints a table, or JSON lines with --json.

Usage, from the repository root:
  python bench/experiments/probe_dropout_add_bwd.py [--only CASE] [--compile] [--json]
  python bench/experiments/probe_dropout_add_bwd.py --smoke     (interpreter, tiny shapes)
"""

import probekit as pk  # noqa: I001  (sets TRITON_INTERPRET for --smoke before triton loads)

import torch  # noqa: E402

CASES = [  # (label, M, N): BERT's and GPT-2's hidden, the encoder's, mlp_blocks', a larger M
    ("4096x768", 4096, 768),
    ("4096x1024", 4096, 1024),
    ("4096x2048", 4096, 2048),
    ("16384x768", 16384, 768),
    ("4096x3072", 4096, 3072),
]
SMOKE = [("8x96", 8, 96), ("16x40", 16, 40)]
TILE_BYTES = [4096, 8192, 16384]
DB_PROGRAMS = [128, 256, 512, 1024, 2048]


class Ctx:
    """What DropoutAddFunction.forward leaves on ctx, for calling its backward directly."""

    def __init__(self, p, seed, dtype):
        self.p, self.seed, self.drop, self.has_bias = p, seed, True, True
        self.dtypes = (dtype, dtype, dtype)
        self.needs_input_grad = (True, True, True)
        self.saved_tensors = ()


def main():
    args = pk.arguments(__doc__)
    dev = "cpu" if args.smoke else "cuda"
    kmod = pk.load_template("dropout_add", "kernel")
    cases = SMOKE if args.smoke else CASES
    timer = pk.wall_timer if args.smoke else pk.gpu_timer
    table = pk.Table(args.json, variant_width=22)
    table.header()
    p, seed = 0.1, 1234
    base_tile, base_progs = kmod._TILE_BYTES, kmod.DB_PROGRAMS
    backward = kmod.DropoutAddFunction.backward
    for label, M, N in cases:
        if args.only and args.only not in label:
            continue
        dt = torch.bfloat16
        dy = torch.randn(M, N, device=dev, dtype=dt)
        keep = kmod.dropout_mask((M, N), p, seed, dev)
        want_dz = (dy.float() * keep / (1 - p)).to(dt)
        want = (want_dz, want_dz.float().sum(0).to(dt))
        ctx = Ctx(p, seed, dt)
        variants = [("current", base_tile, base_progs)]
        if not args.smoke:
            variants += [(f"tile={t} programs={g}", t, g) for t in TILE_BYTES for g in DB_PROGRAMS
                         if (t, g) != (base_tile, base_progs)]
        for name, tile, progs in variants:
            kmod._TILE_BYTES, kmod.DB_PROGRAMS = tile, progs
            kmod._tiles.cache_clear()  # _tiles is cached: the tile knob would not reach it
            try:
                got = backward(ctx, dy)
                diff = pk.max_diff([got[0], got[2]], want)
                bm, bn, warps = kmod._tiles(N, 2, 8)
                tiles_n = -(-N // bn)
                rows = -(-M // max(1, progs // tiles_n))
                rows = -(-rows // bm) * bm
                cfg = f"{bm}x{bn} tiles, {-(-M // rows) * tiles_n} programs of {rows} rows"
                table.row(label, name, timer(lambda: backward(ctx, dy)), cfg, diff, pk.wrong(diff, want, 1e-2))
            except Exception as e:  # a variant that fails is a row, not the end of the probe
                table.error(label, name, e)
        kmod._TILE_BYTES, kmod.DB_PROGRAMS = base_tile, base_progs
        kmod._tiles.cache_clear()
        if getattr(args, "compile", False) and not args.smoke:
            def eager(dy, keep):
                dz = (dy.float() * keep / (1 - p)).to(dt)
                return dz, dz.float().sum(0).to(dt)

            comp = torch.compile(eager)
            got = comp(dy, keep)
            diff = pk.max_diff(got, want)
            table.row(label, "compile", timer(lambda: comp(dy, keep)), "", diff, pk.wrong(diff, want, 1e-2))
            table.row(label, "eager", timer(lambda: eager(dy, keep)), "", 0.0)


if __name__ == "__main__":
    main()
