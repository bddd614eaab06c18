package codegen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
)

// The fused backward of a pointwise program (program.Backward): one Triton kernel that
// reloads the saved inputs, recomputes the forward values in registers (rounded as the
// forward rounds them: no saved intermediates), reads the outputs' gradients and applies the
// op table's derivatives in reverse over the steps. An input that broadcasts gets its
// gradient reduced in the same kernel: over the leading dims (a bias) as per-program partial
// sums [groups, C], over everything (a 0-dim scale) as partial sums [groups, column blocks],
// both summed on the host (a few hundred rows); over some leading dims (a per-channel or
// per-position tensor) with fp32 atomics of the tile's values or row sums into a buffer of
// the input's own size. No fp32 tensor of the main shape is made for a broadcast input.

// backward reports the program's backward (grad, nil) or why it has none.
func (r *renderer) backward() (program.Grad, error) { return r.p.Backward() }

// gradTerms writes the reverse sweep at indent: g<j> for every step a gradient reaches, then
// gx<i> for every input; it returns, per input, whether any derivative reaches it.
func (r *renderer) gradTerms(b *bytes.Buffer, indent string, g program.Grad) []bool {
	steps := make([][]string, len(r.p.Steps))
	ins := make([][]string, len(r.p.Inputs))
	k := 0
	for i, o := range r.p.Outputs {
		if g.Outputs[i] {
			steps[o] = append(steps[o], "dy"+strconv.Itoa(k))
			k++
		}
	}
	for j := len(r.p.Steps) - 1; j >= 0; j-- {
		if !g.Steps[j] || len(steps[j]) == 0 {
			continue
		}
		s := r.p.Steps[j]
		op, _ := program.Lookup(s.Op)
		gj := "g" + strconv.Itoa(j)
		fmt.Fprintf(b, "%s%s = %s\n", indent, gj, strings.Join(steps[j], " + "))
		args := r.operands(s, true)
		consts := constsOf(op, s)
		for a, arg := range s.Args {
			float := arg.In != nil && g.Inputs[*arg.In] || arg.Step != nil && g.Steps[*arg.Step]
			if !float {
				continue
			}
			d := strings.ReplaceAll(op.Deriv[a], "{y}", "v"+strconv.Itoa(j))
			term := gj + " * (" + expand(d, args, consts, "") + ")"
			if arg.In != nil {
				ins[*arg.In] = append(ins[*arg.In], term)
			} else {
				steps[*arg.Step] = append(steps[*arg.Step], term)
			}
		}
	}
	reached := make([]bool, len(r.p.Inputs))
	for i, t := range ins {
		if len(t) > 0 {
			reached[i] = true
			fmt.Fprintf(b, "%sgx%d = %s\n", indent, i, strings.Join(t, " + "))
		}
	}
	return reached
}

