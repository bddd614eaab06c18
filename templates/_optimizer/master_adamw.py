"""AdamW over fp32 master weights for a model whose GEMM weights are kept in bf16: autocast's
casts of the weights, and of their gradients back, never run.

Under ``torch.autocast(dtype=torch.bfloat16)`` every GEMM casts its fp32 weight (and bias) to
bf16 in the forward (``aten::to`` inside ``aten::linear``: one kernel a weight, reading 4 and
writing 2 bytes a parameter) and, in the backward, casts the weight's bf16 gradient back to fp32
(``ToCopyBackward0``: reading 2 and writing 4 bytes, in ATen's unvectorized copy kernel), two
launches a weight and a step. torch.compile keeps both (a cast feeding cuBLAS is a kernel of its
own). Here the model holds its GEMM weights in bf16 and this optimizer their fp32 masters: the
forward's cast is a no-op (autocast casts nothing already bf16), the gradient stays bf16, and
one kernel updates every parameter of a group: it reads the bf16 gradient and upcasts it in
registers, updates the fp32 master and moments, and writes the master's bf16 copy the next
forward reads. Its bytes are those of torch's ``fused=True`` AdamW on fp32 weights (a bf16
gradient read instead of an fp32 one, a bf16 copy written more): the casts' 12 bytes a
parameter go, with their launches.

What the model computes is what autocast computed: the forward reads the master's
round-to-nearest bf16 copy, which is autocast's cast of the same fp32 weight; the gradient is
the same bf16 GEMM output, upcast exactly; the update is torch's AdamW (``foreach=False``) in
fp32 on the same numbers, to the last bit or an ulp (the order of a fused multiply-add).
Conditions (``gemm_parameters`` and the constructor check them):

- bf16 only (fp16 training needs a GradScaler, which refuses fp16 gradients);
- a parameter read by anything but GEMMs stays fp32 (LayerNorm's, an embedding's, a weight
  tied to an embedding: an embedding under autocast reads its fp32 weight);
- the gradients are bf16: accumulated over several backwards they add in bf16 where
  autocast's fp32 gradients add in fp32, DDP all-reduces them in bf16, and ``clip_grad_norm_``
  takes the norm of bf16 gradients (the same values, its result rounded to bf16); with
  ``grad_dtype=torch.float32`` autograd keeps them fp32 (``Tensor.grad_dtype``), as autocast's,
  and only the forward's casts go;
- the model's own ``state_dict()`` holds the bf16 copies: save ``opt.state_dict()`` (the
  masters) with it, or export ``opt.fp32_state_dict(model)``; run evaluation under autocast
  too (an fp32 input does not meet a bf16 weight outside it);
- the step count, learning rate and bias corrections are host numbers (torch's default,
  ``capturable=False``): a step captured in a CUDA graph is refused;
- the constructor changes the parameters' type: make the optimizer before wrapping the model
  in DistributedDataParallel (whose gradient buckets follow the parameters' types when it is
  built); FSDP, which flattens the parameters itself, is not supported.

Usage (the model fp32, as built; its GEMM weights become bf16, their fp32 values the masters)::

    opt = MasterAdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                      low_precision=gemm_parameters(model))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(batch)
    loss.backward()
    opt.step()
    opt.zero_grad()

The kernel: one launch a parameter group, one program a block of one tensor (a table says
which), each tensor's addresses read from device tables: the parameters', masters' and
moments' made once, the gradients' (new tensors each backward) and the step sizes copied from
pinned memory each step without a synchronization; fp32 throughout.

Interpreter-safe: no libdevice, ``tl.sqrt_rn``, bf16 rounded by ``_cast``.
"""

import math
import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
# elements a program updates: 4 a thread at 8 warps on a GPU (one 16-byte load of each fp32
# operand; ptxas keeps it in 46 registers for sm_90, where 8 a thread took 160); small under the
# interpreter so that the tests' tensors span several blocks
BLOCK = 256 if INTERPRET else 1024
NUM_WARPS = 8

# the rows of the static table (one column a tensor) and of the per-step one, for the host
_P, _P16, _M, _V, _NUMEL, _BASE, _G32 = range(7)
_G, _STEP_SIZE, _BC2_SQRT = range(3)
# and for the kernel (a jitted function reads constexpr globals only)
_KP, _KP16, _KM, _KV, _KNUMEL, _KBASE, _KG32 = (tl.constexpr(i) for i in range(7))
_KG, _KSTEP_SIZE, _KBC2_SQRT = (tl.constexpr(i) for i in range(3))


