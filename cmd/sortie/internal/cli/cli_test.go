package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run runs the command line args and returns the exit status and output.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"no args", nil, 2, "", "Commands:"},
		{"help", []string{"help"}, 0, "bench      measure", ""},
		{"--help", []string{"--help"}, 0, "Commands:", ""},
		{"help bench", []string{"help", "bench"}, 0, "sortie bench [--store", ""},
		{"bench -h", []string{"bench", "-h"}, 0, "--workload workload", ""},
		{"unknown command", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"help unknown", []string{"help", "frobnicate"}, 2, "", `unknown command "frobnicate"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := run(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if tt.wantStdout != "" && !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout, tt.wantStdout)
			}
			if tt.wantStdout == "" && stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if tt.wantStderr != "" && !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.wantStderr)
			}
		})
	}
}

func TestHiddenFlagsStayHidden(t *testing.T) {
	t.Parallel()
	_, stdout, _ := run(t, "bench", "-h")
	if strings.Contains(stdout, "cpuprofile") {
		t.Errorf("bench -h lists --cpuprofile, want it hidden:\n%s", stdout)
	}
}

func TestParseStore(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    storeSpec
		wantErr string
	}{
		{in: "memory", want: storeSpec{kind: storeMemory}},
		{in: "sqlite", want: storeSpec{kind: storeSQLite}},
		{in: "sqlite:/tmp/x.db", want: storeSpec{kind: storeSQLite, path: "/tmp/x.db"}},
		{in: "sqlite:///tmp/x", want: storeSpec{kind: storeSQLite, path: "/tmp/x"}},
		{in: "data/jobs.db", want: storeSpec{kind: storeSQLite, path: "data/jobs.db"}},
		{in: "jobs.sqlite3", want: storeSpec{kind: storeSQLite, path: "jobs.sqlite3"}},
		{in: "sqlite:", wantErr: "names no file"},
		{in: "postgres://u@h/db", want: storeSpec{kind: storePostgres, dsn: "postgres://u@h/db"}},
		{in: "postgresql://u@h/db", want: storeSpec{kind: storePostgres, dsn: "postgresql://u@h/db"}},
		{in: "redis://h:6379/1?prefix=app", want: storeSpec{kind: storeRedis, dsn: "redis://h:6379/1?prefix=app"}},
		{in: "rediss://:pw@h", want: storeSpec{kind: storeRedis, dsn: "rediss://:pw@h"}},
		{in: "mysql://h", wantErr: `unknown store "mysql://h"`},
		{in: "", wantErr: "store is empty"},
	} {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := parseStore(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseStore(%q) = %+v, %v; want an error containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseStore(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}
