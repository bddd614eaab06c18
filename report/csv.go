package report

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fuseadvise/fuseadvise/bench"
)

// CSVHeader is Liger-Kernel's benchmark schema (benchmark/data/all_benchmark_data.csv).
var CSVHeader = []string{
	"kernel_name", "kernel_provider", "kernel_operation_mode", "metric_name", "metric_unit",
	"x_name", "x_label", "x_value", "y_value_50", "y_value_20", "y_value_80",
	"extra_benchmark_config_str", "gpu_name", "timestamp", "liger_version",
}

// The providers WriteCSV names, one row each per timed case.
const (
	ProviderFused   = "fuseadvise"
	ProviderEager   = "torch"
	ProviderCompile = "torch_compile"
)

// WriteCSV writes the timed cases of r in Liger-Kernel's benchmark CSV schema, so that
// Liger's benchmark tools can read them: one row per case and provider (fused, eager,
// torch.compile, and each library op that ran, under its bench name: "sdpa_cudnn", "flex",
// "rms_norm", ...), kernel_operation_mode the case's mode ("forward", "backward", "full"),
// metric "speed" in ms (median, p20, p80), then, where measured, metric "memory" in MB
// (the peak of one call, in y_value_50 and, as Liger writes one figure, in p20 and p80
// too). kernel_name is the pattern; x is the number of elements of the main input;
// extra_benchmark_config_str is a JSON object with the dtype, the shapes and the folder
// name; liger_version is left empty. Cases that were not timed have no rows. A nil r
// writes the header only.
func WriteCSV(w io.Writer, r *bench.Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	if r != nil {
		for i := range r.Cases {
			c := &r.Cases[i]
			if c.Error != "" || !c.Correct || !pos(c.FusedUs) {
				continue
			}
			shapes := c.Shapes
			if len(shapes) == 0 {
				shapes = [][]int64{c.Shape}
			}
			extra, err := json.Marshal(struct {
				Dtype  string    `json:"dtype"`
				Shapes [][]int64 `json:"shapes"`
				Name   string    `json:"name,omitempty"`
			}{c.Dtype, shapes, c.Name})
			if err != nil {
				return err
			}
			n := int64(1)
			for _, d := range c.Shape {
				n *= d
			}
			mode := c.Mode
			if mode == "" {
				mode = "forward"
			}
			providers := []struct {
				name          string
				med, p20, p80 float64
				peak          int64
			}{
				{ProviderFused, c.FusedUs, c.FusedP20, c.FusedP80, c.FusedPeakBytes},
				{ProviderEager, c.EagerUs, c.EagerP20, c.EagerP80, c.EagerPeakBytes},
				{ProviderCompile, c.CompileUs, c.CompileP20, c.CompileP80, c.CompilePeakBytes},
			}
			for _, key := range slices.Sorted(maps.Keys(c.Library)) { // known names only (LibraryNames)
				if op := c.Library[key]; LibraryNames[key] != "" && op.Refused == "" {
					providers = append(providers, struct {
						name          string
						med, p20, p80 float64
						peak          int64
					}{key, op.Us, op.P20, op.P80, op.PeakBytes})
				}
			}
			row := func(provider, metric, unit, y50, y20, y80 string) []string {
				return []string{
					csvText(c.Pattern), provider, mode, metric, unit,
					"numel", "elements of the main input", strconv.FormatInt(n, 10),
					y50, y20, y80, string(extra), csvText(r.GPU), csvText(r.Date), "",
				}
			}
			for _, p := range providers {
				if !pos(p.med) {
					continue
				}
				if err := cw.Write(row(p.name, "speed", "ms", msString(p.med), msString(p.p20), msString(p.p80))); err != nil {
					return err
				}
			}
			for _, p := range providers {
				if p.peak <= 0 {
					continue
				}
				mb := strconv.FormatFloat(float64(p.peak)/(1<<20), 'f', 3, 64)
				if err := cw.Write(row(p.name, "memory", "MB", mb, mb, mb)); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// msString prints microseconds as milliseconds, to the nanosecond (to nine significant
// digits from bigNum ms on); "" when not positive.
func msString(us float64) string {
	if !pos(us) {
		return ""
	}
	if ms := us / 1e3; ms >= bigNum {
		return strconv.FormatFloat(ms, 'g', 9, 64) // 1e+305, not 306 digits
	}
	s := strconv.FormatFloat(math.Round(us*1e3)/1e6, 'f', 6, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// csvText keeps a spreadsheet from reading a text field as a formula.
func csvText(s string) string {
	if s != "" && strings.ContainsRune("=+@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
