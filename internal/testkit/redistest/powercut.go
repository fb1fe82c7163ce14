package redistest

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

//go:embed powercut/powercut.c
var powerCutSource []byte

// PowerCutShim builds the power-cut shim (powercut/powercut.c) with the
// machine's C compiler into t's temporary directory and returns the shared
// object, for ServerOptions.Preload. A server run with it keeps the
// append-only file's writes in memory until Redis fsyncs them, so
// Server.Kill loses what a power cut would: with appendfsync everysec, up to
// about the last second of writes Redis acknowledged. It skips t when no C
// compiler is found, and fails it under CI=true.
func PowerCutShim(t testing.TB) string {
	t.Helper()
	cc := ""
	for _, name := range []string{os.Getenv("CC"), "cc", "gcc", "clang"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		msg := "redistest: power-cut tests NOT RUN: no C compiler (cc, gcc or clang) builds the shim; install gcc"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "powercut.c")
	if err := os.WriteFile(src, powerCutSource, 0o600); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "powercut.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: build the power-cut shim: %v\n%s", err, out)
	}
	return so
}
