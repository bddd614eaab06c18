"""A corpus of small modules for generic chains (issue 12, item 5): each is one GEMM (nn.Linear,
a bias-free matmul, a batched matmul) followed by 2-6 pointwise ops, some ending in a
reduction over the last dim or a residual add, in the style of KernelBench's level 2 (the
modules are this project's own). Each case declares the top-level ATen ops its forward runs,
in order (views left out): check() holds every case to that declaration and to the ops
patterns/generic.go's table knows, on the CPU.

  python3 scripts/record_corpus.py list
  python3 scripts/record_corpus.py check [-dtypes fp32,bf16]      # CPU, small sizes, seconds
  python3 scripts/record_corpus.py record -o OUT [-dtypes fp32,bf16] [-tiny] [-device cpu]

record writes, per case and dtype, OUT/NAME_DTYPE.json.gz and OUT/NAME_DTYPE.et.json.gz
(tracerec.record: one forward pass under no_grad after one warm-up, record_shapes, an
execution trace beside it, both trimmed to what fuseadvise reads) and OUT/manifest.json
(the case, its shapes, its declared ops, dtype, steps, versions). Weights are cast to the dtype (bf16 runs bf16 end to end: no
autocast casts in the chains).
"""

import argparse
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracerec  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Case:
    name: str
    gemm: str  # linear (nn.Linear, bias), linear3d (nn.Linear on [B, S, K]), matmul (x @ W), bmm
    mkn: tuple  # M, K, N (bmm: M and N of each of 8 batches; linear3d: M = 8 x M/8 tokens)
    ops: list  # the top-level ATen ops after the GEMM, in order
    epilogue: object  # f(y, x, v): y the GEMM's output, x its input, v a [N] parameter
    residual: bool = False  # reads x: needs N == K


def sq(y):
    return y * y


