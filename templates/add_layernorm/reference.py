"""The eager chain add_layernorm replaces, as traced: aten::add -> aten::layer_norm; with
dim=1 (timm's LayerNorm2d) aten::add -> permute -> aten::layer_norm over C -> permute back."""

import torch.nn.functional as F


def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, dim=-1):
    s = x + residual
    if dim == 1:
        y = F.layer_norm(s.permute(0, *range(2, s.dim()), 1), (s.shape[1],), weight, bias, eps)
        return s, y.permute(0, s.dim() - 1, *range(1, s.dim() - 1))
    return s, F.layer_norm(s, (s.shape[-1],), weight, bias, eps)
