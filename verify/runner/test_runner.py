"""Tests of the verify runner's checks (run by verify's Go tests, or by hand:
``TRITON_INTERPRET=1 python -m pytest -q verify/runner``)."""

import importlib.util
import math
import pathlib
import types

import pytest
import torch

_spec = importlib.util.spec_from_file_location("fa_verify_runner", pathlib.Path(__file__).with_name("runner.py"))
runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runner)
# the check helpers every folder gets as its fa_testing.py (the runner uses the folder's)
_spec = importlib.util.spec_from_file_location(
    "fa_verify_fa_testing", pathlib.Path(__file__).parents[2] / "templates" / "_common" / "fa_testing.py")
fat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fat)


def test_compare_counts_and_first_mismatch():
    want = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    got = want.clone()
    got[1, 2] = 6.5
    ma, mr, n, first = runner.compare(got, want, 1e-5, 1e-5)
    assert n == 1 and first == ([1, 2], 6.5, 6.0)
    assert ma == pytest.approx(0.5) and mr == pytest.approx(0.5 / 6.0)
    ma, mr, n, first = runner.compare(want, want, 1e-5, 1e-5)
    assert (ma, mr, n, first) == (0.0, 0.0, 0, None)


def test_compare_tolerance_is_atol_plus_rtol_times_want():
    want = torch.tensor([100.0])
    assert runner.compare(torch.tensor([100.9]), want, 0.01, 0.01)[2] == 0  # 0.9 <= 0.01 + 1.0
    assert runner.compare(torch.tensor([101.1]), want, 0.01, 0.01)[2] == 1


def test_compare_nan_inf_parity():
    want = torch.tensor([float("nan"), float("inf"), 1.0, 2.0])
    # NaN where NaN is wanted and +inf where +inf is wanted pass
    assert runner.compare(want.clone(), want, 1e-5, 1e-5)[2] == 0
    # an unwritten (NaN-poisoned) element: max_abs is NaN
    got = want.clone()
    got[2] = float("nan")
    ma, _, n, first = runner.compare(got, want, 1e-5, 1e-5)
    assert n == 1 and math.isnan(ma) and first[0] == [2] and math.isnan(first[1])
    # -inf where +inf is wanted fails, max_abs inf
    got = want.clone()
    got[1] = float("-inf")
    ma, _, n, _ = runner.compare(got, want, 1e-5, 1e-5)
    assert n == 1 and ma == math.inf
    # a number where NaN is wanted fails
    got = want.clone()
    got[0] = 0.0
    assert runner.compare(got, want, 1e-5, 1e-5)[2] == 1


@pytest.mark.parametrize("variant", ["strided", "strided_vec", "transposed", "offset"])
def test_layouts_keep_values_and_change_layout(variant):
    g = torch.Generator().manual_seed(0)
    inputs = {"x": torch.randn(5, 7, generator=g), "bias": torch.randn(7, generator=g), "seed": 3}
    out, changed = runner.transform(variant, inputs)
    assert changed
    for k in changed:
        assert torch.equal(out[k], inputs[k]) and out[k].shape == inputs[k].shape
        assert out[k].stride() != inputs[k].stride() or out[k].storage_offset() != 0
    assert out["seed"] == 3
    if variant == "strided_vec":
        assert changed == ["bias"] and out["bias"].stride() == (2,)
    if variant in ("strided", "transposed"):
        assert changed == ["x"]


def test_values_variants():
    x = torch.ones(4, 8)
    r = torch.ones(4, 8)
    w = torch.ones(8)
    out, changed = runner.transform("large", {"x": x, "residual": r, "weight": w})
    assert changed == ["x", "residual"] and float(out["x"][0, 0]) == 64.0 + 1024.0 and out["weight"] is w
    out, changed = runner.transform("small", {"x": x, "residual": r, "weight": w})
    assert float(out["residual"][0, 0]) == 2.0 ** -10
    out, changed = runner.transform("negative", {"x": -x, "residual": r, "weight": w})
    assert changed == ["x", "residual"] and float(out["x"].max()) == -(64.0 + 1024.0) and out["weight"] is w
    runner.CURRENT_ADAPTER, was = types.SimpleNamespace(NEGATIVE_CASE=False), runner.CURRENT_ADAPTER
    try:  # an adapter that opts out
        assert runner.transform("negative", {"x": x})[1] == []
    finally:
        runner.CURRENT_ADAPTER = was
    out, changed = runner.transform("specials", {"x": x})
    assert changed == ["x"] and int(torch.isnan(out["x"]).sum()) == 1 and float(out["x"].view(-1)[-1]) == -math.inf
    m = torch.zeros(3, 5, dtype=torch.bool)
    out, changed = runner.transform("masked_rows", {"x": x, "mask": m})
    assert changed == ["mask"] and bool(out["mask"][0].all()) and not bool(out["mask"][1].any())
    assert runner.transform("masked_rows", {"x": x})[1] == []


