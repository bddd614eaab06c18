package patterns

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/fuseadvise/fuseadvise/trace"
)

// Forward passes of an inference loop that the trace does not mark.
//
// A loop such as `for x in batches: y = model(x)` profiled without a schedule has no
// ProfilerStep, no optimizer step and often no synchronize between its iterations, and when
// the model is a stack of identical blocks with nothing before or after them, its op
// sequence is the same as one pass through more blocks: only the host time between passes
// tells them apart (returning from the model, the loop, calling it again: on the H200 trace
// of 3 passes of 4 blocks, 82-88 us between passes against 41-66 us between blocks).
//
// passBarriers looks for that on each thread whose ops carry no iteration boundary yet: the
// op sequence must be an exact repetition of one unit (name, input shapes and types of
// every op), at least passMinUnits times, and the host gaps between units must split it
// into at least passMinPasses equal runs of units: every gap at a run boundary longer than
// passGapRatio times, and passGapMinNs more than, every other gap. Then the first op of each run after the first starts
// a new iteration (no value flows across it). Anything less regular, and nothing is marked.
const (
	passMinUnits  = 6
	passMinPasses = 3
	passGapRatio  = 1.2
	passGapMinNs  = 5000 // and at least 5 us longer: a ratio of tiny gaps is noise
)

// passBarriers marks, in barrier (indexed like nodes), the first node of each forward pass
// after the first it finds, and returns how many passes it found on the thread where it
// found them (0: none).
func passBarriers(t *trace.Trace, nodes []int32, barrier []bool) (passes int) {
	for lo := 0; lo < len(nodes); {
		hi := lo
		marked := false
		for hi < len(nodes) && t.Ops[nodes[hi]].Thread == t.Ops[nodes[lo]].Thread {
			marked = marked || (hi > lo && barrier[hi])
			hi++
		}
		if !marked {
			if p := threadPasses(t, nodes[lo:hi], barrier[lo:hi]); p > passes {
				passes = p
			}
		}
		lo = hi
	}
	return passes
}

// threadPasses is passBarriers on one thread's nodes.
func threadPasses(t *trace.Trace, nodes []int32, barrier []bool) int {
	n := len(nodes)
	if n < passMinUnits {
		return 0
	}
	sig := make([]uint64, n)
	for i, id := range nodes {
		sig[i] = opSignature(&t.Ops[id])
	}
	// the smallest period of sig (prefix function): the unit the sequence repeats
	pi := make([]int, n)
	for i := 1; i < n; i++ {
		k := pi[i-1]
		for k > 0 && sig[i] != sig[k] {
			k = pi[k-1]
		}
		if sig[i] == sig[k] {
			k++
		}
		pi[i] = k
	}
	period := n - pi[n-1]
	units := n / period
	if n%period != 0 || units < passMinUnits {
		return 0
	}
	// host time between consecutive units
	gap := make([]int64, units) // gap[u]: before unit u (u >= 1)
	for u := 1; u < units; u++ {
		prev := &t.Ops[nodes[u*period-1]]
		gap[u] = t.Ops[nodes[u*period]].Start - (prev.Start + prev.Dur)
	}
	bestD, bestRatio := 0, 0.0
	for d := 1; d <= units/passMinPasses; d++ {
		if units%d != 0 {
			continue
		}
		var minB, maxO int64 = -1, -1
		for u := 1; u < units; u++ {
			if u%d == 0 {
				if minB < 0 || gap[u] < minB {
					minB = gap[u]
				}
			} else if gap[u] > maxO {
				maxO = gap[u]
			}
		}
		if maxO <= 0 || minB <= 0 {
			continue // one unit per pass leaves nothing to compare with; or clock noise
		}
		if r := float64(minB) / float64(maxO); r >= passGapRatio && minB-maxO >= passGapMinNs && r > bestRatio {
			bestD, bestRatio = d, r
		}
	}
	if bestD == 0 {
		return 0
	}
	for u := bestD; u < units; u += bestD {
		barrier[u*period] = true
	}
	return units / bestD
}

// opSignature identifies an op by what inference sees of it: name, input types and shapes.
func opSignature(op *trace.Op) uint64 {
	h := fnv.New64a()
	var b [8]byte
	h.Write([]byte(op.Name))
	for _, in := range op.Inputs {
		h.Write([]byte{0})
		h.Write([]byte(in.Type))
		binary.LittleEndian.PutUint64(b[:], uint64(len(in.Dims)))
		h.Write(b[:])
		for _, d := range in.Dims {
			binary.LittleEndian.PutUint64(b[:], uint64(d))
			h.Write(b[:])
		}
	}
	return h.Sum64()
}
