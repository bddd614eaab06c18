"""Uniform test/bench interface for the add_layernorm template (see docs/templates.md).

SHAPES[0] is x's shape; the residual has the same shape, or SHAPES[1] when given (a residual
that broadcasts along x's leading dims, e.g. [1, S, H] position embeddings), in
params["residual_dtype"] when given (an fp32 residual stream plus a bf16 branch under
autocast), else x's dtype; weight and bias are [x.shape[-1]] in the sum's dtype (the
promotion of the two). x has a non-zero mean (-2.3 + 0.5 randn), as LayerNorm tests should.

Two kinds of adversarial case are about memory rather than shape (the verifier's layout
variants do not reach them); make_inputs recognises them by their shapes:

- FAR: x and the residual are transposed views whose element offsets pass 2**31, so that
  32-bit ``cols * stride`` arithmetic reads the wrong elements. Their storage is
  reserved, not committed: only the viewed elements' pages are touched (about 1 MB).
- IN_PLACE: s is written over (a copy of) x, or of the residual, the in-place forms the
  wrapper allows; fused() first checks that outputs overlapping an input partially, a y over
  the sum and an expanded s are refused.

Each at a row that fits one interpreter block (100) and one that does not (299, 301).

- NCHW_VIEWS: x and the residual are the [B, H, W, C] views of contiguous NCHW tensors (C
  moved last, what add_layer_norm(dim=1) and the training path hand the kernel for an NCHW
  input): no [rows, N] view, so the kernel reads them in place in tiles of positions
  (_add_layernorm_cf_fwd); their positions span several interpreter tiles with a ragged last.

params["conv_bias"]: the residual is a convolution's bias (ConvNeXt's stem: the conv's own
add, then a permute to channels-last and the norm over C), SHAPES[1] [1, C, 1, 1]: drawn at
a bias's scale (std 0.5), added in x's type as the convolution added it.

params["out_dtype"]: y's type where it is not the sum's: the GEMM's 16-bit type where y's one
reader is a GEMM that autocast casts it for (the kernel writes the cast value: eager's y cast
to it), or fp32 for autocast's layer_norm of a 16-bit sum.

params["norm_dim"] = "1": a channels-first norm (timm's LayerNorm2d) over C of x [B, C, ...];
weight and bias are [C]. x and the residual are channels_last, as the convolutions around a
LayerNorm2d leave them (the trace's strides); the shapes in NCHW (CHANNELS_FIRST_NCHW) are made
contiguous instead, so that the permuted view the kernel reads has no [rows, C] form (read in
place in tiles of positions, or past the channels a tile holds, through a copy).
"""


import torch

import fa_testing as fat

KIND = "norm"
OUTPUTS = ["sum", "y"]
GRAD_INPUTS = ["x", "residual", "weight", "bias"]
# 16-bit gradients are compared with the fp32 chain (quack check: within twice eager's own
# error) rather than with eager's: the CPU's 16-bit LayerNorm backward rounds mean and rstd to
# the input's type, so its d_weight can be further from the fp32 result than the fused
# backward's fp32 one (seen: 0.07 apart on a sum of 30 terms)
QUACK_GRAD = True
# No "negative" case: x and the residual both -(|x|*64 + 1024) sum to about -2150 with a
# spread of about 54 (a folded normal), and an fp32 norm of that loses 1e-5 of its result to
# the mean's cancellation in eager as in the kernel (both 1.3e-5 from each other); "large"
# (+1024, spread 90) holds the cancellation at the tolerance, and the sign does not matter
# to a norm
NEGATIVE_CASE = False
FAR = [[[3, 100]], [[2, 299]]]
IN_PLACE = [[[4, 100]], [[3, 301]]]  # s over x, s over the residual
NCHW_VIEWS = [[[2, 5, 3, 7]], [[3, 3, 3, 129]]]  # 15 positions of 7 channels, 9 of 129
# 300 and 1500: rows longer than one interpreter block (128)
ADVERSARIAL = [[[129, 127]], [[1, 1]], [[31, 37]], [[2, 3, 129]], [[3, 300]], [[1, 1500]]] + FAR + IN_PLACE + NCHW_VIEWS
# channels-first: a channel count past one interpreter block (129, 300), one channel, odd
# spatial sizes, 3-D and 5-D; the NCHW-contiguous ones are read in place in tiles of positions,
# up to 256 channels under the interpreter (1024 on a GPU), through a copy past that (300)
CHANNELS_FIRST_NCHW = [[[2, 7, 3, 5]], [[1, 130, 2, 3]], [[2, 300, 1, 3]]]
ADVERSARIAL_CHANNELS_FIRST = [[[3, 129, 2, 3]], [[2, 1, 3, 3]], [[1, 37, 5, 7]], [[2, 300, 1, 2]], [[3, 17, 11]],
                              [[1, 9, 2, 3, 2]]] + CHANNELS_FIRST_NCHW


