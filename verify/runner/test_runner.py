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
    out, changed = runner.transform("specials", {"x": x})
    assert changed == ["x"] and int(torch.isnan(out["x"]).sum()) == 1 and float(out["x"].view(-1)[-1]) == -math.inf
    m = torch.zeros(3, 5, dtype=torch.bool)
    out, changed = runner.transform("masked_rows", {"x": x, "mask": m})
    assert changed == ["mask"] and bool(out["mask"][0].all()) and not bool(out["mask"][1].any())
    assert runner.transform("masked_rows", {"x": x})[1] == []


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


def test_quack_check():
    want32 = torch.tensor([1.0, 2.0, 3.0])
    eager = torch.tensor([1.01, 2.0, 3.0])
    ok, _, _ = runner.quack_check(torch.tensor([1.015, 2.0, 3.0]), eager, want32)
    assert ok  # 0.015 <= 2 * 0.01 + 1e-6
    ok, note, first = runner.quack_check(torch.tensor([1.0, 2.05, 3.0]), eager, want32)
    assert not ok and first[0] == [1] and "bound" in note


def test_dropout_rate():
    keep = torch.ones(10000, dtype=torch.bool)
    keep[:1000] = False
    runner.check_dropout_rate({"keep": keep}, {"p": 0.1})
    with pytest.raises(runner.Mismatch, match="dropout keeps 0.9000 .* want 1-p = 0.5000"):
        runner.check_dropout_rate({"keep": keep}, {"p": 0.5})
    runner.check_dropout_rate({"keep": keep[:10]}, {"p": 0.5})  # too few elements to judge
