"""Uniform test/bench interface for the rmsnorm_pyops template (see docs/templates.md).

SHAPES[0] is x's shape; the weight is [x.shape[-1]] in x's dtype.
"""

import torch

import fa_testing as fat

KIND = "norm"
OUTPUTS = ["y"]
GRAD_INPUTS = ["x", "weight"]
# eager's weight gradient is a bf16/fp16 row-sum of per-op-rounded products (one element of
# 127 off by 0.03 at 129x127 bf16); the fused backward reduces in fp32: compare gradients with
# the fp32 chain (quack check) rather than with eager's low-precision ones
QUACK_GRAD = True
# 300 and 1500: rows longer than one interpreter block (128)
ADVERSARIAL = [[[129, 127]], [[1, 1]], [[31, 37]], [[2, 3, 129]], [[3, 300]], [[1, 1500]]]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0], max_last=300, max_rows=16)]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, mean=0.5, std=1.5)
    w = fat.randn([shapes[0][-1]], dtype, device, g, mean=1.0, std=0.2)
    return {"x": x, "weight": w}


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, w = inputs["x"], inputs["weight"]
    eps, casting = params.get("eps", 1e-6), params.get("casting", "llama")
    if autograd:
        return (kernel.RMSNormFunction.apply(x, w, eps, casting),)
    out = fat.poison(x.shape, kernel.out_dtype(x, w, casting), x.device) if poison else None
    return (kernel.rms_norm(x, w, eps, casting, out=out),)


def reference(ref, inputs, params):
    return (ref.rms_norm(inputs["x"], inputs["weight"], params.get("eps", 1e-6), params.get("casting", "llama")),)


def tolerance(dtype, shapes, params, grad=False):
    atol, rtol = fat.tol(KIND, dtype)
    if grad and dtype == torch.float32:
        return 1e-4, 1e-4  # d_weight sums over rows
    return atol, rtol


def nbytes(shapes, dtype, params):
    es = torch.tensor([], dtype=dtype).element_size()
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (2 * n + shapes[0][-1])
