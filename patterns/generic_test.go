package patterns

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/program"
	"github.com/fuseadvise/fuseadvise/trace"
)

// TestGenericChainsSynthetic: a SiLU written out (x * 1.702 -> sigmoid -> * x) twice, a cast
// then a bias add, a chain whose scale is a Python float the trace does not record (a number
// the generated kernel takes at run time), and a comparison with such a float (eager
// compares with it rounded to the tensor's type: not generated).
func TestGenericChainsSynthetic(t *testing.T) {
	silu := []op{
		{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
		{name: "mul", in: []string{"f32:8x64", "=1.702"}},
		{name: "sigmoid", in: []string{"f32:8x64"}},
		{name: "mul", in: []string{"f32:8x64", "f32:8x64"}},
	}
	var ops []op
	ops = append(ops, silu...)
	ops = append(ops, silu...)
	ops = append(ops,
		op{name: "linear", in: []string{"bf16:16x32", "bf16:128x32", "bf16:128"}},
		op{name: "to", in: []string{"bf16:16x128", "=6", "=False", "=False", ""}},
		op{name: "add", in: []string{"f32:16x128", "f32:128", "=1"}},
		op{name: "linear", in: []string{"f32:4x32", "f32:48x32", "f32:48"}},
		op{name: "mul", in: []string{"f32:4x48", "#"}},
		op{name: "relu", in: []string{"f32:4x48"}},
		op{name: "abs", in: []string{"f32:6x40"}},
		op{name: "gt", in: []string{"f32:6x40", "#"}},
	)
	r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		ops           string
		dims          string
		inst, kernels int
		gpu           float64
		program       bool
		unrecoverable string
	}
	want := []row{
		// the linear each chain starts at is its program's head: its kernel counted in
		{"mul,sigmoid,mul", "[8 64]", 2, 8, 40, true, ""},
		{"mul,relu", "[4 48]", 1, 3, 15, true, ""},
		{"to,add", "[16 128]", 1, 3, 15, true, ""},
		{"abs,gt", "[6 40]", 1, 2, 10, false, "gt: argument 1 (double) is not recorded in Concrete Inputs"},
	}
	if len(r.GenericChains) != len(want) {
		t.Fatalf("%d generic chains, want %d: %+v", len(r.GenericChains), len(want), r.GenericChains)
	}
	for i, c := range r.GenericChains {
		got := row{strings.Join(c.Ops, ","), fmt.Sprint(c.Dims), c.Instances, c.Kernels, c.GPUTimeUs, c.Program != nil, c.Unrecoverable}
		if got != want[i] {
			t.Errorf("chain %d: got %+v, want %+v", i, got, want[i])
		}
		if c.DType != FP32 {
			t.Errorf("chain %d: dtype %s", i, c.DType)
		}
		if c.Program != nil {
			want := "[]"
			if got.ops == "mul,relu" { // the GEMM's output, then the number
				want = "[1]"
			}
			if n := fmt.Sprint(c.Program.Numbers()); n != want {
				t.Errorf("chain %d: number inputs %s, want %s", i, n, want)
			}
		}
		// the synthetic trace's ops take 5 us of kernel each and calibrate no bandwidth
		// beyond the device table's: a program's fused kernel is estimated, and saves time
		if c.Program != nil && (c.EstFusedUs <= 0 || c.EstSavingUs <= 0 || c.EstSavingUs >= c.GPUTimeUs) {
			t.Errorf("chain %d: fused %.2f us, saving %.2f us of %.2f us", i, c.EstFusedUs, c.EstSavingUs, c.GPUTimeUs)
		}
	}
}

