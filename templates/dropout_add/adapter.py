"""Uniform test/bench interface for the dropout_add template (see docs/templates.md).

SHAPES[0] is x's shape; the residual has the same shape, in params["residual_dtype"] when
given (an fp32 residual stream plus a bf16 branch under autocast; y then has the promoted
dtype), else x's dtype; the bias (params["has_bias"]) is [x.shape[-1]] in x's dtype. inputs["seed"] is the dropout seed. In test mode (poison=True) fused() stores
the kernel's keep-mask in inputs["keep"] so the reference applies the same mask.
"""

import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "residual", "bias"]
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]]]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0])]


def _dtypes(dtype, params):
    """(residual dtype, output dtype): params["residual_dtype"] when given (an fp32 residual
    stream plus a bf16 branch under autocast), else x's dtype; y has their promotion."""
    rd = fat.DTYPES[params["residual_dtype"]] if params.get("residual_dtype") else dtype
    return rd, torch.promote_types(dtype, rd)


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    rd, _ = _dtypes(dtype, params)
    x = fat.randn(shapes[0], dtype, device, g)
    r = fat.randn(shapes[0], rd, device, g)
    n = shapes[0][-1]
    b = fat.randn([n], dtype, device, g) if params.get("has_bias", False) else None
    return {"x": x, "residual": r, "bias": b, "seed": 1000 + int(seed)}


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, r, b, seed = inputs["x"], inputs["residual"], inputs["bias"], inputs["seed"]
    p = params.get("p", 0.0)
    if poison or autograd:
        inputs["keep"] = kernel.dropout_mask(x.shape, p, seed, x.device) if p > 0 else None
    if autograd:
        return (kernel.DropoutAddFunction.apply(x, r, b, p, seed, True),)
    out = fat.poison(x.shape, kernel._out_dtype(x, r, b), x.device) if poison else None
    return (kernel.dropout_add(x, r, b, p, seed, True, out=out),)


def reference(ref, inputs, params):
    return (ref.dropout_add(inputs["x"], inputs["residual"], inputs["bias"], params.get("p", 0.0), True,
                            keep=inputs.get("keep")),)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """x (and b) and the residual read, y written, each in its dtype; no mask (the kernel
    regenerates it from the seed)."""
    rd, od = _dtypes(dtype, params)
    size = lambda t: torch.tensor([], dtype=t).element_size()  # noqa: E731
    n = 1
    for d in shapes[0]:
        n *= d
    bias = shapes[0][-1] * size(dtype) if params.get("has_bias", False) else 0
    return n * (size(dtype) + size(rd) + size(od)) + bias
