package codegen

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
)

// The fused backward of a pointwise program (program.Backward): one Triton kernel that
// reloads the saved inputs, recomputes the forward values in registers (rounded as the
// forward rounds them: no saved intermediates), reads the outputs' gradients and applies the
// op table's derivatives in reverse over the steps. The kernel sees the main shape as rows x
// columns laid out by the host (_bwd_layout: dims of size 1 dropped, neighbours merged where
// every tensor's strides and every broadcast input allow, the trailing run the columns, the
// row dims ordered so that each broadcast input's kept rows come before its reduced ones
// where that is possible). An input that broadcasts gets its gradient reduced in the same
// kernel without atomics, deterministically, into a small fp32 buffer the host sums:
// per-program column sums [programs, C] when it keeps the columns (a bias, a per-position
// tensor), per-program sums [programs, column blocks] when it keeps only rows that no
// program's rows cross (a 0-dim scale), per-(row, column block) row sums [column blocks, R]
// otherwise (a per-channel scale on NCHW, a per-row one), and, for the one layout none of
// these fit (columns kept, a reduced row dim outside a kept one that cannot merge into the
// columns), its fp32 values [R, C]. An input whose gradient is an output's gradient exactly
// (an add's operand), of its dtype and the main shape, gets that tensor, not a copy.

// backward reports the program's backward (grad, nil) or why it has none.
func (r *renderer) backward() (program.Grad, error) { return r.p.Backward() }

// gradTerms writes the reverse sweep at indent: g<j> for every step a gradient reaches, then
// gx<i> for every input; it returns, per input, whether any derivative reaches it, and
// which output's gradient (its index among those that carry one) its gradient is exactly,
// -1 for none (program.Grad's Reached and Alias, which follow these terms).
func (r *renderer) gradTerms(b *bytes.Buffer, indent string, g program.Grad) (reached []bool, alias []int) {
	steps := make([][]string, len(r.p.Steps))
	ins := make([][]string, len(r.p.Inputs))
	// per step, the outputs (bit k: the k-th of those carried) whose gradients reach it: with
	// more than one, a term counts only where one of them has a gradient (DYMASK, _live)
	reach := make([]int, len(r.p.Steps))
	k := 0
	for i, o := range r.p.Outputs {
		if g.Outputs[i] {
			steps[o] = append(steps[o], "dy"+strconv.Itoa(k))
			reach[o] |= 1 << k
			k++
		}
	}
	multi := k > 1
	for j := len(r.p.Steps) - 1; j >= 0; j-- {
		if !g.Steps[j] || len(steps[j]) == 0 {
			continue
		}
		s := r.p.Steps[j]
		op, _ := program.Lookup(s.Op)
		gj := "g" + strconv.Itoa(j)
		fmt.Fprintf(b, "%s%s = %s\n", indent, gj, strings.Join(steps[j], " + "))
		args := r.operands(s, true)
		consts := r.tritonConsts(op, s, true)
		for a, arg := range s.Args {
			float := arg.In != nil && g.Inputs[*arg.In] || arg.Step != nil && g.Steps[*arg.Step]
			if !float {
				continue
			}
			d := strings.ReplaceAll(op.Deriv[a], "{y}", "v"+strconv.Itoa(j))
			term := gj + " * (" + expand(d, args, consts, "") + ")"
			if multi {
				term = fmt.Sprintf("_live(%s, DYMASK & %d)", term, reach[j])
			}
			if arg.In != nil {
				ins[*arg.In] = append(ins[*arg.In], term)
			} else {
				steps[*arg.Step] = append(steps[*arg.Step], term)
				reach[*arg.Step] |= reach[j]
			}
		}
	}
	for i, t := range ins {
		if len(t) > 0 {
			fmt.Fprintf(b, "%sgx%d = %s\n", indent, i, strings.Join(t, " + "))
		}
	}
	reached, alias = g.Reached, g.Alias
	if r.biasGrad() {
		// the GEMM bias' gradient: the GEMM output's, summed over the rows by the kernel
		// (none where no derivative reaches the GEMM's output: a chain that only compares it)
		if reached[0] {
			fmt.Fprintf(b, "%sgx%d = gx0\n", indent, len(r.p.Inputs))
		}
		reached = append(append([]bool(nil), reached...), reached[0])
		alias = append(append([]int(nil), alias...), -1)
	}
	return reached, alias
}

// biasGrad reports whether the backward kernel also sums the gradient of the GEMM head's
// bias: one slot after the program's inputs (bwdInputs), whose gradient is the GEMM
// output's (gx0) reduced over the rows as a bias' is, in the pass that computes it, where
// an ATen sum over the stored gradient took 11.9 of the backward's 44.6 µs (a [4096, 512]
// bf16 linear's, H200: bench/experiments/probe_bwd_kernels.py, 2026-12-03).
func (r *renderer) biasGrad() bool {
	return r.p.GEMM != nil && r.p.GEMM.Bias != nil && len(r.p.Inputs) > 0
}

// bwdInputs are the backward kernel's input slots: the program's inputs, then with biasGrad
// the GEMM bias ([N], read by no step: its gradient only).
func (r *renderer) bwdInputs() []program.Input {
	if !r.biasGrad() {
		return r.p.Inputs
	}
	return append(append([]program.Input(nil), r.p.Inputs...),
		program.Input{DType: r.p.GEMM.DType, Dims: r.p.GEMM.Bias})
}

