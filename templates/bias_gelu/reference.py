"""The eager PyTorch chain that bias_gelu replaces, exactly as traced: aten::add -> aten::gelu."""

import torch.nn.functional as F


def bias_gelu(x, bias=None, approximate="none"):
    return F.gelu(x + bias if bias is not None else x, approximate=approximate)
