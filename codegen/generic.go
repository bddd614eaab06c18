package codegen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/templates"
)

// GenericPattern is the pattern name of a generic chain's folder (case.py, manifest.json).
const GenericPattern = "generic"

// GenericSpec is one generic chain to generate: its op program (package program), the main
// value's dtype, and the same evidence a catalog Spec carries. Only the program's table codes
// and validated numbers reach Python; Ops (the traced op names) and Source go into
// manifest.json and README.md as data.
type GenericSpec struct {
	Program     *program.Program
	Dtype       string // the main value's dtype: fp32, fp16 or bf16
	Ops         []string
	Source      Source
	EstSavingUs float64
	EstFusedUs  float64
	// EstBackwardSavingUs: on a training trace, the fused backward's estimated saving (all
	// instances); 0 in inference.
	EstBackwardSavingUs float64
	Instances           int
	GPUTimeUs           float64
}

// ValidateGeneric checks a generic spec: a valid program (program.Validate), a known dtype,
// finite estimates and bounded source text.
func ValidateGeneric(s GenericSpec) error {
	if s.Program == nil {
		return errors.New("codegen: generic: no program")
	}
	if err := s.Program.Validate(); err != nil {
		return fmt.Errorf("codegen: generic: %v", err)
	}
	if _, ok := dtypes[s.Dtype]; !ok {
		return fmt.Errorf("codegen: generic: unknown dtype %s (want fp32, fp16 or bf16)", strconv.Quote(s.Dtype))
	}
	for _, v := range []float64{s.EstSavingUs, s.EstFusedUs, s.EstBackwardSavingUs, s.GPUTimeUs} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return errors.New("codegen: generic: estimates and times must be finite non-negative numbers")
		}
	}
	if s.Instances < 0 {
		return errors.New("codegen: generic: negative instances")
	}
	if len(s.Source.Trace) > maxText || len(s.Source.Site) > maxText || len(strings.Join(s.Ops, ",")) > maxText {
		return fmt.Errorf("codegen: generic: source text longer than %d bytes", maxText)
	}
	return nil
}

// GenericDirName is the folder name of a generic spec: program.Name with its dtype, e.g.
// "generic-sigmoid_mul_mul-fp32-8x64-1a2b3c4d".
func GenericDirName(s GenericSpec) (string, error) {
	if err := ValidateGeneric(s); err != nil {
		return "", err
	}
	return s.Program.Name(program.DType(s.Dtype)), nil
}

// genericCopied are the files every generic folder copies unchanged.
var genericCopied = []struct{ name, from string }{
	{"adapter.py", "_generic/adapter.py"},
	{"fa_testing.py", "_common/fa_testing.py"},
	{"test_generated.py", "_common/test_generated.py"},
	{"bench.py", "_common/bench.py"},
	{"pytest.ini", "_common/pytest.ini"},
}

// RenderGeneric returns a generic folder's files (name -> content), after ValidateGeneric:
// kernel.py and reference.py rendered from the program, case.py, the shared adapter and
// test scripts, manifest.json and README.md.
func RenderGeneric(s GenericSpec) (map[string][]byte, error) {
	if err := ValidateGeneric(s); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, c := range genericCopied {
		b, err := templates.Read(c.from)
		if err != nil {
			return nil, fmt.Errorf("codegen: generic: template %s: %v", c.from, err)
		}
		out[c.name] = b
	}
	r := newRenderer(s.Program)
	out["kernel.py"] = r.kernel()
	out["reference.py"] = r.reference()
	out["case.py"] = r.casePy(s.Dtype)
	name := s.Program.Name(program.DType(s.Dtype))
	module := "fuseadvise_generic_" + s.Program.Key()
	names := []string{"README.md", "manifest.json"}
	for n := range out {
		names = append(names, n)
	}
	sort.Strings(names)
	shapes := [][]int64{s.Program.Dims}
	if g := s.Program.GEMM; g != nil { // as case.py's SHAPES: the main shape, x, w
		_, _, n, k := g.MNK()
		shapes = gemmShapes(g, g.X[:len(g.X)-1], n, k)
	}
	m := Manifest{
		Format: FormatVersion, Pattern: GenericPattern, Dtype: s.Dtype, TorchDtype: dtypes[s.Dtype],
		Shapes: shapes, Params: map[string]any{},
		Source:      ManifestSource{s.Source.Trace, s.Source.Site},
		EstSavingUs: s.EstSavingUs, EstFusedUs: s.EstFusedUs, EstBackwardSavingUs: s.EstBackwardSavingUs,
		Instances: s.Instances, GPUTimeUs: s.GPUTimeUs, Module: module, Files: names, Run: runCmds, Program: s.Program, Ops: s.Ops,
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("codegen: generic: manifest: %v", err)
	}
	out["manifest.json"] = append(b, '\n')
	out["README.md"] = genericReadme(s, name, module)
	return out, nil
}

// WriteGeneric renders s into the folder dir (atomically, as Write).
func WriteGeneric(dir string, s GenericSpec, force bool) error {
	files, err := RenderGeneric(s)
	if err != nil {
		return err
	}
	return writeFiles(dir, files, force)
}

// ---- the renderer ----

type renderer struct {
	p    *program.Program
	rank int
	red  *program.Op // the final reduction, nil for a pointwise program
	// epilogue: steps renders a GEMM's epilogue, input 0 (x0) the accumulator tile, not a load
	epilogue bool
}

func newRenderer(p *program.Program) *renderer {
	return &renderer{p: p, rank: len(p.Dims), red: p.Reduction()}
}

var tlDtypes = map[program.DType]string{program.FP32: "tl.float32", program.FP16: "tl.float16", program.BF16: "tl.bfloat16",
	program.I64: "tl.int64"}
var torchDtypes = map[program.DType]string{program.FP32: "torch.float32", program.FP16: "torch.float16",
	program.BF16: "torch.bfloat16", program.Bool: "torch.bool", program.I64: "torch.int64"}

// roundCall is the Triton expression that rounds the fp32 value expr to the 16-bit type d as
// eager stores it (kept in fp32): the helper of that type (_round_bf16, _round_fp16).
func roundCall(expr string, d program.DType) string {
	if d == program.BF16 {
		return "_round_bf16(" + expr + ")"
	}
	return "_round_fp16(" + expr + ")"
}

// pyInt writes a validated integral number (program: an int64 step's numbers and constants,
// integers within 2**53) as a Python int literal.
func pyInt(v float64) string {
	s := strconv.FormatInt(int64(v), 10)
	if v < 0 {
		return "(" + s + ")"
	}
	return s
}

// pyNum writes a validated number (finite or +-inf) as a Python expression.
func pyNum(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return `float("inf")`
	case math.IsInf(v, -1):
		return `float("-inf")`
	}
	s := pyFloat(v)
	if strings.HasPrefix(s, "-") {
		return "(" + s + ")"
	}
	return s
}

// expand fills a table template: {0}.. operands, {c0}.. constants, {dt} a dtype.
func expand(tmpl string, args, consts []string, dt string) string {
	var b strings.Builder
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] != '{' {
			b.WriteByte(tmpl[i])
			continue
		}
		j := strings.IndexByte(tmpl[i:], '}')
		key := tmpl[i+1 : i+j]
		switch {
		case key == "dt":
			b.WriteString(dt)
		case strings.HasPrefix(key, "c"):
			k, _ := strconv.Atoi(key[1:])
			b.WriteString(consts[k])
		default:
			k, _ := strconv.Atoi(key)
			b.WriteString(args[k])
		}
		i += j
	}
	return b.String()
}

// operands names a step's operands in Triton (inside) or eager (outside) code. Eager code
// writes a number as traced, but a comparison's, which both write as the number eager
// compares with, rounded to the type of the tensor beside it (program.DType.Round): eager at
// the traced types compares the same, and the reference upcast for the quack check (fp32
// for a 16-bit chain, fp64 for an fp32 one) decides as eager does where the tensor holds
// that number exactly (x < 0.1 on float16 x = 0.0999755859375, float16's 0.1: false in
// eager, true against the number as traced in fp32, where a kernel comparing with <= would
// then have matched the upcast chain). An int64 step's numbers
// are written as integers in both (program checked that they are). Inside, each operand is
// converted to the type the step computes in (computeType), as eager's type promotion does:
// an int64 value into a float step as eager casts it (to float32, then rounded to a 16-bit
// step's type: c10 converts an integer to half or bfloat16 through float), a number input as
// eager's wrapped scalar (to float32 only); a bool (0.0 / 1.0 inside) or a float (a cast's
// operand: truncated toward zero) into an int64 step as int64.
func (r *renderer) operands(s program.Step, triton bool) []string {
	op, _ := program.Lookup(s.Op)
	ct := r.computeType(s)
	out := make([]string, len(s.Args))
	for k, a := range s.Args {
		switch {
		case a.In != nil:
			out[k] = "x" + strconv.Itoa(*a.In)
		case a.Step != nil:
			out[k] = "v" + strconv.Itoa(*a.Step)
		case ct == program.I64 || !triton && (s.DType == program.I64 || a.Int):
			out[k] = pyInt(float64(*a.Num))
		case op.Compare:
			out[k] = pyNum(r.tensorDType(s).Round(float64(*a.Num)))
		default:
			out[k] = pyNum(float64(*a.Num))
		}
		if !triton || a.Num != nil {
			continue
		}
		d := r.p.ArgDType(a)
		cond := s.Op == program.Where && k == 0 || s.Op == program.MaskedFill && k == 1 // a bool tested != 0
		switch {
		case ct == program.I64 && d != program.I64 && !cond:
			out[k] = out[k] + ".to(tl.int64)"
		case ct != program.I64 && d == program.I64:
			out[k] = out[k] + ".to(tl.float32)"
			if (ct == program.FP16 || ct == program.BF16) && !(a.In != nil && r.p.Inputs[*a.In].Number) {
				out[k] = roundCall(out[k], ct)
			}
		}
	}
	return out
}

// computeType is the type a step computes in: its own dtype, but for a comparison the type
// eager compares in: int64 where no operand is a float tensor or a Python float and one is
// int64, else the promotion of its float tensors' types (fp16 with bf16 is fp32; FP32 where
// there are none: an int64 tensor and a Python float, bools as 0.0 / 1.0, a bool and a
// number).
func (r *renderer) computeType(s program.Step) program.DType {
	op, _ := program.Lookup(s.Op)
	if !op.Compare {
		return s.DType
	}
	var f program.DType
	hasInt, floatNum := false, false
	for _, a := range s.Args {
		switch d := r.p.ArgDType(a); {
		case a.Num != nil:
			floatNum = floatNum || !a.Int
		case d == program.I64:
			hasInt = true
		case d.IsFloat():
			switch {
			case f == "" || f == d:
				f = d
			default:
				f = program.FP32
			}
		}
	}
	switch {
	case f != "":
		return f
	case hasInt && !floatNum:
		return program.I64
	}
	return program.FP32
}

// tensorDType is the type of a step's first tensor operand (FP32 where it has none).
func (r *renderer) tensorDType(s program.Step) program.DType {
	for _, a := range s.Args {
		switch {
		case a.In != nil:
			return r.p.Inputs[*a.In].DType
		case a.Step != nil:
			return r.p.Steps[*a.Step].DType
		}
	}
	return program.FP32
}

