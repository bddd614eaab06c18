"""The generic chains' host path: a call's plan is computed once per key and reused.

Runs the generated kernels of codegen's golden examples (codegen/testdata/golden/generic,
rewritten by ``go test ./codegen -run Generic -update``). The launches are recorded instead of
run where a test only looks at the host (``kernel._launch`` replaced, as the templates' tests
do), and run in the interpreter where the results are checked against the eager replay.

  cd templates && TRITON_INTERPRET=1 python -m pytest -q _generic/test_host.py
"""

import math
import os
import pathlib
import sys

import pytest
import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # generic_golden
from generic_golden import GOLDEN, load  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="runs the kernels in Triton's interpreter (TRITON_INTERPRET=1)")


_MODULES = {}


def module(example):
    """(kernel, reference, case) of a golden example, loaded once; the kernel's plans cleared."""
    if example not in _MODULES:
        _MODULES[example] = tuple(load(example, n) for n in ("kernel", "reference", "case"))
    mods = _MODULES[example]
    mods[0]._PLANS.clear()
    return mods


def inputs_for(case, main, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = []
    for _, dt, keep in case.INPUTS:
        off = len(main) - len(keep)
        shape = [main[off + j] if k else 1 for j, k in enumerate(keep)]
        if dt == "number":  # a Python number the caller passes
            xs.append(0.75)
        elif dt == "number_int64":
            xs.append(1)
        elif dt == "int64":
            xs.append(torch.randint(-8, 9, shape, generator=g))
        elif dt == "bool":
            xs.append(torch.rand(shape, generator=g) < 0.5)
        else:
            xs.append((torch.randn(shape, generator=g) * 0.5).to(DTYPES[dt]))
    return xs


class Recorder:
    """Stands in for kernel._launch: records (kernel, grid, args, constexprs), runs nothing."""

    def __init__(self):
        self.calls = []

    def __call__(self, kernel, grid, args, num_warps=4, num_stages=1, fp_fusion=True, **constexprs):
        self.calls.append((kernel, tuple(grid), args, dict(constexprs, num_warps=num_warps, num_stages=num_stages,
                                                           fp_fusion=fp_fusion)))


def python_calls(fn):
    """The Python and builtin calls fn() makes (sys.setprofile's call and c_call events)."""
    n = [0]

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            n[0] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n[0] - 1  # fn itself


def planned(kernel, monkeypatch):
    """Counts the plans kernel computes (its _fwd_plan and _bwd_plan calls)."""
    count = {"fwd": 0, "bwd": 0}
    for name, tag in (("_fwd_plan", "fwd"), ("_bwd_plan", "bwd")):
        real = getattr(kernel, name, None)
        if real is None:
            continue

        def counted(*a, _real=real, _tag=tag):
            count[_tag] += 1
            return _real(*a)

        monkeypatch.setattr(kernel, name, counted)
    return count


# example, main shape; the Python calls a second call with the same key may make (forward,
# backward): the lookup, the allocations, the launch and the partial sums. Measured 10-15 and
# 18-48; the path that planned every call made 64-240 and 156-460 (its launches stubbed:
# Triton's JITFunction.run not counted). A kernel's launch is its plan's _Planned.launch,
# which counts here as one call more (under the interpreter it hands over to _launch, the
# recorder; on a GPU it makes fewer calls than _launch did). Two more each since fused and
# fused_backward run inside _on_their_device (its wrapper and the first tensor's device; on a
# GPU also the current device and torch.compile's flag; 2026-12-04)
HOT = [
    # 6 inputs: per-channel, per-row, 0-dim, full; 61 since the bias' column sums are added up
    # by _part_sums (a launch through _launch) in place of a torch sum and a cast, 67 since
    # _part_sums takes two members' sums a launch (a transposed view, strides; 2026-12-03)
    ("broadcast_affine_tanh", [2, 6, 5, 7], 22, 69),
    ("clamp_mul_bias", [64, 96], 17, 32),  # a bias: per-program column sums
    # 58 since a per-row input's sums over leading dims are added up by _part_sums too (its
    # launch's Python calls in place of a torch sum over two dims; 2026-12-04)
    ("broadcast_mixed_sigmoid", [3, 4, 5, 8], 22, 62),
    ("gelu_dropout_residual", [4, 16, 32], 17, 27),  # a residual's gradient is the output's
    ("table_softmax", [3, 5, 70], 17, None),  # a row kernel, forward only
    # two numbers the caller passes (Python floats: _numbers looks their tensors up)
    ("abs_add_sqrt_div_number", [16, 40], 24, 27),  # measured 21 and 23
]


@pytest.mark.parametrize("example,main,fwd_budget,bwd_budget", HOT, ids=[h[0] for h in HOT])
def test_second_call_only_looks_up(example, main, fwd_budget, bwd_budget, monkeypatch):
    kernel, _, case = module(example)
    rec = Recorder()
    monkeypatch.setattr(kernel, "_launch", rec)
    count = planned(kernel, monkeypatch)
    xs = inputs_for(case, main)
    outs = kernel.fused(*xs)
    assert count["fwd"] == 1 and len(rec.calls) == 1
    # compiled without FMA contraction: each fp32 step rounded as eager's kernels round it
    assert rec.calls[0][3]["fp_fusion"] is False
    n = python_calls(lambda: kernel.fused(*xs))
    assert count["fwd"] == 1, "a second call with the same key planned again"
    assert len(rec.calls) == 2 and _same_launch(rec.calls[0], rec.calls[1])
    print(f"{example}: forward {n} Python calls", end="; ")
    assert n <= fwd_budget, f"the forward's hot path made {n} Python calls (budget {fwd_budget})"
    if bwd_budget is None:
        return
    douts = [torch.randn_like(o) if g else None for o, g in zip(outs, kernel.GRAD_OUTPUTS)]
    if hasattr(kernel, "_numbers"):  # the backward is given the saved tensors: the numbers' too
        xs = kernel._numbers(xs, 0, xs[0].device)
    kernel.fused_backward(xs, douts)
    first = rec.calls[2:]
    assert count["bwd"] == 1
    bwd = [c for c in first if c[0] is kernel._fused_bwd_kernel]
    assert bwd and all(c[3]["fp_fusion"] is False for c in bwd)
    n = python_calls(lambda: kernel.fused_backward(xs, douts))
    assert count["bwd"] == 1, "a second backward with the same key planned again"
    second = rec.calls[2 + len(first):]
    assert len(second) == len(first) and all(_same_launch(a, b) for a, b in zip(first, second))
    print(f"backward {n}")
    assert n <= bwd_budget, f"the backward's hot path made {n} Python calls (budget {bwd_budget})"


def _same_launch(a, b):
    """Two recorded launches with the same grid, constexprs and non-tensor arguments, and
    tensors of the same dtype, shape and strides in the same places."""
    if a[0] is not b[0] or a[1] != b[1] or a[3] != b[3] or len(a[2]) != len(b[2]):
        return False
    for x, y in zip(a[2], b[2]):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or (x.dtype, x.shape, x.stride()) != (y.dtype, y.shape, y.stride()):
                return False
        elif x != y:
            return False
    return True


# layouts of the same main shape that must not share a plan: transposed, the broadcast inputs
# given as expanded views of the main shape (stride 0), an offset view; each run in the
# interpreter after the others' plans
def _layouts(xs, main):
    yield "contiguous", xs
    yield "transposed", [x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 else x for x in xs]
    yield "expanded", [x.expand(main) for x in xs]
    yield "offset", [torch.cat([x.reshape(-1), x.reshape(-1)])[x.numel():].view(x.shape) for x in xs]


@pytest.mark.parametrize("example,main", [("broadcast_affine_tanh", [2, 6, 5, 7]), ("clamp_mul_bias", [64, 96]),
                                          ("table_softmax", [3, 5, 70])])
def test_layouts_get_their_own_plans(example, main):
    kernel, reference, case = module(example)
    base = inputs_for(case, main, seed=1)
    keys = set()
    for name, xs in _layouts(base, main):
        for _ in range(2):  # the second call takes the cached plan
            got = kernel.fused(*xs)
            want = reference.chain(*xs)
            want = want if isinstance(want, tuple) else (want,)
            for g, w in zip(got, want):
                torch.testing.assert_close(g.float(), w.float(), rtol=1e-4, atol=1e-4, msg=f"{name}")
        keys |= set(kernel._PLANS)
    # one plan per distinct (dtypes, shapes, strides): contiguous and offset share theirs
    assert len(keys) == len({kernel._key(xs) for _, xs in _layouts(base, main)}) >= 2


def test_backward_layouts_and_needs():
    """A cached backward plan is right for its key only: other strides, an expanded output
    gradient, a None one, other needs each get theirs, and each call's gradients match eager's."""
    kernel, reference, case = module("broadcast_affine_tanh")
    xs = inputs_for(case, [2, 3, 2, 5], seed=2)
    outs = kernel.fused(*xs)
    dys = [torch.randn_like(o) for o in outs]
    variants = [
        ("plain", xs, dys, None),
        ("expanded dy", xs, [dys[0], dys[1][:1].expand_as(dys[1])], None),
        ("None dy", xs, [dys[0], None], None),
        ("some needs", xs, dys, (True, False, True, False, True, False)),
        ("transposed", [x.transpose(-1, -2).contiguous().transpose(-1, -2) if x.dim() >= 2 else x for x in xs],
         dys, None),
    ]
    for name, ins, douts, needs in variants:
        for _ in range(2):
            got = kernel.fused_backward(ins, douts, needs)
            leaves = [x.detach().double().requires_grad_(True) for x in ins]
            ref = reference.chain(*leaves)
            ref = ref if isinstance(ref, tuple) else (ref,)
            pairs = [(r, d.double()) for r, d in zip(ref, douts) if d is not None]
            want = torch.autograd.grad([r for r, _ in pairs], leaves, [d for _, d in pairs], allow_unused=True)
            for i, (g, w) in enumerate(zip(got, want)):
                if needs is not None and not needs[i]:
                    assert g is None, name
                    continue
                w = torch.zeros_like(leaves[i]) if w is None else w
                torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4, msg=f"{name}: input {i}")


