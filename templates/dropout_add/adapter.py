"""Uniform test/bench interface for the dropout_add template (see docs/templates.md).

SHAPES[0] is x's shape; the residual has the same shape, in params["residual_dtype"] when
given (an fp32 residual stream plus a bf16 branch under autocast; y then has the promoted
dtype), else x's dtype; the bias (params["has_bias"]) is [x.shape[-1]] in x's dtype.
inputs["seed"] is the dropout seed. In test mode (poison=True) fused() stores the kernel's
keep-mask in inputs["keep"] so the reference applies the same mask.

params["gemm_bias"]: the bias is a GEMM's, which the traced model added in the GEMM's
epilogue (the fused kernel takes it; the GEMM runs without). The reference then runs the
chain as traced: its forward reads the GEMM's output with the bias (_x_gemm: x + b rounded
once as the epilogue rounds it, made once for the inputs: no pass of its own in bench's
timed calls) and its backward sums the bias gradient over the rows, as eager's GEMM backward
does (_EpilogueBias).
"""


import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "residual", "bias"]
# 16-bit gradients are compared with the fp32 chain (quack check: within twice eager's own
# error) rather than with eager's: with an fp32 residual eager rounds dy to x's type and then
# the dropout's product again, the kernel rounds once, and over a bias gradient's rows those
# differences add up (0.19 apart over 129 bf16 rows)
QUACK_GRAD = True
# Adversarial entries about memory rather than shape end in a marker instead of a shape (no
# tensor has a negative size), which make_inputs and fused() recognise:
# - WIDE_ROWS, WIDE_COLS: the inputs are views whose element offsets pass 2**31 along their
#   rows (columns), see wide(): 32-bit index arithmetic then reads a NaN decoy;
# - IN_PLACE_X, IN_PLACE_RESIDUAL: y is written over a copy of x (of the residual; of the
#   other one where y has not that input's dtype), an in-place form the wrapper allows, after
#   fused() has checked that an output overlapping that input but for one element, and an
#   expanded one (rows sharing memory), are refused.
WIDE_ROWS, WIDE_COLS, IN_PLACE_X, IN_PLACE_RESIDUAL = [-1], [-2], [-3], [-4]
# adversarial shapes at interpreter size: ragged, a single element, primes, one past a block;
# then the memory cases
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]],
               [[3, 67], WIDE_ROWS], [[67, 3], WIDE_COLS], [[37, 150], IN_PLACE_X], [[37, 150], IN_PLACE_RESIDUAL]]
# the memory cases' helpers (fa_testing)
wide, shifted, refused, expanded = fat.wide_views, fat.shifted_copy, fat.assert_refused, fat.expanded_like



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
    if shapes[-1] in (WIDE_ROWS, WIDE_COLS):
        cols = shapes[-1] == WIDE_COLS
        x, r = wide([x, r], cols) if x.dtype == r.dtype else (wide([x], cols)[0], wide([r], cols)[0])
    in_place = {str(IN_PLACE_X): "x", str(IN_PLACE_RESIDUAL): "residual"}.get(str(shapes[-1]))
    return {"x": x, "residual": r, "bias": b, "seed": 1000 + int(seed), "in_place": in_place}


def _x_gemm(inputs):
    """x + b as a GEMM's epilogue rounds it, made once for these x and b and kept in inputs
    (as a tuple: no input variant, upcast or copy of the inputs takes it for an input tensor;
    a new x or b, or one changed in place, makes it again): bench's timed eager calls reuse it,
    as the traced model got it from the GEMM."""
    x, b = inputs["x"], inputs["bias"]
    key = (x.data_ptr(), x._version, tuple(x.shape), x.dtype, b.data_ptr(), b._version, b.dtype)
    kept = inputs.get("_x_gemm")
    if kept is None or kept[0] != key:
        kept = inputs["_x_gemm"] = (key, (x.detach().float() + b.detach().float()).to(x.dtype))
    return kept[1]


class _EpilogueBias(torch.autograd.Function):
    """x + b as a GEMM's epilogue adds it: the forward hands on x_gemm (the sum, made
    beforehand by _x_gemm, as a view: no kernel), the backward gives x the gradient and b its
    sum over the rows (eager's GEMM backward's bias gradient)."""

    @staticmethod
    def forward(ctx, x, b, x_gemm):
        return x_gemm.view_as(x_gemm)

    @staticmethod
    def backward(ctx, dz):
        return dz, dz.reshape(-1, dz.shape[-1]).sum(0), None


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, r, b, seed = inputs["x"], inputs["residual"], inputs["bias"], inputs["seed"]
    p = params.get("p", 0.0)
    if poison or autograd:
        inputs["keep"] = kernel.dropout_mask(x.shape, p, seed, x.device) if p > 0 else None
    if autograd:
        return (kernel.DropoutAddFunction.apply(x, r, b, p, seed, True),)
    if not poison:
        return (kernel.dropout_add(x, r, b, p, seed, True),)
    dtype = kernel._out_dtype(x, r, b)
    over = inputs["in_place"]
    if over:
        if (x if over == "x" else r).dtype != dtype:
            over = "residual" if over == "x" else "x"
        op = x if over == "x" else r
        ops, shift = shifted(op)
        if ops is not None:
            refused(lambda: kernel.dropout_add(*((ops, r) if over == "x" else (x, ops)), b, p, seed, True, out=shift),
                    f"an output overlapping {over}")
        refused(lambda: kernel.dropout_add(x, r, b, p, seed, True, out=expanded(op)), "an expanded output")
        c = op.clone()
        return (kernel.dropout_add(*((c, r) if over == "x" else (x, c)), b, p, seed, True, out=c),)
    return (kernel.dropout_add(x, r, b, p, seed, True, out=fat.poison(x.shape, dtype, x.device)),)


def reference(ref, inputs, params):
    x, b = inputs["x"], inputs["bias"]
    if b is not None and params.get("gemm_bias", False):
        x, b = _EpilogueBias.apply(x, b, _x_gemm(inputs)), None  # the bias in the GEMM, as traced
    return (ref.dropout_add(x, inputs["residual"], b, params.get("p", 0.0), True, keep=inputs.get("keep")),)


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


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy (y's dtype), write dx (x's dtype,
    the mask regenerated from the seed) and the bias' gradient. The residual's gradient is
    dy itself (no bytes) unless the residual's dtype differs from y's (an fp32 x with a 16-bit
    residual): then dy is also written in the residual's dtype."""
    rd, od = _dtypes(dtype, params)
    size = lambda t: torch.tensor([], dtype=t).element_size()  # noqa: E731
    n = 1
    for d in shapes[0]:
        n *= d
    bias = shapes[0][-1] * size(dtype) if params.get("has_bias", False) else 0
    return n * (size(od) + size(dtype) + (size(rd) if rd != od else 0)) + bias


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes). Under
    the gradient checks (inputs["_test"]) it also leaves the mask for the reference."""
    x, r, b, seed = inputs["x"], inputs["residual"], inputs["bias"], inputs["seed"]
    p = params.get("p", 0.0)
    if inputs.get("_test") and p > 0:
        inputs["keep"] = kernel.dropout_mask(x.shape, p, seed, x.device)
    return kernel.DropoutAddFunction.apply(x, r, b, p, seed, True)
