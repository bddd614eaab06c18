"""The eager chains cross_entropy replaces.

upcast="float": HF ``ForCausalLMLoss`` (transformers): ``logits.float()``, then
``F.cross_entropy``. upcast="autocast": ``F.cross_entropy`` of 16-bit logits under CUDA
autocast, written out as autocast runs it on the GPU (log_softmax in the logits' type, then
nll_loss, on autocast's fp32 list, of its upcast). upcast="none": ``F.cross_entropy`` in the
logits' type.
"""

import torch
import torch.nn.functional as F


def cross_entropy(logits, target, ignore_index=-100, reduction="mean", upcast="float"):
    if upcast == "float":
        return F.cross_entropy(logits.float(), target, ignore_index=ignore_index, reduction=reduction)
    if upcast == "autocast":
        logp = torch.log_softmax(logits, 1)
        return F.nll_loss(logp.float(), target, ignore_index=ignore_index, reduction=reduction)
    return F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction)
