package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeTemp(t testing.TB, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	data := []byte(text)
	if strings.HasSuffix(name, ".gz") {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		data = b.Bytes()
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// kineto is a small trace in Kineto's layout: metadata, then the events, one per
// "\n  {" line, then trailing metadata.
const kineto = `{
  "schemaVersion": 1,
  "deviceProperties": [
    {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150000000000, "computeMajor": 9, "computeMinor": 0, "numSms": 132}
  ],
  "record_shapes": 1,
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1000000000000,
  "traceEvents": [
  {
    "ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 10, "tid": 11,
    "ts": 100.000, "dur": 900.000,
    "args": {"External id": 1, "Record function id": 1, "Ev Idx": 0}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 10, "tid": 11,
    "ts": 110.500, "dur": 100.250,
    "args": {"External id": 2, "Record function id": 7, "Ev Idx": 1, "Sequence number": 5, "Fwd thread id": 0,
      "Input Dims": [[8, 16], [32, 16], [32]], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],
      "Input Strides": [[16, 1], [16, 1], [1]], "Concrete Inputs": ["", "", ""]}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 10, "tid": 11,
    "ts": 110.500, "dur": 90.000,
    "args": {"External id": 3, "Ev Idx": 2, "Sequence number": 5, "Fwd thread id": 0,
      "Input Dims": [[32], [8, 16], [16, 32], [], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
      "Concrete Inputs": ["", "", "", "1", "1"]}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
    "ts": 120.000, "dur": 5.000,
    "args": {"External id": 3, "cbid": 211, "correlation": 100}
  },
  {
    "ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7,
    "ts": 130.000, "dur": 20.000,
    "args": {"External id": 3, "device": 0, "stream": 7, "correlation": 100, "grid": [4, 1, 1], "block": [128, 1, 1]}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 10, "tid": 11,
    "ts": 300.000, "dur": 50.000,
    "args": {"External id": 4, "Ev Idx": 3, "Input Dims": [[[1, 559, 32], [1, 559, 32], "..."], []], "Input type": ["TensorList", "Scalar"], "Concrete Inputs": ["", "-1"]}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "aten::view", "pid": 10, "tid": 11,
    "ts": 360.000, "dur": 5.000,
    "args": {"External id": 5, "Ev Idx": 4, "Input Dims": [[2, 3], []], "Input type": ["float", "ScalarList"], "Concrete Inputs": ["", "[3, 2]"], "Comms Id": 99999999999999999999}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 10, "tid": 11,
    "ts": 362.000, "dur": 1.000,
    "args": {"correlation": 200}
  },
  {
    "ph": "X", "cat": "kernel", "name": "graph_k1", "pid": 0, "tid": 7,
    "ts": 400.000, "dur": 10.000, "args": {"correlation": 200, "stream": 7}
  },
  {
    "ph": "X", "cat": "kernel", "name": "graph_k2", "pid": 0, "tid": 7,
    "ts": 405.000, "dur": 10.000, "args": {"correlation": 200, "stream": 7}
  },
  {
    "ph": "X", "cat": "kernel", "name": "early_kernel", "pid": 0, "tid": 7,
    "ts": 50.000, "dur": 10.000, "args": {"correlation": 5, "stream": 7}
  },
  {
    "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8,
    "ts": 415.000, "dur": 10.000, "args": {"correlation": 300, "bytes": 4096, "stream": 8}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 11,
    "ts": 363.000, "dur": 1.000, "args": {"correlation": 300}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 10, "tid": 11,
    "ts": 450.000, "dur": 10.000, "args": {"correlation": 400}
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 10, "tid": 11,
    "ts": 440.000, "dur": 5.000, "args": {"correlation": 401}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: AddmmBackward0", "pid": 10, "tid": 12,
    "ts": 500.000, "dur": 100.000, "args": {"Sequence number": 5, "Fwd thread id": 1, "Ev Idx": 5}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "AddmmBackward0", "pid": 10, "tid": 12,
    "ts": 501.000, "dur": 90.000, "args": {"Sequence number": 5, "Fwd thread id": 1, "Ev Idx": 6}
  },
  {
    "ph": "X", "cat": "python_function", "name": "model.py(12): forward", "pid": 10, "tid": 11,
    "ts": 105.000, "dur": 300.000, "args": {"Python id": 3, "Python parent id": null}
  },
  {
    "ph": "X", "cat": "cpu_op", "name": "neg", "pid": 10, "tid": 11,
    "ts": -5.000, "dur": 1.000, "args": null
  },
  {
    "name": "thread_name", "ph": "M", "pid": 10, "tid": 11, "args": {"name": "thread 11 (python)"}
  },
  {
    "ph": "f", "id": 100, "pid": 0, "tid": 7, "ts": 130.000, "cat": "ac2g", "name": "ac2g", "bp": "e"
  }
  ],
  "distributedInfo": {"backend": "nccl", "rank": 2, "world_size": 4},
  "traceName": "x.json"
}`

func TestOpenKineto(t *testing.T) {
	for _, name := range []string{"k.json", "k.json.gz"} {
		t.Run(name, func(t *testing.T) {
			tr, err := Open(writeTemp(t, name, kineto))
			if err != nil {
				t.Fatal(err)
			}
			checkKineto(t, tr)
		})
	}
	// The same trace compacted onto one line.
	t.Run("compact", func(t *testing.T) {
		compact := strings.NewReplacer("\n", "", "  ", "").Replace(kineto)
		tr, err := Open(writeTemp(t, "c.json", compact))
		if err != nil {
			t.Fatal(err)
		}
		checkKineto(t, tr)
	})
}

func checkKineto(t *testing.T, tr *Trace) {
	t.Helper()
	const base = 1000000000000
	if tr.Rank != 2 || tr.WorldSize != 4 || tr.BaseTimeNs != base {
		t.Errorf("rank %d world %d base %d", tr.Rank, tr.WorldSize, tr.BaseTimeNs)
	}
	if len(tr.Devices) != 1 || tr.Devices[0].NumSMs != 132 || tr.Devices[0].ComputeMajor != 9 || tr.Devices[0].Name != "NVIDIA H200" {
		t.Errorf("devices %+v", tr.Devices)
	}
	if tr.Meta["record_shapes"] != "1" || tr.Meta["traceName"] != "x.json" || tr.Meta["displayTimeUnit"] != "ms" {
		t.Errorf("meta %v", tr.Meta)
	}
	byName := map[string]int32{}
	for i, op := range tr.Ops {
		byName[op.Name] = int32(i)
	}
	lin, addmm := byName["aten::linear"], byName["aten::addmm"]
	if op := tr.Ops[lin]; op.Start != base+110500 || op.Dur != 100250 || op.RecordFunctionID != 7 {
		t.Errorf("linear: %+v", op)
	}
	if tr.Ops[addmm].Parent != lin || tr.Ops[lin].Parent != byName["ProfilerStep#3"] {
		t.Errorf("tree: addmm parent %d (want %d), linear parent %d", tr.Ops[addmm].Parent, lin, tr.Ops[lin].Parent)
	}
	if in := tr.Ops[lin].Inputs; len(in) != 3 || in[0].Type != "c10::BFloat16" || len(in[1].Dims) != 2 || in[1].Dims[0] != 32 || in[1].Strides[0] != 16 {
		t.Errorf("linear inputs %+v", in)
	}
	if in := tr.Ops[addmm].Inputs; len(in) != 5 || in[3].Type != "Scalar" || in[3].Dims != nil || in[3].Concrete != "1" {
		t.Errorf("addmm inputs %+v", in)
	}
	if in := tr.Ops[byName["aten::cat"]].Inputs; len(in) != 2 || len(in[0].List) != 2 || in[0].List[1][1] != 559 || in[0].Dims != nil {
		t.Errorf("cat inputs %+v", in)
	}
	if in := tr.Ops[byName["aten::view"]].Inputs; len(in) != 2 || len(in[1].List) != 1 || in[1].List[0][0] != 3 {
		t.Errorf("view inputs %+v", in)
	}
	// Kernel -> cudaLaunchKernel -> innermost op (addmm, not linear).
	acts := map[string]Activity{}
	for _, a := range tr.Acts {
		acts[a.Name] = a
	}
	if a := acts["gemm_kernel"]; a.Op != addmm || a.Launch != base+120000 || a.Grid != [3]int32{4, 1, 1} || a.Graph || a.Stream != 7 {
		t.Errorf("gemm_kernel %+v", a)
	}
	if len(tr.Ops[addmm].Acts) != 1 {
		t.Errorf("addmm acts %v", tr.Ops[addmm].Acts)
	}
	view := byName["aten::view"]
	for _, n := range []string{"graph_k1", "graph_k2"} {
		// The graph launch at 362 is outside aten::view [360, 365)? No: inside it.
		if a := acts[n]; !a.Graph || a.Op != view {
			t.Errorf("%s %+v", n, a)
		}
	}
	if a := acts["early_kernel"]; a.Op != -1 || a.Launch != -1 {
		t.Errorf("early_kernel %+v", a)
	}
	if a := acts["Memcpy HtoD"]; a.Kind != ActMemcpy || a.Bytes != 4096 || a.Op != view || a.Stream != 8 {
		t.Errorf("memcpy %+v", a)
	}
	// fwd -> bwd: latest-starting forward op (addmm starts with linear; the later
	// in order wins) and the innermost backward op.
	bwd := byName["AddmmBackward0"]
	if tr.Ops[addmm].Bwd != bwd || tr.Ops[bwd].Fwd != addmm || tr.FwdBwdLinks() != 1 {
		t.Errorf("fwd-bwd: addmm.Bwd %d (want %d), links %d", tr.Ops[addmm].Bwd, bwd, tr.FwdBwdLinks())
	}
	if len(tr.Steps) != 1 || tr.Steps[0].Num != 3 || tr.Ops[addmm].Step != 0 || tr.Ops[bwd].Step != 0 || tr.Ops[byName["neg"]].Step != -1 {
		t.Errorf("steps %+v, addmm step %d, bwd step %d", tr.Steps, tr.Ops[addmm].Step, tr.Ops[bwd].Step)
	}
	if len(tr.Python) != 1 || tr.Ops[addmm].Py != 0 || tr.Ops[bwd].Py != -1 || tr.Python[0].Thread < 0 {
		t.Errorf("python %+v, addmm.Py %d", tr.Python, tr.Ops[addmm].Py)
	}
	if op := tr.Ops[byName["neg"]]; op.Start != base {
		t.Errorf("negative ts not clamped: %d", op.Start)
	}
	if tr.Threads[0].Name != "thread 11 (python)" || tr.Threads[0].Tid != "11" {
		t.Errorf("threads %+v", tr.Threads)
	}
	if s := tr.Threads[0].Syncs; len(s) != 2 || s[0] != base+440000 || s[1] != base+450000 || tr.Threads[1].Syncs != nil {
		t.Errorf("syncs %v %v", s, tr.Threads[1].Syncs)
	}
	if tr.KernelCount() != 4 || tr.LaunchCount() != 2 {
		t.Errorf("kernels %d launches %d", tr.KernelCount(), tr.LaunchCount())
	}
	// Busy: early [50,60), gemm [130,150), graph [400,415) union, memcpy [415,425).
	if got := tr.GPUBusyNs(); got != 10000+20000+15000+10000 {
		t.Errorf("busy %d", got)
	}
	want := []string{"1 GPU activities have no runtime launch event", "1 negative ts/dur values clamped to 0"}
	for _, w := range want {
		found := false
		for _, got := range tr.Warnings {
			found = found || strings.HasPrefix(got, w)
		}
		if !found {
			t.Errorf("warning %q missing in %q", w, tr.Warnings)
		}
	}
}

// Legacy and old-schema variants.
func TestOpenVariants(t *testing.T) {
	tests := []struct {
		name, text string
		check      func(t *testing.T, tr *Trace)
	}{
		{"legacy array", `[{"name": "aten::add", "ph": "X", "ts": 10, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
			{"name": "aten::mul", "ph": "X", "ts": 20, "dur": 5, "tid": 1, "pid": "CPU functions", "args": {}},
			{"name": "launch", "ph": "s", "ts": 20, "tid": 1, "pid": "CPU functions", "id": 1, "cat": "cpu_to_cuda", "args": {}}]`,
			func(t *testing.T, tr *Trace) {
				if len(tr.Ops) != 2 || len(tr.Acts) != 0 || tr.Ops[1].Start != 20000 || tr.Threads[0].Pid != "CPU functions" {
					t.Errorf("ops %+v", tr.Ops)
				}
			}},
		{"pt1.9 schema", `{"traceEvents": [
			{"ph": "X", "cat": "Operator", "name": "aten::relu", "pid": 25738, "tid": "25738", "ts": 1623142623531600, "dur": 50, "args": {"Input dims": [[2, 3]], "Input type": ["float"]}},
			{"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 25738, "tid": "25738", "ts": 1623142623531610, "dur": 5, "args": {"correlation": 34441, "external id": 544}},
			{"ph": "X", "cat": "Kernel", "name": "relu_kernel", "pid": 0, "tid": "stream 7", "ts": 1623142623531625, "dur": 2, "args": {"correlation": 34441, "external id": 544}},
			{"ph": "X", "cat": "Memset", "name": "Memset", "pid": 0, "tid": "stream 7", "ts": 1623142623531630, "dur": 1, "args": {"bytes": 8}}]}`,
			func(t *testing.T, tr *Trace) {
				if len(tr.Acts) != 2 || tr.Acts[0].Op != 0 || tr.Acts[0].Stream != 7 || tr.Acts[0].ExternalID != 544 || tr.Acts[1].Kind != ActMemset {
					t.Errorf("acts %+v", tr.Acts)
				}
				if in := tr.Ops[0].Inputs; len(in) != 1 || in[0].Dims[1] != 3 {
					t.Errorf("inputs %+v", in)
				}
				if tr.Ops[0].Start != 1623142623531600000 {
					t.Errorf("start %d", tr.Ops[0].Start)
				}
			}},
		{"rocm", `{"traceEvents": [
			{"ph": "X", "cat": "cpu_op", "name": "aten::index_select", "pid": 6240, "tid": 6240, "ts": 2204338330200.000, "dur": 20, "args": {}},
			{"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 6240, "tid": 6240, "ts": 2204338330208.135, "dur": 10.154,
			 "args": {"External id": 9, "kernel": "indexSelectLargeIndex", "grid": [141, 1, 1], "block": [256, 1, 1], "correlation": 802}},
			{"ph": "X", "cat": "kernel", "name": "indexSelectLargeIndex", "pid": 2, "tid": 0, "ts": 2204338330300.5, "dur": 3, "args": {"correlation": 802, "kind": "Dispatch Kernel"}}]}`,
			func(t *testing.T, tr *Trace) {
				a := tr.Acts[0]
				if a.Op != 0 || a.Grid != [3]int32{141, 1, 1} || a.Block[0] != 256 || a.Device != 2 || a.Start != 2204338330300500 || a.Launch != 2204338330208135 {
					t.Errorf("act %+v", a)
				}
			}},
		{"float us with ns fraction", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1712195495519695.8, "dur": 63.8134}]}`,
			func(t *testing.T, tr *Trace) {
				if tr.Ops[0].Start != 1712195495519695800 || tr.Ops[0].Dur != 63813 {
					t.Errorf("op %+v", tr.Ops[0])
				}
				if tr.Steps[0].Num != -1 || tr.Steps[0].Dur != 63813 || tr.Ops[0].Step != 0 {
					t.Errorf("steps %+v", tr.Steps)
				}
				if len(tr.Warnings) == 0 || !strings.HasPrefix(tr.Warnings[0], "no GPU activities") {
					t.Errorf("warnings %q", tr.Warnings)
				}
			}},
		{"fwdbwd flows", `{"traceEvents": [
			{"ph": "X", "cat": "cpu_op", "name": "aten::rms_norm", "pid": 1, "tid": 1, "ts": 10, "dur": 10, "args": {"Sequence number": 3, "Fwd thread id": 0}},
			{"ph": "X", "cat": "cpu_op", "name": "aten::_fused_rms_norm", "pid": 1, "tid": 1, "ts": 11, "dur": 5, "args": {"Sequence number": 3, "Fwd thread id": 0}},
			{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 11, "cat": "fwdbwd", "name": "fwdbwd"},
			{"ph": "X", "cat": "cpu_op", "name": "evaluate_function: FusedRmsNormBackward0", "pid": 1, "tid": 2, "ts": 50, "dur": 10, "args": {"Sequence number": 3, "Fwd thread id": 1}},
			{"ph": "X", "cat": "cpu_op", "name": "FusedRmsNormBackward0", "pid": 1, "tid": 2, "ts": 50, "dur": 9, "args": {"Sequence number": 3, "Fwd thread id": 1}},
			{"ph": "f", "id": 1, "pid": 1, "tid": 2, "ts": 50, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"}]}`,
			func(t *testing.T, tr *Trace) {
				f, b := tr.Ops[1], tr.Ops[3]
				if f.Name != "aten::_fused_rms_norm" || b.Name != "FusedRmsNormBackward0" || f.Bwd != 3 || b.Fwd != 1 || tr.Ops[0].Bwd != -1 {
					t.Errorf("ops %+v", tr.Ops)
				}
			}},
		{"metadata after events and string escapes", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a\"b\u00b5\\", "pid": "1", "tid": "x", "ts": 1, "dur": 1}], "baseTimeNanoseconds": 5000, "distributedInfo": {"rank": 1}}`,
			func(t *testing.T, tr *Trace) {
				if tr.Ops[0].Name != "a\"bµ\\" || tr.Ops[0].Start != 6000 || tr.Rank != 1 {
					t.Errorf("op %+v rank %d", tr.Ops[0], tr.Rank)
				}
			}},
		{"raw newline in a name tolerated", "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\nb\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1}]}",
			func(t *testing.T, tr *Trace) {
				if tr.Ops[0].Name != "a\nb" {
					t.Errorf("name %q", tr.Ops[0].Name)
				}
			}},
		{"invalid utf8 repaired", "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\xffb\", \"pid\": 1, \"tid\": 1, \"ts\": 1, \"dur\": 1}]}",
			func(t *testing.T, tr *Trace) {
				if tr.Ops[0].Name != "a\uFFFDb" || len(tr.Warnings) < 2 {
					t.Errorf("name %q warnings %q", tr.Ops[0].Name, tr.Warnings)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := Open(writeTemp(t, "t.json", tc.text))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, tr)
		})
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		name, text string
		off        int64 // -2: any
		msg        string
	}{
		{"empty file", "", 0, "empty file"},
		{"not json", "hello", 0, "not a JSON trace"},
		{"not a trace", `{"a": 1}`, 0, "no traceEvents"},
		{"traceEvents not array", `{"traceEvents": 1}`, 16, "traceEvents must be an array"},
		{"truncated", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},`, 98, "unexpected end of input"},
		{"truncated in string", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a`, 54, "unterminated string"},
		{"never closes", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}`, 97, "unexpected end of input"},
		{"NaN ts", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": NaN, "dur": 1}]}`, 85, "unexpected 'N'"},
		{"string ts", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": "x", "dur": 1}]}`, 85, "invalid ts"},
		{"huge ts", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 99999999999999999999, "dur": 1}]}`, 85, "invalid ts"},
		{"unescaped quote", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a"b", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}`, 57, "unexpected 'b'"},
		{"bare N/A", `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": N/A, "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}`, 54, "unexpected 'N'"},
		{"empty trace", `{"traceEvents": []}`, -1, "empty trace"},
		{"trailing garbage", `{"traceEvents": [{}]} x`, 22, "unexpected data after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTemp(t, "bad.json", tc.text)
			_, err := Open(p)
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if te.Path != p || te.Offset != tc.off || !strings.Contains(te.Msg, tc.msg) {
				t.Errorf("got %q (offset %d), want offset %d and %q", err, te.Offset, tc.off, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
		})
	}
}

