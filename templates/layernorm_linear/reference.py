"""The eager chain layernorm_linear replaces, as traced: aten::layer_norm -> aten::linear; with
a convolution's bias before the norm (params["conv_bias"]), its add first, in x's type, as
the convolution's own add (cuDNN's output, then its bias added in place) made it."""

import torch.nn.functional as F


def layernorm_linear(x, ln_weight, ln_bias, weight, bias=None, eps=1e-5, pre_bias=None):
    if pre_bias is not None:
        x = x + pre_bias.to(x.dtype)
    return F.linear(F.layer_norm(x, (x.shape[-1],), ln_weight, ln_bias, eps), weight, bias)
