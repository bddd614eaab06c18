package trace

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"sort"
	"testing"
)

// The reference below decodes a trace the obvious way (encoding/json into maps)
// and recomputes what the parser derives, independently of its code.

type refEvent struct {
	ph, cat, name string
	pid, tid      string
	ts, dur       int64 // ns, without the base
	args          map[string]any
}

func refNs(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return 0
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0
	}
	r.Mul(r, big.NewRat(1000, 1))
	if r.Sign() < 0 {
		return 0
	}
	// Round half up: floor((num + den/2) / den).
	num := new(big.Int).Add(r.Num(), new(big.Int).Quo(r.Denom(), big.NewInt(2)))
	return num.Quo(num, r.Denom()).Int64()
}

func refID(v any) string { return fmt.Sprint(v) }

func refInt(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

func readRef(t *testing.T, path string) []refEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(zr)
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var out []refEvent
	for _, x := range doc["traceEvents"].([]any) {
		m := x.(map[string]any)
		e := refEvent{pid: refID(m["pid"]), tid: refID(m["tid"]), ts: refNs(m["ts"]), dur: refNs(m["dur"])}
		e.ph, _ = m["ph"].(string)
		e.cat, _ = m["cat"].(string)
		e.name, _ = m["name"].(string)
		e.args, _ = m["args"].(map[string]any)
		out = append(out, e)
	}
	return out
}

func TestAgainstReference(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes every shared trace with encoding/json (slow)")
	}
	for _, p := range sharedTraces(t) {
		t.Run(traceName(p), func(t *testing.T) {
			tr, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			evs := readRef(t, p)
			base := tr.BaseTimeNs
			var kernels, ops int
			type key struct {
				name, pid, tid string
				ts, dur        int64
			}
			var opEvs []refEvent
			runtimeByCorr := map[int64]refEvent{}
			busy := map[int64][]interval{}
			for _, e := range evs {
				if e.ph != "X" {
					continue
				}
				switch e.cat {
				case "kernel", "Kernel":
					kernels++
				case "cpu_op", "Operator", "user_annotation":
					ops++
					opEvs = append(opEvs, e)
				case "cuda_runtime", "cuda_driver", "Runtime":
					if c, ok := refInt(e.args["correlation"]); ok {
						if _, dup := runtimeByCorr[c]; !dup {
							runtimeByCorr[c] = e
						}
					}
				}
				switch e.cat {
				case "kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset":
					dev, _ := refInt(json.Number(e.pid))
					busy[dev] = append(busy[dev], interval{e.ts, e.ts + e.dur})
				}
			}
			if got := tr.KernelCount(); got != kernels {
				t.Errorf("kernels: got %d, reference %d", got, kernels)
			}
			if got := len(tr.Ops); got != ops {
				t.Errorf("ops: got %d, reference %d", got, ops)
			}
			var want int64
			for _, iv := range busy {
				want += unionNs(iv)
			}
			if got := tr.GPUBusyNs(); float64(abs(got-want)) > 0.001*float64(want) {
				t.Errorf("GPU busy: got %d ns, reference %d ns", got, want)
			}

			// Reference link: kernel -> runtime with its correlation -> the innermost
			// op on that pid/tid containing the launch (latest start, then shortest).
			byThread := map[[2]string][]refEvent{}
			for _, e := range opEvs {
				k := [2]string{e.pid, e.tid}
				byThread[k] = append(byThread[k], e)
			}
			refLink := func(rt refEvent) *refEvent {
				var best *refEvent
				for i, o := range byThread[[2]string{rt.pid, rt.tid}] {
					if o.ts <= rt.ts && (rt.ts < o.ts+o.dur || rt.ts == o.ts) {
						// Innermost: latest start, then shortest, then highest Ev Idx, then last in the file.
						if best == nil || o.ts > best.ts || (o.ts == best.ts && (o.dur < best.dur ||
							(o.dur == best.dur && refEvIdx(o) >= refEvIdx(*best)))) {
							best = &byThread[[2]string{rt.pid, rt.tid}][i]
						}
					}
				}
				return best
			}
			linked, checked := 0, 0
			for _, a := range tr.Acts {
				if a.Kind != ActKernel {
					continue
				}
				rt, ok := runtimeByCorr[a.Correlation]
				if !ok {
					if a.Op >= 0 {
						t.Errorf("kernel %.60q linked without a launch event", a.Name)
					}
					continue
				}
				checked++
				want := refLink(rt)
				if want == nil {
					if a.Op >= 0 {
						t.Errorf("kernel %.60q linked to %q; reference: no op", a.Name, tr.Ops[a.Op].Name)
					}
					continue
				}
				if a.Op < 0 {
					t.Errorf("kernel %.60q not linked; reference: %q", a.Name, want.name)
					continue
				}
				op := tr.Ops[a.Op]
				th := tr.Threads[op.Thread]
				got := key{op.Name, th.Pid, th.Tid, op.Start - base, op.Dur}
				w := key{want.name, want.pid, want.tid, want.ts, want.dur}
				if got != w {
					t.Errorf("kernel %.60q: linked to %+v, reference %+v", a.Name, got, w)
				}
				linked++
				if a.Launch-base != rt.ts {
					t.Errorf("kernel %.60q: launch %d, reference %d", a.Name, a.Launch-base, rt.ts)
				}
			}
			if checked > 0 && linked == 0 {
				t.Errorf("no kernel linked")
			}
			// Timestamps: the sorted multiset of op starts equals the reference.
			var gotTs, wantTs []int64
			for _, o := range tr.Ops {
				gotTs = append(gotTs, o.Start-base)
			}
			for _, e := range opEvs {
				wantTs = append(wantTs, e.ts)
			}
			sort.Slice(gotTs, func(i, j int) bool { return gotTs[i] < gotTs[j] })
			sort.Slice(wantTs, func(i, j int) bool { return wantTs[i] < wantTs[j] })
			for i := range gotTs {
				if i < len(wantTs) && gotTs[i] != wantTs[i] {
					t.Errorf("op start #%d: got %d, reference %d", i, gotTs[i], wantTs[i])
					break
				}
			}
		})
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func refEvIdx(e refEvent) int64 {
	for _, k := range []string{"Ev Idx", "Profiler Event Index"} {
		if v, ok := refInt(e.args[k]); ok {
			return v
		}
	}
	return -1
}
