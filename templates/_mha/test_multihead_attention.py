"""MultiheadAttention against nn.MultiheadAttention: the same outputs and gradients for every
argument combination of self-attention, the same module for everything else, and none of
the packed projection's copies.

    python -m pytest -q                 # the CPU (float64: the two agree to rounding)
    python -m pytest -q -m gpu          # a GPU, under autocast
"""

import copy
import pathlib
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from multihead_attention import MultiheadAttention, swap_multihead_attention  # noqa: E402

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def pair(e=32, h=4, batch_first=True, bias=True, dropout=0.0, dtype=torch.float64, device="cpu"):
    """An nn.MultiheadAttention and a MultiheadAttention with the same parameters."""
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(e, h, dropout=dropout, bias=bias, batch_first=batch_first).to(device, dtype)
    with torch.no_grad():  # nonzero biases, so a wrong bias path shows
        for p in ref.parameters():
            if p.dim() == 1:
                p.normal_()
    new = copy.deepcopy(ref)
    assert swap_multihead_attention(new) == 1
    return ref, new


def run(m, x, dy, memory=None, **kw):
    """m's output and the gradients of x (and memory) and of m's parameters for the upstream
    gradient dy: self-attention, or attention to memory (key and value) when given."""
    x = x.detach().clone().requires_grad_(True)
    if memory is None:
        out, w = m(x, x, x, **kw)
    else:
        memory = memory.detach().clone().requires_grad_(True)
        out, w = m(x, memory, memory, **kw)
    out.backward(dy)
    grads = {n: p.grad for n, p in m.named_parameters()}
    if memory is not None:
        grads["memory"] = memory.grad
    return out, w, x.grad, grads


def assert_same(ref, new, x, dy, tol=1e-10, memory=None, **kw):
    out_r, w_r, dx_r, g_r = run(ref, x, dy, memory, **kw)
    out_n, w_n, dx_n, g_n = run(new, x, dy, memory, **kw)
    assert w_n is None and w_r is None
    torch.testing.assert_close(out_n, out_r, atol=tol, rtol=tol)
    torch.testing.assert_close(dx_n, dx_r, atol=tol, rtol=tol)
    assert g_n.keys() == g_r.keys()
    for name in g_r:
        torch.testing.assert_close(g_n[name], g_r[name], atol=tol, rtol=tol, msg=name)


def masks(n, length, h, kind, src=None):
    """The attn_mask and key_padding_mask arguments of one case (src: the keys' length)."""
    torch.manual_seed(1)
    src = src or length
    causal = torch.triu(torch.ones(length, src, dtype=torch.bool), 1)
    pad = torch.zeros(n, src, dtype=torch.bool)
    pad[0, -3:] = True  # the first sequence's last three keys are padding
    return {
        "none": {},
        "bool attn_mask": {"attn_mask": causal},
        "float attn_mask": {"attn_mask": torch.randn(length, src, dtype=torch.float64)},
        "3-D attn_mask": {"attn_mask": torch.randn(n * h, length, src, dtype=torch.float64)},
        "key_padding_mask": {"key_padding_mask": pad},
        "both": {"attn_mask": causal, "key_padding_mask": pad},
        "float key_padding_mask": {"key_padding_mask": torch.where(pad, -1e9, 0.0).double()},
        "is_causal": {"attn_mask": causal, "is_causal": True},
        "is_causal with padding": {"attn_mask": causal, "key_padding_mask": pad, "is_causal": True},
    }[kind]


KINDS = ["none", "bool attn_mask", "float attn_mask", "3-D attn_mask", "key_padding_mask", "both",
         "float key_padding_mask", "is_causal", "is_causal with padding"]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_same_as_nn_multihead_attention(batch_first, kind):
    n, length, e, h = 3, 7, 32, 4
    ref, new = pair(e, h, batch_first)
    shape = (n, length, e) if batch_first else (length, n, e)
    x, dy = torch.randn(shape, dtype=torch.float64), torch.randn(shape, dtype=torch.float64)
    assert_same(ref, new, x, dy, need_weights=False, **masks(n, length, h, kind))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_attention_to_memory_same_as_nn_multihead_attention(batch_first, kind):
    """key is value (a decoder's cross-attention on the encoder's memory, another length):
    q projected apart, k and v as views of one projection, the gradients into memory too."""
    n, length, src, e, h = 3, 7, 9, 32, 4
    ref, new = pair(e, h, batch_first)
    shape, mshape = ((n, length, e), (n, src, e)) if batch_first else ((length, n, e), (src, n, e))
    x, dy, memory = (torch.randn(s, dtype=torch.float64) for s in (shape, shape, mshape))
    assert new.takes(x, memory, memory, False)
    assert_same(ref, new, x, dy, memory=memory, need_weights=False, **masks(n, length, h, kind, src))