// backwardKernel writes _fused_bwd_kernel and returns, per input, whether a gradient
// reaches it.
func (r *renderer) backwardKernel(b *bytes.Buffer, g program.Grad) []bool {
	var body bytes.Buffer
	reached := r.gradTerms(&body, "        ", g)
	nOut := 0
	for _, x := range g.Outputs {
		if x {
			nOut++
		}
	}
	var a []string
	for i := range r.p.Inputs {
		a = append(a, "in"+strconv.Itoa(i))
	}
	for k := 0; k < nOut; k++ {
		a = append(a, "dout"+strconv.Itoa(k))
	}
	for i := range r.p.Inputs {
		a = append(a, "gbuf"+strconv.Itoa(i))
	}
	a = append(a, "R", "C")
	for d := 0; d < r.rank; d++ {
		a = append(a, "D"+strconv.Itoa(d))
	}
	for i := range r.p.Inputs {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("s%d_%d", i, d))
		}
	}
	for k := 0; k < nOut; k++ {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("t%d_%d", k, d))
		}
	}
	for i := range r.p.Inputs {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("u%d_%d", i, d))
		}
	}
	a = append(a, "ROWS_PER_PROG", "BLOCK_R: tl.constexpr", "BLOCK_C: tl.constexpr")
	for i := range r.p.Inputs {
		a = append(a, fmt.Sprintf("KIND%d: tl.constexpr", i))
	}
	b.WriteString("@triton.jit\n")
	fmt.Fprintf(b, "def _fused_bwd_kernel(%s):\n", strings.Join(a, ", "))
	b.WriteString(`    """Input gradients from the outputs' gradients, the forward recomputed from the inputs.
    Programs over (row groups of ROWS_PER_PROG rows, column blocks) of the main shape seen as
    [R, C] (C its last dim); KIND<i> is how input i's gradient is reduced (_grad_kind)."""
    pg = tl.program_id(0).to(tl.int64)
    pc = tl.program_id(1)
    cols = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    c = cols.to(tl.int64)[None, :]
    row_start = pg * ROWS_PER_PROG
    row_end = tl.minimum(row_start + ROWS_PER_PROG, R)
`)
	for i := range r.p.Inputs {
		fmt.Fprintf(b, "    acc_c%d = tl.zeros([BLOCK_C], tl.float32)\n", i)
		fmt.Fprintf(b, "    acc_r%d = tl.zeros([BLOCK_R], tl.float32)\n", i)
	}
	b.WriteString("    r0 = row_start\n")
	b.WriteString("    while r0 < row_end:  # a while loop: the interpreter cannot range() over a runtime int\n")
	b.WriteString("        rows = r0 + tl.arange(0, BLOCK_R)\n")
	b.WriteString("        rmask = rows < row_end\n")
	b.WriteString("        r0 += BLOCK_R\n")
	b.WriteString("        mask = rmask[:, None] & cmask[None, :]\n")
	b.WriteString("        q = rows\n")
	for d := r.rank - 2; d > 0; d-- {
		fmt.Fprintf(b, "        i%d = q %% D%d\n        q = q // D%d\n", d, d, d)
	}
	if r.rank > 1 {
		b.WriteString("        i0 = q\n")
	}
	lead := func(prefix string, i int) string {
		t := []string{"rows * 0"}
		for d := 0; d < r.rank-1; d++ {
			t = append(t, fmt.Sprintf("i%d * %s%d_%d", d, prefix, i, d))
		}
		return strings.Join(t, " + ")
	}
	for i := range r.p.Inputs {
		fmt.Fprintf(b, "        base%d = %s\n", i, lead("s", i))
	}
	r.steps(b, "        ", func(i int) string {
		return fmt.Sprintf("(base%d[:, None] + c * s%d_%d)", i, i, r.rank-1)
	})
	for k := 0; k < nOut; k++ {
		fmt.Fprintf(b, "        dbase%d = %s\n", k, lead("t", k))
		fmt.Fprintf(b, "        dy%d = tl.load(dout%d + (dbase%d[:, None] + c * t%d_%d), mask=mask, other=0).to(tl.float32)\n",
			k, k, k, k, r.rank-1)
	}
	b.Write(body.Bytes())
	for i := range r.p.Inputs {
		if !reached[i] {
			continue
		}
		I := strconv.Itoa(i)
		last := strconv.Itoa(r.rank - 1)
		b.WriteString("        if KIND" + I + " == 0:  # the main shape: stored as it is\n")
		b.WriteString("            gb = " + lead("u", i) + "\n")
		b.WriteString("            tl.store(gbuf" + I + " + (gb[:, None] + c * u" + I + "_" + last + "), _cast(gx" + I +
			", " + tlDtypes[r.p.Inputs[i].DType] + "), mask=mask)\n")
		b.WriteString("        elif KIND" + I + " == 1:  # over the leading dims (a bias): column sums\n")
		b.WriteString("            acc_c" + I + " += tl.sum(tl.where(mask, gx" + I + ", 0.0), axis=0)\n")
		b.WriteString("        elif KIND" + I + " == 2:  # over everything (a 0-dim scale)\n")
		b.WriteString("            acc_r" + I + " += tl.sum(tl.where(mask, gx" + I + ", 0.0), axis=1)\n")
		b.WriteString("        elif KIND" + I + " == 3:  # over some leading dims, the last kept: atomics\n")
		b.WriteString("            gb = " + lead("u", i) + "\n")
		b.WriteString("            tl.atomic_add(gbuf" + I + " + (gb[:, None] + c * u" + I + "_" + last + "), gx" + I + ", mask=mask)\n")
		b.WriteString("        elif KIND" + I + " == 4:  # over the last dim and some leading dims: atomics of row sums\n")
		b.WriteString("            gb = " + lead("u", i) + "\n")
		b.WriteString("            tl.atomic_add(gbuf" + I + " + gb, tl.sum(tl.where(mask, gx" + I + ", 0.0), axis=1), mask=rmask)\n")
	}
	for i := range r.p.Inputs {
		if !reached[i] {
			continue
		}
		I := strconv.Itoa(i)
		b.WriteString("    if KIND" + I + " == 1:\n")
		b.WriteString("        tl.store(gbuf" + I + " + pg * C + cols, acc_c" + I + ", mask=cmask)\n")
		b.WriteString("    elif KIND" + I + " == 2:\n")
		b.WriteString("        tl.store(gbuf" + I + " + pg * tl.num_programs(1) + pc, tl.sum(acc_r" + I + ", axis=0))\n")
	}
	b.WriteString("\n\n")
	return reached
}

