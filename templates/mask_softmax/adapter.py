"""Uniform test/bench interface for the mask_softmax template (see docs/templates.md).

SHAPES[0] is the scores' shape (rank 2..4); SHAPES[1], for bool and additive masks, the mask's
shape (broadcastable to the scores). params["mask_dtype"] is an additive mask's dtype (default:
the scores'; autocast adds an fp32 mask to bf16 scores) and params["out_dtype"] the probabilities'
dtype when it differs from the default (autocast's fp32 softmax). Scores are randn * 3 (large magnitudes); masks mask ~30%
of positions, and the mask's first row is fully masked (additive: -inf), so fully masked rows
are always exercised. In test mode (poison=True) with p > 0, fused() stores the kernel's
dropout mask in inputs["keep"] for the reference.
"""

import torch

import fa_testing as fat

KIND = "softmax"
OUTPUTS = ["probs"]
GRAD_INPUTS = ["x"]


def adversarial(params):
    # ragged rows, a single element, rank 2/3/4, one past a block, rows longer than one
    # interpreter block (128), a fully masked batch, sq > sk for causal (fully masked rows)
    return [
        [[2, 3, 9, 129], [2, 1, 1, 129]],
        [[1, 1, 1, 1], [1, 1, 1, 1]],
        [[3, 7, 37], [3, 1, 37]],
        [[2, 300], [2, 300]],
        [[1, 2, 5, 1500], [1, 1, 5, 1500]],
        [[2, 2, 9, 5], [2, 1, 9, 5]],
    ]


def has_backward(params):
    return params.get("p", 0.0) == 0.0


def interp_shapes(shapes):
    x = shapes[0]
    caps = [2, 2, 9, 300][-len(x):]
    xs = [min(d, c) for d, c in zip(x, caps)]
    out = [xs]
    if len(shapes) > 1:
        m = shapes[1]
        out.append([1 if md == 1 else xd for md, xd in zip(m, xs[len(xs) - len(m):])])
    return out


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, std=3.0)
    kind = params.get("mask_kind", "none")
    mask = None
    if kind in ("bool", "additive"):
        mshape = shapes[1] if len(shapes) > 1 else shapes[0]
        masked = torch.rand(list(mshape), generator=g) < 0.3
        masked.view(-1, mshape[-1])[0, :] = True  # the first mask row: fully masked
        if kind == "bool":
            mask = masked.to(device)
        else:
            add = torch.randn(list(mshape), generator=g)
            add = add.masked_fill(masked, torch.finfo(dtype).min)
            add.view(-1, mshape[-1])[0, :] = float("-inf")
            mask = add.to(device=device, dtype=fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)])
    return {"x": x, "mask": mask, "seed": 77 + int(seed)}


def _out(params):
    return fat.DTYPES[params["out_dtype"]] if params.get("out_dtype") else None


def _args(params):
    return (params.get("scale", 1.0), params.get("mask_kind", "none"), params.get("mask_fill", float("-inf")),
            params.get("p", 0.0))


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, mask, seed = inputs["x"], inputs["mask"], inputs["seed"]
    scale, kind, fill, p = _args(params)
    if (poison or autograd) and p > 0:
        inputs["keep"] = kernel.dropout_mask(x.shape, p, seed, x.device)
    if autograd:
        return (kernel.MaskSoftmaxFunction.apply(x, mask, scale, kind, fill, p, seed, _out(params)),)
    dtype = _out(params) or kernel.out_dtype(x, mask, kind)
    out = fat.poison(x.shape, dtype, x.device) if poison else None
    return (kernel.mask_softmax(x, mask, scale, kind, fill, p, seed, out=out, dtype=dtype),)


def reference(ref, inputs, params):
    scale, kind, fill, p = _args(params)
    return (ref.mask_softmax(inputs["x"], inputs["mask"], scale, kind, fill, p, keep=inputs.get("keep"),
                             dtype=_out(params)),)


def tolerance(dtype, shapes, params, grad=False):
    # an fp32 output of 16-bit scores is compared at fp32 tolerance: both sides round the
    # scaled scores to the input's type and nothing after it
    return fat.tol(KIND, _out(params) or dtype) if not grad else fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    def size(d):
        return torch.tensor([], dtype=d).element_size()

    n = 1
    for d in shapes[0]:
        n *= d
    kind = params.get("mask_kind")
    mb = 0
    if kind in ("bool", "additive") and len(shapes) > 1:
        mb = 1
        for d in shapes[1]:
            mb *= d
        mb *= 1 if kind == "bool" else size(fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)])
    ydt = _out(params)
    if ydt is None:
        ydt = dtype
        if kind == "additive" and params.get("mask_dtype"):
            ydt = torch.promote_types(dtype, fat.DTYPES[params["mask_dtype"]])
    return n * size(dtype) + mb + n * size(ydt)
