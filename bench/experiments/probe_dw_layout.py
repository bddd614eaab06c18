"""Which layout of the weight gradient's GEMM cuBLAS runs faster at the traced linear_gelu
shapes: dW = dz^T x ([N, M] @ [M, K], what LinearGELUFunction computed), or eager's
(x^T dz)^T ([K, M] @ [M, N], as AddmmBackward0 computes the gradient of W^T), with and without
the copy into W's layout that autograd's AccumulateGrad makes of a transposed gradient; and
dX = dz W. bf16; GPU time by probekit.gpu_timer (the harness's method: a CUDA-graph replay of
one call after an L2 flush, median). The figures in
docs/benchmarks/probe-dw-layout-2026-12-03.txt were taken with this probe at 271e13c, which
timed with a timer of its own (a graph of 20 calls after a 256 MiB fill and sum, median of 30).

    python3 bench/experiments/probe_dw_layout.py
"""

import probekit  # noqa: I001 -- before torch

import torch

SHAPES = {  # name: (M, K, N)
    "convnext 32x56x56 96->384": (32 * 56 * 56, 96, 384),
    "convnext 32x28x28 192->768": (32 * 28 * 28, 192, 768),
    "convnext 32x14x14 384->1536": (32 * 14 * 14, 384, 1536),
    "convnext 32x7x7 768->3072": (32 * 7 * 7, 768, 3072),
    "bert 16x256 768->3072": (16 * 256, 768, 3072),
    "bert 16x256 768->768": (16 * 256, 768, 768),
    "mlp 16x256 2048->8192": (16 * 256, 2048, 8192),
    "encoder 8x512 1024->4096": (8 * 512, 1024, 4096),
}


def time_us(fn):
    return probekit.gpu_timer(fn)[0]


def main():
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; µs a call")
    print(f"{'shape':30s} {'dz^T x':>8s} {'(x^T dz)^T':>11s} {'+ layout copy':>14s} {'dz W':>8s}")
    for name, (M, K, N) in SHAPES.items():
        x = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(N, K, dtype=torch.bfloat16, device="cuda")
        dz = torch.randn(M, N, dtype=torch.bfloat16, device="cuda")
        a = time_us(lambda: dz.t() @ x)
        b = time_us(lambda: x.t() @ dz)
        c = time_us(lambda: (x.t() @ dz).t().contiguous())
        d = time_us(lambda: dz @ w)
        print(f"{name:30s} {a:8.1f} {b:11.1f} {c:14.1f} {d:8.1f}")


if __name__ == "__main__":
    main()