def test_planted_variant_is_the_adapters():
    # the numbers a chain decides at come from the adapter (the generic one's planted());
    # an adapter without them has no planted case
    x = torch.ones(4, 8)
    saved = runner.CURRENT_ADAPTER
    try:
        runner.CURRENT_ADAPTER = types.SimpleNamespace()
        assert runner.transform("planted", {"x": x})[1] == []
        runner.CURRENT_ADAPTER = types.SimpleNamespace(planted=lambda inp: ({**inp, "x": inp["x"] * 0.1}, ["x"]))
        out, changed = runner.transform("planted", {"x": x})
        assert changed == ["x"] and float(out["x"][0, 0]) == pytest.approx(0.1)
    finally:
        runner.CURRENT_ADAPTER = saved


def test_guard_catches_writes_outside_and_poisons():
    fat = types.SimpleNamespace(poison=lambda shape, dtype, device: torch.zeros(shape, dtype=dtype))
    f = types.SimpleNamespace(adapter=types.SimpleNamespace(fat=fat))
    empty = torch.empty
    guard = runner.Guarded(f)
    with guard:
        out = fat.poison((3, 4), torch.float32, "cpu")
        buf = torch.empty(6, dtype=torch.bfloat16)
        keep = torch.empty((2, 2), dtype=torch.int8)
    assert torch.empty is empty and fat.poison is not guard.poison  # restored
    assert bool(torch.isnan(out).all()) and bool(torch.isnan(buf).all()) and int(keep[0, 0]) == runner.POISON_INT
    out.fill_(1.0)
    guard.check()  # writes inside are fine
    flat = out.view(-1)
    base = torch.as_strided(flat, (flat.numel() + 1,), (1,))  # one element past the end
    base[flat.numel()] = 7.0
    with pytest.raises(runner.OutOfBounds, match=r"wrote outside a 12-element float32 buffer.*\+1 past the end, value 7.0"):
        guard.check()
    # an in-place map rewriting the band with its own image of it: GELU keeps the large
    # positive guard value, not the negative one beside it
    base[flat.numel()] = runner.GUARD_VALUE
    guard.check()
    band = torch.as_strided(flat, (flat.numel() + 2,), (1,))[flat.numel():]
    band.copy_(torch.nn.functional.gelu(band))
    with pytest.raises(runner.OutOfBounds, match=r"\+2 past the end"):
        guard.check()


def test_guard_bands_differ_between_buffers():
    """A pass that reads one element past one guarded buffer and writes what it read (or a
    map keeping it) one past another changes the other's band: each buffer's band holds
    other values."""
    f = types.SimpleNamespace(adapter=types.SimpleNamespace(fat=None))
    guard = runner.Guarded(f)
    with guard:
        x = torch.empty(5)
        y = torch.empty(5)
    x.fill_(1.0)
    y.fill_(1.0)
    guard.check()
    past = lambda t: torch.as_strided(t, (t.numel() + 1,), (1,))  # noqa: E731
    past(y)[5] = past(x)[5] * (past(x)[5] > 0.1)  # x * (x > 0.1), one element too far
    with pytest.raises(runner.OutOfBounds, match=r"5-element float32 buffer.*\+1 past the end"):
        guard.check()


def test_quack_check():
    want32 = torch.tensor([1.0, 2.0, 3.0])
    eager = torch.tensor([1.01, 2.0, 3.0])
    ok, _, _ = fat.quack_check(torch.tensor([1.015, 2.0, 3.0]), eager, want32)
    assert ok  # 0.015 <= 2 * 0.01 + the floor
    ok, note, first = fat.quack_check(torch.tensor([1.0, 2.05, 3.0]), eager, want32)
    assert not ok and first[0] == [1] and "bound" in note


# A broadcast input's gradient, as the generic fused backward reduces it: y = x0 * x1 + x2 with
# x1 one value per column, whose gradient (dy * x0 summed over the rows) is summed here row
# after row in fp32, the order of a GPU's fp32 atomics; eager sums the same terms in its own
# (pairwise) order. The bugs: a row's term dropped, a sign, a scale.
ROWS, COLS = 4096, 64


