"""fuseadvise verify runner: checks generated kernel folders against their eager reference.

Embedded in the Go binary (verify/runner/runner.py) and written to a temporary directory at
run time; see verify/doc.go and docs/verify.md. Not meant to be run by hand, though it can be:

    TRITON_INTERPRET=1 python runner.py --device cpu < requests.jsonl

Protocol (JSON lines; the Go side owns the process and its time limits):
- stdin: one request per line, {"dir": FOLDER, "skip": [CASE_ID, ...]}; EOF ends the process.
- stdout (a private copy of fd 1; anything the kernels print goes to stderr):
  {"ev": "hello", "torch": V, "triton": V, "python": V, "interpret": bool, "cuda": bool}
      or {"ev": "hello", "error": MSG} when torch / triton cannot be imported;
  {"ev": "fatal", "msg": MSG} for a condition that stops every folder (no CUDA device);
  per request: {"ev": "plan", "dir", "pattern", "cases": [{"id", "name", "shapes", "dtype"}]},
  then per case {"ev": "start", "id"} and {"ev": "case", ...result}, and {"ev": "done", "dir"};
  or {"ev": "error", "dir", "msg"} when the folder cannot be loaded or planned.
Non-finite numbers are sent as the strings "nan", "inf", "-inf" (JSON has no NaN).
"""

import argparse
import contextlib
import functools
import gc
import hashlib
import importlib.util
import inspect
import json
import math
import os
import pathlib
import sys
import time
import traceback

try:
    import torch
    import triton
    _IMPORT_ERROR = None
except Exception as e:  # noqa: BLE001 - reported to Go by main(), which says how to fix it
    torch = triton = None
    _IMPORT_ERROR = f"{type(e).__name__}: {e}"

# The protocol goes to a private copy of stdout, set up by main(); fd 1 (print, kernel
# debugging) then joins stderr. Until then (the module imported by its tests) it is stdout.
_PROTO = sys.stdout


def emit(ev, **fields):
    fields = {"ev": ev, **fields}
    _PROTO.write(json.dumps(_finite(fields), allow_nan=False) + "\n")
    _PROTO.flush()


def _finite(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-elems", type=int, default=1 << 20,
                    help="refuse cases with more input elements than this (0: no limit)")
    ap.add_argument("--fail-fast", action="store_true", help="stop a folder at its first failing case")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return ap.parse_args(argv)


ARGS = parse_args([])  # the defaults; main() parses the command line
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
ALL_DTYPES = ["fp32", "fp16", "bf16"]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16} if torch else {}


def start():
    """Takes over stdout for the protocol, says hello (or why not), checks the device.
    Returns an exit status, or None to go on."""
    global _PROTO
    _PROTO = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if _IMPORT_ERROR is not None:
        emit("hello", error=_IMPORT_ERROR, python=sys.version.split()[0], executable=sys.executable)
        return 3
    if ARGS.threads > 0:
        torch.set_num_threads(ARGS.threads)
    emit("hello", torch=torch.__version__, triton=triton.__version__, python=sys.version.split()[0],
         executable=sys.executable, interpret=INTERPRET, cuda=bool(torch.cuda.is_available()))
    if ARGS.device == "cuda":
        if INTERPRET:
            emit("fatal", msg="GPU verification needs TRITON_INTERPRET unset")
            return 4
        if not torch.cuda.is_available():
            emit("fatal", msg="no CUDA device: torch.cuda.is_available() is False "
                              f"(torch {torch.__version__}, CUDA build {torch.version.cuda})")
            return 4
    return None


# ---------------------------------------------------------------------------------------------
# Loading a folder


def load_module(folder, name):
    """Imports <folder>/<name>.py under a module name unique to the folder."""
    tag = hashlib.sha1(str(folder).encode()).hexdigest()[:12]
    modname = f"_fa_{tag}_{name}"
    if modname in sys.modules:
        return sys.modules[modname]
    path = folder / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[modname]
        raise
    return mod


class Folder:
    def __init__(self, path):
        self.path = pathlib.Path(path).resolve()
        # the adapter imports the folder's own fa_testing.py: make it the one found
        sys.modules.pop("fa_testing", None)
        if str(self.path) in sys.path:
            sys.path.remove(str(self.path))
        sys.path.insert(0, str(self.path))
        self.case = load_module(self.path, "case")
        self.adapter = load_module(self.path, "adapter")
        self.reference = load_module(self.path, "reference")
        self.kernel = load_module(self.path, "kernel")
        for attr in ("PATTERN", "DTYPE", "SHAPES", "PARAMS"):
            if not hasattr(self.case, attr):
                raise ValueError(f"case.py has no {attr}")
        for fn in ("make_inputs", "fused", "reference", "tolerance", "interp_shapes"):
            if not callable(getattr(self.adapter, fn, None)):
                raise ValueError(f"adapter.py has no {fn}()")
        if self.case.DTYPE not in DTYPES:
            raise ValueError(f"case.py: DTYPE {self.case.DTYPE!r} is not one of {sorted(DTYPES)}")
        self.pattern = self.case.PATTERN
        self.params = dict(self.case.PARAMS)


# ---------------------------------------------------------------------------------------------
# Cases


class Case:
    def __init__(self, name, shapes, dtype, variant=None, grad=False, note="", tiles=None, dy=None, once=False):
        self.name, self.shapes, self.dtype = name, [list(map(int, s)) for s in shapes], dtype
        self.once = once  # one trial whatever --trials (the wide cases: long in the interpreter)
        self.variant, self.grad, self.note = variant, grad, note  # grad: False, True or "twice"
        self.dy = dy  # the output gradients' layout (output_grads), None: contiguous
        self.tiles = tiles  # the kernel's forced_tiles argument (adapter.tile_cases), or None
        self.changed = []  # the inputs the variant changed (set when run)
        self.id = f"{name}@{dtype}"

    def plan(self):
        return {"id": self.id, "name": self.name, "shapes": self.shapes, "dtype": self.dtype}


def _shape_name(shapes):
    return "x".join(str(d) for d in shapes[0]) if shapes and shapes[0] else "scalar"


def interp_shapes(a, shapes, params):
    """a.interp_shapes(shapes), with the case's params when it takes them (add_layernorm's
    channels-first norm keeps its channels)."""
    if len(inspect.signature(a.interp_shapes).parameters) > 1:
        return a.interp_shapes(shapes, params)
    return a.interp_shapes(shapes)


