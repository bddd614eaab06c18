"""Uniform test/bench interface for the linear_gelu template (see docs/templates.md).

SHAPES[0] is x ``[..., K]``, SHAPES[1] the weight ``[N, K]``; the bias (params["has_bias"]) is
``[N]``. With a backward (LinearGELUFunction). Weights are scaled by 1/sqrt(K) so outputs stay O(1).

In test mode (``poison=True``) fused() also returns y under the other GELU (tanh for an erf
case, erf for a tanh case) and tells reference() so through ``inputs["both_gelus"]``: the
kernel's ``approximate`` is the caller's choice wherever the folder is used, so every
folder's checks run both branches of the epilogue. bench.py times the traced one only.

Two kinds of adversarial case are about memory rather than shape (the verifier's layout
variants do not reach them); make_inputs and fused recognise them by their shapes:

- FAR: x and y are transposed views whose element offsets pass 2**31 (x's column stride times
  K, K's steps of BLOCK_K columns, y's column stride times N), so that 32-bit index math
  reads or writes the wrong elements. Their storage is reserved, not committed: only the
  viewed elements' pages are touched. 16-bit dtypes only (fp32 takes the plain layout).
- ALIAS: an ``out`` that overlaps x, and one inside the weight, must be refused
  (ValueError) before the plain call runs.
"""

import math
import mmap
import sys

import torch

import fa_testing as fat

KIND = "gemm"
OUTPUTS = ["y", "y_other_gelu"]
GRAD_INPUTS = ["x", "weight", "bias"]
# the gradients go through the fused forward's pre-activation and cuBLAS GEMMs in low
# precision: compare with the fp32 chain, eager's own error the yardstick (fa_testing)
QUACK_GRAD = True
OTHER = {"none": "tanh", "tanh": "none"}
FAR = [[[3, 40], [5, 40]]]
ALIAS = [[[9, 40], [24, 40]]]
# FAR's strides (row, column): row 2 starts past 2**31 elements in x and y; x's column 31 and
# its K step of 32 columns (the interpreter's BLOCK_K) pass 2**31, and y's column 4
X_STRIDES = (2**30 + 64, 70_000_000)
Y_STRIDES = (2**30 + 64, 2**29 + 64)
FAR_BASE = 2**31  # elements before each view: an offset that wrapped in 32 bits still lands inside


def adversarial(params):
    # ragged M/N/K first (the verifier's layout variants run it too), then the cases about
    # memory (cheap, and early: they kill their bugs sooner), a single row, K one past a block
    # (32 in the interpreter), a 3-D input; the last two meet TMA's 16-byte alignment in
    # fp16/bf16 (K and N multiples of 8), so the TMA kernel runs on ragged tiles (M 33, K 72 =
    # 2 blocks + 8, N 48)
    return [[[33, 70], [45, 70]]] + FAR + ALIAS + [
        [[1, 1], [1, 1]],
        [[1, 33], [17, 33]],
        [[2, 9, 64], [40, 64]],
        [[37, 129], [31, 129]],
        [[33, 72], [48, 72]],
        [[3, 11, 136], [24, 136]],
    ]


def has_backward(params):
    return True


def grad_shapes(params):
    """A training forward through the library path (cuBLAS writes the saved pre-activation,
    the GELU pass reads it): under the interpreter the buckets of M 32, 128, ... take it, and
    the other gradient cases (the traced rows, at most 40, and 33) do not. M = 18 over 2 x 9,
    a ragged last tile of the pass."""
    return [[[2, 9, 64], [40, 64]]]


def interp_shapes(shapes):
    x, w = shapes[0], shapes[1]
    k = min(x[-1], 96)
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
    x = fat.randn(shapes[0], dtype, device, g)
    n, k = shapes[1]
    w = fat.randn([n, k], dtype, device, g, std=1.0 / math.sqrt(max(k, 1)))
    b = fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None
    inputs = {"x": x, "weight": w, "bias": b}
    if shapes in FAR and dtype.itemsize == 2:
        inputs["x"] = far_view(x.shape, X_STRIDES, dtype, device).copy_(x)
        inputs["far"] = True
    elif shapes in ALIAS:
        inputs["alias"] = True
    return inputs