# --- fa:shared cast ---
# Triton 3.6's interpreter casts fp32 -> bf16 by truncation; the GPU rounds to nearest even.
# Under the interpreter, _cast rounds explicitly so both give the same bits.
_RNE_BF16 = tl.constexpr(INTERPRET)


@triton.jit
def _cast(y, dtype: tl.constexpr):
    """y (fp32) -> dtype, rounding to nearest even for bf16 on every backend."""
    if _RNE_BF16 and dtype == tl.bfloat16:
        bits = y.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        y = tl.where(y != y, y, bits.to(tl.float32, bitcast=True))
    return y.to(dtype)
# --- fa:end cast ---


@triton.jit
def _load(ptrs, mask, MASKED: tl.constexpr):
    if MASKED:
        return tl.load(ptrs, mask=mask, other=0.0)
    return tl.load(ptrs)


@triton.jit
def _store(ptrs, val, mask, MASKED: tl.constexpr):
    if MASKED:
        tl.store(ptrs, val, mask=mask)
    else:
        tl.store(ptrs, val)


@triton.jit
def _adamw_block(P, M, V, G16, G32, P16, g16, low, offs, mask, step_size, bc2_sqrt, beta1, one_minus_beta1,
                 beta2, one_minus_beta2, eps, decay, l2, DECOUPLED: tl.constexpr, MASKED: tl.constexpr):
    """torch.optim's single-tensor AdamW (Adam) step, op by op in fp32, on one block of a
    tensor: the gradient read from G16 (bf16) where g16, else from G32; the master's bf16 copy
    written to P16 where low. MASKED: the tensor's last block; the others load and store whole
    vectors."""
    if g16:
        g = _load(G16 + offs, mask, MASKED).to(tl.float32)
    else:
        g = _load(G32 + offs, mask, MASKED)
    p = _load(P + offs, mask, MASKED)
    m = _load(M + offs, mask, MASKED)
    v = _load(V + offs, mask, MASKED)
    if DECOUPLED:
        p = p * decay  # param.mul_(1 - lr * weight_decay)
    else:
        g = g + p * l2  # grad.add(param, alpha=weight_decay)
    m = m + one_minus_beta1 * (g - m)  # exp_avg.lerp_(grad, 1 - beta1): weight < 0.5
    v = v * beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    v = v + one_minus_beta2 * g * g
    denom = tl.sqrt_rn(v) / bc2_sqrt + eps
    p = p + (-step_size) * m / denom  # param.addcdiv_(exp_avg, denom, value=-step_size)
    _store(P + offs, p, mask, MASKED)
    _store(M + offs, m, mask, MASKED)
    _store(V + offs, v, mask, MASKED)
    if low:
        _store(P16 + offs, _cast(p, tl.bfloat16), mask, MASKED)