def test_an_unused_output_adds_nothing():
    """An output no loss reaches (autograd passes None for it: set_materialize_grads(False))
    adds no term to its inputs' gradients (DYMASK, _live): at x0 = 0, where table_fp32's
    log(|x0|) and 1 / |x0| have infinite derivatives, eager, which never visits those branches,
    gives y0's gradient alone; with zeros for the other outputs' gradients the kernel's sum
    was NaN there (0 * inf). Given as zeros, they count as eager counts them: NaN."""
    kernel, reference, case = module("table_fp32")
    xs = inputs_for(case, [4, 40], seed=3)
    xs[0].view(-1)[::7] = 0.0

    def leaves():
        return [x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) and x.is_floating_point()
                else x for x in xs]

    mine, theirs = leaves(), leaves()
    outs = kernel.fused_autograd(*mine)
    got, = torch.autograd.grad(outs[0], [mine[0]], torch.ones_like(outs[0]))
    ref = reference.chain(*theirs)
    want, = torch.autograd.grad(ref[0], [theirs[0]], torch.ones_like(ref[0]))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want)
    dys = [torch.ones_like(outs[0])] + [torch.zeros_like(o) if o.is_floating_point() else None for o in outs[1:]]
    zeros = kernel.fused_backward(xs, dys, (True, False, False))[0]
    assert torch.isnan(zeros[0, 0]) and torch.isfinite(zeros[0, 1])


def test_backward_reduction_kinds():
    """How a broadcast input's gradient is reduced, from its kept dims (_bwd_layout's rows
    and _bwd_kinds): a per-channel scale on NCHW runs channel-major and sums per program (2),
    a per-row scale sums per row (3: one-row blocks would mask most of a tile), a bias keeps
    per-program column sums (1), a 0-dim scale on a dense tensor sums per program over one flat
    row (2)."""
    kernel, _, _ = module("broadcast_affine_tanh")
    dense = [14 * 14 * 384, 14 * 14, 14, 1]
    cases = [  # main shape, the reduced input's strides and its kept dims, want rows, kind, block
        ([32, 384, 14, 14], [0, 1, 0, 0], [False, True, False, False], [[1], [0]], 2, 1),
        ([64, 96], [1, 0], [True, False], [[0]], 3, 1),
        ([64, 96], [0, 1], [False, True], [[0]], 1, 1),
        ([32, 384, 14, 14], [0, 0, 0, 0], [False] * 4, [], 2, 0),  # one flat row
    ]
    for shape, strides, keep, rows, kind, block in cases:
        full = dense[-len(shape):] if len(shape) == 4 else [shape[1], 1]
        got_rows, cols = kernel._bwd_layout(shape, [full, strides], [keep])
        assert got_rows == rows, (shape, keep)
        kinds, got_block = kernel._bwd_kinds(got_rows, cols, [keep])
        assert (kinds, got_block) == ([kind], block), (shape, keep)


GPU_TILING = {"_sms": lambda dev: 132, "BWD_TILE": 2048, "MIN_BLOCK_C": 128, "MIN_SPLIT_ROWS": 16,
              "PROGRAMS_PER_SM": 32, "MIN_COLSUM_BLOCK_C": 32, "MAX_WIDE_BLOCK_C": 256, "FLAT_TILE": 1024}


# main shape -> (FLAT, grid, BLOCK_R, BLOCK_C, ALIGN, the sum buffer's view and the dim summed)
PER_CHANNEL_PLANS = {
    # ConvNeXt's 14x14: rows of 196 (not 16-aligned) walked flat, a program a channel over its
    # 32 * 196 elements, runs of 4 declared contiguous; each program's sum is the gradient
    (32, 384, 14, 14): (True, (384,), 1, 1024, 4, [1, 384], None),
    # 7x7: rows of 49, no alignment to declare
    (32, 768, 7, 7): (True, (768,), 1, 1024, 1, [1, 768], None),
    # fewer channels than SMs: two programs a channel, their sums added on the host
    (64, 96, 14, 14): (True, (192,), 1, 1024, 4, [1, 96, 2], 2),
    # 16-aligned rows of 176: the 2D tile, its column block widened to 256 so one program a
    # channel needs no host sum (without the widening: two blocks of 128 and a host sum)
    (32, 384, 16, 11): (False, (384,), 8, 256, 16, [1, 384], None),
}


@pytest.mark.parametrize("main", list(PER_CHANNEL_PLANS), ids=lambda m: "x".join(map(str, m)))
def test_per_channel_gradient_plans(monkeypatch, main):
    """A per-channel scale's gradient (per-program sums alone, ConvNeXt's layer scale
    x0 * x1 + x2) takes the flat walk where its rows are not 16-aligned and the 2D tile where
    they are; either way a program a channel where the channels fill the device, so no host
    sum follows. The GPU's tiling constants; meta tensors, nothing runs."""
    kernel, _, case = module("layer_scale_residual")
    for k, v in GPU_TILING.items():
        monkeypatch.setattr(kernel, k, v)
    xs = [torch.empty(x.shape, dtype=x.dtype, device="meta") for x in inputs_for(case, list(main))]
    douts = [torch.empty(main, dtype=dt, device="meta") for dt in kernel.OUT_DTYPES]
    planned, stacks, fulls = kernel._bwd_plan(xs, douts, (True, True, True))[-1]
    grid, consts, warps = planned.grid[:1], planned.constexprs, planned.num_warps
    flat, want_grid, block_r, block_c, align, vshape, sdim = PER_CHANNEL_PLANS[main]
    assert (consts["FLAT"], grid, consts["BLOCK_R"], consts["BLOCK_C"]) == (flat, want_grid, block_r, block_c)
    assert consts["ALIGN"] == align and warps == (kernel.FLAT_WARPS if flat else kernel.BWD_WARPS)
    # a block is one channel's rows, N of them: one row dim inside it (0 without the walk)
    assert consts["NINNER"] == (1 if flat else 0)
    assert [consts[f"KIND{i}"] for i in range(3)] == [0, 2, 0]
    # contiguity declared for x0, x2, the output's gradient and x0's and x2's stored
    # gradients (bits 0, 2, 3, 4, 6), never for x1 (column stride 0) or its sum buffer
    assert consts["AMASK"] == (0b1011101 if flat and align > 1 else 0)
    (_, members, got_vshape, got_sdim, _), = stacks
    assert members == [1] and got_vshape == vshape and got_sdim == sdim
    assert [i for i, _, _ in fulls] == [0, 2]


@pytest.mark.parametrize("example,main", [("table_bf16", [3, 20]), ("broadcast_mixed_sigmoid", [3, 2, 5, 4]),
                                          ("gelu_dropout_residual", [2, 4, 16])])
