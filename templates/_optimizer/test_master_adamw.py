"""Tests of MasterAdamW (master_adamw.py): the kernel against torch.optim's own step, the bf16
copies the model reads, a training run against autocast with fp32 weights, the parameters
gemm_parameters picks, and the inputs it refuses. CPU tests run the kernel under
TRITON_INTERPRET=1 (without it, the optimizer's torch fallback); GPU tests under -m gpu."""

import copy
import os
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parent.parent / "_common"))  # sm90, in the repository
import master_adamw as ma  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
GPU = torch.cuda.is_available() and not INTERPRET
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not GPU, reason="needs CUDA (and not the interpreter)")
# sizes around the program's block: one element, a block's tail, several blocks
SHAPES = [(1,), (ma.BLOCK - 1,), (3, ma.BLOCK // 2 + 5), (ma.BLOCK * 2 + 7,), (17, 33)]


def _params(device, shapes=SHAPES, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]


def _grads(params, seed, none=()):
    g = torch.Generator().manual_seed(seed)
    for i, p in enumerate(params):
        p.grad = None if i in none else (torch.randn(p.shape, generator=g) * 0.1).to(p.device, p.dtype)


def _close(a, b, what):
    # torch's CPU ops may contract a multiply-add the interpreter rounds twice: an ulp or two
    # of fp32, far below what a wrong step (a bias correction, a moment, a sign) moves
    torch.testing.assert_close(a, b, rtol=2e-6, atol=1e-7, msg=lambda m: f"{what}: {m}")


def _check_against_reference(device, decoupled, wd, none_at=()):
    params = _params(device)
    ref = [p.detach().clone() for p in params]
    low = params[::2]  # bf16 in the model for every other tensor, fp32 for the rest
    opt = ma.MasterAdamW(params, lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=wd,
                         low_precision=low, decoupled=decoupled)
    states = [{"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)} for r in ref]
    for k in range(3):
        none = none_at if k == 1 else ()
        _grads(params, 10 + k, none)
        grads = [None if p.grad is None else p.grad.clone() for p in params]
        opt.step()
        ma.reference_step(ref, grads, states, 3e-2, (0.8, 0.95), 1e-6, wd, decoupled)
    for i, (p, r, st) in enumerate(zip(params, ref, states)):
        mine = opt.state[p]
        master = mine.get("master", p.detach())
        _close(master, r, f"tensor {i} {tuple(p.shape)}: master")
        _close(mine["exp_avg"], st["exp_avg"], f"tensor {i}: exp_avg")
        _close(mine["exp_avg_sq"], st["exp_avg_sq"], f"tensor {i}: exp_avg_sq")
        assert mine["step"] == st["step"], f"tensor {i}: step {mine['step']} against {st['step']}"
        if i % 2 == 0:
            assert p.dtype == torch.bfloat16
            assert torch.equal(p.detach(), mine["master"].to(torch.bfloat16)), f"tensor {i}: the bf16 copy is not the master rounded"
        else:
            assert p.dtype == torch.float32 and "master" not in mine


@pytest.mark.parametrize("decoupled,wd", [(True, 0.1), (False, 0.05), (True, 0.0)], ids=["adamw", "adam-l2", "no-decay"])
def test_step_matches_torch(decoupled, wd):
    _check_against_reference("cpu", decoupled, wd)


def test_a_tensor_without_gradient_is_not_updated():
    """torch.optim skips a parameter whose grad is None: no update, its step count unchanged."""
    _check_against_reference("cpu", True, 0.1, none_at=(1, 2))


def test_groups_with_their_own_hyperparameters():
    params = _params("cpu")
    ref = [p.detach().clone() for p in params]
    opt = ma.MasterAdamW([{"params": params[:2], "weight_decay": 0.0, "lr": 1e-2},
                          {"params": params[2:], "weight_decay": 0.2}], lr=5e-2, low_precision=params[1:4])
    states = [{"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)} for r in ref]
    for k in range(2):
        _grads(params, k)
        grads = [p.grad.clone() for p in params]
        opt.step()
        ma.reference_step(ref[:2], grads[:2], states[:2], 1e-2, (0.9, 0.999), 1e-8, 0.0)
        ma.reference_step(ref[2:], grads[2:], states[2:], 5e-2, (0.9, 0.999), 1e-8, 0.2)
    for i, (p, r) in enumerate(zip(params, ref)):
        _close(opt.state[p].get("master", p.detach()), r, f"tensor {i}")


def test_a_group_added_later():
    """add_param_group after steps: the new parameters are updated from the next step (fp32),
    the others go on as before."""
    params = _params("cpu", seed=7)
    ref = [p.detach().clone() for p in params]
    opt = ma.MasterAdamW(params[:3], lr=1e-2, low_precision=params[:2])
    states = [{"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)} for r in ref]
    _grads(params, 1)
    opt.step()
    ma.reference_step(ref[:3], [p.grad.clone() for p in params[:3]], states[:3], 1e-2, (0.9, 0.999), 1e-8, 1e-2)
    opt.add_param_group({"params": params[3:], "weight_decay": 0.0})
    _grads(params, 2)
    grads = [p.grad.clone() for p in params]
    opt.step()
    ma.reference_step(ref[:3], grads[:3], states[:3], 1e-2, (0.9, 0.999), 1e-8, 1e-2)
    ma.reference_step(ref[3:], grads[3:], states[3:], 1e-2, (0.9, 0.999), 1e-8, 0.0)
    for i, (p, r) in enumerate(zip(params, ref)):
        _close(opt.state[p].get("master", p.detach()), r, f"tensor {i}")


def test_bf16_copy_rounds_to_nearest_even():
    """With lr 0 the masters stay as planted: values halfway between two bf16 numbers, whose
    copy must round to the even one (truncation would keep the lower)."""
    ties = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 3 * 2 ** -8), 3.0 + 2 ** -7, 1e-3, -7.5])
    p = torch.nn.Parameter(ties.clone())
    opt = ma.MasterAdamW([p], lr=0.0, weight_decay=0.0, low_precision=[p])
    p.grad = torch.ones_like(p)
    opt.step()
    assert torch.equal(opt.state[p]["master"], ties)
    assert torch.equal(p.detach(), ties.to(torch.bfloat16)), (p.detach().float() - ties).tolist()
    assert p[1].item() == 1 + 2 ** -6 and p[0].item() == 1.0


class _Tiny(torch.nn.Module):
    """A GEMM model with what must stay fp32: an embedding tied to the output projection, a
    LayerNorm, and a Conv1D in Hugging Face's layout (y = x @ weight + bias)."""

    class Conv1D(torch.nn.Module):
        def __init__(self, nf, nx):
            super().__init__()
            self.nf = nf
            self.weight = torch.nn.Parameter(torch.randn(nx, nf) * 0.1)
            self.bias = torch.nn.Parameter(torch.zeros(nf))

        def forward(self, x):
            return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(*x.shape[:-1], self.nf)

    def __init__(self, vocab=50, d=24):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.mid = _Tiny.Conv1D(d, 4 * d)
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, ids):
        h = self.emb(ids)
        h = h + self.mid(torch.nn.functional.gelu(self.up(h)))
        logits = self.head(self.ln(h))
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())


def test_gemm_parameters_leave_out_what_else_reads():
    m = _Tiny()
    got = {id(p) for p in ma.gemm_parameters(m)}
    want = {id(m.up.weight), id(m.up.bias), id(m.mid.weight), id(m.mid.bias)}
    assert got == want, "want the Linear's and the Conv1D's weight and bias; not the LayerNorm's nor the tied weight"


def test_training_matches_autocast_with_fp32_weights():
    """Three steps of the tiny model under CPU autocast bf16: the losses are autocast's with
    fp32 weights and torch.optim.AdamW, step for step, and the masters its weights."""
    torch.manual_seed(0)
    model = _Tiny()
    ref = copy.deepcopy(model)
    opt = ma.MasterAdamW(model.parameters(), lr=1e-2, weight_decay=0.1, low_precision=ma.gemm_parameters(model))
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    assert model.up.weight.dtype == torch.bfloat16 and model.emb.weight.dtype == torch.float32
    for k in range(3):
        ids = torch.randint(0, 50, (4, 9), generator=torch.Generator().manual_seed(k))
        losses = []
        for mod, o in ((model, opt), (ref, ropt)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = mod(ids)
            loss.backward()
            o.step()
            o.zero_grad()
            losses.append(loss.item())
        assert losses[0] == losses[1], f"step {k}: loss {losses[0]} against autocast's {losses[1]}"
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        _close(opt.state[p].get("master", p.detach()).float(), q.detach(), name)


def test_gradient_accumulation_in_fp32():
    """grad_dtype=torch.float32: two backwards a step add their gradients in fp32, as
    autocast's fp32 weights do: the same losses step for step, the masters the weights."""
    torch.manual_seed(2)
    model = _Tiny()
    ref = copy.deepcopy(model)
    opt = ma.MasterAdamW(model.parameters(), lr=1e-2, weight_decay=0.1, low_precision=ma.gemm_parameters(model),
                         grad_dtype=torch.float32)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    assert model.up.weight.dtype == torch.bfloat16
    for k in range(3):
        losses = []
        for mod, o in ((model, opt), (ref, ropt)):
            total = 0.0
            for micro in range(2):
                ids = torch.randint(0, 50, (4, 9), generator=torch.Generator().manual_seed(10 * k + micro))
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = mod(ids)
                loss.backward()
                total += loss.item()
            assert mod is ref or model.up.weight.grad.dtype == torch.float32
            o.step()
            o.zero_grad()
            losses.append(total)
        assert losses[0] == losses[1], f"step {k}: loss {losses[0]} against autocast's {losses[1]}"
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        _close(opt.state[p].get("master", p.detach()).float(), q.detach(), name)


def test_fp32_state_dict_is_autocasts_checkpoint():
    """After training both ways, the fp32 state dict equals the fp32 model's, key for key."""
    torch.manual_seed(1)
    model = _Tiny()
    ref = copy.deepcopy(model)
    opt = ma.MasterAdamW(model.parameters(), lr=1e-2, low_precision=ma.gemm_parameters(model))
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2, foreach=False)
    ids = torch.randint(0, 50, (4, 9), generator=torch.Generator().manual_seed(0))
    for mod, o in ((model, opt), (ref, ropt)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mod(ids).backward()
        o.step()
    got, want = opt.fp32_state_dict(model), ref.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == torch.float32, k
        _close(got[k], want[k], k)
    assert model.state_dict()["up.weight"].dtype == torch.bfloat16  # the model's own: the copies


def test_state_dict_round_trip():
    """A checkpoint holds the masters; an optimizer loading it goes on as the first would."""
    params = _params("cpu", seed=3)
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    a = ma.MasterAdamW(params, lr=1e-2, low_precision=params[:3])
    b = ma.MasterAdamW(twin, lr=1e-2, low_precision=twin[:3])
    _grads(params, 1)
    a.step()
    b.load_state_dict(a.state_dict())
    for p, q in zip(params, twin):
        q.data = p.data.clone()
    _grads(params, 2)
    _grads(twin, 2)
    a.step()
    b.step()
    for i, (p, q) in enumerate(zip(params, twin)):
        assert torch.equal(p.detach(), q.detach()), f"tensor {i}"
        assert torch.equal(a.state[p].get("master", p.detach()), b.state[q].get("master", q.detach())), f"tensor {i}: master"


def test_non_contiguous_gradient():
    p = torch.nn.Parameter(torch.randn(40, 30))
    r = p.detach().clone()
    opt = ma.MasterAdamW([p], lr=1e-2, low_precision=[p])
    g = torch.randn(30, 40).t()
    p.grad = g.to(torch.bfloat16)
    st = {"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)}
    opt.step()
    ma.reference_step([r], [g.to(torch.bfloat16)], [st], 1e-2, (0.9, 0.999), 1e-8, 1e-2)
    _close(opt.state[p]["master"], r, "master")


def test_gradient_at_an_odd_address():
    """A gradient that is a view 2 bytes into its storage: the kernel's unaligned variant."""
    p = torch.nn.Parameter(torch.randn(3 * ma.BLOCK + 5))
    r = p.detach().clone()
    opt = ma.MasterAdamW([p], lr=1e-2, low_precision=[p])
    buf = torch.randn(p.numel() + 1).to(torch.bfloat16)
    g = buf[1:]
    assert g.data_ptr() % 16 != 0
    p.grad = g
    st = {"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)}
    opt.step()
    ma.reference_step([r], [g], [st], 1e-2, (0.9, 0.999), 1e-8, 1e-2)
    _close(opt.state[p]["master"], r, "master")


@pytest.mark.parametrize("make,msg", [
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4, dtype=torch.bfloat16))]), "fp32 parameters"),
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4))], low_precision=[torch.nn.Parameter(torch.randn(4))]), "does not update"),
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4, 3).t())]), "contiguous"),
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4))], lr=-1.0), "learning rate"),
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4))], betas=(0.9, 1.0)), "betas"),
    (lambda: ma.MasterAdamW([torch.nn.Parameter(torch.randn(4))], grad_dtype=torch.float16), "grad_dtype"),
], ids=["bf16-param", "foreign-low", "strided", "negative-lr", "beta-one", "fp16-grads"])
def test_refuses(make, msg):
    with pytest.raises(ValueError, match=msg):
        make()


