// Package childproc runs the current test binary again as child processes
// of a test: the one harness of the tests that need sortie in several
// operating-system processes (the multi-process tests and the chaos
// scenarios).
//
// The parent starts a child with Start, in a named role (a worker, `sortie
// serve`) and under a name of its own, and handles it through the returned
// Proc: SIGKILL, SIGSTOP and SIGCONT, a graceful stop, and the faults it
// sent, in order. The child's TestMain calls Main first, which runs the
// function of the child's role instead of the tests. A worker child appends
// the runs of its handler to its Journal, which the parent reads with
// ReadJournal or RunsByJob; its stdout and stderr go to a log file.
package childproc

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The environment through which Start tells a child what it is.
const (
	// envRole names the child's role; set, it makes the test binary a
	// child instead of running tests.
	envRole = "SORTIE_CHILD_ROLE"
	// envName is the child's name.
	envName = "SORTIE_CHILD_NAME"
	// envJournal is the path of the child's journal.
	envJournal = "SORTIE_CHILD_JOURNAL"
)

// Main is the child side of Start, for TestMain to call before anything
// else. In a child, it runs the function of its role in roles and exits
// with the code that returns (2 for a role not in roles). In the test
// process itself, it returns at once.
func Main(roles map[string]func() int) {
	role := os.Getenv(envRole)
	if role == "" {
		return
	}
	run := roles[role]
	if run == nil {
		names := make([]string, 0, len(roles))
		for r := range roles {
			names = append(names, r)
		}
		slices.Sort(names)
		fmt.Fprintf(os.Stderr, "%s=%q: want one of %s\n", envRole, role, strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}

// Name returns the name a child was started under ("" in the test process
// itself). Workers use it as their client ID, so the store's AttemptedBy
// names the process.
func Name() string { return os.Getenv(envName) }

// JournalPath returns the path of the child's journal; files of its own
// beside it are named after it.
func JournalPath() string { return os.Getenv(envJournal) }
