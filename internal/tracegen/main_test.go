package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

func TestGenerate(t *testing.T) {
	src := shared.Require(t, "traces", "h200", "gpt2_train_sdpa_stack.json.gz")
	out := filepath.Join(t.TempDir(), "g.json")
	if err := run(out, "3MB", src); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Size() < 3e6 {
		t.Fatalf("size %v %v", fi, err)
	}
	tr, err := trace.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	one, err := trace.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	k := len(tr.Acts) / len(one.Acts)
	if k < 2 || len(tr.Acts)%len(one.Acts) != 0 {
		t.Fatalf("%d acts is not a multiple of %d", len(tr.Acts), len(one.Acts))
	}
	// Every replica links like the source: linked kernels scale exactly.
	linked := func(x *trace.Trace) int {
		n := 0
		for _, a := range x.Acts {
			if a.Op >= 0 {
				n++
			}
		}
		return n
	}
	if linked(tr) != k*linked(one) || tr.FwdBwdLinks() != k*one.FwdBwdLinks() {
		t.Errorf("linked %d (want %d), fwd-bwd %d (want %d)", linked(tr), k*linked(one), tr.FwdBwdLinks(), k*one.FwdBwdLinks())
	}
}