def test_refuses_a_gradient_of_another_type():
    p = torch.nn.Parameter(torch.randn(8))
    opt = ma.MasterAdamW([p], low_precision=[p])
    p.grad_dtype = None  # torch itself refuses another type unless told not to
    p.grad = torch.randn(8, dtype=torch.float16)
    with pytest.raises(ValueError, match="gradient"):
        opt.step()


def test_refuses_a_tensor_learning_rate():
    p = torch.nn.Parameter(torch.randn(8))
    opt = ma.MasterAdamW([p], lr=torch.tensor(1e-3))
    p.grad = torch.randn(8)
    with pytest.raises(ValueError, match="tensor learning rate"):
        opt.step()


@gpu
@needs_gpu
def test_step_matches_torch_gpu():
    _check_against_reference("cuda", True, 0.1, none_at=(3,))


@gpu
@needs_gpu
def test_gradient_addresses_change_between_steps_gpu():
    """zero_grad(set_to_none=True) lets each backward allocate new gradients: the table of
    their addresses follows (a stale one would update from freed memory)."""
    params = _params("cuda", seed=5)
    ref = [p.detach().clone() for p in params]
    opt = ma.MasterAdamW(params, lr=1e-2, low_precision=params[1:])
    states = [{"step": 0, "exp_avg": torch.zeros_like(r), "exp_avg_sq": torch.zeros_like(r)} for r in ref]
    keep = []
    for k in range(4):
        _grads(params, 20 + k)
        keep.append([p.grad for p in params])  # held: the next gradients get other addresses
        grads = [p.grad.clone() for p in params]
        opt.step()
        ma.reference_step(ref, grads, states, 1e-2, (0.9, 0.999), 1e-8, 1e-2)
    for i, (p, r) in enumerate(zip(params, ref)):
        torch.testing.assert_close(opt.state[p].get("master", p.detach()), r, rtol=2e-6, atol=1e-7)


