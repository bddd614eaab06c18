"""Tests of the adapters' backward floor (adapter.bwd_nbytes, bwd_flops: bench's floor for the
backward and full modes), on the CPU against eager's own backward at small shapes: the floor
counts at least the output gradients read and the distinct gradients written (a gradient equal
to an output gradient, or to another input's, may be that tensor), and at most every tensor of
the step once (the inputs, the outputs and their gradients, the inputs' gradients) plus 8
bytes a row of statistics. Then the exact figures at the H200 anchors' shapes
(docs/benchmarks/h200.md quotes them) and the GEMM patterns' backward FLOPs."""

import math
import pathlib
import shutil
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "_common"))

import pytest  # noqa: E402
import torch  # noqa: E402

import fa_testing as fat  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
GOLDEN = HERE.parent / "codegen" / "testdata" / "golden" / "generic"


def load(template):
    folder = HERE / template
    return fat.load_sibling(folder / "x", "adapter"), fat.load_sibling(folder / "x", "reference")


def generic_folder(tmp_path, name):
    """A generic folder from codegen's golden output: its case, kernel and reference beside the
    shared adapter."""
    d = tmp_path / name
    d.mkdir()
    for f in ("case.py", "kernel.py", "reference.py"):
        shutil.copy(GOLDEN / name / f, d)
    shutil.copy(HERE / "_generic" / "adapter.py", d)
    return fat.load_sibling(d / "x", "adapter"), fat.load_sibling(d / "x", "reference")


# template, SHAPES, dtype, params: small cases of every template with a backward
CASES = [
    ("bias_gelu", [[6, 40]], "fp32", {"has_bias": True}),
    ("bias_gelu", [[6, 40]], "bf16", {"has_bias": False}),
    ("gelu_pyops", [[6, 40]], "bf16", {"has_bias": True, "out_dtype": "fp32"}),
    ("swiglu", [[6, 40]], "fp16", {}),
    ("dropout_add", [[6, 40]], "bf16", {"has_bias": True, "p": 0.0}),
    ("dropout_add", [[6, 40]], "fp32", {"residual_dtype": "bf16", "p": 0.0}),
    ("dropout_add", [[6, 40]], "bf16", {"residual_dtype": "fp32", "p": 0.0}),
    ("rmsnorm_pyops", [[6, 40]], "bf16", {}),
    ("add_layernorm", [[6, 40]], "fp32", {}),
    ("add_layernorm", [[6, 40]], "bf16", {"residual_dtype": "fp32"}),
    ("add_layernorm", [[2, 3, 40], [3, 40]], "fp32", {}),
    ("mask_softmax", [[2, 6, 40], [2, 6, 40]], "fp32", {"mask_kind": "bool", "mask_fill": -1e4}),
    ("mask_softmax", [[2, 6, 40], [6, 40]], "bf16", {"mask_kind": "additive", "mask_dtype": "fp32"}),
    ("attention", [[1, 2, 9, 16], [1, 2, 11, 16], [1, 2, 11, 16], [1, 2, 9, 11]], "fp32",
     {"mask_kind": "none", "bias_kind": "additive"}),
    ("attention", [[1, 2, 9, 16], [1, 2, 9, 16], [1, 2, 9, 16]], "bf16", {"mask_kind": "causal"}),
    ("linear_gelu", [[2, 3, 24], [16, 24], [16]], "fp32", {}),
    ("layernorm_linear", [[2, 3, 24], [16, 24], [16]], "fp32", {"has_bias": True}),
]


def eager_step(adapter, ref, shapes, dt, params):
    """Eager's forward and backward at these shapes: (inputs, outputs, output gradients,
    gradients), the gradients of adapter.GRAD_INPUTS that are given (None where unused)."""
    inputs = adapter.make_inputs(shapes, dt, params, "cpu", 0)
    names = [n for n in adapter.GRAD_INPUTS if isinstance(inputs.get(n), torch.Tensor)]
    leaves = dict(inputs)
    for n in names:
        leaves[n] = inputs[n].detach().clone().requires_grad_(True)
    outs = [o for o in adapter.reference(ref, leaves, params) if isinstance(o, torch.Tensor) and o.requires_grad]
    g = torch.Generator().manual_seed(3)
    dys = [torch.randn(o.shape, generator=g).to(o.dtype) for o in outs]
    grads = torch.autograd.grad(outs, [leaves[n] for n in names], dys, allow_unused=True)
    return inputs, outs, dys, [x for x in grads if x is not None]


def nb(t):
    return t.numel() * t.element_size()


