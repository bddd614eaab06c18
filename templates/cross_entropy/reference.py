"""The eager chains cross_entropy replaces.

upcast="float": HF ``ForCausalLMLoss`` (transformers): ``logits.float()``, then
``F.cross_entropy``. upcast="autocast": ``F.cross_entropy`` of 16-bit logits under CUDA
autocast, written out as ATen's cross_entropy runs it there: log_softmax in the logits' type
(cross_entropy passes that type, so autocast leaves it), then nll_loss of its upcast (nll_loss
is on autocast's fp32 list) and, with label smoothing, the sum over the classes of the
upcast log-probabilities (sum is on autocast's fp32 list when no dtype is given).
upcast="none": ``F.cross_entropy`` in the logits' type.
"""

import torch
import torch.nn.functional as F


def cross_entropy(logits, target, ignore_index=-100, reduction="mean", upcast="float", label_smoothing=0.0):
    if upcast == "float":
        return F.cross_entropy(logits.float(), target, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing)
    if upcast == "autocast":
        logp = torch.log_softmax(logits, 1)
        nll = F.nll_loss(logp.float(), target, ignore_index=ignore_index, reduction=reduction)
        if label_smoothing == 0.0:
            return nll
        ignored = target == ignore_index
        smooth = (-logp.float().sum(1)).masked_fill(ignored, 0.0)
        if reduction == "mean":
            smooth = smooth.sum() / (~ignored).sum()
        elif reduction == "sum":
            smooth = smooth.sum()
        return (1 - label_smoothing) * nll + smooth * (label_smoothing / logits.shape[1])
    return F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                           label_smoothing=label_smoothing)