// programCases are chains built op by op (after a producer the chain reads) and the program
// or the reason the first generic chain gets (testdata/generic_programs.json, -update).
var programCases = []struct {
	name string
	ops  []op
}{
	{"x*sigmoid(x)*scale", []op{
		{name: "linear", in: []string{"f32:8x32", "f32:64x32", "f32:64"}},
		{name: "sigmoid", in: []string{"f32:8x64"}},
		{name: "mul", in: []string{"f32:8x64", "f32:8x64"}},
		{name: "mul", in: []string{"f32:8x64", "=0.5"}},
	}},
	{"clamp, mul, add bias", []op{
		{name: "mm", in: []string{"bf16:64x32", "bf16:32x96"}},
		{name: "clamp", in: []string{"bf16:64x96", "=-1.5", "=2"}},
		{name: "mul", in: []string{"bf16:64x96", "=3"}},
		{name: "add", in: []string{"bf16:64x96", "bf16:96", "=1"}},
	}},
	{"gelu, dropout(p=0), add residual", []op{
		{name: "bmm", in: []string{"f32:4x16x8", "f32:4x8x32"}},
		{name: "gelu", in: []string{"f32:4x16x32", "=none"}},
		{name: "dropout", in: []string{"f32:4x16x32", "=0.", "=True"}},
		{name: "add", in: []string{"f32:4x16x32", "f32:4x16x32", "=1"}},
	}},
	{"sub max, exp, sum", []op{
		{name: "bmm", in: []string{"f32:8x16x32", "f32:8x32x16"}},
		{name: "amax", in: []string{"f32:8x16x16", "=[-1]", "=True"}},
		{name: "sub", in: []string{"f32:8x16x16", "f32:8x16x1", "=1"}},
		{name: "exp", in: []string{"f32:8x16x16"}},
		{name: "sum", in: []string{"f32:8x16x16", "=[-1]", "=False", ""}},
	}},
	{"to(bf16), mul, to(fp32)", []op{
		{name: "mm", in: []string{"f32:32x64", "f32:64x48"}},
		{name: "to", in: []string{"f32:32x48", "=15", "=False", "=False", ""}},
		{name: "mul", in: []string{"bf16:32x48", "bf16:48"}},
		{name: "to", in: []string{"bf16:32x48", "=6", "=False", "=False", ""}},
	}},
	{"where(mask, x, -inf), log_softmax", []op{
		{name: "bmm", in: []string{"f32:8x16x32", "f32:8x32x16"}},
		{name: "gt", in: []string{"f32:8x16x16", "=0"}},
		{name: "where", in: []string{"bool:8x16x16", "f32:8x16x16", "=-inf"}},
		{name: "_log_softmax", in: []string{"f32:8x16x16", "=-1", "=False"}},
	}},
	{"a 0-dim tensor scale, per-channel bias, leaky_relu", []op{
		{name: "conv2d", in: []string{"f32:2x3x8x8", "f32:6x3x3x3", "", "=[1, 1]", "=[1, 1]", "=[1, 1]", "=1"}},
		{name: "mul", in: []string{"f32:2x6x8x8", "f32:"}},
		{name: "add", in: []string{"f32:2x6x8x8", "f32:6x1x1", "=1"}},
		{name: "leaky_relu", in: []string{"f32:2x6x8x8", "=0.2"}},
	}},
	{"gelu without approximate is not guessed", []op{
		{name: "mm", in: []string{"f32:64x32", "f32:32x96"}},
		{name: "gelu", in: []string{"f32:64x96", ""}},
		{name: "mul", in: []string{"f32:64x96", "=2"}},
	}},
	{"scale, logsumexp", []op{
		{name: "bmm", in: []string{"f32:8x16x32", "f32:8x32x16"}},
		{name: "mul", in: []string{"f32:8x16x16", "=0.125"}},
		{name: "logsumexp", in: []string{"f32:8x16x16", "=[-1]", "=False"}},
	}},
	{"training dropout draws a mask", []op{
		{name: "mm", in: []string{"f32:64x32", "f32:32x96"}},
		{name: "relu", in: []string{"f32:64x96"}},
		{name: "dropout", in: []string{"f32:64x96", "=0.1", "=True"}, kids: []op{{name: "native_dropout", in: []string{"f32:64x96", "=0.1", "=True"}}}},
		{name: "mul", in: []string{"f32:64x96", "=2"}},
	}},
	{"div with a rounding mode", []op{
		{name: "mm", in: []string{"f32:64x32", "f32:32x96"}},
		{name: "div", in: []string{"f32:64x96", "=3", "=floor"}},
		{name: "exp", in: []string{"f32:64x96"}},
	}},
	{"int64 values", []op{
		{name: "cumsum", in: []string{"i64:4x96", "=1", ""}},
		{name: "mul", in: []string{"i64:4x96", "=3"}},
		{name: "add", in: []string{"i64:4x96", "=1", "=1"}},
	}},
	// an int64 tensor compared with a Python int (in int64: "int": true) or a Python float (in
	// float32), as Kineto prints them; a number printed as neither is refused
	{"int64 compared with an int", []op{
		{name: "cumsum", in: []string{"i64:4x96", "=1", ""}},
		{name: "mul", in: []string{"i64:4x96", "=3"}},
		{name: "gt", in: []string{"i64:4x96", "=0"}},
	}},
	{"int64 compared with a float", []op{
		{name: "cumsum", in: []string{"i64:4x96", "=1", ""}},
		{name: "mul", in: []string{"i64:4x96", "=3"}},
		{name: "lt", in: []string{"i64:4x96", "=7.5"}},
	}},
	{"int64 compared with a number printed as neither", []op{
		{name: "cumsum", in: []string{"i64:4x96", "=1", ""}},
		{name: "mul", in: []string{"i64:4x96", "=3"}},
		{name: "gt", in: []string{"i64:4x96", "=inf"}},
	}},
	{"injection: op names and scalars carry code", []op{
		{name: "mm", in: []string{"f32:64x32", "f32:32x96"}},
		{name: "mul", in: []string{"f32:64x96", "=__import__('os').system('x')"}},
		{name: "exp", in: []string{"f32:64x96"}},
	}},
}

