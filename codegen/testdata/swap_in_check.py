"""Runs the "Swap it in" snippet of generated GEMM-pattern folders as a user would.

Usage: python swap_in_check.py FOLDER...   (with TRITON_INTERPRET=1 on a machine without a GPU)

For each folder: kernel.py is copied into one shared temporary folder under the module name
the README gives (all folders' copies side by side, as beside one model), the README's snippet
is run with `linear` bound to an nn.Linear and then to a module like Hugging Face's Conv1D
(GPT-2: y = x @ weight + bias, weight [in, out], no in_features), and its `y` compared with
the eager chain: without autograd (the fused kernel runs) and with it (the eager fallback,
whose gradient must reach the Conv1D's own weight). Prints one line per check; exits 1 on the
first failure.
"""

import json
import pathlib
import shutil
import sys
import tempfile

import torch
import torch.nn.functional as F


class Conv1D(torch.nn.Module):
    """Hugging Face's transformers.pytorch_utils.Conv1D, as GPT-2 uses it."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf) * 0.2)
        self.bias = torch.nn.Parameter(torch.randn(nf) * 0.2)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def snippet(readme):
    """The indented code of the README's "Swap it in" section, dedented."""
    text = readme.split("## Swap it in\n", 1)[1].split("\n## ", 1)[0]
    lines = text.splitlines()
    code = [i for i, l in enumerate(lines) if l.startswith("    ")]
    return "\n".join(l[4:] for l in lines[code[0]:code[-1] + 1]) + "\n"


def eager(pattern, linear, layer_norm, x):
    if pattern == "linear_gelu":
        return F.gelu(linear(x))
    return linear(layer_norm(x))


def check(pattern, code, linear, x):
    layer_norm = torch.nn.LayerNorm(x.shape[-1])
    with torch.no_grad():
        layer_norm.weight.uniform_(0.5, 1.5)
        layer_norm.bias.uniform_(-0.5, 0.5)
    env = {"linear": linear, "layer_norm": layer_norm, "approximate": "none"}
    with torch.no_grad():
        exec(code, dict(env, x=x))  # the fused kernel
        ns = dict(env, x=x)
        exec(code, ns)
        want = eager(pattern, linear, layer_norm, x)
    torch.testing.assert_close(ns["y"], want, atol=1e-4, rtol=1e-4)
    # with autograd: the layer runs the eager chain; the gradient reaches linear's own weight
    xg = x.clone().requires_grad_(True)
    ns = dict(env, x=xg)
    exec(code, ns)
    ns["y"].sum().backward()
    got = linear.weight.grad.clone()
    linear.weight.grad = None
    eager(pattern, linear, layer_norm, xg).sum().backward()
    torch.testing.assert_close(got, linear.weight.grad, atol=1e-4, rtol=1e-4)
    linear.weight.grad = None


def main(folders):
    torch.manual_seed(0)
    beside = pathlib.Path(tempfile.mkdtemp())
    sys.path.insert(0, str(beside))
    try:
        jobs = []
        for folder in map(pathlib.Path, folders):
            manifest = json.loads((folder / "manifest.json").read_text())
            readme = (folder / "README.md").read_text()
            module = manifest["module"]
            if f"as `{module}.py`" not in readme:
                raise SystemExit(f"{folder}: the README does not name the module {module}")
            target = beside / f"{module}.py"
            if target.exists():
                raise SystemExit(f"{folder}: module {module} collides with another folder's")
            shutil.copy(folder / "kernel.py", target)
            jobs.append((folder, manifest["pattern"], snippet(readme)))
        for folder, pattern, code in jobs:
            k, n = 16, 24
            x = torch.randn(2, 5, k)
            for name, linear in (("nn.Linear", torch.nn.Linear(k, n)), ("Conv1D", Conv1D(n, k))):
                check(pattern, code, linear, x)
                print(f"ok {folder.name} {pattern} {name}")
    finally:
        shutil.rmtree(beside)


if __name__ == "__main__":
    main(sys.argv[1:])
