"""MultiheadAttention: nn.MultiheadAttention's self-attention without its packed projection's copies.

nn.MultiheadAttention projects q, k and v with one GEMM (``in_proj_weight``, [3E, E]) and
splits its output for the heads as

    proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
    q, k, v = proj[0], proj[1], proj[2]

(torch.nn.functional._in_projection_packed): a copy of the whole projection in the forward,
and in the backward three ``select_backward`` calls that each fill a tensor of the whole
projection's size with zeros and copy a third into it, the sum of the three, and a copy back
to the GEMM's layout. With ``batch_first=True`` it also transposes the input to
(L, N, E) first, so the projection's GEMM copies its input again. torch.compile fuses these
copies into its own kernels; eager pays them in every layer and step.

Attention to another sequence whose key is its value (nn.TransformerDecoderLayer's
cross-attention on the encoder's memory) splits its k/v projection the same way, [2, S, N, E].

This subclass keeps nn.MultiheadAttention's parameters, state_dict and arguments, and
computes the same attention for self-attention (``query is key is value``) and for
``key is value`` with ``need_weights=False`` (what nn.TransformerEncoderLayer and
nn.TransformerDecoderLayer ask for):

1. the projection ``F.linear(x, in_proj_weight, in_proj_bias)`` in x's own layout, [..., 3E]
   (for ``key is value``: q's of the query, [..., E], and k and v's of the key, [..., 2E]);
2. q, k and v as views of it, ``unflatten(-1, (3, H, D)).unbind(-3)`` and a transpose to
   (N, H, L, D): no copy in the forward; in the backward ``unbind``'s gradient is one stack
   of the gradients straight into the projection's layout (one kernel, no zeros, no sum, no
   copy back);
3. ``F.scaled_dot_product_attention`` on them with the masks nn.MultiheadAttention would
   pass (canonicalized by the same torch functions, merged by broadcasting, not expanded
   per head), dropout ``self.dropout`` in training;
4. the output projection on the heads put back as (N, L, E) (or (L, N, E)).

Every other call runs nn.MultiheadAttention.forward unchanged: a key that is not the value
(whose three projections nn.MultiheadAttention already runs apart, without copies), need_weights=True,
unbatched or nested inputs, separate q/k/v weights (kdim/vdim), bias_k/bias_v, add_zero_attn,
and inference (no grad, autocast off, eval mode) where torch's own fused fast path may run.

Swap it into a model in place (the class of each nn.MultiheadAttention changes, nothing else):

    from multihead_attention import swap_multihead_attention
    swap_multihead_attention(model)
"""

import torch
import torch.nn.functional as F
from torch import nn


class MultiheadAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention whose self-attention, and attention whose key is its value, skip
    the packed projection's copies (module docstring). Made like nn.MultiheadAttention, or
    from one with ``swap_multihead_attention``."""

    def takes(self, query, key, value, need_weights):
        """Whether this call runs the copy-free path (module docstring); otherwise
        nn.MultiheadAttention.forward runs it."""
        if need_weights or key is not value or query.dim() != 3 or key.dim() != 3 or query.is_nested or key.is_nested:
            return False
        if not self._qkv_same_embed_dim or self.in_proj_weight is None:
            return False
        if self.bias_k is not None or self.bias_v is not None or self.add_zero_attn:
            return False
        # inference: leave it to nn.MultiheadAttention, whose fused fast path may apply
        return self.training or torch.is_grad_enabled() or torch.is_autocast_enabled()

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if not self.takes(query, key, value, need_weights):
            return super().forward(query, key, value, key_padding_mask=key_padding_mask,
                                   need_weights=need_weights, attn_mask=attn_mask,
                                   average_attn_weights=average_attn_weights, is_causal=is_causal)
        x = query
        if self.batch_first:
            n, length, e = x.shape
            src = key.shape[1]
        else:
            length, n, e = x.shape
            src = key.shape[0]
        if e != self.embed_dim or key.shape[-1] != e:
            raise AssertionError(f"was expecting embedding dimension of {self.embed_dim}, but got {e} and {key.shape[-1]}")
        h = self.num_heads
        d = e // h

        # the masks as nn.MultiheadAttention.forward and F.multi_head_attention_forward make them
        key_padding_mask = F._canonical_mask(mask=key_padding_mask, mask_name="key_padding_mask",
                                             other_type=F._none_or_dtype(attn_mask), other_name="attn_mask",
                                             target_type=x.dtype)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                               "module method `generate_square_subsequent_mask` to create this mask.")
        if is_causal and key_padding_mask is None:
            mask = None  # SDPA's is_causal instead of the mask, as F.multi_head_attention_forward does
        else:
            is_causal = False
            mask = F._canonical_mask(mask=attn_mask, mask_name="attn_mask", other_type=None, other_name="",
                                     target_type=x.dtype, check_other=False)
            if mask is not None:
                if mask.dim() == 2:
                    if mask.shape != (length, src):
                        raise RuntimeError(f"The shape of the 2D attn_mask is {tuple(mask.shape)}, "
                                           f"but should be {(length, src)}.")
                    mask = mask.view(1, 1, length, src)
                elif mask.dim() == 3:
                    if mask.shape != (n * h, length, src):
                        raise RuntimeError(f"The shape of the 3D attn_mask is {tuple(mask.shape)}, "
                                           f"but should be {(n * h, length, src)}.")
                    mask = mask.view(n, h, length, src)
                else:
                    raise RuntimeError(f"attn_mask's dimension {mask.dim()} is not supported")
            if key_padding_mask is not None:
                if key_padding_mask.shape != (n, src):
                    raise AssertionError(f"expecting key_padding_mask shape of {(n, src)}, "
                                         f"but got {tuple(key_padding_mask.shape)}")
                kpm = key_padding_mask.view(n, 1, 1, src)
                mask = kpm if mask is None else mask + kpm

        # q, k, v: views of the projections, heads split off their last dim (E = H * D, head-major,
        # as nn.MultiheadAttention's q.view(L, N * H, D)): self-attention projects q, k and v in
        # one GEMM, attention to another sequence (key is value: a decoder's cross-attention)
        # q in one and k, v in another, as nn.MultiheadAttention's packed weights split
        if query is key:
            qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
            q, k, v = qkv.unflatten(-1, (3, h, d)).unbind(-3)  # each (N, L, H, D) or (L, N, H, D)
        else:
            w_q, w_kv = self.in_proj_weight.split([e, 2 * e])
            b_q, b_kv = (None, None) if self.in_proj_bias is None else self.in_proj_bias.split([e, 2 * e])
            q = F.linear(x, w_q, b_q).unflatten(-1, (h, d))
            k, v = F.linear(key, w_kv, b_kv).unflatten(-1, (2, h, d)).unbind(-3)
        if self.batch_first:
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        else:
            q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0, is_causal=is_causal)
        if self.batch_first:
            out = out.transpose(1, 2).reshape(n, length, e)
        else:
            out = out.permute(2, 0, 1, 3).reshape(length, n, e)
        return F.linear(out, self.out_proj.weight, self.out_proj.bias), None


def swap_multihead_attention(model):
    """Make every nn.MultiheadAttention of model (itself included) a MultiheadAttention, in
    place: the class changes, the parameters, buffers, hooks and state_dict stay. Returns the
    number of modules swapped."""
    n = 0
    for m in model.modules():
        if type(m) is nn.MultiheadAttention:
            m.__class__ = MultiheadAttention
            n += 1
    return n