// TestGenericPrograms: the op program (or the reason there is none) of each programCases
// chain, against testdata/generic_programs.json (go test -run TestGenericPrograms -update).
func TestGenericPrograms(t *testing.T) {
	got := map[string]any{}
	for _, c := range programCases {
		r, err := Analyze([]*trace.Trace{synth(c.ops...)}, Options{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(r.GenericChains) == 0 {
			got[c.name] = "no generic chain"
			continue
		}
		gc := r.GenericChains[0]
		if gc.Program != nil {
			if err := gc.Program.Validate(); err != nil {
				t.Errorf("%s: invalid program: %v", c.name, err)
			}
			got[c.name] = gc.Program
		} else {
			got[c.name] = gc.Unrecoverable
		}
	}
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	file := filepath.Join("testdata", "generic_programs.json")
	if *update {
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGenericPrograms -update to create it)", err)
	}
	if string(b) != string(want) {
		t.Errorf("programs differ from %s (-update to accept):\n%s", file, firstDiff(string(b), string(want)))
	}
}

// TestGenericChainsH200: on the shared H200 traces chains outside the catalog are found (some
// traces have none: the catalog claims every chain), took GPU time, and contain no op of a
// catalog instance, nor an op nested in one (the totals count both kinds side by side).
func TestGenericChainsH200(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the shared H200 traces")
	}
	dir := shared.Require(t, "traces", "h200")
	paths, err := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, path := range paths {
		if strings.HasSuffix(path, ".et.json.gz") {
			continue
		}
		tr, err := trace.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		g := newGraph(tr)
		g.infer()
		claimed := claimedOps(detect(g, ""))
		cs := genericChains(g, claimed, nil)
		name := filepath.Base(path)
		var us float64
		for _, c := range cs {
			us += c.GPUTimeUs
			if len(c.Ops) < 2 && c.GEMMBias == "" { // one op and a GEMM's bias is two steps
				t.Errorf("%s: chain of %d ops", name, len(c.Ops))
			}
			for _, o := range c.Ops {
				if !genericOps[o] && !genericReductions[o] {
					t.Errorf("%s: op %q not in the table", name, o)
				}
			}
		}
		if len(cs) > 0 && us <= 0 {
			t.Errorf("%s: chains took no GPU time", name)
		}
		// Llama's RoPE cos/sin are computed once and read by every layer: cut there
		// (GenericFanOutMax), the layers' chains stay apart (35 ops in one region before)
		if strings.HasPrefix(name, "llama") {
			for _, c := range cs {
				if len(c.Ops) > 8 {
					t.Errorf("%s: a chain of %d ops (%v): the layers' regions were joined", name, len(c.Ops), c.Ops)
				}
			}
		}
		found += len(cs)
		for _, nodes := range genericRegions(g, claimed, 2) {
			for _, b := range nodes {
				if claimed[g.nodes[b]] {
					t.Errorf("%s: op %d of a catalog instance is in a generic chain", name, g.nodes[b])
				}
			}
		}
		// the totals count generic instances beside the catalog's: none may share an op, or
		// an op nested in one, with a catalog instance (counted would drop one of them)
		nested := map[int32]bool{}
		var walk func(id int32, mark bool) bool
		walk = func(id int32, mark bool) bool {
			hit := nested[id]
			if mark {
				nested[id] = true
			}
			for _, c := range tr.Ops[id].Children {
				hit = walk(c, mark) || hit
			}
			return hit
		}
		for id := range claimed {
			walk(id, true)
		}
		_, rks, _ := genericRanked(g, claimed, nil, "", 0, 0)
		for _, rk := range rks {
			for _, id := range rk.in.Ops {
				if walk(id, false) {
					t.Errorf("%s: generic instance op %d (or an op in it) is in a catalog instance", name, id)
				}
			}
		}
		t.Logf("%s: %d chains, %.0f µs", name, len(cs), us)
	}
	if found == 0 {
		t.Error("no chain outside the catalog in any H200 trace")
	}
}

