"""Uniform test/bench interface of a generic-chain folder (see docs/templates.md).

The folder's kernel.py and reference.py are rendered from one op program (codes of the op
table in fuseadvise's ``program`` package and validated numbers); case.py holds the program's
shapes and dtypes: the main shape (SHAPES[0]), each input's dtype and which of the main
dims it has (INPUTS: name, dtype, one flag per trailing dim, False where the input
broadcasts), each output's name, dtype and shape (OUTPUTS). Every value's dtype is fixed by
the program (casts included), so the folder runs at its traced dtype only (DTYPES).

Training (case.BACKWARD: a pointwise program): kernel.FusedFunction, whose backward is one
fused kernel from the op table's derivatives. The gradient checks (fused(autograd=True),
train()) return only the outputs that carry a gradient (case.GRAD_OUTPUTS: eager's bool
outputs, and float ones computed from no float input, have none, and autograd refuses a
gradient for them), and tell reference() so through ``inputs["_grad_outputs"]``. The fused
backward computes in fp32 where eager rounds every gradient to its tensor's dtype, and sums a
broadcast input's gradient in its own order, so a folder's gradients are held to eager's own
error against the chain in a higher precision (QUACK_GRAD: fp32 for 16-bit folders, fp64 for
fp32 ones), plus reordering noise (fa_testing.quack_bound).

A chain that starts at a GEMM (case.GEMM: its traced op, x's rank, a bias) takes the GEMM's
operands first (a, w, bias: NAMES) and its shapes as [main, x, w] (SHAPES); fused() runs
kernel.gemm_fused, the GEMM with the chain as its epilogue, and training kernel.GemmFunction
(the epilogue's fused backward, cuBLAS for the operands' gradients). The other form, cuBLAS
plus the program's pointwise kernel (kernel.gemm_cublas), is offered to bench as the library
op "cublas_pointwise", timed and checked beside the fused kernel, and the report keeps the
faster; gemm_only is the GEMM alone.
"""

import functools
import inspect
import math


import torch

import fa_testing as fat

case = fat.load_sibling(__file__, "case")

KIND = case.KIND
OUTPUTS = [name for name, _, _ in case.OUTPUTS]
DTYPES = [case.DTYPE]
GEMM = getattr(case, "GEMM", None)
NAMES = (["a", "w"] + (["bias"] if GEMM["bias"] else []) if GEMM else []) + [name for name, _, _ in case.INPUTS]
GRAD_INPUTS = list(getattr(case, "GRAD_INPUTS", []))
QUACK_GRAD = True  # the quack check (fa_testing, the verifier): 16-bit folders vs fp32, fp32
# folders vs fp64 (a broadcast input's gradient, a bias or a per-channel scale, is summed over
# up to millions of elements in another order than eager's)
# an fp32 chain's 16-bit steps (a cast to bfloat16 and back): eager and the reference round
# the gradient there, the fused backward keeps fp32, so they differ by that rounding; not a
# 16-bit copy no step reads (case.GRAD_TOL_DTYPE: its gradient is upcast exactly)
QUACK_ROUNDING = fat.DTYPES[getattr(case, "GRAD_TOL_DTYPE", None) or case.TOL_DTYPE]
# Per output: the kernel rounds each step to the dtype eager computes it in (_round_bf16,
# _round_fp16), and where every step the output is computed from is one eager computes as the
# kernel does, rounded once (case.OUT_EAGER_EXACT: arithmetic, comparisons, selection, casts,
# clamps; no GEMM head), its 16-bit values are eager's to the last bit but for a few elements,
# which the verifier holds it to (fa_testing.eager_rounding).
EAGER_ROUNDING = list(getattr(case, "OUT_EAGER_EXACT", []))
# 16-bit outputs no more biased against the chain in fp32 than eager's (fa_testing.bias_check);
# not for row programs, whose rows share a statistic's rounding (their errors are not independent)
BIAS_CHECK = case.KIND != "softmax"


# The memory case (a marker in place of a second shape, as the catalog's adapters): WIDE, the
# first input of the main shape a view whose outermost dim strides fat.WIDE_STRIDE from
# fat.WIDE_BASE, so that its offsets pass 2**31 and the kernels take their 64-bit index math
# (a 32-bit offset wraps onto a NaN decoy). Pointwise programs only.
WIDE = [-1]

# The verifier's "range" case: inputs of every magnitude a 16-bit step meets (float16's
# subnormals and its overflow to inf among them), which the steps round as eager does.
RANGE_CASE = True


def adversarial(params):
    """case.ADVERSARIAL; for a pointwise program also a shape whose last dim is a multiple of
    16 (the forward's INNER16 index math) and the WIDE memory case."""
    if GEMM or KIND != "pointwise":
        return case.ADVERSARIAL
    rank = len(case.SHAPES[0])
    return case.ADVERSARIAL + [[[2, 3, 5, 32][-rank:]], [[3, 2, 5, 7][:rank], WIDE]]


def has_backward(params):
    return bool(getattr(case, "BACKWARD", False))


