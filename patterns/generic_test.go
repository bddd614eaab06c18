package patterns

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

// TestGenericChainsSynthetic: a SiLU written out (x * 1.702 -> sigmoid -> * x) twice, a cast
// then a bias add, and a chain whose scale is a Python float the trace does not record.
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
	)
	r, err := Analyze([]*trace.Trace{synth(ops...)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []GenericChain{
		{Ops: []string{"mul", "sigmoid", "mul"}, Dims: []int64{8, 64}, DType: FP32, Instances: 2, GPUTimeUs: 30, Kernels: 6},
		{Ops: []string{"mul", "relu"}, Dims: []int64{4, 48}, DType: FP32, Instances: 1, GPUTimeUs: 10, Kernels: 2,
			Unrecoverable: "mul: argument 1 (double) is not recorded in Concrete Inputs"},
		{Ops: []string{"to", "add"}, Dims: []int64{16, 128}, DType: FP32, Instances: 1, GPUTimeUs: 10, Kernels: 2},
	}
	if !reflect.DeepEqual(r.GenericChains, want) {
		t.Errorf("generic chains:\n got %+v\nwant %+v", r.GenericChains, want)
	}
}

// TestGenericChainsH200: on the shared H200 traces chains outside the catalog are found (some
// traces have none: the catalog claims every chain), took GPU time, and contain no op of a
// catalog instance.
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
		cs := genericChains(g, claimed)
		name := filepath.Base(path)
		var us float64
		for _, c := range cs {
			us += c.GPUTimeUs
			if len(c.Ops) < 2 {
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
		for _, nodes := range genericRegions(g, claimed) {
			for _, b := range nodes {
				if claimed[g.nodes[b]] {
					t.Errorf("%s: op %d of a catalog instance is in a generic chain", name, g.nodes[b])
				}
			}
		}
		t.Logf("%s: %d chains, %.0f µs", name, len(cs), us)
	}
	if found == 0 {
		t.Error("no chain outside the catalog in any H200 trace")
	}
}
