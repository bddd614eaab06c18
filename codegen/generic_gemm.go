package codegen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
)

// A program with a GEMM head (program.GEMM) is rendered as two forms of one chain, both in
// kernel.py: gemm_fused, one Triton GEMM whose epilogue is the program's steps (the same
// op-table rendering as the pointwise kernel: renderer.steps), and gemm_cublas, the traced
// eager GEMM (cuBLAS) followed by the program's pointwise kernel (fused, input 0 the GEMM's
// output). The adapter offers the second to bench as a library op ("cublas_pointwise"), so
// the report keeps the faster. Training: GemmFunction, whose forward is gemm_fused storing
// the GEMM's output too (the epilogue's backward recomputes from it), and whose backward is
// the program's fused pointwise backward for the GEMM output's gradient, then cuBLAS (torch
// matmuls) for the operands' gradients.

// gemmTorch is the traced GEMM as eager PyTorch, of a, w and bias: what reference.py replays
// and gemm_cublas calls.
func gemmTorch(g *program.GEMM) string {
	switch g.Op {
	case program.Linear:
		if g.Bias != nil {
			return "torch.nn.functional.linear(a, w, bias)"
		}
		return "torch.nn.functional.linear(a, w)"
	case program.Addmm:
		return "torch.addmm(bias, a, w)"
	case program.MM:
		return "torch.mm(a, w)"
	case program.Matmul:
		return "torch.matmul(a, w)"
	}
	return "torch.bmm(a, w)"
}

// gemmTorchOut is the traced GEMM in eager PyTorch writing into x0, a contiguous tensor of
// its output's shape (ATen's out= form of gemmTorch's op: the same cuBLAS call and rounding).
func gemmTorchOut(g *program.GEMM) string {
	switch g.Op {
	case program.Linear:
		a, x0 := "a.flatten(0, -2)", "x0.flatten(0, -2)"
		if len(g.X) == 2 { // x is [M, K] already (a flatten costs about a microsecond of host time)
			a, x0 = "a", "x0"
		}
		if g.Bias != nil {
			return "torch.addmm(bias, " + a + ", w.t(), out=" + x0 + ")"
		}
		return "torch.mm(" + a + ", w.t(), out=" + x0 + ")"
	case program.Addmm:
		return "torch.addmm(bias, a, w, out=x0)"
	case program.MM:
		return "torch.mm(a, w, out=x0)"
	case program.Matmul:
		return "torch.matmul(a, w, out=x0)"
	}
	return "torch.bmm(a, w, out=x0)"
}

// gemmParams are the GEMM operands' names, in the order fused() and chain() take them.
func gemmParams(g *program.GEMM) []string {
	if g.Bias != nil {
		return []string{"a", "w", "bias"}
	}
	return []string{"a", "w"}
}

// gemmShapes is a case's SHAPES for a GEMM head: the main shape, x's and w's, for x's
// leading dims lead, N and K.
func gemmShapes(g *program.GEMM, lead []int64, n, k int64) [][]int64 {
	main := append(append([]int64{}, lead...), n)
	x := append(append([]int64{}, lead...), k)
	var w []int64
	switch g.Op {
	case program.Linear:
		w = []int64{n, k}
	case program.BMM:
		w = []int64{lead[0], k, n}
	default:
		w = []int64{k, n}
	}
	return [][]int64{main, x, w}
}

// gemmAdversarial are interpreter-size shapes for a GEMM head (the interpreter's tile is
// 16 x 32 x 32): ragged M, N and K over several tiles, one row and one column, K one past a
// block, and square M = N = K (a transposition mistake changes values there, not shapes).
func gemmAdversarial(g *program.GEMM) [][][]int64 {
	rank := len(g.X)
	lead := func(m int64) []int64 {
		switch {
		case g.Op == program.BMM:
			return []int64{2, m}
		case rank == 2:
			return []int64{m}
		}
		if m == 1 {
			l := make([]int64, rank-1)
			for i := range l {
				l[i] = 1
			}
			return l
		}
		l := make([]int64, rank-1)
		for i := range l {
			l[i] = 1
		}
		l[0] = 3 // three leading batches of rows
		l[rank-2] = (m + 2) / 3
		return l
	}
	return [][][]int64{
		gemmShapes(g, lead(33), 45, 70),
		gemmShapes(g, lead(1), 1, 1),
		gemmShapes(g, lead(17), 33, 33),
		gemmShapes(g, lead(40), 40, 40),
	}
}