def grad_shapes(params):
    """A gradient case with every dim of the main shape up to 3 but at least 2 where it is
    more than 1 (the scaled traced shape keeps one leading row): the backward's layout with
    several row dims, several blocks of several rows, which verify also runs transposed (the
    row dims then do not merge: the flat walk's divisions inside a block). Empty for a GEMM
    head (its own shapes) or where that is the scaled traced shape."""
    if GEMM:
        return []
    main = case.SHAPES[0]
    small = [min(d, 3) if d > 1 else 1 for d in main]
    return [] if small == fat.shrink(main) else [[small]]


# The broadcast cases (a marker after the shapes, then one list per input of case.INPUTS: for a
# tensor, a 0/1 flag per main dim, 0 where it broadcasts; empty for a number): the chain with
# its inputs broadcast otherwise than traced. The kernels take any broadcast the caller's
# tensors have, and the backward reduces a broadcast input's gradient in one of several ways
# by its layout (kernel.BWD_KINDS): each of those is checked where it runs.
BROADCAST = [-2]
_FLOAT = ("fp32", "fp16", "bf16")


def broadcast_cases(params):
    """Gradient cases (name, shapes, variant) in which each float input in turn broadcasts
    otherwise than traced, the other tensors of the main shape: as a bias (the last dim alone:
    column sums), a per-row tensor (all but the last: row sums), a 0-dim scale (one sum, in
    the flat walk where the columns are 7) and again with the others transposed and 16
    columns (one sum in the 2D tile, over rows that no longer merge); with two row dims and
    another float input, that one keeping the first row dim (and the columns) while this one
    is a bias (its column sums over three row blocks' programs: _sum_parts over a count of
    groups its blocks do not divide) or keeps the second (the rows' order cannot suit both:
    the fp32 values). With a GEMM head's bias, one output column (the bias' gradient one sum).
    kernel.BWD_KINDS lists the layouts the backward has code for; test_host.py's
    test_broadcast_cases_reach_every_reduction checks that these cases reach each of them."""
    if not has_backward(params):
        return []
    tensors = [i for i, (_, dt, _) in enumerate(case.INPUTS) if not dt.startswith("number")]
    floats = [i for i in tensors if case.INPUTS[i][1] in _FLOAT and case.INPUTS[i][0] in GRAD_INPUTS]
    if len(tensors) + (1 if GEMM else 0) < 2:
        floats = []
    rank = GEMM["x_rank"] if GEMM else len(case.SHAPES[0])

    def shapes(last):
        main = ([3, 2, 2] * rank)[:rank - 1] + [last]
        return gemm_shapes(main[:-1], main[-1], 5) if GEMM else [main]

    full, bias, row, scalar = [1] * rank, [0] * (rank - 1) + [1], [1] * (rank - 1) + [0], [0] * rank
    first = [1] + [0] * (rank - 2) + [1]  # the first row dim and the columns
    second = [0, 1] + [0] * (rank - 3) + [1]  # the second

    def keeps(roles):
        return [BROADCAST] + [[] if case.INPUTS[j][1].startswith("number") else roles.get(j, full)
                              for j in range(len(case.INPUTS))]

    # each output keeps the main shape (eager's is the broadcast of the inputs it is computed
    # from: kernel._main_shape refuses the others)
    off = 1 if GEMM else 0  # a GEMM head's program input 0 is its output, of the main shape
    deps = [[case.INPUTS[d - off][0] for d in ds if d >= off] + (["gemm"] if ds and ds[0] < off else [])
            for ds in _sibling_kernel().OUT_DEPS]

    def covers(roles):
        names = {case.INPUTS[j][0]: k for j, k in roles.items()}
        return all(not ds or all(any(names.get(n, full)[d] for n in ds) for d in range(rank)) for ds in deps)

    out = []
    for i in floats:
        name = case.INPUTS[i][0]
        others = [j for j in floats if j != i]
        cases = [("scalar", 7, {i: scalar}, None)]
        if rank > 1:
            cases += [("bias", 7, {i: bias}, None), ("row", 7, {i: row}, None),
                      ("scalar-tiled", 16, {i: scalar}, "transposed")]
        if others and rank > 2:
            cases += [("bias-beside-outer", 7, {i: bias, others[0]: first}, None),
                      ("crossed", 7, {i: second, others[0]: first}, None)]
        out += [(f"bcast-{name}-{role}", shapes(last) + keeps(roles), variant)
                for role, last, roles, variant in cases if covers(roles)]
    if GEMM and GEMM["bias"] and "bias" in GRAD_INPUTS:  # one output column: the bias' gradient is one sum
        out.append(("bcast-bias-n1", shapes(1) + keeps({}), None))
    return out


def _split_broadcast(shapes):
    """shapes without a BROADCAST tail, and that tail's keep flags (None without one)."""
    if BROADCAST in shapes:
        at = shapes.index(BROADCAST)
        return shapes[:at], [[bool(x) for x in k] for k in shapes[at + 1:]]
    return shapes, None


def interp_shapes(shapes):
    if not GEMM:
        return [fat.shrink(shapes[0])]
    main = fat.shrink(shapes[0], max_last=80)
    k = min(GEMM["k"], 72)
    return gemm_shapes(main[:-1], main[-1], k)