class _SeqBias(torch.autograd.Function):
    bug = None

    @staticmethod
    def forward(ctx, x0, x1, x2):
        ctx.save_for_backward(x0, x1)
        return x0 * x1 + x2

    @staticmethod
    def backward(ctx, dy):
        x0, x1 = ctx.saved_tensors
        terms = dy * x0
        acc = torch.zeros(COLS, dtype=torch.float32)
        for r in range(ROWS - (_SeqBias.bug == "drop_row")):
            acc = acc + terms[r]
        gx0 = dy * x1 * (1.001 if _SeqBias.bug == "scale" else 1.0)
        gx2 = -dy if _SeqBias.bug == "sign" else dy
        return gx0, acc, gx2


def _seq_adapter():
    def make_inputs(shapes, dtype, params, device, seed):
        g = torch.Generator().manual_seed(seed)
        r, c = shapes[0]
        return {n: (torch.randn(s, generator=g) * 2).to(dtype) for n, s in (("x0", [r, c]), ("x1", [c]), ("x2", [r, c]))}

    return types.SimpleNamespace(
        fat=fat, QUACK_GRAD=True, QUACK_GRAD_FP32=True, GRAD_INPUTS=["x0", "x1", "x2"],
        make_inputs=make_inputs, tolerance=lambda *a, **k: (1e-5, 1e-5),
        fused=lambda kernel, inp, params, autograd=False: (_SeqBias.apply(inp["x0"], inp["x1"], inp["x2"]),),
        reference=lambda ref, inp, params: (inp["x0"] * inp["x1"] + inp["x2"],))


@pytest.fixture
def seq_bias():
    yield _seq_adapter()
    _SeqBias.bug = None


def test_quack_passes_a_reordered_fp32_sum_the_old_bound_failed(seq_bias):
    a = seq_bias
    inp = a.make_inputs([[ROWS, COLS]], torch.float32, {}, "cpu", 0)
    leaves = {k: v.clone().requires_grad_(True) for k, v in inp.items()}
    ref = {k: v.clone().requires_grad_(True) for k, v in inp.items()}
    dy = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(a.fused(None, leaves, {})[0], [leaves["x1"]], dy)[0]
    want = torch.autograd.grad(a.reference(None, ref, {})[0], [ref["x1"]], dy)[0]
    # the former bound: the reference in fp32 is eager itself, so the bound was 1e-6 absolute
    assert (got - want).abs().max().item() > 1e-6
    hp = fat.quack_grads(a, None, ref, ["x1"], [dy], {}, torch.float32)[0]
    assert hp.dtype == torch.float64
    ok, note, _ = fat.quack_check(got, want, hp, fat.quack_terms(got, [dy]))
    assert ok, note
    assert f"{ROWS} terms" in note
    fat.run_grad_case(None, None, a, [[ROWS, COLS]], "fp32", {}, "cpu", 0)


@pytest.mark.parametrize("bug", [None, "drop_row"])
def test_quack_scales_the_noise_of_a_sum_that_cancels(seq_bias, bug):
    # one column: x1's gradient is one sum of ROWS terms (x0, with dy all ones) that nearly
    # cancels, 0.01 out of terms of about 2, summed row after row in fp32: that order's
    # rounding is the terms' size, which a bound taken from the result alone called wrong (as
    # a GPU did at a test shape of ConvNeXt's per-channel scale); a dropped term is still far
    # outside the bound
    g = torch.Generator().manual_seed(3)
    x0 = torch.randn(ROWS, 1, generator=g, dtype=torch.float64) * 2
    x0[-1, 0] -= x0.sum() - 0.01
    inp = {"x0": x0.float(), "x1": torch.ones(1), "x2": torch.zeros(ROWS, 1)}
    dy = torch.ones(ROWS, 1)
    got = torch.zeros(1)
    for r in range(ROWS - (bug == "drop_row")):
        got = got + inp["x0"][r]
    want = inp["x0"].sum(0)  # eager's order
    ref = {k: v.clone().requires_grad_(True) for k, v in inp.items()}
    hp = fat.quack_grads(seq_bias, None, ref, ["x1"], [dy], {}, torch.float32)[0]
    assert hp.dtype == torch.float64 and float(hp) == pytest.approx(0.01, rel=1e-3)
    terms = fat.quack_terms(got, [dy])
    scale = fat.quack_scales(seq_bias, None, ref, ["x0", "x1"], [dy], {}, torch.float32)
    assert scale[0] == 0.0 and scale[1] == pytest.approx(float(inp["x0"].double().norm()), rel=1e-9)
    ok, note, _ = fat.quack_check(got, want, hp, terms, scale[1])
    if bug:
        assert not ok, note
        return
    assert not fat.quack_check(got, want, hp, terms)[0]  # the bound from the result alone
    assert ok and "terms' size" in note, note


