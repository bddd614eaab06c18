"""fa_testing's lighter interpreter (``_lighter_interpreter``) computes what Triton's own does.

Under ``TRITON_INTERPRET=1`` importing fa_testing replaces two pieces of Triton 3.6's
interpreter: a nested ``@triton.jit`` call no longer patches ``triton.language`` again when
the launch around it has, and the numpy dtype table is built once. These tests run kernels
with nested helpers both ways (the replaced pieces put back for the second run) and compare
bits, check that a launch still leaves ``triton.language`` as it found it, that a helper
seeing a language module the launch did not patch still patches it, and that the dtype table
answers as 3.6's for every type; and that templates' kernels (forward and backward:
dots, reductions, broadcasts, casts, masks, dropout) give the same bits as in a process whose
interpreter is Triton's own throughout (``FUSEADVISE_PLAIN_INTERPRETER=1``).
"""

import pathlib
import sys

import pytest
import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "_common"))
import fa_testing as fat  # noqa: E402

pytestmark = pytest.mark.skipif(not (fat.INTERPRET and triton.__version__.startswith("3.6.")),
                                reason="needs TRITON_INTERPRET=1 and Triton 3.6")

from triton.runtime import interpreter  # noqa: E402


@triton.jit
def _inner(x):
    return tl.exp(x) * 0.5 + tl.math.rsqrt(tl.abs(x) + 1.0)


@triton.jit
def _outer(x, y):
    return _inner(x) - tl.maximum(x, y) + tl.sum(y, axis=0)


@triton.jit
def _nested_kernel(X, Y, OUT, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m, other=0.0).to(tl.float32)
    y = tl.load(Y + offs, mask=m, other=0.0).to(tl.float32)
    tl.store(OUT + offs, _outer(x, y).to(OUT.dtype.element_ty), mask=m)


def _run(x, y):
    out = torch.empty_like(x)
    _nested_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out


class _Original:
    """Triton's own pieces while active; counts _patch_lang's calls."""

    def __enter__(self):
        get_np_dtype, call = interpreter._fa_original
        self.saved = (interpreter._get_np_dtype, interpreter.InterpretedFunction.__call__)
        interpreter._get_np_dtype = get_np_dtype
        interpreter.InterpretedFunction.__call__ = call
        return self

    def __exit__(self, *exc):
        interpreter._get_np_dtype, interpreter.InterpretedFunction.__call__ = self.saved


class _CountPatches:
    def __enter__(self):
        self.calls = 0
        self.patch = interpreter._patch_lang

        def counted(fn):
            self.calls += 1
            return self.patch(fn)

        interpreter._patch_lang = counted
        return self

    def __exit__(self, *exc):
        interpreter._patch_lang = self.patch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_same_bits_fewer_patches(dtype):
    assert interpreter._fa_lighter
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, generator=g).to(dtype)
    y = torch.randn(37, generator=g).to(dtype)
    _run(x, y)  # tl.sum's own patch of tl.core is never restored (Triton's way): done here
    with _CountPatches() as lighter:
        got = _run(x, y)
    with _Original(), _CountPatches() as own:
        want = _run(x, y)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(got.view(bits), want.view(bits))
    # the launch's patch only; Triton's own patches again at each nested call of each of
    # the three programs (_outer, _inner, tl.sum)
    assert lighter.calls == 1
    assert own.calls == 1 + 3 * 3


def test_launch_restores_language():
    _run(torch.ones(5), torch.ones(5))
    # (tl.core, patched by tl.sum's nested call and not restored, stays so in 3.6 itself)
    assert tl.core.is_builtin(tl.load)
    assert tl.core.is_builtin(tl.tensor.__add__)
    assert tl.core.is_builtin(tl.math.exp)


_FRESH = """
import sys
sys.path[:0] = [{here!r}, {common!r}]
import torch
import triton.language as tl
from triton.runtime import interpreter
import fa_testing
import test_interpreter as t

calls = []
patch = interpreter._patch_lang
interpreter._patch_lang = lambda fn: calls.append(fn.__name__) or patch(fn)
x = torch.linspace(-3, 3, 37)
first = t._run(x, x.flip(0))
second = t._run(x, x.flip(0))
print(calls, tl.core.is_builtin(tl.core.load), torch.equal(first, second))
"""