def test_cached_plans_give_what_fresh_ones_do(example, main):
    """Every layout's results from a plan cached among the others' equal, bit for bit, those
    from a plan made for that call alone (16-bit and bool inputs, casts of the sums). The
    plans are made among the others by calls whose launches are recorded, not run (their
    results are the fresh ones' by construction: the same plan made the same way); then every
    layout runs from its cached plan."""
    kernel, _, case = module(example)
    base = inputs_for(case, main, seed=3)
    outs = kernel.fused(*base)
    g = torch.Generator().manual_seed(4)
    douts = [torch.randn(o.shape, generator=g).to(o.dtype) if gr else None for o, gr in zip(outs, kernel.GRAD_OUTPUTS)]
    layouts = list(_layouts(base, main))

    def run(xs):
        return list(kernel.fused(*xs)) + list(kernel.fused_backward(xs, douts))

    fresh = {}
    for name, xs in layouts:
        kernel._PLANS.clear()
        fresh[name] = run(xs)
    kernel._PLANS.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "_launch", Recorder())
        for name, xs in layouts:
            run(xs)
    assert len(kernel._PLANS) >= 2 * 2  # forward and backward plans of two keys at least
    for name, xs in layouts:
        for j, (a, b) in enumerate(zip(run(xs), fresh[name])):
            assert (a is None) == (b is None), f"{name}: result {j}"
            assert a is None or torch.equal(a, b), f"{name}: result {j}"


def test_gemm_plans(monkeypatch):
    """A GEMM head's checks and strides are planned once per key: operand layouts of one
    shape each get theirs, and every call's outputs equal, bit for bit, those of a plan made
    for it alone."""
    kernel, _, case = module("addmm_sigmoid_channel")
    g = torch.Generator().manual_seed(5)
    a = torch.randn(8, 16, generator=g)
    w = torch.randn(16, 12, generator=g) * 0.25
    bias = torch.randn(12, generator=g)
    xs = inputs_for(case, [8, 12])
    layouts = [("plain", a, w), ("w column-major", a, w.t().contiguous().t()),
               ("a offset", torch.cat([a.reshape(-1), a.reshape(-1)])[a.numel():].view(a.shape), w)]
    fresh = {}
    for name, aa, ww in layouts:
        kernel._PLANS.clear()
        fresh[name] = kernel.gemm_fused(aa, ww, bias, *xs)
    kernel._PLANS.clear()
    checks = [0]
    real = kernel._gemm_check

    def counted(*args):
        checks[0] += 1
        return real(*args)

    monkeypatch.setattr(kernel, "_gemm_check", counted)
    for _ in range(2):
        for name, aa, ww in layouts:
            for j, (x, y) in enumerate(zip(kernel.gemm_fused(aa, ww, bias, *xs), fresh[name])):
                assert torch.equal(x, y), f"{name}: output {j}"
    assert checks[0] == 2  # plain and offset share a key (same dtypes, shapes, strides)


