"""Uniform test/bench interface for the swiglu template (see docs/templates.md).

SHAPES[0] is gate's shape; up has the same shape. make_inputs gives gate and up as the two
(non-contiguous) halves of one projection output, as ``chunk(2, -1)`` does.
"""

import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["gate", "up"]
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]]]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0])]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    shape = list(shapes[0])
    both = fat.randn(shape[:-1] + [2 * shape[-1]], dtype, device, g, std=2.0)
    gate, up = both.chunk(2, dim=-1)
    return {"gate": gate, "up": up}


def fused(kernel, inputs, params, poison=False, autograd=False):
    gate, up = inputs["gate"], inputs["up"]
    if autograd:
        return (kernel.SwiGLUFunction.apply(gate, up),)
    out = fat.poison(gate.shape, torch.promote_types(gate.dtype, up.dtype), gate.device) if poison else None
    return (kernel.swiglu(gate, up, out=out),)


def reference(ref, inputs, params):
    return (ref.swiglu(inputs["gate"], inputs["up"]),)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return 3 * n * es