// gemmCase writes case.py's GEMM entries.
func (r *renderer) gemmCase(b *bytes.Buffer) {
	g := r.p.GEMM
	_, _, n, k := g.MNK()
	fmt.Fprintf(b, "# the GEMM head: its traced op, x's rank, a bias, the dtype of x, w and bias\n")
	fmt.Fprintf(b, "GEMM = {\"op\": %s, \"x_rank\": %d, \"bias\": %s, \"dtype\": %s, \"n\": %d, \"k\": %d}\n",
		pyStr(string(g.Op)), len(g.X), pyBool(g.Bias != nil), pyStr(string(g.DType)), n, k)
	b.WriteString("GEMM_ADVERSARIAL = [")
	for i, sh := range gemmAdversarial(g) {
		if i > 0 {
			b.WriteString(", ")
		}
		var s []string
		for _, d := range sh {
			s = append(s, pyInts(d))
		}
		b.WriteString("[" + strings.Join(s, ", ") + "]")
	}
	b.WriteString("]\n")
}

// gemmReference is reference.py's chain for a GEMM head: the GEMM replayed as traced, its
// output as x0, then the steps.
func (r *renderer) gemmReferenceHead() (params []string, head, gemm string) {
	ops := gemmParams(r.p.GEMM)
	params = append([]string{}, ops...)
	for i := 1; i < len(r.p.Inputs); i++ {
		params = append(params, "x"+strconv.Itoa(i))
	}
	gemm = "def gemm(" + strings.Join(ops, ", ") + "):\n" +
		"    \"\"\"The chain's GEMM as traced (chain's gemm=: another form of it, adapter.reference).\"\"\"\n" +
		"    return " + gemmTorch(r.p.GEMM) + "\n\n\n"
	params = append(params, "gemm=gemm")
	return params, "    x0 = gemm(" + strings.Join(ops, ", ") + ")\n", gemm
}

