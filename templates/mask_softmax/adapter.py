"""Uniform test/bench interface for the mask_softmax template (see docs/templates.md).

SHAPES[0] is the scores' shape (rank 2..4); SHAPES[1], for bool and additive masks, the mask's
shape (broadcastable to the scores). params["mask_dtype"] is an additive mask's dtype (default:
the scores'; autocast adds an fp32 mask to bf16 scores) and params["out_dtype"] the probabilities'
dtype when it differs from the default (autocast's fp32 softmax). Scores are randn * 3 (large magnitudes); masks mask ~30%
of positions, and the mask's first row is fully masked (additive: -inf), so fully masked rows
are always exercised. In test mode (poison=True) with p > 0, fused() stores the kernel's
dropout mask in inputs["keep"] for the reference.

The gradient cases (fused(autograd=True)) check the backward with dropout and without in every
folder, since p is the caller's choice wherever the folder is used: fused() returns the
probabilities at the traced p and at the other one (GRAD_P when the traced p is 0, else 0),
and tells reference() so through inputs["other_p"] (with the kernel's mask for it in
inputs["keep_other"]).

Two kinds of adversarial case are about memory rather than shape (the verifier's layout
variants do not reach them); make_inputs recognises them by their shapes:

- FAR: the scores are a transposed view whose element offsets pass 2**31, so that 32-bit
  ``cols * stride`` arithmetic reads the wrong elements (the last column, the one past 2**31,
  is raised and unmasked, so that misreading it changes every probability of its row). Its storage is
  reserved, not committed: only the viewed elements' pages are touched (about 1 MB).
- IN_PLACE: the probabilities are written over (a copy of) the scores, the in-place form the
  wrapper allows, when they have the scores' dtype (the fp32 runs of fp16 cases); fused()
  first checks that an output one row off the scores, and an expanded one, are refused.

Each at a row that fits one interpreter block (100) and one that does not (299, 301).

And one about values: EXTREME, rows longer than one interpreter block (200; the long-row
kernel's online pass), whose row 1 has every score below -87, where exp underflows to 0 (with an
additive mask: the row fully masked by finfo.min, as HF masks, which eager gives as uniform;
with the other kinds: scores around -200 / scale), and whose row 4 has every score exactly 0
(mask 0 / not masked): a running max started at 0 instead of -inf, or a running sum that
drops the lanes whose running max is 0, gives them NaN or inf.
"""


import torch

import fa_testing as fat

KIND = "softmax"
OUTPUTS = ["probs"]
GRAD_INPUTS = ["x"]
FAR = [[[3, 100], [3, 100]], [[2, 299], [2, 299]]]  # the mask's first row is fully masked: two rows
IN_PLACE = [[[4, 100], [4, 100]], [[3, 301], [3, 301]]]
EXTREME = [[[2, 3, 200], [2, 3, 200]]]  # rows 1 (every score below -87) and 4 (every score 0)
GRAD_P = 0.2  # the gradient cases' dropout where the traced p is 0


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
    ] + FAR + IN_PLACE + EXTREME


def has_backward(params):
    return True