// backwardKernel writes _fused_bwd_kernel and returns, per input, whether a gradient
// reaches it.
func (r *renderer) backwardKernel(b *bytes.Buffer, g program.Grad) []bool {
	var body bytes.Buffer
	reached, _ := r.gradTerms(&body, "        ", g)
	nOut := 0
	for _, x := range g.Outputs {
		if x {
			nOut++
		}
	}
	ins := r.bwdInputs()
	var a []string
	for i := range ins {
		a = append(a, "in"+strconv.Itoa(i))
	}
	for k := 0; k < nOut; k++ {
		a = append(a, "dout"+strconv.Itoa(k))
	}
	for i := range ins {
		a = append(a, "gbuf"+strconv.Itoa(i))
	}
	a = append(a, "R", "C", "J", "SPLITS", "NCB")
	for d := 0; d < r.rank; d++ {
		a = append(a, "D"+strconv.Itoa(d))
	}
	for i := range ins {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("s%d_%d", i, d))
		}
	}
	for k := 0; k < nOut; k++ {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("t%d_%d", k, d))
		}
	}
	for i := range ins {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("u%d_%d", i, d))
		}
	}
	a = append(a, "ROWS_PER_PROG", "MC", "SC")
	for d := 1; d < r.rank-1; d++ { // the row dims' magic numbers (the flat walk's divisions)
		a = append(a, fmt.Sprintf("MR%d", d), fmt.Sprintf("SR%d", d))
	}
	a = append(a, "BLOCK_R: tl.constexpr", "BLOCK_C: tl.constexpr", "IDX64: tl.constexpr",
		"FLAT: tl.constexpr", "ALIGN: tl.constexpr", "AMASK: tl.constexpr", "NINNER: tl.constexpr")
	for i := range ins {
		a = append(a, fmt.Sprintf("KIND%d: tl.constexpr", i))
	}
	if nOut > 1 {
		a = append(a, "DYMASK: tl.constexpr")
	}
	b.WriteString("@triton.jit\n")
	fmt.Fprintf(b, "def _fused_bwd_kernel(%s):\n", strings.Join(a, ", "))
	b.WriteString(`    """Input gradients from the outputs' gradients, the forward recomputed from the inputs.
    The main shape as the host lays it out (_bwd_layout): R rows of C columns, dims D<d> (the
    last the columns), in blocks of J rows, each split over SPLITS programs of ROWS_PER_PROG
    rows (a program's rows never cross a block), times NCB column blocks (one grid axis). KIND<i> is how input
    i's gradient is reduced (_bwd_layout); no atomics: every buffer entry has one writer. A
    program's sums run in a tile of [BLOCK_R, BLOCK_C] fp32 sums, added to elementwise and
    reduced once after the row loop: Llama's RoPE-style x0 * x1 + x2 at 4x16x512x64 took 14.9 us
    with a tile reduced per iteration (a cross-warp sum and a barrier each), 11.4 with this on
    the H200 (bench/experiments/probe_generic_bwd.py --rewrites, 2026-12-02).
    FLAT (one column block, BLOCK_R 1, per-program sums alone): the program's rows times the
    columns walked as one range of BLOCK_C elements a tile, the row and column of each by the
    host's magic numbers, so no lane idles where C is not a power of two; where C and every
    row stride of tensor t (bit t of AMASK, column stride 1) are multiples of ALIGN, its
    accesses are declared runs of ALIGN contiguous elements, which Triton then vectorizes.
    The row dims of the program's block (the NINNER innermost) come from the row's place in
    the block, divided by the magic numbers but for the block's outermost dim; the others from
    the block's number, once a program (a per-channel scale on NCHW, rows C-major: the
    channel once, N without a division, one division an element by C).
    ConvNeXt's per-channel scale, x0 * x1 + x2 on NCHW, through bench on the H200 (2026-12-03):
    32x384x14x14 9.2 us in the 2D tile, 8.7 flat with every row dim divided per element, 6.5
    with the block's dims (torch.compile: 6.2); 32x768x7x7 6.7, 5.4, 5.1. Taken only where rows
    are not 16-aligned (FLAT_UNLESS), as 16-aligned rows ran faster in the 2D tile."""
    pid = tl.program_id(0)
    if IDX64:  # an offset or index reaches 2**31: index math in 64 bits (else 32: fewer registers)
        pid = pid.to(tl.int64)
    pg = pid // NCB
    pc = pid - pg * NCB
    cols = pc * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    blk = pg // SPLITS
    row_start = blk * J + (pg - blk * SPLITS) * ROWS_PER_PROG
    row_end = tl.minimum(row_start + ROWS_PER_PROG, blk * J + J)
`)
	// the flat walk (FLAT) takes per-program sums alone: code only where a slot can broadcast
	kinds := r.bwdKinds(reached)
	flat := false
	for _, k := range kinds {
		flat = flat || len(k) > 1
	}
	for i := range ins {
		if !reached[i] || !slices.Contains(kinds[i], 1) {
			continue
		}
		fmt.Fprintf(b, "    acc%d = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)\n", i)
	}
	b.WriteString("    lo = row_start\n    hi = row_end\n")
	if flat {
		b.WriteString(`    if FLAT:  # the rows' elements as one range (C a multiple of ALIGN: so are its ends)
        lo = row_start * C
        hi = row_end * C
        if ALIGN > 1:
            lo = tl.multiple_of(lo, ALIGN)
            hi = tl.multiple_of(hi, ALIGN)
`)
		// the flat walk's row dims: the block's (the NINNER innermost) from the row's place in its
		// block, the magic numbers dividing all but the outermost of them; the others from the
		// program's block number, once a program
		if r.rank > 1 {
			b.WriteString("        ob = blk\n")
		}
		for d := r.rank - 2; d >= 0; d-- {
			k := r.rank - 2 - d // row dims inside this one
			fmt.Fprintf(b, "        if NINNER <= %d:  # outside the block\n", k)
			fmt.Fprintf(b, "            f%d = ob %% D%d\n            ob = ob // D%d\n", d, d, d)
		}
	}
	b.WriteString(`    r0 = lo
    while r0 < hi:  # a while loop: the interpreter cannot range() over a runtime int
`)
	if flat {
		b.WriteString(`        if FLAT:  # a tile of BLOCK_C consecutive elements: row and column by the magic numbers
            kk = r0 + tl.arange(0, BLOCK_C)[None, :]
            r0 += BLOCK_C
            mask = kk < hi
            rr = tl.where(C == 1, kk, (tl.umulhi(kk.to(tl.uint32), MC.to(tl.uint32)) >> SC).to(tl.int32))
            c = kk - rr * C
            q = rr - blk * J  # the row's place in its block
`)
		for d := r.rank - 2; d >= 0; d-- {
			k := r.rank - 2 - d
			if d > 0 {
				fmt.Fprintf(b, "            if NINNER > %d:  # in the block, more of its dims outside\n", k+1)
				fmt.Fprintf(b, "                p = tl.where(D%d == 1, q, (tl.umulhi(q.to(tl.uint32), MR%d.to(tl.uint32)) >> SR%d).to(tl.int32))\n", d, d, d)
				fmt.Fprintf(b, "                i%d = q - p * D%d\n                q = p\n", d, d)
				fmt.Fprintf(b, "            elif NINNER == %d:  # the block's outermost dim\n", k+1)
			} else {
				fmt.Fprintf(b, "            if NINNER == %d:  # the block's outermost dim\n", k+1)
			}
			fmt.Fprintf(b, "                i%d = q\n            else:\n                i%d = f%d\n", d, d, d)
		}
		b.WriteString("        else:  # a tile of BLOCK_R rows of the column block\n")
	}
	var tile bytes.Buffer // the 2D tile's index math, inside the flat walk's else (12 spaces)
	tile.WriteString(`            rows = r0 + tl.arange(0, BLOCK_R)
            rmask = rows < hi
            r0 += BLOCK_R
            mask = rmask[:, None] & cmask[None, :]
            rr = rows[:, None]
            c = cols[None, :]
            q = rr
`)
	for d := r.rank - 2; d > 0; d-- {
		fmt.Fprintf(&tile, "            i%d = q %% D%d\n            q = q // D%d\n", d, d, d)
	}
	if r.rank > 1 {
		tile.WriteString("            i0 = q\n")
	}
	if flat {
		b.Write(tile.Bytes())
	} else {
		b.WriteString(strings.ReplaceAll(tile.String(), "\n            ", "\n        ")[4:])
	}
	lead := func(prefix string, i int) string {
		t := []string{"rr * 0"}
		for d := 0; d < r.rank-1; d++ {
			t = append(t, fmt.Sprintf("i%d * %s%d_%d", d, prefix, i, d))
		}
		return strings.Join(t, " + ")
	}
	// offset writes tensor t's offsets as name, declared runs of ALIGN contiguous elements
	// where bit t of AMASK says so (set with FLAT and ALIGN > 1 only), right where they are
	// computed: Triton keeps such a hint on the op that made the value, so not through a
	// helper's argument
	offset := func(indent, name, expr string, t int) {
		fmt.Fprintf(b, "%s%s = %s\n", indent, name, expr)
		fmt.Fprintf(b, "%sif AMASK >> %d & 1:\n", indent, t)
		fmt.Fprintf(b, "%s    %s = tl.max_contiguous(tl.multiple_of(%s, [1, ALIGN]), [1, ALIGN])\n", indent, name, name)
	}
	nIn := len(ins)
	needIn, needStep := r.bwdReads(body.String())
	for i := range r.p.Inputs { // the GEMM bias' slot is read by no step: no offsets
		if !needIn[i] || r.p.Inputs[i].Number {
			continue
		}
		fmt.Fprintf(b, "        base%d = %s\n", i, lead("s", i))
		offset("        ", fmt.Sprintf("o%d", i), fmt.Sprintf("base%d + c * s%d_%d", i, i, r.rank-1), i)
	}
	r.stepsOf(b, "        ", func(i int) string { return fmt.Sprintf("o%d", i) }, false, needIn, needStep)
	for k := 0; k < nOut; k++ {
		offset("        ", fmt.Sprintf("od%d", k), fmt.Sprintf("%s + c * t%d_%d", lead("t", k), k, r.rank-1), nIn+k)
		fmt.Fprintf(b, "        dy%d = tl.load(dout%d + od%d, mask=mask, other=0).to(tl.float32)\n", k, k, k)
	}
	b.Write(body.Bytes())
	for i := range ins {
		if !reached[i] {
			continue
		}
		I := strconv.Itoa(i)
		last := strconv.Itoa(r.rank - 1)
		kw := "if"
		branch := func(k int, cond, comment string) bool {
			if !slices.Contains(kinds[i], k) {
				return false
			}
			b.WriteString("        " + kw + " " + cond + ":  # " + comment + "\n")
			kw = "elif"
			return true
		}
		if branch(0, "KIND"+I+" == 0", "the main shape: stored as it is") {
			offset("            ", "gb", lead("u", i)+" + c * u"+I+"_"+last, nIn+nOut+i)
			b.WriteString("            tl.store(gbuf" + I + " + gb, _cast(gx" + I + ", " + tlDtypes[ins[i].DType] + "), mask=mask)\n")
		}
		if branch(1, "KIND"+I+" == 1 or KIND"+I+" == 2", "the program's rows reduced (1: per column, 2: all)") {
			b.WriteString("            acc" + I + " += tl.where(mask, gx" + I + ", 0.0)  # summed once, after the loop\n")
		}
		if branch(3, "KIND"+I+" == 3", "columns reduced: each row's sum over the column block") {
			b.WriteString("            tl.store(gbuf" + I + " + (pc * R + rows), tl.sum(tl.where(mask, gx" + I + ", 0.0), axis=1), mask=rmask)\n")
		}
		if branch(4, "KIND"+I+" == 4", "none fits: the fp32 values, summed on the host") {
			b.WriteString("            gb = " + lead("u", i) + "\n")
			b.WriteString("            tl.store(gbuf" + I + " + (gb + c * u" + I + "_" + last + "), gx" + I + ", mask=mask)\n")
		}
	}
	for i := range ins {
		if !reached[i] || !slices.Contains(kinds[i], 1) {
			continue
		}
		I := strconv.Itoa(i)
		b.WriteString("    if KIND" + I + " == 1:  # column sums\n")
		b.WriteString("        tl.store(gbuf" + I + " + (pg * C + cols), tl.sum(acc" + I + ", axis=0), mask=cmask)\n")
		b.WriteString("    elif KIND" + I + " == 2:  # one sum\n")
		b.WriteString("        tl.store(gbuf" + I + " + pid, tl.sum(tl.sum(acc" + I + ", axis=1), axis=0))\n")
	}
	b.WriteString("\n\n")
	return reached
}