// TestGenericGeluFromET: gelu's approximate, which Kineto leaves out of Concrete Inputs, comes
// from the execution trace's String argument when there is one ("none": erf, "tanh"); any
// other text, or none, keeps the chain's reason.
func TestGenericGeluFromET(t *testing.T) {
	for _, c := range []struct {
		text, want, why string
	}{{"none", "gelu", ""}, {"tanh", "gelu_tanh", ""}, {"", "", "approximate"}, {"exact", "", "approximate"}} {
		g := newGraph(synth(
			op{name: "mm", in: []string{"f32:64x32", "f32:32x96"}},
			op{name: "gelu", in: []string{"f32:64x96", ""}},
			op{name: "mul", in: []string{"f32:64x96", "=2"}},
		))
		g.infer()
		g.etIn = make([][]trace.Tensor, len(g.nodes))
		for b := range g.nodes {
			if g.name[b] == "gelu" {
				g.etIn[b] = []trace.Tensor{{ID: 7}, {ID: -1, Text: c.text}}
			}
		}
		regions := genericRegions(g, nil, 2)
		if len(regions) != 1 {
			t.Fatalf("%q: %d regions", c.text, len(regions))
		}
		p, why := g.genericProgram(regions[0])
		switch {
		case c.why != "" && !strings.Contains(why, c.why):
			t.Errorf("%q: reason %q, want one about %s", c.text, why, c.why)
		case c.why == "" && (p == nil || string(p.Steps[0].Op) != c.want):
			t.Errorf("%q: program %v (%s), want a first step %s", c.text, p, why, c.want)
		}
	}
}