def test_index_width_follows_the_strides(monkeypatch):
    """32- or 64-bit index math is part of the plan: inputs of one shape whose strides reach
    2**31 get 64-bit math, the same shape dense keeps 32-bit (meta tensors: no memory)."""
    kernel, _, case = module("clamp_mul_bias")
    rec = Recorder()
    monkeypatch.setattr(kernel, "_launch", rec)
    dense = [torch.empty(s.shape, dtype=s.dtype, device="meta") for s in inputs_for(case, [64, 96])]
    far = [torch.empty_strided(dense[0].shape, (2**31 // 63, 1), dtype=dense[0].dtype, device="meta")] + dense[1:]
    for xs, want in ((dense, False), (far, True), (dense, False)):
        kernel.fused(*xs)
        assert rec.calls[-1][3]["IDX64"] is want
    douts = [torch.empty(dense[0].shape, dtype=dt, device="meta") for dt in kernel.OUT_DTYPES]
    for xs, want in ((dense, False), (far, True), (dense, False)):
        kernel.fused_backward(xs, douts)
        assert rec.calls[-1][3]["IDX64"] is want


def test_magic_division_is_exact():
    """_magic's (multiplier, shift) divide every 32-bit index exactly as the kernel divides,
    umulhi(n, multiplier) >> shift == n // d, for sizes from 2 to 2**31 - 1 (powers of two,
    their neighbours, primes, the traced sizes) and indices at the edges of each quotient."""
    kernel, _, _ = module("broadcast_affine_tanh")
    sizes = {2, 3, 5, 7, 14, 49, 56, 196, 384, 3136, 32768, 65537, 1000003, 2**31 - 1}
    for k in range(1, 31):
        sizes |= {2**k - 1, 2**k, 2**k + 1}
    g = torch.Generator().manual_seed(7)
    for d in sorted(x for x in sizes if 1 < x < 2**31):
        m, s = kernel._magic(d)
        assert 0 < m < 2**32 and 0 <= s < 32, (d, m, s)
        ns = {0, 1, d - 1, d, d + 1, 2**31 - 1, (2**31 - 1) // d * d, (2**31 - 1) // d * d - 1}
        ns |= set(torch.randint(0, 2**31 - 1, (200,), generator=g).tolist())
        for n in ns:
            if 0 <= n < 2**31:
                assert ((n * m) >> 32) >> s == n // d, (d, n)
    assert kernel._magic(1) == (0, 0)


def test_forward_plan_index_math(monkeypatch):
    """The forward's plan marks inputs dense in the main shape (read at the flat offset) and an
    innermost size that is a multiple of 16 (% and //): a broadcast input is not dense, a
    transposed view is not, the same tensor contiguous is."""
    kernel, _, case = module("clamp_mul_bias")
    rec = Recorder()
    monkeypatch.setattr(kernel, "_launch", rec)
    xs = [torch.empty(s.shape, dtype=s.dtype, device="meta") for s in inputs_for(case, [64, 96])]
    kernel.fused(*xs)
    consts = rec.calls[-1][3]
    assert consts["DENSE0"] is True and consts["DENSE1"] is False  # x, the bias
    assert consts["INNER16"] is True  # 96
    # [64, 96] padded to the kernel's rank: the 64 rows are what is left of an index after the
    # division by 96, none by them
    assert consts["LEAD"] == kernel.RANK - 2
    kernel.fused(*[torch.empty(s.shape[:-1] + (90,) if s.dim() == 2 else (90,), dtype=s.dtype, device="meta")
                   for s in xs])
    assert rec.calls[-1][3]["INNER16"] is False  # 90
    t = torch.empty(96, 64, dtype=xs[0].dtype, device="meta").t()
    kernel.fused(t, *xs[1:])
    assert rec.calls[-1][3]["DENSE0"] is False  # a transposed view


def test_bad_inputs_are_never_cached():
    kernel, _, case = module("clamp_mul_bias")
    xs = inputs_for(case, [8, 16])
    for bad in ([xs[0], xs[1].double()], [xs[0], 1.0], [xs[0]], [xs[0], torch.randn(3, 5)]):
        with pytest.raises((TypeError, ValueError)):
            kernel.fused(*bad)
        with pytest.raises((TypeError, ValueError)):
            kernel.fused(*bad)  # the same error again: nothing was cached
    assert not kernel._PLANS


@pytest.mark.parametrize("example", ["linear_gelu_scale_residual", "addmm_sigmoid_channel", "bmm_tanh_clamp",
                                     "matmul_silu_scale"])
def test_gemm_library_path(monkeypatch, example):
    """gemm_fused's library path (GEMM_LIBRARY: the traced GEMM on cuBLAS into the GEMM output's
    buffer, then the program's pointwise kernel reading it: the first output's buffer, in place,
    where the call allocated it) gives the eager chain's outputs, as the epilogue-fused GEMM does, for each traced GEMM form; in training the stored GEMM
    output is the traced GEMM's, bit for bit, and the gradients agree with the tiles' path."""
    kernel, ref, case = module(example)
    g = torch.Generator().manual_seed(11)
    dt = DTYPES[case.DTYPE]
    main, xshape, wshape = case.SHAPES
    a = (torch.randn(xshape, generator=g) * 0.5).to(dt)
    w = (torch.randn(wshape, generator=g) * wshape[-2] ** -0.5).to(dt)
    bias = (torch.randn(main[-1], generator=g) * 0.5).to(dt) if case.GEMM["bias"] else None
    xs = inputs_for(case, main, seed=3)
    gemm_args = (a, w, bias) if bias is not None else (a, w)
    want = ref.chain(*gemm_args, *xs)
    tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dt]
    got = {}
    for path, tile in (("library", kernel.GEMM_LIBRARY), ("tiles", kernel.GEMM_INTERP_TILE)):
        monkeypatch.setattr(kernel, "_gemm_tile", lambda *args, t=tile, **kw: t)
        outs = kernel.gemm_fused(a, w, bias, *xs)
        for o, e in zip(outs, want):
            torch.testing.assert_close(o.float(), e.float(), atol=tol, rtol=tol)
        # the library path writes the GEMM's output into the first output it allocated
        # (GEMM_PRE_IN_OUT0), never into a caller's out=, which here is the residual it reads
        if example == "linear_gelu_scale_residual":
            assert kernel.GEMM_PRE_IN_OUT0
            r = xs[0].clone()
            kernel.gemm_fused(a, w, bias, r, out=[r])
            torch.testing.assert_close(r.float(), want[0].float(), atol=tol, rtol=tol)
        # a weight that requires grad, the plain call: ATen's out= would refuse it under grad mode
        wg = w.detach().clone().requires_grad_(True)
        for o, e in zip(kernel.gemm_fused(a, wg, bias, *xs), want):
            torch.testing.assert_close(o.float(), e.float(), atol=tol, rtol=tol)
            assert not o.requires_grad  # no graph recorded (the library path's GEMM ran with grad off)
        assert torch.is_grad_enabled()  # grad mode back as it was
        # a whose leading dims do not merge into the GEMM's rows (no view of it as the kernel
        # reads it: a copy each call, where a and w are passed themselves otherwise)
        if a.dim() == 3:
            at = a.transpose(0, 1).contiguous().transpose(0, 1)
            for o, e in zip(kernel.gemm_fused(at, w, bias, *xs), want):
                torch.testing.assert_close(o.float(), e.float(), atol=tol, rtol=tol)
        pre = torch.full(main, float("nan"), dtype=dt)
        kernel.gemm_fused(a, w, bias, *xs, pre=pre)
        if path == "library":
            assert torch.equal(pre, kernel.gemm_only(*gemm_args))
            # the pointwise kernel's launch is planned once per GEMM plan: a second call
            # (the GEMM output in another buffer, of the same layout) looks nothing up
            with monkeypatch.context() as m:
                m.setattr(kernel, "_fwd_planned", lambda *args: pytest.fail("the pointwise plan looked up again"))
                for o, e in zip(kernel.gemm_fused(a, w, bias, *xs), want):
                    torch.testing.assert_close(o.float(), e.float(), atol=tol, rtol=tol)
        leaves = [t.detach().clone().requires_grad_(True) for t in (a, w, bias, *xs) if t is not None and t.is_floating_point()]
        it = iter(leaves)
        args = [next(it) if t is not None and t.is_floating_point() else t for t in (a, w, bias, *xs)]
        y = kernel.gemm_autograd(*args)
        got[path] = torch.autograd.grad([o.float().sum() for o in y if o.requires_grad], leaves)
    for x, y in zip(got["library"], got["tiles"]):
        torch.testing.assert_close(x.float(), y.float(), atol=10 * tol, rtol=10 * tol)


def _poison(shape, dt):
    return torch.full(shape, float("nan"), dtype=dt)


def test_out_in_place_and_overlaps():
    """fused(out=...) of an elementwise program: an output may be exactly an input of its dtype
    (in place: the results are eager's on the input's values before the call); an output that
    overlaps an input otherwise, or another output, is refused with the two names, before any
    launch; so is an out= of the wrong count."""
    kernel, ref, case = module("table_bf16")
    main = case.SHAPES[0]
    xs = inputs_for(case, main, seed=5)
    want = ref.chain(*xs)
    k = next(i for i, (_, dt, kind) in enumerate(case.OUTPUTS) if dt == "bf16" and kind == "full")
    x0 = xs[0].clone()
    out = [_poison(list(w.shape), w.dtype) for w in want]
    out[k] = x0
    got = kernel.fused(x0, *xs[1:], out=out)
    assert got[k] is x0
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2, equal_nan=True)
    buf = torch.zeros(main[0] * main[1] + 1, dtype=torch.bfloat16)
    shifted_in, shifted_out = buf[:-1].view(main), buf[1:].view(main)
    for name, args, outs in (
            ("shifted", (shifted_in, *xs[1:]), {k: shifted_out}),
            ("two outputs", xs, {k: x0, k + 1 if k + 1 < len(want) else k - 1: x0})):
        out = [_poison(list(w.shape), w.dtype) for w in want]
        for j, t in outs.items():
            if t.dtype == out[j].dtype:
                out[j] = t
        rec = Recorder()
        kernel._launch, saved = rec, kernel._launch
        try:
            with pytest.raises(ValueError, match="shares memory"):
                kernel.fused(*args, out=out)
        finally:
            kernel._launch = saved
        assert not rec.calls, name
    with pytest.raises(ValueError, match="want .* tensors"):
        kernel.fused(*xs, out=[_poison(list(want[0].shape), want[0].dtype)])


def test_row_program_refuses_in_place():
    """A row program's passes re-read the row, so fused(out=...) over its own input is refused."""
    kernel, ref, case = module("table_softmax")
    x = inputs_for(case, case.SHAPES[0], seed=2)[0]
    assert kernel.IN_PLACE == ()
    want = ref.chain(x)
    out = [x if w.dtype == x.dtype else _poison(list(w.shape), w.dtype) for w in want]
    with pytest.raises(ValueError, match="out\\[0\\] shares memory with input 0"):
        kernel.fused(x, out=out)


def test_gemm_out_overlaps_and_empty_k():
    """gemm_fused refuses an out= over a GEMM operand (the GEMM reads a across programs) and a
    pre= over an input; with K = 0 its outputs, out= and pre= are eager's (the GEMM's output is
    the bias), on both paths."""
    kernel, ref, case = module("linear_gelu_scale_residual")
    g = torch.Generator().manual_seed(4)
    dt = DTYPES[case.DTYPE]
    main, xshape, wshape = case.SHAPES
    a = (torch.randn(xshape, generator=g) * 0.5).to(dt)
    w = (torch.randn(wshape, generator=g) * 0.2).to(dt)
    bias = (torch.randn(main[-1], generator=g) * 0.5).to(dt)
    xs = inputs_for(case, main, seed=3)
    big = torch.zeros(max(a.numel(), math.prod(main)), dtype=dt)  # a, and an out= over its start
    with pytest.raises(ValueError, match="out\\[0\\] shares memory with a"):
        kernel.gemm_fused(big[:a.numel()].view(a.shape), w, bias, *xs, out=[big[:math.prod(main)].view(main)])
    with pytest.raises(ValueError, match="pre shares memory with input 1"):
        kernel.gemm_fused(a, w, bias, *xs, pre=xs[0].view(main))
    a0 = torch.zeros(list(xshape[:-1]) + [0], dtype=dt)
    w0 = torch.zeros([wshape[0], 0], dtype=dt)
    want = ref.chain(a0, w0, bias, *xs)
    for tile in (kernel.GEMM_LIBRARY, kernel.GEMM_INTERP_TILE):
        kernel._gemm_tile, saved = (lambda *args, t=tile, **kw: t), kernel._gemm_tile
        try:
            pre = _poison(main, dt)
            out = [_poison(list(x.shape), x.dtype) for x in want]
            got = kernel.gemm_fused(a0, w0, bias, *xs, out=out, pre=pre)
        finally:
            kernel._gemm_tile = saved
        assert got[0] is out[0]
        torch.testing.assert_close(pre, bias.expand(main))
        for o, e in zip(got, want):
            torch.testing.assert_close(o.float(), e.float(), atol=2e-2, rtol=2e-2)


@triton.jit
def _round_all(x_ptr, out_ptr, n, fn: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, fn(tl.load(x_ptr + offs, mask=mask, other=0.0)), mask=mask)


# a golden example whose kernel rounds to each 16-bit type (a kernel carries only the
# rounding helpers of the types its steps round to)
ROUNDING = {torch.bfloat16: ("table_bf16", "_round_bf16"), torch.float16: ("table_mean", "_round_fp16")}


def test_round_bits_matches_eager():
    """The interpreter's rounding of a 16-bit step (_round_bits_bf16, _round_bits_fp16, which
    _round_bf16 and _round_fp16 are there) gives eager's conversion, bit for bit, zero's sign
    included: every bf16 tie and its neighbours (each high half with the low halves 0, 0x7FFF,
    0x8000, 0x8001, 0xFFFF), fp16's subnormal and overflow edges, and 2**20 random fp32
    patterns. (On the GPU they are PTX, checked against this on every fp32 pattern:
    test_round_gpu.py.)"""
    g = torch.Generator().manual_seed(0)
    high = torch.arange(1 << 16, dtype=torch.int64) << 16
    ties = (high[:, None] + torch.tensor([0, 0x7FFF, 0x8000, 0x8001, 0xFFFF])).flatten()
    edges = torch.tensor([2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 6.103515625e-05, 65504.0, 65519.99, 65520.0,
                          1e-30, 5.96e-08]).view(torch.int32).to(torch.int64)
    edges = torch.cat([edges, edges | (1 << 31)])
    rand = torch.randint(0, 1 << 32, (1 << 20,), generator=g, dtype=torch.int64)
    pattern = torch.cat([ties, edges, rand])
    x = (pattern - (1 << 32) * (pattern >= (1 << 31))).to(torch.int32).view(torch.float32)
    for dtype, (example, helper) in ROUNDING.items():
        kernel, _, _ = module(example)
        assert not hasattr(kernel, "_round_fp16" if dtype == torch.bfloat16 else "_round_bf16"), example
        got = torch.empty_like(x)
        _round_all[(triton.cdiv(x.numel(), 1 << 16),)](x, got, x.numel(), getattr(kernel, helper), BLOCK=1 << 16)
        want = x.to(dtype).to(torch.float32)
        nan = x.isnan()
        assert torch.equal(got.isnan(), nan)
        bad = (got.view(torch.int32) != want.view(torch.int32)) & ~nan
        assert not bad.any(), (dtype, x[bad][:5].tolist(), got[bad][:5].tolist(), want[bad][:5].tolist())


@triton.jit
def _unary_all(x_ptr, out_ptr, n, fn: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, fn(tl.load(x_ptr + offs, mask=mask, other=0.0)), mask=mask)


def test_tanh_is_accurate_near_zero():
    """The kernels' tanh (the op table's, and GELU-tanh's and Mish's inside) within 4 units in
    the last place of fp32 of the true value, relative, from 1e-30 to 20 and its negatives
    (the form 2 / (1 + exp(-2x)) - 1 was off by 6e-4 of tanh(1e-4)); NaN and the infinities as
    eager's."""
    kernel, _, _ = module("broadcast_affine_tanh")
    mag = torch.logspace(-30, math.log10(20.0), 4001, dtype=torch.float64)
    x = torch.cat([mag, -mag, torch.tensor([0.0, float("nan"), float("inf"), float("-inf")], dtype=torch.float64)])
    x32 = x.to(torch.float32)
    got = torch.empty_like(x32)
    _unary_all[(triton.cdiv(x32.numel(), 1024),)](x32, got, x32.numel(), kernel._tanh, BLOCK=1024)
    want = torch.tanh(x32.to(torch.float64))
    finite = want.isfinite()
    rel = ((got.double() - want).abs() / want.abs().clamp_min(1e-300))[finite & (want != 0)]
    assert float(rel.max()) <= 4 * torch.finfo(torch.float32).eps, float(rel.max())
    assert torch.equal(got[~finite].isnan(), want[~finite].isnan()) and got[-2:].tolist() == [1.0, -1.0]


def test_row_program_even_tiles():
    """A row program whose rows are exactly one tile and fill every program runs without masks
    (EVEN); the same call with the masks (EVEN off) gives the same bits, and one shape off
    (a column or a row fewer) takes the masks. The rows a program never exceed the rows."""
    kernel, ref, case = module("table_softmax")
    for main, even in (([4, 8, 64], True), ([4, 8, 63], False), ([3, 5, 64], False), ([1, 1, 1], True)):
        xs = inputs_for(case, main, seed=5)
        _, p = kernel._fwd_plan(xs)
        rows, consts = p.ints[0], p.constexprs
        assert consts["EVEN"] == even, (main, consts)
        assert consts["BLOCK_R"] <= rows and p.grid[0] * consts["BLOCK_R"] >= rows, (main, consts)
        got = kernel.fused(*xs)
        masked_launch = kernel._Planned(p.kernel, p.grid, p.ints, p.num_warps, p.num_stages, p.fp_fusion,
                                        **dict(consts, EVEN=False))
        masked = kernel._fused_run(masked_launch, xs, kernel.empty_outputs(*xs))
        for a, b in zip(got, masked):
            assert torch.equal(a, b), main
        for a, b in zip(got, ref.chain(*xs)):
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_number_inputs():
    """Numbers the trace does not record (case.INPUTS' "number": x + eps, x * scale with
    Python floats) are passed at run time: as Python numbers or 0-dim float32 tensors, the
    result eager's with the same numbers, forward and backward (the numbers carry no
    gradient), on the pointwise kernel and a GEMM head's forms; each number's tensor made
    once per value (-0.0 apart from 0.0), anything else refused."""
    kernel, ref, case = module("abs_add_sqrt_div_number")
    assert [dt for _, dt, _ in case.INPUTS] == ["bf16", "number", "number"] and kernel.NUMBERS == (1, 2)
    x = inputs_for(case, [16, 40])[0]
    import numpy as np

    for eps, scale in ((0.5, -1.25), (3, 2), (torch.tensor(0.25), torch.tensor(-4.0)), (np.float32(0.75), np.float64(2.0))):
        got = kernel.fused(x, eps, scale)[0]
        want = ref.chain(x, eps.item() if isinstance(eps, torch.Tensor) else float(eps),
                         scale.item() if isinstance(scale, torch.Tensor) else float(scale))[0]
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    kernel._NUMBER_TENSORS.clear()
    kernel.fused(x, 0.5, 2.0)
    kept = dict(kernel._NUMBER_TENSORS)
    assert len(kept) == 2
    kernel.fused(x, 0.5, 2.0)  # the same numbers: the same tensors, none made
    assert all(kernel._NUMBER_TENSORS[k] is t for k, t in kept.items()) and len(kernel._NUMBER_TENSORS) == 2
    pos, neg = kernel.fused(x, 0.5, 0.0)[0], kernel.fused(x, 0.5, -0.0)[0]
    assert bool((pos == float("inf")).all()) and bool((neg == float("-inf")).all())
    for bad in ("0.5", True, np.bool_(True), None, [0.5], 1j):
        with pytest.raises(TypeError, match="input 1: want a number"):
            kernel.fused(x, bad, 2.0)
    with pytest.raises(TypeError, match="input 2"):
        kernel.fused(x, 0.5, torch.tensor(2.0, dtype=torch.bfloat16))  # a tensor: of the kernel's dtype
    # training: the input's gradient as eager's, none for the numbers
    xg, xe = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    kernel.fused_autograd(xg, 0.5, -1.25)[0].float().sum().backward()
    ref.chain(xe, 0.5, -1.25)[0].float().sum().backward()
    torch.testing.assert_close(xg.grad.float(), xe.grad.float(), rtol=2e-2, atol=2e-2)

    kernel, ref, case = module("linear_sub_mul_number_residual")
    g = torch.Generator().manual_seed(1)
    a = torch.randn(24, 32, generator=g).half()
    w = (torch.randn(40, 32, generator=g) / 6).half()
    r = torch.randn(24, 40, generator=g).half()
    want = ref.chain(a, w, 0.25, -3.0, r)[0]  # a bias-free GEMM: no bias parameter
    for run in (kernel.gemm_fused, kernel.gemm_cublas, kernel.gemm_autograd):
        torch.testing.assert_close(run(a, w, None, 0.25, -3.0, r)[0].float(), want.float(), rtol=1e-2, atol=1e-2)
    ag, ae = a.clone().requires_grad_(True), a.clone().requires_grad_(True)
    kernel.gemm_autograd(ag, w, None, 0.25, -3.0, r)[0].float().sum().backward()
    ref.chain(ae, w, 0.25, -3.0, r)[0].float().sum().backward()
    torch.testing.assert_close(ag.grad.float(), ae.grad.float(), rtol=2e-2, atol=2e-2)
    with pytest.raises(TypeError, match="input 2: want a number"):
        kernel.gemm_fused(a, w, None, 0.25, "x", r)


def test_int64_number_inputs():
    """int64 values and Python ints the trace does not record (case.INPUTS' "number_int64":
    OPT's (cumsum * mask - n).long() + m): passed as Python ints or 0-dim int64 tensors, the
    result eager's exactly; each int's tensor made once per value (apart from a float number's
    of the same value); a float, a bool or a float tensor for an int refused."""
    kernel, ref, case = module("positions_int_number")
    assert [dt for _, dt, _ in case.INPUTS] == ["fp32", "fp32", "number_int64", "number_int64"]
    assert kernel.NUMBERS == (2, 3) and kernel.OUT_DTYPES == [torch.int64]
    g = torch.Generator().manual_seed(3)
    cum = torch.randint(0, 9, (4, 40), generator=g).float()
    mask = (torch.rand(4, 40, generator=g) < 0.7).float()
    for n, m in ((1, 2), (0, -7), (torch.tensor(3), torch.tensor(2**40))):
        got = kernel.fused(cum, mask, n, m)[0]
        want = ref.chain(cum, mask, int(n), int(m))[0]
        assert got.dtype == torch.int64 and torch.equal(got, want), (n, m)
    kernel._NUMBER_TENSORS.clear()
    kernel.fused(cum, mask, 1, 2)
    kept = dict(kernel._NUMBER_TENSORS)
    assert set(kept) == {("int", 1, cum.device), ("int", 2, cum.device)}
    kernel.fused(cum, mask, 1, 2)
    assert all(kernel._NUMBER_TENSORS[k] is t for k, t in kept.items()) and len(kernel._NUMBER_TENSORS) == 2
    for bad in (1.0, 0.5, True, "1", None):
        with pytest.raises(TypeError, match="input 2: want an int"):
            kernel.fused(cum, mask, bad, 2)
    with pytest.raises(TypeError, match="input 3"):
        kernel.fused(cum, mask, 1, torch.tensor(2.0))  # a tensor: of the input's dtype, int64


def _adapter_for(example, tmp_path):
    """The folder's adapter (templates/_generic/adapter.py) over a golden example's case and
    kernel, in a folder of its own under tmp_path, with the kernel it loads."""
    import importlib.util
    import shutil
    here = pathlib.Path(__file__).resolve().parent
    d = tmp_path / example
    d.mkdir()
    for n in ("case", "kernel", "reference"):
        shutil.copy(GOLDEN / example / f"{n}.py", d / f"{n}.py")
    shutil.copy(here / "adapter.py", d / "adapter.py")
    shutil.copy(here.parent / "_common" / "fa_testing.py", d / "fa_testing.py")
    sys.path.insert(0, str(d))
    try:
        spec = importlib.util.spec_from_file_location(f"_bcast_adapter_{example}", d / "adapter.py")
        adapter = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(adapter)
        return adapter, adapter.fat.load_sibling(str(d / "adapter.py"), "kernel")
    finally:
        sys.path.remove(str(d))


_RUNNER = []


def _verifier_transform(variant, inputs):
    """The verifier's runner's transform of a case's inputs (verify/runner/runner.py, loaded
    once), so that the plans below are those its cases run."""
    if not _RUNNER:
        import importlib.util
        path = pathlib.Path(__file__).resolve().parents[2] / "verify" / "runner" / "runner.py"
        spec = importlib.util.spec_from_file_location("fa_verify_runner_for_test_host", path)
        _RUNNER.append(importlib.util.module_from_spec(spec))
        spec.loader.exec_module(_RUNNER[0])
    return _RUNNER[0].transform(variant, inputs)[0]


def _bwd_slots(adapter, kernel, inputs, main):
    """The backward kernel's input slots for a case's inputs: the GEMM head's output first (of
    the main shape) and its bias last where the chain has them, a number as a 0-dim tensor."""
    xs = [torch.randn(main).to(kernel.IN_DTYPES[0])] if adapter.GEMM else []
    for name, _, _ in adapter.case.INPUTS:
        v = inputs[name]
        xs.append(v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float32))
    if adapter.GEMM and adapter.GEMM["bias"]:
        xs.append(inputs["bias"])
    return xs


BACKWARD_EXAMPLES = [p.name for p in sorted(GOLDEN.iterdir())
                     if (p / "case.py").exists() and "BACKWARD = True" in (p / "case.py").read_text()]


@pytest.mark.parametrize("example", BACKWARD_EXAMPLES)
def test_broadcast_cases_reach_every_reduction(example, tmp_path):
    """The verifier's broadcast cases (adapter.broadcast_cases) take every input slot through
    every gradient layout its backward kernel has code for (kernel.BWD_KINDS): column sums,
    one sum, row sums, the fp32 values; the flat walk and the 2D tile for one sum (whose last
    reduction, over the tile's rows, needs more than one row); and _sum_parts over a count of
    groups its blocks do not divide. Plans only, nothing runs: a layout no case reaches is code
    the verifier never checks."""
    adapter, kernel = _adapter_for(example, tmp_path)
    seen = {i: set() for i in range(kernel.BWD_INPUTS)}
    flat, tiled_sum, ragged = set(), set(), False
    traced = ("grad", adapter.interp_shapes(adapter.case.SHAPES), None)  # the folder's own gradient case
    for name, shapes, variant in [traced] + adapter.broadcast_cases({}):
        inputs = adapter.make_inputs(shapes, None, {}, "cpu", 0)
        inputs = _verifier_transform(variant, inputs)
        xs = _bwd_slots(adapter, kernel, inputs, adapter._split_broadcast(shapes)[0][0])
        shape = kernel._main_shape(xs[:len(kernel.IN_DTYPES)])
        douts = [torch.empty(shape, dtype=dt) for dt in kernel.OUT_DTYPES]
        launch = kernel._bwd_plan(xs, douts, (True,) * len(xs))[-1]
        assert launch is not None, name
        planned, stacks, _ = launch
        c = planned.constexprs
        for i in seen:
            seen[i].add(c[f"KIND{i}"])
        flat.add(c["FLAT"])
        if not c["FLAT"] and c["BLOCK_R"] > 1:
            tiled_sum |= {i for i in seen if c[f"KIND{i}"] == 2}
        for _, _, vshape, sdim, _ in stacks:
            if sdim == 2 and len(vshape) == 4 and vshape[1] == 1 and vshape[2] % 2:
                ragged = True
    missing = [(i, k) for i, ks in enumerate(kernel.BWD_KINDS) for k in ks if k != 0 and k not in seen[i]]
    assert not missing, f"(slot, KIND) no broadcast case reaches: {missing} (seen {seen})"
    slots = kernel.BWD_KINDS[:len(kernel.IN_DTYPES)]  # the program's inputs' (no GEMM bias)
    # one sum over more than one row: the 0-dim input's layout must keep rows apart, which a
    # transposed input of the main shape does; a GEMM head's output, dense, cannot, so there
    # it takes a second input that broadcasts
    if any(2 in ks for ks in slots) and (not adapter.GEMM or sum(len(ks) > 1 for ks in slots) > 1):
        # each such slot's one sum over more than one row (its own line of the kernel)
        want = {i for i, ks in enumerate(slots) if 2 in ks and len(adapter.case.SHAPES[0]) > 1}
        assert flat == {True, False} and want <= tiled_sum, (flat, want - tiled_sum)
    # a ragged count of groups needs three row blocks: two row dims, and a third tensor to keep
    # the one the bias and its partner reduce (the interpreter splits a block over two programs)
    tensors = sum(1 for _, dt, _ in adapter.case.INPUTS if not dt.startswith("number")) + (1 if adapter.GEMM else 0)
    if any(1 in ks for ks in slots) and len(adapter.case.SHAPES[0]) > 2 and tensors > 2:
        assert ragged


def test_an_output_eager_would_shrink_is_refused():
    """An output computed from inputs that all broadcast along a dim is smaller there in eager;
    the kernel writes every output at the inputs' common shape, so it refuses such inputs (one
    line naming the output) rather than return another shape. gelu_dropout_residual's first
    output is computed from x0 alone."""
    kernel, _, case = module("gelu_dropout_residual")
    assert kernel.OUT_DEPS[0] == (0,)
    x0, x1 = inputs_for(case, [2, 3, 8])
    kernel.fused(x0, x1)  # as traced
    with pytest.raises(ValueError, match=r"output 0 is computed from inputs \[0\] alone"):
        kernel.fused(x0[:1], x1)
    # an output computed from several inputs keeps the shape while one of them has it
    assert kernel.OUT_DEPS[1] == (0, 1)
    with pytest.raises(ValueError, match="output 0"):
        kernel._main_shape([x0[:, :1], x1])


def test_wide_shapes(tmp_path):
    """The verifier's wide cases: the traced shape widened in its first dim until every output
    has WIDE_PER_OUTPUT elements (in the backward's "each" layout, every output's share of a
    gradient, up to WIDE_MAX), so that the bias check can judge them (the tanh and sigmoid
    derivatives' constants 0.1% off in table_bf16's backward are found there, not at the
    traced shape's four elements an output); none for row programs, GEMM heads and chains with
    no 16-bit value."""
    adapter, _ = _adapter_for("table_bf16", tmp_path)
    main = adapter.interp_shapes(adapter.case.SHAPES)[0]
    one, = adapter.wide_shapes({})
    each, = adapter.wide_shapes({}, len(adapter.OUTPUTS))
    assert one[1:] == each[1:] == main[1:]
    assert adapter.WIDE_PER_OUTPUT <= math.prod(one) < adapter.WIDE_PER_OUTPUT + math.prod(main[1:])
    assert adapter.WIDE_MAX <= math.prod(each) < adapter.WIDE_MAX + math.prod(main[1:])
    assert math.prod(main) * 10 < adapter.WIDE_MAX
    for example in ("sub_exp_sum", "linear_gt_gate", "silu_scale"):
        other, _ = _adapter_for(example, tmp_path)
        assert other.wide_shapes({}) is None, example


def test_sum_band(tmp_path):
    """A last-dim sum is known to its summation's rounding of its terms' magnitudes, not of its
    result (the range case: silu(x) * y over terms of 6e5 summed to 49.7109 in eager and fp64,
    49.7134 in the kernel): band_outputs moves it through reference.chain's reduce= hook by
    (2 + sqrt(n)) fp32 units of the summed magnitudes, and by nothing where the sum is exact
    (integer terms) or the magnitudes overflow; the example's band holds eager's value."""
    adapter, kernel = _adapter_for("sub_exp_sum", tmp_path)
    ref = adapter.fat.load_sibling(str(tmp_path / "sub_exp_sum" / "adapter.py"), "reference")
    fat = adapter.fat
    eps = torch.finfo(torch.float32).eps
    # a row that cancels: 6e5 - 6e5 + 49.71, in 64 terms
    x = torch.zeros(2, 64)
    x[0, 0], x[0, 1], x[0, 2] = 6e5, -6e5, 49.71
    x[1] = torch.linspace(-1, 1, 64)
    s = torch.sum(x, -1, dtype=torch.float32)
    hi = adapter._band_sum(1.0)(torch.sum, x, -1, keepdim=False, dtype=torch.float32)
    lo = adapter._band_sum(-1.0)(torch.sum, x, -1, keepdim=False, dtype=torch.float32)
    assert hi.dtype == lo.dtype == torch.float32
    width = eps * (2 + 8) * x.abs().double().sum(-1)
    assert torch.allclose((hi.double() - s.double()), width.float().double(), rtol=1e-3)
    assert torch.allclose((s.double() - lo.double()), width.float().double(), rtol=1e-3)
    atol, rtol = fat.tol("softmax", torch.float32)
    got = s.clone()
    got[0] += 0.0025  # the kernel's order of the cancelling row
    assert fat.mismatches(got, s, atol, rtol)[0][0]
    assert not fat.mismatches(got, s, atol, rtol, (lo, hi))[0].any()
    got[0] += 5.0  # a wrong sum stays wrong (the band: 1.4 about it)
    assert fat.mismatches(got, s, atol, rtol, (lo, hi))[0].tolist() == [True, False]
    # exact sums and overflowing magnitudes: no band
    ints = torch.arange(10).reshape(2, 5)
    assert torch.equal(adapter._band_sum(1.0)(torch.sum, ints, -1), ints.sum(-1))
    big = torch.tensor([[float("inf"), 1.0], [1.0, 2.0]])
    moved = adapter._band_sum(1.0)(torch.sum, big, -1, keepdim=False, dtype=torch.float32)
    assert moved[0] == float("inf") and float(moved[1]) > 3.0
    # the example: four runs through the hook, eager's value inside their range
    shapes = adapter.interp_shapes(adapter.case.SHAPES)
    inputs = adapter.make_inputs(shapes, torch.float32, {}, "cpu", 0)
    want = adapter.reference(ref, inputs, {})
    assert len(adapter.band_outputs(kernel, ref, inputs, {})) == 4
    (blo, bhi), = fat.output_bands(adapter, kernel, ref, inputs, {}, want)
    assert bool((blo <= want[0].double()).all() and (want[0].double() <= bhi).all())
    assert bool((bhi > blo).any())


@pytest.mark.parametrize("example", ["linear_gt_gate", "bmm_lt_gate"])
def test_gemm_band(example, tmp_path):
    """A GEMM head's output is known to its rounding, not exactly (the H200 decided an fp32
    ``x > 0.1`` after a linear differently from cuBLAS for 1 of 4M elements): the band
    (adapter.band_outputs, fa_testing.output_bands) takes a comparison decided the other way
    at a GEMM output within the rounding of its number, and nothing else: an element off by
    more than the tolerance elsewhere still fails, and where the GEMM is exact (the planted
    case's rows, zero or one-hot on the number) the band is eager's value alone."""
    adapter, kernel = _adapter_for(example, tmp_path)
    ref = adapter.fat.load_sibling(str(tmp_path / example / "adapter.py"), "reference")
    fat, dt = adapter.fat, adapter.fat.DTYPES[adapter.case.DTYPE]
    shapes = adapter.interp_shapes(adapter.case.SHAPES)
    inputs = adapter.make_inputs(shapes, dt, {}, "cpu", 0)
    # one output element a sum of two terms halfway between the number as the GEMM's dtype
    # holds it and a neighbour of it in that dtype (above for gt, below for lt): the GEMM's
    # rounding decides the comparison
    gdt = inputs["a"].dtype
    t = torch.tensor(0.1, dtype=gdt)
    step = 1 if "gt" in example else -1
    half = ((t.view(torch.int16) + step).view(gdt).double() - t.double()) / 2
    first = (0,) * (inputs["a"].dim() - 1)
    inputs["a"][first] = 0
    inputs["a"][first + (0,)] = inputs["a"][first + (1,)] = 1
    w = inputs["w"] if adapter.GEMM["op"] == "linear" else inputs["w"].transpose(-1, -2)  # [.., N, K]
    w[first[:-1] + (0, 0)], w[first[:-1] + (0, 1)] = float(t), float(half)
    if adapter.GEMM["bias"]:
        inputs["bias"].zero_()
    want = adapter.reference(ref, inputs, {})
    (lo, hi), = fat.output_bands(adapter, kernel, ref, inputs, {}, want)
    atol, rtol = adapter.tolerance(dt, shapes, {})
    at = first + (0,)
    assert float(lo[at]) == 0.0 and float(hi[at]) > 0.09, (float(lo[at]), float(hi[at]))
    other = want[0].clone()
    other[at] = float(hi[at]) if float(want[0][at]) == 0 else 0.0  # decided the other way
    assert fat.mismatches(other, want[0], atol, rtol)[0][at]
    assert not fat.mismatches(other, want[0], atol, rtol, (lo, hi))[0].any()
    far = (1,) * want[0].dim()
    other[far] += 0.5
    assert fat.mismatches(other, want[0], atol, rtol, (lo, hi))[0].nonzero().tolist() == [list(far)]
    # the planted case: rows where the GEMM's output is exactly a number of the program
    planted, _ = adapter.planted(inputs)
    want = adapter.reference(ref, planted, {})
    (lo, hi), = fat.output_bands(adapter, kernel, ref, planted, {}, want)
    rows = want[0].flatten(0, -2)[::2], lo.flatten(0, -2)[::2], hi.flatten(0, -2)[::2]
    assert torch.equal(rows[1], rows[0].double()) and torch.equal(rows[2], rows[0].double())


def test_gemm_grad_band(tmp_path):
    """A GEMM head's output at a bfloat16 midpoint beside hardswish's kink at 3 (exactly
    2.9921875, between 2.984375 and 3.0) rounds to either side within the GEMM's rounding,
    and hardswish's derivative there is 1.49 or 1: the gradient band (adapter.band_grads,
    fa_testing.grad_bands) takes a's and w's gradients computed from the other side, and
    nothing else (an element off elsewhere still fails, in the comparison and in the quack
    check); with the output one bfloat16 step from the kink the band is eager's alone."""
    adapter, kernel = _adapter_for("matmul_hardswish_div", tmp_path)
    ref = adapter.fat.load_sibling(str(tmp_path / "matmul_hardswish_div" / "adapter.py"), "reference")
    fat, dt = adapter.fat, torch.bfloat16
    shapes = adapter.interp_shapes(adapter.case.SHAPES)

    def grads(inputs, pre=None):
        leaves = {k: (v.detach().clone().requires_grad_(True) if k in ("a", "w") else v) for k, v in inputs.items()}
        # the GEMM's output as pre where given, its gradient still flowing to a and w
        kw = {} if pre is None else {"gemm": lambda x, y: ref.gemm(x, y) + (pre - ref.gemm(x, y)).detach()}
        outs = ref.chain(*[leaves[n] for n in adapter.NAMES], **kw)
        return torch.autograd.grad(outs, [leaves["a"], leaves["w"]], dys)

    inputs = adapter.make_inputs(shapes, dt, {}, "cpu", 0)
    a, w = inputs["a"], inputs["w"]  # [M, K], [K, N]
    a[0] = 0
    a[0, 0] = a[0, 1] = 1
    w[0, 0], w[1, 0] = 3.0, -0.0078125  # the output at [0, 0]: 2.9921875, exactly
    dys = [torch.ones(shapes[0], dtype=dt)]
    want = grads(inputs)
    bands = fat.grad_bands(adapter, kernel, ref, inputs, ["a", "w"], dys, {}, want)
    # the other side of the midpoint: the GEMM's output at [0, 0] rounded the other way
    z = (a.float() @ w.float()).to(dt)
    other = z.clone()
    other[0, 0] = 2.984375 if float(z[0, 0]) == 3.0 else 3.0
    side = grads(inputs, other)
    atol, rtol = adapter.tolerance(dt, shapes, {}, grad=True)
    for name, g, w_, b in zip(("a", "w"), side, want, bands):
        assert b is not None, name
        assert fat.mismatches(g, w_, atol, rtol)[0].any(), f"{name}: the two sides do not differ"
        assert not fat.mismatches(g, w_, atol, rtol, b)[0].any(), name
        ok, note, _ = fat.quack_check(g, w_, w_.double(), band=b)
        assert ok, (name, note)
        far = (g.shape[0] - 1, g.shape[1] - 1)
        bad = g.clone()
        bad[far] += 0.5
        assert fat.mismatches(bad, w_, atol, rtol, b)[0].nonzero().tolist() == [list(far)], name
        assert not fat.quack_check(bad, w_, w_.double(), band=b)[0], name
    # the output exactly 3.0 (half a bfloat16 step from either midpoint): the side is decided,
    # and the band does not take the other one
    w[1, 0] = 0.0
    want = grads(inputs)
    bands = fat.grad_bands(adapter, kernel, ref, inputs, ["a", "w"], dys, {}, want)
    other = (a.float() @ w.float()).to(dt)
    other[0, 0] = 2.984375
    for name, g, w_, b in zip(("a", "w"), grads(inputs, other), want, bands):
        assert fat.mismatches(g, w_, atol, rtol, b)[0].any(), name


def test_keep_mask_drawn_for_timing(tmp_path):
    """A training dropout's folder: fused_drawn (what bench times) draws each keep mask in
    the call, at 1 - p (bernoulli_ into a bool tensor, as the README tells the caller), and
    keeps the other elements exactly as the reference with that mask would; eager (bench's
    eager and compile) runs the chain as traced, its dropout drawing its own mask; the checks'
    train() (inputs["_test"]) applies the inputs' mask."""
    adapter, kernel = _adapter_for("mul_dropout_keep", tmp_path)
    ref = adapter.fat.load_sibling(str(tmp_path / "mul_dropout_keep" / "adapter.py"), "reference")
    assert adapter.KEEP_P == {"keep2": 0.1}
    inputs = adapter.make_inputs([[64, 8, 48]], None, {}, "cpu", 0)
    y = adapter.fused_drawn(kernel, inputs, {})[0].float()
    full = adapter.reference(ref, dict(inputs, keep2=torch.ones_like(inputs["keep2"])), {})[0].float()
    n, p = y.numel(), 0.1
    dropped = int((y == 0).sum())
    assert abs(dropped - p * n) < 6 * math.sqrt(n * p * (1 - p)), dropped
    kept = y != 0
    assert torch.equal(y[kept], full[kept])
    e = adapter.eager(ref, inputs, {})[0].float()
    assert abs(int((e == 0).sum()) - p * n) < 6 * math.sqrt(n * p * (1 - p))
    # the checks' training call: the inputs' mask, the reference's outputs
    leaves = {k: (v.detach().clone().requires_grad_(True) if k in adapter.GRAD_INPUTS else v) for k, v in inputs.items()}
    got = adapter.train(kernel, dict(leaves, _test=True), {})[0]
    want = adapter.reference(ref, inputs, {})[0]
    torch.testing.assert_close(got.detach().float(), want.float())


def test_output_tolerances_follow_each_output(tmp_path):
    """A generic folder holds each output to the tolerance of the steps it is computed from
    (case.OUT_TOL_DTYPES), not the whole program's least precise one: table_fp32's hardsigmoid
    is fp32 (1e-5) beside its bf16 cast (1e-2), so a hardsigmoid off by 5e-4 fails."""
    adapter, _ = _adapter_for("table_fp32", tmp_path)
    tols = adapter.output_tolerances(None, None, {})
    ref = (GOLDEN / "table_fp32" / "reference.py").read_text()
    names = [n for n, _, _ in adapter.case.OUTPUTS]
    hs = names.index("y" + ref.split(" = torch.nn.functional.hardsigmoid(")[0].rsplit("v", 1)[1])
    assert tols[hs] == adapter.fat.tol("pointwise", torch.float32), tols[hs]
    assert adapter.case.TOL_DTYPE == "bf16" and adapter.fat.tol("pointwise", torch.bfloat16) in tols
    g = torch.full((8,), 0.3972, dtype=torch.float32)
    bad, *_ = adapter.fat.mismatches(g + 5e-4, g, *tols[hs])
    assert bad.all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2
                    or os.environ.get("TRITON_INTERPRET") == "1",
                    reason="needs two CUDA devices and TRITON_INTERPRET unset")