def norm_dim(params):
    """The normalized dim: -1 (params["norm_dim"] "-1" or absent), or 1 ("1", channels-first)."""
    d = params.get("norm_dim") or "-1"
    if d not in ("-1", "1"):
        raise ValueError(f"add_layernorm: norm_dim={d!r} (want \"-1\" or \"1\")")
    return int(d)


def adversarial(params):
    return ADVERSARIAL_CHANNELS_FIRST if norm_dim(params) == 1 else ADVERSARIAL


def has_backward(params):
    return True


def grad_shapes(params):
    """The gradient through the forward that reads NCHW inputs in place (NCHW_VIEWS, or with
    norm_dim 1 an NCHW x): its mean and rstd, per position, are what the backward reads."""
    return [CHANNELS_FIRST_NCHW[0]] if norm_dim(params) == 1 else [NCHW_VIEWS[0]]


def _rshape(shapes):
    return shapes[1] if len(shapes) > 1 else shapes[0]


def interp_shapes(shapes, params=None):
    if params is not None and norm_dim(params) == 1:
        # channels-first: the channels kept (up to 300), the other dims shrunk to 16 positions
        x = shapes[0]
        pos = fat.shrink([x[0]] + list(x[2:]) + [1], max_last=1, max_rows=16)[:-1]
        xs = [pos[0], min(x[1], 300)] + pos[1:]
        return [xs] + ([[1 if d == 1 else s for d, s in zip(shapes[1], xs)]] if len(shapes) > 1 else [])
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


def _out(params):
    """y's dtype (params["out_dtype"]), None for the sum's."""
    return fat.DTYPES[params["out_dtype"]] if params.get("out_dtype") else None


def _channels_last(t):
    """t with the same values, its dim 1 laid out last in memory (channels_last for 4-D)."""
    return t.movedim(1, -1).contiguous().movedim(-1, 1)


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    rd, sd = _dtypes(dtype, params)
    x = fat.randn(shapes[0], dtype, device, g, mean=-2.3, std=0.5)
    r = fat.randn(_rshape(shapes), rd, device, g, std=0.5 if params.get("conv_bias", False) else 1.0)
    n = shapes[0][-1]
    if norm_dim(params) == 1:
        n = shapes[0][1]
        if shapes not in CHANNELS_FIRST_NCHW:
            x, r = _channels_last(x), _channels_last(r)
    w = fat.randn([n], sd, device, g, mean=1.0, std=0.2)
    b = fat.randn([n], sd, device, g, std=0.2)
    inputs = {"x": x, "residual": r, "weight": w, "bias": b}
    if shapes in FAR:
        inputs["x"], inputs["residual"] = fat.far_view(x), fat.far_view(r)
    elif shapes in NCHW_VIEWS:
        inputs["x"], inputs["residual"] = nchw_view(x), nchw_view(r)
    elif shapes in IN_PLACE:
        inputs["in_place"] = "x" if shapes == IN_PLACE[0] else "residual"
    return inputs


def nchw_view(t):
    """t [B, ..., C] with the same values, laid out as a contiguous [B, C, ...] tensor seen with
    C moved last (no [rows, C] view: the positions at stride 1, the channels at stride H * W)."""
    return t.movedim(-1, 1).contiguous().movedim(1, -1)




def fused(kernel, inputs, params, poison=False, autograd=False):
    x, r, w, b = inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"]
    eps, dim = params.get("eps", 1e-5), norm_dim(params)
    yd = _out(params)
    if autograd:
        return kernel.add_layer_norm_train(x, r, w, b, eps, dim=dim, y_dtype=yd)
    if inputs.get("in_place"):
        return _in_place(kernel, x, r, w, b, eps, inputs["in_place"], yd)
    out = None
    if poison:
        dt = torch.promote_types(x.dtype, r.dtype)
        if dim == 1:  # channels_last outputs, as the kernel writes them
            shape = [x.shape[0]] + list(x.shape[2:]) + [x.shape[1]]
            out = tuple(fat.poison(shape, t, x.device).movedim(-1, 1) for t in (dt, yd or dt))
        else:
            out = (fat.poison(x.shape, dt, x.device), fat.poison(x.shape, yd or dt, x.device))
    return kernel.add_layer_norm(x, r, w, b, eps, out=out, dim=dim, y_dtype=yd)


