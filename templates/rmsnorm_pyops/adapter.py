"""Uniform test/bench interface for the rmsnorm_pyops template (see docs/templates.md).

SHAPES[0] is x's shape; the weight is [x.shape[-1]] in x's dtype.

params["out_dtype"] ("bf16" or "fp16" on an fp32 case): y written in that type, eager's fp32 y
cast to it, as autocast casts it for each GEMM that reads it (LlamaRMSNorm's output under
autocast, read by q/k/v or gate/up); the gradient reaching the backward is in that type.

Two kinds of adversarial case are about memory rather than shape (the verifier's layout
variants do not reach them); make_inputs recognises them by their shapes:

- FAR: x is a transposed view whose element offsets pass 2**31, so that 32-bit
  ``cols * stride`` arithmetic reads the wrong elements. Its storage is
  reserved, not committed: only the viewed elements' pages are touched (about 1 MB).
- IN_PLACE: y is written over (a copy of) x, the in-place form the wrapper allows; fused()
  first checks that outputs overlapping x or the weight, and an expanded y, are refused.

Each at a row that fits one interpreter block (100) and one that does not (299, 301).

The gradient cases (fused(autograd=True)) hand the kernels x, the weight and dy (the gradient
reaching the backward) each in a NaN-filled buffer, 3 elements in and with 2 NaN right after
it, as the verifier's forward ``offset`` variant lays out the inputs: a backward that reads one
element past a row or the weight (a ``cols <= N`` load mask) puts NaN in its sums, whatever
lies in memory there.
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
FAR = [[[3, 100]], [[2, 299]]]
IN_PLACE = [[[4, 100]], [[3, 301]]]
# 300 and 1500: rows longer than one interpreter block (128)
ADVERSARIAL = [[[129, 127]], [[1, 1]], [[31, 37]], [[2, 3, 129]], [[3, 300]], [[1, 1500]]] + FAR + IN_PLACE


def DTYPES(params):
    """The dtypes the verifier runs the case at: fp32 alone where y is written cast (only an
    fp32 y is: eager's 16-bit y is what its GEMMs read as it is)."""
    return ["fp32"] if params.get("out_dtype") else ["fp32", "fp16", "bf16"]


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def grad_shapes(params):
    """Gradient cases beyond the traced shape and the first adversarial one (the verifier's):
    37 rows of 70, the one-pass backward's row tiles (rows of 128 columns, 70 of them real) in
    groups with a ragged last one; 70 columns in a block of 128, so that a mean over the block
    instead of the row is far off (the traced rows are longer than one interpreter block and
    take the chunked kernels; adv[0]'s 127 columns nearly fill their block)."""
    return [[[37, 70]]]


def interp_shapes(shapes):
    return [fat.shrink(shapes[0], max_last=300, max_rows=16)]


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    x = fat.randn(shapes[0], dtype, device, g, mean=0.5, std=1.5)
    w = fat.randn([shapes[0][-1]], dtype, device, g, mean=1.0, std=0.2)
    inputs = {"x": x, "weight": w}
    if shapes in FAR:
        inputs["x"] = fat.far_view(x)
    elif shapes in IN_PLACE:
        inputs["in_place"] = True
    return inputs




def _out(params):
    """y's dtype where it is written cast (params["out_dtype"]), else None."""
    return fat.DTYPES[params["out_dtype"]] if params.get("out_dtype") else None


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, w = inputs["x"], inputs["weight"]
    eps, casting, cast = params.get("eps", 1e-6), params.get("casting", "llama"), _out(params)
    if autograd:
        y = kernel.RMSNormFunction.apply(_nan_strided(x), _nan_padded(w), eps, casting, cast)
        y.register_hook(_nan_padded)  # dy, as the backward receives it
        return (y,)
    dtype = cast or kernel.out_dtype(x, w, casting)
    if inputs.get("in_place") and dtype == x.dtype:
        return (_in_place(kernel, x, w, eps, casting),)
    out = fat.poison(x.shape, dtype, x.device) if poison else None
    return (kernel.rms_norm(x, w, eps, casting, out=out, y_dtype=cast),)


def _nan_padded(t):
    """t's values (differentiably: gradients flow back to t) in a contiguous view 3 elements
    into a NaN-filled buffer, 2 NaN after it (the forward offset variant's layout)."""
    def nan(k):
        return torch.full([k], float("nan"), dtype=t.dtype, device=t.device)

    return torch.cat([nan(3), t.reshape(-1), nan(2)])[3:3 + t.numel()].view(t.shape)


def _nan_strided(t):
    """t's values (differentiably) every other element of a NaN-filled buffer, 3 elements in:
    a view with a column stride of 2 and NaN between and after its elements, so a kernel that
    assumes contiguous columns reads NaN."""
    n = t.numel()
    buf = torch.full([2 * n + 5], float("nan"), dtype=t.dtype, device=t.device)
    idx = torch.arange(3, 3 + 2 * n, 2, device=t.device)
    buf = buf.index_put((idx,), t.reshape(-1))
    strides, acc = [], 2
    for d in reversed(t.shape):
        strides.append(acc)
        acc *= d
    return buf.as_strided(t.shape, tuple(reversed(strides)), 3)


def _in_place(kernel, x, w, eps, casting):
    """y written over a copy of x. First, outputs the wrapper must refuse: y one row off x
    (a partial overlap), y over the weight, a y whose rows share memory (an expanded view)."""
    rows = x.shape[0]
    buf = fat.poison([rows + 1] + list(x.shape[1:]), x.dtype, x.device)
    xc, shifted = buf[:rows], buf[1:]  # x's copy, and a view one row off it
    xc.copy_(x)
    expanded = fat.poison(x.shape[-1:], x.dtype, x.device).expand(x.shape)
    for xin, out, what in ((xc, shifted, "y one row off x"), (x, w.expand(x.shape), "y over the weight"),
                           (x, expanded, "y with rows sharing memory")):
        try:
            kernel.rms_norm(xin, w, eps, casting, out=out)
        except ValueError:
            continue
        raise AssertionError(f"rms_norm wrote {what} instead of refusing it")
    y = x.clone()
    return kernel.rms_norm(y, w, eps, casting, out=y)


def reference(ref, inputs, params):
    y = ref.rms_norm(inputs["x"], inputs["weight"], params.get("eps", 1e-6), params.get("casting", "llama"))
    cast = _out(params)
    return (y if cast is None else y.to(cast),)  # autocast's cast in the GEMM that reads y


def tolerance(dtype, shapes, params, grad=False):
    """The outputs' tolerance (the gradients are held to the quack check: QUACK_GRAD): y's
    at its own type where it is written cast (an fp32 ulp apart flips a bf16 rounding)."""
    return fat.tol(KIND, dtype if grad else _out(params) or dtype)


def _sizes(dtype, params):
    """(x's element size, y's)."""
    es = torch.tensor([], dtype=dtype).element_size()
    cast = _out(params)
    return es, es if cast is None else torch.tensor([], dtype=cast).element_size()


def nbytes(shapes, dtype, params):
    es, ys = _sizes(dtype, params)
    n = 1
    for d in shapes[0]:
        n *= d
    return es * (n + shapes[0][-1]) + ys * n


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: read dy, the saved x, the weight and the
    forward's rstd (fp32, one a row), write dx and the weight's gradient (dy in y's type)."""
    es, ys = _sizes(dtype, params)
    n = 1
    for d in shapes[0]:
        n *= d
    N = shapes[0][-1]
    rows = n // N if N else 0
    return es * (2 * n + 2 * N) + ys * n + 4 * rows


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.RMSNormFunction.apply(inputs["x"], inputs["weight"], params.get("eps", 1e-6),
                                        params.get("casting", "llama"), _out(params))


def library_ops(inputs, params):
    """Library calls computing this case's forward (bench times them beside the kernel), keyed
    by name, and the reason each one that cannot express the case is left out.

    "rms_norm": ``F.rms_norm(x, (N,), weight, eps)``. In torch 2.11 it upcasts x to fp32,
    normalises, multiplies by the weight in fp32 and rounds once at the end
    (``aten._fused_rms_norm``, on the CPU and CUDA): the casting "fp32" chain. The "llama"
    chain (HF LlamaRMSNorm) rounds the normalised x to x's dtype before the weight multiply,
    one rounding more, so an fp16/bf16 "llama" case is refused; in fp32 the two castings are
    the same chain. With out_dtype, the library call is followed by that cast (what autocast
    does for the GEMMs reading nn.RMSNorm's fp32 output): two kernels."""
    x, w = inputs["x"], inputs["weight"]
    eps, casting = params.get("eps", 1e-6), params.get("casting", "llama")
    if casting == "llama" and x.dtype != torch.float32:
        return {}, {"rms_norm": "F.rms_norm multiplies by the weight in fp32 and rounds once (casting 'fp32'); "
                                "this case's LlamaRMSNorm rounds the normalised x to its dtype first"}
    if w.dtype != x.dtype:
        return {}, {"rms_norm": f"F.rms_norm returns x's dtype; this case's weight is {w.dtype}, x {x.dtype}"}

    cast = _out(params)

    def rms_norm(inp):
        x = inp["x"]
        y = torch.nn.functional.rms_norm(x, (x.shape[-1],), inp["weight"], eps)
        return y if cast is None else y.to(cast)

    return {"rms_norm": rms_norm}, {}