// gemmKernel writes _gemm_epilogue_kernel: grouped output tiles (the gemm block's _tile),
// fp32 accumulation over K in BLOCK_K steps, the bias, the GEMM output rounded to its dtype
// as eager stores it (x0), then the program's steps on the tile and its stores.
func (r *renderer) gemmKernel(b *bytes.Buffer) {
	g := r.p.GEMM
	var a []string
	a = append(a, "a", "w", "bias")
	for i := 1; i < len(r.p.Inputs); i++ {
		a = append(a, "in"+strconv.Itoa(i))
	}
	for k := range r.p.Outputs {
		a = append(a, "out"+strconv.Itoa(k))
	}
	a = append(a, "pre", "M", "N")
	for d := 0; d < r.rank; d++ {
		a = append(a, "D"+strconv.Itoa(d))
	}
	for i := 1; i < len(r.p.Inputs); i++ {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("s%d_%d", i, d))
		}
	}
	a = append(a, "s_bias", "sa_b", "sa_m", "sa_k", "sw_b", "sw_k", "sw_n",
		"K: tl.constexpr", "HAS_BIAS: tl.constexpr", "STORE_PRE: tl.constexpr", "F32: tl.constexpr",
		"BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr", "BLOCK_K: tl.constexpr", "GROUP_M: tl.constexpr")
	b.WriteString("@triton.jit\n")
	fmt.Fprintf(b, "def _gemm_epilogue_kernel(%s):\n", strings.Join(a, ", "))
	b.WriteString(`    """One output tile of the [batch, M, N] product of a [batch, M, K] and w [batch, K, N] (both
    read through their strides), then the chain on it: x0 is the GEMM's output as eager stores
    it, the inputs are loaded at the tile's (row, column) of the main shape through their
    strides, the outputs are stored contiguous [rows, N]."""
    pid_m, pid_n = _tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    pb = tl.program_id(1).to(tl.int64)
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    a_ptrs = a + pb * sa_b + rm[:, None] * sa_m + rk[None, :] * sa_k
    w_ptrs = w + pb * sw_b + rk[:, None] * sw_k + rn[None, :] * sw_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        at = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        wt = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if F32:  # fp32 operands, or the interpreter (its 16-bit tl.dot is wrong): exact upcasts
            acc = tl.dot(at.to(tl.float32), wt.to(tl.float32), acc, input_precision=_F32_DOT)
        else:  # fp16 / bf16 operands to the tensor cores as they are, fp32 accumulation
            acc = tl.dot(at, wt, acc)
        a_ptrs += BLOCK_K * sa_k
        w_ptrs += BLOCK_K * sw_k
    if HAS_BIAS:
        acc += tl.load(bias + rn * s_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
`)
	dt := tlDtypes[g.DType]
	if g.DType == program.FP32 {
		b.WriteString("    x0 = acc\n")
	} else {
		fmt.Fprintf(b, "    x0 = %s  # the GEMM's output as eager stores it\n", roundCall("acc", g.DType))
	}
	b.WriteString("    mask = m_ok[:, None] & n_ok[None, :]\n")
	b.WriteString("    row = pb * M + rm  # the row of the main shape seen as [rows, N]\n")
	b.WriteString("    r = row\n")
	for d := r.rank - 2; d > 0; d-- {
		fmt.Fprintf(b, "    i%d = (r %% D%d)[:, None]\n    r = r // D%d\n", d, d, d)
	}
	b.WriteString("    i0 = r[:, None]\n")
	fmt.Fprintf(b, "    i%d = rn[None, :]\n", r.rank-1)
	b.WriteString("    offs = row[:, None] * N + rn[None, :]\n")
	b.WriteString("    if STORE_PRE:  # training: the GEMM's output, what the epilogue's backward recomputes from\n")
	fmt.Fprintf(b, "        tl.store(pre + offs, _cast(x0, %s), mask=mask)\n", dt)
	r.epilogue = true
	r.steps(b, "    ", func(i int) string {
		var t []string
		for d := 0; d < r.rank; d++ {
			t = append(t, fmt.Sprintf("i%d * s%d_%d", d, i, d))
		}
		return "(" + strings.Join(t, " + ") + ")"
	}, true)
	r.epilogue = false
	for k, o := range r.p.Outputs {
		r.store(b, "    ", k, o, "v"+strconv.Itoa(o), "offs", "mask")
	}
	b.WriteString("\n\n")
}

// gemmViews is the host code that views a and w as [batch, M, K] and [batch, K, N] as the
// traced op multiplies them (the weight's transposition is here).
func gemmViews(g *program.GEMM) string {
	switch g.Op {
	case program.Linear:
		return "    a3 = a.flatten(0, -2).unsqueeze(0)\n    w3 = w.t().unsqueeze(0)  # nn.Linear's weight is [N, K]\n"
	case program.Matmul:
		return "    a3 = a.flatten(0, -2).unsqueeze(0)\n    w3 = w.unsqueeze(0)\n"
	case program.BMM:
		return "    a3, w3 = a, w\n"
	}
	return "    a3 = a.unsqueeze(0)\n    w3 = w.unsqueeze(0)\n"
}

// gemmBackward is the host code of the operands' gradients from the GEMM output's, g0.
func gemmBackward(g *program.GEMM) string {
	var b strings.Builder
	switch g.Op {
	case program.BMM:
		b.WriteString("    ga = torch.bmm(g0, w.transpose(1, 2)) if needs[0] else None\n")
		b.WriteString("    gw = torch.bmm(a.transpose(1, 2), g0) if needs[1] else None\n")
		return b.String()
	case program.Linear:
		if len(g.X) == 2 { // x is [M, K]: no flatten or reshape (each a microsecond of host time)
			b.WriteString("    ga = torch.mm(g0, w) if needs[0] else None\n")
			b.WriteString("    gw = torch.mm(g0.t(), a) if needs[1] else None\n")
			break
		}
		b.WriteString("    g2 = g0.flatten(0, -2)\n")
		b.WriteString("    ga = torch.mm(g2, w).reshape(a.shape) if needs[0] else None\n")
		b.WriteString("    gw = torch.mm(g2.t(), a.flatten(0, -2)) if needs[1] else None\n")
	default:
		b.WriteString("    g2 = g0.flatten(0, -2)\n")
		b.WriteString("    ga = torch.mm(g2, w.t()).reshape(a.shape) if needs[0] else None\n")
		b.WriteString("    gw = torch.mm(a.flatten(0, -2).t(), g2) if needs[1] else None\n")
	}
	return b.String()
}

