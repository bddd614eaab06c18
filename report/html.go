package report

import (
	"bufio"
	"bytes"
	"html/template"
	"io"
)

// HTML writes the report as one self-contained HTML page: inline CSS, the chart as inline
// SVG, no scripts and no external resources. Every string from the inputs goes through
// html/template's escaping; the only markup not produced by the template is the chart,
// which SVG escapes itself.
func HTML(w io.Writer, in Inputs) error {
	var chart bytes.Buffer
	cw := bufio.NewWriter(&chart)
	writeSVG(cw, in)
	if in.Bench != nil && len(in.Bench.Cases) > 0 {
		cw.WriteString("<figcaption>Speedup on each verdict's basis; right of the dashed 1.0× line the kernel is faster. Also written as report.svg.</figcaption>\n")
		writeTimeSVG(cw, in.Bench, in.Scale, in.Use)
		cw.WriteString("<figcaption>Time per call: median bars, p20-p80 whiskers.</figcaption>\n")
	} else {
		cw.WriteString("<figcaption>Predicted by the cost model, not measured. Also written as report.svg.</figcaption>\n")
	}
	cw.Flush()
	d := build(in)
	data := struct {
		document
		SVG template.HTML // produced by writeSVG, which escapes all text
	}{d, template.HTML(chart.String())}
	bw := bufio.NewWriter(w)
	if err := pageTmpl.Execute(bw, data); err != nil {
		return err
	}
	return bw.Flush()
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"cellClass": cellClass,
	"numcol":    func(t *table, i int) bool { return i < len(t.Num) && t.Num[i] },
	"hashead": func(h []string) bool {
		for _, s := range h {
			if s != "" {
				return true
			}
		}
		return false
	},
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #202124; margin: 0; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #dadce0; }
nav a { margin-right: 12px; color: #1a73e8; text-decoration: none; }
code { font: 12.5px/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f1f3f4; padding: 1px 4px; border-radius: 3px; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #dadce0; padding: 4px 8px; vertical-align: top; text-align: left; }
td:not(.num) { min-width: 6em; }
td.long { min-width: 28em; }
td:first-child:not(.num) { min-width: 12em; }
td code { overflow-wrap: break-word; }
th { background: #f8f9fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.ship { color: #137333; }
td.dns, td.fail { color: #b3261e; background: #fce8e6; }
td.review { color: #b06000; background: #fef7e0; }
td.noise, td.muted { color: #5f6368; }
figure { margin: 12px 0; overflow-x: auto; }
figcaption { color: #5f6368; font-size: 12px; }
summary { cursor: pointer; color: #1a73e8; margin: 6px 0; }
@media print { nav { display: none; } }
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
<nav>{{range .Sections}}<a href="#{{.ID}}">{{.Title}}</a>{{end}}</nav>
{{- range .Sections}}
<section id="{{.ID}}">
<h2>{{.Title}}</h2>
{{- range .Before}}
<p>{{template "para" .}}</p>
{{- end}}
{{- if .List}}
<ul>
{{- range .List}}
<li>{{template "para" .}}</li>
{{- end}}
</ul>
{{- end}}
{{- if .Fold}}
<details><summary>{{.Fold}}</summary>{{end}}
{{- with .Table}}{{$t := .}}
<div class="scroll"><table>
{{- if hashead .Head}}
<thead><tr>{{range $i, $h := .Head}}<th{{if numcol $t $i}} class="num"{{end}}>{{$h}}</th>{{end}}</tr></thead>
{{- end}}
<tbody>
{{- range .Rows}}
<tr>{{range .}}<td{{with cellClass .}} class="{{.}}"{{end}}>{{template "cell" .}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table></div>
{{- end}}
{{- if .Fold}}
</details>
{{- end}}
{{- if .Chart}}
<figure>
{{$.SVG}}
</figure>
{{- end}}
{{- range .After}}
<p>{{template "para" .}}</p>
{{- end}}
</section>
{{- end}}
</main>
</body>
</html>
{{define "para"}}{{range .}}{{template "cell" .}}{{end}}{{end}}
{{- define "cell"}}{{if .Code}}{{if .Text}}<code>{{.Text}}</code>{{end}}{{else if .Strong}}<strong>{{.Text}}</strong>{{else}}{{.Text}}{{end}}{{end}}
`))

// longCell is the length, in bytes, above which a table cell of prose gets a wide minimum
// width, so that a browser fitting a wide table to the page does not squeeze it to a column
// of a few characters per line.
const longCell = 60

// cellClass is a table cell's HTML class: its own, plus "long" for long text.
func cellClass(c cell) string {
	if len(c.Text) <= longCell || c.Class == "num" {
		return c.Class
	}
	if c.Class == "" {
		return "long"
	}
	return c.Class + " long"
}
