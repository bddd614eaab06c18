"""Uniform test/bench interface for the bias_gelu template (see docs/templates.md).

SHAPES[0] is the input x (any rank); the bias, when params["has_bias"], has shape [x.shape[-1]].

In test mode (``poison=True`` or ``autograd=True``) fused() also returns y under the other
GELU (erf for a tanh case, tanh for an erf case) and tells reference() so through
``inputs["both_gelus"]``: ``approximate`` is the caller's choice wherever the folder is used,
so every folder's tests run both branches. bench.py times the traced one only.
"""


import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y", "y_other_gelu"]
GRAD_INPUTS = ["x", "bias"]
OTHER = {"none": "tanh", "tanh": "none"}
# Adversarial entries about memory rather than shape end in a marker instead of a shape (no
# tensor has a negative size), which make_inputs and fused() recognise:
# - WIDE_ROWS, WIDE_COLS: the inputs are views whose element offsets pass 2**31 along their
#   rows (columns), see wide(): 32-bit index arithmetic then reads a NaN decoy;
# - IN_PLACE: y is written over a copy of x, the in-place form the wrapper allows, after
#   fused() has checked that an output overlapping x but for one element, and an expanded
#   one (rows sharing memory), are refused.
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


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, bias = inputs["x"], inputs["bias"]
    approx = params.get("approximate", "none")
    if autograd:
        inputs["both_gelus"] = True
        return tuple(kernel.BiasGELUFunction.apply(x, bias, a) for a in (approx, OTHER[approx]))
    if not poison:
        return (kernel.bias_gelu(x, bias, approx),)
    inputs["both_gelus"] = True
    dtype = x.dtype if bias is None else torch.promote_types(x.dtype, bias.dtype)
    if inputs["in_place"] and dtype == x.dtype:
        xs, over = shifted(x)
        if xs is not None:
            refused(lambda: kernel.bias_gelu(xs, bias, approx, out=over), "an output overlapping x")
        refused(lambda: kernel.bias_gelu(x, bias, approx, out=expanded(x)), "an expanded output")
        ys = []
        for a in (approx, OTHER[approx]):
            xc = x.clone()
            ys.append(kernel.bias_gelu(xc, bias, a, out=xc))
        return tuple(ys)
    return tuple(kernel.bias_gelu(x, bias, a, out=fat.poison(x.shape, dtype, x.device))
                 for a in (approx, OTHER[approx]))


def reference(ref, inputs, params):
    approx = params.get("approximate", "none")
    ys = [ref.bias_gelu(inputs["x"], inputs["bias"], approx)]
    if inputs.get("both_gelus"):
        ys.append(ref.bias_gelu(inputs["x"], inputs["bias"], OTHER[approx]))
    return tuple(ys)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain must move: read x (+ bias), write y."""
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (2 * n + (shapes[0][-1] if params.get("has_bias", True) else 0))


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy and the saved x (+ the bias, to
    recompute x + bias), write dx (+ the bias' gradient). y's dtype is x's (the bias has it too)."""
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (3 * n + (2 * shapes[0][-1] if params.get("has_bias", True) else 0))


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes): the
    autograd.Function, the traced GELU only."""
    return kernel.BiasGELUFunction.apply(inputs["x"], inputs["bias"], params.get("approximate", "none"))