@triton.jit
def _master_adamw_kernel(
    STATIC, DYN, BLK, T,  # int64 [7, T], int64 [3, T], int32 [programs], tensors
    lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, decay, l2,
    DECOUPLED: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    t = tl.load(BLK + pid).to(tl.int64)
    g_addr = tl.load(DYN + _KG * T + t)
    if g_addr != 0:  # a tensor without a gradient this step is not updated (torch's rule)
        n = tl.load(STATIC + _KNUMEL * T + t)
        first = (pid - tl.load(STATIC + _KBASE * T + t)) * BLOCK
        offs = first + tl.arange(0, BLOCK).to(tl.int64)
        mask = offs < n
        p16_addr = tl.load(STATIC + _KP16 * T + t)
        P = tl.load(STATIC + _KP * T + t).to(tl.pointer_type(tl.float32))
        M = tl.load(STATIC + _KM * T + t).to(tl.pointer_type(tl.float32))
        V = tl.load(STATIC + _KV * T + t).to(tl.pointer_type(tl.float32))
        G16 = g_addr.to(tl.pointer_type(tl.bfloat16))
        G32 = g_addr.to(tl.pointer_type(tl.float32))
        P16 = p16_addr.to(tl.pointer_type(tl.bfloat16))
        if ALIGNED:  # every address 16-byte aligned (the host checked): vector loads and stores
            P, M, V = tl.multiple_of(P, 16), tl.multiple_of(M, 16), tl.multiple_of(V, 16)
            G16, G32, P16 = tl.multiple_of(G16, 16), tl.multiple_of(G32, 16), tl.multiple_of(P16, 16)
        step_size = tl.load(DYN + _KSTEP_SIZE * T + t).to(tl.float64, bitcast=True).to(tl.float32)
        bc2_sqrt = tl.load(DYN + _KBC2_SQRT * T + t).to(tl.float64, bitcast=True).to(tl.float32)
        # whole blocks unmasked (a mask whose bound is read from memory keeps the compiler from
        # vectorizing), the last block of a tensor masked; bf16 gradients where the model holds
        # a bf16 copy (low), unless it keeps them in fp32 (grad_dtype)
        low = p16_addr != 0
        g16 = low & (tl.load(STATIC + _KG32 * T + t) == 0)
        if first + BLOCK <= n:
            _adamw_block(P, M, V, G16, G32, P16, g16, low, offs, mask, step_size, bc2_sqrt, beta1, one_minus_beta1,
                         beta2, one_minus_beta2, eps, decay, l2, DECOUPLED, False)
        else:
            _adamw_block(P, M, V, G16, G32, P16, g16, low, offs, mask, step_size, bc2_sqrt, beta1, one_minus_beta1,
                         beta2, one_minus_beta2, eps, decay, l2, DECOUPLED, True)


def gemm_parameters(model, types=None):
    """The weights and biases of the model's GEMM modules (nn.Linear, nn.Conv1d/2d/3d and
    Hugging Face's Conv1D) that no other module holds: those autocast casts to bf16 for the
    GEMM and nothing else reads. A parameter shared with another module (GPT-2's output
    projection tied to its embedding) is left out."""
    nn = torch.nn
    types = types or (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
    holders = {}
    for m in model.modules():
        for p in m._parameters.values():
            if p is not None:
                holders.setdefault(id(p), []).append(m)
    out, seen = [], set()
    for m in model.modules():
        if not (isinstance(m, types) or (type(m).__name__ == "Conv1D" and hasattr(m, "nf"))):
            continue
        for p in m._parameters.values():
            if p is None or id(p) in seen or len(holders[id(p)]) != 1:
                continue
            seen.add(id(p))
            out.append(p)
    return out


class MasterAdamW(torch.optim.Optimizer):
    """AdamW (``decoupled=True``, torch.optim.AdamW's step) or Adam (``decoupled=False``,
    torch.optim.Adam's L2 weight decay) whose ``low_precision`` parameters the model holds in
    bf16 while their fp32 masters live here (``state[p]["master"]``, saved by state_dict). The
    other parameters stay fp32 and are updated by the same kernel in place. amsgrad, maximize
    and a tensor learning rate are not supported.

    ``grad_dtype``: the low-precision parameters' gradients, bf16 (the default: no cast in the
    backward either) or ``torch.float32`` (``Tensor.grad_dtype``: autograd accumulates them in
    fp32, as autocast's fp32 weights do: for gradient accumulation over several backwards, an
    fp32 all-reduce, a clipping norm of fp32 gradients; the backward's cast of each gradient
    stays, the forward's goes)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *,
                 low_precision=(), decoupled=True, grad_dtype=torch.bfloat16):
        if not 0.0 <= lr:
            raise ValueError(f"invalid learning rate: {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas: {betas}")
        if not 0.0 <= eps:
            raise ValueError(f"invalid eps: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"invalid weight_decay: {weight_decay}")
        if grad_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"grad_dtype must be torch.bfloat16 or torch.float32, got {grad_dtype}")
        if grad_dtype == torch.float32 and not hasattr(torch.Tensor, "grad_dtype"):
            raise ValueError("grad_dtype=torch.float32 needs Tensor.grad_dtype (PyTorch 2.10 and later)")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.decoupled = decoupled
        self.grad_dtype = grad_dtype
        mine = {id(p) for g in self.param_groups for p in g["params"]}
        low = {id(p): p for p in low_precision}
        if set(low) - mine:
            raise ValueError("low_precision holds a parameter the optimizer does not update")
        for g in self.param_groups:
            for p in g["params"]:
                self._init_param(p, id(p) in low)
        self._tables = None  # per group: (static, block table, programs, tensors, aligned), made at the first step
        self._dyn = None  # per group: (the per-step table on the device, its two pinned sources, events)

    def _init_param(self, p, low):
        """p's state (step 0, zero moments) and, where low, its fp32 master, p made bf16."""
        if p.dtype != torch.float32:
            raise ValueError(f"want fp32 parameters (the masters are made from them), got {p.dtype}")
        if p.is_sparse or p.layout != torch.strided:
            raise ValueError("sparse parameters are not supported")
        if not p.is_contiguous():
            raise ValueError("want contiguous parameters")
        st = self.state[p]
        st["step"] = 0
        st["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        if low:
            st["master"] = p.detach().clone(memory_format=torch.contiguous_format)
            p.data = p.data.to(torch.bfloat16)
            if self.grad_dtype != torch.bfloat16:
                p.grad_dtype = self.grad_dtype

    def add_param_group(self, param_group):
        """torch.optim's; a group added after construction stays fp32 (its parameters' state
        made here) and the tables are made again at the next step."""
        super().add_param_group(param_group)
        if hasattr(self, "_tables"):  # not from the constructor
            for p in self.param_groups[-1]["params"]:
                self._init_param(p, False)
            self._tables = self._dyn = None

    def load_state_dict(self, state_dict):
        """torch.optim's, then the masters and moments put back in fp32: torch casts a loaded
        state to its parameter's type, bf16 for the parameters whose masters are here."""
        super().load_state_dict(state_dict)
        params = [p for g in self.param_groups for p in g["params"]]
        for i, saved in state_dict["state"].items():
            p = params[i]
            for key in ("master", "exp_avg", "exp_avg_sq"):
                if key in saved:
                    self.state[p][key] = saved[key].to(device=p.device, dtype=torch.float32).clone(
                        memory_format=torch.contiguous_format)
        self._tables = self._dyn = None

    def _grad_dtype_of(self, p):
        """The type p's gradient has: bf16 for a low-precision parameter unless grad_dtype
        says fp32, else p's own."""
        return self.grad_dtype if p.dtype == torch.bfloat16 else p.dtype

    def fp32_state_dict(self, model):
        """model.state_dict() with the fp32 masters in place of the bf16 copies: the
        checkpoint autocast's fp32 model would have saved."""
        masters = {id(p): st["master"] for p, st in self.state.items() if "master" in st}
        out = model.state_dict(keep_vars=True)
        for k, v in out.items():
            m = masters.get(id(v))
            out[k] = (m if m is not None else v).detach().clone()
        return out

    def _static(self, group):
        """The group's static table: each tensor's fp32 master (or the parameter itself), its
        bf16 copy (0 for none), moments, size and first program; and the block table."""
        cols, blk, base = [], [], 0
        for i, p in enumerate(group["params"]):
            st = self.state[p]
            master = st.get("master")
            n = p.numel()
            nblk = triton.cdiv(n, BLOCK)
            cols.append([(master if master is not None else p).data_ptr(),
                         p.data_ptr() if master is not None else 0,
                         st["exp_avg"].data_ptr(), st["exp_avg_sq"].data_ptr(), n, base,
                         int(self._grad_dtype_of(p) == torch.float32)])
            blk.extend([i] * nblk)
            base += nblk
        dev = group["params"][0].device
        static = torch.tensor(cols, dtype=torch.int64).t().contiguous().to(dev)
        blocks = torch.tensor(blk, dtype=torch.int32).to(dev)
        aligned = all(a % 16 == 0 for c in cols for a in c[:4])
        return static, blocks, base, len(cols), aligned

    def _check_state(self, group):
        for p in group["params"]:
            st = self.state[p]
            master = st.get("master")
            ref = master if master is not None else p
            for name in ("exp_avg", "exp_avg_sq"):
                s = st[name]
                if s.dtype != torch.float32 or s.shape != ref.shape or not s.is_contiguous() or s.device != ref.device:
                    raise ValueError(f"state {name!r} of a {tuple(ref.shape)} parameter is not an fp32 contiguous tensor of its shape")
            if master is not None and (master.dtype != torch.float32 or not master.is_contiguous() or p.dtype != torch.bfloat16):
                raise ValueError("a master weight must be fp32 and contiguous, its parameter bf16")

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._tables is None:
            for g in self.param_groups:
                self._check_state(g)
            self._tables = [self._static(g) for g in self.param_groups]
            self._states = [[self.state[p] for p in g["params"]] for g in self.param_groups]
            self._layout = [[(self._grad_dtype_of(p), p.shape) for p in g["params"]] for g in self.param_groups]
            self._dyn = [None] * len(self.param_groups)
        for gi, group in enumerate(self.param_groups):
            self._step_group(gi, group)
        return loss

    def _step_group(self, gi, group):
        static, blocks, programs, T, aligned = self._tables[gi]
        if T == 0:
            return
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if isinstance(lr, torch.Tensor):
            raise ValueError("a tensor learning rate is not supported: pass a float")
        dev = group["params"][0].device
        if dev.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("MasterAdamW keeps its step count on the host: a CUDA graph capture of the step would replay stale bias corrections")
        addrs, step_size, bc2_sqrt = [0] * T, [0.0] * T, [0.0] * T
        params, states, layout = group["params"], self._states[gi], self._layout[gi]
        corr = {}  # step count -> (step size, sqrt of the second bias correction)
        for i in range(T):
            p = params[i]
            grad = p.grad
            if grad is None:
                continue
            if grad.is_sparse or (grad.dtype, grad.shape) != layout[i]:
                if grad.is_sparse:
                    raise ValueError("sparse gradients are not supported")
                raise ValueError(f"a {tuple(p.shape)} {p.dtype} parameter has a {tuple(grad.shape)} {grad.dtype} gradient")
            if not grad.is_contiguous():
                p.grad = grad = grad.contiguous()
            st = states[i]
            k = st["step"] = st["step"] + 1
            c = corr.get(k)
            if c is None:
                c = corr[k] = (lr / (1 - beta1 ** k), math.sqrt(1 - beta2 ** k))
            step_size[i], bc2_sqrt[i] = c
            a = addrs[i] = grad.data_ptr()
            aligned = aligned and a % 16 == 0
        if not any(addrs):
            return
        if dev.type != "cuda" and not INTERPRET:  # the CPU without Triton's interpreter: torch's ops
            self._step_on_cpu(group)
            return
        dyn = self._dyn_table(gi, dev, addrs, step_size, bc2_sqrt)
        f = float
        _master_adamw_kernel[(programs,)](
            static, dyn, blocks, T,
            f(lr), f(beta1), f(1 - beta1), f(beta2), f(1 - beta2), f(eps), f(1 - lr * wd), f(wd),
            DECOUPLED=self.decoupled, ALIGNED=aligned, BLOCK=BLOCK, num_warps=NUM_WARPS)

    def _step_on_cpu(self, group):
        """The step by reference_step (the step counts this step already advanced)."""
        for p in group["params"]:
            if p.grad is None:
                continue
            st = self.state[p]
            master = st.get("master")
            st["step"] -= 1
            reference_step([master if master is not None else p.data], [p.grad], [st], group["lr"],
                           group["betas"], group["eps"], group["weight_decay"], self.decoupled)
            if master is not None:
                p.data.copy_(master)

    def _dyn_table(self, gi, dev, addrs, step_size, bc2_sqrt):
        """The per-step table on the device: the gradients' addresses and each tensor's step
        size and bias correction (float64 bits). On a GPU it is copied from one of two pinned
        buffers without a synchronization; a buffer is written again only once its last copy
        has run (its event)."""
        T = len(addrs)
        if dev.type != "cuda":
            host = torch.empty(3, T, dtype=torch.int64)
            _fill(host, addrs, step_size, bc2_sqrt)
            return host
        if self._dyn[gi] is None:
            pinned = [torch.empty(3, T, dtype=torch.int64, pin_memory=True) for _ in range(2)]
            self._dyn[gi] = [torch.empty(3, T, dtype=torch.int64, device=dev), pinned, [None, None], 0]
        table, pinned, events, turn = self._dyn[gi]
        host = pinned[turn]
        if events[turn] is not None:
            events[turn].synchronize()
        _fill(host, addrs, step_size, bc2_sqrt)
        table.copy_(host, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        events[turn] = ev
        self._dyn[gi][3] = 1 - turn
        return table


def _fill(host, addrs, step_size, bc2_sqrt):
    """The per-step table's rows written into host (a CPU int64 [3, T] tensor) through numpy."""
    ints = host.numpy()
    floats = ints.view("float64")
    ints[_G] = addrs
    floats[_STEP_SIZE] = step_size
    floats[_BC2_SQRT] = bc2_sqrt


def reference_step(params, grads, states, lr, betas, eps, weight_decay, decoupled=True):
    """torch.optim's single-tensor AdamW (Adam) step on fp32 masters, the bf16 gradients
    upcast: what the autocast model with fp32 weights and torch.optim.AdamW(foreach=False)
    does. states: one dict a parameter with "step", "exp_avg", "exp_avg_sq" (updated in
    place), params the fp32 tensors (updated in place)."""
    beta1, beta2 = betas
    for p, g, st in zip(params, grads, states):
        if g is None:
            continue
        g = g.float()
        st["step"] += 1
        k = st["step"]
        if decoupled:
            p.mul_(1 - lr * weight_decay)
        elif weight_decay != 0:
            g = g.add(p, alpha=weight_decay)
        st["exp_avg"].lerp_(g, 1 - beta1)
        st["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (st["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** k)).add_(eps)
        p.addcdiv_(st["exp_avg"], denom, value=-(lr / (1 - beta1 ** k)))