def build_cases(f):
    """The cases for one folder: scaled traced shapes at every supported dtype, the pattern's
    adversarial shapes, non-contiguous layouts, large magnitudes, NaN / -inf propagation,
    fully-masked rows (masked patterns), and gradients for patterns with a backward."""
    a, p = f.adapter, f.params
    base_dt = f.case.DTYPE
    supported = getattr(a, "DTYPES", ALL_DTYPES)  # a list, or a function of the params
    supported = list(supported(p) if callable(supported) else supported)
    dtypes = [base_dt] + [d for d in ALL_DTYPES if d != base_dt and d in supported]
    traced = interp_shapes(a, f.case.SHAPES, p)
    cases = []
    if ARGS.device == "cuda":
        cases.append(Case("traced-full", f.case.SHAPES, base_dt))
    for d in dtypes:
        cases.append(Case("traced", traced, d))
    adv = list(a.adversarial(p)) if callable(getattr(a, "adversarial", None)) else list(getattr(a, "ADVERSARIAL", []))
    seen = set()
    # adversarial shapes at the traced dtype, and again in fp32, whose tight tolerance (1e-5)
    # shows tail and loop errors that fp16/bf16's 1e-2 hides (softmax rows of 1500 have
    # probabilities around 1e-3)
    adv_dts = [base_dt] + (["fp32"] if base_dt != "fp32" and "fp32" in supported else [])
    names = []
    for shapes in adv:
        name = "adv-" + _shape_name(shapes)
        while name in seen:
            name += "'"
        seen.add(name)
        names.append(name)
    for d in adv_dts:
        for name, shapes in zip(names, adv):
            cases.append(Case(name, shapes, d))
    # an empty batch (a mixture-of-experts expert that got no tokens): nothing to compute, the
    # outputs empty, and the backward's gradients of the inputs' shapes (empty, or zero where
    # an input does not have the batch: a weight's)
    empty = empty_shapes(traced)
    if empty is not None:
        cases.append(Case("empty", empty, base_dt))
    # variants of the traced case that apply to this pattern's inputs (probed once on the CPU)
    global CURRENT_ADAPTER
    CURRENT_ADAPTER = a
    probe = a.make_inputs(traced, DTYPES[base_dt], p, "cpu", 0)
    for name, v in (("strided", "strided"), ("strided-vec", "strided_vec"), ("expanded", "expanded"), ("transposed", "transposed"),
                    ("channels-last", "channels_last"), ("offset", "offset"),
                    ("large", "large"), ("small", "small"), ("negative", "negative"), ("range", "range"), ("nan-inf", "specials"),
                    ("masked-rows", "masked_rows"), ("planted", "planted"), ("in-place", "in_place")):
        if transform(v, probe)[1]:
            cases.append(Case(name, traced, base_dt, variant=v))
    # a shape wide enough that each output has elements enough for the bias check (an
    # adapter's wide_shapes: a constant 0.1% off in a bfloat16 output, below its tolerance,
    # shows in the mean of about a thousand elements, not of the traced case's few dozen)
    wide_shapes = getattr(a, "wide_shapes", None)
    wide = wide_shapes(p) if callable(wide_shapes) else None
    if wide:
        cases.append(Case("wide-" + _shape_name(wide), wide, base_dt, once=True))
    # in place at every adversarial shape of a GEMM head too: its buckets of M take the
    # library path or the tiles in turn under the interpreter, and the library path writes
    # the GEMM's output into an output buffer
    # (and the planted numbers: the epilogue compares the GEMM's output with them exactly
    # only where the tiles run)
    if getattr(a, "GEMM", None):
        for name, shapes in zip(names, adv):
            probe = a.make_inputs(shapes, DTYPES[base_dt], p, "cpu", 0)
            for v, label in (("in_place", "in-place"), ("planted", "planted")):
                if transform(v, probe)[1]:
                    cases.append(Case(f"{label}-{name}", shapes, base_dt, variant=v))
    # the first adversarial shape (ragged, usually one block per row where the traced rows
    # need several) transposed and small: a row kernel's single-block path gets its strides
    # and eps checked too
    if adv:
        probe = a.make_inputs(adv[0], DTYPES[base_dt], p, "cpu", 0)
        for name, v in (("transposed", "transposed"), ("channels-last", "channels_last"), ("small", "small")):
            if transform(v, probe)[1]:
                cases.append(Case(f"{name}-{_shape_name(adv[0])}", adv[0], base_dt, variant=v))
    # a generic row program's longest rows (past its widest tile: the row loop) at large
    # values: its statistics far from zero, where the random rows' sums and means sit near it
    # under the tolerance's atol (a mean divided by N + 1 there passed every other case)
    if adv and getattr(a, "RANGE_CASE", False) and getattr(a, "KIND", "") == "softmax":
        longest = max(adv, key=lambda s: s[0][-1] if s and s[0] else 0)
        cases.append(Case(f"large-{_shape_name(longest)}", longest, base_dt, variant="large"))
    has_bwd = a.has_backward(p) if callable(getattr(a, "has_backward", None)) else False
    if has_bwd:
        cases.append(Case("grad", traced, base_dt, grad=True))
        if adv:
            cases.append(Case("grad-" + _shape_name(adv[0]), adv[0], base_dt, grad=True))
        # shapes whose backward takes another path (an adapter's grad_shapes: e.g. short rows
        # several to a program, with a ragged last tile)
        extra = getattr(a, "grad_shapes", None)
        extra = extra(p) if callable(extra) else []
        for s in extra:
            cases.append(Case("grad-" + _shape_name(s), s, base_dt, grad=True))
        # the inputs broadcast otherwise than traced (an adapter's broadcast_cases): the
        # backward's other reductions of a broadcast input's gradient, each where it runs
        bcast = getattr(a, "broadcast_cases", None)
        for name, s, variant in (bcast(p) if callable(bcast) else []):
            cases.append(Case("grad-" + name, s, base_dt, variant=variant, grad=True))
        # a second derivative (create_graph): eager's, or a clear refusal, never a part of it
        cases.append(Case("grad-twice", traced, base_dt, grad="twice"))
        # the output gradients as autograd hands them over: y.sum()'s, one value expanded
        # (every stride 0), and a transposed one (a transpose downstream of the chain)
        # (and "each": every element's gradient from one output alone, in turn, so that an
        # input's gradient at an element is one output's term, not the sum of all of theirs,
        # under whose bound one term's error would hide)
        for dy in ("expanded", "transposed", "each"):
            cases.append(Case("grad-dy-" + dy, traced, base_dt, grad=True, dy=dy))
        # (and outputs reached by no loss, over inputs with zeros, where an infinite derivative
        # on their branches must add nothing, as eager never visits them: all but the first,
        # and the first alone)
        for dy in ("unused", "unused-first"):
            cases.append(Case("grad-dy-" + dy, traced, base_dt, variant="zeros", grad=True, dy=dy))
        # (and at the wide shape: each output's terms alone where there are several, so that
        # one output's term biased in the backward shows at its own elements)
        outs = len(getattr(a, "OUTPUTS", []))
        wide_each = wide_shapes(p, outs) if callable(wide_shapes) else None
        if wide_each:
            cases.append(Case(("grad-dy-each-" if outs > 1 else "grad-") + _shape_name(wide_each), wide_each,
                              base_dt, grad=True, dy="each" if outs > 1 else None, once=True))
        if empty is not None:
            cases.append(Case("grad-empty", empty, base_dt, grad=True))
        if base_dt != "fp32" and "fp32" in supported:
            cases.append(Case("grad", traced, "fp32", grad=True))
        # a backward's masks at the boundaries (clamp's x >= min) where the planted case applies
        if transform("planted", a.make_inputs(traced, DTYPES[base_dt], p, "cpu", 0))[1]:
            cases.append(Case("grad-planted", traced, base_dt, variant="planted", grad=True))
        # the gradients of inputs stored transposed, at the traced shape and the adapter's
        # gradient shapes (a backward whose index math or layout plan takes another path
        # there: the generic backward's row dims that do not merge)
        # (and of NCHW inputs stored NHWC, a channels-last conv net's, whose per-channel
        # gradients the backward sums over a permuted layout)
        for s in [traced] + extra:
            probe = a.make_inputs(s, DTYPES[base_dt], p, "cpu", 0)
            for label, v in (("transposed", "transposed"), ("channels-last", "channels_last")):
                if transform(v, probe)[1]:
                    name = f"grad-{label}" + ("" if s is traced else "-" + _shape_name(s))
                    cases.append(Case(name, s, base_dt, variant=v, grad=True))
    # every tile the GPU could pick where the kernel picks its tiles at run time (the interpreter
    # runs one otherwise), forced through kernel.forced_tiles, at shapes spanning several blocks
    tile_cases = getattr(a, "tile_cases", None)
    if callable(tile_cases) and callable(getattr(f.kernel, "forced_tiles", None)):
        for name, shapes, tiles, grad in tile_cases(f.kernel, f.case.SHAPES, base_dt, p):
            cases.append(Case(name, shapes, base_dt, grad=grad, tiles=tiles))
    return cases


