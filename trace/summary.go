package trace

import (
	"cmp"
	"slices"
)

// EventCount returns the number of events of kind k in the file (KindOther
// counts metadata, flows, instants and unknown categories).
func (t *Trace) EventCount(k Kind) int {
	if int(k) >= numKinds {
		return 0
	}
	return t.stats.kinds[k]
}

// Events returns the number of events in the traceEvents array.
func (t *Trace) Events() int { return t.stats.events }

// KernelCount returns the number of kernel activities.
func (t *Trace) KernelCount() int {
	n := 0
	for i := range t.Acts {
		if t.Acts[i].Kind == ActKernel {
			n++
		}
	}
	return n
}

// LaunchCount returns the number of runtime events that launch GPU work (names
// containing "Launch": cudaLaunchKernel, cuLaunchKernel, cudaGraphLaunch,
// hipLaunchKernel, ...).
func (t *Trace) LaunchCount() int { return t.stats.launches }

// LaunchHostNs returns the median host duration of the trace's kernel launch calls
// (cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, ...; not cudaGraphLaunch) and their
// number; 0, 0 when there are none. Under a profiler these calls run slower than without.
func (t *Trace) LaunchHostNs() (median int64, n int) {
	d := slices.Clone(t.stats.launchNs)
	if len(d) == 0 {
		return 0, 0
	}
	slices.Sort(d)
	return d[len(d)/2], len(d)
}

// FwdBwdLinks returns the number of forward->backward op links.
func (t *Trace) FwdBwdLinks() int { return t.stats.fwdBwd }

type interval struct{ lo, hi int64 }

// unionNs returns the total length of the union of intervals (sorted in place).
func unionNs(iv []interval) int64 {
	slices.SortFunc(iv, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	var total int64
	cur := interval{-1 << 63, -1 << 63}
	for _, x := range iv {
		if x.lo > cur.hi {
			if cur.hi > cur.lo {
				total += cur.hi - cur.lo
			}
			cur = x
		} else if x.hi > cur.hi {
			cur.hi = x.hi
		}
	}
	if cur.hi > cur.lo {
		total += cur.hi - cur.lo
	}
	return total
}

// GPUBusyNs is the union of kernel, memcpy and memset intervals per device, summed
// over devices.
func (t *Trace) GPUBusyNs() int64 {
	var total int64
	for _, iv := range t.intervalsByDevice() {
		total += unionNs(iv)
	}
	return total
}

// intervalsByDevice returns the spans of the GPU activities of each device.
func (t *Trace) intervalsByDevice() map[int][]interval {
	byDev := map[int][]interval{}
	for i := range t.Acts {
		a := &t.Acts[i]
		byDev[a.Device] = append(byDev[a.Device], interval{a.Start, a.Start + a.Dur})
	}
	return byDev
}

// IdleNs returns, summed over steps and devices that ran anything, the time within
// each step when the device had no activity.
func (t *Trace) IdleNs() int64 {
	byDev := t.intervalsByDevice()
	var idle int64
	for _, s := range t.Steps {
		lo, hi := s.Start, s.Start+s.Dur
		for _, iv := range byDev {
			var clipped []interval
			for _, x := range iv {
				if x.hi > lo && x.lo < hi {
					clipped = append(clipped, interval{max(x.lo, lo), min(x.hi, hi)})
				}
			}
			idle += s.Dur - unionNs(clipped)
		}
	}
	return idle
}

// NameTime is a name with a count and a total time.
type NameTime struct {
	Name  string
	Count int
	Ns    int64
}

func top(m map[string]*NameTime, n int) []NameTime {
	out := make([]NameTime, 0, len(m))
	for _, v := range m {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b NameTime) int {
		if c := cmp.Compare(b.Ns, a.Ns); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// TopKernels returns the n kernels (by name) with the most total GPU time; n < 0
// returns all.
func (t *Trace) TopKernels(n int) []NameTime {
	m := map[string]*NameTime{}
	for i := range t.Acts {
		a := &t.Acts[i]
		if a.Kind != ActKernel {
			continue
		}
		v := m[a.Name]
		if v == nil {
			v = &NameTime{Name: a.Name}
			m[a.Name] = v
		}
		v.Count++
		v.Ns += a.Dur
	}
	return top(m, n)
}

// TopOps returns the n op names with the most inclusive GPU time: each activity's
// time counts once for the op that launched it and once for every distinct name
// among its ancestors. Count is the number of ops of that name.
func (t *Trace) TopOps(n int) []NameTime {
	m := map[string]*NameTime{}
	get := func(name string) *NameTime {
		v := m[name]
		if v == nil {
			v = &NameTime{Name: name}
			m[name] = v
		}
		return v
	}
	incl := make([]int64, len(t.Ops))
	for i := range t.Acts {
		if op := t.Acts[i].Op; op >= 0 {
			incl[op] += t.Acts[i].Dur
		}
	}
	// Children come after parents in Ops order: accumulate bottom-up.
	for i := len(t.Ops) - 1; i >= 0; i-- {
		if p := t.Ops[i].Parent; p >= 0 {
			incl[p] += incl[i]
		}
	}
	for i := range t.Ops {
		v := get(t.Ops[i].Name)
		v.Count++
		// Skip the time already counted by an ancestor of the same name.
		nested := false
		for p := t.Ops[i].Parent; p >= 0; p = t.Ops[p].Parent {
			if t.Ops[p].Name == t.Ops[i].Name {
				nested = true
				break
			}
		}
		if !nested {
			v.Ns += incl[i]
		}
	}
	return top(m, n)
}
