package annotate

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/trace"
)

// biasGelu is a Kineto trace with one bias_gelu chain (the add of a bias after an mm, then
// gelu: the chain is add and gelu), its
// timestamps relative to baseTimeNanoseconds and with fractions of a microsecond.
const biasGelu = `{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
  "record_shapes": 1,
  "traceEvents": [
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 9, "ts": 100.5, "dur": 10,
   "args": {"External id": 1, "Input Dims": [[1024, 768], [768, 3072]], "Input type": ["c10::BFloat16", "c10::BFloat16"], "Concrete Inputs": ["", ""]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 9, "ts": 120.25, "dur": 10,
   "args": {"External id": 2, "Input Dims": [[1024, 3072], [3072], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"], "Concrete Inputs": ["", "", "1"]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::gelu", "pid": 7, "tid": 9, "ts": 140.125, "dur": 10,
   "args": {"External id": 3, "Input Dims": [[1024, 3072], []], "Input type": ["c10::BFloat16", "str"], "Concrete Inputs": ["", "tanh"]}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 9, "ts": 101, "dur": 2, "args": {"correlation": 11}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 104, "dur": 30, "args": {"correlation": 11, "device": 0}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 9, "ts": 121, "dur": 2, "args": {"correlation": 12}},
  {"ph": "X", "cat": "kernel", "name": "add_kernel", "pid": 0, "tid": 7, "ts": 135, "dur": 8, "args": {"correlation": 12, "device": 0}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 9, "ts": 141, "dur": 2, "args": {"correlation": 13}},
  {"ph": "X", "cat": "kernel", "name": "gelu_kernel", "pid": 0, "tid": 7, "ts": 145, "dur": 8, "args": {"correlation": 13, "device": 0}}
  ],
  "baseTimeNanoseconds": 1000000000000,
  "traceName": "x"
}`

func writeTrace(t *testing.T, dir, name, text string, gz bool) string {
	t.Helper()
	p := filepath.Join(dir, name)
	b := []byte(text)
	if gz {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		b = buf.Bytes()
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 1 && b[0] == 0x1f && b[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(zr); err != nil {
			t.Fatal(err)
		}
		b = buf.Bytes()
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	return v
}

func TestWriteMarksTheChain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gzIn      bool
		out       string
		wantGzOut bool
	}{
		{"json to json", false, "out.json", false},
		{"gzip to json", true, "out.json", false},
		{"json to gzip", false, "out.json.gz", true},
		{"gzip to gzip", true, "out.json.gz", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := writeTrace(t, dir, "in.json", biasGelu, tc.gzIn)
			traces, err := trace.Load(in)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, tc.out)
			if err := Write(out, in, traces, Options{}); err != nil {
				t.Fatal(err)
			}
			if raw, _ := os.ReadFile(out); (len(raw) > 1 && raw[0] == 0x1f && raw[1] == 0x8b) != tc.wantGzOut {
				t.Errorf("gzip output %v, want %v", !tc.wantGzOut, tc.wantGzOut)
			}
			got := readJSON(t, out)
			var orig map[string]any
			json.Unmarshal([]byte(biasGelu), &orig)
			for k, v := range orig {
				if k != "traceEvents" && !reflect.DeepEqual(got[k], v) {
					t.Errorf("%s changed: %v, was %v", k, got[k], v)
				}
			}
			if len(got) != len(orig) {
				t.Errorf("%d top-level keys, was %d", len(got), len(orig))
			}
			evs, _ := got["traceEvents"].([]any)
			old := orig["traceEvents"].([]any)
			if len(evs) < len(old) || !reflect.DeepEqual(evs[:len(old)], old) {
				t.Fatalf("original events not kept as they were")
			}
			added := evs[len(old):]
			var slice, start, finish map[string]any
			for _, e := range added {
				e := e.(map[string]any)
				switch e["ph"] {
				case "X":
					slice = e
				case "s":
					start = e
				case "f":
					finish = e
				}
			}
			if slice == nil || start == nil || finish == nil {
				t.Fatalf("want a slice and a flow, added %v", added)
			}
			want := map[string]any{"ph": "X", "cat": "fuseadvise", "name": "bias_gelu #1", "pid": 8.0, "tid": 1.0,
				"ts": 120.25, "dur": 29.875, "args": map[string]any{"pattern": "bias_gelu", "instance": 1.0,
					"est_saving_us": slice["args"].(map[string]any)["est_saving_us"], "counted": true}}
			if !reflect.DeepEqual(slice, want) {
				t.Errorf("slice %v\nwant %v", slice, want)
			}
			if s, _ := slice["args"].(map[string]any)["est_saving_us"].(float64); s <= 0 {
				t.Errorf("est_saving_us %v, want > 0", s)
			}
			if start["ts"] != 120.25 || start["pid"] != 8.0 || start["id"] != finish["id"] {
				t.Errorf("flow start %v (finish %v)", start, finish)
			}
			if finish["ts"] != 120.25 || finish["pid"] != 7.0 || finish["tid"] != 9.0 || finish["bp"] != "e" {
				t.Errorf("flow finish %v: want the add op (pid 7, tid 9, ts 120.25), bound to it", finish)
			}
		})
	}
}

func TestWriteRankFolder(t *testing.T) {
	dir := t.TempDir()
	ranks := filepath.Join(dir, "ranks")
	os.Mkdir(ranks, 0o755)
	writeTrace(t, ranks, "rank0.json", strings.Replace(biasGelu, `"traceName"`, `"distributedInfo": {"rank": 0}, "traceName"`, 1), false)
	writeTrace(t, ranks, "rank1.json.gz", strings.Replace(biasGelu, `"traceName"`, `"distributedInfo": {"rank": 1}, "traceName"`, 1), true)
	traces, err := trace.Load(ranks)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "marked")
	if err := Write(out, ranks, traces, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"rank0.json", "rank1.json.gz"} {
		evs := readJSON(t, filepath.Join(out, name))["traceEvents"].([]any)
		if last := evs[len(evs)-1].(map[string]any); last["ph"] != "f" {
			t.Errorf("%s: last event %v, want the flow's end", name, last)
		}
	}
	if err := Write(out, ranks, traces, Options{}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("existing folder: %v", err)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	in := writeTrace(t, dir, "in.json", biasGelu, false)
	traces, err := trace.Load(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, out string
		opts      Options
		want      string
	}{
		{"unknown pattern", filepath.Join(dir, "a.json"), Options{Pattern: "nope"}, `unknown pattern "nope"`},
		{"out is a folder", dir, Options{}, dir},
		{"missing execution trace", filepath.Join(dir, "b.json"), Options{ET: filepath.Join(dir, "none.et.json")}, "none.et.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(tc.out, in, traces, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line with %q", err, tc.want)
			}
			if tc.out != dir {
				if _, err := os.Stat(tc.out); err == nil {
					t.Errorf("%s written despite the error", tc.out)
				}
			}
		})
	}
}

func TestMicros(t *testing.T) {
	for ns, want := range map[int64]string{0: "0", 1: "0.001", 1500: "1.5", 100_000: "100", -2_250: "-2.25", 120: "0.12"} {
		if got := string(micros(ns)); got != want {
			t.Errorf("micros(%d) = %s, want %s", ns, got, want)
		}
	}
}