// exact says whether a 16-bit step's value needs no rounding to its dtype: an op that selects
// or negates one of its values (relu, abs, neg, a clamp, where, masked_fill, a cast) when each
// of those values already is of the step's dtype (a load of that dtype, a step rounded to it,
// a number that type holds, a bool's 0 or 1), and a clamp's bounds are too (clamp's are
// written rounded, tritonConsts; hardtanh's as traced). Such a step's _round would give its
// value back: eight integer operations an element (the corpus' clamp chain at 4096x512 has
// 251 PTX instructions a thread with its three, 115 without any: probe_generic_ptx).
func (r *renderer) exact(s program.Step) bool {
	var values []int // the operands the result is one of
	switch s.Op {
	case program.Relu, program.Abs, program.Neg, program.Clamp, program.ClampMin, program.ClampMax, program.Cast:
		values = []int{0}
	case program.Hardtanh:
		for _, c := range s.Consts {
			if s.DType.Round(float64(c)) != float64(c) {
				return false
			}
		}
		values = []int{0}
	case program.Where:
		values = []int{1, 2}
	case program.MaskedFill:
		values = []int{0, 2}
	default:
		return false
	}
	for _, k := range values {
		a := s.Args[k]
		var d program.DType
		switch {
		case a.In != nil:
			d = r.p.Inputs[*a.In].DType
		case a.Step != nil:
			d = r.p.Steps[*a.Step].DType
		default:
			if s.DType.Round(float64(*a.Num)) != float64(*a.Num) {
				return false
			}
			continue
		}
		number := a.In != nil && r.p.Inputs[*a.In].Number
		if d == program.I64 && !number {
			continue // converted and rounded to the step's type as operands reads it
		}
		if d != s.DType && d != program.Bool {
			return false
		}
	}
	switch s.Op {
	case program.Clamp, program.ClampMin, program.ClampMax: // bounds rounded to the operand's dtype
		return r.tensorDType(s) == s.DType
	}
	return true
}

// tritonConsts are a step's constants in Triton code, in its forward expression or (deriv)
// its derivatives: as traced, but rounded to its input's type where eager rounds them
// (program.DType.Round): clamp's bounds, with which eager's clamp compares (its forward gives
// the same result either way; its backward's mask, x >= min, differs at x = the rounded
// bound), and pow's exponent in the forward (ATen's pow by a scalar: exp_scalar.to<scalar_t>,
// so bfloat16's x ** 1.3 is x ** 1.296875; its backward, exponent * grad * x ** (exponent - 1),
// multiplies by the exponent as given). Hardtanh's backward compares in fp32 with the bounds
// as given: not rounded.
func (r *renderer) tritonConsts(op *program.Op, s program.Step, deriv bool) []string {
	switch s.Op {
	case program.Pow:
		if deriv {
			break
		}
		fallthrough
	case program.Clamp, program.ClampMin, program.ClampMax:
		d := r.tensorDType(s)
		rs := s
		rs.Consts = make([]program.Num, len(s.Consts))
		for k, c := range s.Consts {
			rs.Consts[k] = program.Num(d.Round(float64(c)))
		}
		return constsOf(op, rs)
	}
	return constsOf(op, s)
}

func constsOf(op *program.Op, s program.Step) []string {
	out := make([]string, len(s.Consts))
	for k, c := range s.Consts {
		switch {
		case op.Consts[k] == program.ConstBool:
			out[k] = pyBool(c == 1)
		case s.DType == program.I64: // integral (program checked): alpha=1, not 1.0, on int64
			out[k] = pyInt(float64(c))
		default:
			out[k] = pyNum(float64(c))
		}
	}
	return out
}

// outKind is an output's shape: "full" (the main shape), "full_dropK" (the main shape without
// its K leading dims, which are 1: program.OutDrop), "row" or "row_keep" (one value a row,
// the last dim dropped or kept as 1).
func (r *renderer) outKind(o int) string {
	if k := slices.Index(r.p.Outputs, o); k >= 0 && k < len(r.p.OutDrop) && r.p.OutDrop[k] > 0 {
		return "full_drop" + strconv.Itoa(r.p.OutDrop[k]) // the main shape without its leading 1s
	}
	if r.red == nil || o != len(r.p.Steps)-1 || r.red.FullShape {
		return "full"
	}
	if r.p.Steps[o].Consts[0] == 1 {
		return "row_keep"
	}
	return "row"
}

func (r *renderer) inputName(i int) string {
	if r.p.Inputs[i].Keep { // a training dropout's keep mask, which the caller draws
		return "keep" + strconv.Itoa(i)
	}
	if r.p.Inputs[i].DType == program.Bool {
		return "mask" + strconv.Itoa(i)
	}
	return "x" + strconv.Itoa(i)
}

// keepP is the dropout probability of the step that reads keep mask input i.
func (r *renderer) keepP(i int) float64 {
	for _, s := range r.p.Steps {
		if s.Op == program.DropoutKeep && s.Args[1].In != nil && *s.Args[1].In == i {
			return float64(s.Consts[0])
		}
	}
	return 0
}

func (r *renderer) casePy(dtype string) []byte {
	var b bytes.Buffer
	b.WriteString("# Generated by fuseadvise codegen from validated numbers and enums. Do not edit.\n")
	b.WriteString("# The traced case of a generic chain (see docs/templates.md).\n\n")
	b.WriteString("PATTERN = " + pyStr(GenericPattern) + "\n")
	b.WriteString("DTYPE = " + pyStr(dtype) + "\n")
	g := r.p.GEMM
	if g != nil {
		_, _, n, k := g.MNK()
		var s []string
		for _, d := range gemmShapes(g, g.X[:len(g.X)-1], n, k) {
			s = append(s, pyInts(d))
		}
		b.WriteString("SHAPES = [" + strings.Join(s, ", ") + "]  # the main shape (the GEMM's output), x, w\n")
	} else {
		b.WriteString("SHAPES = [" + pyInts(r.p.Dims) + "]\n")
	}
	b.WriteString("PARAMS = {}\n")
	kind := "pointwise"
	switch {
	case g != nil:
		kind = "gemm"
	case r.red != nil:
		kind = "softmax" // the loosest row class: sums and softmaxes of long rows
	}
	b.WriteString("KIND = " + pyStr(kind) + "\n")
	b.WriteString("TOL_DTYPE = " + pyStr(string(r.tolDtype(dtype))) + "\n")
	var outTol []string
	for _, o := range r.p.Outputs {
		outTol = append(outTol, pyStr(string(r.outTolDtype(o))))
	}
	b.WriteString("OUT_TOL_DTYPES = [" + strings.Join(outTol, ", ") + "]  # per output: the least precise dtype of the steps it is computed from\n")
	if r.hasTerminalCast() {
		// a 16-bit copy no step reads (a GEMM's cast taken, program.Into) rounds that output
		// alone: its derivative is 1 whatever it rounds to, so the gradients keep the precision
		// of the steps the backward reads
		b.WriteString("GRAD_TOL_DTYPE = " + pyStr(string(r.gradTolDtype())) + "  # the gradients': the steps' but the 16-bit copies no step reads\n")
		var gradTol []string
		for _, o := range r.p.Outputs {
			gradTol = append(gradTol, pyStr(string(r.outGradTolDtype(o))))
		}
		b.WriteString("OUT_GRAD_TOL_DTYPES = [" + strings.Join(gradTol, ", ") + "]  # per output, for the gradient from it alone: a copy's is its source's\n")
	}
	var exact []string
	for _, o := range r.p.Outputs {
		exact = append(exact, pyBool(r.outEagerExact(o)))
	}
	b.WriteString("OUT_EAGER_EXACT = [" + strings.Join(exact, ", ") + "]  # per output: every step it is computed from rounds once as eager's (program.Code.EagerExact)\n")
	if gr, err := r.backward(); err != nil {
		b.WriteString("BACKWARD = False  # forward only: " + err.Error() + "\n")
	} else {
		b.WriteString("BACKWARD = True  # kernel.FusedFunction: the fused backward\n")
		var gi []string
		if r.p.GEMM != nil {
			for _, n := range gemmParams(r.p.GEMM) {
				gi = append(gi, pyStr(n))
			}
		}
		for i, x := range gr.Inputs {
			if x && !(i == 0 && r.p.GEMM != nil) {
				gi = append(gi, pyStr(r.inputName(i)))
			}
		}
		b.WriteString("GRAD_INPUTS = [" + strings.Join(gi, ", ") + "]  # the float inputs\n")
		nb, _ := r.p.BackwardBytes(gr)
		fmt.Fprintf(&b, "BWD_BYTES = %d  # the fused backward's fewest bytes at SHAPES (program.BackwardBytes)\n", nb)
	}
	b.WriteString("# name, dtype, one flag per trailing main dim (False: broadcast)\n")
	b.WriteString("INPUTS = [\n")
	for i, in := range r.p.Inputs {
		if i == 0 && g != nil {
			continue // the GEMM's output
		}
		if in.Number {
			kind := "number"
			if in.DType == program.I64 {
				kind = "number_int64" // a Python int
			}
			fmt.Fprintf(&b, "    (%s, %s, []),  # a number the trace does not record: the caller passes it\n", pyStr(r.inputName(i)), pyStr(kind))
			continue
		}
		if in.Keep {
			fmt.Fprintf(&b, "    # a training dropout's keep mask (p = %s): the caller draws it, True with probability 1 - p\n", pyNum(r.keepP(i)))
		}
		if in.Bias {
			b.WriteString("    # a GEMM's bias (the traced model added it in the GEMM): the caller runs the GEMM without it\n")
		}
		off := len(r.p.Dims) - len(in.Dims)
		var keep []string
		for j, d := range in.Dims {
			keep = append(keep, pyBool(d == r.p.Dims[off+j]))
		}
		fmt.Fprintf(&b, "    (%s, %s, [%s]),\n", pyStr(r.inputName(i)), pyStr(string(in.DType)), strings.Join(keep, ", "))
	}
	b.WriteString("]\n")
	b.WriteString("# name, dtype, shape: full (the main shape), row (one value a row), row_keep (the same, last dim 1)\n")
	b.WriteString("OUTPUTS = [\n")
	for _, o := range r.p.Outputs {
		fmt.Fprintf(&b, "    (%s, %s, %s),\n", pyStr("y"+strconv.Itoa(o)), pyStr(string(r.p.Steps[o].DType)), pyStr(r.outKind(o)))
	}
	b.WriteString("]\n")
	if cs := r.constants(); len(cs) > 0 {
		b.WriteString("# the program's finite numbers, which the verifier plants into the inputs\n")
		b.WriteString("CONSTANTS = [" + strings.Join(cs, ", ") + "]\n")
	}
	if k := r.p.BiasInput(); k >= 0 {
		b.WriteString("# a GEMM's bias and the GEMM's output it is added to: bench's eager adds them beforehand, as the\n" +
			"# traced GEMM's epilogue did (adapter.make_inputs: _epilogue)\n")
		fmt.Fprintf(&b, "EPILOGUE_BIAS = (%s, %s)\n", pyStr(r.inputName(k)), pyStr(r.inputName(*r.p.Steps[0].Args[0].In)))
	}
	if r.p.KeepNumel() > 0 {
		var kp []string
		for i, in := range r.p.Inputs {
			if in.Keep {
				kp = append(kp, pyStr(r.inputName(i))+": "+pyNum(r.keepP(i)))
			}
		}
		b.WriteString("# each training dropout's keep mask input and its p (the caller draws the mask)\n")
		b.WriteString("KEEP_P = {" + strings.Join(kp, ", ") + "}\n")
	}
	if g != nil {
		r.gemmCase(&b)
		b.WriteString("ADVERSARIAL = GEMM_ADVERSARIAL\n")
		return b.Bytes()
	}
	b.WriteString("ADVERSARIAL = [")
	for i, sh := range adversarialShapes(r.rank) {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("[" + pyInts(sh) + "]")
	}
	b.WriteString("]\n")
	return b.Bytes()
}