@gpu
@needs_gpu
def test_graph_capture_is_refused_gpu():
    p = torch.nn.Parameter(torch.randn(64, device="cuda"))
    opt = ma.MasterAdamW([p], low_precision=[p])
    p.grad = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    opt.step()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="CUDA graph"):
        with torch.cuda.graph(g):
            opt.step()



def _sm90_usage():
    """(registers, spills, 16-byte vector loads) of the kernel as the H200 compiles it
    (run_isolated: without the interpreter), for each variant the optimizer launches."""
    import re

    import sm90

    out = {}
    T = 4
    args = (torch.empty(6, T, dtype=torch.int64), torch.empty(3, T, dtype=torch.int64),
            torch.empty(64, dtype=torch.int32), T, 1e-3, 0.9, 0.1, 0.999, 0.001, 1e-8, 0.99, 0.01)
    for decoupled in (True, False):
        for aligned in (True, False):
            launch = sm90.Launch(ma._master_adamw_kernel, (64,), args, ma.NUM_WARPS, 1,
                                 dict(DECOUPLED=decoupled, ALIGNED=aligned, BLOCK=ma.BLOCK))
            ptx = sm90.compile_sm90(launch).asm["ptx"]
            regs, spills = sm90.ptxas_usage(ptx)
            out[f"decoupled={decoupled} aligned={aligned}"] = (regs, spills, len(re.findall(r"ld\.global\.v4", ptx)))
    return out


def test_compiles_for_the_h200_vectorized_without_spills():
    """The kernel compiles for sm_90 (a jitted function reads constexpr globals only, which the
    interpreter does not check), without spills, and where every address is 16-byte aligned
    its whole blocks load fp32 operands 16 bytes at a time (a mask bounded by a number read
    from memory would keep them scalar)."""
    sm90 = pytest.importorskip("sm90", reason="the repository's templates/_common (not in a generated folder)")
    usage = sm90.run_isolated(_sm90_usage, str(pathlib.Path(__file__).parent))
    assert len(usage) == 4, usage
    for name, (regs, spills, v4) in usage.items():
        assert spills == 0 and regs <= 64, (name, regs, spills)
        # p, m, v and an fp32 gradient of the whole blocks, one 16-byte vector each a thread
        assert (v4 >= 4) == ("aligned=True" in name), (name, v4)