def test_no_bias_and_one_head():
    ref, new = pair(e=16, h=1, bias=False)
    x, dy = torch.randn(2, 5, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64)
    assert_same(ref, new, x, dy, need_weights=False)


def test_dropout_draws_what_nn_multihead_attention_draws():
    """In training with dropout both call scaled_dot_product_attention with the same
    arguments but for q, k and v's strides: from one seed, the same kept weights."""
    ref, new = pair(dropout=0.3)
    x, dy = torch.randn(2, 6, 32, dtype=torch.float64), torch.randn(2, 6, 32, dtype=torch.float64)
    results = []
    for m in (ref, new):
        torch.manual_seed(5)
        results.append(run(m, x, dy, need_weights=False))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(results[1][2], results[0][2], atol=1e-10, rtol=1e-10)
    torch.manual_seed(6)  # and another seed draws another mask
    other = run(new, x, dy, need_weights=False)[0]
    assert not torch.allclose(other, results[1][0])


@pytest.mark.parametrize("case", ["need_weights", "key is not value", "unbatched", "bias_k", "add_zero_attn", "kdim"])
def test_other_calls_run_nn_multihead_attention(case, monkeypatch):
    """Whatever the copy-free path does not take runs nn.MultiheadAttention.forward (its
    results, weights included), never a path of its own."""
    kw = {"add_bias_kv": case == "bias_k", "add_zero_attn": case == "add_zero_attn"}
    if case == "kdim":
        kw.update(kdim=16, vdim=16)
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(32, 4, batch_first=True, **kw).double()
    new = copy.deepcopy(ref)
    swap_multihead_attention(new)
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    kv = torch.randn(2, 6, 16 if case == "kdim" else 32, dtype=torch.float64)
    args = {"need_weights": case == "need_weights"}
    if case == "key is not value":
        q, k, v = x, kv, kv.clone()
    elif case == "kdim":
        q, k, v = x, kv, kv
    elif case == "unbatched":
        q = k = v = x[0]
    else:
        q = k = v = x
    assert not new.takes(q, k, v, args["need_weights"])
    out_r, w_r = ref(q, k, v, **args)
    calls, forward = [], nn.MultiheadAttention.forward
    monkeypatch.setattr(nn.MultiheadAttention, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    out_n, w_n = new(q, k, v, **args)
    assert calls == [1]
    torch.testing.assert_close(out_n, out_r)
    assert (w_r is None) == (w_n is None)
    if w_r is not None:
        torch.testing.assert_close(w_n, w_r)


def test_inference_is_left_to_torch():
    """In eval mode without grad or autocast nn.MultiheadAttention runs (its fused fast path
    may apply); under grad or in training the copy-free path runs."""
    _, new = pair()
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    new.eval()
    with torch.no_grad():
        assert not new.takes(x, x, x, False)
    assert new.takes(x, x, x, False)
    new.train()
    with torch.no_grad():
        assert new.takes(x, x, x, False)


def test_bad_masks_are_refused_as_torch_refuses_them():
    _, new = pair()
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        new(x, x, x, need_weights=False, is_causal=True)
    with pytest.raises(RuntimeError, match="2D attn_mask"):
        new(x, x, x, need_weights=False, attn_mask=torch.zeros(4, 4, dtype=torch.bool))
    with pytest.raises(AssertionError, match="key_padding_mask"):
        new(x, x, x, need_weights=False, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))