def test_quack_scales_only_what_the_reference_takes_broadcast():
    # a LayerNorm's weight cannot be passed at x's shape: no scale (the result's size stands)
    a = types.SimpleNamespace(QUACK_GRAD=True,
                              reference=lambda ref, inp, params: torch.nn.functional.layer_norm(
                                  inp["x"], (4,), inp["w"]))
    inp = {"x": torch.randn(3, 4), "w": torch.randn(4)}
    assert fat.quack_scales(a, None, inp, ["x", "w"], [torch.ones(3, 4)], {}, torch.float32) == [0.0, 0.0]
    assert fat.quack_scales(a, None, inp, ["w"], [torch.ones(3, 4)], {}, torch.bfloat16) == [0.0]
    assert fat.quack_scales(types.SimpleNamespace(), None, inp, ["w"], [], {}, torch.float32) is None


@pytest.mark.parametrize("bug", ["drop_row", "sign", "scale"])
def test_quack_fails_a_wrong_gradient(seq_bias, bug):
    _SeqBias.bug = bug
    with pytest.raises(AssertionError, match="quack check vs the chain in fp64"):
        fat.run_grad_case(None, None, seq_bias, [[ROWS, COLS]], "fp32", {}, "cpu", 0)


@pytest.mark.parametrize("bug", [None, "drop_row", "sign", "scale"])
def test_verify_judges_gradients_as_the_tests_do(seq_bias, bug):
    _SeqBias.bug = bug
    f = types.SimpleNamespace(adapter=seq_bias, kernel=None, reference=None, params={})
    case = runner.Case("grad", [[ROWS, COLS]], "fp32", grad=True)
    acc = runner.Acc()
    ok = runner.run_backward(f, case, torch.float32, 0, acc)
    assert ok == (bug is None), acc.fail
    if bug:
        assert "quack check vs the chain in fp64" in acc.fail["note"]


def test_quack_reference_dtype():
    a = types.SimpleNamespace(QUACK_GRAD=True)
    assert fat.quack_dtype(a, torch.bfloat16) == torch.float32
    assert fat.quack_dtype(a, torch.float32) == torch.float64
    a.QUACK_GRAD_FP32 = False  # attention: held to assert_close against eager in fp32
    assert fat.quack_dtype(a, torch.float32) is None
    assert fat.quack_dtype(a, torch.float16) == torch.float32
    assert fat.quack_dtype(types.SimpleNamespace(), torch.float16) is None
    # an adapter's own cases in fp64 at every dtype (layernorm_linear's rows of equal values)
    b = types.SimpleNamespace(QUACK_GRAD=True, quack_fp64=lambda inputs: bool(inputs.get("flat")))
    assert fat.quack_dtype(b, torch.bfloat16, {"flat": True}) == torch.float64
    assert fat.quack_dtype(b, torch.bfloat16, {}) == torch.float32
    assert fat.quack_dtype(b, torch.bfloat16) == torch.float32


def test_dropout_rate():
    keep = torch.ones(10000, dtype=torch.bool)
    keep[:1000] = False
    runner.check_dropout_rate({"keep": keep}, {"p": 0.1})
    with pytest.raises(runner.Mismatch, match="dropout keeps 0.9000 .* want 1-p = 0.5000"):
        runner.check_dropout_rate({"keep": keep}, {"p": 0.5})
    runner.check_dropout_rate({"keep": keep[:10]}, {"p": 0.5})  # too few elements to judge


