"""Probe: which number eager computes with when a 16-bit tensor meets a Python float.

`x + 0.1` on a bfloat16 x: ATen wraps 0.1 into a 0-dim double tensor, and TensorIterator
promotes it to the common dtype (bfloat16) before the kernel reads it, unless the kernel reads
the original value (TensorIteratorBase::original_scalar_value, which mul and div use). For each
op of program.NumberOps, dtype and number, this counts the elements (of 65536) where eager's
result differs from the op computed in fp32 with the number as float32, and with the number
rounded to the tensor's dtype first: the form with 0 differences is eager's. The generated
kernels (codegen: program's numbers, recorded or passed at run time) must compute with the
same one.

    python bench/experiments/probe_scalar_round.py [cpu|cuda]
"""

import sys

import torch


def main():
    dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    torch.manual_seed(0)
    ops = (("add", lambda x, s: x + s, lambda a, b: a + b),
           ("sub", lambda x, s: x - s, lambda a, b: a - b),
           ("rsub", lambda x, s: s - x, lambda a, b: b - a),
           ("mul", lambda x, s: x * s, lambda a, b: a * b),
           ("div", lambda x, s: x / s, lambda a, b: a / b),
           ("add alpha", lambda x, s: torch.add(x, s, alpha=0.3), lambda a, b: a + 0.3 * b))
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name() if dev == 'cuda' else 'the CPU'}")
    for dt in (torch.bfloat16, torch.float16):
        x = (torch.randn(1 << 16) * 3).to(dt).to(dev)
        xf = x.float()
        for name, fn, ex in ops:
            row = []
            for s in (0.1, 1e-3, 0.3, 1.7):
                f = torch.tensor(s, dtype=torch.float32)
                r = f.to(dt).float()
                y = fn(x, s).float()
                d_f = (y != ex(xf, f.to(dev)).to(dt).float()).sum().item()
                d_r = (y != ex(xf, r.to(dev)).to(dt).float()).sum().item()
                row.append(f"{s}: {d_f}/{d_r}")
            print(f"{str(dt)[6:]:9} {name:9} differences vs float32 number / rounded number: " + ", ".join(row))


if __name__ == "__main__":
    main()
