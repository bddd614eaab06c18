package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/fuseadvise/fuseadvise/codegen"
	"github.com/fuseadvise/fuseadvise/patterns"
)

// specsFor turns a trace's (or a saved analysis's) opportunities into generator specs, one
// per pattern, shape group and dtype. Groups a template cannot express are skipped with a
// reason (returned for the user); nothing from the trace but validated numbers and enum
// values reaches a spec's code-bearing fields.
func specsFor(args []string, from string, o analyzeOptions) ([]codegen.Item, []string, error) {
	var rep *patterns.Report
	switch {
	case from != "" && len(args) > 0:
		return nil, nil, usagef("give a trace or -from, not both")
	case from != "":
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, nil, err
		}
		var a Analysis
		var shape struct {
			Trace         *json.RawMessage `json:"trace"`
			Opportunities *json.RawMessage `json:"opportunities"`
		}
		err = json.Unmarshal(b, &shape)
		if err == nil && (shape.Trace == nil || shape.Opportunities == nil) {
			err = fmt.Errorf("no \"trace\" object or \"opportunities\" list")
		}
		if err == nil {
			err = json.Unmarshal(b, &a)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: not the JSON of 'fuseadvise analyze -format json': %s", from, jsonProblem(err))
		}
		rep = a.Report
		rep.Opportunities = selectOpportunities(rep.Opportunities, o)
	case len(args) == 1:
		a, err := analyze(args[0], o)
		if err != nil {
			return nil, nil, err
		}
		rep = a.Result.Report
	default:
		return nil, nil, usagef("want one trace file or directory (or -from FILE), got %d arguments", len(args))
	}
	return codegen.SpecsFromReport(rep)
}

func selectOpportunities(ops []patterns.Opportunity, o analyzeOptions) []patterns.Opportunity {
	var out []patterns.Opportunity
	for _, op := range ops {
		if o.Pattern == "" || op.Pattern == o.Pattern {
			out = append(out, op)
		}
	}
	if o.Top > 0 && len(out) > o.Top {
		out = out[:o.Top]
	}
	return out
}

// jsonProblem describes a decoding error without Go type names.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("offset %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Sprintf("offset %d: a JSON %s where an object was expected", te.Offset, te.Value)
		}
		return fmt.Sprintf("offset %d: field %q holds a JSON %s", te.Offset, te.Field, te.Value)
	}
	return err.Error()
}