// bwdKinds reports, per backward input slot, the gradient layouts (_bwd_kinds' KIND: 0 the
// main shape, 1 column sums, 2 one sum, 3 row sums, 4 the fp32 values) some input of the
// program's ranks can take, so that the kernel carries code for those alone (the host
// refuses a plan outside them: BWD_KINDS). A slot that cannot broadcast, the GEMM head's
// output, the program's one tensor or an output's only one, is always the main shape; the GEMM bias keeps the
// columns or, where N is 1, nothing. One dim (the columns alone)
// has no row to keep: only a 0-dim gradient, one sum. The fp32 values (4) take two slots
// that broadcast in conflicting row dims, so two row dims besides the columns. Kinds 1 and 2
// share their code (the per-program sums), so 1 stands for both.
func (r *renderer) bwdKinds(reached []bool) [][]int {
	ins := r.bwdInputs()
	tensors := 0
	for _, in := range ins {
		if !in.Number {
			tensors++
		}
	}
	// an input that is some output's only tensor cannot broadcast: that output would shrink
	// with it (_main_shape refuses it)
	alone := make([]bool, len(ins))
	for _, d := range r.outDeps() {
		if len(d) == 1 {
			alone[d[0]] = true
		}
	}
	canBroadcast := func(i int) bool {
		return reached[i] && !ins[i].Number && tensors >= 2 && !(i == 0 && r.p.GEMM != nil) && !alone[i]
	}
	nb := 0 // the slots that can keep a row dim (not the GEMM bias)
	for i := range r.p.Inputs {
		if canBroadcast(i) {
			nb++
		}
	}
	out := make([][]int, len(ins))
	for i := range ins {
		switch {
		case !canBroadcast(i):
			out[i] = []int{0}
		case i == len(r.p.Inputs): // the GEMM bias, [N]: column sums, or one sum where N is 1
			out[i] = []int{0, 1, 2}
		case r.rank == 1:
			out[i] = []int{0, 1, 2}
		case r.rank == 2 || nb < 2:
			out[i] = []int{0, 1, 2, 3}
		default:
			out[i] = []int{0, 1, 2, 3, 4}
		}
	}
	return out
}