// constants are the program's finite numbers (operands and float constants) and its ops'
// kinks (program.Op.Kinks: hardswish's -3 and 3), each once, in the order the steps give
// them: the values at which a comparison, a clamp or a derivative decides, which the
// verifier's "planted" case writes into the inputs (as each input's type rounds them).
func (r *renderer) constants() []string {
	var out []string
	seen := map[float64]bool{}
	add := func(v float64) {
		if math.IsInf(v, 0) || seen[v] {
			return
		}
		seen[v] = true
		out = append(out, pyNum(v))
	}
	for _, s := range r.p.Steps {
		op, _ := program.Lookup(s.Op)
		for _, a := range s.Args {
			if a.Num != nil {
				add(float64(*a.Num))
			}
		}
		for k, c := range s.Consts {
			if op.Consts[k] == program.ConstFloat {
				add(float64(c))
			}
		}
		for _, v := range op.Kinks() {
			add(v)
		}
	}
	return out
}

// tolDtype is the least precise float dtype of the program's steps (bf16 before fp16 before
// fp32): the roundings the kernel and eager may place differently. Inputs do not count: a
// 16-bit input is exact in fp32.
func (r *renderer) tolDtype(main string) program.DType {
	best := program.FP32
	for _, s := range r.p.Steps {
		best = lessPrecise(best, s.DType)
	}
	return best
}

// terminalCast reports whether step i is a 16-bit copy of an fp32 step that no step reads
// (an output: a GEMM's autocast cast taken, program.Program.Into): it rounds that output and
// nothing the backward reads, its derivative 1.
func (r *renderer) terminalCast(i int) bool {
	s := r.p.Steps[i]
	if s.Op != program.Cast || s.DType != program.FP16 && s.DType != program.BF16 || s.Args[0].Step == nil ||
		r.p.Steps[*s.Args[0].Step].DType != program.FP32 {
		return false
	}
	for _, t := range r.p.Steps {
		for _, a := range t.Args {
			if a.Step != nil && *a.Step == i {
				return false
			}
		}
	}
	return true
}

func (r *renderer) hasTerminalCast() bool {
	for i := range r.p.Steps {
		if r.terminalCast(i) {
			return true
		}
	}
	return false
}

// gradTolDtype is tolDtype without the terminal casts: the gradients' tolerance.
func (r *renderer) gradTolDtype() program.DType {
	best := program.FP32
	for i, s := range r.p.Steps {
		if !r.terminalCast(i) {
			best = lessPrecise(best, s.DType)
		}
	}
	return best
}

// outGradTolDtype is outTolDtype for the gradient that comes from output o alone: a terminal
// cast's is its source step's.
func (r *renderer) outGradTolDtype(o int) program.DType {
	if r.terminalCast(o) {
		return r.outTolDtype(*r.p.Steps[o].Args[0].Step)
	}
	return r.outTolDtype(o)
}

// lessPrecise is the less precise of a float dtype and d (bf16 before fp16 before fp32); a
// non-float d leaves it.
func lessPrecise(best, d program.DType) program.DType {
	rank := map[program.DType]int{program.FP32: 0, program.FP16: 1, program.BF16: 2}
	if d.IsFloat() && rank[d] > rank[best] {
		return d
	}
	return best
}

// outTolDtype is tolDtype over the steps output step o is computed from (and a 16-bit GEMM
// head's rounding where it reads the GEMM's output): an output computed in fp32 alone is held
// to fp32's tolerance, whatever another output rounds to (table_fp32's hardsigmoid, beside a
// bf16 cast, had been held to bf16's 1e-2, so a 3.003 for its 3.0 passed). A step computed
// to eager's bits from the inputs (bitExact: a 16-bit product that eager and the kernel round
// alike) loosens nothing after it: the output's own dtype and the other steps' count (an fp32
// mean of such float16 values is held to fp32's, where float16's let a mean 0.1% off pass).
func (r *renderer) outTolDtype(o int) program.DType {
	best := program.FP32
	see := func(d program.DType) { best = lessPrecise(best, d) }
	seen := map[int]bool{}
	exact := r.bitExact()
	var walk func(i int)
	walk = func(i int) {
		if seen[i] {
			return
		}
		seen[i] = true
		if i != o && exact[i] {
			return // eager's bits, and so are its operands'
		}
		see(r.p.Steps[i].DType)
		for _, a := range r.p.Steps[i].Args {
			switch {
			case a.Step != nil:
				walk(*a.Step)
			case a.In != nil && *a.In == 0 && r.p.GEMM != nil:
				see(r.p.GEMM.DType)
			}
		}
	}
	walk(o)
	return best
}

// bitExact says, per step, whether its value is eager's to the bit: a BitExact op whose
// operands are inputs, numbers or such steps (a GEMM head's output is not: its rounding
// depends on the summation order).
func (r *renderer) bitExact() []bool {
	exact := make([]bool, len(r.p.Steps))
	for i, s := range r.p.Steps {
		exact[i] = s.Op.BitExact()
		for _, a := range s.Args {
			switch {
			case a.Step != nil:
				exact[i] = exact[i] && exact[*a.Step]
			case a.In != nil && *a.In == 0 && r.p.GEMM != nil:
				exact[i] = false
			}
		}
	}
	return exact
}

// outEagerExact reports whether every step output step o is computed from is one eager
// computes as the kernel does, rounded once (program.Code.EagerExact), with no GEMM head:
// its 16-bit values are then eager's but for a few elements (the verifier's eager_rounding).
func (r *renderer) outEagerExact(o int) bool {
	if r.p.GEMM != nil {
		return false
	}
	seen := map[int]bool{}
	var walk func(i int) bool
	walk = func(i int) bool {
		if seen[i] {
			return true
		}
		seen[i] = true
		if !r.p.Steps[i].Op.EagerExact() {
			return false
		}
		for _, a := range r.p.Steps[i].Args {
			if a.Step != nil && !walk(*a.Step) {
				return false
			}
		}
		return true
	}
	return walk(o)
}

// adversarialShapes are main shapes of rank r at interpreter size: ragged, all ones, primes,
// one past a block, and rows longer than a row kernel's widest tile (MAX_BLOCK_N, 4096).
func adversarialShapes(r int) [][]int64 {
	lasts := []int64{127, 1, 37, 1025, 4099}
	rows := []int64{3, 1, 31, 2, 2}
	var out [][]int64
	for i, last := range lasts {
		sh := make([]int64, r)
		for d := range sh {
			sh[d] = 1
		}
		sh[r-1] = last
		if r > 1 {
			sh[0] = rows[i]
		}
		if r > 2 && i != 1 && i != 4 {
			sh[1] = 2
		}
		out = append(out, sh)
	}
	return out
}

func pyInts(d []int64) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// ---- reference.py ----

func (r *renderer) reference() []byte {
	var b bytes.Buffer
	b.WriteString(`"""The eager PyTorch chain a generic kernel replaces, replayed op by op from its op program
(generated by fuseadvise from the op table's eager expressions and validated numbers)."""

import torch


`)
	var params []string
	for i := range r.p.Inputs {
		params = append(params, "x"+strconv.Itoa(i))
	}
	head := ""
	if r.p.GEMM != nil {
		var gemm string
		params, head, gemm = r.gemmReferenceHead()
		b.WriteString(gemm)
	}
	if r.sumsTerms() {
		b.WriteString("def reduce(op, x, *args, **kw):\n" +
			"    \"\"\"The chain's last-dim sum or mean as traced (chain's reduce=: the verifier's band around it,\n" +
			"    adapter.band_outputs).\"\"\"\n" +
			"    return op(x, *args, **kw)\n\n\n")
		params = append(params, "reduce=reduce")
	}
	r.chainDef(&b, "chain", params, head, false)
	if r.p.KeepNumel() > 0 || r.p.BiasInput() >= 0 {
		if r.p.BiasInput() >= 0 {
			b.WriteString(epilogueBiasPy)
		}
		switch {
		case r.p.BiasInput() < 0:
			b.WriteString("\n\n# The chain as the model ran it, each training dropout drawing its own mask (its keep mask\n" +
				"# argument unused): what bench times as eager and compiles, where chain applies the caller's.\n")
		case r.p.KeepNumel() == 0:
			b.WriteString("\n\n# The chain as the model ran it, the GEMM's bias added in that GEMM's epilogue (_epilogue_bias,\n" +
				"# given epilogue: the sum made beforehand): what bench times as eager and compiles, where chain\n" +
				"# adds the bias.\n")
		default:
			b.WriteString("\n\n# The chain as the model ran it, each training dropout drawing its own mask (its keep mask\n" +
				"# argument unused) and the GEMM's bias added in that GEMM's epilogue (_epilogue_bias, given\n" +
				"# epilogue: the sum made beforehand): what bench times as eager and compiles, where chain\n" +
				"# applies the caller's mask and adds the bias.\n")
		}
		traced := params
		if r.p.BiasInput() >= 0 {
			traced = append(slices.Clone(params), "epilogue=None")
		}
		r.chainDef(&b, "chain_traced", traced, head, true)
	}
	return b.Bytes()
}

// epilogueBiasPy is reference.py's _epilogue_bias, for a program that takes a GEMM's bias
// (program.Input.Bias): chain_traced adds it as the traced GEMM did, in its epilogue.
const epilogueBiasPy = `

class _EpilogueBias(torch.autograd.Function):
    """x + b as the traced GEMM added its bias, in its epilogue: the sum xb, made beforehand
    (adapter.make_inputs), handed on as the chain's given input, so the chain timed as traced
    runs no add of its own; the backward gives x the gradient and b its sum over the dims b
    broadcasts along, as the GEMM's backward sums its bias gradient."""

    @staticmethod
    def forward(ctx, x, b, xb):
        ctx.shape = b.shape
        return xb.view_as(xb)

    @staticmethod
    def backward(ctx, dy):
        return dy, dy.sum_to_size(ctx.shape), None


def _epilogue_bias(x, b, xb):
    """x + b as the traced GEMM's epilogue added it: xb (x + b made beforehand) handed on, or
    the add itself without one."""
    return x + b if xb is None else _EpilogueBias.apply(x, b, xb)
`

// chainDef writes reference.py's function name: the program's steps in eager PyTorch; traced,
// a dropout_keep step as the traced dropout, which draws its own mask.
func (r *renderer) chainDef(b *bytes.Buffer, name string, params []string, head string, traced bool) {
	b.WriteString("def " + name + "(" + strings.Join(params, ", ") + "):\n")
	b.WriteString(head)
	for i, s := range r.p.Steps {
		op, _ := program.Lookup(s.Op)
		args := r.operands(s, false)
		if r.autocastUp(s) {
			for k, a := range s.Args {
				if a.Num == nil && r.p.ArgDType(a).IsFloat() && !(a.In != nil && r.p.Inputs[*a.In].Number) {
					args[k] += ".to(torch.float32)"
				}
			}
		}
		e := expand(op.Torch, args, constsOf(op, s), torchDtypes[s.DType])
		if sumsTerms(op) {
			// torch.sum(v, ...) as reduce(torch.sum, v, ...): the verifier's hook
			fn, rest, _ := strings.Cut(e, "(")
			e = "reduce(" + fn + ", " + rest
		}
		if traced && s.Op == program.DropoutKeep {
			e = "torch.dropout(" + args[0] + ", " + pyNum(float64(s.Consts[0])) + ", True)"
		}
		if traced && i == 0 && r.p.BiasInput() >= 0 {
			e = "_epilogue_bias(" + args[0] + ", " + args[1] + ", epilogue)"
		}
		fmt.Fprintf(b, "    v%d = %s\n", i, e)
	}
	var outs []string
	rank := r.naturalRanks()
	for k, o := range r.p.Outputs {
		v := "v" + strconv.Itoa(o)
		want := len(r.p.Dims)
		if k < len(r.p.OutDrop) {
			want -= r.p.OutDrop[k]
		}
		if r.outKind(o) != "row" && r.outKind(o) != "row_keep" && rank[o] < want {
			// the traced chain read this value through a view that added leading 1s (which
			// the replay, op by op, does not see): its output has them
			v += "[" + strings.Repeat("None, ", want-rank[o]) + "...]"
		}
		outs = append(outs, v)
	}
	b.WriteString("    return (" + strings.Join(outs, ", ") + ",)\n")
}