CASES = [
    # 2-6 pointwise ops
    Case("scale_clamp_gelu", "linear", (1024, 1024, 4096), ["mul", "clamp", "gelu"],
         lambda y, x, v: F.gelu(torch.clamp(y * 0.5, -2.0, 2.0))),
    Case("swish_by_hand", "linear", (4096, 512, 2048), ["sigmoid", "mul"],
         lambda y, x, v: y * torch.sigmoid(y)),
    Case("mish_bias", "linear", (2048, 1024, 1024), ["mish", "add"],
         lambda y, x, v: F.mish(y) + v),
    Case("leaky_scale_tanh", "linear", (1024, 2048, 2048), ["leaky_relu", "mul", "tanh"],
         lambda y, x, v: torch.tanh(F.leaky_relu(y, 0.01) * 1.5)),
    Case("softplus_tanh_mul", "linear", (2048, 512, 1024), ["softplus", "tanh", "mul"],
         lambda y, x, v: y * torch.tanh(F.softplus(y))),
    Case("where_leaky", "linear", (4096, 256, 1024), ["gt", "mul", "where"],
         lambda y, x, v: torch.where(y > 0, y, y * 0.2)),
    Case("mask_cast_mul", "linear", (2048, 1024, 2048), ["gt", "to", "mul"],
         lambda y, x, v: y * (y > 0.1).to(y.dtype)),
    Case("hardsigmoid_gate_bias", "linear", (1024, 1024, 1024), ["hardsigmoid", "mul", "add"],
         lambda y, x, v: F.hardsigmoid(y) * y + v),
    Case("elu_scale_clamp", "linear", (2048, 2048, 512), ["elu", "mul", "clamp"],
         lambda y, x, v: torch.clamp(F.elu(y, 1.0) * 2.0, -1.0, 1.0)),
    Case("abs_eps_sqrt_scale", "linear", (1024, 512, 4096), ["abs", "add", "sqrt", "mul"],
         lambda y, x, v: torch.sqrt(torch.abs(y) + 1e-3) * v),
    Case("abs_reciprocal_mul", "linear", (2048, 1024, 1024), ["abs", "add", "reciprocal", "mul"],
         lambda y, x, v: torch.reciprocal(torch.abs(y) + 1.0) * y),
    Case("softplus_by_hand", "linear", (1024, 1024, 2048), ["neg", "exp", "add", "log"],
         lambda y, x, v: torch.log(torch.exp(-y) + 1.0)),
    Case("clamp_max_min_scale", "linear", (4096, 1024, 512), ["clamp_max", "clamp_min", "mul"],
         lambda y, x, v: y.clamp_max(1.0).clamp_min(-1.0) * v),
    Case("six_ops", "linear", (2048, 1024, 2048), ["mul", "add", "relu", "sub", "sigmoid", "mul"],
         lambda y, x, v: torch.sigmoid(F.relu(y * 2.0 + v) - 0.5) * 3.0),
    Case("hardtanh_scale_shift", "linear", (1024, 2048, 1024), ["hardtanh", "mul", "sub"],
         lambda y, x, v: F.hardtanh(y, -0.5, 0.5) * 4.0 - v),
    Case("squared_relu_scale", "matmul", (2048, 1024, 4096), ["relu", "pow", "mul"],
         lambda y, x, v: torch.pow(F.relu(y), 2.0) * 0.125),
    Case("hardswish_div", "matmul", (4096, 512, 512), ["hardswish", "div"],
         lambda y, x, v: F.hardswish(y) / 6.0),
    Case("tanh_gelu_scale", "linear3d", (4096, 1024, 2048), ["gelu", "mul", "add"],
         lambda y, x, v: F.gelu(y, approximate="tanh") * v + 0.1),
    Case("bmm_tanh_scale_clamp", "bmm", (256, 128, 256), ["tanh", "mul", "clamp"],
         lambda y, x, v: torch.clamp(torch.tanh(y) * 3.0, -2.0, 2.0)),
    Case("rsqrt_scale", "linear", (1024, 1024, 1024), ["mul", "add", "rsqrt", "mul"],
         lambda y, x, v: torch.rsqrt(sq(y) + 1.0) * y),
    # ... ending in a residual add
    Case("gelu_scale_residual", "linear", (2048, 1024, 1024), ["gelu", "mul", "add"],
         lambda y, x, v: F.gelu(y) * 0.5 + x, residual=True),
    Case("silu_gain_residual", "linear", (1024, 2048, 2048), ["silu", "mul", "add"],
         lambda y, x, v: F.silu(y) * v + x, residual=True),
    Case("sigmoid_gate_residual", "linear", (4096, 512, 512), ["sigmoid", "mul", "add"],
         lambda y, x, v: torch.sigmoid(y) * x + x, residual=True),
    Case("hardtanh_neg_residual", "linear", (2048, 1024, 1024), ["hardtanh", "neg", "add"],
         lambda y, x, v: -F.hardtanh(y) + x, residual=True),
    Case("decode_silu_residual", "linear", (8, 4096, 4096), ["silu", "mul", "add"],
         lambda y, x, v: F.silu(y) * v + x, residual=True),
    Case("small_k_relu_bias_residual", "linear", (16384, 64, 64), ["relu", "add", "add"],
         lambda y, x, v: F.relu(y) + v + x, residual=True),
    Case("linear3d_mish_residual", "linear3d", (4096, 768, 768), ["mish", "mul", "add"],
         lambda y, x, v: F.mish(y) * 0.7 + x, residual=True),
    # ... ending in a reduction over the last dim
    Case("relu_div_sum", "linear", (2048, 1024, 1024), ["relu", "div", "sum"],
         lambda y, x, v: (F.relu(y) / 2.0).sum(-1)),
    Case("hardswish_sub_mean", "linear", (4096, 512, 1024), ["hardswish", "sub", "mean"],
         lambda y, x, v: (F.hardswish(y) - v).mean(-1, keepdim=True)),
    Case("exp_scale_sum", "linear", (1024, 1024, 2048), ["tanh", "exp", "mul", "sum"],
         lambda y, x, v: (torch.exp(torch.tanh(y)) * v).sum(-1)),
    Case("scaled_softmax", "linear", (2048, 512, 1024), ["mul", "add", "softmax"],
         lambda y, x, v: F.softmax(y * (1.0 / math.sqrt(1024)) + v, dim=-1)),
    Case("temp_clamp_log_softmax", "linear", (4096, 1024, 512), ["div", "clamp_min", "log_softmax"],
         lambda y, x, v: F.log_softmax((y / 0.7).clamp_min(-5.0), dim=-1)),
    Case("tanh_logsumexp", "linear", (1024, 2048, 1024), ["mul", "tanh", "logsumexp"],
         lambda y, x, v: torch.logsumexp(torch.tanh(y * 0.3), dim=-1)),
    Case("abs_gain_amax", "linear", (2048, 1024, 2048), ["abs", "mul", "amax"],
         lambda y, x, v: torch.amax(torch.abs(y) * v, dim=-1)),
    Case("square_bias_mean", "linear", (4096, 1024, 1024), ["pow", "add", "mean"],
         lambda y, x, v: (torch.pow(y, 2.0) + v).mean(-1)),
    Case("silu_gain_sum_3d", "linear3d", (4096, 512, 1024), ["silu", "mul", "sum"],
         lambda y, x, v: (F.silu(y) * v).sum(-1)),
    Case("bmm_scale_bias_softmax", "bmm", (256, 64, 256), ["mul", "add", "softmax"],
         lambda y, x, v: F.softmax(y * 0.125 + v, dim=-1)),
    Case("decode_gelu_amin", "linear", (8, 2048, 8192), ["gelu", "sub", "amin"],
         lambda y, x, v: torch.amin(F.gelu(y) - v, dim=-1)),
]

