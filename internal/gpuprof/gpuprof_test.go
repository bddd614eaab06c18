package gpuprof

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/fuseadvise/fuseadvise/internal/shared"
	"github.com/fuseadvise/fuseadvise/trace"
)

func TestSplitPyFrame(t *testing.T) {
	for _, tt := range []struct {
		in, name, file string
		line           int64
	}{
		{"transformers/models/gpt2/modeling_gpt2.py(345): forward", "forward", "transformers/models/gpt2/modeling_gpt2.py", 345},
		{"nn.Module: GPT2Block_0", "nn.Module: GPT2Block_0", "", 0},
		{"<built-in method (x)>", "<built-in method (x)>", "", 0},
	} {
		n, f, l := splitPyFrame(tt.in)
		if n != tt.name || f != tt.file || l != tt.line {
			t.Errorf("%q -> %q %q %d", tt.in, n, f, l)
		}
	}
}

// The profile of a real trace with Python stacks parses back, its GPU time equals the
// trace's activity time, and a kernel's stack runs kernel -> op -> ... -> Python frames.
func TestProfileOfRealTrace(t *testing.T) {
	path := shared.Require(t, "traces", "h200", "gpt2_train_sdpa_stack.json.gz")
	tr, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, []*trace.Trace{tr}); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var gpu, want, launches int64
	for i := range tr.Acts {
		want += tr.Acts[i].Dur
	}
	sawPython := false
	for _, s := range p.Sample {
		gpu += s.Value[0]
		launches += s.Value[1]
		if s.Value[0] > 0 && len(s.Location) > 2 && s.Location[len(s.Location)-1].Line[0].Function.Filename != "" {
			sawPython = true
		}
	}
	if gpu != want || launches != int64(len(tr.Acts)) {
		t.Errorf("gpu_time %d, launches %d; want %d, %d", gpu, launches, want, len(tr.Acts))
	}
	if !sawPython {
		t.Error("no kernel stack ends in a Python frame, in a with_stack trace")
	}
}