// sumsTerms reports whether op sums its operand's terms (a last-dim sum or mean): its result
// may cancel to far less than its terms, and is then known to a few of the terms' units in
// any summation order, not the result's. reference.py calls it through the chain's reduce=
// hook, where the verifier puts that band (adapter.band_outputs).
func sumsTerms(op *program.Op) bool { return op.Reduce == "sum" || op.Reduce == "mean" }

// sumsTerms reports whether a step of the program sums its operand's terms.
func (r *renderer) sumsTerms() bool {
	for _, s := range r.p.Steps {
		if op, _ := program.Lookup(s.Op); sumsTerms(op) {
			return true
		}
	}
	return false
}

// autocastUp reports whether step s computes in fp32 from 16-bit tensors of one type, as
// autocast runs its fp32 ops (pow, exp, log, softmax, ...): the trace recorded an fp32 value
// where eager's promotion alone gives the operands' type, so the replay casts its float
// operands to fp32 first, as autocast does (the kernel computes every step in fp32 and
// rounds to the step's type: nothing there).
func (r *renderer) autocastUp(s program.Step) bool {
	op, _ := program.Lookup(s.Op)
	if s.DType != program.FP32 || s.Op == program.Cast || op.Compare || strings.Contains(op.Torch, "{dt}") {
		return false // (an op given its dtype, softmax's and mean's dtype=, casts itself)
	}
	var d program.DType
	for _, a := range s.Args {
		if a.Num != nil || a.In != nil && r.p.Inputs[*a.In].Number {
			continue
		}
		switch t := r.p.ArgDType(a); {
		case !t.IsFloat():
			return false
		case d == "":
			d = t
		case d != t:
			return false // mixed types: eager's promotion gives fp32 itself
		}
	}
	return d == program.FP16 || d == program.BF16
}

// naturalRanks is, per step, the rank eager's replay gives its value: the largest rank among
// its operands (inputs as traced, numbers 0, earlier steps theirs), which a view inside the
// traced chain may have raised by leading 1s (program.OutDrop counts from the main shape).
func (r *renderer) naturalRanks() []int {
	rank := make([]int, len(r.p.Steps))
	for i, s := range r.p.Steps {
		for _, a := range s.Args {
			switch {
			case a.In != nil:
				rank[i] = max(rank[i], len(r.p.Inputs[*a.In].Dims))
			case a.Step != nil:
				rank[i] = max(rank[i], rank[*a.Step])
			}
		}
	}
	return rank
}

// ---- kernel.py ----

func (r *renderer) kernel() []byte {
	var b bytes.Buffer
	codes := strings.Join(r.p.Codes(), " -> ")
	fmt.Fprintf(&b, `"""Fused generic chain: %s, in one Triton kernel.

Generated by fuseadvise from an op program: codes of its op table (program.Table: each op's
Triton expression) and validated numbers, nothing else from the trace. Every load is upcast to
fp32, every step's value rounded to its traced dtype (as eager stores it), every output cast
on store. Inputs broadcast to the main shape through their strides (a bias, a per-channel
tensor, a 0-dim scale: stride 0 where they broadcast), so any layout is read in place.
`, codes)
	if r.p.HasInt() {
		b.WriteString("int64 values stay int64 (loaded, computed and stored exactly, as eager's integer ops), and are\nconverted as eager promotes them where a float step or comparison reads them.\n")
	}
	if r.red == nil {
		b.WriteString("One program per BLOCK elements of the main shape (flat index; inputs dense in it read at the\nflat offset, the others through per-dim indices: _fwd_plan's magic numbers or % and //).\n")
	} else {
		fmt.Fprintf(&b, "One program per BLOCK_R rows of the last dim: the chain, then %s over each row in tiles of\nBLOCK_N (a pass per dependent statistic, the chain recomputed in each); short rows BLOCK_R to a\nprogram (_row_tile), a long row one.\n", r.red.Reduce)
	}
	grad, gerr := r.backward()
	b.WriteString("\nfused(*inputs, out=None) runs it; empty_outputs(*inputs) allocates its outputs.\n")
	if gerr == nil {
		b.WriteString(`Training: FusedFunction (fused_autograd(*inputs)) is fused() under autograd; its backward,
fused_backward, is one more kernel: it reloads the saved inputs, recomputes the forward values
in registers (rounded as the forward rounds them; no intermediate is saved), applies the op
table's derivatives in reverse over the steps in fp32 and reduces a broadcast input's gradient
in the same kernel, without atomics, into a small fp32 buffer of partial sums that one torch
sum finishes (per program for a bias, a per-position tensor or a 0-dim scale, per row and
column block for a per-channel or per-row one: _bwd_kinds); an input whose gradient is an
output's gradient exactly gets that tensor. Once differentiable: a double backward (create_graph)
raises where it would read the fused backward's gradients, which carry no graph.
`)
	} else {
		b.WriteString("Forward only: " + gerr.Error() + ".\n")
	}
	b.WriteString(`Host: a call's plan (the main shape, strides, grid, index width) is computed once per key (the
tensors' dtypes, shapes and strides; _PLANS), and the kernels launch through the shared
_launch (the compiled kernel cached per specialization, launched directly).
Interpreter-safe: no bf16 arithmetic; where a GPU takes PTX (_round) or libdevice (_tanh), the
interpreter takes builtins that give the same numbers (checked on the GPU: test_round_gpu.py).
"""

import functools
import os

import torch
`)
	if gerr == nil { // FusedFunction's (and GemmFunction's) backward
		b.WriteString("from torch.autograd.function import once_differentiable\n")
	}
	b.WriteString(`import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
`)
	fmt.Fprintf(&b, "RANK = %d\n", r.rank)
	var ind, outd []string
	for _, in := range r.p.Inputs {
		ind = append(ind, torchDtypes[in.DType])
	}
	var kinds []string
	for _, o := range r.p.Outputs {
		outd = append(outd, torchDtypes[r.p.Steps[o].DType])
		kinds = append(kinds, pyStr(r.outKind(o)))
	}
	fmt.Fprintf(&b, "IN_DTYPES = [%s]\n", strings.Join(ind, ", "))
	fmt.Fprintf(&b, "OUT_DTYPES = [%s]\n", strings.Join(outd, ", "))
	fmt.Fprintf(&b, "OUT_SHAPES = [%s]  # full: the main shape; row: one value a row (row_keep: last dim 1)\n", strings.Join(kinds, ", "))
	var deps []string
	for _, d := range r.outDeps() {
		t := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(d)), ", "), "[]")
		if len(d) == 1 {
			t += ","
		}
		deps = append(deps, "("+t+")")
	}
	fmt.Fprintf(&b, "OUT_DEPS = [%s]  # per output: the tensor inputs it is computed from (_main_shape)\n", strings.Join(deps, ", "))
	// an output may be exactly an input (fused(out=...) in place) where the kernel reads each
	// element before it writes it, in one program: the elementwise kernel; a row kernel's
	// passes re-read the row after an earlier pass may have written it, so none there
	var inPlace []string
	if r.red == nil {
		for i, in := range r.p.Inputs {
			if !in.Number {
				inPlace = append(inPlace, pyStr(fmt.Sprintf("input %d", i))+",")
			}
		}
	}
	fmt.Fprintf(&b, "IN_PLACE = (%s)  # the inputs an output of fused() may be exactly (in place)\n", strings.Join(inPlace, " "))
	b.WriteString(r.numbersBlock())
	b.WriteString("BLOCK = 1024  # elements a program of the elementwise kernel takes at most (_block)\n")
	if r.red == nil {
		b.WriteString("BLOCK_NUMEL = (2**11, 2**16) if INTERPRET else (2**17, 2**22)  # up to these, 256 and 512 (_block)\n")
	}
	b.WriteString("MAX_BLOCK_N = 4096\n")
	if r.red != nil {
		b.WriteString("ROW_TILE = 1024  # elements a row program's tile of short rows holds at most (BLOCK_R x BLOCK_N)\n")
		b.WriteString("# programs a row kernel keeps at least (_row_tile); the interpreter's small shapes take\n")
		b.WriteString("# several rows a program too, the last program's partly past the end\n")
		b.WriteString("ROW_PROGRAMS = 1 if INTERPRET else 264\n")
	}
	b.WriteString("\n")
	head := b.Len()
	var reached []bool
	if r.red == nil {
		r.pointwiseKernel(&b)
		if gerr == nil {
			reached = r.backwardKernel(&b, grad)
		}
	} else {
		r.rowKernel(&b)
	}
	b.WriteString(r.wrapper())
	if gerr == nil {
		b.WriteString("\n\n")
		b.WriteString(r.backwardWrapper(grad, reached))
	}
	if r.p.GEMM != nil {
		b.WriteString("\n\n")
		r.gemmKernel(&b)
		b.WriteString(r.gemmWrapper(gerr == nil))
	}
	// The preamble goes between the header and the kernels: the cast block and the helpers the
	// rendered code calls.
	body := r.numbers(append([]byte(nil), b.Bytes()[head:]...))
	b.Truncate(head)
	b.WriteString(preamble(string(body)))
	if r.p.GEMM != nil {
		b.WriteString(gemmPreamble)
	}
	b.Write(body)
	return b.Bytes()
}

// numbersLine marks a line of the host code that converts a program's number inputs
// (program.Input.Number): "#?numbers " and the line, written where the public functions take
// their inputs (fused, empty_outputs, FusedFunction.forward, gemm_fused, gemm_cublas,
// GemmFunction.forward). numbers keeps such lines, unmarked, for a program with number
// inputs and drops them for one without, so its code is what it was before numbers existed.
var numbersLine = regexp.MustCompile(`(?m)^( *)#\?numbers (.*\n)`)

// numbers returns the rendered code with its numbersLine marks resolved for the program.
func (r *renderer) numbers(code []byte) []byte {
	if len(r.p.Numbers()) == 0 {
		return numbersLine.ReplaceAll(code, nil)
	}
	return numbersLine.ReplaceAll(code, []byte("$1$2"))
}