# A kernel whose programs race: each doubles its BLOCK rows of X into OUT, and with the bug
# its store mask reaches one row past its block, writing -1 into the first row of the next
# program's block. Launched in order (program 0 first, as the interpreter runs them) the
# owner of that row writes it last and the output is right; in reverse order it is wrong.
try:
    import triton
    import triton.language as tl

    @triton.jit
    def _racy_kernel(X, OUT, N, BUG: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.arange(0, 2 * BLOCK)
        r = tl.program_id(0) * BLOCK + i
        x = tl.load(X + r, mask=r < N, other=0.0)
        mine = i < BLOCK
        y = tl.where(mine, x * 2.0, -1.0)
        tl.store(OUT + r, y, mask=(r < N) & (mine | ((i == BLOCK) & BUG)))
except ImportError:  # the Go side runs these tests with the venv; by hand without Triton
    triton = None


def _racy_folder(bug):
    def fused(kernel, inp, params, poison=False):
        x = inp["x"]
        out = torch.empty_like(x)
        _racy_kernel[(triton.cdiv(x.numel(), 8),)](x, out, x.numel(), BUG=bug, BLOCK=8)
        return (out,)

    a = types.SimpleNamespace(
        fat=fat, make_inputs=lambda shapes, dtype, params, device, seed: {
            "x": torch.randn(shapes[0], generator=torch.Generator().manual_seed(seed)).to(dtype)},
        tolerance=lambda *a, **k: (1e-5, 1e-5), fused=fused,
        reference=lambda ref, inp, params: (inp["x"] * 2.0,))
    return types.SimpleNamespace(adapter=a, kernel=None, reference=None, params={}, pattern="racy")


@pytest.mark.skipif(triton is None or not fat.INTERPRET, reason="needs Triton's interpreter (TRITON_INTERPRET=1)")
def test_programs_reversed_catches_a_race():
    # the interpreter's launch order, then reversed, then restored
    assert fat.programs_reversed(True) is False
    assert fat.programs_reversed(False) is True
    saved = runner.ARGS
    runner.ARGS = runner.parse_args(["--device", "cpu", "--trials", "3"])
    try:
        case = runner.Case("traced", [[40]], "fp32")
        assert [runner.trial_reversed(case, t) for t in range(3)] in ([False, True, False], [True, False, True])
        assert runner.run_case(_racy_folder(False), case)["status"] == "pass"
        res = runner.run_case(_racy_folder(True), runner.Case("traced", [[40]], "fp32"))
        assert res["status"] == "fail", res
        assert "ran each launch's programs in reverse order" in res["message"]
        assert fat.programs_reversed(False) is False  # restored after the case
        # in launch order only (as before), the race goes unseen: one trial of a case whose
        # first trial runs in launch order
        runner.ARGS = runner.parse_args(["--device", "cpu", "--trials", "1"])
        case = next(c for c in (runner.Case(n, [[40]], "fp32") for n in ("traced", "adv-40", "strided", "small"))
                    if not runner.trial_reversed(c, 0))
        assert runner.run_case(_racy_folder(True), case)["status"] == "pass"
    finally:
        runner.ARGS = saved


def test_range_variant_spans_float16():
    """The range case gives an adapter that asks for it (RANGE_CASE) inputs from float16's
    subnormals to its largest values, signs mixed, layout kept; others get none."""
    saved = runner.CURRENT_ADAPTER
    try:
        x = torch.randn(64, 64, dtype=torch.float16).t()  # a transposed layout, kept
        runner.CURRENT_ADAPTER = types.SimpleNamespace(RANGE_CASE=True)
        out, changed = runner.transform("range", {"x": x, "bias": torch.randn(64, dtype=torch.float16)})
        y = out["x"].float().abs()
        assert changed == ["x"] and out["x"].stride() == x.stride() and out["bias"] is not None
        assert bool((y < 6.103515625e-05).any()) and bool((y > 2.0 ** 15).any()) and bool(torch.isfinite(y).all())
        assert bool((out["x"] < 0).any()) and bool((out["x"] > 0).any())
        runner.CURRENT_ADAPTER = types.SimpleNamespace()
        assert runner.transform("range", {"x": x})[1] == []
    finally:
        runner.CURRENT_ADAPTER = saved


def _scale_add(once):
    """y = 2x + r as a fused kernel's Function: its backward computes x's gradient without a
    graph (as a kernel does) and hands r the output's gradient itself (an alias, which keeps
    the output gradient's graph)."""

    def backward(ctx, dy):
        with torch.no_grad():
            dx = dy * 2.0
        return dx, dy

    if once:
        backward = torch.autograd.function.once_differentiable(backward)
    return type("ScaleAdd", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x, r: 2.0 * x + r),
        "backward": staticmethod(backward)})


