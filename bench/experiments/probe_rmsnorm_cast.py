"""Probe: Llama's attention input under autocast, LlamaRMSNorm -> q, k and v projections, with
the norm's output written cast (rmsnorm_pyops' ``out_dtype``) or left to autocast (GPU).

HF's LlamaRMSNorm returns fp32 under autocast (an fp32 residual stream, an fp32 weight), and
each of q_proj, k_proj and v_proj casts that output to bf16 on its own: three casts in the
forward, and in the backward three ToCopyBackward0 and the fp32 sums of their gradients. The
fused RMSNorm with ``out_dtype=torch.bfloat16`` writes the bf16 value once; the projections
cast nothing and the engine sums their bf16 gradients. This probe times one training step of
the segment (forward and backward, autograd.grad of x and every parameter with one fixed
upstream gradient per projection; captured in a CUDA graph, the L2 flushed before each
replay: the harness's method), and the forward alone, at Llama shapes, for:

- eager: the segment as the model runs it;
- fused: RMSNorm (templates/rmsnorm_pyops) with y in fp32, autocast's three casts kept;
- fused+cast: the same with ``out_dtype=torch.bfloat16``;
- compile: torch.compile of the eager segment (--compile).

Each variant's outputs and gradients are checked against eager's (bf16 tolerance), and with
--kernels each variant's kernels are listed by device time (torch.profiler, one step, not
flushed).

  python bench/experiments/probe_rmsnorm_cast.py [--compile] [--kernels] [--only SHAPE] [--json] [--smoke]
"""

import copy

import probekit  # noqa: I100 -- before torch: --smoke sets TRITON_INTERPRET

import torch  # noqa: E402

args = probekit.arguments(__doc__, kernels=True)
kernel = probekit.load_template("rmsnorm_pyops", "kernel")
SMOKE = args.smoke
dev = "cpu" if SMOKE else "cuda"
# (batch, sequence, hidden): the shared trace's small Llama, and Llama-7B's hidden size
SHAPES = [(2, 8, 64)] if SMOKE else [(4, 512, 1024), (2, 2048, 4096)]


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))
        self.variance_epsilon = 1e-6

    def forward(self, x):  # HF's LlamaRMSNorm.forward (the template's reference.py; torch.compile
        input_dtype = x.dtype  # cannot import a module loaded by path, so it is written out here)
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(input_dtype)


class Segment(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.norm = LlamaRMSNorm(n)
        self.q = torch.nn.Linear(n, n, bias=False)
        self.k = torch.nn.Linear(n, n, bias=False)
        self.v = torch.nn.Linear(n, n, bias=False)

    def forward(self, x):
        y = self.norm(x)
        return self.q(y), self.k(y), self.v(y)


def variant(base, name):
    m = copy.deepcopy(base)
    if name.startswith("fused"):
        out = torch.bfloat16 if name == "fused+cast" and not SMOKE else None
        m.norm = kernel.RMSNorm.from_module(m.norm, out_dtype=out)
    return m


def step_fn(m, x, dys, fwd=None, backward=True):
    params = [p for p in m.parameters()]
    fwd = m if fwd is None else fwd

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=not SMOKE):
            ys = fwd(x)
        if not backward:
            return ys
        return torch.autograd.grad(ys, [x] + params, dys)
    return step


def main():
    table = probekit.Table(args.json, variant_width=12)
    table.header()
    for b, s, n in SHAPES:
        label = f"{b}x{s}x{n}"
        if args.only and args.only not in label:
            continue
        torch.manual_seed(0)
        base = Segment(n).to(dev)
        with torch.no_grad():
            base.norm.weight.normal_(1.0, 0.2)
        x = torch.randn(b, s, n, device=dev, requires_grad=True)
        dys = [torch.randn(b, s, n, device=dev, dtype=torch.float32 if SMOKE else torch.bfloat16) for _ in range(3)]
        names = ["eager", "fused", "fused+cast"] + (["compile"] if args.compile else [])
        for mode in ("forward", "full"):
            want = step_fn(base, x, dys, backward=mode == "full")()
            for name in names:
                try:
                    m = base if name == "eager" else variant(base, "eager" if name == "compile" else name)
                    fwd = torch.compile(m) if name == "compile" else None
                    step = step_fn(m, x, dys, fwd, backward=mode == "full")
                    probekit.variant_row(table, args, f"{label} {mode}", name, step, want, 5e-2)
                except Exception as e:  # noqa: BLE001 -- a variant that fails is a row
                    table.error(f"{label} {mode}", name, e)


if __name__ == "__main__":
    main()