// TestGenericChainIsConvex: two blocks' layer-scale residuals (ConvNeXt: x + gamma * f(x)) are
// joined by dataflow, the second add reading the first's output, but the second block's
// branch f runs between them and reads that output too: one kernel cannot hold both adds. Each
// block's mul, add stays a chain of its own (they were one chain of four before).
func TestGenericChainIsConvex(t *testing.T) {
	x := "f32:8x128x768"
	block := []op{
		{name: "linear", in: []string{x, "f32:768x768", "f32:768"}}, // f(x)
		{name: "tanh", in: []string{x}},
		{name: "mul", in: []string{x, "f32:768"}}, // gamma * f(x)
		{name: "add", in: []string{x, x, "=1"}},   // x + ...
	}
	ops := append([]op{{name: "relu", in: []string{x}}}, block...)
	ops = append(ops, block...)
	r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.GenericChains {
		got = append(got, fmt.Sprintf("%s x%d", strings.Join(c.Ops, ","), c.Instances))
	}
	for _, c := range got {
		if strings.Count(c, "add") > 1 {
			t.Errorf("a chain across the blocks: %v", got)
		}
	}
	if len(got) == 0 {
		t.Errorf("no chain: %v", got)
	}
}

// TestBroadcastsTo: a chain op may read another's value through a view that only adds or
// drops leading 1s or expands dims of 1 (the value as right-aligned broadcasting places it);
// any other view (a transposed placement, a slice, a reshape) is refused.
func TestBroadcastsTo(t *testing.T) {
	for _, c := range []struct {
		v, in []int64
		want  bool
	}{
		{[]int64{128}, []int64{1, 1, 1, 128}, true},
		{[]int64{1, 1, 128}, []int64{128}, true},
		{[]int64{1, 1, 512, 512}, []int64{4, 1, 512, 512}, true},
		{[]int64{128}, []int64{1, 1, 128, 1}, false},
		{[]int64{4, 129}, []int64{4, 1}, false},
		{[]int64{16, 16, 559, 64}, []int64{16, 16, 559, 32}, false},
		{[]int64{128, 197, 768}, []int64{196, 128, 768}, false},
		{[]int64{4, 1, 512}, []int64{1, 512}, false},
	} {
		if got := broadcastsTo(c.v, c.in); got != c.want {
			t.Errorf("broadcastsTo(%v, %v) = %v, want %v", c.v, c.in, got, c.want)
		}
	}
}

