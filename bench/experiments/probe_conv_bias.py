"""Probe: ConvNeXt's depthwise conv -> permute -> LayerNorm -> Linear in training, with the
conv's bias taken by layernorm_linear (``pre_bias``) or left in the conv (GPU).

torchvision's and timm's ConvNeXt blocks run ``dwconv`` (7x7, groups = C, with a bias), a
permute to channels-last, LayerNorm(C, eps 1e-6) and ``pwconv1`` (C -> 4C). Under autocast
cuDNN adds the conv's bias in a kernel of its own and the conv's backward sums its gradient
over N, H and W of the permuted output gradient (on the shared H200 trace 27 µs a call at
32x96x56x56, about a quarter of a copy's bandwidth). This probe times one training step of
that segment (forward and backward, autograd.grad of x and every parameter with one fixed
upstream gradient; captured in a CUDA graph, the L2 flushed before each replay: the
harness's method) at ConvNeXt-tiny's four stage shapes, for:

- eager: the segment as the model runs it;
- fused: LayerNormLinear (templates/layernorm_linear) for the norm and the Linear, the
  conv keeping its bias;
- fused+bias: the same with the conv's bias taken (``pre_bias``; the conv runs without it);
- compile: torch.compile of the eager segment (--compile).

Each variant's output and gradients are checked against eager's (bf16 tolerance), and with
--kernels each variant's kernels are listed by device time (torch.profiler, one step, not
flushed).

  python bench/experiments/probe_conv_bias.py [--compile] [--kernels] [--only C] [--json] [--smoke]
"""

import copy

import probekit  # noqa: I100 -- before torch: --smoke sets TRITON_INTERPRET

import torch  # noqa: E402

args = probekit.arguments(__doc__, kernels=True)
kernel = probekit.load_template("layernorm_linear", "kernel")
SMOKE = args.smoke
dev = "cpu" if SMOKE else "cuda"
# (channels, height = width) of ConvNeXt-tiny's four stages at batch 32
SHAPES = [(8, 5)] if SMOKE else [(96, 56), (192, 28), (384, 14), (768, 7)]
BATCH = 2 if SMOKE else 32


class Segment(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dwconv = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=1e-6)
        self.pwconv1 = torch.nn.Linear(c, 4 * c)
        self.fused = None

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)
        return self.fused(h) if self.fused is not None else self.pwconv1(self.norm(h))


def variant(base, name):
    m = copy.deepcopy(base)
    if name.startswith("fused"):
        pre = None
        if name == "fused+bias":
            pre = m.dwconv.bias
            m.dwconv.register_parameter("bias", None)
        m.fused = kernel.LayerNormLinear.from_modules(m.norm, m.pwconv1, pre_bias=pre)
    return m


def step_fn(m, x, dy, fwd=None):
    params = [p for p in m.parameters()]
    fwd = m if fwd is None else fwd

    def step():
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=not SMOKE):
            y = fwd(x)
        return torch.autograd.grad(y, [x] + params, dy)
    return step, params


def main():
    table = probekit.Table(args.json, variant_width=12)
    table.header()
    for c, hw in SHAPES:
        label = f"{BATCH}x{c}x{hw}x{hw}"
        if args.only and args.only not in label:
            continue
        torch.manual_seed(0)
        base = Segment(c).to(dev)
        x = torch.randn(BATCH, c, hw, hw, device=dev, requires_grad=True)
        dy = torch.randn(BATCH, hw, hw, 4 * c, device=dev, dtype=torch.float32 if SMOKE else torch.bfloat16)
        want_step, want_params = step_fn(base, x, dy)
        want = want_step()
        names = ["eager", "fused", "fused+bias"] + (["compile"] if args.compile else [])
        for name in names:
            try:
                m = base if name == "eager" else variant(base, "eager" if name == "compile" else name)
                fwd = torch.compile(m) if name == "compile" else None
                step, params = step_fn(m, x, dy, fwd)
                reorder = None
                if name == "fused+bias":  # the conv's bias is the module's pre_bias: eager's order
                    reorder = lambda got: (got[0], got[1], got[6], *got[2:6])  # noqa: E731
                probekit.variant_row(table, args, label, name, step, want, 5e-2, reorder)
            except Exception as e:  # noqa: BLE001 -- a variant that fails is a row
                table.error(label, name, e)


if __name__ == "__main__":
    main()
