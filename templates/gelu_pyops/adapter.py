"""Uniform test/bench interface for the gelu_pyops template (see docs/templates.md).

SHAPES[0] is the input x (any rank); the bias, when params["has_bias"], has shape [x.shape[-1]].
params["out_dtype"] is y's dtype when it differs from x's (autocast: bf16 x, fp32 y).
"""


import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "bias"]
# eager's backward through the op chain rounds after every op in fp16/bf16: compare gradients
# with the fp32 chain (quack check) rather than with eager's low-precision gradients
QUACK_GRAD = True
# Adversarial entries about memory rather than shape end in a marker instead of a shape (no
# tensor has a negative size), which make_inputs and fused() recognise:
# - WIDE_ROWS, WIDE_COLS: the inputs are views whose element offsets pass 2**31 along their
#   rows (columns), see wide(): 32-bit index arithmetic then reads a NaN decoy;
# - IN_PLACE: y is written over a copy of x, the in-place form the wrapper allows, after
#   fused() has checked that an output overlapping x but for one element, and an expanded
#   one (rows sharing memory), are refused (with out_dtype, where y cannot be written over x,
#   that out=x is refused).
WIDE_ROWS, WIDE_COLS, IN_PLACE = [-1], [-2], [-3]
# adversarial shapes at interpreter size: ragged, a single element, primes, one past a block;
# then the memory cases
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]],
               [[3, 67], WIDE_ROWS], [[67, 3], WIDE_COLS], [[37, 150], IN_PLACE]]
# the memory cases' helpers (fa_testing)
wide, shifted, refused, expanded = fat.wide_views, fat.shifted_copy, fat.assert_refused, fat.expanded_like



def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0])]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, std=2.0)
    n = shapes[0][-1] if shapes[0] else 1
    bias = fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None
    if shapes[-1] in (WIDE_ROWS, WIDE_COLS):
        (x,) = wide([x], cols=shapes[-1] == WIDE_COLS)
    return {"x": x, "bias": bias, "in_place": shapes[-1] == IN_PLACE}


def _out(params):
    return fat.DTYPES[params["out_dtype"]] if params.get("out_dtype") else None


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, bias = inputs["x"], inputs["bias"]
    if autograd:
        return (kernel.NewGELUFunction.apply(x, bias, _out(params)),)
    dtype = _out(params) or (x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype))
    if not poison:
        return (kernel.new_gelu(x, bias, dtype=dtype),)
    if inputs["in_place"]:
        if dtype != x.dtype:
            try:
                kernel.new_gelu(x, bias, out=x, dtype=dtype)
            except ValueError:
                pass
            else:
                raise AssertionError(f"out=x accepted for a {dtype} y of a {x.dtype} x")
        else:
            xs, over = shifted(x)
            if xs is not None:
                refused(lambda: kernel.new_gelu(xs, bias, out=over, dtype=dtype), "an output overlapping x")
            refused(lambda: kernel.new_gelu(x, bias, out=expanded(x), dtype=dtype), "an expanded output")
            xc = x.clone()
            return (kernel.new_gelu(xc, bias, out=xc, dtype=dtype),)
    return (kernel.new_gelu(x, bias, out=fat.poison(x.shape, dtype, x.device), dtype=dtype),)


def reference(ref, inputs, params):
    return (ref.new_gelu(inputs["x"], inputs["bias"], _out(params)),)


def tolerance(dtype, shapes, params, grad=False):
    # an fp32 output of a 16-bit input is compared at fp32 tolerance (without a bias: with one,
    # eager rounds x + bias to the input's type and the kernel keeps it in fp32)
    if _out(params) and not params.get("has_bias", True) and not grad:
        return fat.tol(KIND, _out(params))
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain must move: read x (+ bias), write y."""
    es = torch.tensor([], dtype=dtype).element_size()
    ys = torch.tensor([], dtype=_out(params) or dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (n + (shapes[0][-1] if params.get("has_bias", True) else 0)) + ys * n


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy (in y's dtype) and the saved x (+ the
    bias, to recompute x + bias), write dx (+ the bias' gradient)."""
    es = torch.tensor([], dtype=dtype).element_size()
    ys = torch.tensor([], dtype=_out(params) or dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return n * (2 * es + ys) + (2 * es * shapes[0][-1] if params.get("has_bias", True) else 0)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.NewGELUFunction.apply(inputs["x"], inputs["bias"], _out(params))