def test_helper_seeing_an_unpatched_module():
    # In a fresh process: the kernel sees tl, tl.sum (a jit function of tl.standard) sees
    # tl.core, which the launch did not patch, so tl.sum's call patches it (once: 3.6 never
    # restores it, and the lighter interpreter then finds it patched)
    import subprocess

    here = pathlib.Path(__file__).resolve().parent
    script = _FRESH.format(here=str(here), common=str(here / "_common"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[-2] == "['_nested_kernel', 'sum', '_nested_kernel'] False True"


def test_dtype_table_as_triton_builds_it():
    own, _ = interpreter._fa_original
    types = [tl.int1, tl.float16, tl.float32, tl.float64, tl.int8, tl.uint8, tl.int16, tl.uint16,
             tl.int32, tl.uint32, tl.int64, tl.uint64, tl.bfloat16, tl.float8e5, tl.float8e5b16,
             tl.float8e4nv, tl.float8e4b8, tl.float8e4b15]
    types += [tl.pointer_type(t) for t in types] + [tl.block_type(t, [4, 8]) for t in types]
    types += [tl.block_type(tl.pointer_type(tl.float16), [16])]
    for t in types:
        assert interpreter._get_np_dtype(t) == own(t), t


# Runs templates' kernels forward and backward at small shapes and saves every result; run by
# test_same_bits_as_a_plain_interpreter in two fresh processes, one with Triton's own interpreter
_TEMPLATES = """
import pathlib, sys
sys.path[:0] = [{common!r}]
import torch
import fa_testing as fat
from triton.runtime import interpreter

here = pathlib.Path({here!r})
k = {{p: fat.load_sibling(here / p / "kernel.py", "kernel") for p in
     ("attention", "layernorm_linear", "mask_softmax", "add_layernorm")}}
g = torch.Generator().manual_seed(0)
def rnd(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_()
out = {{"lighter": bool(getattr(interpreter, "_fa_lighter", False))}}
def keep(name, y, *xs):
    y = y if isinstance(y, (tuple, list)) else (y,)
    y = [t for t in y if t is not None]
    grads = torch.autograd.grad(sum((t.float() * (i + 1)).sum() for i, t in enumerate(y)), xs, allow_unused=True)
    out[name] = [t.detach() for t in y] + [t for t in grads if t is not None]

q, kk, v = (rnd(1, 2, 33, 32, dtype=torch.float16) for _ in range(3))
keep("attention", k["attention"].attention(q, kk, v, scale=0.125, mask_kind="causal", p=0.1, seed=3), q, kk, v)
x, ln_w, ln_b = rnd(3, 40, 48, dtype=torch.bfloat16), rnd(48), rnd(48)
w, b = rnd(24, 48, dtype=torch.bfloat16), rnd(24, dtype=torch.bfloat16)
keep("layernorm_linear", k["layernorm_linear"].layernorm_linear_train(x, ln_w, ln_b, w, b), x, ln_w, ln_b, w, b)
s, m = rnd(2, 3, 9, 129, dtype=torch.float16), torch.rand(2, 1, 1, 129, generator=g) < 0.3
keep("mask_softmax", k["mask_softmax"].MaskSoftmaxFunction.apply(s, m, 0.5, "bool", float("-inf"), 0.1, 5), s)
a, r, w2, b2 = rnd(5, 300), rnd(5, 300), rnd(300), rnd(300)
keep("add_layernorm", k["add_layernorm"].add_layer_norm_train(a, r, w2, b2), a, r, w2, b2)
torch.save(out, sys.argv[1])
"""


def test_same_bits_as_a_plain_interpreter(tmp_path):
    import os
    import subprocess

    here = pathlib.Path(__file__).resolve().parent
    script = _TEMPLATES.format(here=str(here), common=str(here / "_common"))
    got = {}
    for plain in (False, True):
        env = dict(os.environ, FUSEADVISE_PLAIN_INTERPRETER="1" if plain else "0")
        path = tmp_path / f"{plain}.pt"
        subprocess.run([sys.executable, "-c", script, str(path)], env=env, check=True)
        got[plain] = torch.load(path)
    assert got[False].pop("lighter") and not got[True].pop("lighter")
    assert got[False].keys() == got[True].keys() == {"attention", "layernorm_linear", "mask_softmax", "add_layernorm"}
    for name, ts in got[False].items():
        want = got[True][name]
        assert len(ts) == len(want) > 1, name
        for i, (a, b) in enumerate(zip(ts, want)):
            assert a.dtype == b.dtype and a.shape == b.shape, (name, i)
            bits = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
            assert torch.equal(a.view(bits), b.view(bits)), (name, i)
