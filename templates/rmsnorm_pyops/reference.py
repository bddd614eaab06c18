"""The eager chains rmsnorm_pyops replaces.

casting="llama": HF ``LlamaRMSNorm.forward`` (transformers), op for op.
casting="fp32": everything in fp32, cast once at the end.
"""

import torch


def rms_norm(x, weight, eps=1e-6, casting="llama"):
    if casting == "llama":
        input_dtype = x.dtype
        hidden_states = x.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + eps)
        return weight * hidden_states.to(input_dtype)
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * weight.to(torch.float32)).to(x.dtype)