def grad_shapes(params):
    """Gradient cases beyond the traced shape and the first adversarial one (the verifier's):
    21 short rows, 16 to a program in the backward's [ROWS, BLOCK_N] tiles, the last tile
    ragged (the traced rows and adv[0]'s are longer than one interpreter block: one row per
    program)."""
    return [[[3, 7, 37], [3, 1, 37]]]


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
        if masked.numel():  # (an empty batch has no row)
            masked.view(-1, mshape[-1])[0, :] = True  # the first mask row: fully masked
        if kind == "bool":
            mask = masked.to(device)
        else:
            add = torch.randn(list(mshape), generator=g)
            add = add.masked_fill(masked, torch.finfo(dtype).min)
            if add.numel():
                add.view(-1, mshape[-1])[0, :] = float("-inf")
            mask = add.to(device=device, dtype=fat.DTYPES[params.get("mask_dtype") or fat.name(dtype)])
    inputs = {"x": x, "mask": mask, "seed": 77 + int(seed)}
    if shapes in FAR:
        # the last column, the one past 2**31, raised and unmasked (but in the fully masked
        # first row): a wrong read of it moves its rows by more than the 16-bit tolerances
        x[:, -1] += 4.0 / params.get("scale", 1.0)
        if mask is not None:
            mask[1:, -1] = False if mask.dtype == torch.bool else 0.0
        inputs["x"] = fat.far_view(x)
    elif shapes in IN_PLACE:
        inputs["in_place"] = True
    elif shapes in EXTREME:
        n = shapes[0][-1]
        rows = x.view(-1, n)
        if kind == "additive":  # row 1 fully masked by finfo.min: every score about -3e38 (or -65504)
            mask.view(-1, n)[1] = torch.finfo(dtype).min
        else:  # row 1 all below -87 after scaling: from -250 to -200
            u = torch.rand(n, generator=g) * 50.0 + 200.0
            rows[1] = (-u / (params.get("scale", 1.0) or 1.0)).to(device=device, dtype=dtype)
        rows[4] = 0.0  # row 4: every score exactly 0, unmasked
        if mask is not None:
            mask.view(-1, n)[4] = False if mask.dtype == torch.bool else 0.0
    return inputs




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
        other = inputs["other_p"] = 0.0 if p > 0 else GRAD_P
        if other > 0:
            inputs["keep_other"] = kernel.dropout_mask(x.shape, other, seed, x.device)
        return tuple(kernel.MaskSoftmaxFunction.apply(x, mask, scale, kind, fill, q, seed, _out(params))
                     for q in (p, other))
    dtype = _out(params) or kernel.out_dtype(x, mask, kind)
    if inputs.get("in_place") and dtype == x.dtype:
        return (_in_place(kernel, x, mask, scale, kind, fill, p, seed),)
    out = fat.poison(x.shape, dtype, x.device) if poison else None
    return (kernel.mask_softmax(x, mask, scale, kind, fill, p, seed, out=out, dtype=dtype),)


def _in_place(kernel, x, mask, scale, kind, fill, p, seed):
    """The probabilities written over a copy of x. First, outputs the wrapper must refuse:
    one row off x (a partial overlap), and one whose rows share memory (an expanded view)."""
    rows = x.shape[0]
    buf = fat.poison([rows + 1] + list(x.shape[1:]), x.dtype, x.device)
    xc, shifted = buf[:rows], buf[1:]  # x's copy, and a view one row off it
    xc.copy_(x)
    expanded = fat.poison(x.shape[-1:], x.dtype, x.device).expand(x.shape)
    for out, what in ((shifted, "an output one row off x"), (expanded, "an output with rows sharing memory")):
        try:
            kernel.mask_softmax(xc, mask, scale, kind, fill, p, seed, out=out, dtype=x.dtype)
        except ValueError:
            continue
        raise AssertionError(f"mask_softmax wrote {what} instead of refusing it")
    y = x.clone()
    return kernel.mask_softmax(y, mask, scale, kind, fill, p, seed, out=y, dtype=x.dtype)


def reference(ref, inputs, params):
    scale, kind, fill, p = _args(params)
    ys = [ref.mask_softmax(inputs["x"], inputs["mask"], scale, kind, fill, p, keep=inputs.get("keep"),
                           dtype=_out(params))]
    if "other_p" in inputs:  # the gradient cases: the other p too
        ys.append(ref.mask_softmax(inputs["x"], inputs["mask"], scale, kind, fill, inputs["other_p"],
                                   keep=inputs.get("keep_other"), dtype=_out(params)))
    return tuple(ys)


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


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy and the saved probabilities (y's
    dtype; before dropout, whose mask is regenerated from the seed) and a bool mask (its
    masked positions get no gradient; an additive mask has no part in it), write dx."""
    def size(d):
        return torch.tensor([], dtype=d).element_size()

    n = 1
    for d in shapes[0]:
        n *= d
    mb = 0
    if params.get("mask_kind") == "bool" and len(shapes) > 1:
        mb = 1
        for d in shapes[1]:
            mb *= d
    ydt = _out(params)
    if ydt is None:
        ydt = dtype
        if params.get("mask_kind") == "additive" and params.get("mask_dtype"):
            ydt = torch.promote_types(dtype, fat.DTYPES[params["mask_dtype"]])
    return 2 * n * size(ydt) + mb + n * size(dtype)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes), at the
    traced p. Under the gradient checks (inputs["_test"]) it also leaves the dropout mask for
    the reference."""
    x, mask, seed = inputs["x"], inputs["mask"], inputs["seed"]
    scale, kind, fill, p = _args(params)
    if inputs.get("_test") and p > 0:
        inputs["keep"] = kernel.dropout_mask(x.shape, p, seed, x.device)
    return kernel.MaskSoftmaxFunction.apply(x, mask, scale, kind, fill, p, seed, _out(params))
