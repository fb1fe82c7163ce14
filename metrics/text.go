package metrics

import (
	"io"
	"math"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// flushAt is the size at which a bufWriter passes its bytes on.
const flushAt = 32 << 10

// bufWriter collects an exposition in b and writes it to w in pieces of
// about flushAt bytes. After a write error it drops everything; err has it.
type bufWriter struct {
	b   []byte
	w   io.Writer
	err error
}

// Write appends p, so encoders of other packages can write through.
func (bw *bufWriter) Write(p []byte) (int, error) {
	bw.b = append(bw.b, p...)
	bw.flushIfFull()
	return len(p), bw.err
}

func (bw *bufWriter) flushIfFull() {
	if len(bw.b) >= flushAt {
		bw.flush()
	}
}

func (bw *bufWriter) flush() {
	if bw.err == nil && len(bw.b) > 0 {
		_, bw.err = bw.w.Write(bw.b)
	}
	bw.b = bw.b[:0]
}

// textSink writes the Prometheus text format (version 0.0.4, which 1.0.0
// extends only for names outside the classic character set), as
// github.com/prometheus/common/expfmt does, byte for byte.
type textSink struct {
	out    *bufWriter
	header bool   // the current family's HELP and TYPE lines are written
	lbl    []byte // scratch: a series' labels
}

func (t *textSink) begin(*family) { t.header = false }
func (t *textSink) end(*family)   {}

// writeHeader writes the HELP and TYPE lines of f before its first series,
// so a family without series is left out, as a Registry leaves it out.
func (t *textSink) writeHeader(f *family) {
	if t.header {
		return
	}
	t.header = true
	b := append(t.out.b, "# HELP "...)
	b = append(b, f.name...)
	b = append(b, ' ')
	b = appendEscaped(b, f.help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, f.name...)
	switch f.typ {
	case dto.MetricType_COUNTER:
		b = append(b, " counter\n"...)
	case dto.MetricType_GAUGE:
		b = append(b, " gauge\n"...)
	case dto.MetricType_HISTOGRAM:
		b = append(b, " histogram\n"...)
	}
	t.out.b = b
}

func (t *textSink) sample(f *family, vals []string, v float64, _ time.Time) {
	t.writeHeader(f)
	t.lbl = appendLabels(t.lbl[:0], f, vals)
	b := appendLine(t.out.b, f.name, "", t.lbl, "")
	b = appendFloat(b, v)
	t.out.b = append(b, '\n')
	t.out.flushIfFull()
}

func (t *textSink) histogram(f *family, vals []string, h *histogram) {
	t.writeHeader(f)
	t.lbl = appendLabels(t.lbl[:0], f, vals)
	b := t.out.b
	var cum uint64
	for i, n := range h.counts {
		cum += n
		b = appendLine(b, f.name, "_bucket", t.lbl, f.le[i])
		b = strconv.AppendUint(b, cum, 10)
		b = append(b, '\n')
	}
	b = appendLine(b, f.name, "_sum", t.lbl, "")
	b = appendFloat(b, h.sum)
	b = append(b, '\n')
	b = appendLine(b, f.name, "_count", t.lbl, "")
	b = strconv.AppendUint(b, cum, 10)
	t.out.b = append(b, '\n')
	t.out.flushIfFull()
}

// appendLine appends a sample's name+suffix, its labels (lbl, rendered by
// appendLabels, then extra, a whole label), and the space before its value.
func appendLine(b []byte, name, suffix string, lbl []byte, extra string) []byte {
	b = append(b, name...)
	b = append(b, suffix...)
	if len(lbl) > 0 || extra != "" {
		b = append(b, '{')
		b = append(b, lbl...)
		if len(lbl) > 0 && extra != "" {
			b = append(b, ',')
		}
		b = append(b, extra...)
		b = append(b, '}')
	}
	return append(b, ' ')
}

// appendLabels appends the labels of f's series with values vals, without
// braces: kind="email",queue="default".
func appendLabels(b []byte, f *family, vals []string) []byte {
	for i := range f.labels {
		l := &f.labels[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, l.name...)
		b = append(b, `="`...)
		b = appendEscaped(b, l.of(vals), true)
		b = append(b, '"')
	}
	return b
}

// appendEscaped appends s with backslashes and line feeds escaped, and
// double quotes too if quote (label values; not help texts).
func appendEscaped(b []byte, s string, quote bool) []byte {
	i := 0
	for i < len(s) && s[i] != '\\' && s[i] != '\n' && (s[i] != '"' || !quote) {
		i++
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendFloat appends f as the text format writes values: the shortest
// representation, +Inf, -Inf or NaN.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case isPosInf(f):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

func isPosInf(f float64) bool { return math.IsInf(f, +1) }
