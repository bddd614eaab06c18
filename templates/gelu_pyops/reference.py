"""The eager chain gelu_pyops replaces: HF NewGELUActivation as ops (after an optional bias add)."""

import math

import torch


def new_gelu(x, bias=None):
    if bias is not None:
        x = x + bias
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
