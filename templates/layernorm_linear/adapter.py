"""Uniform test/bench interface for the layernorm_linear template (see docs/templates.md).

SHAPES[0] is x ``[..., K]``, SHAPES[1] the Linear's weight ``[N, K]``; the LayerNorm has weight
and bias ``[K]``; the Linear bias (params["has_bias"]) is ``[N]``. x has a non-zero mean
(-2.3 + 0.5 randn). With a backward (LayerNormLinearFunction), the same whichever variant ran
the forward.

In test mode (``poison=True``) fused() also returns y from the other variant ("normalize" for
a "fold" case and the other way round) and tells reference() so through
``inputs["both_variants"]``: the variant is the caller's choice wherever the folder is used,
so every folder's checks run both.

Three kinds of adversarial case are about memory or values rather than shape; make_inputs and
fused recognise them by their shapes:

- FAR: x and y are views whose element offsets pass 2**31 (a row times the row stride, x's
  column stride times K and times a K step of BLOCK_K columns, y's column stride times N),
  so that 32-bit index math reads or writes the wrong elements. Their storage is reserved, not committed: only the
  viewed elements' pages are touched. 16-bit dtypes only (fp32 takes the plain layout).
- ALIAS: an ``out`` that overlaps x, and one inside the weight, must be refused (ValueError)
  before the plain call runs.
- CONSTANT: rows 0 and 2 of x are 1000 everywhere (K = 1024, and K = 100 within one block of
  the interpreter's one-pass backward), with statistics shared through ``ln_stats`` (the
  review's repro: the fold amplified the GEMM's rounding by 1/sqrt(eps) on such rows, fp32
  error 0.116); in the gradient cases the backward must use 1/sqrt(eps) for them.

The gradient cases (fused(autograd=True)) hand the kernels x through ``_grad_view``: a
column-strided view with NaN between its elements, or in a FAR case a view past 2**31.

params["conv_bias"]: the norm's input is a convolution's output with its bias (ConvNeXt's
depthwise conv before a permute to channels-last): the kernel takes that bias as
``pre_bias`` ``[K]`` (the convolution then runs without it) and the reference adds it first, as
the traced convolution's own add did; its gradient is one more of GRAD_INPUTS.
"""

import math
import mmap
import sys

import torch

import fa_testing as fat

KIND = "gemm"
OUTPUTS = ["y", "y_other_variant"]
GRAD_INPUTS = ["x", "ln_weight", "ln_bias", "weight", "bias", "pre_bias"]
# the gradients go through cuBLAS GEMMs and a LayerNorm backward that keeps fp32 where eager
# rounds, summing dgamma and dbeta in another order: compared with the chain in a higher
# precision, eager's own error the yardstick (fa_testing)
QUACK_GRAD = True
OTHER = {"fold": "normalize", "normalize": "fold"}
FAR = [[[3, 40], [5, 40]]]
ALIAS = [[[9, 40], [24, 40]]]
CONSTANT = [[[4, 1024], [24, 1024]], [[4, 100], [24, 100]]]
# rows of magnitude 1e-3 (variance ~2.5e-7, well under eps) at an M of the one-launch path
# (14 rows: the interpreter's untuned choice for M % 5 == 4, _gemm_tile): the statistics the
# GEMM kernel computes itself must use the caller's eps
SMALL = [[[14, 40], [24, 40]]]
# FAR's strides (row, column): row 2 starts past 2**31 elements in x and y; x's column 31 and
# its K step of 32 columns (the interpreter's BLOCK_K) pass 2**31, and y's column 4
X_STRIDES = (2**30 + 64, 70_000_000)
Y_STRIDES = (2**30 + 64, 2**29 + 64)
FAR_BASE = 2**31  # elements before each view: an offset that wrapped in 32 bits still lands inside


def adversarial(params):
    # ragged M/N/K first (the verifier's layout variants run it too), then the cases about
    # memory and values (cheap, and early: they kill their bugs sooner), a single row, K one
    # past a block (32), rows longer than a stats block (128); the last two meet TMA's 16-byte
    # alignment in fp16/bf16 (K and N multiples of 8), so the TMA kernel runs on ragged tiles
    # (M 33, K 72 = 2 blocks + 8, N 48)
    return [[[33, 70], [45, 70]]] + FAR + ALIAS + CONSTANT + SMALL + [
        [[1, 2], [1, 2]],
        [[1, 33], [17, 33]],
        [[2, 9, 64], [40, 64]],
        [[5, 300], [24, 300]],
        [[33, 72], [48, 72]],
        [[3, 11, 136], [24, 136]],
    ]


def has_backward(params):
    return True


def grad_shapes(params):
    """The backward's own paths and inputs: rows longer than the one-pass backward's block
    (the interpreter's MAX_BWD_K, 256: ATen's LayerNorm backward and the normalized input in
    torch ops), constant rows in both paths (their stored rstd is 0, the backward's is
    1/sqrt(eps)), and x past 2**31 elements (FAR, 16-bit dtypes)."""
    return [[[3, 5, 300], [24, 300]]] + CONSTANT + FAR


