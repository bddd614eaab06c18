"""The eager chain gelu_pyops replaces: HF NewGELUActivation as ops (after an optional bias add)."""

import math

import torch


def new_gelu(x, bias=None, dtype=None):
    """dtype: the chain's output type when autocast ran ``torch.pow`` in fp32 (every later op
    is then promoted to fp32; 0.5 * x is exact in any type)."""
    if bias is not None:
        x = x + bias
    if dtype is not None:
        x = x.to(dtype)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
