package multiproc

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		// This process is one of the workers a test started.
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}