func TestOpenDir(t *testing.T) {
	dir := t.TempDir()
	ev := `{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}`
	files := map[string]string{
		"w1.1.pt.trace.json": `{"distributedInfo": {"rank": 1}, "traceEvents": [` + ev + `]}`,
		"w0.1.pt.trace.json": `{"distributedInfo": {"rank": 0}, "traceEvents": [` + ev + `]}`,
		"other.json":         `{"distributedInfo": {"rank": 2}, "traceEvents": [` + ev + `]}`,
		"config.json":        `{"lr": 1}`,
		"rank0.et.json":      `{"nodes": []}`,
		"notes.txt":          "x",
	}
	for n, text := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range ts {
		got = append(got, filepath.Base(tr.Path))
	}
	if strings.Join(got, " ") != "w0.1.pt.trace.json w1.1.pt.trace.json other.json" {
		t.Errorf("got %v", got)
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Errorf("no error for a missing file")
	}
}

func gz(text string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(text))
	zw.Close()
	return b.Bytes()
}

// TestOpenGzipMembers reads a two-member gzip file whose ISIZE trailer (of the
// last member only) understates the size, so the buffer has to grow.
func TestOpenGzipMembers(t *testing.T) {
	head := `{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}` + strings.Repeat(" ", 1<<20)
	data := append(gz(head), gz(`]}`)...)
	p := filepath.Join(t.TempDir(), "m.json.gz")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Ops) != 1 {
		t.Errorf("ops %d", len(tr.Ops))
	}
	// Truncated gzip stream.
	full := gz(kineto)
	if err := os.WriteFile(p, full[:len(full)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(p)
	var te *Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "gzip") {
		t.Errorf("truncated gzip: got %v", err)
	}
}

