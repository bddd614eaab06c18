"""Uniform test/bench interface for the layernorm_linear template (see docs/templates.md).

SHAPES[0] is x ``[..., K]``, SHAPES[1] the Linear's weight ``[N, K]``; the LayerNorm has weight
and bias ``[K]``; the Linear bias (params["has_bias"]) is ``[N]``. x has a non-zero mean
(-2.3 + 0.5 randn). Forward only.
"""

import math

import torch

import fa_testing as fat

KIND = "gemm"
OUTPUTS = ["y"]
GRAD_INPUTS = []


def adversarial(params):
    # ragged M/N/K, a single row, K one past a block (32), rows longer than a stats block (128);
    # the last three meet TMA's 16-byte alignment in fp16/bf16 (K and N multiples of 8), so
    # the TMA kernel runs on ragged tiles (M 33, K 72 = 2 blocks + 8, N 48)
    return [
        [[33, 70], [45, 70]],
        [[1, 2], [1, 2]],
        [[1, 33], [17, 33]],
        [[2, 9, 64], [40, 64]],
        [[5, 300], [24, 300]],
        [[33, 72], [48, 72]],
        [[3, 11, 136], [24, 136]],
    ]


def has_backward(params):
    return False


def interp_shapes(shapes):
    x, w = shapes[0], shapes[1]
    k = min(x[-1], 160)
    xs = fat.shrink(x[:-1] + [k], max_last=k, max_rows=40)
    return [xs, [min(w[0], 72), k]] + [list(s) for s in shapes[2:]]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, mean=-2.3, std=0.5)
    n, k = shapes[1]
    return {
        "x": x,
        "ln_weight": fat.randn([k], dtype, device, g, mean=1.0, std=0.2),
        "ln_bias": fat.randn([k], dtype, device, g, std=0.2),
        "weight": fat.randn([n, k], dtype, device, g, std=1.0 / math.sqrt(max(k, 1))),
        "bias": fat.randn([n], dtype, device, g) if params.get("has_bias", True) else None,
    }


def _args(inputs):
    return inputs["x"], inputs["ln_weight"], inputs["ln_bias"], inputs["weight"], inputs["bias"]


def fused(kernel, inputs, params, poison=False, autograd=False):
    """variant params["variant"] ("fold" by default); the folded weights are computed on the
    first call and kept in ``inputs``, as a model folds once at load time."""
    x, g, b, w, bias = _args(inputs)
    shape = tuple(x.shape[:-1]) + (w.shape[0],)
    out = fat.poison(shape, x.dtype, x.device) if poison else None
    variant = params.get("variant", "fold")
    folded = None
    if variant == "fold":
        folded = inputs.get("_folded")
        if folded is None:
            folded = inputs["_folded"] = kernel.fold_weights(g, b, w, bias)
    return (kernel.layernorm_linear(x, g, b, w, bias, params.get("eps", 1e-5), out=out, variant=variant,
                                    folded=folded),)


def reference(ref, inputs, params):
    return (ref.layernorm_linear(*_args(inputs), params.get("eps", 1e-5)),)


def tolerance(dtype, shapes, params, grad=False):
    return fat.tol(KIND, dtype)


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return es * (m * k + n * k + m * n + n + 2 * k)


def flops(shapes, dtype, params):
    """The GEMM's arithmetic, 2*M*N*K: the floor of a GEMM-bound chain is flops over the GEMM rate."""
    m = 1
    for d in shapes[0][:-1]:
        m *= d
    n, k = shapes[1]
    return 2 * m * n * k


def gemm_only(inputs, params):
    """The Linear alone on an already-normalized input (cuBLAS through F.linear): the floor of
    any LayerNorm+Linear fusion in practice. The normalized input is computed once, on the
    first (untimed) call, and kept in ``inputs``."""
    xn = inputs.get("_normalized")
    if xn is None:
        x, g, b = inputs["x"], inputs["ln_weight"], inputs["ln_bias"]
        xn = torch.nn.functional.layer_norm(x, (x.shape[-1],), g, b, params.get("eps", 1e-5))
        inputs["_normalized"] = xn
    return torch.nn.functional.linear(xn, inputs["weight"], inputs["bias"])
