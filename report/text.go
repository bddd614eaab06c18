package report

// PlainText makes trace-derived text safe for a terminal table cell: control characters
// (escape sequences, line breaks) become spaces and invalid UTF-8 is replaced.
func PlainText(s string) string { return oneLine(s) }

// MarkdownText makes trace-derived text safe for a Markdown table cell or line: PlainText,
// then every punctuation character that could start markup is backslash-escaped.
func MarkdownText(s string) string { return mdText(s) }