// TestGenericFusedUsDrawsTheKeepMask: a training dropout's keep mask costs its draw too (one
// more kernel writing a byte an element), which the caller makes before the fused call.
func TestGenericFusedUsDrawsTheKeepMask(t *testing.T) {
	var with, without program.Program
	if err := json.Unmarshal([]byte(`{"dims":[64,1024],"inputs":[{"dtype":"bf16","dims":[64,1024]},{"dtype":"bool","dims":[64,1024],"keep":true}],
		"steps":[{"op":"dropout_keep","args":[{"in":0},{"in":1}],"consts":[0.1,1.1111111111111112],"dtype":"bf16"}],"outputs":[0]}`), &with); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"dims":[64,1024],"inputs":[{"dtype":"bf16","dims":[64,1024]},{"dtype":"bool","dims":[64,1024]}],
		"steps":[{"op":"where","args":[{"in":1},{"in":0},{"num":0}],"dtype":"bf16"}],"outputs":[0]}`), &without); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*program.Program{&with, &without} {
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if with.KeepNumel() != 64*1024 || without.KeepNumel() != 0 {
		t.Fatalf("KeepNumel: %d, %d", with.KeepNumel(), without.KeepNumel())
	}
	m := DefaultCostModel()
	m.BandwidthGBs, m.KernelOverheadUs = 4000, 2
	a, _ := genericFusedUs(&m, &with)
	b, _ := genericFusedUs(&m, &without)
	if a < b+m.KernelOverheadUs {
		t.Errorf("with a keep mask to draw %.2f us, without %.2f: want at least one more kernel", a, b)
	}
}

// TestReadsAroundUnlinkedCat: a residual add's other operand computed through a cat whose
// TensorList the inferred dataflow does not link (Llama's KV cache) may depend on the value
// the add would join: from the Kineto trace alone readsAround answers yes (no join); with an
// execution trace's dataflow it walks on and, finding no path back, answers no.
func TestReadsAroundUnlinkedCat(t *testing.T) {
	g := &graph{
		name: []string{"add", "cat", "linear", "add"},
		in:   [][]int32{{-1, -1}, {-1, -1}, {1, -1}, {0, 2}},
	}
	for _, inferred := range []bool{true, false} {
		g.inferred = inferred
		if got := g.readsAround(3, 0, 0); got != inferred {
			t.Errorf("inferred %v: readsAround = %v, want %v", inferred, got, inferred)
		}
	}
	// with the cat's element sizes recorded: it may read the add's value (0) when that has
	// an element's sizes, else nothing made since the add (madeSince)
	g.inferred = true
	g.nodes = []int32{0, 1, 2, 3}
	for _, tc := range []struct {
		element []int64
		want    bool
	}{{[]int64{4, 8}, true}, {[]int64{4, 4}, false}} {
		g.t = &trace.Trace{Ops: make([]trace.Op, 4)}
		g.t.Ops[1].Inputs = []trace.Input{{Type: "TensorList", List: [][]int64{tc.element, tc.element}}}
		g.out = [][]tval{{{dims: []int64{4, 8}}}, {{dims: []int64{8, 8}}}, {{dims: []int64{8, 8}}}, {{dims: []int64{4, 8}}}}
		if got := g.readsAround(3, 0, 0); got != tc.want {
			t.Errorf("cat of %v: readsAround = %v, want %v", tc.element, got, tc.want)
		}
	}
}

// TestRotaryFromKineto: a rotary embedding, q*cos + rotate_half(q)*sin with rotate_half(q) =
// cat(-q[..., 8:], q[..., :8]), from the Kineto trace alone: the cat's TensorList is not
// linked, so its type comes from its elements' values (bf16, not the fp32 product q*cos it
// would otherwise be taken for by the add), and the walk around the cat finds its elements
// made from q before the product: one chain mul,mul,add, as the execution trace has it.
func TestRotaryFromKineto(t *testing.T) {
	got := chainsOf(t, [][]int64{{2, 8, 8}, {2, 8, 8}},
		op{name: "linear", in: []string{"bf16:2x8x16", "bf16:16x16", ""}},
		op{name: "mul", in: []string{"bf16:2x8x16", "f32:8x16"}},
		op{name: "slice", in: []string{"bf16:2x8x16", "=2", "=0", "=8", "=1"}},
		op{name: "slice", in: []string{"bf16:2x8x16", "=2", "=8", "=9223372036854775807", "=1"}},
		op{name: "neg", in: []string{"bf16:2x8x8"}},
		op{name: "cat", in: []string{"", "=-1"}},
		op{name: "mul", in: []string{"bf16:2x8x16", "f32:8x16"}},
		op{name: "add", in: []string{"f32:2x8x16", "f32:2x8x16", "=1"}},
	)
	if len(got) != 1 || got[0] != "mul,mul,add" {
		t.Errorf("generic chains %q, want one mul,mul,add", got)
	}
}

// TestRotaryTables: HF's rotary tables, cos = emb.cos() * s; sin = emb.sin() * s; returned
// cast, read from the Kineto trace alone as the execution trace reads them: the sin reads the
// angle the cos read (rule 6 of infer), not the cos's product, the newest value of that shape;
// the two casts read the two products in order (rule 7), not both the sin's. Without the
// casts (a training step in fp32 tables) the two chains are cos, mul and sin, mul.
func TestRotaryTables(t *testing.T) {
	const emb = "f32:1x512x64"
	tables := []op{
		{name: "cat", in: []string{"", "=-1"}},
		{name: "cos", in: []string{emb}},
		{name: "mul", in: []string{emb, "=1.0"}},
		{name: "sin", in: []string{emb}},
		{name: "mul", in: []string{emb, "=1.0"}},
	}
	casts := []op{{name: "to", in: []string{emb, "=15"}}, {name: "to", in: []string{emb, "=15"}}}
	for _, tc := range []struct {
		name string
		ops  []op
		want []string
	}{
		{"cast", append(slices.Clone(tables), casts...), []string{"cos,mul,to", "sin,mul,to"}},
		{"fp32", slices.Clone(tables), []string{"cos,mul", "sin,mul"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chainsOf(t, [][]int64{{1, 512, 32}, {1, 512, 32}}, tc.ops...)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("generic chains %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRotarySameType: `q * cos + rotate_half(q) * sin` where q * cos has q's shape and type
// (a bf16 model, Qwen2's and Llama's inference): from the Kineto trace alone rotate_half's
// slices read q, not the product made just before (rule 8 of infer), and the add reads that
// product, not the rotation's cat (rule 9): one mul,mul,add, as the execution trace has it.
// Where k has q's shape (multi-head attention: Phi's, Qwen1.5's), k's rotary reads no value
// of q's (rule 10): two mul,mul,add, not one chain through both.
func TestRotarySameType(t *testing.T) {
	const x = "bf16:2x8x16"
	rotary := []op{
		{name: "mul", in: []string{x, "bf16:8x16"}},
		{name: "slice", in: []string{x, "=2", "=0", "=8", "=1"}},
		{name: "slice", in: []string{x, "=2", "=8", "=9223372036854775807", "=1"}},
		{name: "neg", in: []string{"bf16:2x8x8"}},
		{name: "cat", in: []string{"", "=-1"}},
		{name: "mul", in: []string{x, "bf16:8x16"}},
		{name: "add", in: []string{x, x, "=1"}},
	}
	proj := op{name: "linear", in: []string{x, "bf16:16x16", ""}}
	everyTwo := []op{
		{name: "mul", in: []string{x, "bf16:8x16"}},
		{name: "slice", in: []string{x, "=2", "=0", "=9223372036854775807", "=2"}},
		{name: "slice", in: []string{x, "=2", "=1", "=9223372036854775807", "=2"}},
		{name: "neg", in: []string{"bf16:2x8x8"}},
		{name: "stack", in: []string{"", "=-1"}},
		{name: "flatten", in: []string{"bf16:2x8x8x2", "=-2", "=-1"}},
		{name: "mul", in: []string{x, "bf16:8x16"}},
		{name: "add", in: []string{x, x, "=1"}},
	}
	// the cos and sin tables, cast to the model's type (a table the trace shows made)
	tables := []op{{name: "to", in: []string{"f32:8x16", "=15"}}, {name: "to", in: []string{"f32:8x16", "=15"}}}
	for _, tc := range []struct {
		name string
		ops  []op
		want []string
	}{
		{"q", append([]op{proj}, rotary...), []string{"mul,mul,add"}},
		{"q and k of one shape", append(append(append([]op{proj, proj}, tables...), rotary...), rotary...),
			[]string{"mul,mul,add", "mul,mul,add"}},
		// rotate_every_two: x[..., ::2], x[..., 1::2], a neg, a stack and a flatten, the tables
		// made by an op whose output is not recorded (repeat_interleave): none linked
		{"GPT-J's rotate_every_two, q and k", append(append([]op{proj, proj}, everyTwo...), everyTwo...),
			[]string{"mul,mul,add", "mul,mul,add"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chainsOf(t, [][]int64{{2, 8, 8}, {2, 8, 8}}, tc.ops...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("generic chains %q, want %q", got, tc.want)
			}
		})
	}
}

// chainsOf analyzes the synthetic trace of ops, whose cats take list as their TensorList's
// element sizes (Kineto records those, not the elements), and returns its generic chains'
// ops, once an instance.
func chainsOf(t *testing.T, list [][]int64, ops ...op) []string {
	t.Helper()
	tr := synth(ops...)
	for i := range tr.Ops {
		if tr.Ops[i].Name == "aten::cat" {
			tr.Ops[i].Inputs[0] = trace.Input{Type: "TensorList", List: list}
		}
	}
	r, err := Analyze([]*trace.Trace{tr}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range r.GenericChains {
		for range max(c.Instances, 1) { // a chain found n times is n chains here
			got = append(got, strings.Join(c.Ops, ","))
		}
	}
	return got
}