def bounds(inputs, outs, dys, grads):
    """(fewest, most) bytes of a backward: the output gradients read and the distinct gradients
    written; every tensor once and 8 bytes a row of the outputs."""
    distinct = []
    for g in grads:
        if not any(g.dtype == o.dtype and g.shape == o.shape and torch.equal(g, o) for o in dys + distinct):
            distinct.append(g)
    low = sum(map(nb, dys)) + sum(map(nb, distinct))
    tensors = [t for t in inputs.values() if isinstance(t, torch.Tensor)]
    rows = sum(o.numel() // max(1, o.shape[-1]) for o in outs)
    high = sum(map(nb, tensors + outs + dys + grads)) + 8 * rows
    return low, high


@pytest.mark.parametrize("template,shapes,dtype,params", CASES, ids=lambda v: str(v))
def test_bwd_nbytes_between_bounds(template, shapes, dtype, params):
    adapter, ref = load(template)
    dt = fat.DTYPES[dtype]
    low, high = bounds(*eager_step(adapter, ref, shapes, dt, params))
    got = adapter.bwd_nbytes(shapes, dt, params)
    assert isinstance(got, int) and low <= got <= high, (got, low, high)


@pytest.mark.parametrize("name", ["broadcast_affine_tanh", "gelu_dropout_residual", "clamp_mul_bias",
                                  "cast_mul_cast", "matmul_silu_scale", "table_fp32"])
def test_generic_bwd_nbytes_between_bounds(tmp_path, name):
    adapter, ref = generic_folder(tmp_path, name)
    if not adapter.has_backward({}):
        pytest.skip("no backward")
    shapes = adapter.interp_shapes(adapter.case.SHAPES)
    dt = fat.DTYPES[adapter.case.DTYPE]
    inputs, outs, dys, grads = eager_step(adapter, ref, shapes, dt, {})
    low, high = bounds(inputs, outs, dys, grads)
    if adapter.GEMM:  # the GEMM's output is saved and read, no input of eager's chain
        high += math.prod(shapes[0]) * torch.tensor([], dtype=fat.DTYPES[adapter.GEMM["dtype"]]).element_size()
    got = adapter.bwd_nbytes(shapes, dt, {})
    assert low <= got <= high, (got, low, high)


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir() if (p / "case.py").exists()))
def test_generic_bwd_nbytes_is_the_programs(tmp_path, name):
    """The adapter's count, from the generated kernel's GRAD_REACHED and GRAD_ALIAS, equals
    the one codegen wrote from the program (case.BWD_BYTES, program.BackwardBytes), which
    the cost model's generic backward reads: two counts of one thing, held equal."""
    adapter, _ = generic_folder(tmp_path, name)
    if not adapter.case.BACKWARD:
        assert not hasattr(adapter.case, "BWD_BYTES")
        return
    got = adapter.bwd_nbytes(adapter.case.SHAPES, fat.DTYPES[adapter.case.DTYPE], {})
    assert got == adapter.case.BWD_BYTES


def test_generic_alias_costs_nothing(tmp_path):
    """y = gelu(x0) + x1: x1's gradient is dy itself (no bytes), and no derivative reads x1;
    x0 is read and its gradient written: dy, x0 and dx0, 12 bytes an element in fp32."""
    adapter, _ = generic_folder(tmp_path, "gelu_dropout_residual")
    kernel = adapter._sibling_kernel()
    if getattr(kernel, "GRAD_ALIAS", [None])[-1] is None:
        pytest.skip("a kernel from before gradient aliasing")
    shapes = adapter.case.SHAPES
    n = math.prod(shapes[0])
    carried = sum(kernel.GRAD_OUTPUTS)
    assert adapter.bwd_nbytes(shapes, torch.float32, {}) == 4 * n * (carried + 2)


