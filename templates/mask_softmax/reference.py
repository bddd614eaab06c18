"""The eager chain mask_softmax replaces, as traced: ``mul`` (scale) -> ``masked_fill`` (bool,
True = masked) / ``add`` (additive) / ``masked_fill`` with a ``triu`` mask (causal) ->
``softmax`` (-> ``dropout``).

``dtype`` is softmax's output dtype (autocast runs softmax in fp32; HF Llama calls
``softmax(..., dtype=torch.float32)``). With ``keep`` given (the fused kernel's dropout mask,
for testing) dropout is applied with that mask as ``native_dropout`` does it (``y * keep *
(1/(1-p))``, whose gradient is ``native_dropout_backward``'s, ``dy * keep * (1/(1-p))``: the
gradient cases compare the fused backward with eager's through it); otherwise ``F.dropout``.
"""

import torch
import torch.nn.functional as F


def _fill(mask_fill, dtype):
    if isinstance(mask_fill, str):
        return torch.finfo(dtype).min if mask_fill == "min" else float(mask_fill)
    return mask_fill


def mask_softmax(x, mask=None, scale=1.0, mask_kind="none", mask_fill=float("-inf"), p=0.0, keep=None, dtype=None):
    s = x * scale if scale != 1.0 else x
    if mask_kind == "bool":
        s = s.masked_fill(mask, _fill(mask_fill, x.dtype))
    elif mask_kind == "additive":
        s = s + mask
    elif mask_kind == "causal":
        sq, sk = x.shape[-2], x.shape[-1]
        causal = torch.ones(sq, sk, dtype=torch.bool, device=x.device).triu(sk - sq + 1)
        s = s.masked_fill(causal, _fill(mask_fill, x.dtype))
    y = torch.softmax(s, dim=-1, dtype=dtype)  # dtype: autocast's / softmax(dtype=) fp32
    if p > 0:
        y = y * keep.to(y.dtype) * (1.0 / (1.0 - p)) if keep is not None else F.dropout(y, p, True)
    return y