// gemmWrapper is the host side of a GEMM head: gemm_fused, gemm_cublas, gemm_only and, with
// a backward, GemmFunction.
func (r *renderer) gemmWrapper(hasBackward bool) string {
	g := r.p.GEMM
	var b strings.Builder
	fmt.Fprintf(&b, "GEMM_DTYPE = %s\nGEMM_X_RANK = %d\nGEMM_HAS_BIAS = %s\n", torchDtypes[g.DType], len(g.X), pyBool(g.Bias != nil))
	// the library path's GEMM output may be the first output where that has its dtype (a GEMM
	// head's program is elementwise, program.Validate: every output has the main shape)
	first := r.p.Outputs[0]
	inPlace := r.outKind(first) == "full" && r.p.Steps[first].DType == g.DType
	fmt.Fprintf(&b, "GEMM_PRE_IN_OUT0 = %s  # the library path may write the GEMM's output into out[0]\n\n\n", pyBool(inPlace))
	b.WriteString("def _gemm_views(a, w):\n")
	b.WriteString(`    """a as [batch, M, K] and w as [batch, K, N] (views where the strides allow), as the traced
    GEMM multiplies them."""
`)
	b.WriteString(gemmViews(g))
	b.WriteString("    return a3, w3\n\n\n")
	b.WriteString("def gemm_only(a, w, bias=None):\n    \"\"\"The traced GEMM alone, in eager PyTorch (cuBLAS).\"\"\"\n")
	b.WriteString("    return " + gemmTorch(g) + "\n\n\n")
	b.WriteString(`def gemm_cublas(a, w, bias, *xs):
    """The chain as cuBLAS plus one generated kernel: the traced GEMM in eager PyTorch, then the
    program's pointwise kernel (fused) on its output`)
	if hasBackward {
		b.WriteString(`; under autograd the kernel's FusedFunction (its fused
    backward), autograd through the GEMM (cuBLAS)."""
    #?numbers xs = _numbers(xs, 1, a.device)
    x0 = gemm_only(a, w, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x0, *xs)):
        return FusedFunction.apply(x0, *xs)
    return fused(x0, *xs)
`)
	} else {
		b.WriteString(`."""
    #?numbers xs = _numbers(xs, 1, a.device)
    return fused(gemm_only(a, w, bias), *xs)
`)
	}
	b.WriteString(`

def _gemm_check(a, w, bias, xs):
    for name, t in (("a", a), ("w", w)) + ((("bias", bias),) if GEMM_HAS_BIAS else ()):
        if not isinstance(t, torch.Tensor) or t.dtype != GEMM_DTYPE:
            raise TypeError(f"{name}: want a {GEMM_DTYPE} tensor")
    if not GEMM_HAS_BIAS and bias is not None:
        raise TypeError("this GEMM takes no bias")
    if a.dim() != GEMM_X_RANK:
        raise ValueError(f"a: rank {a.dim()}, want {GEMM_X_RANK}")
    a3, w3 = _gemm_views(a, w)
    if w3.dim() != 3 or w3.shape[1] != a3.shape[2] or w3.shape[0] != a3.shape[0]:
        raise ValueError(f"a {list(a.shape)} and w {list(w.shape)} do not multiply")
    n = w3.shape[2]
    if GEMM_HAS_BIAS and list(bias.shape) != [n]:
        raise ValueError(f"bias: shape {list(bias.shape)}, want [{n}]")
    shape = list(a.shape[:-1]) + [n]
    if len(xs) != len(IN_DTYPES) - 1:
        raise TypeError(f"the epilogue takes {len(IN_DTYPES) - 1} tensors, got {len(xs)}")
    for i, (t, dt) in enumerate(zip(xs, IN_DTYPES[1:])):
        if not isinstance(t, torch.Tensor) or t.dtype != dt:
            raise TypeError(f"input {i + 1}: want a {dt} tensor")
    for t in xs:  # right-aligned, each dim the output's or 1 (torch.broadcast_shapes costs ~80 us)
        if t.dim() > len(shape) or any(d != 1 and d != s for d, s in zip(reversed(t.shape), reversed(shape))):
            raise ValueError(f"input {list(t.shape)} does not broadcast to the GEMM's output {shape}")
    return a3, w3, shape


def _bstrides(t, rank):
    """t's strides as a broadcast view of rank dims has them: 0 where it broadcasts."""
    pad = rank - t.dim()
    return [0] * pad + [0 if d == 1 else st for d, st in zip(t.shape, t.stride())]


def _gemm_planned(a, w, bias, xs):
    """gemm_fused's plan for operands of these dtypes, shapes and strides (checked on a key's
    first call, then looked up): the GEMM output's shape, the outputs' shapes, (batch, M, N, K)
    and the launch's integer arguments after M and N (the output's shape, the inputs'
    broadcast strides, the bias's stride, the operands' views' strides: _gemm_views makes
    views of the same strides, or copies of the same strides, for every call of the key), a
    slot for the library path's pointwise launch (planned on its first use: the GEMM output
    it reads is contiguous, of the plan's shape, whichever buffer holds it), whether the views
    are a and w's own memory (the kernel then takes a and w themselves: the same pointers,
    read through the planned strides, without making the views each call), and the fused
    GEMM's launches planned so far (_Planned, per tile and flags)."""
    key = ("gemm", _key((a, w, bias, *xs)))
    plan = _PLANS.get(key)
    if plan is None:
        a3, w3, shape = _gemm_check(a, w, bias, xs)
        nb, m, k = a3.shape
        n = w3.shape[2]
        strides = [x for t in xs for x in _bstrides(t, len(shape))]
        s_bias = bias.stride(0) if bias is not None else 0
        ints = (*shape, *strides, s_bias, *a3.stride(), *w3.stride())
        direct = a3.data_ptr() == a.data_ptr() and w3.data_ptr() == w.data_ptr()
        plan = _remember(key, (shape, [_out_shape(shape, kd) for kd in OUT_SHAPES], (nb, m, n, k), ints, [],
                               direct, {}))
    return plan


@_on_their_device
def gemm_fused(a, w, bias, *xs, out=None, pre=None):
    """The chain as one kernel: the GEMM of a and w (and bias), the steps in its epilogue; a
    tuple of the outputs. out: contiguous tensors of the outputs' shapes and dtypes to write
    instead, one of which may be exactly an input of the epilogue (xs: each element is read
    before it is written, in one program); pre: a contiguous tensor of the GEMM output's shape
    and dtype that receives it. Neither may otherwise share memory with an operand, an input
    or each other (refused: the GEMM reads a and w across programs)."""
    #?numbers xs = _numbers(xs, 1, a.device)
    plan = _gemm_planned(a, w, bias, xs)
    shape, out_shapes = plan[:2]
    if out is not None:
        _check_out("gemm_fused", out, out_shapes)
    if pre is not None and (not isinstance(pre, torch.Tensor) or pre.dtype != GEMM_DTYPE
                            or list(pre.shape) != shape or not pre.is_contiguous()):
        raise ValueError("gemm_fused: pre: want a contiguous tensor of the GEMM output's shape and dtype")
    if out is not None or pre is not None:
        ins = [("a", a), ("w", w), ("bias", bias)] + [(f"input {i + 1}", t) for i, t in enumerate(xs)]
        outs = [(f"out[{k}]", o) for k, o in enumerate(out or ())]
        _check_alias("gemm_fused", outs, ins, IN_PLACE[1:])
        _check_alias("gemm_fused", [("pre", pre)], ins + outs)  # never in place: stored before the inputs are read
    return _gemm_fused(a, w, bias, xs, out, pre, plan)


def _no_grad(fn):
    """fn() with grad mode off, set as torch.no_grad sets it (entering and leaving its context
    manager took 1.6 us of host time, these two calls 0.3, on a CPU core)."""
    grad = torch.is_grad_enabled()
    if grad:
        torch._C._set_grad_enabled(False)
    try:
        return fn()
    finally:
        if grad:
            torch._C._set_grad_enabled(True)


def _gemm_fused(a, w, bias, xs, out, pre, plan):
    """gemm_fused with out and pre checked (or None), and its plan (_gemm_planned)."""
    shape, out_shapes, (nb, m, n, k), ints, pointwise, direct, tiles = plan
    fresh = out is None
    if fresh and (nb * m * n == 0 or k == 0):
        out = [torch.empty(s, dtype=dt, device=a.device) for s, dt in zip(out_shapes, OUT_DTYPES)]
    if nb * m * n == 0:
        return tuple(out)
    if k == 0:  # an empty sum: the GEMM's output is the bias (or 0), then the pointwise kernel
        x0 = gemm_only(a, w, bias).detach()
        if pre is not None:
            pre.copy_(x0)
        return _fused_run(_fwd_planned((x0, *xs))[1], (x0, *xs), out)
    flags = (bias is not None, pre is not None, GEMM_DTYPE == torch.float32 or INTERPRET)

    def run(tile, outs, pre_t):  # the inputs read in place through their broadcast strides
        if tile is GEMM_LIBRARY:  # the library path: the traced GEMM on cuBLAS, then the
            library(outs, pre_t)  # program's pointwise kernel on its output
            return
        a3, w3 = (a, w) if direct else _gemm_views(a, w)  # copies where views cannot be made
        launch = tiles.get((tile, flags))
        if launch is None:
            bm, bn, bk, stages, warps = tile
            launch = tiles[tile, flags] = _Planned(
                _gemm_epilogue_kernel, (_gemm_grid(m, n, tile)[0], nb, 1), (m, n, *ints), warps, stages, False,
                K=k, HAS_BIAS=flags[0], STORE_PRE=flags[1], F32=flags[2], BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                GROUP_M=_GEMM_GROUP_M)
        launch.launch((a3, w3, bias if bias is not None else a3, *xs, *outs, pre_t))  # bias: not read without one

    def library(outs, x0):
        _no_grad(lambda: ` + gemmTorchOut(g) + `)  # ATen's out= refuses a weight that requires grad
        pointwise_over(x0, outs)  # outs: the caller's, checked

    def pointwise_over(x0, outs):  # the program's pointwise kernel on the GEMM output x0
        if not pointwise:  # (a plan lookup a call spared: ~1.6 us of host time)
            pointwise.append(_fwd_planned((x0, *xs))[1])
        return _fused_run(pointwise[0], (x0, *xs), outs)

    bufs = []

    def scratch(tile):  # tuning runs write scratch outputs (allocated once), never the caller's
        if not bufs:
            bufs.extend(([torch.empty(s, dtype=dt, device=a.device) for s, dt in zip(out_shapes, OUT_DTYPES)],
                         torch.empty(shape, dtype=GEMM_DTYPE, device=a.device)))
        run(tile, *bufs)

    # the epilogue-fused GEMM's tiles and the library path timed together, the faster kept
    tile = _gemm_tile(_gemm_epilogue_kernel, nb * m, n, k, a, flags, scratch, True)
    if fresh and tile is GEMM_LIBRARY and pre is None and GEMM_PRE_IN_OUT0:
        # the traced GEMM allocates its output, as in eager (no torch.empty and out= GEMM of
        # ours: 5.6-10 us of host time a call less on the H200, probe_gemm_host.py -rounds),
        # and the pointwise kernel writes the first output over it, in place (it reads each
        # element before it writes it, in one program); no graph recorded for the GEMM
        x0 = _no_grad(lambda: gemm_only(a, w, bias))
        return pointwise_over(x0, [x0] + [torch.empty(s, dtype=dt, device=a.device)
                                          for s, dt in zip(out_shapes[1:], OUT_DTYPES[1:])])
    if fresh:
        out = [torch.empty(s, dtype=dt, device=a.device) for s, dt in zip(out_shapes, OUT_DTYPES)]
    if tile is GEMM_LIBRARY and pre is None:  # the GEMM's output, which the library path writes:
        # a buffer of its own (a caller's out= may alias an input the kernel still reads; a
        # first output of another dtype cannot hold it)
        pre = torch.empty(shape, dtype=GEMM_DTYPE, device=a.device)
    run(tile, out, pre if pre is not None else out[0])
    return tuple(out)
`)
	if !hasBackward {
		return b.String()
	}
	b.WriteString(`

def _gemm_backward(a, w, g0, needs):
    """The GEMM operands' gradients from its output's (g0), on cuBLAS (torch matmuls), as
    eager's backward computes them (the bias': fused_backward's, summed in its kernel)."""
`)
	b.WriteString(gemmBackward(g))
	b.WriteString(`    return ga, gw


class GemmFunction(torch.autograd.Function):
    """gemm_fused under autograd: its forward also stores the GEMM's output; its backward is the
    program's fused backward (fused_backward) for the GEMM output's and the inputs' gradients,
    then cuBLAS for the operands' (no fused GEMM backward)."""

    @staticmethod
    @_on_their_device
    def forward(ctx, a, w, bias, *xs):
        #?numbers xs = _numbers(xs, 1, a.device)
        plan = _gemm_planned(a, w, bias, xs)
        pre = torch.empty(plan[0], dtype=GEMM_DTYPE, device=a.device)
        outs = _gemm_fused(a, w, bias, xs, None, pre, plan)
        ctx.set_materialize_grads(False)  # an output no loss reaches: None in backward, not zeros
        ctx.save_for_backward(a, w, bias, pre, *xs)
        ctx.mark_non_differentiable(*[o for o, g in zip(outs, GRAD_OUTPUTS) if not g])
        return outs

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, *douts):
        a, w, bias, pre, *xs = ctx.saved_tensors
        needs = ctx.needs_input_grad
        # the bias in the backward kernel's last slot: its gradient summed from the GEMM
        # output's in the same pass (fused_backward's BWD_INPUTS)
        slot = (bias,) if bias is not None else ()
        grads = fused_backward((pre, *xs, *slot), douts,
                               (needs[0] or needs[1],) + tuple(needs[3:]) + (needs[2],) * len(slot))
        g0 = grads[0]
        if g0 is None and (needs[0] or needs[1]):
            g0 = torch.zeros_like(pre)
        ga, gw = _gemm_backward(a, w, g0, needs[:2])
        gb = grads[-1] if slot else None
        return (ga, gw, gb, *grads[1:1 + len(xs)])


def gemm_autograd(a, w, bias, *xs):
    """The chain as a training step calls it: gemm_fused with the fused backward."""
    return GemmFunction.apply(a, w, bias, *xs)
`)
	return b.String()
}