# views, copies for layout, and what the GEMM's own call leaves at the top level
VIEWS = {"view", "reshape", "_unsafe_view", "expand", "unsqueeze", "squeeze", "t", "transpose",
         "permute", "as_strided", "slice", "select", "contiguous", "flatten", "detach", "alias"}
GEMMS = {"linear": "linear", "linear3d": "linear", "matmul": "matmul", "bmm": "bmm"}
BMM_BATCH = 8


class Module(nn.Module):
    """One case: its GEMM, then its epilogue."""

    def __init__(self, case, k, n):
        super().__init__()
        self.case = case
        if case.gemm in ("linear", "linear3d"):
            self.fc = nn.Linear(k, n)
        elif case.gemm == "matmul":
            self.w = nn.Parameter(torch.randn(k, n) / math.sqrt(k))
        self.v = nn.Parameter(torch.randn(n) * 0.5)

    def forward(self, x, other=None):
        if self.case.gemm == "bmm":
            y = torch.bmm(x, other)
        elif self.case.gemm == "matmul":
            y = torch.matmul(x, self.w)
        else:
            y = self.fc(x)
        return self.case.epilogue(y, x, self.v)


def sizes(case, tiny):
    m, k, n = case.mkn
    if tiny:
        m, k, n = min(m, 16), 16, (16 if case.residual else 32)
    if case.residual and n != k:
        raise ValueError(f"{case.name}: a residual case needs N == K, got {k} and {n}")
    return m, k, n