def empty_shapes(shapes):
    """shapes with the leading (batch) dim of the first shape 0, and of every other shape of
    its rank that starts with the same dim (the operands that carry the batch: x and a
    residual, q, k and v; not a weight), but a shape that broadcasts against the first where
    that dim is 1 (a 1 where the first shape has more: a convolution's bias [1, C, 1, 1]
    on [1, C, H, W]), which keeps its 1; None for a first shape of rank below 2 or already
    empty."""
    if not shapes or len(shapes[0]) < 2 or shapes[0][0] == 0:
        return None
    x = shapes[0]
    lead, rank = x[0], len(x)

    def carries(s):
        if len(s) != rank or s[0] != lead:
            return False
        return s is x or lead != 1 or not any(d == 1 and xd != 1 for d, xd in zip(s[1:], x[1:]))
    return [[0] + list(s[1:]) if carries(s) else list(s) for s in shapes]


# Input transforms: the same values in a different memory layout, or different values.


def _floating(t):
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point


def _strided(t):
    """Same shape and values; the last dim has stride 2 (every other element of a buffer)."""
    if t.dim() == 0:
        return t
    buf = torch.full(list(t.shape[:-1]) + [2 * t.shape[-1]], float("nan") if _floating(t) else 0,
                     dtype=t.dtype, device=t.device)
    v = buf[..., ::2]
    v.copy_(t)
    return v


def _transposed(t):
    """Same shape and values, last two dims stored column-major (a transposed view)."""
    if t.dim() < 2:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


def _offset(t):
    """Same shape and values, contiguous, starting 3 elements into its storage."""
    n = t.numel()
    buf = torch.full([n + 5], float("nan") if _floating(t) else 0, dtype=t.dtype, device=t.device)
    v = buf[3:3 + n].view(t.shape)
    v.copy_(t)
    return v


def _channels_last(t):
    """Same shape and values, NCHW stored NHWC (torch.channels_last: a conv net's activations
    after model.to(memory_format=torch.channels_last))."""
    return t.contiguous(memory_format=torch.channels_last)


def _expanded(t):
    """Same shape, the first index of the leading dim repeated over it: a stride-0 view
    (a position table or a mask expanded over the batch: x.expand(B, ...))."""
    if t.dim() < 2 or t.shape[0] < 2:
        return t
    return t[:1].expand(t.shape)


# variant -> (transform, applies to a tensor of this rank)
LAYOUTS = {
    "strided": (_strided, lambda r: r >= 2),      # activations: every other element of the last dim
    "expanded": (_expanded, lambda r: r >= 2),
    "strided_vec": (_strided, lambda r: r == 1),  # vectors (bias, weight): stride 2
    "transposed": (_transposed, lambda r: r >= 2),
    "channels_last": (_channels_last, lambda r: r == 4),
    "offset": (_offset, lambda r: True),
}


def _first_float(inputs):
    for k, v in inputs.items():
        if _floating(v) and "mask" not in k:
            return k
    return None