def interp_shapes(shapes):
    x, w = shapes[0], shapes[1]
    k = min(x[-1], 160)
    xs = fat.shrink(x[:-1] + [k], max_last=k, max_rows=40)
    return [xs, [min(w[0], 72), k]] + [list(s) for s in shapes[2:]]


def far_view(shape, strides, dtype, device):
    """A [rows, n] view with these strides, FAR_BASE elements into its storage, NaN where it
    is viewed. On the CPU the storage is an anonymous mapping
    with MAP_NORESERVE (reserved, not committed: only the pages written are), on CUDA
    torch.empty_strided (real memory; not torch.empty, which the verifier guards)."""
    numel = FAR_BASE + sum((d - 1) * st for d, st in zip(shape, strides)) + 1
    if torch.device(device).type == "cpu":
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(
            mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)
        base = torch.frombuffer(mmap.mmap(-1, numel * dtype.itemsize, flags=flags), dtype=dtype)
    else:
        base = torch.empty_strided((numel,), (1,), dtype=dtype, device=device)
    v = base.as_strided(tuple(shape), tuple(strides), FAR_BASE)
    v.fill_(float("nan"))
    return v


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, mean=-2.3, std=0.5)
    n, k = shapes[1]
    inputs = {
        "x": x,
        "ln_weight": fat.randn([k], dtype, device, g, mean=1.0, std=0.2),
        "ln_bias": fat.randn([k], dtype, device, g, std=0.2),
        "weight": fat.randn([n, k], dtype, device, g, std=1.0 / math.sqrt(max(k, 1))),
        "bias": fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None,
    }
    if params.get("conv_bias", False):  # of the norm's input's scale, so that it moves the rows' statistics
        inputs["pre_bias"] = fat.randn([k], dtype, device, g, std=0.5)
    if shapes in FAR and dtype.itemsize == 2:
        inputs["x"] = far_view(x.shape, X_STRIDES, dtype, device).copy_(x)
        inputs["far"] = True
    elif shapes in ALIAS:
        inputs["alias"] = True
    elif shapes in CONSTANT:
        x[0] = 1000.0
        x[2] = 1000.0
        inputs["shared_stats"] = True
        if "pre_bias" in inputs:  # one value: rows 0 and 2 of the sum stay constant
            inputs["pre_bias"].fill_(0.5)
    elif shapes in SMALL:
        x.mul_(1e-3)
    return inputs


def _args(inputs):
    return inputs["x"], inputs["ln_weight"], inputs["ln_bias"], inputs["weight"], inputs["bias"]


def _refuses(kernel, x, g, b, w, bias, eps):
    """layernorm_linear must refuse an out that overlaps x (its last element) or lies in the
    weight."""
    m, n = x.shape[0], w.shape[0]
    buf = fat.poison([x.numel() + m * n], x.dtype, x.device)
    xa = buf[:x.numel()].view(x.shape)
    xa.copy_(x)
    wbuf = fat.poison([w.numel() + m * n], w.dtype, w.device)
    wa = wbuf[:w.numel()].view(w.shape)
    wa.copy_(w)
    for xi, wi, out, what in ((xa, w, buf[x.numel() - 1:x.numel() - 1 + m * n].view(m, n), "over x's last element"),
                              (x, wa, wbuf[:m * n].view(m, n), "inside the weight")):
        try:
            kernel.layernorm_linear(xi, g, b, wi, bias, eps, out=out)
        except ValueError:
            continue
        raise AssertionError(f"layernorm_linear wrote an out {what} instead of refusing it")


def fused(kernel, inputs, params, poison=False, autograd=False):
    """variant params["variant"] ("fold" by default); the folded weights are computed on the
    first call and kept in ``inputs``, as a model folds once at load time."""
    x, g, b, w, bias = _args(inputs)
    pre = inputs.get("pre_bias")
    eps = params.get("eps", 1e-5)
    if autograd:  # the backward is the same whichever variant ran the forward
        return (kernel.layernorm_linear_train(_grad_view(x, inputs), g, b, w, bias, eps, params.get("variant", "fold"),
                                              pre_bias=pre),)
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    if inputs.get("alias"):
        _refuses(kernel, x, g, b, w, bias, eps)
    # shared statistics are the norm input's: x with the bias before the norm added
    stats = kernel.ln_stats(x if pre is None else x + pre, eps) if inputs.get("shared_stats") else None

    def out():
        if not poison:
            return None
        if inputs.get("far"):
            return far_view(shape, Y_STRIDES, x.dtype, x.device)
        return fat.poison(shape, x.dtype, x.device)

    def run(variant):
        folded = None
        if variant == "fold":
            folded = inputs.get("_folded")
            if folded is None:
                folded = inputs["_folded"] = kernel.fold_weights(g, b, w, bias)
        return kernel.layernorm_linear(x, g, b, w, bias, eps, stats=stats, out=out(), variant=variant,
                                       folded=folded, pre_bias=pre)

    variant = params.get("variant", "fold")
    ys = [run(variant)]
    if poison:
        inputs["both_variants"] = True
        ys.append(run(OTHER[variant]))
    return tuple(ys)