// backwardWrapper is the host side: fused_backward, FusedFunction and fused_autograd.
func (r *renderer) backwardWrapper(g program.Grad, reached []bool) string {
	var b strings.Builder
	bools := func(v []bool) string {
		s := make([]string, len(v))
		for i, x := range v {
			s[i] = pyBool(x)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	fmt.Fprintf(&b, "GRAD_OUTPUTS = %s  # per output: it carries a gradient (float, computed from a float input)\n", bools(g.Outputs))
	fmt.Fprintf(&b, "GRAD_REACHED = %s  # per input: a derivative reaches it (else its gradient is None, as eager's)\n", bools(reached))
	b.WriteString(`# elements per backward tile, and row groups (the rows of a bias's partial sums); the
# interpreter's are small, so its tests run several tiles per program and several groups
BWD_TILE = 256 if INTERPRET else 2048
MAX_GROUPS = 2 if INTERPRET else 512


def _grad_kind(pshape, shape):
    """How an input's gradient is reduced: 0 not at all (it has the main shape), 1 over the
    leading dims (a bias: per-program column sums, [groups, C]), 2 over everything (a 0-dim
    scale: per-program sums, [groups, column blocks]), 3 over some leading dims with the last
    kept (fp32 atomics into a buffer of the input's size), 4 over the last dim and some
    leading ones (fp32 atomics of row sums)."""
    if list(pshape) == list(shape):
        return 0
    lead = any(p != 1 for p in pshape[:-1])
    last = pshape[-1] != 1
    if not lead:
        return 1 if last else 2
    return 3 if last else 4


def _pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def fused_backward(inputs, douts, needs=None):
    """The inputs' gradients (None where not needed or not reached) for the outputs'
    gradients douts (one per output, None for one without), in one kernel from the inputs
    alone: the forward values are recomputed, none is saved."""
    shape = _main_shape(inputs)
    needs = [True] * len(inputs) if needs is None else list(needs)[:len(inputs)]
    want = [bool(n) and r and t.dtype.is_floating_point for n, r, t in zip(needs, GRAD_REACHED, inputs)]
    numel = 1
    for d in shape:
        numel *= d
    if numel == 0 or not any(want):
        return tuple(torch.zeros_like(t) if w else None for t, w in zip(inputs, want))
    dev = inputs[0].device
    n_cols = shape[-1]
    n_rows = numel // n_cols
    views = [torch.broadcast_to(t, shape) for t in inputs]
    dys = []
    for dy, dt, g in zip(douts, OUT_DTYPES, GRAD_OUTPUTS):
        if g:
            dys.append(torch.zeros(shape, dtype=dt, device=dev) if dy is None else torch.broadcast_to(dy, shape))
    block_c = min(_pow2(n_cols), 1024)
    block_r = max(1, BWD_TILE // block_c)
    n_cb = -(-n_cols // block_c)
    groups = min(-(-n_rows // block_r), MAX_GROUPS)
    per = -(-(-(-n_rows // groups)) // block_r) * block_r
    groups = -(-n_rows // per)
    kinds, bufs, gstrides = [], [], []
    for t, w in zip(inputs, want):
        pshape = [1] * (RANK - t.dim()) + list(t.shape)
        kind = _grad_kind(pshape, shape) if w else -1
        st, acc = [0] * RANK, 1
        for d in reversed(range(RANK)):
            st[d] = acc if pshape[d] != 1 else 0
            acc *= pshape[d]
        if kind == 0:
            buf = torch.empty(list(t.shape), dtype=t.dtype, device=dev)
        elif kind == 1:
            buf = torch.empty([groups, n_cols], dtype=torch.float32, device=dev)
        elif kind == 2:
            buf = torch.empty([groups, n_cb], dtype=torch.float32, device=dev)
        elif kind in (3, 4):
            buf = torch.zeros([t.numel()], dtype=torch.float32, device=dev)
        else:
            buf = views[0]  # not written
        kinds.append(kind)
        bufs.append(buf)
        gstrides.append(st)
    _fused_bwd_kernel[(groups, n_cb)](
        *views, *dys, *bufs, n_rows, n_cols, *shape,
        *[x for v in views for x in v.stride()], *[x for d in dys for x in d.stride()],
        *[x for st in gstrides for x in st], per, BLOCK_R=block_r, BLOCK_C=block_c,
        **{f"KIND{i}": k for i, k in enumerate(kinds)})
    grads = []
    for t, kind, buf in zip(inputs, kinds, bufs):
        if kind < 0:
            grads.append(None)
        elif kind == 0:
            grads.append(buf)
        elif kind in (1, 2):
            grads.append(buf.sum(0).reshape(t.shape).to(t.dtype) if kind == 1 else buf.sum().reshape(t.shape).to(t.dtype))
        else:
            grads.append(buf.view(t.shape).to(t.dtype))
    return tuple(grads)


class FusedFunction(torch.autograd.Function):
    """fused() under autograd; its backward is fused_backward (one kernel, the inputs saved)."""

    @staticmethod
    def forward(ctx, *inputs):
        outs = fused(*inputs)
        ctx.save_for_backward(*inputs)
        ctx.mark_non_differentiable(*[o for o, g in zip(outs, GRAD_OUTPUTS) if not g])
        return outs

    @staticmethod
    def backward(ctx, *douts):
        return fused_backward(ctx.saved_tensors, douts, ctx.needs_input_grad)


def fused_autograd(*inputs):
    """The chain as a training step calls it: fused() with the fused backward."""
    return FusedFunction.apply(*inputs)
`)
	return b.String()
}