def _in_place(kernel, x, r, w, b, eps, over, yd=None):
    """s written over a copy of x (over="x") or of the residual, y poisoned. First, outputs
    the wrapper must refuse: s one row off that operand (a partial overlap), y over the sum,
    y one row off the operand, an s whose rows share memory (an expanded view). In place needs
    the sum's dtype: when the operand has another, the other operand is taken."""
    dt = torch.promote_types(x.dtype, r.dtype)
    if (x if over == "x" else r).dtype != dt:
        over = "residual" if over == "x" else "x"
    rows = x.shape[0]
    buf = fat.poison([rows + 1] + list(x.shape[1:]), dt, x.device)
    op, shifted = buf[:rows], buf[1:]  # the operand's copy, and a view one row off it
    op.copy_(x if over == "x" else r)
    args = (op, r) if over == "x" else (x, op)
    y = fat.poison(x.shape, yd or dt, x.device)
    expanded = fat.poison(x.shape[-1:], dt, x.device).expand(x.shape)
    for out, what in (((shifted, y), "s one row off an input"), ((op, op), "y over the sum"),
                      ((fat.poison(x.shape, dt, x.device), shifted), "y one row off an input"),
                      ((expanded, y), "s with rows sharing memory")):
        try:
            kernel.add_layer_norm(*args, w, b, eps, out=out, y_dtype=yd)
        except ValueError:
            continue
        raise AssertionError(f"add_layer_norm wrote {what} instead of refusing it")
    s = (x if over == "x" else r).clone()
    return kernel.add_layer_norm(*((s, r) if over == "x" else (x, s)), w, b, eps, out=(s, y), y_dtype=yd)


def reference(ref, inputs, params):
    s, y = ref.add_layer_norm(inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"],
                              params.get("eps", 1e-5), dim=norm_dim(params))
    yd = _out(params)
    return s, (y if yd is None else y.to(yd))  # the cast autocast makes in the GEMM that reads y


def tolerance(dtype, shapes, params, grad=False):
    """The outputs' tolerance (the gradients are held to the quack check: QUACK_GRAD)."""
    return fat.tol(KIND, dtype)


def output_tolerances(dtype, shapes, params):
    """The sum's tolerance, and y's at the less precise of the case's type and y's own."""
    yd = _out(params)
    less = dtype if yd is None or torch.finfo(yd).eps <= torch.finfo(dtype).eps else yd
    return [fat.tol(KIND, dtype), fat.tol(KIND, less)]


def nbytes(shapes, dtype, params):
    """x and the residual read, the sum (in the sum's dtype) and y (in its own) written, weight
    and bias."""
    rd, sd = _dtypes(dtype, params)
    yd = _out(params) or sd
    size = lambda t: torch.tensor([], dtype=t).element_size()  # noqa: E731
    n = rn = 1
    for d in shapes[0]:
        n *= d
    for d in _rshape(shapes):
        rn *= d
    c = shapes[0][1] if norm_dim(params) == 1 else shapes[0][-1]
    return n * (size(dtype) + size(sd) + size(yd)) + rn * size(rd) + 2 * c * size(sd)


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read the gradients of both outputs (the
    sum's in the sum's dtype, y's in y's), the saved sum, its mean and rstd (fp32, one a row)
    and the weight; write dx, the weight's and the bias' gradients, and the residual's: the
    same tensor as dx when the dtypes match and nothing broadcasts (no bytes), else written
    in the residual's dtype at its shape (a broadcast residual's sums the repeats)."""
    rd, sd = _dtypes(dtype, params)
    yd = _out(params) or sd
    size = lambda t: torch.tensor([], dtype=t).element_size()  # noqa: E731
    n = rn = 1
    for d in shapes[0]:
        n *= d
    for d in _rshape(shapes):
        rn *= d
    c = shapes[0][1] if norm_dim(params) == 1 else shapes[0][-1]
    rows = n // c if c else 0
    dr = 0 if rn == n and rd == dtype else rn * size(rd)
    return n * (2 * size(sd) + size(yd) + size(dtype)) + dr + 8 * rows + 3 * c * size(sd)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.add_layer_norm_train(inputs["x"], inputs["residual"], inputs["weight"], inputs["bias"],
                                       params.get("eps", 1e-5), dim=norm_dim(params), y_dtype=_out(params))
