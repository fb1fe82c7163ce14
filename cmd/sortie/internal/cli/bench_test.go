package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/bench"
)

func TestBenchJSON(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := run(t, "bench", "--store", "memory", "--workload", "all", "--jobs", "2000",
		"--workers", "10", "--rate", "400", "--duration", "250ms", "--json")
	if code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", code, stderr)
	}
	var workloads []string
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var fields map[string]any
		if err := json.Unmarshal(sc.Bytes(), &fields); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", sc.Text(), err)
		}
		for _, k := range []string{"store", "workload", "jobs", "seconds", "jobs_per_sec", "p50_ms", "p95_ms", "p99_ms", "go_version", "cpus"} {
			if _, ok := fields[k]; !ok {
				t.Errorf("line %s has no %q", sc.Text(), k)
			}
		}
		var r bench.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Store != "memory" || r.JobsPerSec <= 0 {
			t.Errorf("result %+v, want store memory and a positive rate", r)
		}
		workloads = append(workloads, string(r.Workload))
	}
	if got, want := strings.Join(workloads, ","), "enqueue-single,enqueue-batch,drain,latency"; got != want {
		t.Errorf("workloads %s, want %s", got, want)
	}
}

func TestBenchTableSQLite(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "bench.db")
	code, stdout, stderr := run(t, "bench", "--store", "sqlite:"+db, "--synchronous", "normal",
		"--workload", "enqueue-batch", "--jobs", "2000", "--repeat", "2")
	if code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("table has %d lines, want a comment, a header and a row:\n%s", len(lines), stdout)
	}
	if !strings.Contains(lines[0], "median of 2 runs") {
		t.Errorf("first line %q, want it to say the figures are medians of 2 runs", lines[0])
	}
	header, row := strings.Fields(lines[1]), strings.Fields(lines[2])
	if header[0] != "STORE" || header[1] != "WORKLOAD" {
		t.Errorf("header %q, want STORE WORKLOAD ...", lines[1])
	}
	if len(row) < 4 || row[0] != "sqlite" || row[1] != "NORMAL" || row[2] != "enqueue-batch" || row[3] != "2000" {
		t.Errorf("row %q, want sqlite NORMAL enqueue-batch 2000 ...", lines[2])
	}
}

func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"--frobnicate"}, "flag provided but not defined: -frobnicate"},
		{"not a number", []string{"--jobs", "many"}, `invalid value "many" for flag -jobs`},
		{"zero jobs", []string{"--jobs", "0"}, "--jobs must be positive, got 0"},
		{"negative workers", []string{"--workers", "-1"}, "--workers must be positive, got -1"},
		{"zero rate", []string{"--rate", "0"}, "--rate must be positive"},
		{"zero repeat", []string{"--repeat", "0"}, "--repeat must be positive"},
		{"unknown workload", []string{"--workload", "sprint"}, `unknown workload "sprint"`},
		{"unknown store", []string{"--store", "mongodb://x"}, `unknown store "mongodb://x"`},
		{"schema on sqlite", []string{"--store", "sqlite", "--schema", "x"}, "--schema applies to postgres stores only"},
		{"bad redis url", []string{"--store", "rediss://localhost:port"}, "--store: redisstore: parse URL"},
		{"schema on redis", []string{"--store", "redis://localhost", "--schema", "x"}, "a Redis store's key prefix goes in the URL"},
		{"synchronous value", []string{"--store", "sqlite", "--synchronous", "off"}, "--synchronous must be full or normal"},
		{"synchronous on memory", []string{"--synchronous", "normal"}, "apply to sqlite stores only"},
		{"relaxed with normal", []string{"--store", "sqlite", "--synchronous", "normal", "--relaxed-claims"}, "--relaxed-claims needs --synchronous full"},
		{"argument", []string{"drain"}, `unexpected argument "drain"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := run(t, append([]string{"bench"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "\nusage: sortie ") {
				t.Errorf("stderr %q, want the error %q and the usage", stderr, tt.want)
			}
		})
	}
}

func TestReportBenchError(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	reportBenchError(&b, bench.Memory(), bench.Drain, &bench.CheckError{Problems: []string{"1 of 3 jobs never ran: seq 2", "the store counts 2 completed jobs, want 3"}})
	want := "sortie bench: drain on memory: FAILED the exactly-once check:\n  - 1 of 3 jobs never ran: seq 2\n  - the store counts 2 completed jobs, want 3\n"
	if b.String() != want {
		t.Errorf("reportBenchError wrote %q, want %q", b.String(), want)
	}
}

func TestBenchInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var out, errOut bytes.Buffer
	code := Run(ctx, []string{"bench", "--workload", "latency", "--duration", "1m"}, &out, &errOut)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if want := "sortie bench: interrupted during latency on memory\n"; errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}
