"""Uniform test/bench interface for the add_layernorm template (see docs/templates.md).

SHAPES[0] is x's shape; the residual has the same shape, or SHAPES[1] when given (a residual
that broadcasts along x's leading dims, e.g. [1, S, H] position embeddings), in
params["residual_dtype"] when
given (an fp32 residual stream plus a bf16 branch under autocast), else x's dtype; weight and
bias are [x.shape[-1]] in the sum's dtype (the promotion of the two). x has a non-zero mean
(-2.3 + 0.5 randn), as LayerNorm tests should.
"""

import torch

import fa_testing as fat

KIND = "norm"
OUTPUTS = ["sum", "y"]
GRAD_INPUTS = ["x", "residual", "weight", "bias"]
# 300 and 1500: rows longer than one interpreter block (128)
ADVERSARIAL = [[[129, 127]], [[1, 1]], [[31, 37]], [[2, 3, 129]], [[3, 300]], [[1, 1500]]]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def _rshape(shapes):
    return shapes[1] if len(shapes) > 1 else shapes[0]


def interp_shapes(shapes):
    x = fat.shrink(shapes[0], max_last=300, max_rows=16)
    if len(shapes) < 2:
        return [x]
    # a broadcast residual: x keeps 2 along each dim the residual broadcasts (so the rows
    # repeat at interpreter size too), up to 4 elsewhere; the residual keeps its 1s
    r = [1] * (len(shapes[0]) - len(shapes[1])) + list(shapes[1])
    xs = [min(d, 2) if rd == 1 else min(d, 4) for d, rd in zip(shapes[0][:-1], r[:-1])] + [x[-1]]
    rs = [1 if rd == 1 and d > 1 else s for d, rd, s in zip(shapes[0], r, xs)]
    return [xs, rs[len(rs) - len(shapes[1]):]]


def _dtypes(dtype, params):
    """(residual dtype, sum dtype)."""
    rd = fat.DTYPES[params["residual_dtype"]] if params.get("residual_dtype") else dtype
    return rd, torch.promote_types(dtype, rd)


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    rd, sd = _dtypes(dtype, params)
    x = fat.randn(shapes[0], dtype, device, g, mean=-2.3, std=0.5)
    r = fat.randn(_rshape(shapes), rd, device, g)
    n = shapes[0][-1]
    w = fat.randn([n], sd, device, g, mean=1.0, std=0.2)
    b = fat.randn([n], sd, device, g, std=0.2)
    return {"x": x, "residual": r, "weight": w, "bias": b}


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, r, w, b = inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"]
    eps = params.get("eps", 1e-5)
    if autograd:
        return kernel.AddLayerNormFunction.apply(x, r, w, b, eps)
    out = None
    if poison:
        dt = torch.promote_types(x.dtype, r.dtype)
        out = (fat.poison(x.shape, dt, x.device), fat.poison(x.shape, dt, x.device))
    return kernel.add_layer_norm(x, r, w, b, eps, out=out)


def reference(ref, inputs, params):
    return ref.add_layer_norm(inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"],
                              params.get("eps", 1e-5))


def tolerance(dtype, shapes, params, grad=False):
    atol, rtol = fat.tol(KIND, dtype)
    if grad and dtype == torch.float32:
        return 1e-4, 1e-4  # d_weight / d_bias sum over rows
    if grad:
        return 5e-2, 5e-2  # CPU ATen LN backward uses bf16/fp16-rounded mean/rstd
    return atol, rtol


def nbytes(shapes, dtype, params):
    """x and the residual read, the sum and y written (in the sum's dtype), weight and bias."""
    rd, sd = _dtypes(dtype, params)
    size = lambda t: torch.tensor([], dtype=t).element_size()  # noqa: E731
    n = rn = 1
    for d in shapes[0]:
        n *= d
    for d in _rshape(shapes):
        rn *= d
    return n * (size(dtype) + 2 * size(sd)) + rn * size(rd) + 2 * shapes[0][-1] * size(sd)