def ops_of_a_step(m, x, memory=None):
    """The ATen ops a forward and backward of m on x (attending to memory when given)
    dispatch: name -> calls."""
    x = x.detach().clone().requires_grad_(True)
    kv = x if memory is None else memory.detach().clone().requires_grad_(True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out, _ = m(x, kv, kv, need_weights=False)
        out.sum().backward()
    return {e.key: e.count for e in prof.key_averages()}


@pytest.mark.parametrize("memory", [False, True])
def test_no_copies_of_the_projection(memory):
    """The packed projection's split costs nn.MultiheadAttention a contiguous copy, a
    select_backward (zeros and a copy) per q, k, v (k and v for attention to memory) and their
    sum; here the backward stacks the gradients once. Clones are left where the CPU's
    attention backend needs them (its output written head-major, put back to (N, L, E);
    nn.MultiheadAttention copies it there too), fewer than nn.MultiheadAttention's."""
    ref, new = pair()
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    mem = torch.randn(2, 6, 32, dtype=torch.float64) if memory else None
    before, after = ops_of_a_step(ref, x, mem), ops_of_a_step(new, x, mem)
    split = 2 if memory else 3
    assert before.get("aten::contiguous") and before.get("aten::select_backward") == split  # the test's targets exist
    assert not after.get("aten::contiguous") and not after.get("aten::select_backward")
    assert after.get("aten::clone", 0) < before.get("aten::clone", 0)
    assert after.get("aten::copy_", 0) < before.get("aten::copy_", 0)
    assert after.get("aten::stack") == 1


def test_transformer_encoder_trains_the_same():
    """Two optimizer steps of an nn.TransformerEncoder (its layers' self_attn swapped) give
    the parameters nn.MultiheadAttention's give, and the state_dict keys stay."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    ref = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).double()
    new = copy.deepcopy(ref)
    assert swap_multihead_attention(new) == 2
    assert isinstance(new.layers[0].self_attn, MultiheadAttention)
    assert new.state_dict().keys() == ref.state_dict().keys()
    x = torch.randn(3, 6, 32, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(6, dtype=torch.float64)
    for m in (ref, new):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(2):
            m(x, mask=causal, is_causal=True).square().mean().backward()
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(ref.named_parameters(), new.parameters()):
        torch.testing.assert_close(q, p, atol=1e-9, rtol=1e-9, msg=name)


def test_transformer_trains_the_same():
    """nn.Transformer (encoder and decoder: self-attention and the decoder's attention to the
    memory) trained two AdamW steps with a causal target mask and source padding both ways:
    the same parameters."""
    torch.manual_seed(0)
    ref = nn.Transformer(32, 4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.0,
                         batch_first=True).double()
    new = copy.deepcopy(ref)
    assert swap_multihead_attention(new) == 3
    src, tgt = torch.randn(3, 7, 32, dtype=torch.float64), torch.randn(3, 5, 32, dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64)
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[1, -2:] = True
    for m in (ref, new):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        for _ in range(2):
            out = m(src, tgt, tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=pad, memory_key_padding_mask=pad)
            out.square().mean().backward()
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(ref.named_parameters(), new.parameters()):
        torch.testing.assert_close(q, p, atol=1e-9, rtol=1e-9, msg=name)


def rel_err(got, want):
    """||got - want|| / ||want|| in float64."""
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("memory", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_gpu_autocast_bf16(batch_first, memory):
    """On a GPU under autocast bf16 (SDPA's fused backends, strided q, k and v): the output and
    every gradient as close to float32's (no autocast) as nn.MultiheadAttention's, with padding
    and a causal mask. Not elementwise against nn.MultiheadAttention under autocast: the two
    round differently (the drop-in's projection adds its bias in cuBLAS's fp32 epilogue, a
    batch-first nn.MultiheadAttention in bf16 after the GEMM), and a gradient summed over
    many tokens differs by bf16 ulps of its large elements."""
    n, length, e, h = 4, 128, 256, 4
    ref, new = pair(e, h, batch_first, dtype=torch.float32, device="cuda")
    shape = (n, length, e) if batch_first else (length, n, e)
    x, dy = torch.randn(shape, device="cuda"), torch.randn(shape, device="cuda")
    src = 96 if memory else length  # attention to a memory of another length: key is value
    mem = torch.randn((n, src, e) if batch_first else (src, n, e), device="cuda") if memory else None
    pad = torch.zeros(n, src, dtype=torch.bool, device="cuda")
    pad[0, -5:] = True
    causal = torch.triu(torch.full((length, src), float("-inf"), device="cuda"), 1)
    for kw in ({}, {"attn_mask": causal, "is_causal": True}, {"key_padding_mask": pad}):
        exact = run(ref, x, dy, mem, need_weights=False, **kw)
        ref.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            r = run(ref, x, dy, mem, need_weights=False, **kw)
            m = run(new, x, dy, mem, need_weights=False, **kw)
        pairs = [("output", m[0], r[0], exact[0]), ("x.grad", m[2], r[2], exact[2])]
        pairs += [(name, m[3][name], r[3][name], exact[3][name]) for name in exact[3]]
        for name, got, theirs, want in pairs:
            ours, eager = rel_err(got, want), rel_err(theirs, want)
            assert ours <= 1.5 * eager + 2e-3, f"{kw.keys()}: {name}: {ours:.2e} from float32, nn.MultiheadAttention {eager:.2e}"
        for mod in (ref, new):
            mod.zero_grad()
