package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/program"
)

// writeGenericExamples renders codegen's generic examples (names: all of them when none)
// under a temporary folder.
func writeGenericExamples(t *testing.T, names ...string) map[string]string {
	t.Helper()
	root := t.TempDir()
	dirs := map[string]string{}
	for _, e := range codegen.GenericExamples() {
		if len(names) > 0 && !contains(names, e.Name) {
			continue
		}
		d := filepath.Join(root, e.Name)
		if err := codegen.WriteGeneric(d, e.Spec, false); err != nil {
			t.Fatal(err)
		}
		dirs[e.Name] = d
	}
	return dirs
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// TestGenericChainsVerify: every generic example's folder passes the verifier in Triton's
// interpreter unchanged (traced, adversarial, strided, transposed, offset, large, small,
// NaN/-inf, masked-row and in-place cases against its eager replay).
func TestGenericChainsVerify(t *testing.T) {
	py := venv(t)
	dirs := writeGenericExamples(t)
	var list []string
	for _, d := range dirs {
		list = append(list, d)
	}
	// one trial: every case still runs, with its own seed (bench's GPU check and `fuseadvise
	// verify` use three)
	res, err := Run(context.Background(), list, Options{Python: py, Trials: 1})
	if err != nil {
		t.Fatal(err)
	}
	n, inPlace := 0, map[string]bool{}
	for _, f := range res.Folders {
		if f.Error != "" {
			t.Errorf("%s: %s", filepath.Base(f.Dir), f.Error)
		}
		for _, c := range f.Cases {
			n++
			if !c.Passed() {
				t.Errorf("%s %s: %s %s", filepath.Base(f.Dir), c.ID, c.Status, c.Message)
			}
			if c.Name == "in-place" && c.Status == StatusPass {
				inPlace[filepath.Base(f.Dir)] = true
			}
		}
	}
	if n < 10*len(dirs) {
		t.Errorf("%d cases in %d folders: want at least 10 each", n, len(dirs))
	}
	// outputs written over an input (fused(out=...) in place): the elementwise examples with an
	// input of an output's shape and dtype, GEMM heads' residuals among them
	for _, want := range []string{"table_fp32", "gelu_dropout_residual", "linear_gelu_scale_residual"} {
		if !inPlace[want] {
			t.Errorf("%s: no in-place case ran (in place: %v)", want, inPlace)
		}
	}
}

// TestGenericChainsMutants: a wrong op-table entry (a Triton expression or a derivative),
// and wrong generated code (the forward's, the fused backward's reductions), fail
// verification.
func TestGenericChainsMutants(t *testing.T) {
	py := venv(t)
	table := func(code program.Code, triton string) func() func() {
		return func() func() {
			op, _ := program.Lookup(code)
			old := op.Triton
			op.Triton = triton
			return func() { op.Triton = old }
		}
	}
	deriv := func(code program.Code, k int, expr string) func() func() {
		return func() func() {
			op, _ := program.Lookup(code)
			old := op.Deriv[k]
			op.Deriv[k] = expr
			return func() { op.Deriv[k] = old }
		}
	}
	// replace returns an edit of kernel.py: from replaced by to, n times (-1: everywhere)
	replace := func(from, to string, n int) func(dir string) error {
		return func(dir string) error {
			p := filepath.Join(dir, "kernel.py")
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), from) {
				t.Fatalf("%s: %q not in kernel.py", dir, from)
			}
			return os.WriteFile(p, []byte(strings.Replace(string(b), from, to, n)), 0o644)
		}
	}
	text := func(from, to string) func(dir string) error { return replace(from, to, 1) }
	textAll := func(from, to string) func(dir string) error { return replace(from, to, -1) }
	mutants := []struct {
		name, example string
		table         func() func() // swaps an op-table entry, returns the undo
		edit          func(dir string) error
	}{
		{"sigmoid of half its input", "silu_scale", table(program.Sigmoid, "_sigmoid(0.5 * {0})"), nil},
		{"clamp bounds swapped", "clamp_mul_bias", table(program.Clamp, "_clamp({0}, {c1}, {c0})"), nil},
		{"gelu as its tanh form", "gelu_dropout_residual", table(program.Gelu, "_gelu_tanh({0})"), nil},
		{"masked lanes summed", "sub_exp_sum", nil, text("acc += tl.where(mask, v1, 0.0)", "acc += tl.where(mask, v1, 1.0)")},
		{"bias indexed by row", "clamp_mul_bias", nil, text("i1 * s1_1", "i0 * s1_0")},
		{"row max over the first tile only", "scale_channel_leaky_amax", nil, text("        start += BLOCK_N\n", "        start += N\n")},
		// the row program's tile of BLOCK_R rows: programs' rows overlapping, a row sum stored
		// past the last row (the interpreter takes several rows a program, ROW_PROGRAMS)
		{"a program's rows one apart from the next program's", "sub_exp_sum", nil,
			text("tl.program_id(0).to(tl.int64) * BLOCK_R", "tl.program_id(0).to(tl.int64)")},
		{"row sums stored past the last row", "sub_exp_sum", nil, textAll(", mask=row_ok)", ")")},
		{"rows taken as whole tiles where they are not (no masks)", "sub_exp_sum", nil,
			text(`"EVEN": n == block_n and rows % block_r == 0`, `"EVEN": n <= block_n`)},
		// the forward's index math: a magic divisor's shift off by one, the division path's
		// innermost size taken for the next one (the INNER16 case and the WIDE case run it)
		{"magic division shifted one bit too far", "broadcast_affine_tanh", nil, text(">> S2)", ">> (S2 + 1))")},
		{"innermost magic division shifted one bit short", "broadcast_affine_tanh", nil, text(">> S3)", ">> (S3 - 1))")},
		{"division by sizes: the wrong size's remainder", "broadcast_affine_tanh", nil,
			text("            i3 = r % D3", "            i3 = r % D2")},
		{"a dense input read one element on", "broadcast_affine_tanh", nil, text("(offs if DENSE0 else", "(offs + 1 if DENSE0 else")},
		{"division by sizes: the wrong size's quotient", "broadcast_affine_tanh", nil,
			text("            r = r // D3\n", "            r = r // D2\n")},
		{"the dim inside the leading one taken as what is left", "broadcast_affine_tanh", nil,
			text("lead = next((d for d, n in enumerate(dims) if n > 1), RANK - 1)",
				"lead = next((d for d, n in enumerate(dims) if n > 1), RANK - 1) + 1")},
		// the fused backward: derivative entries of the op table, and its reductions
		{"sigmoid's derivative without (1 - y)", "silu_scale", deriv(program.Sigmoid, 0, "{y}"), nil},
		{"mul's first derivative its own operand", "broadcast_affine_tanh", deriv(program.Mul, 0, "{0}"), nil},
		{"tanh's derivative 1 - y", "broadcast_affine_tanh", deriv(program.Tanh, 0, "1.0 - {y}"), nil},
		{"clamp passes every gradient", "clamp_mul_bias", deriv(program.Clamp, 0, "1.0"), nil},
		{"div's denominator derivative sign", "table_fp32", deriv(program.Div, 1, "({0} / {1}) / {1}"), nil},
		{"gelu's derivative without its density term", "gelu_dropout_residual",
			deriv(program.Gelu, 0, "0.5 * (1.0 + tl.math.erf({0} * 0.7071067811865476))"), nil},
		{"bias gradient from the last tile only", "clamp_mul_bias", nil, text("acc1 += ", "acc1 = ")},
		{"0-dim scale gradient from the last tile only", "broadcast_mixed_sigmoid", nil, text("acc5 += ", "acc5 = ")},
		{"each row block's last row left out", "broadcast_affine_tanh", nil,
			text("blk * J + J)", "blk * J + J - 1)")},
		{"each program's rows one past its end", "broadcast_mixed_sigmoid", nil,
			text("rmask = rows < hi", "rmask = rows <= hi")},
		// the backward's flat walk (a per-channel gradient alone): a magic divisor's shift off
		// by one for the columns and for a row dim, a column one on, the range one short
		{"flat walk: the column division shifted one bit too far", "layer_scale_residual", nil,
			text(">> SC)", ">> (SC + 1))")},
		{"flat walk: a row division shifted one bit short", "layer_scale_residual", nil,
			text(">> SR2)", ">> (SR2 - 1))")},
		{"flat walk: each element's column one on", "layer_scale_residual", nil,
			text("            c = kk - rr * C\n", "            c = kk - rr * C + 1\n")},
		{"flat walk: each program's last element left out", "layer_scale_residual", nil,
			text("        hi = row_end * C\n", "        hi = row_end * C - 1\n")},
		{"flat walk: a row's place in its block one on", "layer_scale_residual", nil,
			text("q = rr - blk * J  #", "q = rr - blk * J + 1  #")},
		{"flat walk: the channel of the next block", "layer_scale_residual", nil,
			text("f1 = ob % D1", "f1 = (ob + 1) % D1")},
		// a training dropout with the caller's keep mask: the scale left out, the mask read
		// the other way round (in a GEMM's epilogue), the backward's mask left out
		{"dropout without its scale", "mul_dropout_keep", table(program.DropoutKeep, "tl.where({1} != 0.0, {0}, 0.0)"), nil},
		{"dropout's mask inverted", "linear_relu_dropout_keep", table(program.DropoutKeep, "tl.where({1} != 0.0, 0.0, {0} * {c1})"), nil},
		{"dropout's derivative without the mask", "mul_dropout_keep", deriv(program.DropoutKeep, 0, "{c1}"), nil},
		// a chain with a GEMM head: a wrong op in the epilogue, the bias left out of it, the
		// weight multiplied untransposed, the bias's gradient dropped
		{"epilogue tanh as a sigmoid", "bmm_tanh_clamp", table(program.Tanh, "_sigmoid({0})"), nil},
		{"epilogue without the bias", "addmm_sigmoid_channel", nil,
			text("    if HAS_BIAS:\n        acc += ", "    if False:\n        acc += ")},
		{"linear's weight untransposed", "linear_gelu_scale_residual", nil,
			text("w3 = w.t().unsqueeze(0)", "w3 = w.unsqueeze(0)")},
		{"GEMM bias gradient dropped", "linear_gelu_scale_residual", nil,
			text("gb = grads[-1] if slot else None", "gb = None")},
		{"GEMM bias gradient from the last program's rows only", "addmm_sigmoid_channel", nil,
			textAll("        gx2 = gx0\n", "        gx2 = tl.where(pid == tl.num_programs(0) - 1, gx0, 0.0)\n")},
		// outputs written over an input (the verifier's in-place cases): the library path's
		// GEMM output written into a caller's out=, the residual it aliases, and an
		// elementwise kernel that stores an output before it has read every input
		{"library path's GEMM output over a caller's out=", "linear_gelu_scale_residual", nil,
			text("        pre = torch.empty(shape, dtype=GEMM_DTYPE, device=a.device)\n    run(tile",
				"        pre = out[0] if GEMM_PRE_IN_OUT0 else torch.empty(shape, dtype=GEMM_DTYPE, device=a.device)\n    run(tile")},
		{"the GEMM output stored over the residual before it is read", "linear_gelu_scale_residual", nil,
			text("_gemm_fused(a, w, bias, xs, out, pre, plan)\n", "_gemm_fused(a, w, bias, xs, out, pre if pre is not None or out is None else out[0], plan)\n")},
		// a number compared with as traced, not as eager rounds it to the tensor's type (the
		// verifier's planted case puts the rounded number and its neighbours in the inputs)
		{"comparison with bfloat16's 0.1 unrounded", "linear_gt_gate", nil, textAll("0.10009765625", "0.1")},
		{"pow's exponent unrounded", "abs_pow_bf16", nil, textAll("_pow(v0, 1.296875)", "_pow(v0, 1.3)")},
		{"a bias-free GEMM's comparison unrounded", "bmm_lt_gate", nil, textAll("0.0999755859375", "0.1")},
		{"a bias-free linear's comparison unrounded", "linear_le_gate", nil, textAll("0.10009765625", "0.1")},
		// (clamp_band_fp16's bounds unrounded are not here: its forward is the same either way,
		// and its backward's mask at the unrounded bound is the fp32 chain's, which the
		// gradient check's bound, eager's own error against that chain, admits)
	}
	// the runners are forked from one process that imported torch once (about 3 s a mutant
	// otherwise); nil where unsupported, and Run starts its own
	runner := newForkRunner(t, py)
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			var dirs map[string]string
			if m.table != nil {
				undo := m.table()
				dirs = writeGenericExamples(t, m.example)
				undo()
			} else {
				dirs = writeGenericExamples(t, m.example)
			}
			d := dirs[m.example]
			if m.edit != nil {
				if err := m.edit(d); err != nil {
					t.Fatal(err)
				}
			}
			res, err := Run(context.Background(), []string{d}, Options{Python: py, Trials: 1, FailFast: true, Runner: runner})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Failed() {
				t.Errorf("the mutant passed verification")
			}
		})
	}
}
