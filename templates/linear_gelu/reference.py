"""The eager chain linear_gelu replaces, as traced: aten::linear (addmm) -> aten::gelu."""

import torch.nn.functional as F


def linear_gelu(x, weight, bias=None, approximate="none"):
    return F.gelu(F.linear(x, weight, bias), approximate=approximate)
