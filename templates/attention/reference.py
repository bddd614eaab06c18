"""The eager attention chain the attention template replaces, as traced:

    s = q @ k.transpose(-1, -2)          q [B, H, Sq, D], k / v [B, H, Sk, D]
    s = s * scale
    mask: causal    s = s.masked_fill(~keep, fill)   keep[i, j] = j <= i + (Sk - Sq) (bottom right)
          bool      s = s.masked_fill(mask, fill)    True = masked out
          additive  s = s + mask
    bias: additive  s = s + bias                     [B|1, H|1, Sq, Sk]
          alibi     s = s + slopes[h] * (j - i - (Sk - Sq))   (fp32, built as ALiBi's relative form)
    p = softmax(s.float(), -1).to(q.dtype)
    p = dropout(p, p_drop)
    out = p @ v

``fill``: ``float("-inf")``, ``"min"`` (q's dtype's finfo.min, as HF fills) or a number. With
``keep`` given (the fused kernel's dropout mask, for testing) dropout is applied with that mask
as ``native_dropout`` does (``p * keep * (1/(1-p))``, whose gradient is
``native_dropout_backward``'s); otherwise ``F.dropout``.
"""

import torch
import torch.nn.functional as F


def fill_value(mask_fill, dtype):
    if isinstance(mask_fill, str):
        return torch.finfo(dtype).min if mask_fill == "min" else float(mask_fill)
    return float(mask_fill)


def alibi_bias(slopes, sq, sk, device):
    """[H, Sq, Sk] fp32: slopes[h] * (j - i - (Sk - Sq)), 0 on the (bottom-right) diagonal."""
    i = torch.arange(sq, device=device, dtype=torch.float32)[:, None]
    j = torch.arange(sk, device=device, dtype=torch.float32)[None, :]
    return slopes.float()[:, None, None] * (j - i - float(sk - sq))


def attention(q, k, v, mask=None, bias=None, scale=1.0, mask_kind="none", mask_fill=float("-inf"),
              bias_kind="none", p=0.0, keep=None):
    s = torch.matmul(q, k.transpose(-1, -2))
    s = s * scale
    sq, sk = q.shape[-2], k.shape[-2]
    if mask_kind == "bool":
        s = s.masked_fill(mask, fill_value(mask_fill, q.dtype))
    elif mask_kind == "additive":
        s = s + mask
    elif mask_kind == "causal":
        masked = torch.ones(sq, sk, dtype=torch.bool, device=q.device).triu(sk - sq + 1)
        s = s.masked_fill(masked, fill_value(mask_fill, q.dtype))
    if bias_kind == "additive":
        s = s + bias
    elif bias_kind == "alibi":
        s = s + alibi_bias(bias, sq, sk, q.device)
    a = torch.softmax(s.float(), dim=-1).to(q.dtype)
    if p > 0:
        a = a * keep.to(a.dtype) * (1.0 / (1.0 - p)) if keep is not None else F.dropout(a, p, True)
    return torch.matmul(a, v)
