"""Probe: which memory-bound kernels nn.MultiheadAttention and the drop-in MultiheadAttention
(templates/_mha) launch in one self-attention call, forward and backward, each with the op
chain that launched it (GPU; torch.profiler with shapes). The shared encoder trace's sizes:
1024 wide, 16 heads, batch_first, a batch of 8 x 512 under autocast bf16.

Usage, from the repository root:
  python bench/experiments/probe_mha_kernels.py
"""
import sys, copy, collections
sys.path.insert(0, "templates/_mha")
import torch
from torch import nn
from multihead_attention import swap_multihead_attention
torch.manual_seed(0)
ref = nn.MultiheadAttention(1024, 16, dropout=0.1, batch_first=True).cuda()
new = copy.deepcopy(ref); swap_multihead_attention(new)
x = torch.randn(8, 512, 1024, device="cuda")
for name, m in (("eager", ref), ("dropin", new)):
    xa = x.clone().requires_grad_(True)
    def call():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(xa, xa, xa, need_weights=False)[0]
        out.float().sum().backward()
    for _ in range(3): call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA], record_shapes=True) as prof:
        call(); torch.cuda.synchronize()
    rows = collections.Counter()
    for e in prof.events():
        ks = getattr(e, "kernels", None)
        if e.device_type.name != "CPU" or not ks: continue
        for k in ks:
            if not any(w in k.name for w in ("copy", "fill", "Cat", "elementwise", "reduce")): continue
            chain, p = [], e
            while p is not None and len(chain) < 4:
                chain.append(f"{p.name}{list(p.input_shapes)[:2] if p.input_shapes else ''}")
                p = p.cpu_parent
            rows[(k.name[:45], " < ".join(chain))] += 1
    print("==", name)
    for (k, c), n in sorted(rows.items()): print(n, k, "|", c[:260])