def _refuses(kernel, x, w, b, approx):
    """linear_gelu must refuse an out that overlaps x (its first rows) or lies in the weight."""
    m, n = x.shape[0], w.shape[0]
    buf = fat.poison([m * x.shape[1] + m * n], x.dtype, x.device)
    xa = buf[:x.numel()].view(x.shape)
    xa.copy_(x)
    wbuf = fat.poison([w.numel() + m * n], w.dtype, w.device)
    wa = wbuf[:w.numel()].view(w.shape)
    wa.copy_(w)
    for args, out, what in (((xa, w), buf[x.numel() - 1:x.numel() - 1 + m * n].view(m, n), "over x's last element"),
                            ((x, wa), wbuf[:m * n].view(m, n), "inside the weight")):
        try:
            kernel.linear_gelu(*args, b, approx, out=out)
        except ValueError:
            continue
        raise AssertionError(f"linear_gelu wrote an out {what} instead of refusing it")


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    approx = params.get("approximate", "none")
    if autograd:  # both GELUs' backward, as the forward checks both
        inputs["both_gelus"] = True
        return tuple(kernel.LinearGELUFunction.apply(x, w, b, a) for a in (approx, OTHER[approx]))
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    if inputs.get("alias"):
        _refuses(kernel, x, w, b, approx)

    def out():
        if not poison:
            return None
        if inputs.get("far"):
            return far_view(shape, Y_STRIDES, x.dtype, x.device)
        return fat.poison(shape, x.dtype, x.device)

    ys = [kernel.linear_gelu(x, w, b, approx, out=out())]
    if poison:
        inputs["both_gelus"] = True
        ys.append(kernel.linear_gelu(x, w, b, OTHER[approx], out=out()))
    return tuple(ys)


def reference(ref, inputs, params):
    approx = params.get("approximate", "none")
    ys = [ref.linear_gelu(inputs["x"], inputs["weight"], inputs["bias"], approx)]
    if inputs.get("both_gelus"):
        ys.append(ref.linear_gelu(inputs["x"], inputs["weight"], inputs["bias"], OTHER[approx]))
    return tuple(ys)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (m * k + n * k + m * n + n)


def flops(shapes, dtype, params):
    """The GEMM's arithmetic, 2*M*N*K: the floor of a GEMM-bound chain is flops over the GEMM rate."""
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return 2 * m * n * k


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy, the saved pre-activation, x and the
    weight; write dx, the weight's and the bias' gradients (the GELU's gradient feeds both
    GEMMs without a round trip through memory)."""
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (2 * m * n + 2 * m * k + 2 * n * k + n)


def bwd_flops(shapes, dtype, params):
    """The two gradient GEMMs, dx = dz W and dW = dz^T x, each the forward's size."""
    return 2 * flops(shapes, dtype, params)


def gemm_only(inputs, params):
    """The Linear alone (cuBLAS through F.linear): what the fused kernel is measured against."""
    return torch.nn.functional.linear(inputs["x"], inputs["weight"], inputs["bias"])


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.LinearGELUFunction.apply(inputs["x"], inputs["weight"], inputs["bias"],
                                           params.get("approximate", "none"))


def library_ops(inputs, params):
    """Library calls computing this case's forward (bench times them beside the kernel), keyed
    by name, and the reason each one that cannot express the case is left out.

    "addmm_gelu": ``torch._addmm_activation(bias, x2d, weight.t(), use_gelu=True)``, the
    bias and GELU in the GEMM's epilogue. Its GELU depends on the device: on CUDA it is
    cuBLASLt's GELU_BIAS epilogue, the tanh approximation (where cuBLASLt is not used, ATen
    applies ``gelu(approximate="tanh")`` after the GEMM to match it: aten/src/ATen/native/cuda/
    Blas.cpp), and on the CPU ``gelu`` without approximation, erf (addmm_activation_out_cpu;
    test_kernel.py checks the CPU's). A case whose GELU is the other one is refused, as is one
    without a bias (the epilogue adds one). It has no derivative (``derivative for
    aten::_addmm_activation is not implemented``): bench records it refused in training."""
    x, w, b = inputs["x"], inputs["weight"], inputs["bias"]
    approx = params.get("approximate", "none")
    computes = "tanh" if x.device.type == "cuda" else "none"
    names = {"tanh": "the tanh approximation", "none": "erf"}
    if b is None:
        return {}, {"addmm_gelu": "torch._addmm_activation adds a bias in its epilogue; this Linear has none"}
    if approx != computes:
        return {}, {"addmm_gelu": f"torch._addmm_activation's GELU on {x.device.type} is {names[computes]}; "
                                  f"this case's GELU is {names.get(approx, approx)} (approximate={approx!r})"}

    def addmm_gelu(inp):
        x, w = inp["x"], inp["weight"]
        y = torch._addmm_activation(inp["bias"], x.reshape(-1, x.shape[-1]), w.t(), use_gelu=True)
        return y.view(*x.shape[:-1], w.shape[0])

    return {"addmm_gelu": addmm_gelu}, {}
