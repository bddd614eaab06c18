package gpuprof

import (
	"fmt"
	"io"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Sample types, in the order of each sample's values.
const (
	GPUTime  = "gpu_time" // nanoseconds of GPU activity
	Launches = "launches" // number of GPU activities
	CPUTime  = "cpu_time" // nanoseconds of CPU op self time
)

// unlinked is the frame under which GPU work with no launching op is filed (launched before
// the profiling window, or by no recorded op).
const unlinked = "[no launching op]"

// Build makes one profile from the traces (one per rank; the rank is a label).
func Build(traces []*trace.Trace) (*profile.Profile, error) {
	b := &builder{
		p: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: GPUTime, Unit: "nanoseconds"},
				{Type: Launches, Unit: "count"},
				{Type: CPUTime, Unit: "nanoseconds"},
			},
			DefaultSampleType: GPUTime,
			PeriodType:        &profile.ValueType{Type: GPUTime, Unit: "nanoseconds"},
			Period:            1,
		},
		locs:  map[string]*profile.Location{},
		funcs: map[string]*profile.Function{},
	}
	for i, t := range traces {
		rank := t.Rank
		if rank < 0 {
			rank = i
		}
		b.addTrace(t, "r"+strconv.Itoa(rank))
	}
	if err := b.p.CheckValid(); err != nil {
		return nil, fmt.Errorf("building pprof profile: %v", err)
	}
	return b.p, nil
}

// Write builds the profile and writes it gzipped to w.
func Write(w io.Writer, traces []*trace.Trace) error {
	p, err := Build(traces)
	if err != nil {
		return err
	}
	return p.Write(w)
}

type builder struct {
	p     *profile.Profile
	locs  map[string]*profile.Location
	funcs map[string]*profile.Function
}

// loc returns the location of a frame named name; file is the Python file for Python frames.
func (b *builder) loc(name, file string, line int64) *profile.Location {
	key := name + "\x00" + file
	if l, ok := b.locs[key]; ok {
		return l
	}
	fn := b.funcs[key]
	if fn == nil {
		// SystemName stays empty: pprof would otherwise demangle kernel names and strip
		// their template arguments, merging different kernels.
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, Filename: file}
		b.funcs[key] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: fn, Line: line}}}
	b.locs[key] = l
	b.p.Location = append(b.p.Location, l)
	return l
}

// opStack appends the frames of op and its ancestors, innermost first, then the Python
// frames enclosing the outermost op.
func (b *builder) opStack(t *trace.Trace, op int32, stack []*profile.Location) []*profile.Location {
	py := int32(-1)
	for o := op; o >= 0; o = t.Ops[o].Parent {
		stack = append(stack, b.loc(t.Ops[o].Name, "", 0))
		if t.Ops[o].Py >= 0 {
			py = t.Ops[o].Py
		}
	}
	// py is now the frame enclosing the outermost op that has one: the Python stack sits
	// above the whole op stack.
	for f := py; f >= 0; f = t.Python[f].Parent {
		name, file, line := splitPyFrame(t.Python[f].Name)
		stack = append(stack, b.loc(name, file, line))
	}
	return stack
}

func (b *builder) addTrace(t *trace.Trace, rank string) {
	for i := range t.Acts {
		a := &t.Acts[i]
		var stack []*profile.Location
		stack = append(stack, b.loc(a.Name, "", 0))
		if a.Op >= 0 {
			stack = b.opStack(t, a.Op, stack)
		} else {
			stack = append(stack, b.loc(unlinked, "", 0))
		}
		b.p.Sample = append(b.p.Sample, &profile.Sample{
			Location: stack,
			Value:    []int64{a.Dur, 1, 0},
			Label: map[string][]string{
				"rank":   {rank},
				"device": {"gpu" + strconv.Itoa(a.Device)},
				"stream": {"s" + strconv.FormatInt(a.Stream, 10)},
			},
		})
	}
	for i := range t.Ops {
		op := &t.Ops[i]
		self := op.Dur
		for _, c := range op.Children {
			self -= t.Ops[c].Dur
		}
		if self <= 0 {
			continue
		}
		b.p.Sample = append(b.p.Sample, &profile.Sample{
			Location: b.opStack(t, int32(i), nil),
			Value:    []int64{0, 0, self},
			Label:    map[string][]string{"rank": {rank}},
		})
	}
}

// splitPyFrame splits a python_function name such as "models/gpt2.py(345): forward" into
// the function ("forward"), the file and the line, so pprof's source views work.
func splitPyFrame(s string) (name, file string, line int64) {
	open := -1
	for i := 0; i < len(s); i++ {
		if s[i] == '(' {
			open = i
		}
		if s[i] == ')' && open >= 0 && i+2 < len(s) && s[i+1] == ':' && s[i+2] == ' ' {
			n, err := strconv.ParseInt(s[open+1:i], 10, 64)
			if err != nil {
				return s, "", 0
			}
			return s[i+3:], s[:open], n
		}
	}
	return s, "", 0
}
