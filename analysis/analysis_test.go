package analysis

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/internal/shared"
)

const bundled = "../testdata/traces/mlp_blocks_infer_fp32.json.gz"

// What WriteJSON writes, ReadJSON reads back to the same JSON; its options select the
// opportunities as Run's do.
func TestJSONRoundTrip(t *testing.T) {
	r, traces, err := Run(bundled, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 1 || len(r.Opportunities) < 2 {
		t.Fatalf("%d traces, %d opportunities", len(traces), len(r.Opportunities))
	}
	var a bytes.Buffer
	if err := r.WriteJSON(&a); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.json")
	if err := os.WriteFile(path, a.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := back.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the JSON read back differs from what was written")
	}
	one, err := ReadJSON(path, Options{Top: 1})
	if err != nil || len(one.Opportunities) != 1 || one.Opportunities[0].Pattern != r.Opportunities[0].Pattern {
		t.Errorf("Top 1: %v, %+v", err, one)
	}
	p := r.Opportunities[1].Pattern
	sel, err := ReadJSON(path, Options{Pattern: p})
	if err != nil || len(sel.Opportunities) != 1 || sel.Opportunities[0].Pattern != p {
		t.Errorf("Pattern %s: %v, %+v", p, err, sel)
	}
	os.WriteFile(path, []byte(`{"trace": {}, "opportunities": {"x": 1}}`), 0o644)
	if _, err := ReadJSON(path, Options{}); err == nil || !strings.Contains(err.Error(), "opportunities\" holds a JSON object") {
		t.Errorf("wrong type: %v", err)
	}
}

// The text renderings hold every opportunity; Markdown starts with its title.
func TestWriteText(t *testing.T) {
	r, _, err := Run(bundled, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range []bool{false, true} {
		var b bytes.Buffer
		if err := r.WriteText(&b, md); err != nil {
			t.Fatal(err)
		}
		out := strings.ReplaceAll(b.String(), `\_`, "_") // Markdown escapes _
		if md != strings.HasPrefix(out, "# fuseadvise analysis\n") {
			t.Errorf("markdown %v: starts %q", md, out[:min(len(out), 40)])
		}
		for _, o := range r.Opportunities {
			if !strings.Contains(out, o.Pattern) {
				t.Errorf("markdown %v: %s missing", md, o.Pattern)
			}
		}
		// one total, over chains that share nothing, against GPU busy and the step
		for _, want := range []string{"Estimated saving 11512 µs in total (17% of GPU busy time, 17% of the step time)",
			"from 24 chains that share no op or kernel", "step time", "host-bound",
			// every memory-bound kernel of this inference trace is in a chain; the counted set holds fewer
			"Coverage: the chains found claim 100% of the memory-bound kernel time", "the counted chains 79%"} {
			if !strings.Contains(out, want) {
				t.Errorf("markdown %v: %q missing", md, want)
			}
		}
	}
}

// A training trace's tables give each time forward / backward (the traced backward, the
// fused backward's estimate, its saving), the share of GPU busy of both savings, and the
// total says how much of it is the backward's; an inference trace's keep one column each.
func TestWriteTextTraining(t *testing.T) {
	r, _, err := Run(filepath.Join(shared.Require(t, "traces", "h200"), "gpt2_train_bf16.json.gz"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := r.Opportunities[0]
	if o.EstBackwardSavingUs <= 0 || r.Totals.EstBackwardSavingUs <= 0 {
		t.Fatalf("no backward saving: %+v, totals %+v", o, r.Totals)
	}
	inf, _, err := Run(bundled, Options{NTop: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range []bool{false, true} {
		var b, ib bytes.Buffer
		if err := r.WriteText(&b, md); err != nil {
			t.Fatal(err)
		}
		if err := inf.WriteText(&ib, md); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"GPU µs fwd / bwd", "est fused µs fwd / bwd", "est saving µs fwd / bwd", "% busy (fwd + bwd)",
			fwdBwd(o.GPUTimeUs, o.BackwardGPUTimeUs), fwdBwd(o.EstFusedUs, o.EstFusedBackwardUs), fwdBwd(o.EstSavingUs, o.EstBackwardSavingUs),
			pct((o.EstSavingUs + o.EstBackwardSavingUs) / r.Trace.GPUBusyUs * 100),
			"µs of it in the backward"} {
			if !strings.Contains(out, want) {
				t.Errorf("markdown %v: %q missing", md, want)
			}
		}
		if s := ib.String(); strings.Contains(s, "fwd / bwd") || strings.Contains(s, "in the backward") {
			t.Errorf("markdown %v: the inference trace's tables split forward and backward", md)
		}
	}
}