def _twice_folder(once):
    fn = _scale_add(once)
    a = types.SimpleNamespace(
        fat=fat, GRAD_INPUTS=["x", "r"],
        make_inputs=lambda shapes, dtype, params, device, seed: {
            k: torch.randn(shapes[0], generator=torch.Generator().manual_seed(seed + i)).to(dtype)
            for i, k in enumerate(("x", "r"))},
        tolerance=lambda *a, **k: (1e-5, 1e-5),
        fused=lambda kernel, inp, params, autograd=False, **kw: (fn.apply(inp["x"], inp["r"]),),
        reference=lambda ref, inp, params: (2.0 * inp["x"] + inp["r"],))
    return types.SimpleNamespace(adapter=a, kernel=None, reference=None, params={}, pattern="twice")


def test_twice_catches_a_backward_without_graph():
    """grad-twice: a backward whose gradients carry no graph, beside one that carries its
    output gradient's, gives a gradient penalty's backward that silently lacks the first's
    terms (fails); marked once_differentiable, it refuses in one line (passes)."""
    saved = runner.ARGS
    runner.ARGS = runner.parse_args(["--device", "cpu", "--trials", "1"])
    try:
        case = runner.Case("grad-twice", [[8, 8]], "fp32", grad="twice")
        res = runner.run_case(_twice_folder(False), case)
        assert res["status"] == "fail" and res["mismatch"]["output"] == "second derivative x", res
        assert runner.run_case(_twice_folder(True), case)["status"] == "pass"
    finally:
        runner.ARGS = saved


def test_empty_shapes():
    """The empty-batch case: the batch dim of the operands that carry it, not a weight's."""
    assert runner.empty_shapes([[24, 40], [24, 32], [40, 32]]) == [[0, 40], [0, 32], [40, 32]]
    assert runner.empty_shapes([[2, 12, 24], [2, 12, 16], [2, 16, 24]]) == [[0, 12, 24], [0, 12, 16], [0, 16, 24]]
    assert runner.empty_shapes([[2, 2, 45, 64], [1, 1, 45, 45]]) == [[0, 2, 45, 64], [1, 1, 45, 45]]
    assert runner.empty_shapes([[40]]) is None and runner.empty_shapes([[0, 4]]) is None


def test_quack_scales_from_the_outputs_an_input_reaches():
    # x1 reaches the second output alone: autograd refuses the first output's gradient w.r.t.
    # it, which had been read as "no terms summed" (scale 0, the bound from the result alone)
    a = types.SimpleNamespace(QUACK_GRAD=True,
                              reference=lambda ref, inp, params: (inp["x0"] * 2, inp["x0"] * inp["x1"]))
    inp = {"x0": torch.tensor([[3.0, -4.0]]), "x1": torch.ones(1, 1)}
    dys = [torch.ones(1, 2), torch.ones(1, 2)]
    assert fat.quack_scales(a, None, inp, ["x1"], dys, {}, torch.float32) == [pytest.approx(5.0)]


def test_output_grads_each_takes_one_output_per_element():
    want = (torch.zeros(4, 5), torch.zeros(4, 5), torch.zeros(4, 5))
    f = types.SimpleNamespace(adapter=types.SimpleNamespace(), kernel=None)
    guard = runner.Guarded(f)
    dys = runner.output_grads(want, runner._gen(1), "each", guard)
    nonzero = torch.stack([d != 0 for d in dys])
    assert bool((nonzero.sum(0) <= 1).all()) and int(nonzero.sum()) >= 18  # randn: no exact 0s, but be safe
    flat = torch.arange(20).reshape(4, 5) % 3
    for k, d in enumerate(dys):
        assert bool((d[flat != k] == 0).all())
    assert runner.output_grads(want[:1], runner._gen(1), "each", guard) is None


def test_each_output_groups_hold_each_output_to_its_precision():
    case = types.SimpleNamespace(dy="each")
    f = types.SimpleNamespace(case=types.SimpleNamespace(OUT_TOL_DTYPES=["fp32", "bf16", "fp32"]),
                              kernel=types.SimpleNamespace(GRAD_OUTPUTS=[True, False, True]),
                              adapter=types.SimpleNamespace(KIND="pointwise"))
    want = (torch.zeros(2, 3), torch.zeros(2, 3))  # the outputs that carry a gradient: 0 and 2
    groups = runner.each_output_groups(f, case, want, torch.zeros(2, 3))
    assert [(k, dt) for k, _, dt in groups] == [(0, torch.float32), (2, torch.float32)]
    assert groups[0][1].flatten().tolist() == [True, False, True, False, True, False]
    # a bfloat16 gradient: each group at least as coarse as it
    groups = runner.each_output_groups(f, case, want, torch.zeros(2, 3, dtype=torch.bfloat16))
    assert [dt for _, _, dt in groups] == [torch.bfloat16, torch.bfloat16]
    # another layout, a broadcast gradient, or no per-output dtypes: the whole gradient at once
    assert runner.each_output_groups(f, types.SimpleNamespace(dy=None), want, torch.zeros(2, 3)) is None
    assert runner.each_output_groups(f, case, want, torch.zeros(3)) is None