# the backward floors of the anchors' large shapes (bench/matrix.go), then a llama MLP's
# swiglu and a causal attention, bytes
ANCHORS = [
    # dy, ds and the sum read, mean and rstd, dx written, the weight read and its and the bias' gradients
    ("add_layernorm", [[8192, 4096]], "bf16", {}, 2 * 8192 * 4096 * 4 + 8 * 8192 + 3 * 2 * 4096),
    # dy and x read, dx written, the weight read and its gradient written, rstd
    ("rmsnorm_pyops", [[8192, 4096]], "bf16", {"casting": "llama"}, 2 * (3 * 8192 * 4096 + 2 * 4096) + 4 * 8192),
    # dy read, dx written (the residual's gradient is dy), the bias' gradient
    ("dropout_add", [[8192, 4096]], "bf16", {"has_bias": True, "p": 0.1}, 2 * (2 * 8192 * 4096 + 4096)),
    # dy and x read, dx written, the bias read and its gradient written
    ("gelu_pyops", [[8192, 16384], [16384]], "bf16", {"has_bias": True}, 2 * (3 * 8192 * 16384 + 2 * 16384)),
    # dy, gate and up read, their gradients written
    ("swiglu", [[4, 512, 2816]], "bf16", {}, 5 * 2 * 4 * 512 * 2816),
    # q, k, v, out and dout read, dq, dk and dv written, the log-sum-exp of each query row
    ("attention", [[2, 16, 2048, 64]] * 3, "bf16", {"mask_kind": "causal"}, 8 * 2 * (2 * 16 * 2048 * 64) + 4 * 2 * 16 * 2048),
]


@pytest.mark.parametrize("template,shapes,dtype,params,want", ANCHORS, ids=lambda v: str(v))
def test_bwd_nbytes_at_the_anchors(template, shapes, dtype, params, want):
    adapter, _ = load(template)
    assert adapter.bwd_nbytes(shapes, fat.DTYPES[dtype], params) == want


def test_bwd_flops():
    lg, _ = load("linear_gelu")
    shapes = [[16, 256, 2048], [8192, 2048], [8192]]
    assert lg.bwd_flops(shapes, torch.bfloat16, {}) == 2 * lg.flops(shapes, torch.bfloat16, {}) == 4 * 4096 * 8192 * 2048
    at, _ = load("attention")
    B, H, S, D = 2, 16, 2048, 64
    shapes = [[B, H, S, D]] * 3
    fwd = 4 * B * H * S * S * D  # q k^T and P v
    assert at.flops(shapes, torch.bfloat16, {"mask_kind": "none"}) == fwd
    assert at.bwd_flops(shapes, torch.bfloat16, {"mask_kind": "none"}) == 2.5 * fwd
    assert at.flops(shapes, torch.bfloat16, {"mask_kind": "causal"}) == fwd * (S + 1) / (2 * S)
    # causal: the pairs at or below the diagonal, S (S + 1) / 2 of S * S
    assert at.bwd_flops(shapes, torch.bfloat16, {"mask_kind": "causal"}) == 2.5 * fwd * (S + 1) / (2 * S)
    # Sq > Sk: the first Sq - Sk rows keep nothing, the others 1..Sk keys
    assert at._kept_pairs(5, 3, True) == 0 + 0 + 1 + 2 + 3
    assert at._kept_pairs(3, 5, True) == 3 + 4 + 5


@pytest.mark.parametrize("name", ["linear_sub_mul_number_residual", "linear_gelu_scale_residual", "addmm_sigmoid_channel"])
def test_generic_reference_gemm_rounds_once_on_the_cpu(tmp_path, name):
    """The generic adapter's reference computes a 16-bit GEMM head on the CPU in fp32 and
    rounds it once (as cuBLAS and the kernel do; the CPU's own bfloat16 linear does not always
    round the exact product); an fp32 head, a GPU's, and the quack check's upcast copy take
    the traced GEMM (chain's default) as it is."""
    adapter, ref = generic_folder(tmp_path, name)
    shapes = adapter.interp_shapes(adapter.case.SHAPES)
    dt = fat.DTYPES[adapter.case.DTYPE]
    inputs = adapter.make_inputs(shapes, dt, {}, "cpu", 3)
    seen = []
    real = ref.gemm
    ref.gemm = lambda *ops: (seen.append(ops[0].dtype), real(*ops))[1]
    try:
        adapter.reference(ref, dict(inputs), {})
        up = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for k, v in inputs.items()}
        adapter.reference(ref, up, {})
    finally:
        ref.gemm = real
    gemm16 = adapter.GEMM["dtype"] in ("bf16", "fp16")
    # the override (through the module's gemm) on the CPU's 16-bit call only; the others run
    # chain's default, the traced GEMM
    assert seen == ([torch.float32] if gemm16 else []), seen
    if gemm16:  # the outputs: the chain on the fp32 product rounded once
        ops = [inputs[n] for n in adapter.NAMES[:3 if adapter.GEMM["bias"] else 2]]
        x0 = real(*[t.float() for t in ops]).to(inputs["a"].dtype)
        want = ref.chain(*[inputs[n] for n in adapter.NAMES], gemm=lambda *o: x0)
        for g, w in zip(adapter.reference(ref, dict(inputs), {}), want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