// valueRef matches a forward value in generated Triton code: an input's (x<i>) or a step's (v<j>).
var valueRef = regexp.MustCompile(`\b([xv])(\d+)\b`)

// bwdReads reports which inputs and steps the backward kernel must load and recompute: those
// the derivatives in body (gradTerms' sweep) read, and what they are computed from. The
// others are neither loaded nor recomputed: an input that enters the chain by addition alone
// (a residual) is not read at all, so the kernel moves the bytes the cost model counts
// (program.BackwardBytes), and no line of the kernel computes a value nothing uses.
func (r *renderer) bwdReads(body string) (needIn, needStep []bool) {
	needIn = make([]bool, len(r.p.Inputs))
	needStep = make([]bool, len(r.p.Steps))
	for _, m := range valueRef.FindAllStringSubmatch(body, -1) {
		k, _ := strconv.Atoi(m[2])
		if m[1] == "x" && k < len(needIn) {
			needIn[k] = true
		} else if m[1] == "v" && k < len(needStep) {
			needStep[k] = true
		}
	}
	for j := len(r.p.Steps) - 1; j >= 0; j-- {
		if !needStep[j] {
			continue
		}
		for _, a := range r.p.Steps[j].Args {
			switch {
			case a.In != nil:
				needIn[*a.In] = true
			case a.Step != nil:
				needStep[*a.Step] = true
			}
		}
	}
	return needIn, needStep
}