@pytest.mark.parametrize("example", ["linear_gt_gate", "table_fp32", "mul_dropout_keep"])
def test_on_another_gpu(example, tmp_path):
    """A model split over GPUs (Hugging Face's device_map="auto") calls a layer on cuda:1 while
    cuda:0 is current: a GEMM head, a table of pointwise ops and a drawn dropout run on the
    tensors' device, forward and gradients right (the CPU check of the device guard:
    templates/test_shared.py::test_on_their_device)."""
    adapter, kernel = _adapter_for(example, tmp_path)
    ref = adapter.fat.load_sibling(str(tmp_path / example / "adapter.py"), "reference")
    shapes = adapter.interp_shapes(adapter.case.SHAPES)
    with torch.cuda.device(0):
        adapter.fat.run_case(kernel, ref, adapter, shapes, adapter.case.DTYPE, {}, "cuda:1", 0)
        if adapter.has_backward({}):
            adapter.fat.run_grad_case(kernel, ref, adapter, shapes, adapter.case.DTYPE, {}, "cuda:1", 11)


def test_gemm_bias_timed_as_traced(tmp_path):
    """A chain that takes a GEMM's bias (program's Input.Bias: ConvNeXt's fc2 through its
    permute): chain adds it (what the kernel is checked against); chain_traced (what bench times
    as eager and compiles) takes the sum the traced GEMM's epilogue made, made beforehand
    (adapter.make_inputs' _epilogue), so it adds only the residual; both give the same values
    and gradients, the bias's summed over the dims it broadcasts along; adapter.eager passes it."""
    _, ref, _ = module("permute_bias_scale_residual")
    torch.manual_seed(0)
    shapes = [([2, 6, 5, 7], torch.bfloat16), ([6, 1, 1], torch.float32), ([2, 6, 5, 7], torch.float32),
              ([1, 6, 1, 1], torch.bfloat16)]
    xs = [torch.randn(s, dtype=d).requires_grad_(True) for s, d in shapes]
    xb = (xs[0] + xs[3]).detach()
    dy = torch.randn(2, 6, 5, 7)

    def run(fn):
        for x in xs:
            x.grad = None
        y, = fn(*xs)
        y.backward(dy)
        return y.detach(), [x.grad.clone() for x in xs]

    want, got = run(ref.chain), run(lambda *a: ref.chain_traced(*a, epilogue=xb))
    assert torch.equal(got[0], want[0])
    for g, w in zip(got[1], want[1]):
        assert torch.equal(g, w)
    torch.testing.assert_close(want[1][3].float(), (dy * xs[1].detach()).sum((0, 2, 3), keepdim=True),
                               atol=0.05, rtol=0.02)

    def adds(fn):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn(*[x.detach() for x in xs])
        return sum(e.count for e in prof.key_averages() if e.key == "aten::add")

    assert adds(ref.chain) == 2 and adds(ref.chain_traced) == 2  # without the sum: the add itself
    assert adds(lambda *a: ref.chain_traced(*a, epilogue=xb)) == 1
    adapter, _ = _adapter_for("permute_bias_scale_residual", tmp_path)
    inputs = adapter.make_inputs([[2, 6, 5, 7]], None, {}, "cpu", 0)
    assert torch.equal(inputs["_epilogue"], inputs["x0"] + inputs["x3"])
    torch.testing.assert_close(adapter.eager(ref, inputs, {})[0], adapter.reference(ref, inputs, {})[0], atol=0, rtol=0)
