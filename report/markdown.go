package report

import (
	"bufio"
	"io"
	"strings"
)

// ChartFile is the name of the chart beside the report; Markdown links to it.
const ChartFile = "report.svg"

// Markdown writes the report as GitHub-flavoured Markdown. Data from the inputs (op
// names, paths, shapes, error messages) is written as code spans, so it is never read as
// Markdown or HTML. The chart is linked as ChartFile, which SVG writes. With in.Targets
// and benchmark results, the report has a "Performance targets" section (as HTML has).
func Markdown(w io.Writer, in Inputs) error {
	bw := bufio.NewWriter(w)
	writeMarkdown(bw, build(in))
	return bw.Flush()
}

func writeMarkdown(w *bufio.Writer, d document) {
	w.WriteString("# " + mdText(d.Title) + "\n")
	for _, s := range d.Sections {
		w.WriteString("\n## " + mdText(s.Title) + "\n")
		for _, p := range s.Before {
			w.WriteString("\n" + mdPara(p, false) + "\n")
		}
		if len(s.List) > 0 {
			w.WriteString("\n")
			for _, p := range s.List {
				w.WriteString("- " + mdPara(p, false) + "\n")
			}
		}
		if s.Table != nil {
			w.WriteString("\n")
			mdTable(w, s.Table)
		}
		if s.Chart {
			w.WriteString("\n![Fused kernel speedup over eager and torch.compile (predicted by the cost model without a bench)](" + ChartFile + ")\n")
		}
		// consecutive "N. ..." paragraphs form one ordered list
		for i, p := range s.After {
			sep := "\n"
			if i > 0 && isItem(p) && isItem(s.After[i-1]) {
				sep = ""
			}
			w.WriteString(sep + mdPara(p, false) + "\n")
		}
	}
}

func isItem(p para) bool {
	return len(p) > 0 && !p[0].Code && strings.HasSuffix(p[0].Text, ". ") && strings.Trim(p[0].Text, "0123456789. ") == ""
}

func mdTable(w *bufio.Writer, t *table) {
	w.WriteString("|")
	for _, h := range t.Head {
		w.WriteString(" " + mdText(h) + " |")
	}
	w.WriteString("\n|")
	for i := range t.Head {
		if i < len(t.Num) && t.Num[i] {
			w.WriteString("---:|")
		} else {
			w.WriteString("---|")
		}
	}
	w.WriteString("\n")
	for _, r := range t.Rows {
		w.WriteString("|")
		for _, c := range r {
			w.WriteString(" " + mdCell(c, true) + " |")
		}
		w.WriteString("\n")
	}
}

func mdPara(p para, inTable bool) string {
	var b strings.Builder
	for i, c := range p {
		// the leading "N. " of an advice item stays a list marker
		if i == 0 && !c.Code && isItem(p) {
			b.WriteString(c.Text)
			continue
		}
		b.WriteString(mdCell(c, inTable))
	}
	return b.String()
}

func mdCell(c cell, inTable bool) string {
	switch {
	case c.Code:
		return codeSpan(c.Text, inTable)
	case c.Strong && c.Text != "":
		return "**" + mdText(c.Text) + "**"
	}
	return mdText(c.Text)
}

// mdText escapes text so that Markdown shows it as is: ASCII punctuation that could start
// markup is backslash-escaped and line breaks become spaces.
func mdText(s string) string {
	s = oneLine(s)
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\\', '`', '*', '_', '[', ']', '<', '>', '|', '&', '~':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// codeSpan quotes s as a Markdown code span: a backtick fence longer than any run of
// backticks in s. In a table, '|' is escaped (GFM splits cells before reading spans).
func codeSpan(s string, inTable bool) string {
	s = oneLine(s)
	if s == "" {
		return ""
	}
	if inTable {
		s = strings.ReplaceAll(s, "|", `\|`)
	}
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || (strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ")) {
		s = " " + s + " "
	}
	return fence + s + fence
}

// oneLine replaces line breaks, tabs and other control characters with spaces and drops
// invalid UTF-8.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029 {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
