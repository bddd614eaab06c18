package report

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/fuseadvise/fuseadvise/verify"
)

// vcount counts verification outcomes: pass, fail (wrong results or an error), unrun
// (refused or timed out: not verified either), skipped (does not apply), and folders that
// could not be checked at all.
type vcount struct {
	pass, fail, unrun, skip, folderErrs int
}

// summary is "P of N cases pass (F failed, U not run, S skipped)".
func (n vcount) summary() string {
	s := fmt.Sprintf("%d of %d cases pass", n.pass, n.pass+n.fail+n.unrun)
	var parts []string
	if n.fail > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", n.fail))
	}
	if n.unrun > 0 {
		parts = append(parts, fmt.Sprintf("%d not run", n.unrun))
	}
	if n.skip > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", n.skip))
	}
	if n.folderErrs > 0 {
		parts = append(parts, fmt.Sprintf("%d folders could not be checked", n.folderErrs))
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

func countVerify(fs []verify.Folder) vcount {
	var n vcount
	for _, f := range fs {
		if f.Error != "" {
			n.folderErrs++
		}
		for _, c := range f.Cases {
			switch c.Status {
			case verify.StatusPass:
				n.pass++
			case verify.StatusSkipped:
				n.skip++
			case verify.StatusRefused, verify.StatusTimeout:
				n.unrun++
			default:
				n.fail++
			}
		}
	}
	return n
}

// verifyName is the generated folder a verification folder was run on.
func verifyName(f verify.Folder) string {
	if f.Dir == "" {
		return ""
	}
	return filepath.Base(filepath.Clean(f.Dir))
}

// verifyFolders returns the verification folders of generated folder g: by folder name,
// else by pattern and dtype.
func verifyFolders(v *verify.Result, g GenFolder) []verify.Folder {
	if v == nil {
		return nil
	}
	var out []verify.Folder
	for _, f := range v.Folders {
		if matches(verifyName(f), f.Pattern, f.Dtype, g) {
			out = append(out, f)
		}
	}
	return out
}

func verifyStatus(v *verify.Result, g GenFolder) cell {
	if v == nil {
		return cell{Text: "not verified", Class: "muted"}
	}
	fs := verifyFolders(v, g)
	n := countVerify(fs)
	switch {
	case n.folderErrs > 0:
		return cell{Text: "ERROR (not checked)", Strong: true, Class: "fail"}
	case n.fail > 0:
		return cell{Text: fmt.Sprintf("FAIL (%d of %d)", n.fail, n.pass+n.fail+n.unrun), Strong: true, Class: "fail"}
	case n.pass == 0:
		return cell{Text: "not verified", Class: "muted"}
	case n.unrun > 0:
		return cell{Text: fmt.Sprintf("pass (%d), %d not run", n.pass, n.unrun), Class: "noise"}
	}
	return cell{Text: fmt.Sprintf("pass (%d)", n.pass), Class: "ship"}
}

// checked reports whether a case's errors were measured.
func checked(c verify.Case) bool {
	switch c.Status {
	case verify.StatusPass, verify.StatusFail:
		return true
	case verify.StatusError:
		return c.Atol != 0
	}
	return false
}

func resultCell(s verify.Status) cell {
	switch s {
	case verify.StatusPass:
		return cell{Text: "pass", Class: "ship"}
	case verify.StatusSkipped:
		return cell{Text: "skipped", Class: "muted"}
	case verify.StatusRefused:
		return cell{Text: "refused (too large)", Class: "muted"}
	case verify.StatusFail:
		return cell{Text: "FAIL", Strong: true, Class: "fail"}
	case verify.StatusTimeout:
		return cell{Text: "TIMEOUT", Strong: true, Class: "fail"}
	case verify.StatusError:
		return cell{Text: "ERROR", Strong: true, Class: "fail"}
	}
	return cell{Text: string(s), Strong: true, Class: "fail"}
}

func errCell(v verify.Float) cell {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return numc("NaN")
	case math.IsInf(f, 0):
		return numc("inf")
	}
	return numc(fmtSci(f))
}

// foldRows is the longest verification table the HTML page shows unfolded.
const foldRows = 20

func verifySection(v *verify.Result) section {
	s := section{ID: "verification", Title: "Verification"}
	if v == nil {
		s.Before = []para{{txt("No verification results given (run "), code("fuseadvise verify -format json"), txt(").")}}
		return s
	}
	p := para{txt(countVerify(v.Folders).summary())}
	if v.Device != "" {
		p = append(p, txt(", run on "), code(v.Device))
	}
	if v.Torch != "" || v.Triton != "" {
		p = append(p, txt(" with torch "), code(v.Torch), txt(" and triton "), code(v.Triton))
	}
	if v.Trials > 0 {
		p = append(p, txt(fmt.Sprintf(", %d random trials per case", v.Trials)))
	}
	p = append(p, txt(". Errors are the largest over the outputs and trials; a case passes when every element is within atol + rtol·|reference|."))
	s.Before = []para{p}
	tb := &table{
		Head: []string{"folder", "case", "shapes", "dtype", "max abs err", "max rel err", "atol / rtol", "result"},
		Num:  []bool{false, false, false, false, true, true, true, false},
	}
	for _, f := range v.Folders {
		who := verifyName(f)
		if who == "" {
			who = f.Pattern
		}
		if f.Error != "" {
			tb.Rows = append(tb.Rows, []cell{code(who), txt("(folder)"), txt(""), code(f.Dtype), numc("-"), numc("-"), numc("-"), resultCell(verify.StatusError)})
			s.After = append(s.After, para{code(who), txt(": "), code(truncRunes(f.Error, 500))})
		}
		for _, c := range f.Cases {
			tol := "-"
			if c.Atol > 0 || c.Rtol > 0 {
				tol = fmtSci(c.Atol) + " / " + fmtSci(c.Rtol)
			}
			errAbs, errRel := errCell(c.MaxAbs), errCell(c.MaxRel)
			if !checked(c) {
				errAbs, errRel = numc("-"), numc("-")
			}
			tb.Rows = append(tb.Rows, []cell{code(who), code(c.Name), code(shapesString(c.Shapes)), code(c.Dtype), errAbs, errRel, numc(tol), resultCell(c.Status)})
			if !c.Passed() {
				s.After = append(s.After, para{code(who), txt(" "), code(c.Name), txt(": "), code(truncRunes(verify.Describe(c), 500))})
			}
		}
	}
	if len(tb.Rows) > 0 {
		s.Table = tb
	}
	if len(tb.Rows) > foldRows {
		s.Fold = fmt.Sprintf("All %d cases", len(tb.Rows))
	}
	return s
}