def test_each_output_groups_take_a_copys_source_precision():
    """A 16-bit copy no step reads (a GEMM's cast taken): the gradient from it alone is held
    to its source's precision (OUT_GRAD_TOL_DTYPES), not the copy's own: its derivative is 1, and
    a term 0.1% off there is far outside fp32's tolerance and inside bfloat16's."""
    case = types.SimpleNamespace(dy="each")
    f = types.SimpleNamespace(case=types.SimpleNamespace(OUT_TOL_DTYPES=["fp32", "bf16"], OUT_GRAD_TOL_DTYPES=["fp32", "fp32"]),
                              kernel=types.SimpleNamespace(GRAD_OUTPUTS=[True, True]),
                              adapter=types.SimpleNamespace(KIND="pointwise"))
    want = (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bfloat16))
    groups = runner.each_output_groups(f, case, want, torch.zeros(2, 3))
    assert [(k, dt) for k, _, dt in groups] == [(0, torch.float32), (1, torch.float32)]
    del f.case.OUT_GRAD_TOL_DTYPES  # a folder without copies: the outputs' own
    groups = runner.each_output_groups(f, case, want, torch.zeros(2, 3))
    assert [(k, dt) for k, _, dt in groups] == [(0, torch.float32), (1, torch.bfloat16)]


def test_bias_check():
    """A 16-bit output rounded from the fp32 chain passes; one from a constant 0.1% off (every
    element moved a quarter of a bfloat16 unit the same way, inside the tolerance) fails,
    whatever eager's own noise; so does one biased on half its elements; an output whose
    chain names its 16-bit dtype (the reference not fp32) and a short one are not judged."""
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4000, generator=g) * 3
    want = ref.to(torch.bfloat16)  # eager: the chain rounded once
    assert fat.bias_check("y", (ref * (1 + 1e-6)).to(torch.bfloat16), want, ref) is None
    msg = fat.bias_check("y", (ref * 1.001).to(torch.bfloat16), want, ref)
    assert msg and msg.startswith("y: its error against the chain in fp32 is biased: +0.001"), msg
    half = torch.where(ref > 0, ref * 1.001, ref)
    assert fat.bias_check("y", half.to(torch.bfloat16), want, ref)
    tight = fat.tol("pointwise", torch.bfloat16)
    assert not fat.mismatches((ref * 1.001).to(torch.bfloat16), want, *tight)[0].any()  # the tolerance's blind spot
    assert fat.bias_check("y", (ref * 1.001).to(torch.bfloat16), want, ref.to(torch.bfloat16)) is None
    assert fat.bias_check("y", (ref[:32] * 1.001).to(torch.bfloat16), want[:32], ref[:32]) is None
    assert fat.bias_check("y", ref * 1.001, ref, ref) is None  # fp32: the tolerance's
    # eager as biased as the kernel: not the kernel's fault
    assert fat.bias_check("y", (ref * 1.001).to(torch.bfloat16), (ref * 1.001).to(torch.bfloat16), ref) is None
    # the noise is taken about the mean: a bias alone (every element 0.3% off, no noise) has none
    # and does not widen its own bound (about zero it would be 0.003/sqrt(n))
    signs = torch.where(torch.rand(300, generator=g) < 0.5, -1.0, 1.0)
    assert fat._bias(signs * 1.003, signs) == pytest.approx((0.003, 0.0), abs=1e-7)
    a = types.SimpleNamespace(BIAS_CHECK=True, reference=lambda r, inputs, p: (inputs["x"] * 2,))
    out, = fat.bias_reference(a, None, {"x": want, "n": 3}, {})
    assert out.dtype == torch.float32
    assert fat.bias_reference(types.SimpleNamespace(), None, {"x": want}, {}) is None