// bwdTile is the backward kernel's tile on a GPU (elements, 4 warps) for a program with
// nIn inputs: fewer elements a thread as it reads and writes more tensors, each tensor's
// offsets and values costing registers. Checked with ptxas -v at sm_90 on the ConvNeXt and
// llama chains: 1024 for up to 20 tensors (<= 186 registers, no spills), 256 for ConvNeXt's
// 42-tensor chain (168 registers; it spilled at 512 and 1024). Up to 12 tensors, 2048: more
// bytes in flight a thread (bench/experiments/probe_generic_bwd.py on the H200, 2026-12-02:
// Llama's fp32 x0 * x1 + x2, 7 tensors, 19.6 -> 14.8 µs at 4x16x512x64; ConvNeXt's layer
// scale, 12 tensors, 88.8 -> 67.7 µs at 32x96x56x56 with PROGRAMS_PER_SM 32; its 17-tensor
// chain at 32x768x7x7 was slower at 2048, 29.6 against 28.3 µs).
func bwdTile(nIn int, g program.Grad, reached []bool) int {
	n := nIn
	for _, x := range g.Outputs {
		if x {
			n++
		}
	}
	for _, x := range reached {
		if x {
			n++
		}
	}
	switch {
	case n <= 12:
		return 2048
	case n <= 20:
		return 1024
	case n <= 32:
		return 512
	}
	return 256
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
	_, alias := r.gradTerms(&bytes.Buffer{}, "", g)
	al := make([]string, len(alias))
	for i, k := range alias {
		al[i] = "None"
		if k >= 0 && reached[i] {
			al[i] = strconv.Itoa(k)
		}
	}
	fmt.Fprintf(&b, "GRAD_OUTPUTS = %s  # per output: it carries a gradient (float, computed from a float input)\n", bools(g.Outputs))
	fmt.Fprintf(&b, "GRAD_REACHED = %s  # per input: a derivative reaches it (else its gradient is None, as eager's)\n", bools(reached))
	fmt.Fprintf(&b, "GRAD_ALIAS = [%s]  # per input: the output gradient (k-th of those carried) that is its gradient exactly\n", strings.Join(al, ", "))
	fmt.Fprintf(&b, "BWD_INPUTS = %d  # the backward kernel's input slots (fused_backward)\n", len(r.bwdInputs()))
	ks := make([]string, 0, len(reached))
	for _, k := range r.bwdKinds(reached) {
		t := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(k)), ", "), "[]")
		if len(k) == 1 {
			t += ","
		}
		ks = append(ks, "("+t+")")
	}
	fmt.Fprintf(&b, "BWD_KINDS = [%s]  # per slot: the gradient layouts (KIND) the backward kernel has code for\n", strings.Join(ks, ", "))
	b.WriteString(`# the backward's tiling: elements per tile, the narrowest column block, the fewest rows a
# program sums into a column-sum buffer when rows are split, and the programs aimed at per
# multiprocessor; the interpreter's are small, so its tests run several tiles per program,
# several programs per row block, and splits
BWD_TILE = 128 if INTERPRET else ` + strconv.Itoa(bwdTile(len(r.p.Inputs), g, reached)) + `  # elements a tile of 4 warps (bwdTile)
MIN_BLOCK_C = 16 if INTERPRET else 128
# 8 and 16 warps were slower on ConvNeXt's four layer-scale chains, at tiles of 2048 to 8192
# (probe_generic_bwd.py --knobs, H200, 2026-12-02)
BWD_WARPS = 4
MIN_SPLIT_ROWS = 2 if INTERPRET else 16
PROGRAMS_PER_SM = 1 if INTERPRET else 32  # 8 before: 4x fewer programs, 10-25% slower on the H200 (probe_generic_bwd.py)
# with column sums, column blocks narrow (down to MIN_COLSUM_BLOCK_C) until there are
# COLSUM_PROGRAMS_PER_SM programs per SM: Llama's 4x16x512x64 backward 11.2 -> 10.2 us, its
# 4x4x512x64 7.4 -> 6.7 (4 against 1 and 32 against 128: probe_generic_bwd.py --knobs, H200)
COLSUM_PROGRAMS_PER_SM = 4
MIN_COLSUM_BLOCK_C = 16 if INTERPRET else 32
# per-program sums alone (a per-channel scale): one column block up to this wide, so one
# program a block needs no host sum: ConvNeXt's 32x384x14x14 backward 19.0 -> 14.7 us with
# 256 for its 196 columns; 28x28's 784 columns in 1024 were slower, 19.7 -> 21.5
# (probe_generic_bwd.py --rewrites kept_first,kept_first+wide, H200, 2026-12-02)
MAX_WIDE_BLOCK_C = 32 if INTERPRET else 256
# the flat walk (FLAT, per-program sums alone) where the columns are not a multiple of
# FLAT_UNLESS: a tile of FLAT_WARPS warps and as many elements a thread as BWD_TILE gives 4
# warps, at most 4 (FLAT_TILE at most 1024).
# Through bench on the H200 (2026-12-03), ConvNeXt's per-channel scale: 32x384x14x14 9.2 ->
# 6.5 us, 32x768x7x7 6.7 -> 5.1; where rows are 16-aligned the 2D tile stayed faster (before
# the block's dims were taken once a program: 32x192x28x28 16.8 against 17.7 flat,
# 32x96x56x56 27.5 against 33.9). Tiles of 1024 rather than 4096 (16 elements a thread):
# ConvNeXt's layer scales with fc2's bias through bench's backward on an H100 (2026-12-05),
# 32x384x14x14 add, mul, add, cast 16.0 -> 9.9 us, add, mul 12.5 -> 9.1, 32x768x7x7 within
# 0.1 (probe_generic_bwd.py --knobs FLAT_TILE x FLAT_WARPS: 1024 at 8 warps best or within
# noise of it on all four; 4 warps slower at 14x14)
FLAT_UNLESS = 16
FLAT_WARPS = 8
FLAT_TILE = min(1024, BWD_TILE * FLAT_WARPS // BWD_WARPS)
_SMS = {}


def _sms(dev):
    """The device's multiprocessors (2 off a GPU, the interpreter: few programs, several tiles each)."""
    if dev.type != "cuda":
        return 2
    i = torch.cuda.current_device() if dev.index is None else dev.index
    if i not in _SMS:
        _SMS[i] = torch.cuda.get_device_properties(i).multi_processor_count
    return _SMS[i]


def _pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _bwd_layout(shape, strides, keeps):
    """The backward kernel's view of the main shape, as (rows, cols): groups of main dims
    (each outer to inner) that the kernel sees as one dim. strides: those of every tensor it
    reads (the inputs broadcast, the outputs' gradients); keeps: per broadcast input whose
    gradient it reduces, per main dim, whether the input has it. Dims of size 1 are dropped
    and neighbours merged where every tensor's strides and every broadcast input allow; the
    last group is the columns (contiguous for dense tensors), the others rows, ordered
    (stably, so in memory order where nothing asks otherwise) by how many column-keeping
    inputs keep them, then by how many broadcast inputs do: each such input's kept rows then
    come before its reduced ones, as per-program sums need, wherever their kept sets nest. A
    per-channel scale on NCHW so runs its rows channel-major (N inner) and sums per program,
    where in memory order it summed per row: ConvNeXt's 32x768x7x7 backward 16.6 -> 11.5 us,
    32x192x28x28 24.4 -> 19.4 (bench/experiments/probe_generic_bwd.py --rewrites kept_first,
    H200, 2026-12-02)."""
    dims = [d for d in range(len(shape)) if shape[d] != 1] or [len(shape) - 1]
    groups = []
    for d in dims:
        if groups:
            o = groups[-1][-1]
            if all(st[o] == st[d] * shape[d] for st in strides) and all(k[o] == k[d] for k in keeps):
                groups[-1].append(d)
                continue
        groups.append([d])
    cols = groups[-1]
    colkeep = [k for k in keeps if k[cols[0]]]
    rows = sorted(groups[:-1], key=lambda gr: (-sum(k[gr[0]] for k in colkeep), -sum(k[gr[0]] for k in keeps)))
    return rows, cols


def _bwd_kinds(rows, cols, keeps):
    """How each broadcast input's gradient (keeps: as _bwd_layout's, None for the others) is
    reduced in the kernel, and the rows of a block no program crosses (the trailing row
    groups, as a count). Kinds: 1 the columns kept and the reduced rows all after the kept
    (a bias, a per-position tensor): per-program column sums [programs, C]; 2 the columns
    reduced, likewise, and no block holds two of its kept rows (a 0-dim scale): per-program
    sums [programs, column blocks]; 3 the columns reduced otherwise (a per-channel scale on
    NCHW, a per-row one): each row's sum per column block [column blocks, R]; 4 the columns
    kept, a reduced row before a kept one (the rows' order could not serve every input):
    its fp32 values [R, C]. All are summed on the host; none needs atomics."""
    kinds, tails = [], []
    for k in keeps:
        if k is None:
            kinds.append(None)
            tails.append(0)
            continue
        kept = [k[gr[0]] for gr in rows]
        tail = len(kept) - sum(kept)  # reduced row groups: the last ones where nested
        nested = all(kept[:len(kept) - tail])
        if k[cols[0]]:
            kinds.append(1 if nested else 4)
        else:
            kinds.append(2 if nested else 3)
        tails.append(tail)
    # blocks as small as a per-program sum's reduced rows allow (a per-row scale's, none:
    # one-row blocks would leave a tile's rows masked off, so it sums per row instead)
    block = min([t for t, kd in zip(tails, kinds) if kd == 1 or (kd == 2 and t > 0)], default=len(rows))
    kinds = [3 if kd == 2 and t < block else kd for kd, t in zip(kinds, tails)]
    return kinds, block


@_on_their_device
def fused_backward(inputs, douts, needs=None):
    """The inputs' gradients (None where not needed or not reached) for the outputs'
    gradients douts (one per output, None for one without), in one kernel from the inputs
    alone: the forward values are recomputed, none is saved. A broadcast input's gradient
    is reduced in the kernel into a small fp32 buffer that one torch sum finishes. The plan
    (_bwd_plan) is computed once per key: the arguments' dtypes, shapes, strides, device and
    needs; a call with a known key allocates, launches and sums. The kernel has BWD_INPUTS
    input slots: the program's inputs and, with a GEMM head's bias, the bias, whose gradient
    it sums from the GEMM output's (GemmFunction passes it; a slot not passed is left
    empty)."""
    n = len(inputs)
    needs = (True,) * n if needs is None else tuple(needs)[:n]
    if n < BWD_INPUTS:  # an empty slot: no gradient asked of it, never read
        inputs = tuple(inputs) + (inputs[0],) * (BWD_INPUTS - n)
        needs = needs + (False,) * (BWD_INPUTS - n)
    return _fused_backward(inputs, douts, needs)[:n]


def _fused_backward(inputs, douts, needs):
    key = ("bwd", _key(inputs), _key(douts), needs, getattr(inputs[0], "device", None) if inputs else None)
    plan = _PLANS.get(key) or _remember(key, _bwd_plan(inputs, douts, needs))
    shape, want, carried, aliases, launch = plan
    if carried is None:  # an empty main shape, or no gradient wanted
        return tuple(torch.zeros_like(t) if w else None for t, w in zip(inputs, want))
    dev = inputs[0].device
    dys = [torch.zeros(shape, dtype=dt, device=dev) if douts[j] is None else douts[j] for j, dt in carried]
    grads = [None] * len(inputs)
    for i, k, same in aliases:  # an output's gradient exactly: that tensor, no copy
        grads[i] = dys[k] if same else torch.broadcast_to(dys[k], shape).reshape(inputs[i].shape)
    if launch is None:
        return tuple(grads)
    planned, stacks, fulls = launch
    bufs = [inputs[0]] * len(inputs)  # inputs[0] where not written
    stacked = []
    for bshape, members, _, _, _ in stacks:
        buf = torch.empty(bshape, dtype=torch.float32, device=dev)
        stacked.append(buf)
        for j, i in enumerate(members):
            bufs[i] = buf[j]
    for i, ishape, dt in fulls:
        bufs[i] = grads[i] = torch.empty(ishape, dtype=dt, device=dev)
    # the tensors themselves, read through the strides of their broadcast views (same data)
    planned.launch((*inputs, *dys, *bufs))
    for buf, (_, members, vshape, sdim, outs) in zip(stacked, stacks):
` + partSumsBranch + `        sums = buf.view(vshape)
        if sdim is not None:
            sums = sums.sum(sdim)
        for j, (i, gshape, order, ishape, cast) in enumerate(outs):
            g = sums[j]
            if order is not None:  # back to the main dims' order
                g = g.reshape(gshape).permute(order)
            g = g.reshape(ishape)
            grads[i] = g if cast is None else g.to(cast)
    return tuple(grads)


def _leading_sums(vshape, sdim):
    """A buffer's view and summed dims, as [members, 1, G, N] and 2 where the dims summed
    all come before the dims kept (dims of 1 aside): _fused_backward then adds it up with
    _sum_parts, column sums of a [G, N] matrix a member, where a torch sum over dims that are
    not the innermost picked a slow reduction: ConvNet's fp16 LayerNorm2d, a per-channel
    weight's row sums [2, 25, 32, 128] over dims 1 and 2, took 26.0 µs of a 98.7 µs backward
    on the H200 (bench/experiments/probe_generic_bwd.py --kernels, 2026-12-04). Else as given."""
    summed = [sdim] if isinstance(sdim, int) else list(sdim)
    dims = [d for d in range(1, len(vshape)) if vshape[d] != 1]
    kept = [d for d in dims if d not in summed]
    if not kept or not all(d < min(kept) for d in summed if vshape[d] != 1):
        return vshape, sdim
    g = _prod(vshape[d] for d in summed)
    return [vshape[0], 1, g, _prod(vshape[d] for d in kept)], 2


def _bwd_plan(inputs, douts, needs):
    """fused_backward's plan for arguments of these dtypes, shapes, strides, device and needs
    (checked here): (the main shape, the gradients wanted, the outputs' gradients the kernel
    reads (output index, the dtype of a zero one for a None), the inputs whose gradient is one
    of those (input, which, whether it has the input's shape), the launch). The launch, None
    when no kernel is needed: the kernel's _Planned launch (grid, the arguments after the
    tensors, the constexprs, num_warps), the partial-sum buffers (shape, members, and how one
    torch sum finishes them) and the gradients the kernel stores whole."""
    shape = _main_shape(inputs[:len(IN_DTYPES)])  # a GEMM bias' slot after them: [N], or empty
    want = [bool(n) and r and t.dtype.is_floating_point for n, r, t in zip(needs, GRAD_REACHED, inputs)]
    numel = _prod(shape)
    if numel == 0 or not any(want):
        return shape, want, None, None, None
    dev = inputs[0].device
    views = [torch.broadcast_to(t, shape) for t in inputs]
    dense = [0] * RANK  # a contiguous tensor of the main shape (a zero gradient's strides)
    acc = 1
    for d in reversed(range(RANK)):
        dense[d] = acc
        acc *= shape[d]
    carried, dy_dtypes, dy_shapes, dy_strides = [], [], [], []
    for j, (dy, dt, g) in enumerate(zip(douts, OUT_DTYPES, GRAD_OUTPUTS)):
        if g:
            carried.append((j, dt))
            dy_dtypes.append(dt if dy is None else dy.dtype)
            dy_shapes.append(list(shape) if dy is None else list(dy.shape))
            dy_strides.append(dense if dy is None else torch.broadcast_to(dy, shape).stride())
    keeps = [None] * len(inputs)
    aliases = []
    full = [False] * len(inputs)  # the main shape: the kernel stores the gradient as it is
    for i, (t, w) in enumerate(zip(inputs, want)):
        if not w:
            continue
        pshape = [1] * (RANK - t.dim()) + list(t.shape)
        k = GRAD_ALIAS[i]
        if pshape != shape:
            keeps[i] = [p != 1 or d == 1 for p, d in zip(pshape, shape)]
        elif k is not None and dy_dtypes[k] == t.dtype:
            aliases.append((i, k, dy_shapes[k] == list(t.shape)))
        else:
            full[i] = True
    if not any(full) and all(k is None for k in keeps):
        return shape, want, carried, aliases, None
    read = [v.stride() for v in views] + dy_strides
    rows, cols = _bwd_layout(shape, read, [k for k in keeps if k is not None])
    kinds, tail = _bwd_kinds(rows, cols, keeps)
    size = [_prod(shape[d] for d in gr) for gr in rows]
    n_cols = _prod(shape[d] for d in cols)
    n_rows = numel // n_cols
    blk_rows = _prod(size[len(rows) - tail:])
    nblk = n_rows // blk_rows
    # tiling: with per-program sums alone (a per-channel scale) and rows not 16-aligned, the
    # flat walk (FLAT): a program a block, or as many as fill the device, whole rows each, in
    # one range of elements; else column blocks with few lanes masked off (with per-program
    # sums alone and a block per program, one column block where up to half its lanes masked
    # off spares the host's sum); with column sums, more (narrower) column blocks before rows
    # are split (a split costs its buffer and the host's sum); else enough programs to fill
    # the device several times
    sms = _sms(dev)
    reduced = [kd for kd in kinds if kd is not None]
    dims = [1] * (RANK - len(rows) - 1) + size + [n_cols]
    pad = RANK - len(rows) - 1

    def lay(st):  # strides over the main dims -> over the layout's dims
        return [0] * pad + [st[gr[-1]] for gr in rows] + [st[cols[-1]]]

    strides = [lay(st) for st in read]
    # 32-bit index math unless an index (with a tile's overshoot) or a read's offset nears 2**31
    small = max([numel] + [_max_offset(dims, st) for st in strides]) < 2**31 - 2**22
    flat = set(reduced) == {2} and small and n_cols % FLAT_UNLESS != 0
    warps = BWD_WARPS
    if flat:
        splits = max(1, min(blk_rows, -(-sms // nblk)))
        per = -(-blk_rows // splits)
        splits = -(-blk_rows // per)
        block_r, block_c, n_cb, warps = 1, min(FLAT_TILE, _pow2(per * n_cols)), 1, FLAT_WARPS
    else:
        block_c = min(_pow2(n_cols), 1024, BWD_TILE)
        wide = set(reduced) == {2} and nblk >= sms and block_c <= MAX_WIDE_BLOCK_C and (block_c - n_cols) * 2 <= n_cols
        while not wide and block_c > MIN_BLOCK_C and (-(-n_cols // block_c) * block_c - n_cols) * 8 > n_cols:
            block_c //= 2
        col_sums = 1 in kinds
        while col_sums and block_c > MIN_COLSUM_BLOCK_C and nblk * -(-n_cols // block_c) < COLSUM_PROGRAMS_PER_SM * sms:
            block_c //= 2
        n_cb = -(-n_cols // block_c)
        block_r = max(1, min(BWD_TILE // block_c, _pow2(blk_rows)))
        tiles = -(-blk_rows // block_r)
        prog_sums = 1 in kinds or 2 in kinds
        if prog_sums and nblk * n_cb >= sms and tiles <= 8:
            splits = 1
        else:
            splits = max(1, min(tiles, -(-PROGRAMS_PER_SM * sms // (nblk * n_cb))))
            if prog_sums:
                splits = min(splits, max(1, blk_rows // MIN_SPLIT_ROWS))
        per = -(-tiles // splits) * block_r
        splits = -(-blk_rows // per)
    progs = nblk * splits

    # the broadcast inputs of one kind and one pattern share a buffer (one per input in it)
    # and its one sum: ConvNeXt's per-channel scales, say, a launch for them all
    shares = {}
    for i, kind in enumerate(kinds):
        if kind is not None:
            shares.setdefault((kind, tuple(keeps[i][gr[0]] for gr in rows)), []).append(i)
    part = {1: [progs, n_cols], 2: [progs * n_cb], 3: [n_cb, n_rows], 4: [n_rows, n_cols]}
    stacks = []  # per buffer: its shape, its members, its view and the dims summed, per member
    for (kind, kept_rows), members in shares.items():
        n = len(members)
        kept = [j for j, k in enumerate(kept_rows) if k]
        red = [j for j, k in enumerate(kept_rows) if not k]
        if kind in (1, 2):  # per-program sums: [n, kept rows, programs a kept row has(, C)]
            lead = _prod(size[j] for j in kept)
            progs_per = _prod(part[kind]) // (lead * (n_cols if kind == 1 else 1))
            cols_kept = [n_cols] if kind == 1 else []
            if progs_per > 1:
                vshape, sdim = [n, lead, progs_per] + cols_kept, 2
            else:  # one program a kept row: its partial sums are the sums
                vshape, sdim = [n, lead] + cols_kept, None
        elif kind == 3:
            vshape, sdim = [n, n_cb] + size, [1] + [j + 2 for j in red]
        else:
            vshape, sdim = [n] + size + [n_cols], [j + 1 for j in red]
        groups = [rows[j] for j in kept] + ([cols] if kind in (1, 4) else [])
        order = sorted(range(len(groups)), key=lambda j: groups[j][0])  # back to the main dims' order
        gshape = [_prod(shape[d] for d in gr) for gr in groups]
        if order == list(range(len(groups))):
            order = None
        # per member: its gradient's shape and, for a 16-bit input, the cast from the fp32 sums
        outs = [(i, gshape, order, inputs[i].shape, None if inputs[i].dtype == torch.float32 else inputs[i].dtype)
                for i in members]
        if order is None and sdim is not None:
            vshape, sdim = _leading_sums(vshape, sdim)
        stacks.append(([n] + part[kind], members, vshape, sdim, outs))
    gst = [[0] * RANK for _ in inputs]
    for i, (kind, f) in enumerate(zip(kinds, full)):
        if f:
            gst[i] = lay(dense)
        elif kind == 4:
            gst[i] = [0] * pad + [n_cols * _prod(size[j + 1:]) for j in range(len(rows))] + [1]
    fulls = [(i, list(t.shape), t.dtype) for i, (t, f) in enumerate(zip(inputs, full)) if f]
    reach = max([numel, progs * n_cols, n_cb * n_rows, progs * n_cb] + [_max_offset(dims, st) for st in strides])
    # the flat walk's divisions (the columns, then the row dims but the outermost) and its
    # alignment: the largest power of two up to 16 that divides C, declared for each tensor
    # (inputs, outputs' gradients, stored gradients: bit t of AMASK) whose columns are
    # contiguous and whose row strides it divides
    magic = [_magic(d) for d in [n_cols] + dims[1:-1]]
    align = 16
    while n_cols % align:
        align //= 2
    amask = 0
    for t, st in enumerate(strides + gst):
        if st[-1] == 1 and all(x % align == 0 for x, d in zip(st[:-1], dims[:-1]) if d > 1):
            amask |= 1 << t
    args = (n_rows, n_cols, blk_rows, splits, n_cb, *dims, *[x for st in strides for x in st],
            *[x for st in gst for x in st], per, *[x for m in magic for x in m])
    consts = {"BLOCK_R": block_r, "BLOCK_C": block_c, "IDX64": reach >= 2**31 - 2**22, "FLAT": flat, "ALIGN": align,
              "AMASK": amask if flat and align > 1 else 0, "NINNER": tail if flat else 0}
    for i, (k, f) in enumerate(zip(kinds, full)):
        consts[f"KIND{i}"] = 0 if f else -1 if k is None else k
        if consts[f"KIND{i}"] >= 0 and consts[f"KIND{i}"] not in BWD_KINDS[i]:  # never: codegen's bwdKinds
            raise RuntimeError(f"fused_backward: input {i}'s gradient layout {consts[f'KIND{i}']} is not among "
                               f"those the kernel was generated for {BWD_KINDS[i]}")
    if len(carried) > 1:  # bit k: the k-th carried output has a gradient (None: no loss reaches it)
        consts["DYMASK"] = sum(1 << k for k, (j, _) in enumerate(carried) if douts[j] is not None)
    return shape, want, carried, aliases, (_Planned(_fused_bwd_kernel, (progs * n_cb,), args, warps, 3, fp_fusion=False, **consts), stacks, fulls)


class FusedFunction(torch.autograd.Function):
    """fused() under autograd; its backward is fused_backward (one kernel, the inputs saved)."""

    @staticmethod
    def forward(ctx, *inputs):
        #?numbers inputs = _numbers(inputs, 0, getattr(inputs[0], "device", None))
        outs = fused(*inputs)
        ctx.set_materialize_grads(False)  # an output no loss reaches: None in backward, not zeros
        ctx.save_for_backward(*inputs)
        ctx.mark_non_differentiable(*[o for o, g in zip(outs, GRAD_OUTPUTS) if not g])
        return outs

    @staticmethod
    @once_differentiable  # a double backward raises, never drops terms silently
    def backward(ctx, *douts):
        return fused_backward(ctx.saved_tensors, douts, ctx.needs_input_grad)


def fused_autograd(*inputs):
    """The chain as a training step calls it: fused() with the fused backward."""
    return FusedFunction.apply(*inputs)
`)
	out := b.String()
	if !slices.ContainsFunc(r.bwdKinds(reached), func(k []int) bool { return slices.Contains(k, 1) }) {
		// no slot broadcasts: no partial sums to add up, so no _sum_parts in the folder
		i := strings.Index(out, partSumsBranch)
		out = out[:i] + out[i+len(partSumsBranch):]
	}
	return out
}

// partSumsBranch is the wrapper's column sums through _sum_parts, cut where no slot can
// take per-program column sums.
const partSumsBranch = `        if sdim == 2 and len(vshape) == 4 and vshape[1] == 1:
            # column sums of programs over every row (a bias, the GEMM's): the shared
            # _sum_parts adds up each member's and writes it in its type, one launch a
            # member, where a torch sum and a cast took two launches and 5.7 µs of a 32 µs
            # GEMM head's backward (H200, 2026-12-03)
            # (two members a launch: the buffer's [members, groups, N] read transposed)
            parts = buf.view(vshape[0], vshape[2], vshape[3]).transpose(0, 1)
            flat = []
            for i, gshape, order, ishape, cast in outs:
                grads[i] = g = torch.empty(ishape, dtype=cast or torch.float32, device=dev)
                flat.append(g.view(-1))
            for j in range(0, len(flat), 2):
                _part_sums(parts, flat[j:j + 2], j)
            continue
`