// numbersBlock is kernel.py's NUMBERS and _numbers for a program with number inputs: the
// caller passes each such input as a Python number (or a 0-dim fp32 tensor), which the
// kernels read as a 0-dim fp32 tensor, kept per value and device.
func (r *renderer) numbersBlock() string {
	ns := r.p.Numbers()
	if len(ns) == 0 {
		return ""
	}
	var idx []string
	for _, i := range ns {
		idx = append(idx, strconv.Itoa(i)+",")
	}
	return "NUMBERS = (" + strings.Join(idx, " ") + ")  # the inputs that are numbers the trace does not record (x * 0.5, n - 1): pass the number\n" +
		`_NUMBER_TENSORS = {}
_NUMBER_TENSORS_MAX = 256


def _numbers(ts, first, device):
    """ts, the inputs from input first on, with each number input (NUMBERS) given as a Python
    number replaced by a 0-dim tensor on device holding it: float32 for a Python float (the
    value eager computes with, a float's float32), int64 for a Python int (IN_DTYPES says
    which), read by the kernels as any 0-dim input. The tensor is kept per value and device,
    so a call with numbers seen before makes none and copies nothing to the device (a dict
    lookup a number); one made while a CUDA graph captures is not kept (it belongs to the
    graph's memory)."""
    ts = list(ts)
    for i in NUMBERS:
        j = i - first
        try:
            v = ts[j]
        except IndexError:  # too few inputs: refused by the checks that follow
            break
        if type(v) is float and v != 0.0:  # the usual case: one lookup
            t = _NUMBER_TENSORS.get((v, device))
            if t is not None:
                ts[j] = t
                continue
        elif type(v) is int:
            t = _NUMBER_TENSORS.get(("int", v, device))
            if t is not None and IN_DTYPES[i] == torch.int64:
                ts[j] = t
                continue
        ts[j] = _number_tensor(i, v, device)
    return ts


def _number_tensor(i, v, device):
    """Input i's number v as a 0-dim tensor of its type (IN_DTYPES) on device, made and kept
    where new (v as it is where it is a tensor already, or there is no device: the checks that
    follow refuse what is wrong). An int64 input takes a Python int only: a float there would
    change what the model computes."""
    if isinstance(v, torch.Tensor) or device is None:
        return v
    import numbers  # the slow path only: a number not seen before (numpy's scalars are Reals too)

    if IN_DTYPES[i] == torch.int64:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"input {i}: want an int (a Python int) or a 0-dim torch.int64 tensor")
        v = int(v)
        key = ("int", v, device)
    else:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"input {i}: want a number (a Python float) or a 0-dim torch.float32 tensor")
        v = float(v)
        key = (v, device) if v != 0.0 else (v.hex(), device)  # -0.0 apart from 0.0
    t = _NUMBER_TENSORS.get(key)
    if t is None:
        t = torch.full((), v, dtype=IN_DTYPES[i], device=device)
        if not (t.is_cuda and torch.cuda.is_current_stream_capturing()):
            if len(_NUMBER_TENSORS) >= _NUMBER_TENSORS_MAX:
                _NUMBER_TENSORS.clear()
            _NUMBER_TENSORS[key] = t
    return t


`
}

// preamble is what a generic kernel carries before its kernels: the templates' shared cast
// block (templates/_common/shared.py, the one source of _cast, with its markers so the copy is
// recognisable; every kernel's float and bool outputs are stored through it), of the helpers below, those that code
// calls, directly or through another helper, in the helpers' order, the shared alias block
// (fused's out= checked against its inputs), the shared launch
// block (every kernel is launched through _launch: its compiled form cached per
// specialization and launched directly), and with a backward the shared sumparts block (its
// column sums added up and cast in one launch).
func preamble(code string) string {
	pre := ""
	if strings.Contains(code, "_cast(") { // not where every output is int64, stored as it is
		pre = sharedBlock("cast") + "\n\n\n"
	}
	pre += helpersFor(code) + sharedBlock("alias") + "\n\n\n" + sharedBlock("launch") + "\n\n\n"
	if strings.Contains(code, "_part_sums(") { // the backward's column sums, added up
		pre += sharedBlock("sumparts") + "\n\n\n"
	}
	return pre
}

// helper is one @triton.jit function of helpers: its name and its source, with any comment
// that heads it.
type helper struct{ name, src string }

// helperBlocks is helpers split into its functions, in order.
var helperBlocks = splitHelpers(helpers)

// splitHelpers splits src at its blank-line pairs into functions; a block that is only a
// comment heads the function after it.
func splitHelpers(src string) []helper {
	var out []helper
	lead := ""
	for _, blk := range strings.Split(strings.TrimRight(src, "\n"), "\n\n\n") {
		m := helperDef.FindStringSubmatch(blk)
		if m == nil {
			lead += blk + "\n\n\n"
			continue
		}
		out = append(out, helper{name: helperName(m), src: lead + blk + "\n\n\n"})
		lead = ""
	}
	if lead != "" {
		panic("codegen: the helpers end in a block with no function") // a build defect
	}
	return out
}

// helperDef finds a helper's name in its block: a function's, or a module constant's
// (_ROUND_PTX, which the rounding helpers of both types read); helperCall finds the names
// code calls or reads (a constant: capitals).
var (
	helperDef  = regexp.MustCompile(`(?m)^(?:def (_\w+)\(|(_[A-Z][A-Z0-9_]*) = )`)
	helperCall = regexp.MustCompile(`\b(_\w+)\(|\b(_[A-Z][A-Z0-9_]*)\b`)
)

// helperName is the name a helperDef or helperCall match gives.
func helperName(m []string) string {
	if m[1] != "" {
		return m[1]
	}
	return m[2]
}

// helpersFor returns the helpers code calls, with those they call in turn, in helpers' order.
func helpersFor(code string) string {
	need := map[string]bool{}
	for _, m := range helperCall.FindAllStringSubmatch(code, -1) {
		need[helperName(m)] = true
	}
	for grew := true; grew; { // until no needed helper calls one not yet needed
		grew = false
		for _, h := range helperBlocks {
			if !need[h.name] {
				continue
			}
			for _, m := range helperCall.FindAllStringSubmatch(h.src, -1) {
				if n := helperName(m); !need[n] {
					need[n], grew = true, true
				}
			}
		}
	}
	var b strings.Builder
	for _, h := range helperBlocks {
		if need[h.name] {
			b.WriteString(h.src)
		}
	}
	return b.String()
}

// gemmPreamble is what a kernel with a GEMM head carries besides: the templates' shared gemm
// block (the GEMM templates' tiles, tuned once per bucket of M, and their direct launches).
var gemmPreamble = sharedBlock("gemm") + "\n\n\n"

// sharedBlock returns the named block of the templates' shared helpers.
func sharedBlock(name string) string {
	src, err := templates.Read(templates.SharedSource)
	if err != nil {
		panic(err) // embedded: a missing file is a build defect
	}
	blocks, err := templates.SharedBlocks(string(src))
	if err != nil {
		panic(err)
	}
	b, ok := blocks[name]
	if !ok {
		panic("templates/" + templates.SharedSource + " has no block " + name)
	}
	return b
}

const helpers = `# _round_bf16 and _round_fp16 on an NVIDIA GPU: a conversion to the 16-bit type and back in
# PTX, two instructions where the bits take about ten (a Triton .to() there and back is folded
# away by the compiler); the interpreter and ROCm run no PTX and round on the bits
# (_round_bits_*: the same numbers for every fp32, templates/_generic/test_round_gpu.py). One
# function a type: a kernel carries the rounding of the types its steps round to, no other
_ROUND_PTX = tl.constexpr(not INTERPRET and torch.version.hip is None)


@triton.jit
def _round_bf16(y):
    """y rounded to bfloat16 (as eager stores a step's value), to nearest even, kept in fp32."""
    if _ROUND_PTX:
        return tl.inline_asm_elementwise(
            "{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $1, $1; and.b32 $0, t, 0xFFFF0000; }",
            "=f,f", [y], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return _round_bits_bf16(y)


@triton.jit
def _round_bits_bf16(y):
    """_round_bf16 on the bits."""
    bits = y.to(tl.uint32, bitcast=True)
    r = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).to(tl.float32, bitcast=True)
    return tl.where(y != y, y, r)


@triton.jit
def _round_fp16(y):
    """y rounded to float16 (as eager stores a step's value), to nearest even, kept in fp32."""
    if _ROUND_PTX:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h; }",
            "=f,f", [y], dtype=tl.float32, is_pure=True, pack=1)
    else:
        return _round_bits_fp16(y)


@triton.jit
def _round_bits_fp16(y):
    """_round_fp16 on the bits: the normal range on the bits, its subnormals on a grid of
    2**-24, inf from 65520 up."""
    bits = y.to(tl.uint32, bitcast=True)
    r = (((bits + 0xFFF + ((bits >> 13) & 1)) >> 13) << 13).to(tl.float32, bitcast=True)
    a = tl.abs(y)
    sub = ((a + 0.75) - 0.75).to(tl.uint32, bitcast=True) | (bits & 0x80000000)  # sign kept
    r = tl.where(a < 6.103515625e-05, sub.to(tl.float32, bitcast=True), r)
    r = tl.where(a >= 65520.0, y * float("inf"), r)
    return tl.where(y != y, y, r)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


# tanh on a GPU: libdevice's (Inductor's choice too), to a unit or two in the last place as
# eager's; the interpreter has no libdevice and takes _tanh_formula, which
# templates/_generic/test_host.py holds to 4 units and test_round_gpu.py compares on the GPU
from triton.language.extra import libdevice  # noqa: E402
_TANH_LIBDEVICE = tl.constexpr(not INTERPRET)


@triton.jit
def _tanh(x):
    """tanh as eager's: libdevice's on a GPU. Triton's exp and division there are approximate:
    with 2 / (1 + exp(-2x)) - 1, a 0-dim input's gradient through 1 - tanh**2, summed over 192
    elements, was 8e-7 off the fp64 chain on the H200, 11 times eager's error (2026-12-04)."""
    if _TANH_LIBDEVICE:
        return libdevice.tanh(x)
    else:
        return _tanh_formula(x)


@triton.jit
def _tanh_formula(x):
    """tanh to a unit or two in the last place where exp and division are exact (the
    interpreter's): (1 - e) / (1 + e) with e = exp(-2|x|), and near 0, where that loses x's
    digits (2 / (1 + exp(-2x)) - 1 is off by a unit of 1.0: tanh(1e-4) by 6e-4 of itself),
    the Taylor series to x**9 (below 1e-8 of tanh at |x| = 0.25)."""
    a = tl.abs(x)
    e = tl.exp(-2.0 * a)
    x2 = x * x
    small = a * (1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * (-0.05396825396825397
                                                                                     + x2 * 0.021869488536155203))))
    t = tl.where(a < 0.25, small, (1.0 - e) / (1.0 + e))
    return tl.where(x < 0, -t, t)


@triton.jit
def _softplus(x, beta, threshold):
    return tl.where(x * beta > threshold, x, tl.log(1.0 + tl.exp(x * beta)) / beta)


@triton.jit
def _gelu_erf(x):
    return 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))


@triton.jit
def _gelu_tanh(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@triton.jit
def _clamp(x, lo, hi):
    return tl.where(x != x, x, tl.minimum(tl.maximum(x, lo), hi))


@triton.jit
def _clamp_min(x, lo):
    return tl.where(x != x, x, tl.maximum(x, lo))


@triton.jit
def _clamp_max(x, hi):
    return tl.where(x != x, x, tl.minimum(x, hi))


@triton.jit
def _pow(x, c: tl.constexpr):
    """x ** c for a constant c, as ATen's pow by a scalar: exact products for small integer
    exponents, else exp2/log2 with the sign of an odd integer power and NaN for a negative
    finite base."""
    if c == 0.0:
        y = tl.full(x.shape, 1.0, tl.float32)  # NaN ** 0 and inf ** 0 are 1
    elif c == 1.0:
        y = x
    elif c == 2.0:
        y = x * x
    elif c == 3.0:
        y = x * x * x
    elif c == 0.5:
        y = tl.sqrt(x)
    elif c == -1.0:
        y = 1.0 / x
    elif c == -2.0:
        y = 1.0 / (x * x)
    else:
        a = tl.exp2(c * tl.log2(tl.abs(x)))
        if c == (c // 1.0):
            if (c % 2.0) == 1.0:
                a = tl.where(x < 0.0, -a, a)
            y = a
        else:
            y = tl.where((x < 0.0) & (x != float("-inf")), float("nan"), a)  # (-inf) ** c: inf or 0
    return y


# derivatives the op table's Deriv entries call (the fused backward)


@triton.jit
def _dpow(x, c: tl.constexpr):
    """d/dx x ** c as ATen's pow_backward: 0 everywhere for c == 0, else c * x ** (c - 1)."""
    if c == 0.0:
        d = tl.full(x.shape, 0.0, tl.float32)
    else:
        d = c * _pow(x, c - 1.0)
    return d


@triton.jit
def _dgelu_tanh(x):
    """d/dx of the tanh GELU, as ATen's gelu_backward writes it."""
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = _tanh(inner)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)


@triton.jit
def _live(term, live: tl.constexpr):
    """A backward term where some output whose gradient reaches it has one (live: DYMASK's
    bits of those outputs), else zeros: an output no loss reaches adds nothing, as in eager,
    which never visits its branch (its zero gradient times an infinite derivative, log's at 0,
    would be NaN)."""
    if live:
        return term
    else:
        return tl.zeros_like(term)


@triton.jit
def _dmish(x):
    """d/dx of mish, as ATen's mish_backward writes it."""
    t = _tanh(_softplus(x, 1.0, 20.0))
    return t + x * _sigmoid(x) * (1.0 - t * t)


`