def test_bias_check_not_over_planted_inputs():
    """A kernel 0.3% off in bf16 fails the traced case by the bias check alone (inside the
    tolerance), and passes the planted case: inputs of a handful of repeated numbers, whose
    rounding errors are not independent (a right GEMM-headed kernel's gradient looked biased
    there on the H200), are not judged."""
    def fused(kernel, inp, params, poison=False):
        return ((inp["x"].float() * 2.006).to(inp["x"].dtype),)

    def planted(inputs):
        out = dict(inputs)
        out["x"] = inputs["x"].clone()
        out["x"][::2] = 0.1  # the number, in every other element
        return out, ["x"]

    a = types.SimpleNamespace(
        fat=fat, BIAS_CHECK=True, planted=planted, fused=fused,
        make_inputs=lambda shapes, dtype, params, device, seed: {
            "x": (torch.randn(shapes[0], generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)},
        tolerance=lambda *a, **k: (1e-2, 1e-2), reference=lambda ref, inp, params: (inp["x"] * 2.0,))
    folder = types.SimpleNamespace(adapter=a, kernel=None, reference=None, params={}, pattern="biased")
    saved = runner.ARGS
    runner.ARGS = runner.parse_args(["--device", "cpu", "--trials", "1"])
    try:
        traced = runner.run_case(folder, runner.Case("traced", [[4000]], "bf16"))
        assert traced["status"] == "fail" and "biased" in traced["message"], traced
        res = runner.run_case(folder, runner.Case("planted", [[4000]], "bf16", variant="planted"))
        assert res["status"] == "pass", res
    finally:
        runner.ARGS = saved


def test_eager_rounding():
    a = types.SimpleNamespace(EAGER_ROUNDING=[True, False])
    want = torch.randn(1000, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    got = want.clone()
    got[:10] = got[:10] * 1.01  # 1% of them moved: allowed
    assert fat.eager_rounding(a, 0, "y", got, want) is None
    got[:20] = want[:20] * 1.01
    msg = fat.eager_rounding(a, 0, "y", got, want)
    assert msg and msg.startswith("y: 20 of 1000 elements differ from eager's"), msg
    assert fat.eager_rounding(a, 1, "z", got, want) is None  # an output not computed as eager's
    assert fat.eager_rounding(a, 0, "y", got.float(), want.float()) is None  # fp32: the tolerance's
    assert fat.eager_rounding(types.SimpleNamespace(), 0, "y", got, want) is None


@pytest.mark.parametrize("device,ooms,want", [("cuda", 2, "pass"), ("cuda", 9, "error"), ("cpu", 1, "error")])
def test_out_of_gpu_memory_runs_again(monkeypatch, device, ooms, want):
    """On a GPU the runners share, a case that ran out of memory runs again (up to
    OOM_RETRIES more times, its note says so); on the CPU, or past the retries, the error is
    its result. Any other error is never retried."""
    calls, waits = [], []

    def once(f, case):
        calls.append(1)
        if len(calls) <= ooms:
            return {"status": "error", "message": "OutOfMemoryError: CUDA out of memory. Tried to allocate 13.09 GiB"}
        return {"status": "pass"}

    monkeypatch.setattr(runner, "_run_case", once)
    monkeypatch.setattr(runner.time, "sleep", waits.append)
    monkeypatch.setattr(runner.ARGS, "device", device)
    res = runner.run_case(None, None)
    assert res["status"] == want
    tries = 1 if device == "cpu" else min(ooms, runner.OOM_RETRIES) + 1
    assert len(calls) == tries and len(waits) == tries - 1
    assert ("out of GPU memory" in res.get("note", "")) == (tries > 1)
    calls.clear()
    monkeypatch.setattr(runner, "_run_case", lambda f, c: calls.append(1) or {"status": "error", "message": "RuntimeError: x"})
    assert runner.run_case(None, None)["status"] == "error" and len(calls) == 1


@pytest.mark.parametrize("shapes,want", [
    ([[2, 8, 3], [2, 8, 3]], [[0, 8, 3], [0, 8, 3]]),  # x and a residual
    ([[2, 8, 3], [3, 3]], [[0, 8, 3], [3, 3]]),  # a weight keeps its dims
    ([[1, 96, 1, 16], [1, 96, 1, 1]], [[0, 96, 1, 16], [1, 96, 1, 1]]),  # a conv's bias broadcasts: kept
    ([[1, 16, 8], [1, 16, 8]], [[0, 16, 8], [0, 16, 8]]),  # a batch of one: both carry it
    ([[0, 4], [0, 4]], None),
])
def test_empty_shapes(shapes, want):
    """The empty batch: x's leading dim 0, and every operand's that carries the batch; an
    operand that broadcasts against x where x's batch is 1 keeps its 1 (x [0, ...] plus it
    is what torch broadcasts), a weight its dims."""
    assert runner.empty_shapes(shapes) == want
