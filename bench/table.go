package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// tableFormat lays out one table row; rows print as results arrive, so the
// widths are fixed rather than measured.
const tableFormat = "%-20s  %-14s  %8s  %7s  %9s  %8s  %11s  %8s  %8s  %8s  %s\n"

// WriteTableHeader writes the column names of the results table that
// `sortie bench` and peerbench print; first names the first column
// (STORE, PEER).
func WriteTableHeader(w io.Writer, first string) error {
	_, err := fmt.Fprintf(w, tableFormat, first, "WORKLOAD", "JOBS", "WORKERS", "PRODUCERS", "SECONDS", "JOBS/S", "P50 MS", "P95 MS", "P99 MS", "LATENCY OF")
	return err
}

// WriteTableRow writes r as one row of the results table, label in the
// first column. An interval result puts its rate figures in the last one.
func WriteTableRow(w io.Writer, label string, r Result) error {
	latency := "-"
	switch {
	case r.Steps != nil:
		s := r.Steps
		latency = fmt.Sprintf("step %.3g ms vs heartbeat %.3g ms (%.2fx); %d-step jobs %.2fx one-step jobs, %.2fx plain jobs; "+
			"resume after %d children p50 %.3g ms, p99 %.3g ms (%.3g ms from FinalizedAt; %d parents), await %.3g ms",
			s.RecordMs, s.HeartbeatMs, s.RecordPerHeartbeat, s.StepsPerJob, s.SteppedPerOneStep, s.SteppedPerPlain, s.Children,
			s.ResumeP50ms, s.ResumeP99ms, s.ResumeFinalizedP99ms, s.Rounds, s.AwaitMs)
	case r.LatencyOf != "":
		latency = r.LatencyOf
	case r.RateErrorPct != nil:
		procs := "processes"
		if r.Processes == 1 {
			procs = "process"
		}
		latency = fmt.Sprintf("rate error %.2f%%, max %d per %s (limit %d), %d %s",
			*r.RateErrorPct, r.MaxInWindow, time.Duration(r.RatePeriodSec*float64(time.Second)), r.RateLimit, r.Processes, procs)
	}
	_, err := fmt.Fprintf(w, tableFormat,
		label, r.Workload, strconv.Itoa(r.Jobs), dash(r.Workers), dash(r.Producers),
		strconv.FormatFloat(r.Seconds, 'f', 3, 64), thousands(r.JobsPerSec),
		msec(r.P50ms, r.LatencyOf), msec(r.P95ms, r.LatencyOf), msec(r.P99ms, r.LatencyOf), latency)
	return err
}

func dash(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func msec(v float64, latency string) string {
	if latency == "" {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// thousands formats v rounded to an integer with commas: 1234567 → "1,234,567".
func thousands(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