class _Into(torch.autograd.Function):
    """x's values in the view made(x) returns, the gradient passed straight back to x (no
    gradient of the view's storage: a FAR view's storage is 2**31 elements)."""

    @staticmethod
    def forward(ctx, x, made):
        return made(x).copy_(x)

    @staticmethod
    def backward(ctx, g):
        return g, None


def _nan_strided(x):
    """Every other element of a NaN-filled buffer, 3 elements in: a column stride of 2, NaN
    between and after the elements."""
    n = x.numel()
    buf = torch.full([2 * n + 5], float("nan"), dtype=x.dtype, device=x.device)
    strides, acc = [], 2
    for d in reversed(x.shape):
        strides.append(acc)
        acc *= d
    return buf.as_strided(x.shape, tuple(reversed(strides)), 3)


def _grad_view(x, inputs):
    """x's values, differentiably (the gradient flows back to x), where the backward reads
    them through x's strides: in a FAR case a view past 2**31 elements (X_STRIDES), else
    every other element of a NaN-filled buffer (a backward that assumes contiguous rows or
    columns, or reads past a row, reads NaN)."""
    if inputs.get("far"):
        return _Into.apply(x, lambda t: far_view(t.shape, X_STRIDES, t.dtype, t.device))
    return _Into.apply(x, _nan_strided)


def reference(ref, inputs, params):
    """Eager's chain; for the CONSTANT cases on a GPU, eager's chain on the CPU (moved back,
    differentiably): CUDA's LayerNorm does not give a row of equal values a zero variance at
    every K (at K = 100 on the H200 its fp32 output was 0.03 off, its LayerNorm weight gradient
    in fp16 and fp32 as much), where the kernels, and the CPU's LayerNorm, are exact."""
    args = _args(inputs) + (inputs.get("pre_bias"),)
    x = args[0]
    if inputs.get("shared_stats") and x.device.type != "cpu":
        cpu = [None if t is None else t.cpu() for t in args]
        y = ref.layernorm_linear(*cpu[:5], params.get("eps", 1e-5), pre_bias=cpu[5]).to(x.device)
    else:
        y = ref.layernorm_linear(*args[:5], params.get("eps", 1e-5), pre_bias=args[5])
    return (y, y) if inputs.get("both_variants") else (y,)


def quack_fp64(inputs):
    """The CONSTANT cases' gradients against the chain in fp64 (fa_testing.quack_dtype): at a
    row of equal values dx is 1/sqrt(eps) times (w dy - its mean), 1e6 times a difference of
    O(1) at BERT's eps of 1e-12, which eager's fp32 LayerNorm backward on the CPU gives as 0
    (in fp64: 4.5e6; in bf16: 2.7e8) and the kernels as the formula says."""
    return bool(inputs.get("shared_stats"))


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (m * k + n * k + m * n + n + (3 if params.get("conv_bias", False) else 2) * k)


def flops(shapes, dtype, params):
    """The GEMM's arithmetic, 2*M*N*K: the floor of a GEMM-bound chain is flops over the GEMM rate."""
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return 2 * m * n * k


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy (by both gradient GEMMs), x and the
    weight; write dx and the weight's gradient, the bias' and the LayerNorm's. (The fused
    backward also writes and reads the normalized input's gradient and the normalized input,
    which the two GEMMs need in memory.)"""
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (2 * m * n + 2 * m * k + 2 * n * k + n + (3 if params.get("conv_bias", False) else 2) * k)


def bwd_flops(shapes, dtype, params):
    """The two gradient GEMMs, dxn = dy W and dW = dy^T xn, each the forward's size."""
    return 2 * flops(shapes, dtype, params)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes): the
    weights folded in the call (variant "fold"), as a step must after each optimizer update."""
    x, g, b, w, bias = _args(inputs)
    return kernel.layernorm_linear_train(x, g, b, w, bias, params.get("eps", 1e-5), params.get("variant", "fold"),
                                         pre_bias=inputs.get("pre_bias"))


def gemm_only(inputs, params):
    """The Linear alone on an already-normalized input (cuBLAS through F.linear): the floor of
    any LayerNorm+Linear fusion in practice. The normalized input is computed once, on the
    first (untimed) call, and kept in ``inputs``."""
    xn = inputs.get("_normalized")
    if xn is None:
        x, g, b, pre = inputs["x"], inputs["ln_weight"], inputs["ln_bias"], inputs.get("pre_bias")
        if pre is not None:
            x = x + pre
        xn = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, params.get("eps", 1e-5))
        inputs["_normalized"] = xn
    return torch.nn.functional.linear(xn, inputs["weight"], inputs["bias"])