// kernelArgs is the kernel's parameter list up to the constexprs.
func (r *renderer) kernelArgs(first string) string {
	var a []string
	for i := range r.p.Inputs {
		a = append(a, "in"+strconv.Itoa(i))
	}
	for k := range r.p.Outputs {
		a = append(a, "out"+strconv.Itoa(k))
	}
	a = append(a, first)
	for d := 0; d < r.rank; d++ {
		a = append(a, "D"+strconv.Itoa(d))
	}
	for i := range r.p.Inputs {
		for d := 0; d < r.rank; d++ {
			a = append(a, fmt.Sprintf("s%d_%d", i, d))
		}
	}
	return strings.Join(a, ", ")
}

// steps writes the loads and the elementwise steps (all but a final reduction) at indent,
// with offs(i) the element offset expression of input i and mask the tile's mask. forward:
// the kernel stores the outputs and nothing else reads the steps' values (a backward kernel's
// derivatives read them, rounded as eager stores them).
func (r *renderer) steps(b *bytes.Buffer, indent string, offs func(i int) string, forward bool) {
	r.stepsOf(b, indent, offs, forward, nil, nil)
}

// stepsOf writes steps as steps does, but only the inputs and steps that needIn and needStep
// mark (nil: all of them).
func (r *renderer) stepsOf(b *bytes.Buffer, indent string, offs func(i int) string, forward bool, needIn, needStep []bool) {
	for i := range r.p.Inputs {
		if i == 0 && r.epilogue || needIn != nil && !needIn[i] {
			continue
		}
		up := ".to(tl.float32)" // every float (and bool: 0.0 / 1.0) load upcast; int64 kept exact
		if r.p.Inputs[i].DType == program.I64 {
			up = ""
		}
		if r.p.Inputs[i].Number { // one value: one load, no index math (only an arithmetic op's operand 1)
			fmt.Fprintf(b, "%sx%d = tl.load(in%d)%s\n", indent, i, i, up)
			continue
		}
		fmt.Fprintf(b, "%sx%d = tl.load(in%d + %s, mask=mask, other=0)%s\n", indent, i, i, offs(i), up)
	}
	for i, s := range r.p.Steps {
		op, _ := program.Lookup(s.Op)
		if op.Reduce != "" {
			break
		}
		if needStep != nil && !needStep[i] {
			continue
		}
		e := expand(op.Triton, r.operands(s, true), r.tritonConsts(op, s, false), "")
		fmt.Fprintf(b, "%sv%d = %s\n", indent, i, e)
		if (s.DType == program.FP16 || s.DType == program.BF16) && !r.exact(s) && !(forward && r.onlyStored(i)) {
			fmt.Fprintf(b, "%sv%d = %s\n", indent, i, roundCall("v"+strconv.Itoa(i), s.DType))
		}
	}
}

// onlyStored says whether step i's value goes only to its output's store, which rounds it
// to the step's dtype (_cast: to nearest even, as _round does, subnormals and overflow
// included): no later step reads it, so its own _round would round it twice.
func (r *renderer) onlyStored(i int) bool {
	for _, s := range r.p.Steps[i+1:] {
		for _, a := range s.Args {
			if a.Step != nil && *a.Step == i {
				return false
			}
		}
	}
	return true
}

// store writes output k (step o) at offs.
func (r *renderer) store(b *bytes.Buffer, indent string, k, o int, val, offs, mask string) {
	d := r.p.Steps[o].DType
	switch d {
	case program.Bool:
		fmt.Fprintf(b, "%stl.store(out%d + %s, %s != 0.0, mask=%s)\n", indent, k, offs, val, mask)
		return
	case program.I64:
		fmt.Fprintf(b, "%stl.store(out%d + %s, %s, mask=%s)\n", indent, k, offs, val, mask)
		return
	}
	fmt.Fprintf(b, "%stl.store(out%d + %s, _cast(%s, %s), mask=%s)\n", indent, k, offs, val, tlDtypes[d], mask)
}

func (r *renderer) pointwiseKernel(b *bytes.Buffer) {
	b.WriteString("@triton.jit\n")
	var ms []string // the magic numbers of the divided dims' sizes (_magic): multipliers, then shifts
	for _, x := range []string{"M", "S"} {
		for d := 1; d < r.rank; d++ {
			ms = append(ms, x+strconv.Itoa(d))
		}
	}
	args := r.kernelArgs("NUMEL")
	if len(ms) > 0 {
		args += ", " + strings.Join(ms, ", ")
	}
	var dense []string
	for i := range r.p.Inputs {
		dense = append(dense, fmt.Sprintf("DENSE%d: tl.constexpr", i))
	}
	fmt.Fprintf(b, "def _fused_kernel(%s, BLOCK: tl.constexpr, IDX64: tl.constexpr, INNER16: tl.constexpr, LEAD: tl.constexpr, %s):\n",
		args, strings.Join(dense, ", "))
	b.WriteString("    pid = tl.program_id(0)\n")
	b.WriteString("    if IDX64:  # an element or input offset reaches 2**31: index math in 64 bits\n")
	b.WriteString("        pid = pid.to(tl.int64)\n")
	b.WriteString("    offs = pid * BLOCK + tl.arange(0, BLOCK)\n")
	b.WriteString("    mask = offs < NUMEL\n")
	b.WriteString("    r = offs\n")
	if r.rank > 1 {
		// % and // by the sizes in 64 bits, and in 32 where the innermost size is a multiple of
		// 16 (INNER16): Triton's axis analysis reads r % D and r // D with such a D as runs of
		// 16 contiguous (constant) values, so the loads of inputs read through strides stay
		// vector loads (a multiply-high hides that); else the host's magic numbers for every
		// size (_magic), where a division by a runtime size takes some twenty instructions
		// a dim with only 1s outside it (LEAD of the dims are 1s) is what is left of r: no
		// division by it
		b.WriteString("    if IDX64 or INNER16:\n")
		for d := r.rank - 1; d > 0; d-- {
			fmt.Fprintf(b, "        if LEAD >= %d:\n            i%d = r\n            r = r * 0\n        else:\n", d, d)
			fmt.Fprintf(b, "            i%d = r %% D%d\n            r = r // D%d\n", d, d, d)
		}
		b.WriteString("    else:  # r // D as a multiply-high and a shift by the host's magic numbers (_magic): no division\n")
		for d := r.rank - 1; d > 0; d-- {
			fmt.Fprintf(b, "        if LEAD >= %d:\n            i%d = r\n            r = r * 0\n        else:\n", d, d)
			fmt.Fprintf(b, "            q = tl.where(D%d == 1, r, (tl.umulhi(r.to(tl.uint32), M%d.to(tl.uint32)) >> S%d).to(tl.int32))\n", d, d, d)
			fmt.Fprintf(b, "            i%d = r - q * D%d\n            r = q\n", d, d)
		}
	}
	b.WriteString("    i0 = r\n")
	r.steps(b, "    ", func(i int) string {
		var t []string
		for d := 0; d < r.rank; d++ {
			t = append(t, fmt.Sprintf("i%d * s%d_%d", d, i, d))
		}
		return fmt.Sprintf("(offs if DENSE%d else %s)", i, strings.Join(t, " + "))
	}, true)
	for k, o := range r.p.Outputs {
		r.store(b, "    ", k, o, "v"+strconv.Itoa(o), "offs", "mask")
	}
	b.WriteString("\n\n")
}

func (r *renderer) rowKernel(b *bytes.Buffer) {
	last := len(r.p.Steps) - 1
	v := "v" + strconv.Itoa(*r.p.Steps[last].Args[0].Step) // the reduced value
	b.WriteString("@triton.jit\n")
	fmt.Fprintf(b, "def _fused_kernel(%s, BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, ONE_TILE: tl.constexpr, EVEN: tl.constexpr):\n", r.kernelArgs("R, N"))
	b.WriteString("    row = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)  # this program's rows\n")
	b.WriteString("    if EVEN:  # every program's rows and columns in range: no masks (loads unmasked)\n")
	b.WriteString("        row_ok = tl.full([BLOCK_R], 1, tl.int1)\n")
	b.WriteString("    else:\n")
	b.WriteString("        row_ok = row < R\n")
	b.WriteString("    r = row\n")
	for d := r.rank - 2; d > 0; d-- {
		fmt.Fprintf(b, "    i%d = r %% D%d\n    r = r // D%d\n", d, d, d)
	}
	if r.rank > 1 {
		b.WriteString("    i0 = r\n")
	}
	for i := range r.p.Inputs {
		t := []string{"0"}
		for d := 0; d < r.rank-1; d++ {
			t = append(t, fmt.Sprintf("i%d * s%d_%d", d, i, d))
		}
		fmt.Fprintf(b, "    base%d = (%s)[:, None]\n", i, strings.Join(t, " + "))
	}
	b.WriteString("    cols = tl.arange(0, BLOCK_N)[None, :]\n")
	body := func(T, B string, once bool) {
		offs := func(i int) string { return fmt.Sprintf("(base%d + c * s%d_%d)", i, i, r.rank-1) }
		// pass opens a loop over the row's tiles with the chain computed in it; with once (the
		// row is one tile) the chain is computed the first time only, and its values kept
		computed := false
		pass := func() {
			if once {
				if !computed {
					b.WriteString(T + "c = cols\n")
					b.WriteString(T + "if EVEN:\n")
					b.WriteString(T + "    mask = tl.full([BLOCK_R, BLOCK_N], 1, tl.int1)\n")
					b.WriteString(T + "else:\n")
					b.WriteString(T + "    mask = row_ok[:, None] & (c < N)\n")
					r.steps(b, T, offs, true)
				}
				computed = true
				return
			}
			// a while loop: Triton 3.6's interpreter cannot range() over a runtime int
			b.WriteString(T + "start = 0\n")
			b.WriteString(T + "while start < N:\n")
			b.WriteString(B + "c = start + cols\n")
			b.WriteString(B + "mask = row_ok[:, None] & (c < N)\n")
			b.WriteString(B + "start += BLOCK_N\n")
			r.steps(b, B, offs, true)
		}
		stores := func() { // the full-shape outputs but the last step, in the last pass
			for k, o := range r.p.Outputs {
				if o != last {
					r.store(b, B, k, o, "v"+strconv.Itoa(o), "row[:, None] * N + c", "mask")
				}
			}
		}
		final := len(r.p.Outputs) - 1
		dt := tlDtypes[r.p.Steps[last].DType]
		switch r.red.Reduce {
		case "sum", "mean":
			b.WriteString(T + "acc = tl.zeros([BLOCK_R, BLOCK_N], tl.float32)\n")
			pass()
			stores()
			fmt.Fprintf(b, B+"acc += tl.where(mask, %s, 0.0)\n", v)
			b.WriteString(T + "res = tl.sum(acc, axis=1)\n")
			if r.red.Reduce == "mean" {
				b.WriteString(T + "res = res / N\n")
			}
			fmt.Fprintf(b, T+"tl.store(out%d + row, _cast(res, %s), mask=row_ok)\n", final, dt)
		case "max", "min":
			f, inf := "maximum", `float("-inf")`
			if r.red.Reduce == "min" {
				f, inf = "minimum", `float("inf")`
			}
			fmt.Fprintf(b, T+"acc = tl.full([BLOCK_R, BLOCK_N], %s, tl.float32)\n", inf)
			b.WriteString(T + "nans = tl.zeros([BLOCK_R, BLOCK_N], tl.float32)\n")
			pass()
			stores()
			fmt.Fprintf(b, B+"acc = tl.%s(acc, tl.where(mask, %s, %s))\n", f, v, inf)
			fmt.Fprintf(b, B+"nans += tl.where(mask & (%s != %s), 1.0, 0.0)\n", v, v)
			fmt.Fprintf(b, T+"res = tl.%s(acc, axis=1)\n", map[string]string{"maximum": "max", "minimum": "min"}[f])
			b.WriteString(T + "res = tl.where(tl.sum(nans, axis=1) > 0.0, float(\"nan\"), res)\n")
			fmt.Fprintf(b, T+"tl.store(out%d + row, _cast(res, %s), mask=row_ok)\n", final, dt)
		case "logsumexp", "softmax", "log_softmax":
			b.WriteString(T + "acc = tl.full([BLOCK_R, BLOCK_N], float(\"-inf\"), tl.float32)\n")
			pass()
			if r.red.Reduce == "logsumexp" {
				stores()
			}
			fmt.Fprintf(b, B+"acc = tl.maximum(acc, tl.where(mask, %s, float(\"-inf\")))\n", v)
			b.WriteString(T + "m = tl.max(acc, axis=1)\n")
			if r.red.Reduce == "logsumexp" {
				b.WriteString(T + "m = tl.where(tl.abs(m) == float(\"inf\"), 0.0, m)\n")
			}
			b.WriteString(T + "acc = tl.zeros([BLOCK_R, BLOCK_N], tl.float32)\n")
			pass()
			fmt.Fprintf(b, B+"acc += tl.where(mask, tl.exp(%s - m[:, None]), 0.0)\n", v)
			b.WriteString(T + "s = tl.sum(acc, axis=1)\n")
			if r.red.Reduce == "logsumexp" {
				fmt.Fprintf(b, T+"tl.store(out%d + row, _cast(tl.log(s) + m, %s), mask=row_ok)\n", final, dt)
				break
			}
			b.WriteString(T + "log_s = tl.log(s)\n")
			pass()
			stores()
			if r.red.Reduce == "softmax" {
				fmt.Fprintf(b, B+"y = tl.exp(%s - m[:, None]) / s[:, None]\n", v)
			} else {
				fmt.Fprintf(b, B+"y = %s - m[:, None] - log_s[:, None]\n", v)
			}
			fmt.Fprintf(b, B+"tl.store(out%d + row[:, None] * N + c, _cast(y, %s), mask=mask)\n", final, dt)
		}
	}
	b.WriteString("    if ONE_TILE:  # the row is one tile: the chain computed once, its values kept\n")
	body("        ", "        ", true)
	b.WriteString("    else:\n")
	body("        ", "            ", false)
	b.WriteString("\n\n")
}

