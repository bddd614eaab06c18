package report

import (
	"strings"
	"testing"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// A trace whose only chains are generic ones (no catalog opportunity) still has its total.
func TestTotalsGenericOnly(t *testing.T) {
	a := &patterns.Report{Opportunities: []patterns.Opportunity{},
		Totals: &patterns.Totals{EstSavingUs: 120, Instances: 3, SavingPctOfGPUBusy: 4}}
	a.Trace.GPUBusyUs = 3000
	if got := TotalsOf(a).Total; !strings.Contains(got, "120") || !strings.Contains(got, "3 chains") {
		t.Errorf("total %q: want the generic chains' 120 µs from 3 chains", got)
	}
	a.Totals = nil
	if got := TotalsOf(a).Total; got != "" {
		t.Errorf("no chain at all: total %q, want none", got)
	}
}