func TestSortParallel(t *testing.T) {
	x := make([][2]int, 200000)
	seed := uint32(1)
	for i := range x {
		seed = seed*1664525 + 1013904223
		x[i] = [2]int{int(seed >> 20), i} // many equal first fields; second breaks ties
	}
	cmp := func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	}
	want := slices.Clone(x)
	slices.SortFunc(want, cmp)
	if got := sortParallel(x, cmp); !slices.Equal(got, want) {
		t.Errorf("sortParallel differs from slices.SortFunc")
	}
}

// TestCheckJob: a directory is one job's ranks; each way it is not gives a one-line error
// naming the odd file.
func TestCheckJob(t *testing.T) {
	ev := func(ts int) string {
		return fmt.Sprintf(`{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": %d, "dur": 10}`, ts)
	}
	rank := func(r, world int, gpu string, ts int) string {
		dev := ""
		if gpu != "" {
			dev = fmt.Sprintf(`"deviceProperties": [{"id": 0, "name": %q}], `, gpu)
		}
		dist := ""
		if r >= 0 {
			dist = fmt.Sprintf(`"distributedInfo": {"rank": %d, "world_size": %d}, `, r, world)
		}
		return "{" + dev + dist + `"traceEvents": [` + ev(ts) + `]}`
	}
	h100 := "NVIDIA H100"
	tests := []struct {
		name  string
		files map[string]string
		bad   string // the file the error names, "" when the directory is one job
		msg   string
	}{
		{"one job", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(1, 2, h100, 105)}, "", ""},
		{"no rank", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(-1, 0, h100, 100)}, "b.json", "no distributedInfo rank"},
		{"unrelated files", map[string]string{"a.json": rank(-1, 0, h100, 100), "b.json": rank(-1, 0, "AMD MI300X", 100)}, "a.json", "no distributedInfo rank"},
		{"duplicate rank", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(0, 2, h100, 100)}, "b.json", "rank 0 again (also a.json)"},
		{"rank past world", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(2, 2, h100, 100)}, "b.json", "rank 2 of a world of 2"},
		{"world sizes", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(1, 4, h100, 100)}, "b.json", "world size 4, rank 0 (a.json) has 2"},
		{"gpu models", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(1, 2, "NVIDIA A100", 100)}, "b.json", "recorded on NVIDIA A100, rank 0 (a.json) on NVIDIA H100"},
		{"other time", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(1, 2, h100, 5_000_000)}, "b.json", "do not overlap rank 0 (a.json)'s in time (5.0 s apart)"},
		{"too many", map[string]string{"a.json": rank(0, 2, h100, 100), "b.json": rank(1, 0, h100, 100), "c.json": rank(2, 0, h100, 100)}, "c.json", "3 traces for a world of 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, text := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ts, err := Load(dir)
			if tc.bad == "" {
				if err != nil || len(ts) != len(tc.files) {
					t.Fatalf("one job: %d traces, %v", len(ts), err)
				}
				return
			}
			var te *Error
			if !errors.As(err, &te) || filepath.Base(te.Path) != tc.bad || !strings.Contains(te.Msg, tc.msg) {
				t.Fatalf("got %v, want an error naming %s with %q", err, tc.bad, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") || ts != nil {
				t.Errorf("multi-line error or traces returned: %q", err)
			}
		})
	}
}