def build(case, dtype, tiny, device):
    """The module and its inputs, in dtype, on device."""
    m, k, n = sizes(case, tiny)
    torch.manual_seed(0)
    mod = Module(case, k, n).to(device=device, dtype=dtype).eval()
    if case.gemm == "bmm":
        b = 2 if tiny else BMM_BATCH
        inputs = (torch.randn(b, m, k, device=device, dtype=dtype),
                  torch.randn(b, k, n, device=device, dtype=dtype) / math.sqrt(k))
    elif case.gemm == "linear3d":
        inputs = (torch.randn(8 if not tiny else 2, max(m // 8, 1), k, device=device, dtype=dtype),)
    else:
        inputs = (torch.randn(m, k, device=device, dtype=dtype),)
    return mod, inputs


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def generic_table(path=os.path.join(REPO, "patterns", "generic.go")):
    """The op names patterns/generic.go's genericOps and genericReductions maps hold."""
    src = open(path, encoding="utf-8").read()
    names = set()
    for var in ("genericOps", "genericReductions"):
        m = re.search(r"var " + var + r" = map\[string\]bool\{(.*?)\n\}", src, re.S)
        if not m:
            raise RuntimeError(f"{path}: no {var} map")
        names |= set(re.findall(r'"([a-z_0-9]+)":\s*true', m.group(1)))
    return names


def top_level_ops(mod, inputs):
    """The ATen ops mod(*inputs) runs directly (not inside another op), views left out, in
    order, from a CPU profile."""
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:
        with record_function("case"):
            mod(*inputs)
    events = prof.events()
    root = next(e for e in events if e.name == "case")
    ops = []
    for e in sorted(events, key=lambda e: e.time_range.start):
        if e.cpu_parent is not None and e.cpu_parent.id == root.id and e.name.startswith("aten::"):
            name = e.name[len("aten::"):]
            if name not in VIEWS:
                ops.append(name)
    return ops


def check(dtypes):
    """Runs every case on the CPU at small sizes in each dtype; returns the problems: a case
    whose ops differ from its declaration or fall outside the generic table, a non-finite
    output, a duplicate name."""
    table = generic_table()
    problems = []
    names = [c.name for c in CASES]
    for n in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{n}: two cases have this name")
    for case in CASES:
        want = [GEMMS[case.gemm]] + case.ops
        outside = [op for op in case.ops if op.rstrip("_") not in table]
        if outside:
            problems.append(f"{case.name}: {', '.join(outside)} not in patterns/generic.go's table")
        for dn in dtypes:
            try:
                mod, inputs = build(case, DTYPES[dn], True, torch.device("cpu"))
                got = top_level_ops(mod, inputs)
                with torch.no_grad():
                    out = mod(*inputs)
            except Exception as e:
                problems.append(f"{case.name} {dn}: {type(e).__name__}: {e}")
                continue
            if got != want:
                problems.append(f"{case.name} {dn}: runs {got}, declares {want}")
            if not torch.isfinite(out.float()).all():
                problems.append(f"{case.name} {dn}: non-finite output")
    return problems


def record(out, dtypes, tiny, device, steps=1):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "manifest.json")
    manifest = {"traces": [], "steps": steps, "mode": "infer (no_grad, eval)", "tiny": tiny}
    manifest.update(tracerec.environment(device))
    failed = 0
    for case in CASES:
        for dn in dtypes:
            name = f"{case.name}_{dn}"
            entry = {"name": name, "case": case.name, "gemm": case.gemm, "dtype": dn,
                     "mkn": list(sizes(case, tiny)), "ops": [GEMMS[case.gemm]] + case.ops,
                     "residual": case.residual}
            if case.gemm == "bmm":
                entry["batch"] = 2 if tiny else BMM_BATCH
            try:
                mod, inputs = build(case, DTYPES[dn], tiny, device)

                def step():
                    with torch.no_grad():
                        mod(*inputs)

                step()
                entry.update(tracerec.record(step, steps, out, name, device))
            except Exception as e:
                failed += 1
                entry["error"] = f"{type(e).__name__}: {e}"
                print(f"corpus: {name}: {entry['error']}", file=sys.stderr, flush=True)
            manifest["traces"].append(entry)
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    total = sum(e.get("gz_bytes", 0) + e.get("et_gz_bytes", 0) for e in manifest["traces"])
    print(f"corpus: {len(manifest['traces'])} traces, {failed} failed, {total} bytes gz'd in {out}",
          file=sys.stderr, flush=True)
    return failed


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=["list", "check", "record"])
    p.add_argument("-o", dest="out")
    p.add_argument("-dtypes", default="fp32,bf16")
    p.add_argument("-tiny", action="store_true", help="small sizes (CPU checks)")
    p.add_argument("-device", default="auto")
    a = p.parse_args(argv)
    dtypes = a.dtypes.split(",")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        p.error(f"unknown dtype {', '.join(bad)} (fp32, bf16)")
    if a.verb == "list":
        for c in CASES:
            print(f"{c.name:28} {c.gemm:9} {'x'.join(map(str, c.mkn)):16} {' '.join(c.ops)}")
        return 0
    if a.verb == "check":
        t0 = time.time()
        problems = check(dtypes)
        for pr in problems:
            print(pr)
        print(f"corpus check: {len(CASES)} cases x {len(dtypes)} dtypes, {len(problems)} problems "
              f"({time.time() - t0:.1f} s)", file=sys.stderr)
        return 1 if problems else 0
    if not a.out:
        p.error("record needs -o OUT")
    return 1 if record(a.out, dtypes, a.tiny, tracerec.pick_device(a.device)) else 0


if __name__ == "__main__":
    sys.exit(main())