// outDeps reports, per output, the tensor inputs (not numbers) its value is computed from,
// in order.
func (r *renderer) outDeps() [][]int {
	var out [][]int
	for _, o := range r.p.Outputs {
		in := make([]bool, len(r.p.Inputs))
		step := make([]bool, len(r.p.Steps))
		step[o] = true
		for j := o; j >= 0; j-- {
			if !step[j] {
				continue
			}
			for _, a := range r.p.Steps[j].Args {
				switch {
				case a.In != nil:
					in[*a.In] = true
				case a.Step != nil:
					step[*a.Step] = true
				}
			}
		}
		d := []int{}
		for i, x := range in {
			if x && !r.p.Inputs[i].Number {
				d = append(d, i)
			}
		}
		out = append(out, d)
	}
	return out
}

func (r *renderer) wrapper() string {
	var b strings.Builder
	b.WriteString(`def _main_shape(inputs):
    """The shape the inputs broadcast to, padded to RANK. Refuses inputs whose broadcast would
    give an output another shape in eager (an output computed from inputs that all broadcast
    along a dim: eager's is smaller there, where this kernel writes every output at this shape)."""
    if len(inputs) != len(IN_DTYPES):
        raise TypeError(f"fused() takes {len(IN_DTYPES)} tensors, got {len(inputs)}")
    for i, (t, dt) in enumerate(zip(inputs, IN_DTYPES)):
        if not isinstance(t, torch.Tensor) or t.dtype != dt:
            raise TypeError(f"input {i}: want a {dt} tensor")
    shape = _broadcast_shape(inputs)
    if len(shape) > RANK:
        raise ValueError(f"inputs broadcast to rank {len(shape)}, the kernel takes rank {RANK}")
    shape = [1] * (RANK - len(shape)) + shape
    for k, deps in enumerate(OUT_DEPS):
        own = _broadcast_shape([inputs[i] for i in deps]) if deps else shape
        if [1] * (RANK - len(own)) + own != shape:
            raise ValueError(f"output {k} is computed from inputs {list(deps)} alone, which broadcast to "
                             f"{own}, not {shape}: eager's would be of that shape, this kernel writes it "
                             f"at {shape} (pass them expanded to it)")
    return shape


def _broadcast_shape(inputs):
    """The shape the inputs broadcast to (right-aligned, each dim equal or 1), as
    torch.broadcast_shapes gives it without its ~80 us of host time per call."""
    shape = [1] * max(t.dim() for t in inputs)
    for t in inputs:
        off = len(shape) - t.dim()
        for i, d in enumerate(t.shape):
            c = shape[off + i]
            if d != c:
                if c != 1 and d != 1:
                    raise ValueError(f"inputs do not broadcast: {[list(x.shape) for x in inputs]}")
                if c == 1:
                    shape[off + i] = d
    return shape


def _out_shape(shape, kind):
    if kind == "full":
        return list(shape)
    if kind.startswith("full_drop"):  # a value the chain read with more dims than it leaves with
        k = int(kind[9:])
        if any(d != 1 for d in shape[:k]):
            raise ValueError(f"inputs broadcast to {list(shape)}: an output leaves without its {k} leading dims, "
                             "which must be 1 (as traced)")
        return list(shape[k:])
    return list(shape[:-1]) + ([1] if kind == "row_keep" else [])


# The host's plans, per call key (_key): what a call computes from its tensors' dtypes, shapes,
# strides (and the backward's device and needs) alone, computed on a key's first call; a call
# with a known key looks its plan up, allocates and launches. Cleared when full (a workload
# whose shapes never repeat pays the planning on every call, as without the cache).
_PLANS = {}
_PLANS_MAX = 256


def _key(ts):
    """Per tensor its dtype, shape and strides (None for a None), or None when one is not a
    tensor (its call is planned anew, and the plan's checks say what is wrong)."""
    try:
        return tuple([None if t is None else (t.dtype, t.shape, t.stride()) for t in ts])
    except (AttributeError, TypeError, RuntimeError):  # RuntimeError: a sparse tensor's strides
        return None


def _remember(key, plan):
    if all(k is not None for k in key):
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _fwd_planned(inputs):
    """fused()'s plan for these inputs (_fwd_plan), looked up by their key."""
    key = ("fwd", _key(inputs))
    return _PLANS.get(key) or _remember(key, _fwd_plan(inputs))


def empty_outputs(*inputs):
    """The outputs of fused(*inputs), allocated (contiguous)."""
    #?numbers inputs = _numbers(inputs, 0, getattr(inputs[0], "device", None))
    dev = inputs[0].device
    return [torch.empty(s, dtype=dt, device=dev) for s, dt in zip(_fwd_planned(inputs)[0], OUT_DTYPES)]


def _check_out(fn, out, shapes):
    """Refuses an out= that is not one contiguous tensor of each output's shape and dtype."""
    if len(out) != len(OUT_DTYPES):
        raise ValueError(f"{fn}: out: want {len(OUT_DTYPES)} tensors, got {len(out)}")
    for o, dt, s in zip(out, OUT_DTYPES, shapes):
        if not isinstance(o, torch.Tensor) or o.dtype != dt or list(o.shape) != s or not o.is_contiguous():
            raise ValueError(f"{fn}: out: want contiguous tensors of the outputs' shapes and dtypes")


@_on_their_device
def fused(*inputs, out=None):
    """The chain on inputs (broadcast to one main shape), as one kernel: a tuple of its outputs.
    out: a list of contiguous tensors of empty_outputs' shapes and dtypes to write instead; one
    may be exactly an input IN_PLACE allows (each element read before it is written, in one
    program), and no other may share memory with an input or another output."""
    #?numbers inputs = _numbers(inputs, 0, getattr(inputs[0], "device", None))
    out_shapes, launch = _fwd_planned(inputs)
    if out is None:
        dev = inputs[0].device
        out = [torch.empty(s, dtype=dt, device=dev) for s, dt in zip(out_shapes, OUT_DTYPES)]
    else:
        _check_out("fused", out, out_shapes)
        _check_alias("fused", [(f"out[{k}]", o) for k, o in enumerate(out)],
                     [(f"input {i}", t) for i, t in enumerate(inputs)], IN_PLACE)
    return _fused_run(launch, inputs, out)


def _fused_run(launch, inputs, out):
    """fused()'s launch (the plan's _Planned; None for an empty main shape) into out (checked,
    or allocated by the caller)."""
    if launch is not None:
        # the inputs themselves, read through the strides of their broadcast views (same data)
        launch.launch((*inputs, *out))
    return tuple(out)


def _fwd_plan(inputs):
    """fused()'s plan for inputs of these dtypes, shapes and strides (checked here): the
    outputs' shapes and the launch (a _Planned: grid, the arguments after the tensors, the
    constexprs, num_warps; None for an empty main shape)."""
    shape = _main_shape(inputs)
    out_shapes = [_out_shape(shape, k) for k in OUT_SHAPES]
    numel = 1
    for d in shape:
        numel *= d
    if numel == 0:
        return out_shapes, None
    views = [torch.broadcast_to(t, shape) for t in inputs]
`)
	if r.red == nil {
		b.WriteString(`    dims, strides = _coalesce(shape, [v.stride() for v in views])
    block = _block(numel)
    idx64 = numel >= 2**31 - block or any(_max_offset(dims, st) >= 2**31 for st in strides)
    magic = [_magic(d) for d in dims[1:]]
    args = (numel, *dims, *[x for st in strides for x in st], *[m for m, _ in magic], *[s for _, s in magic])
    flat = [0] * RANK  # the strides of a tensor dense in the main shape
    acc = 1
    for d in reversed(range(RANK)):
        flat[d] = acc
        acc *= dims[d]
    # LEAD: how many of the (padded) dims lead with size 1; the first dim past them is what
    # is left of an element's index after the inner divisions (one division fewer)
    lead = next((d for d, n in enumerate(dims) if n > 1), RANK - 1)
    consts = {"BLOCK": block, "IDX64": idx64, "INNER16": dims[-1] % 16 == 0, "LEAD": lead}
    for i, st in enumerate(strides):  # dense: read at the flat offset (vector loads, no index math)
        consts[f"DENSE{i}"] = all(s == f for s, f, n in zip(st, flat, dims) if n > 1)
    return out_shapes, _Planned(_fused_kernel, (-(-numel // block),), args, 4, 3, fp_fusion=False, **consts)


def _block(numel):
    """Elements a program of the elementwise kernel takes: BLOCK (two 16-byte loads a thread and
    operand with 4 warps) from 4M elements on, 512 from 128K, else 256: below 4M elements
    BLOCK a program leaves too few programs to keep loads in flight on every SM
    (bench/experiments/probe_generic_small.py on the H200: 5K-64K elements 1.6-2.0 -> 1.2-1.6
    us with 256, at torch.compile's time; 0.5M-2.4M 2.5-4.6 -> 2.2-4.2 with 512). The
    interpreter's thresholds are 64x lower (BLOCK_NUMEL): its small shapes run all three."""
    if numel <= BLOCK_NUMEL[0]:
        return 256
    if numel <= BLOCK_NUMEL[1]:
        return 512
    return BLOCK


def _magic(d):
    """(multiplier, shift) such that n // d == umulhi(n, multiplier) >> shift for every
    0 <= n < 2**31 (Granlund and Montgomery's round-up method, as CUTLASS's FastDivmod): the
    forward's 32-bit index math divides by the sizes this way, a multiply-high and a shift
    where a division by a runtime int takes some twenty instructions. (0, 0) for d = 1, which
    the kernel does not divide by."""
    if d == 1:
        return 0, 0
    p = 31 + (d - 1).bit_length()  # 31 + ceil(log2(d))
    return ((1 << p) + d - 1) // d, p - 32
`)
	} else {
		b.WriteString(`    n = shape[-1]
    dims, strides = _coalesce(shape[:-1], [v.stride()[:-1] for v in views])
    dims = dims[1:] + [n]
    strides = [st[1:] + [v.stride()[-1]] for st, v in zip(strides, views)]
    rows = numel // n
    block_n = min(triton.next_power_of_2(n), MAX_BLOCK_N)
    block_r, warps = _row_tile(rows, block_n, n <= block_n)
    args = (rows, n, *dims, *[x for st in strides for x in st])
    # EVEN: the row is exactly one tile and the rows fill every program
    consts = {"BLOCK_R": block_r, "BLOCK_N": block_n, "ONE_TILE": n <= block_n,
              "EVEN": n == block_n and rows % block_r == 0}
    return out_shapes, _Planned(_fused_kernel, (-(-rows // block_r),), args, warps, 3, fp_fusion=False, **consts)


def _row_tile(rows, block_n, one_tile):
    """(BLOCK_R, num_warps) for rows of BLOCK_N columns a tile: a row that is one tile shares
    its program with others, BLOCK_R rows (a power of 2, at most the rows) up to ROW_TILE
    elements a program while ROW_PROGRAMS programs or more are left (an H200 has 132 SMs:
    fewer programs leave some idle); a longer row has its program. num_warps: one a 256 elements of the tile (8 a
    thread, as the Triton LayerNorm tutorial chooses), 1 to 16 (probe_row_tiles.py: rows of
    1024 to 8192 ran fastest or within 0.6 µs of it so, and no faster with several rows a
    program, on the H200)."""
    block_r = 1
    if one_tile:
        while 2 * block_r * block_n <= ROW_TILE and 2 * block_r <= rows and -(-rows // (2 * block_r)) >= ROW_PROGRAMS:
            block_r *= 2
    return block_r, min(max(block_r * block_n // 256, 1), 16)
`)
	}
	b.WriteString(`

def _coalesce(shape, strides):
    """The shape with dims merged where every input's strides allow it (and dims of size 1
    dropped), padded with leading 1s to RANK, and each input's strides for it: fewer
    divisions per element, and none at all when every input is dense."""
    dims, sts = [], [[] for _ in strides]
    for d in reversed(range(len(shape))):
        if shape[d] == 1:
            continue
        if dims and all(st[d] == o[0] * dims[0] for st, o in zip(strides, sts)):
            dims[0] *= shape[d]
            continue
        dims.insert(0, shape[d])
        for st, o in zip(strides, sts):
            o.insert(0, st[d])
    pad = RANK - len(dims)
    return [1] * pad + dims, [[0] * pad + o for o in sts]


def _max_offset(dims, strides):
    return sum((d - 1) * abs(s) for d, s in zip(dims, strides))
`)
	return b.String()
}

