package chaos

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/sortiehq/sortie/internal/testkit/childproc"
	"go.uber.org/goleak"
)

// longFlag selects the long form of the scenarios (make chaos); so does
// SORTIE_CHAOS=long.
var longFlag = flag.Bool("chaos.long", false, "run the long form of the chaos scenarios (also SORTIE_CHAOS=long)")

// envLong is the environment variable that selects the long form.
const envLong = "SORTIE_CHAOS"

// longForm reports whether the long form runs.
func longForm() bool {
	return *longFlag || os.Getenv(envLong) == "long"
}

// pick returns short in the short form and long in the long form.
func pick[T any](short, long T) T {
	if longForm() {
		return long
	}
	return short
}

func TestMain(m *testing.M) {
	// In a process a scenario started, this runs its role instead.
	childproc.Main(childRoles)
	if v := os.Getenv(envLong); v != "" && v != "long" && v != "short" {
		fmt.Fprintf(os.Stderr, "%s=%q: want long or short\n", envLong, v)
		os.Exit(2)
	}
	code := m.Run()
	printTable(os.Stdout)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cores is held by the scenarios that load the machine with processes, one
// at a time: a worker process starved of CPU by another scenario's could
// lose a lease while it lives, which the scenarios report as a failure.
var cores sync.Mutex

// heavy makes t wait for the machine's cores and hold them until it ends.
func heavy(t *testing.T) {
	cores.Lock()
	t.Cleanup(cores.Unlock)
}
