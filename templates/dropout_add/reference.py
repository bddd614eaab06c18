"""The eager chain dropout_add replaces, as traced: aten::add (bias) -> aten::dropout
(native_dropout) -> aten::add (residual).

With ``keep`` given (the fused kernel's mask, for testing), the dropout is applied with that
mask the way ``native_dropout`` does it (``z * mask * (1/(1-p))``); otherwise ``F.dropout``.
"""

import torch.nn.functional as F


def dropout_add(x, residual, bias=None, p=0.0, training=True, keep=None):
    z = x + bias if bias is not None else x
    if keep is not None and training and p > 0:
        d = z * keep.to(z.dtype) * (1.0 / (1.0 - p))
    else:
        d = F.dropout(z, p, training)
    return residual + d