// ---- README.md ----

func genericReadme(s GenericSpec, name, module string) []byte {
	var b bytes.Buffer
	codes := strings.Join(s.Program.Codes(), " -> ")
	if g := s.Program.GEMM; g != nil {
		codes = string(g.Op) + " -> " + codes
	}
	b.WriteString("# Fused generic chain: " + codes + " (" + s.Dtype + ")\n\n")
	b.WriteString("Generated by `fuseadvise gen` from the chain's op program (op-table codes and validated\n")
	b.WriteString("numbers; the program is in `manifest.json`). `kernel.py` is the chain as one Triton kernel,\n")
	b.WriteString("`reference.py` the traced ops replayed in eager PyTorch, `case.py` the traced shapes and dtypes.\n\n")
	b.WriteString("## Check it\n\n")
	b.WriteString("    TRITON_INTERPRET=1 python -m pytest -q .   # CPU, Triton interpreter, small shapes\n")
	b.WriteString("    python -m pytest -q -m gpu .                # on a GPU, the traced shapes too\n")
	b.WriteString("    python bench.py                             # GPU: fused vs eager vs torch.compile, JSON\n\n")
	b.WriteString("## Swap it in\n\n")
	b.WriteString(numbersReadme(s.Program))
	if s.Program.GEMM != nil {
		b.WriteString(intoReadme(s.Program))
		b.WriteString(gemmReadme(s, module))
		return b.Bytes()
	}
	b.WriteString("Copy `kernel.py` next to the model code as `" + module + ".py`, then replace the chain's ops\n")
	b.WriteString("(their inputs in the order of `case.py`'s INPUTS) with one call:\n\n")
	for _, l := range strings.Split(Usage(GenericPattern, module), "\n") {
		if l == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("    " + l + "\n")
	}
	b.WriteString("\n")
	b.WriteString(intoReadme(s.Program))
	if _, err := s.Program.Backward(); err == nil {
		b.WriteString("Training: call `fused_autograd(*inputs)` instead (`FusedFunction`): its backward is one more\n")
		b.WriteString("fused kernel, from the saved inputs alone. Benchmark before shipping (`fuseadvise bench -modes\n")
		b.WriteString("forward,full`): a speedup below 1.0x means do not ship.\n\n")
	} else {
		b.WriteString("Forward only (" + err.Error() + "): under autograd keep the eager ops.\n")
		b.WriteString("Benchmark before shipping: a speedup below 1.0x in `bench.py` means do not ship.\n\n")
	}
	b.WriteString(genericSource(s))
	return b.Bytes()
}

// intoReadme is the README's note on the outputs that replace a GEMM's autocast cast
// (program.Program.Into), "" without any: which output goes to which GEMM, and why one each.
func intoReadme(p *program.Program) string {
	var b strings.Builder
	var gemms []string
	said := map[int]bool{}
	for k, into := range p.Into {
		if into == "" {
			continue
		}
		s := p.Steps[p.Outputs[k]]
		src := *s.Args[0].Step
		fmt.Fprintf(&b, "Output %d (of the tuple, from 0) is `v%d` cast to %s, the cast autocast makes inside the\n"+
			"`%s` that reads `v%d`: pass it to that `%s` in place of `v%d` (autocast leaves a %s input as it is).\n",
			k, src, s.DType, into, src, into, src, s.DType)
		gemms = append(gemms, into)
		if !slices.Contains(p.Outputs, src) && !said[src] {
			said[src] = true
			fmt.Fprintf(&b, "`v%d` itself is not an output: the GEMMs that cast it were its only readers outside the chain.\n", src)
		}
	}
	if len(gemms) == 0 {
		return ""
	}
	b.WriteString("Each GEMM gets its own copy, in the order they ran, so that their gradients, which come back in\n" +
		"16 bits, are summed in fp32 by the backward, as eager's casts back (ToCopyBackward0) sum them.\n\n")
	return b.String()
}

// numbersReadme is the README's note on a program's number inputs ("" without any).
func numbersReadme(p *program.Program) string {
	r := newRenderer(p)
	var floats, ints []string
	for _, i := range p.Numbers() {
		if p.Inputs[i].DType == program.I64 {
			ints = append(ints, "`"+r.inputName(i)+"`")
		} else {
			floats = append(floats, "`"+r.inputName(i)+"`")
		}
	}
	which := func(names []string, kind string) string {
		if len(names) == 1 {
			return "Input " + names[0] + " (\"" + kind + "\" in `case.py`'s INPUTS) is a number"
		}
		return "Inputs " + strings.Join(names, ", ") + " (\"" + kind + "\" in `case.py`'s INPUTS) are numbers"
	}
	var b strings.Builder
	if len(floats) > 0 {
		b.WriteString(which(floats, "number") + " your code passes, such as the 0.5\nof `x * 0.5`: the trace records that a Python float was passed, not its value. Pass the same\n" +
			"number (a Python float, or a 0-dim float32 tensor) at that place; the kernel computes with it as\n" +
			"eager on CUDA does (its float32).\n\n")
	}
	if len(ints) > 0 {
		b.WriteString(which(ints, "number_int64") + " your code passes, such as the 1\nof `positions - 1`: the trace records that a Python int was passed, not its value. Pass the same\n" +
			"int (a Python int, or a 0-dim int64 tensor) at that place.\n\n")
	}
	for i, in := range p.Inputs {
		if !in.Keep {
			continue
		}
		fmt.Fprintf(&b, "Input `%s` is the keep mask of a dropout in training (p = %s), which eager draws inside\n"+
			"`dropout`: draw it in your code and pass it, a bool tensor of the dropout's shape, True with\n"+
			"probability 1 - p, a new one each call (one kernel writing a byte an element):\n"+
			"`%s = torch.empty(shape, dtype=torch.bool, device=x.device).bernoulli_(1 - %s)`. The\n"+
			"kernel scales what it keeps by 1 / (1 - p), as eager's dropout in training does; in eval mode,\n"+
			"where eager's dropout is the identity, keep the eager ops. The backward reads the same mask.\n\n",
			r.inputName(i), pyNum(r.keepP(i)), r.inputName(i), pyNum(r.keepP(i)))
	}
	if k := p.BiasInput(); k >= 0 {
		of := *p.Steps[0].Args[0].In
		fmt.Fprintf(&b, "Input `%s` is the bias of the Linear (or addmm) whose output `%s` is, read here through a\n"+
			"permute: the traced model added it in that GEMM's epilogue; this kernel adds it itself, so run the\n"+
			"GEMM without it (`F.linear(x, linear.weight)`) and pass `linear.bias`, cast to `%s`'s dtype (%s,\n"+
			"autocast's compute type) and viewed as %s. Its gradient then comes from this kernel's\n"+
			"backward, summed over the dims it broadcasts along, in place of the GEMM backward's row sum.\n\n",
			r.inputName(k), r.inputName(of), r.inputName(of), p.Inputs[of].DType, pyInts(p.Inputs[k].Dims))
	}
	return b.String()
}

// genericSource is the README's source section: the trace's text, JSON-escaped, and the
// estimate.
func genericSource(s GenericSpec) string {
	var b bytes.Buffer
	b.WriteString("## Source (data from the trace, JSON-escaped)\n\n")
	src, _ := json.Marshal(struct {
		Ops []string `json:"ops"`
		ManifestSource
	}{s.Ops, ManifestSource{s.Source.Trace, s.Source.Site}})
	b.WriteString("    " + string(src) + "\n")
	fmt.Fprintf(&b, "\nEstimated saving: %s us", strconv.FormatFloat(s.EstSavingUs, 'f', 1, 64))
	if s.EstBackwardSavingUs > 0 {
		fmt.Fprintf(&b, " in the forward, %s us in the backward", strconv.FormatFloat(s.EstBackwardSavingUs, 'f', 1, 64))
	}
	b.WriteString(".\n")
	return b.String()
}
