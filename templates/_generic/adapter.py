"""Uniform test/bench interface of a generic-chain folder (see docs/templates.md).

The folder's kernel.py and reference.py are rendered from one op program (codes of the op
table in fuseadvise's ``program`` package and validated numbers); case.py holds the program's
shapes and dtypes: the main shape (SHAPES[0]), each input's dtype and which of the main
dims it has (INPUTS: name, dtype, one flag per trailing dim, False where the input
broadcasts), each output's name, dtype and shape (OUTPUTS). Every value's dtype is fixed by
the program (casts included), so the folder runs at its traced dtype only (DTYPES).

Training (case.BACKWARD: a pointwise program): kernel.FusedFunction, whose backward is one
fused kernel from the op table's derivatives. The gradient checks (fused(autograd=True),
train()) return only the outputs that carry a gradient (case.GRAD_OUTPUTS: eager's bool
outputs, and float ones computed from no float input, have none, and autograd refuses a
gradient for them), and tell reference() so through ``inputs["_grad_outputs"]``. The fused
backward computes in fp32 where eager rounds every gradient to its tensor's dtype, and sums a
broadcast input's gradient in its own order, so a folder's gradients are held to eager's own
error against the chain in a higher precision (QUACK_GRAD: fp32 for 16-bit folders, fp64 for
fp32 ones), plus reordering noise (fa_testing.quack_bound).
"""

import torch

import fa_testing as fat

case = fat.load_sibling(__file__, "case")

KIND = case.KIND
OUTPUTS = [name for name, _, _ in case.OUTPUTS]
DTYPES = [case.DTYPE]
NAMES = [name for name, _, _ in case.INPUTS]
GRAD_INPUTS = list(getattr(case, "GRAD_INPUTS", []))
QUACK_GRAD = True  # the quack check (fa_testing, the verifier): 16-bit folders vs fp32
# fp32 folders too, against the chain in fp64: a broadcast input's gradient (a bias, a
# per-channel scale) is summed over up to millions of elements in another order than eager's
# (per-program partial sums, fp32 atomics), and a sum that nearly cancels is off by more than
# an elementwise tolerance relative to itself, while no less right
QUACK_GRAD_FP32 = True


def adversarial(params):
    return case.ADVERSARIAL


def has_backward(params):
    return bool(getattr(case, "BACKWARD", False))


def interp_shapes(shapes):
    return [fat.shrink(shapes[0])]


def input_shape(main, keep):
    """An input's shape for a main shape: the main dims it has, 1 where it broadcasts."""
    off = len(main) - len(keep)
    return [main[off + j] if k else 1 for j, k in enumerate(keep)]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    inputs = {}
    for name, dt, keep in case.INPUTS:
        shape = input_shape(shapes[0], keep)
        if dt == "bool":
            t = torch.rand(shape, generator=g) < 0.5
            inputs[name] = t.to(device)
        else:
            inputs[name] = fat.randn(shape, fat.DTYPES[dt], device, g, std=2.0)
    return inputs


def _grad_only(outs, kernel):
    return tuple(o for o, g in zip(outs, kernel.GRAD_OUTPUTS) if g)


def fused(kernel, inputs, params, poison=False, autograd=False):
    xs = [inputs[n] for n in NAMES]
    if autograd:
        inputs["_grad_outputs"] = kernel.GRAD_OUTPUTS
        return _grad_only(kernel.FusedFunction.apply(*xs), kernel)
    if not poison:
        return kernel.fused(*xs)
    outs = kernel.empty_outputs(*xs)
    for o in outs:
        o.fill_(float("nan") if o.dtype.is_floating_point else True)
    return kernel.fused(*xs, out=outs)


def reference(ref, inputs, params):
    outs = tuple(ref.chain(*[inputs[n] for n in NAMES]))
    grad = inputs.get("_grad_outputs")
    return outs if grad is None else tuple(o for o, g in zip(outs, grad) if g)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes): the
    outputs that carry a gradient, through kernel.FusedFunction."""
    inputs["_grad_outputs"] = kernel.GRAD_OUTPUTS
    return _grad_only(kernel.FusedFunction.apply(*[inputs[n] for n in NAMES]), kernel)


def tolerance(dtype, shapes, params, grad=False):
    # the program's least precise dtype sets the tolerance, whatever the main one is
    return fat.tol(KIND, fat.DTYPES[case.TOL_DTYPE])


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain moves: each input read once, each output written once."""
    main = shapes[0]
    total = 0
    for _, dt, keep in case.INPUTS:
        n = 1
        for d in input_shape(main, keep):
            n *= d
        total += n * _size(dt)
    for _, dt, kind in case.OUTPUTS:
        n = 1
        for d in (main if kind == "full" else main[:-1]):
            n *= d
        total += n * _size(dt)
    return total


def _size(dt):
    return 1 if dt == "bool" else torch.tensor([], dtype=fat.DTYPES[dt]).element_size()
