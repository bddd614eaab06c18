"""Uniform test/bench interface for the cross_entropy template (see docs/templates.md).

SHAPES[0] is the logits' shape [M, V]; the target is [M] class indices (int64), drawn in
[0, V) with every fifth row (and the last, of 4 rows or more) set to ``ignore_index``, so that the mean's count
differs from the rows' and an ignored row's gradient must be written as zeros.
params: ``reduction`` ("mean", "sum", "none"), ``ignore_index`` (-100), ``upcast`` ("float":
the model's ``logits.float()`` before the loss; "autocast"; "none"), ``label_smoothing`` (0.0).

The loss is compared at fp32's tolerance where both sides compute it in fp32 from the same
16-bit logits (upcast "float"), else at the logits' type's; the gradient, in the logits'
type, with the fp32 chain (quack check): eager's "autocast" backward works from log-probabilities
rounded to 16 bits, the kernel from fp32 ones.

An adversarial case about memory rather than shape (the verifier's layout variants do not
reach it), which make_inputs recognises by its shape: FAR, the logits a transposed view whose
element offsets pass 2**31, so that 32-bit ``cols * stride`` arithmetic reads the wrong
elements (fa_testing.far_view; the last column, past 2**31, raised to 6 so that misreading it
changes every probability of its row), at a row that fits one interpreter block (100) and one
that does not (299); the gradient cases at those shapes (grad_shapes) view their leaves so again. And one about values: EXTREME (rows of 200 classes, longer than one
interpreter block), whose row 1 is -inf everywhere but its target, row 2 every logit -inf
(eager: NaN), row 3 -inf in its whole first block, and row 4 every logit exactly 0.
"""

import torch

import fa_testing as fat

KIND = "softmax"
OUTPUTS = ["loss"]
GRAD_INPUTS = ["logits"]
# eager's "autocast" gradient is computed from bf16 log-probabilities; the fused backward from
# fp32 ones: compare gradients with the fp32 chain (quack check)
QUACK_GRAD = True
FAR = [[[3, 100]], [[2, 299]]]
EXTREME = [[[6, 200]]]
# rows of one class, ragged, primes, one past a block, rows longer than one interpreter block
# (128), and a single row
ADVERSARIAL = [[[129, 127]], [[1, 1]], [[31, 37]], [[5, 129]], [[3, 300]], [[1, 1500]]] + FAR + EXTREME


def adversarial(params):
    return ADVERSARIAL


def has_backward(params):
    return True


def interp_shapes(shapes):
    return [fat.shrink(shapes[0], max_last=300, max_rows=16)]


def _params(params):
    # case.py writes ignore_index as a number (-100.0): F.cross_entropy takes an int
    return (int(params.get("ignore_index", -100)), params.get("reduction", "mean"), params.get("upcast", "float"),
            params.get("label_smoothing", 0.0))


def make_inputs(shapes, dtype, params, device, seed):
    g = fat.gen(seed)
    ignore_index = _params(params)[0]
    x = fat.randn(shapes[0], dtype, device, g, mean=0.0, std=3.0)
    M, V = shapes[0][0], shapes[0][-1]
    t = torch.randint(0, max(V, 1), (M,), generator=g)
    t[::5] = ignore_index
    if M >= 4:
        t[-1] = ignore_index
    if shapes in EXTREME:
        x = x.cpu()
        x[1] = float("-inf")
        x[1, t[1]] = 0.5
        x[2] = float("-inf")
        x[3, :128] = float("-inf")
        x[4] = 0.0
        x = x.to(device)
    inputs = {"logits": x, "target": t.to(device)}
    if shapes in FAR:
        # the last column, the one past 2**31, raised: misreading it changes every
        # probability of its row, and so the whole row's gradient
        x[:, -1] = 6.0
        inputs["logits"] = fat.far_view(x)
        inputs["far"] = True  # the gradient cases' leaves are contiguous copies: fused() views them again
    return inputs


def grad_shapes(params):
    """Gradient cases beyond the traced shape and the first adversarial one (the verifier's):
    the FAR views, which fused(autograd=True) makes of the leaves again, so that the backward
    reads logits whose offsets pass 2**31 (in one chunk and in several)."""
    return FAR


class _Far(torch.autograd.Function):
    """x's values in a fa_testing.far_view (the gradient passed back as it is)."""

    @staticmethod
    def forward(ctx, x):
        return fat.far_view(x.detach())

    @staticmethod
    def backward(ctx, g):
        return g


def fused(kernel, inputs, params, poison=False, autograd=False):
    x, t = inputs["logits"], inputs["target"]
    if autograd:
        if inputs.get("far"):  # a leaf: a dense copy of the FAR view
            x = _Far.apply(x)
        return (kernel.CrossEntropyFunction.apply(x, t, *_params(params)),)
    return (kernel.cross_entropy(x, t, *_params(params)),)


def reference(ref, inputs, params):
    return (ref.cross_entropy(inputs["logits"], inputs["target"], *_params(params)),)


def tolerance(dtype, shapes, params, grad=False):
    """The loss's: fp32's where eager computes it in fp32 from the logits ("float"), else the
    logits' type's ("autocast": eager's log-probabilities are rounded to it before nll_loss
    upcasts them). The gradients are held to the quack check (QUACK_GRAD)."""
    return fat.tol(KIND, torch.float32 if not grad and params.get("upcast", "float") == "float" else dtype)


def output_tolerances(dtype, shapes, params):
    return [tolerance(dtype, shapes, params)]


def _mv(shapes):
    M, V = shapes[0][0], shapes[0][-1]
    return M, V


def nbytes(shapes, dtype, params):
    """The logits read once, the target read; the log-sum-exp (fp32) and a loss a row written."""
    es = torch.tensor([], dtype=dtype).element_size()
    M, V = _mv(shapes)
    return es * M * V + 8 * M + 4 * M + 4 * M


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward must move: the saved logits, the target and the
    log-sum-exp read, the logits' gradient written (the loss's gradient: one number, or one a
    row for reduction "none")."""
    es = torch.tensor([], dtype=dtype).element_size()
    M, V = _mv(shapes)
    return 2 * es * M * V + 8 * M + 4 * M + (4 * M if params.get("reduction", "mean") == "none" else 4)


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes)."""
    return kernel.CrossEntropyFunction.apply(inputs["logits"], inputs["target"], *_params(params))