# The verifier's "wide" cases: the elements each output has at least there (fa_testing's bias
# check judges outputs of 64 elements or more, and a 0.1% bias in a bfloat16 value, a quarter
# of its unit, passes its bound of six standard deviations of the mean's noise from about a
# thousand), in the forward (every output has all of them) and in the backward's "each"
# layout of the output gradients (each output's share of a gradient, WIDE_MAX at most)
WIDE_PER_OUTPUT = 2048
WIDE_MAX = 32768


def wide_shapes(params, outputs=1):
    """The interpreter's traced shape widened in its first dim until it has WIDE_PER_OUTPUT
    elements for each of ``outputs`` (WIDE_MAX at most); None where it has them already, for a
    GEMM head and for row programs (whose rows share a statistic's rounding: no bias check,
    BIAS_CHECK), and where no output or input is 16-bit (the check judges 16-bit values; fp32
    ones are held to fp32's tolerance already)."""
    dts = [d for _, d, _ in case.OUTPUTS] + [d for _, d, *_ in case.INPUTS]
    if GEMM or not BIAS_CHECK or not any(d in ("bf16", "fp16") for d in dts):
        return None
    main = interp_shapes(case.SHAPES)[0]
    n = math.prod(main)
    want = min(WIDE_PER_OUTPUT * max(1, outputs), WIDE_MAX)
    if not main or n == 0 or n >= want:
        return None
    return [[-(-want * main[0] // n)] + list(main[1:])]


def gemm_shapes(lead, n, k):
    """[main, x, w] for x's leading dims lead, N and K, in the traced GEMM's layout."""
    w = {"linear": [n, k], "bmm": [lead[0], k, n] if lead else [1, k, n]}.get(GEMM["op"], [k, n])
    return [list(lead) + [n], list(lead) + [k], w]


def input_shape(main, keep):
    """An input's shape for a main shape: the main dims it has, 1 where it broadcasts."""
    off = len(main) - len(keep)
    return [main[off + j] if k else 1 for j, k in enumerate(keep)]


def make_inputs(shapes, dtype, params, device, seed):
    shapes, bkeeps = _split_broadcast(shapes)
    g = fat.gen(seed)
    inputs = {}
    if GEMM:
        gdt = fat.DTYPES[GEMM["dtype"]]
        k = shapes[1][-1]
        inputs["a"] = fat.randn(shapes[1], gdt, device, g)
        inputs["w"] = fat.randn(shapes[2], gdt, device, g, std=1.0 / math.sqrt(max(k, 1)))
        if GEMM["bias"]:
            inputs["bias"] = fat.randn([shapes[0][-1]], gdt, device, g)
    for j, (name, dt, keep) in enumerate(case.INPUTS):
        shape = input_shape(shapes[0], keep if bkeeps is None else bkeeps[j])
        if dt == "number":
            inputs[name] = _number(g)
        elif dt == "number_int64":
            inputs[name] = int(torch.randint(1, 5, (), generator=g))  # a Python int: 1 to 4
        elif dt == "int64":
            inputs[name] = _ints(shape, g).to(device)
        elif dt == "bool":
            t = torch.rand(shape, generator=g) < 0.5
            inputs[name] = t.to(device)
        else:
            # a broadcast case's 0-dim input: one value decides every element's derivative (a
            # clamp's, a comparison's), so it is drawn near 0, inside such ranges (at std 2 a
            # clamp to [-1.5, 2] zeroed clamp_mul_bias's whole gradient in a trial)
            one = bkeeps is not None and not any(bkeeps[j])
            inputs[name] = fat.randn(shape, fat.DTYPES[dt], device, g, std=0.5 if one else 2.0)
    if shapes[-1] == WIDE:
        full = [n for n, dt, keep in case.INPUTS if all(keep) and len(keep) == len(shapes[0]) and dt in fat.DTYPES]
        if full:
            inputs[full[0]] = fat.wide_outer(inputs[full[0]])
    if EPILOGUE_BIAS:
        inputs["_epilogue"] = _epilogue_sum(inputs)
    return inputs


# A GEMM's bias the chain takes (case.EPILOGUE_BIAS: its input and the GEMM's output it is
# added to): the traced GEMM added it in its epilogue, so eager (bench's eager and compile)
# gets their sum made beforehand, outside what it times (make_inputs), and adds nothing.
EPILOGUE_BIAS = getattr(case, "EPILOGUE_BIAS", None)


def _epilogue_sum(inputs):
    """The GEMM's output with its bias (EPILOGUE_BIAS), as its epilogue made it."""
    b, of = EPILOGUE_BIAS
    return (inputs[of].detach() + inputs[b].detach()).contiguous()


def _ints(shape, g):
    """An int64 input's values: mostly small (-8 to 8: position ids, offsets and mask bounds
    meet, so comparisons decide on equal values), every fifth one large (to 2**20: past 2048
    and 256, where converting to float16 and bfloat16 rounds, and eager's conversion through
    float32 must be the kernel's)."""
    t = torch.randint(-8, 9, shape, generator=g, dtype=torch.int64)
    big = torch.randint(-2**20, 2**20 + 1, shape, generator=g, dtype=torch.int64)
    flat, bflat = t.view(-1), big.view(-1)
    flat[::5] = bflat[::5]
    return t


def _number(g):
    """A number input's value (a number the trace does not record, which the caller passes):
    0.5 to 1, held exactly by bfloat16 (and so by float16). Positive: the model's sign is not
    known, and a number of the other sign puts poles where the model has none (1 / (|y| + 1)
    traced, 1 / (|y| - 0.7) tested: an ill-conditioned chain whose fp32 results then differ
    in the fourth digit wherever the GEMM sums in another order). At most 1: a scale the model
    never used makes a residual add cancel larger terms, and eager's own bfloat16 rounding on
    the CPU (its linear's output is not always the exact one rounded) then exceeds the
    tolerance (mish(y) * 1.59 + x: 0.469 eager, 0.500 the kernel, 0.477 the chain in fp32).
    Held exactly: eager on the CPU (the interpreter's reference) rounds the number of an add,
    sub or rsub to a 16-bit tensor's type, eager on CUDA computes with its float32, as the
    kernels do (bench/experiments/probe_scalar_round.py); a number both hold is the same for
    both."""
    v = 0.5 + 0.5 * torch.rand((), generator=g, dtype=torch.float64).item()
    return torch.tensor(v).to(torch.bfloat16).item()


CONSTANTS = list(getattr(case, "CONSTANTS", []))


def _near(values, dtype):
    """Each value as a tensor of dtype holds it (rounded as eager rounds a scalar), and the
    two numbers of dtype beside it: the finite ones, each once, and no subnormal (zero's
    neighbours: no rounding decides there, and a subnormal's log or reciprocal is another
    question than the one this case asks)."""
    t = torch.tensor(values, dtype=torch.float64).to(torch.float32).to(dtype)
    bits = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}[dtype]
    near = [t] + [(t.view(bits) + d).view(dtype) for d in (-1, 1)]
    tiny = torch.finfo(dtype).tiny
    out = []
    for v in torch.cat(near).tolist():
        if math.isfinite(v) and (v == 0 or abs(v) >= tiny) and v not in out:
            out.append(v)
    return out


def _plant(t):
    """t's elements, every other one (t contiguous), set to the program's numbers as t's type
    holds them and their neighbours, in turn."""
    vals = torch.tensor(_near(CONSTANTS, t.dtype), dtype=t.dtype, device=t.device)
    flat = t.reshape(-1)[::2]
    flat.copy_(vals.repeat(flat.numel() // vals.numel() + 1)[:flat.numel()])


def planted(inputs):
    """The verifier's "planted" case: the program's numbers (case.CONSTANTS) as each float
    input's type holds them, and their neighbours in that type, written into every other
    element of it, so every comparison and clamp of an input runs at its boundary, where
    the kernel and eager disagree if they round the number differently (x > 0.1 on bfloat16
    x compares with bfloat16's 0.1). With a GEMM head the GEMM's output takes them, exactly:
    every other row of a is zero, so those rows of the output are the bias, which holds them;
    without a bias those rows of a are one-hot at k = 0 instead, so they are w's k = 0 row
    (column for linear's [N, K] weight), which holds them. Returns (inputs, the names of
    those changed)."""
    out, changed = dict(inputs), []
    if not CONSTANTS:
        return out, changed
    for n in [n for n, dt, _ in case.INPUTS if dt not in ("bool", "number", "number_int64", "int64")]:
        out[n] = inputs[n].clone()
        _plant(out[n])
        changed.append(n)
    if GEMM:
        a = inputs["a"].clone()
        rows = a.view(-1, a.shape[-1])[::2]
        rows.zero_()
        if GEMM["bias"]:
            out["bias"] = inputs["bias"].clone()
            _plant(out["bias"])
            changed += ["a", "bias"]
        elif a.shape[-1] > 0:
            rows[:, 0] = 1
            w = inputs["w"].clone()
            if GEMM["op"] == "linear":  # [N, K]: column 0 (a view)
                k0 = w[:, 0]
            elif GEMM["op"] == "bmm":  # [B, K, N]
                k0 = w[:, 0, :]
            else:  # [K, N]
                k0 = w[0]
            vals = k0.contiguous()
            _plant(vals)
            k0.copy_(vals)
            out["w"] = w
            changed += ["a", "w"]
        out["a"] = a
    return out, changed


def _grad_only(outs, kernel):
    return tuple(o for o, g in zip(outs, kernel.GRAD_OUTPUTS) if g)


def fused(kernel, inputs, params, poison=False, autograd=False, in_place=False):
    """The folder's kernel on inputs; poison: into NaN-filled out= tensors; in_place: and the
    outputs in_place_outputs pairs with an input written into that input itself."""
    xs = [inputs[n] for n in NAMES]
    if GEMM and not GEMM["bias"]:
        xs.insert(2, None)
    if autograd:
        inputs["_grad_outputs"] = kernel.GRAD_OUTPUTS
        return _grad_only(_function(kernel).apply(*xs), kernel)
    run = kernel.gemm_fused if GEMM else kernel.fused
    if not poison:
        return run(*xs)
    main = _main_shape(inputs)
    main = [1] * (getattr(kernel, "RANK", len(main)) - len(main)) + main  # padded as the kernel's
    outs = [torch.empty(kernel._out_shape(main, k), dtype=dt, device=xs[0].device)
            for dt, k in zip(kernel.OUT_DTYPES, kernel.OUT_SHAPES)]
    for o in outs:  # NaN, True, or for int64 an integer no chain of small values reaches
        o.fill_(float("nan") if o.dtype.is_floating_point else (True if o.dtype == torch.bool else -(2**62)))
    if in_place:
        for k, name in in_place_outputs(inputs).items():
            outs[k] = inputs[name]
    return run(*xs, out=outs)


def _main_shape(inputs):
    """The chain's main shape: the GEMM's output's, or the inputs' broadcast shape."""
    if GEMM:
        return list(inputs["a"].shape[:-1]) + [shapes_n(inputs)]
    return list(torch.broadcast_shapes(*[inputs[n].shape for n in NAMES if isinstance(inputs[n], torch.Tensor)]))


def quack_shape(inputs):
    """The shape a broadcast input's gradient terms live at (fa_testing.quack_scales): the main
    shape, the GEMM head's output where there is one (a bias, an epilogue's scale: their terms
    are the output's, which x and w do not broadcast to)."""
    return _main_shape(inputs)


def in_place_outputs(inputs):
    """{output index: input name}: where an output may be written into an input in place
    (the verifier's in-place case), each output of the main shape takes the first input not
    yet taken that the kernel allows (kernel.IN_PLACE) and that is a contiguous tensor of the
    output's shape and dtype; {} where none is."""
    kernel = _sibling_kernel()
    off = 1 if GEMM else 0  # a GEMM head's program input 0 is the GEMM's output
    main = _main_shape(inputs)
    main = [1] * (kernel.RANK - len(main)) + main  # the outputs' (an input of lower rank is not one)
    free = [n for i, (n, _, _) in enumerate(case.INPUTS) if f"input {i + off}" in kernel.IN_PLACE]
    pairs = {}
    for k, (dt, kind) in enumerate(zip(kernel.OUT_DTYPES, kernel.OUT_SHAPES)):
        if kind != "full":
            continue
        for n in free:
            t = inputs[n]
            if list(t.shape) == main and t.dtype == dt and t.is_contiguous():
                pairs[k] = n
                free.remove(n)
                break
    return pairs


def shapes_n(inputs):
    """The GEMM's N, from its weight as traced."""
    w = inputs["w"]
    return w.shape[0] if GEMM["op"] == "linear" else w.shape[-1]


def _function(kernel):
    return kernel.GemmFunction if GEMM else kernel.FusedFunction


def reference(ref, inputs, params):
    """The traced chain (reference.chain) on inputs, each training dropout applying the
    inputs' keep mask (_replay)."""
    return _replay(ref.chain, ref, inputs)


def eager(ref, inputs, params):
    """The chain as the model ran it, for timing (bench's eager and torch.compile providers):
    reference(), but each training dropout drawing its own mask (reference.chain_traced),
    where reference.chain applies the inputs' keep masks, and a GEMM's bias taken from the sum
    its epilogue made (inputs["_epilogue"], made by make_inputs) where chain adds it."""
    chain = getattr(ref, "chain_traced", ref.chain)
    if EPILOGUE_BIAS and chain is not ref.chain:
        xb = inputs.get("_epilogue")
        b, of = EPILOGUE_BIAS
        if xb is None or xb.shape != torch.broadcast_shapes(inputs[of].shape, inputs[b].shape) or xb.device != inputs[of].device:
            xb = inputs["_epilogue"] = _epilogue_sum(inputs)  # inputs made otherwise: made here, once
        chain = functools.partial(chain, epilogue=xb)
    return _replay(chain, ref, inputs)


KEEP_P = dict(getattr(case, "KEEP_P", {}))


def _drawn(inputs):
    """inputs with each keep mask (KEEP_P) drawn anew as the README tells the caller to:
    bernoulli_(1 - p) into a bool tensor of the mask's shape."""
    if not KEEP_P:
        return inputs
    out = dict(inputs)
    for name, p in KEEP_P.items():
        t = inputs[name]
        out[name] = torch.empty(t.shape, dtype=torch.bool, device=t.device).bernoulli_(1.0 - p)
    return out


def fused_drawn(kernel, inputs, params):
    """fused() as the model calls it, for timing: each keep mask drawn first, in the call."""
    return fused(kernel, _drawn(inputs), params)


def _replay(chain, ref, inputs):
    """chain on inputs; with a 16-bit GEMM head on the CPU (the
    interpreter's reference) its GEMM computed in fp32 and rounded once to its dtype, as
    cuBLAS computes it on the GPU and the kernel does: the CPU's bfloat16 linear does not
    always give the exact product rounded (2.875 where the exact 2.88423 rounds to 2.890625),
    and a residual add that cancels after it then put the reference one rounding of terms
    near 4 (0.031) from the kernel, past the tolerance (a corpus chain, mish(y) * s + x)."""
    kw = {}
    if GEMM and GEMM["dtype"] in ("bf16", "fp16") and inputs["a"].device.type == "cpu":
        dt = fat.DTYPES[GEMM["dtype"]]
        if inputs["a"].dtype == dt:  # not the quack check's upcast copy
            kw["gemm"] = lambda *ops: ref.gemm(*[t.float() if isinstance(t, torch.Tensor) else t for t in ops]).to(dt)
    outs = tuple(chain(*[inputs[n] for n in NAMES], **kw))
    grad = inputs.get("_grad_outputs")
    return outs if grad is None else tuple(o for o, g in zip(outs, grad) if g)


def _band_products(kernel, ref, inputs):
    """The GEMM's result anywhere within the GEMM's rounding: the exact product (in fp64),
    moved by -1, -1/2, 0, 1/2 and 1 times a bound on a GEMM's error and rounded to the GEMM's
    dtype (five tensors, the exact product's third). None without a GEMM head.

    The bound, per output element, in fp32 units: the products' magnitudes summed (mag) times
    2 + sqrt(K) where two or more terms are summed (the sum's rounding, in any order: the
    kernel's tiles, cuBLAS's split); times 4 for fp32 operands through tf32x3 on the GPU (three
    TF32 products: 2**-21 of each), once for fp32 products each rounded ("ieee", the
    interpreter) unless the product is exact, none for 16-bit operands (their products are
    exact in fp32); one rounding of the bias add where a product is summed. 0 where no term is
    nonzero, and where one term is exact: the planted case's rows (zero, or one-hot on a
    number) then decide a comparison exactly, as eager does."""
    if not GEMM:
        return None
    dt = fat.DTYPES[GEMM["dtype"]]
    a, w = inputs["a"], inputs["w"]
    if a.numel() == 0 or w.numel() == 0:
        return None
    a64, w64 = a.detach().to(torch.float64), w.detach().to(torch.float64)
    zero = torch.zeros(shapes_n(inputs), dtype=torch.float64, device=a.device)
    bias = [zero] if GEMM["bias"] else []
    prod = ref.gemm(a64, w64, *bias)
    mag = ref.gemm(a64.abs(), w64.abs(), *bias)
    nnz = ref.gemm((a64 != 0).to(torch.float64), (w64 != 0).to(torch.float64), *bias)
    eps = torch.finfo(torch.float32).eps
    k = a.shape[-1]
    dot = getattr(getattr(kernel, "_F32_DOT", None), "value", "ieee")
    if dt != torch.float32:
        per_term = 0.0
    else:
        per_term = 4.0 if dot != "ieee" else 1.0
    inexact = prod.to(torch.float32).to(torch.float64) != prod
    one = torch.where(inexact | (per_term > 1.0), per_term, 0.0) if per_term else torch.zeros_like(mag)
    delta = eps * mag * torch.where(nnz > 1, max(2.0 + math.sqrt(k), per_term), one)
    exact = prod
    if GEMM["bias"]:
        exact = prod + inputs["bias"].detach().to(torch.float64)
        delta = delta + eps * exact.abs() * (nnz > 0)
    return [(exact + t * delta).to(dt) for t in (-1.0, -0.5, 0.0, 0.5, 1.0)]


def _band_sum(t):
    """reference.chain's reduce= hook for band_outputs: the last-dim sum or mean moved by t
    times a bound on its rounding in any order, (2 + sqrt(n)) fp32 units of the sum of its
    terms' magnitudes (the GEMM's bound, _band_products: the kernel and eager both accumulate
    in fp32, each in its own order). A sum that cancels to far less than its terms is known to
    that, not to the tolerance of its result: the verifier's ``range`` case summed silu(x) * y
    over terms of 6e5 to 49.71 (eager, and fp64) and 49.7134 (the kernel). Exact sums (integer
    and bool terms) and non-finite magnitudes get no band."""
    def reduce(op, x, *args, **kw):
        s = op(x, *args, **kw)
        if not x.dtype.is_floating_point or not s.dtype.is_floating_point:
            return s
        mag = op(x.detach().abs(), *args, **{**kw, "dtype": torch.float64})
        n = x.shape[-1] if x.dim() else 1
        delta = torch.finfo(torch.float32).eps * (2.0 + math.sqrt(n)) * mag
        delta = torch.where(torch.isfinite(delta), delta, torch.zeros_like(delta))
        return (s.detach().to(torch.float64) + t * delta).to(s.dtype)
    return reduce


def band_outputs(kernel, ref, inputs, params):
    """The chain's outputs with the results its inputs do not decide anywhere in their
    rounding (fa_testing.output_bands takes the range of them): a GEMM head's result within
    the GEMM's rounding (_band_products), or a last-dim sum within its summation's
    (_band_sum, through reference.chain's reduce= hook); the rest of the chain eager's as the
    reference runs it. None where neither applies."""
    args = [inputs[n] for n in NAMES]
    pres = _band_products(kernel, ref, inputs)
    if pres is not None:
        return [tuple(ref.chain(*args, gemm=lambda *ops, pre=pre: pre)) for pre in pres]
    if "reduce" in inspect.signature(ref.chain).parameters:
        return [tuple(ref.chain(*args, reduce=_band_sum(t))) for t in (-1.0, -0.5, 0.5, 1.0)]
    return None


def band_grads(kernel, ref, inputs, names, dys, params):
    """Per input of names, None or (lo, hi) in float64: the range its gradient (for the
    outputs' gradients dys) takes with the GEMM's result anywhere within the GEMM's rounding,
    each element of that result free to sit anywhere in it independently of the others
    (fa_testing.grad_bands adds eager's gradient). Where the result lies within its rounding
    of a point at which the chain's derivative jumps (hardswish's at 3, relu's at 0, a
    clamp's bounds; in bfloat16, of a midpoint beside one: 2.9921875 rounds to 2.984375,
    where hardswish's derivative is 1.49, or to 3.0, where it is 1), the kernel's product and
    cuBLAS's may take either side of it, and the gradients of a and w differ by the jump
    times the other operand. Elsewhere the band is a rounding's width: where the product is
    exact (3.0 in bfloat16), the other side is outside it. None without a GEMM head.

    The chain's derivative w.r.t. the GEMM's result (dz) at each of _band_products, and
    each epilogue input's per element (an input broadcast over the main shape expanded to
    it); from the exact product's, the others' differences from it, per element their lowest
    dmin (at most 0) and highest dmax (at least 0), bound a sum's range exactly: a's gradient
    (dz @ w for a matmul) lies within (dmin @ w+ + dmax @ w-, dmax @ w+ + dmin @ w-) of the
    exact product's (w+ and w- the positive and negative parts), w's likewise, and the
    bias' and an epilogue input's within their dmin and dmax summed to its shape."""
    pres = _band_products(kernel, ref, inputs)
    if pres is None:
        return None
    f64 = torch.float64
    main = _main_shape(inputs)
    epi = [n for n in names if n not in ("a", "w", "bias")]
    per = []  # per run: {name: the gradient's terms at the main shape}, with "z" the GEMM result's
    for pre in pres:
        z = pre.detach().clone().requires_grad_(True)
        c = dict(inputs)
        for n in epi:
            try:
                c[n] = inputs[n].detach().expand(main).clone().requires_grad_(True)
            except RuntimeError:  # an input that is not the main shape's (an op's own shape)
                return None
        outs = tuple(ref.chain(*[c[n] for n in NAMES], gemm=lambda *ops, z=z: z))
        keep = inputs.get("_grad_outputs")
        if keep is not None:
            outs = tuple(o for o, g in zip(outs, keep) if g)
        pairs = [(o, d) for o, d in zip(outs, dys) if o.requires_grad and d is not None]
        if not pairs:
            return None
        leaves = [z] + [c[n] for n in epi]
        gs = torch.autograd.grad([o for o, _ in pairs], leaves, [d for _, d in pairs], allow_unused=True)
        per.append({k: (torch.zeros(main, dtype=f64, device=z.device) if g is None else g.detach().to(f64))
                    for k, g in zip(["z"] + epi, gs)})
    base, rest = per[2], per[:2] + per[3:]  # the exact product's, and the others'
    a64, w64 = inputs["a"].detach().to(f64), inputs["w"].detach().to(f64)
    bias0 = [torch.zeros(shapes_n(inputs), dtype=f64, device=a64.device)] if GEMM["bias"] else []

    def vjp(dz, a, w, which):  # the GEMM's gradient w.r.t. operand `which` for dz: bilinear
        a, w = a.clone().requires_grad_(which == "a"), w.clone().requires_grad_(which == "w")
        return torch.autograd.grad(ref.gemm(a, w, *bias0), [a if which == "a" else w], dz)[0]

    def spread(key):  # per element, the lowest and highest difference from the exact product's
        d = torch.stack([r[key] - base[key] for r in rest])
        return d.amin(0).clamp(max=0), d.amax(0).clamp(min=0)

    out = []
    for n in names:
        if n in ("a", "w"):
            # a sum over the GEMM's output elements of D times the other operand, each element
            # anywhere in its [dmin, dmax]: lowest with dmin where the operand is positive
            args = (lambda dz, o: (dz, a64, o)) if n == "a" else (lambda dz, o: (dz, o, w64))
            other = w64 if n == "a" else a64
            pos, neg = other.clamp(min=0), other.clamp(max=0)
            dmin, dmax = spread("z")
            mid = vjp(*args(base["z"], other), n)
            lo = mid + vjp(*args(dmin, pos), n) + vjp(*args(dmax, neg), n)
            hi = mid + vjp(*args(dmax, pos), n) + vjp(*args(dmin, neg), n)
        elif n == "bias" or n in epi:
            key = "z" if n == "bias" else n
            shape = inputs[n].shape
            dmin, dmax = spread(key)
            mid = base[key].sum_to_size(shape)
            lo, hi = mid + dmin.sum_to_size(shape), mid + dmax.sum_to_size(shape)
        else:
            out.append(None)
            continue
        out.append((lo, hi))
    return out


def train(kernel, inputs, params):
    """The fused chain as a training step calls it (bench's backward and full modes): the
    outputs that carry a gradient, through kernel.FusedFunction; each keep mask drawn first
    (in the call), but in a check (inputs["_test"]), where the reference applies the inputs'."""
    inputs["_grad_outputs"] = kernel.GRAD_OUTPUTS
    drawn = inputs if inputs.get("_test") else _drawn(inputs)
    xs = [drawn[n] for n in NAMES]
    if GEMM and not GEMM["bias"]:
        xs.insert(2, None)
    return _grad_only(_function(kernel).apply(*xs), kernel)


def tolerance(dtype, shapes, params, grad=False):
    # the program's least precise dtype sets the tolerance, whatever the main one is; the
    # gradients' leaves out the 16-bit copies no step reads (case.GRAD_TOL_DTYPE: a GEMM's
    # cast taken rounds its output alone, its derivative is 1)
    d = getattr(case, "GRAD_TOL_DTYPE", None) if grad else None
    return fat.tol(KIND, fat.DTYPES[d or case.TOL_DTYPE])


def output_tolerances(dtype, shapes, params):
    """Per output, the tolerance of the least precise dtype of the steps it is computed from
    (case.OUT_TOL_DTYPES): an output computed in fp32 alone is held to fp32's, whatever
    another output rounds to. (Gradients: tolerance(), the whole program's.)"""
    dts = getattr(case, "OUT_TOL_DTYPES", None) or [case.TOL_DTYPE] * len(OUTPUTS)
    return [fat.tol(KIND, fat.DTYPES[d]) for d in dts]


def nbytes(shapes, dtype, params):
    """Fewest bytes the fused chain moves: each input read once, each output written once (with
    a GEMM head: its operands instead of its output)."""
    main = shapes[0]
    total = 0
    if GEMM:
        total += (math.prod(shapes[1]) + math.prod(shapes[2]) + (main[-1] if GEMM["bias"] else 0)) * _size(GEMM["dtype"])
    for _, dt, keep in case.INPUTS:
        n = 1
        for d in input_shape(main, keep):
            n *= d
        total += n * _size(dt)
    for _, dt, kind in case.OUTPUTS:
        n = 1
        for d in (main if kind == "full" else main[:-1]):
            n *= d
        total += n * _size(dt)
    return total


def bwd_nbytes(shapes, dtype, params):
    """Fewest bytes the fused backward moves (kernel.fused_backward, which recomputes the chain
    from the inputs): each output gradient read (the outputs that carry one), each input read
    but those whose gradient is an output's gradient exactly (kernel.GRAD_ALIAS: they enter
    the chain by addition alone, so no derivative reads them), and each gradient reached
    (kernel.GRAD_REACHED) written at its input's shape (a broadcast input's reduced to it), but
    an aliased one of its output gradient's dtype, which is that tensor (no bytes). With a GEMM
    head, its output stands first among the backward's inputs (saved by the forward): its
    gradient feeds the two gradient GEMMs without a round trip through memory, which read x
    and w and write their gradients and the bias'."""
    kernel = _sibling_kernel()
    main = shapes[0]
    ins = ([("pre", GEMM["dtype"], [True] * len(main))] if GEMM else []) + list(case.INPUTS)
    total = 0
    carried = []  # the dtypes of the output gradients read, in GRAD_ALIAS's numbering
    for (_, dt, kind), g in zip(case.OUTPUTS, kernel.GRAD_OUTPUTS):
        if g:
            total += math.prod(main if kind == "full" else main[:-1]) * _size(dt)
            carried.append(dt)
    # a folder generated before gradients were aliased has no GRAD_ALIAS: it writes them all
    aliases = getattr(kernel, "GRAD_ALIAS", [None] * len(ins))
    for i, ((_, dt, keep), alias) in enumerate(zip(ins, aliases)):
        n = math.prod(input_shape(main, keep))
        if alias is None:
            total += n * _size(dt)
        if (GEMM and i == 0) or dt == "bool" or not kernel.GRAD_REACHED[i]:
            continue
        if alias is None or n != math.prod(main) or carried[alias] != dt:
            total += n * _size(dt)
    if GEMM:
        operands = math.prod(shapes[1]) + math.prod(shapes[2])
        total += (2 * operands + (main[-1] if GEMM["bias"] else 0)) * _size(GEMM["dtype"])
    return total


_KERNEL = []


def _sibling_kernel():
    """The folder's kernel.py (bwd_nbytes, library_ops and gemm_only are not handed the kernel)."""
    if not _KERNEL:
        _KERNEL.append(fat.load_sibling(__file__, "kernel"))
    return _KERNEL[0]


def _size(dt):
    if dt in ("number", "number_int64"):  # passed by the caller: no bytes of the chain's
        return 0
    if dt in ("bool", "int64"):
        return {"bool": 1, "int64": 8}[dt]
    return torch.tensor([], dtype=fat.DTYPES[dt]).element_size()


if GEMM:
    def flops(shapes, dtype, params):
        """The GEMM's arithmetic, 2 * batch * M * N * K (its floor on the GEMM rate)."""
        return 2 * math.prod(shapes[0]) * shapes[1][-1]

    def bwd_flops(shapes, dtype, params):
        """The two gradient GEMMs (x's and w's), each the forward GEMM's size."""
        return 2 * flops(shapes, dtype, params)

    def gemm_only(inputs, params):
        """The traced GEMM alone (cuBLAS): what the fused kernel is measured against."""
        kernel = _sibling_kernel()
        return kernel.gemm_only(inputs["a"], inputs["w"], inputs.get("bias"))

    def library_ops(inputs, params):
        """The chain's other form, timed beside the fused kernel (bench), the report keeping the
        faster: "cublas_pointwise", the traced GEMM on cuBLAS then the program's one generated
        pointwise kernel (kernel.gemm_cublas)."""
        kernel = _sibling_kernel()

        def cublas_pointwise(inp):
            return kernel.gemm_cublas(*[inp.get(n) for n in NAMES[:2]], inp.get("bias"),
                                      *[inp[n] for n in NAMES[3 if GEMM["bias"] else 2:]])

        return {"cublas_pointwise": cublas_pointwise}, {}
