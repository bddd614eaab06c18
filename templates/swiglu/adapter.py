"""Uniform test/bench interface for the swiglu template (see docs/templates.md).

SHAPES[0] is gate's shape; up has the same shape. make_inputs gives gate and up as the two
(non-contiguous) halves of one projection output, as ``chunk(2, -1)`` does.
"""


import torch

import fa_testing as fat

KIND = "pointwise"
OUTPUTS = ["y"]
GRAD_INPUTS = ["gate", "up"]
# Adversarial entries about memory rather than shape end in a marker instead of a shape (no
# tensor has a negative size), which make_inputs and fused() recognise:
# - WIDE_ROWS, WIDE_COLS: the inputs are views whose element offsets pass 2**31 along their
#   rows (columns), see wide(): 32-bit index arithmetic then reads a NaN decoy;
# - IN_PLACE_GATE, IN_PLACE_UP: y is written over gate (over up) of a copy of the pair laid
#   out as the two halves of one buffer, an in-place form the wrapper allows, after fused()
#   has checked that an output overlapping up but for one element, and an expanded one (rows
#   sharing memory), are refused.
WIDE_ROWS, WIDE_COLS, IN_PLACE_GATE, IN_PLACE_UP = [-1], [-2], [-3], [-4]
# adversarial shapes at interpreter size: ragged, a single element, primes, one past a block;
# then the memory cases
ADVERSARIAL = [[[129, 127]], [[1]], [[1, 1]], [[31, 37]], [[2, 3, 65]],
               [[3, 67], WIDE_ROWS], [[67, 3], WIDE_COLS], [[37, 150], IN_PLACE_GATE], [[37, 150], IN_PLACE_UP]]
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
    shape = list(shapes[0])
    both = fat.randn(shape[:-1] + [2 * shape[-1]], dtype, device, g, std=2.0)
    gate, up = both.chunk(2, dim=-1)
    if shapes[-1] in (WIDE_ROWS, WIDE_COLS):
        gate, up = wide([gate, up], cols=shapes[-1] == WIDE_COLS)
    in_place = {str(IN_PLACE_GATE): 0, str(IN_PLACE_UP): 1}.get(str(shapes[-1]))
    return {"gate": gate, "up": up, "in_place": in_place}


def fused(kernel, inputs, params, poison=False, autograd=False):
    gate, up = inputs["gate"], inputs["up"]
    if autograd:
        return (kernel.SwiGLUFunction.apply(gate, up),)
    if not poison:
        return (kernel.swiglu(gate, up),)
    dtype = torch.promote_types(gate.dtype, up.dtype)
    if inputs["in_place"] is not None:
        us, over = shifted(up)
        if us is not None:
            refused(lambda: kernel.swiglu(gate, us, out=over), "an output overlapping up")
        refused(lambda: kernel.swiglu(gate, up, out=expanded(gate)), "an expanded output")
        # a copy of the pair as the two halves of one buffer: rows of gate and up interleave
        pair = torch.cat([gate, up], dim=-1).chunk(2, dim=-1)
        return (kernel.swiglu(*pair, out=pair[inputs["in_place"]]),)
    return (kernel.swiglu(gate, up, out=fat.poison(gate.shape, dtype, gate.device)),)


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


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy and the saved gate and up, write
    their gradients."""
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return 5 * n * es


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.SwiGLUFunction.apply(inputs["gate"], inputs["up"])
