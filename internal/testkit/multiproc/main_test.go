package multiproc

import (
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// In a worker process a test started, this runs the worker instead.
	childproc.Main(map[string]func() int{roleWorker: runChild})
	goleak.VerifyTestMain(m)
}