def transform(variant, inputs):
    """Applies a case variant to fresh inputs. Returns (inputs, names of the inputs changed)."""
    if variant is None:
        return inputs, ["-"]
    out = dict(inputs)
    if variant in LAYOUTS:
        fn, ranks = LAYOUTS[variant]
        changed = []
        for k, v in inputs.items():
            if isinstance(v, torch.Tensor) and v.numel() > 0 and ranks(v.dim()):
                nv = fn(v)
                if nv is not v:
                    changed.append(k)
                out[k] = nv
        return out, changed
    if variant == "zeros":
        # every fifth element of each floating input exactly 0 (ReLU's outputs, padding): where
        # log, a reciprocal, a square root or a negative power has an infinite derivative
        changed = []
        for name, v in inputs.items():
            if _floating(v) and v.numel() > 0 and "mask" not in name:
                every = torch.arange(v.numel(), device=v.device).reshape(v.shape) % 5 == 0
                out[name] = v.clone().masked_fill_(every, 0)  # the input's own strides kept
                changed.append(name)
        return out, changed
    if variant in ("large", "small", "negative"):
        # large: x*64 + 1024, magnitudes far from 1 and a large common offset (max-subtraction, variance
        # as E[(x - mean)^2], overflow of intermediates); small: magnitudes around 1e-3, so a
        # norm's eps matters (scaling by a power of two is exact); negative: -(|x|*64 + 1024),
        # every element far below zero, so that a row's maximum is negative and exp of a row
        # not shifted by it underflows (a softmax's or a maximum's masked lanes filled with 0
        # instead of -inf show; large's all-positive rows show a minimum's fill; an adapter
        # whose norm cannot hold it sets NEGATIVE_CASE = False). Applied to every floating
        # input shaped like the first one (x and a residual, gate and up), not to vectors.
        k = _first_float(inputs)
        if k is None or (variant == "negative" and not getattr(CURRENT_ADAPTER, "NEGATIVE_CASE", True)):
            return out, []
        shape = inputs[k].shape
        changed = []
        for name, v in inputs.items():
            if _floating(v) and "mask" not in name and v.shape == shape:
                if variant == "large":
                    out[name] = (v.float() * 64.0 + 1024.0).to(v.dtype)
                elif variant == "negative":
                    out[name] = (-(v.float().abs() * 64.0 + 1024.0)).to(v.dtype)
                else:
                    out[name] = v * 2.0 ** -10
                changed.append(name)
        return out, changed
    if variant == "range":
        # every magnitude a 16-bit step can meet: log-uniform from 2**-30 to 2**15.9, random
        # signs, so float16 steps round subnormals and overflow to inf (and fp32 ones lose
        # digits in sums); for adapters that ask for it (RANGE_CASE: the generic chains, whose
        # steps round as eager's), to every floating input shaped like the first one
        k = _first_float(inputs)
        if k is None or not getattr(CURRENT_ADAPTER, "RANGE_CASE", False):
            return out, []
        shape = inputs[k].shape
        changed = []
        for name, v in inputs.items():
            if _floating(v) and "mask" not in name and v.shape == shape and v.numel() > 0:
                seed = int(v.detach().float().abs().nan_to_num().sum().item() * 1e3) % (2 ** 31)
                g = _gen(seed)
                mag = torch.exp2(-30.0 + 45.9 * torch.rand(tuple(v.shape), generator=g, dtype=torch.float64))
                sign = torch.where(torch.rand(tuple(v.shape), generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
                nv = torch.empty_like(v)  # v's layout kept
                nv.copy_((mag * sign).to(v.device))
                out[name] = nv
                changed.append(name)
        return out, changed
    if variant == "specials":
        k = _first_float(inputs)
        if k is None or inputs[k].numel() < 2:
            return out, []
        x = inputs[k].clone()  # its layout kept (a channels_last input stays one)

        def at(i):  # the element i of x in row-major order, whatever its strides
            return tuple(int(j) for j in torch.unravel_index(torch.tensor(i), x.shape))

        x[at(x.numel() // 2)] = float("nan")
        if getattr(CURRENT_ADAPTER, "KIND", "") != "gemm":
            # not into a GEMM: BLAS gives NaN or +-inf for a row with an inf (blocking, inf*0)
            x[at(x.numel() - 1)] = float("-inf")
        out[k] = x
        return out, [k]
    if variant == "in_place":
        # outputs written into inputs in place (the generic adapter's in_place_outputs): the
        # inputs as they are; the names are those the call will overwrite
        fn = getattr(CURRENT_ADAPTER, "in_place_outputs", None)
        return out, sorted(set(fn(out).values())) if callable(fn) else []
    if variant == "planted":
        # the adapter's numbers at which the chain decides (a comparison's, a clamp's bounds)
        # written into its inputs (the generic adapter's planted())
        fn = getattr(CURRENT_ADAPTER, "planted", None)
        return fn(out) if callable(fn) else (out, [])
    if variant == "masked_rows":
        # one row fully masked and one fully open, whatever True means for the mask
        changed = []
        for k, v in inputs.items():
            if not isinstance(v, torch.Tensor) or "mask" not in k or v.dim() == 0:
                continue
            m = v.clone()
            rows = m.view(-1, m.shape[-1]) if m.is_contiguous() else None
            if rows is None:
                continue
            if m.dtype == torch.bool:
                rows[0] = True
                if rows.shape[0] > 1:
                    rows[1] = False
            elif m.dtype.is_floating_point:
                rows[0] = float("-inf")
                if rows.shape[0] > 1:
                    rows[1] = 0.0
            else:
                continue
            out[k] = m
            changed.append(k)
        return out, changed
    raise ValueError(f"unknown variant {variant}")


# ---------------------------------------------------------------------------------------------
# Comparison


class Mismatch(Exception):
    pass


def _canonical_fa_testing():
    """The checks every folder carries as its fa_testing.py, in the version of this runner:
    fa_testing.py beside this script (verify writes it there from templates/_common), or, run
    from the repository (its tests), templates/_common/fa_testing.py itself. The comparison
    is that file's compare, one source with the folders' assert_close, whatever version of it
    a folder carries."""
    here = pathlib.Path(__file__).resolve().parent
    for p in (here / "fa_testing.py", here.parents[1] / "templates" / "_common" / "fa_testing.py"):
        if p.exists():
            spec = importlib.util.spec_from_file_location("fa_verify_canonical_fa_testing", p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    raise ImportError(f"fa_testing.py is neither beside {here / 'runner.py'} nor in the repository")


if torch is not None:
    CANONICAL = _canonical_fa_testing()
    compare = CANONICAL.compare


def _fmt(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


class Acc:
    """Accumulates the worst errors of one case over outputs and trials."""

    def __init__(self):
        self.max_abs, self.max_rel = 0.0, 0.0
        self.atol = self.rtol = None
        self.fail = None  # dict: output, index, got, want, count, numel, seed

    def add(self, name, got, want, atol, rtol, seed, quack=None, band=None):
        """quack: None, or (check, ref, terms, term_scale): the quack check (fa_testing.quack_check
        of the folder) against ref, the chain in a higher precision; the errors recorded are
        then against ref. band: None, or (lo, hi) (fa_testing.output_bands): elements in it
        (widened by the tolerance) are not mismatches."""
        if tuple(got.shape) != tuple(want.shape):
            raise Mismatch(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
        if got.dtype != want.dtype:
            raise Mismatch(f"{name}: dtype {got.dtype}, want {want.dtype}")
        if self.fail is None:  # the tolerance reported: the failing output's, else the last one's
            self.atol, self.rtol = atol, rtol
        note = None
        if quack is None:
            ma, mr, n, first = compare(got, want, atol, rtol, band)
        else:
            check, ref, terms, term_scale = quack
            ma, mr, _, _ = compare(got, ref, atol, rtol)
            ok, note, first = check(got, want, ref, terms, term_scale)
            n = 0 if ok else 1
        self.max_abs = _worse(self.max_abs, ma)
        self.max_rel = _worse(self.max_rel, mr)
        if n and self.fail is None:
            self.fail = {"output": name, "index": first[0], "got": _fmt(first[1]), "want": _fmt(first[2]),
                         "count": n, "numel": got.numel(), "seed": seed}
            if note:
                self.fail["note"] = note
        return n == 0


def _worse(a, b):
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    return max(a, b)


def unmodified(before, after):
    """First index where an input changed (bitwise, NaN-aware), or None."""
    if before.dtype.is_floating_point:
        same = (before == after) | (torch.isnan(before) & torch.isnan(after))
    else:
        same = before == after
    if bool(same.all()):
        return None
    return [int(i) for i in (~same).nonzero()[0].tolist()]


# ---------------------------------------------------------------------------------------------
# Running


def _gen(seed):
    return torch.Generator(device="cpu").manual_seed(int(seed))


def _numel(shapes):
    total = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= int(d)
        total += n
    return total


def case_seed(case, trial):
    h = int(hashlib.sha1(case.id.encode()).hexdigest()[:6], 16)
    return ARGS.seed * 1_000_000 + (h % 100_000) * 10 + trial


GUARD = 4096          # elements of guard band before and after every guarded buffer
GUARD_VALUE = 4096.0  # exact in fp32, fp16 and bf16; the guard bands alternate it with
GUARD_VALUE2 = -3072.0  # this one, so that an in-place map that keeps one (GELU, ReLU keep a
# large positive value) rewriting the band past a buffer in place still changes it; and each
# guarded buffer after the first takes the next pair of GUARD_PAIRS, so that a map from one
# buffer past its end into another's band does not write the value already there (a
# pointwise pass one element past the end that keeps 4096, x * (x > 0.1) on the GEMM output
# it reads, wrote 4096 where the output's band held 4096)
GUARD_PAIRS = [(GUARD_VALUE, GUARD_VALUE2), (3584.0, -2560.0), (-2048.0, 3072.0), (2560.0, -3584.0)]
GUARD_INT = 90        # guard value for integer buffers (keep-masks); their body is POISON_INT
POISON_INT = 77


class OutOfBounds(Mismatch):
    pass


class Guarded:
    """While active, replaces the folder's fa_testing.poison (outputs the adapter poisons) and
    torch.empty (buffers the kernel wrapper allocates: outputs, saved statistics, gradients)
    with buffers that are poisoned (NaN; POISON_INT for integers) and sit between two guard
    bands of GUARD elements. check() then fails when a kernel wrote outside a buffer (a
    dropped or off-by-one store mask on the last rows), even where the write would land in
    memory nobody looks at; poisoned gradients fail where the backward left elements unwritten."""

    def __init__(self, f):
        self.mod = getattr(f.adapter, "fat", None)
        self.bufs = []
        self.saved = []
        self.orig_empty = torch.empty

    def copy(self, t):
        """t's values in a guarded buffer of its shape (contiguous), active or not."""
        if not t.dtype.is_floating_point:
            return t.clone()
        out = self._alloc(t.shape, t.dtype, t.device, 0)
        out.copy_(t)
        return out

    def _alloc(self, shape, dtype, device, fill):
        n = 1
        for d in shape:
            n *= int(d)
        gv = self.orig_empty([GUARD], dtype=dtype, device=device)
        first, second = GUARD_PAIRS[len(self.bufs) % len(GUARD_PAIRS)]
        gv.fill_(first if dtype.is_floating_point else GUARD_INT)
        if dtype.is_floating_point:
            gv[1::2] = second
        buf = self.orig_empty([n + 2 * GUARD], dtype=dtype, device=device)
        buf[:GUARD] = gv
        buf[GUARD:GUARD + n] = fill
        buf[GUARD + n:] = gv
        self.bufs.append((buf, n, gv))
        return buf[GUARD:GUARD + n].view(tuple(int(d) for d in shape))

    def poison(self, shape, dtype, device):
        return self._alloc(shape, dtype, device, float("nan") if dtype.is_floating_point else POISON_INT)

    def empty(self, *size, **kw):
        if size and len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            shape = tuple(size[0])
        else:
            shape = tuple(size)
        dtype = kw.get("dtype") or torch.get_default_dtype()
        if (set(kw) - {"dtype", "device"} or not all(isinstance(d, int) for d in shape)
                or dtype == torch.bool or dtype.is_complex):
            return self.orig_empty(*size, **kw)
        fill = float("nan") if dtype.is_floating_point else POISON_INT
        return self._alloc(shape, dtype, kw.get("device"), fill)

    def __enter__(self):
        self.orig_empty = torch.empty
        if self.mod is not None and callable(getattr(self.mod, "poison", None)):
            self.saved.append((self.mod, "poison", self.mod.poison))
            self.mod.poison = self.poison
        self.saved.append((torch, "empty", torch.empty))
        torch.empty = self.empty
        return self

    def __exit__(self, *exc):
        while self.saved:
            mod, name, fn = self.saved.pop()
            setattr(mod, name, fn)
        return False

    def check(self):
        for buf, n, gv in self.bufs:
            for where, band in (("after", buf[GUARD + n:]), ("before", buf[:GUARD])):
                bad = (band != gv).nonzero().view(-1)
                if bad.numel():
                    j = int(bad[0]) if where == "after" else int(bad[-1])
                    off = f"+{j + 1} past the end" if where == "after" else f"-{GUARD - j} before the start"
                    raise OutOfBounds(
                        f"the kernel wrote outside a {n}-element {str(buf.dtype).replace('torch.', '')} buffer: "
                        f"{bad.numel()} of the {GUARD} guard elements {where} it changed "
                        f"(first at {off}, value {_fmt(float(band[j]))})")


CURRENT_ADAPTER = None


def run_forward(f, case, dt, seed, acc):
    global CURRENT_ADAPTER
    a = CURRENT_ADAPTER = f.adapter
    inputs = a.make_inputs(case.shapes, dt, f.params, ARGS.device, seed)
    inputs, changed = transform(case.variant, inputs)
    if not changed:
        return "n/a"
    case.changed = changed
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    # in place: the inputs named in changed receive outputs; the reference reads their values
    # from before the call, and they are not held to being unmodified
    written = set(changed) if case.variant == "in_place" else set()
    guard = Guarded(f)
    with guard:
        got = tuple(a.fused(f.kernel, inputs, f.params, poison=True, **({"in_place": True} if written else {})))
    guard.check()
    ref_inputs = {**inputs, **{k: before[k] for k in written}}
    want = tuple(a.reference(f.reference, ref_inputs, f.params))
    if len(got) != len(want):
        raise Mismatch(f"fused returned {len(got)} outputs, the reference {len(want)}")
    check_dropout_rate(inputs, f.params)
    # the range an output takes where its inputs do not decide it (a GEMM head's rounding;
    # None for adapters without band_outputs)
    bands = CANONICAL.output_bands(a, f.kernel, f.reference, ref_inputs, f.params, want)
    tols = CANONICAL.output_tolerances(a, dt, case.shapes, f.params, len(want))
    names = list(getattr(a, "OUTPUTS", [])) or [f"out{i}" for i in range(len(want))]
    names += [f"out{i}" for i in range(len(names), len(want))]
    ok = True
    for name, g, w, b, (atol, rtol) in zip(names, got, want, bands, tols):
        ok &= acc.add(name, g, w, atol, rtol, seed, band=b)
    for k, v in before.items():
        if k in written:
            continue
        idx = unmodified(v, inputs[k])
        if idx is not None:
            raise Mismatch(f"input {k} was modified by the kernel (first at {idx}: "
                           f"was {_fmt(float(v[tuple(idx)]))}, now {_fmt(float(inputs[k][tuple(idx)]))})")
    # a kernel that rounds each step as eager does: its 16-bit outputs are eager's but for a few
    # elements (fa_testing.eager_rounding)
    if ok and callable(getattr(CANONICAL, "eager_rounding", None)):
        for i, (name, g, w) in enumerate(zip(names, got, want)):
            bad = CANONICAL.eager_rounding(a, i, name, g, w)
            if bad:
                raise Mismatch(bad)
    # and is not biased where eager is not (fa_testing.bias_check: a constant 0.1% off; not
    # over planted inputs, a handful of numbers repeated, whose errors are not independent)
    if ok and callable(getattr(CANONICAL, "bias_check", None)) and case.variant != "planted":
        refs = CANONICAL.bias_reference(a, f.reference, ref_inputs, f.params)
        for name, g, w, r in zip(names, got, want, refs or ()):
            bad = CANONICAL.bias_check(name, g, w, r)
            if bad:
                raise Mismatch(bad)
    return ok


def check_dropout_rate(inputs, params):
    """Where fused() handed the reference its dropout keep-mask (inputs["keep"]), the share of
    kept elements must be 1 - p: otherwise a kernel that drops the wrong elements would pass,
    since the reference applies the kernel's own mask."""
    keep, p = inputs.get("keep"), float(params.get("p", 0.0) or 0.0)
    if not isinstance(keep, torch.Tensor) or p <= 0 or keep.numel() < 1000:
        return
    n = keep.numel()
    rate = float(keep.float().mean())
    sd = math.sqrt(p * (1 - p) / n)
    if abs(rate - (1 - p)) > max(6 * sd, 0.005):
        raise Mismatch(f"dropout keeps {rate:.4f} of {n} elements, want 1-p = {1 - p:.4f} (6 sd = {6 * sd:.4f})")


def run_backward(f, case, dt, seed, acc):
    """Gradients of every output for a random grad_output w.r.t. adapter.GRAD_INPUTS, vs eager
    (or, for adapters with QUACK_GRAD at fp16/bf16, or at fp32 too with QUACK_GRAD_FP32, the quack
    check against the chain in fp32, or in fp64 for fp32: fa_testing.quack_dtype)."""
    a = f.adapter
    inputs = a.make_inputs(case.shapes, dt, f.params, ARGS.device, seed)
    inputs, changed = transform(case.variant, inputs)
    names = [n for n in getattr(a, "GRAD_INPUTS", []) if inputs.get(n) is not None]
    if not names or not changed:
        return "n/a"

    def leaves():
        d = dict(inputs)
        for n in names:
            d[n] = inputs[n].detach().clone().requires_grad_(True)
        return d

    ia, ib = leaves(), leaves()
    guard = Guarded(f)  # gradients and saved buffers poisoned and guarded
    with guard:
        got = tuple(a.fused(f.kernel, ia, f.params, autograd=True))
    for k, v in ia.items():  # anything fused() left for the reference (a dropout mask)
        ib.setdefault(k, v)
    want = tuple(a.reference(f.reference, ib, f.params))
    dys = output_grads(want, _gen(seed + 7), case.dy, guard)
    if dys is None:
        return "n/a"
    def grads(outs, leaves):  # the outputs a loss reaches (dy not None: the "unused" layout)
        pairs = [(o, d) for o, d in zip(outs, dys) if d is not None]
        return torch.autograd.grad([o for o, _ in pairs], leaves, [d for _, d in pairs], allow_unused=True)

    with guard:
        gg = grads(got, [ia[n] for n in names])
    guard.check()
    gw = grads(want, [ib[n] for n in names])
    # the quack check and its reference are the folder's fa_testing's (one source with the
    # folder's own tests and the benchmark's GPU gradient check)
    fat = a.fat
    gref = fat.quack_grads(a, f.reference, ib, names, dys, f.params, dt) or [None] * len(names)
    scales = fat.quack_scales(a, f.reference, ib, names, dys, f.params, dt) or [0.0] * len(names)
    atol, rtol = a.tolerance(dt, case.shapes, f.params, grad=True)
    everything = list(ib.values()) + list(want)
    # (a folder generated before QUACK_ROUNDING has a quack_check without the keyword)
    rounding = getattr(a, "QUACK_ROUNDING", None)
    # the range a gradient takes where its inputs do not decide it (a GEMM head's rounding
    # across a point where the chain's derivative jumps; None for adapters without band_grads)
    bands = CANONICAL.grad_bands(a, f.kernel, f.reference, ib, names, dys, f.params, gw) \
        if callable(getattr(CANONICAL, "grad_bands", None)) else [None] * len(names)
    banded = "band" in inspect.signature(fat.quack_check).parameters  # (a folder older than bands)

    def check_for(dt_k, band):
        kw = {"rounding": dt_k} if dt_k is not None else {}
        if band is not None and banded:
            kw["band"] = band
        return functools.partial(fat.quack_check, **kw) if kw else fat.quack_check

    def biased(label, x, y, r):  # a 16-bit gradient no more biased than eager's (fa_testing.bias_check;
        # not over planted inputs: a handful of numbers repeated, their errors not independent)
        if getattr(a, "BIAS_CHECK", False) and r is not None and callable(getattr(CANONICAL, "bias_check", None)) \
                and case.variant != "planted":
            bad = CANONICAL.bias_check(label, x, y, r)
            if bad:
                raise Mismatch(bad)

    ok = True
    for n, x, y, r, sc, b in zip(names, gg, gw, gref, scales, bands):
        if y is None:
            continue
        if x is None:
            raise Mismatch(f"grad {n}: missing (the reference has one)")
        groups = each_output_groups(f, case, want, x)
        if groups:  # one output's elements at a time, each held to that output's precision
            for k, own, dt_k in groups:
                tol = fat.tol(a.KIND, dt_k)
                bk = None if b is None else (b[0][own.to(b[0].device)], b[1][own.to(b[1].device)])
                quack = None if r is None else (check_for(dt_k, bk), r[own], fat.quack_terms(x, everything), sc)
                label = f"grad {n} (output {k}'s elements)"
                if acc.add(label, x[own], y[own], *tol, seed, quack=quack, band=bk):
                    biased(label, x[own], y[own], None if r is None else r[own])
                else:
                    ok = False
            continue
        quack = None if r is None else (check_for(rounding, b), r, fat.quack_terms(x, everything), sc)
        if acc.add(f"grad {n}", x, y, atol, rtol, seed, quack=quack, band=b):
            biased(f"grad {n}", x, y, r)  # (after the comparison, whose message says more)
        else:
            ok = False
    return ok


_LESS_PRECISE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def each_output_groups(f, case, want, grad):
    """For the "each" layout of the output gradients (output_grads), where every output and
    the gradient have one shape and the folder says each output's precision
    (case.OUT_TOL_DTYPES: the least precise dtype of the steps it is computed from): per output
    k, (k, the elements whose gradient comes from output k alone, the less precise of that
    dtype and the gradient's). None otherwise: the whole gradient at the folder's tolerance.
    Held so, one term's error in a backward that sums the terms of many outputs shows at the
    elements of its output, at that output's precision (an fp32 path beside a bfloat16 cast
    is no longer held to bfloat16's)."""
    if case.dy != "each":
        return None
    # (a 16-bit copy no step reads, whose derivative is 1: its source's, OUT_GRAD_TOL_DTYPES)
    dts = list(enumerate(getattr(f.case, "OUT_GRAD_TOL_DTYPES", None) or getattr(f.case, "OUT_TOL_DTYPES", None) or []))
    carried = getattr(f.kernel, "GRAD_OUTPUTS", None)  # the outputs autograd sees, in order
    if carried is not None and len(carried) == len(dts) != len(want):
        dts = [kd for kd, g in zip(dts, carried) if g]
    if not dts or len(dts) != len(want) or not hasattr(f.adapter, "KIND"):
        return None
    if any(tuple(w.shape) != tuple(grad.shape) for w in want) or grad.dtype not in _LESS_PRECISE:
        return None
    flat = torch.arange(grad.numel(), device=grad.device).reshape(grad.shape) % len(want)
    out = []
    for j, (k, d) in enumerate(dts):
        dt = DTYPES[d]
        dt = dt if _LESS_PRECISE[dt] >= _LESS_PRECISE[grad.dtype] else grad.dtype
        out.append((k, flat == j, dt))
    return out


TWICE_REFUSED = ("once_differentiable", "does not require grad")


def run_twice(f, case, dt, seed, acc):
    """A second derivative through the fused backward, as a gradient penalty takes it: the
    gradients of sum(y**2)/2 (so that the outputs' gradients carry a graph, as most losses'
    do) w.r.t. adapter.GRAD_INPUTS with create_graph=True, then the sum of their squares'
    backward(). Either eager's (within the gradients' tolerance, at least 1e-2) or an error
    saying that the backward is not differentiable (once_differentiable, or no graph at all);
    a result that silently lacks the terms of the gradients the fused backward computed
    without a graph fails."""
    a = f.adapter
    inputs = a.make_inputs(case.shapes, dt, f.params, ARGS.device, seed)
    names = [n for n in getattr(a, "GRAD_INPUTS", []) if inputs.get(n) is not None]
    if not names:
        return "n/a"

    def leaves():
        d = dict(inputs)
        for n in names:
            d[n] = inputs[n].detach().clone().requires_grad_(True)
        return d

    def second(outs, ls):
        xs = [ls[n] for n in names]
        loss = sum((o.float() ** 2).sum() for o in outs if o.requires_grad) / 2
        gs = torch.autograd.grad(loss, xs, create_graph=True, allow_unused=True)
        pen = sum((g.float() ** 2).sum() for g in gs if g is not None)
        # as a training step takes it: backward() runs every node of the penalty's graph
        # (autograd.grad with allow_unused would prune a refusing node that leads to no input)
        pen.backward()
        return [x.grad for x in xs]

    guard = Guarded(f)
    ia, ib = leaves(), leaves()
    try:
        with guard:
            got = second(tuple(a.fused(f.kernel, ia, f.params, autograd=True)), ia)
    except RuntimeError as e:
        if any(s in str(e) for s in TWICE_REFUSED):
            return True  # refused, clearly
        raise
    for k, v in ia.items():  # anything fused() left for the reference (a dropout mask)
        ib.setdefault(k, v)
    try:
        want = second(tuple(a.reference(f.reference, ib, f.params)), ib)
    except RuntimeError:  # eager has no second derivative either (hardsigmoid's)
        return "n/a"
    atol, rtol = a.tolerance(dt, case.shapes, f.params, grad=True)
    ok = True
    for n, x, y in zip(names, got, want):
        if (x is None) != (y is None):
            raise Mismatch(f"second derivative w.r.t. {n}: {'missing' if x is None else 'where eager has none'}")
        if x is not None:
            ok &= acc.add(f"second derivative {n}", x, y, max(atol, 1e-2), max(rtol, 1e-2), seed)
    return ok


def output_grads(want, g, layout, guard):
    """Random gradients of the outputs want, laid out as autograd may hand them to a
    backward: contiguous between guard bands (layout None: a read past the end gets the
    band's values, never 0 by luck), one value expanded ("expanded": y.sum()'s gradient,
    every stride 0), transposed ("transposed": last two dims column-major), or one output's
    at a time ("each": of n outputs, output k's gradient is zero except at the flat indices
    i with i % n == k; contiguous between guard bands), or None for outputs no loss reaches,
    for which autograd passes the backward None and whose branches eager never visits: every
    output's but the first's ("unused"), the first's alone ("unused-first"). None where the
    layout changes no output (transposed outputs of fewer than two dims; "each" and the
    unused layouts with one output)."""
    if layout in ("each", "unused", "unused-first") and len(want) < 2:
        return None
    dys = []
    for k, w in enumerate(want):
        v = torch.randn(list(w.shape), generator=g, dtype=torch.float32).to(w.device, w.dtype)
        if layout == "unused" and k > 0 or layout == "unused-first" and k == 0:
            v = None  # (want: the outputs that carry a gradient)
        elif layout == "each":
            own = torch.arange(w.numel(), device=w.device).reshape(w.shape) % len(want) == k
            v = guard.copy(torch.where(own, v, torch.zeros((), dtype=v.dtype, device=v.device)))
        elif layout == "expanded":
            v = v.reshape(-1)[:1].reshape([1] * w.dim()).expand(w.shape) if w.numel() else v
        elif layout == "transposed":
            v = _transposed(v)
        else:
            v = guard.copy(v)
        dys.append(v)
    if layout == "transposed" and all(w.dim() < 2 or w.shape[-1] * w.shape[-2] <= 1 for w in want):
        return None
    return dys


def trial_reversed(case, trial):
    """Whether trial runs the interpreter's programs in reverse launch order: every other
    trial, starting with the first or the second by the case's id, so that a case of several
    trials (the traced and gradient ones) runs both orders and the single-trial cases of a
    folder run either (fa_testing.programs_reversed says why). The launch order on a GPU."""
    if ARGS.device != "cpu":
        return False
    h = int(hashlib.sha1(case.id.encode()).hexdigest()[6:8], 16)
    return (trial + h) % 2 == 1


@contextlib.contextmanager
def program_order(f, reverse):
    fat = getattr(f.adapter, "fat", None)
    set_order = getattr(fat, "programs_reversed", None)
    if not callable(set_order):
        yield
        return
    was = set_order(reverse)
    try:
        yield
    finally:
        set_order(was)


# On a GPU that several runners share (verify's jobs), a case may run out of memory because
# another runner's large case holds it at that moment (layernorm_linear's views past 2**31
# elements allocate 13 GiB each: four runners on an 80 GB card did not fit, 2026-12-05).
# Such a case runs again once memory may have freed: up to OOM_RETRIES more times, waiting
# OOM_WAIT seconds times the attempt; then its out-of-memory error is its result.
OOM_RETRIES = 4
OOM_WAIT = 3.0


def run_case(f, case):
    """_run_case, run again where it ran out of GPU memory (OOM_RETRIES); a result that
    needed it says so in its note."""
    for attempt in range(OOM_RETRIES + 1):
        res = _run_case(f, case)
        oom = res.get("status") == "error" and res.get("message", "").startswith("OutOfMemoryError")
        if ARGS.device == "cpu" or not oom or attempt == OOM_RETRIES:
            break
        gc.collect()
        torch.cuda.empty_cache()
        time.sleep(OOM_WAIT * (attempt + 1))
    if attempt:
        again = f"ran {attempt} more time(s) after running out of GPU memory (a GPU the runners share)"
        res["note"] = f"{res['note']}; {again}" if res.get("note") else again
    return res


def _run_case(f, case):
    t0 = time.time()
    reverse = False
    res = {"id": case.id, "name": case.name, "pattern": f.pattern, "shapes": case.shapes,
           "dtype": case.dtype, "seeds": []}
    if ARGS.device == "cpu" and ARGS.max_elems and _numel(case.shapes) > ARGS.max_elems:
        res.update(status="refused", message=(
            f"{_numel(case.shapes)} input elements exceed the interpreter limit of {ARGS.max_elems} "
            "(Triton's interpreter runs every program serially in Python); verify it on a GPU (-gpu)"))
        return res
    dt = DTYPES[case.dtype]
    acc = Acc()
    status, msg = "pass", ""
    try:
        # the traced cases and gradients get every trial; adversarial shapes and layout /
        # value variants (about indexing, which one input shows; each case has its own seed)
        # two fewer, at least one; tile cases (one per tile, about indexing too) as few
        trials = ARGS.trials if (case.name.startswith("traced") or (case.grad and case.tiles is None)) \
            else max(1, ARGS.trials - 2)
        trials = 1 if case.once else trials
        for trial in range(trials):
            seed = case_seed(case, trial)
            res["seeds"].append(seed)
            reverse = trial_reversed(case, trial)
            with torch.random.fork_rng(devices=[]), program_order(f, reverse), \
                    (f.kernel.forced_tiles(case.tiles) if case.tiles is not None else contextlib.nullcontext()):
                torch.manual_seed(seed)
                run = run_twice if case.grad == "twice" else run_backward if case.grad else run_forward
                ok = run(f, case, dt, seed, acc)
            if ok == "n/a":
                res.update(status="skipped", message="variant does not apply to this pattern's inputs", seeds=[])
                return res
            if not ok:
                status = "fail"
                break
    except OutOfBounds as e:
        status, msg = "fail", str(e)
        res["tainted"] = True  # out-of-bounds writes may have corrupted this process
    except Mismatch as e:
        status, msg = "fail", str(e)
        if "was modified by the kernel" in msg:
            res["tainted"] = True
    except Exception as e:  # noqa: BLE001 - any kernel error is a failed case, with its cause
        status = "error"
        res["tainted"] = True
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        msg = f"{type(e).__name__}: {e}".strip()
        tail = "".join(tb[-3:])
        print(f"[{f.pattern} {case.id}]\n" + "".join(tb), file=sys.stderr)
        msg = msg.splitlines()[0][:400] if msg else tail[-400:]
    res.update(status=status, max_abs=acc.max_abs, max_rel=acc.max_rel, seconds=round(time.time() - t0, 3))
    if acc.atol is not None:
        res.update(atol=acc.atol, rtol=acc.rtol)
    if acc.fail is not None:
        res["mismatch"] = acc.fail
    if status != "pass" and reverse:
        order = "the failing trial ran each launch's programs in reverse order"
        msg = f"{msg}; {order}" if msg else order
    if status != "pass" and case.variant and case.changed:
        what = f"variant {case.variant} applied to: {', '.join(case.changed)}"
        msg = f"{msg}; {what}" if msg else what
    if msg:
        res["message"] = msg
    if case.note:
        res["note"] = case.note
    return res


def serve(req):
    d = req.get("dir")
    skip = set(req.get("skip") or [])
    only = set(req.get("only") or [])  # verify -case: these ids or names alone
    try:
        f = Folder(d)
        cases = build_cases(f)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        emit("error", dir=d, msg=f"{type(e).__name__}: {e}".splitlines()[0][:500])
        emit("done", dir=d)
        return
    emit("plan", dir=d, pattern=f.pattern, dtype=f.case.DTYPE, params=_finite(f.params),
         cases=[c.plan() for c in cases])
    for c in cases:
        if c.id in skip or c.name in skip or (only and c.id not in only and c.name not in only):
            continue
        emit("start", id=c.id)
        res = run_case(f, c)
        emit("case", **res)
        if ARGS.fail_fast and res["status"] not in ("pass", "skipped"):
            break
    emit("done", dir=d)


def main(argv=None):
    global ARGS
    ARGS = parse_args(argv)
    rc = start()
    if rc is not None:
        return rc
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except ValueError as e:
            emit("fatal", msg=f"bad request: {e}")
            return 2
        serve(req)
    return 0


if __name__ == "__main__":
    sys.exit(main())