// gemmReadme is the README's swap-in and training sections for a GEMM head.
func gemmReadme(s GenericSpec, module string) string {
	g := s.Program.GEMM
	var b strings.Builder
	b.WriteString("The chain starts at a GEMM (`" + gemmTorch(g) + "`), and `kernel.py` has it in two forms:\n")
	b.WriteString("`gemm_fused`, one Triton GEMM with the chain as its epilogue (no GEMM output written and read\n")
	b.WriteString("back), and `gemm_cublas`, the GEMM on cuBLAS then the chain's one generated pointwise kernel.\n")
	b.WriteString("`fuseadvise bench` times both (the second as the library op `cublas_pointwise`) and the report\n")
	b.WriteString("keeps the faster. Copy `kernel.py` next to the model code as `" + module + ".py`, then\n")
	b.WriteString("replace the GEMM and the chain's ops with one call (the GEMM's operands, then the chain's other\n")
	b.WriteString("inputs in the order of `case.py`'s INPUTS):\n\n")
	bias := "None"
	if g.Bias != nil {
		bias = "bias"
	}
	b.WriteString("    from " + module + " import gemm_fused, gemm_cublas\n\n")
	b.WriteString("    outputs = gemm_fused(a, w, " + bias + ", *inputs)   # or gemm_cublas(a, w, " + bias + ", *inputs)\n\n")
	if _, err := s.Program.Backward(); err == nil {
		b.WriteString("Training: call `gemm_autograd(a, w, " + bias + ", *inputs)` instead (`GemmFunction`): the forward\n")
		b.WriteString("also stores the GEMM's output, the backward is the chain's fused backward kernel for its\n")
		b.WriteString("gradient, then cuBLAS for the operands' (no fused GEMM backward). Benchmark before shipping\n")
		b.WriteString("(`fuseadvise bench -modes forward,full`): a speedup below 1.0x means do not ship.\n\n")
	} else {
		b.WriteString("Forward only (" + err.Error() + "): under autograd keep the eager ops.\n\n")
	}
	b.WriteString(genericSource(s))
	return b.String()
}
