// Package cli implements the sortie command. Each subcommand is a function
// that parses its own flags and writes to the writers it is given, so tests
// call Run with arguments and buffers. To add a subcommand, write its
// function and add a line to commands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
}

// command is one subcommand of sortie.
type command struct {
	name string
	// summary is one line for `sortie help`.
	summary string
	// run parses args (the arguments after the command's name) and runs the
	// command, returning the exit status.
	run func(ctx context.Context, e *env, args []string) int
	// hidden leaves the command out of `sortie help`: it is started by
	// another command, not by people.
	hidden bool
}

// commands are sortie's subcommands, in the order `sortie help` lists them.
var commands = []command{
	{name: "serve", summary: "run the dashboard and the HTTP API on a store (sortie.db by default)", run: runServe},
	{name: "jobs", summary: "list jobs, or show one with its errors", run: runJobs},
	{name: "queues", summary: "list queues: paused or not, jobs per state, limits", run: runQueues},
	{name: "enqueue", summary: "add a job", run: runEnqueue},
	{name: "retry", summary: "run jobs again (after their dependencies)", run: retryAction.run},
	{name: "cancel", summary: "cancel jobs, running ones included", run: cancelAction.run},
	{name: "delete", summary: "delete jobs that are not running", run: deleteAction.run},
	{name: "pause", summary: "stop every process starting jobs of queues", run: pauseAction.run},
	{name: "resume", summary: "resume paused queues", run: resumeAction.run},
	{name: "configure", summary: "change a queue's limits: running jobs, rate, partitions, depth", run: runConfigure},
	{name: "processes", summary: "list the client processes on a store; quiet or stop one", run: runProcesses},
	{name: "export", summary: "write every job, queue setting and periodic slot of a store as JSON lines", run: runExport},
	{name: "import", summary: "read what export wrote into a store: IDs, states and links kept", run: runImport},
	{name: "migrate", summary: "create or upgrade a store's schema, or --check it", run: runMigrate},
	{name: "bench", summary: "measure a store's throughput and latency", run: runBench},
	{name: "soak", summary: "hold a steady mix of jobs on a store for a long time, reporting each window", run: runSoak},
	{name: "version", summary: "print the version, commit and Go version of this binary", run: runVersion},
	{name: "bench-worker", summary: "helper process of bench --workload interval", run: runBenchWorker, hidden: true},
}

// Run runs the sortie command line args (without the program name),
// writing output to stdout and diagnostics to stderr, and returns the exit
// status: 0 on success, 1 when the command failed, 2 for a bad command line.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return runHelp(ctx, e, rest)
	}
	cmd := lookup(name)
	if cmd == nil {
		fmt.Fprintf(stderr, "sortie: unknown command %q\nRun 'sortie help' for the commands.\n", name)
		return exitUsage
	}
	return cmd.run(ctx, e, rest)
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// runHelp prints the overview, or with a command name that command's usage.
func runHelp(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printUsage(e.stdout)
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(e.stderr, "sortie help: unknown command %q\nRun 'sortie help' for the commands.\n", args[0])
		return exitUsage
	}
	return cmd.run(ctx, e, []string{"-h"})
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "sortie is a durable background-job system.\n\nUsage:\n\n\tsortie <command> [flags]\n\nCommands:\n\n")
	for _, c := range commands {
		if c.hidden {
			continue
		}
		fmt.Fprintf(w, "\t%-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\n%s\n\nRun 'sortie help <command>' or 'sortie <command> -h' for a command's flags.\n", migrationRule)
}

// flagSet returns a FlagSet for command name whose usage prints synopsis
// (the line after "Usage:"), description, then the flags not in hidden.
func flagSet(name, synopsis, description string, hidden ...string) *flag.FlagSet {
	fs := flag.NewFlagSet("sortie "+name, flag.ContinueOnError)
	synopses.Store(fs, "sortie "+name+" "+synopsis)
	fs.Usage = func() {
		w := fs.Output()
		desc := strings.TrimSpace(description)
		if fs.Lookup("store") != nil && !strings.HasPrefix(name, "bench") {
			desc += "\n\n" + migrationRule
		}
		fmt.Fprintf(w, "Usage:\n\n\tsortie %s %s\n\n%s\n\nFlags:\n\n", name, synopsis, desc)
		fs.VisitAll(func(f *flag.Flag) {
			for _, h := range hidden {
				if f.Name == h {
					return
				}
			}
			argName, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  --%s", f.Name)
			if argName != "" {
				fmt.Fprintf(w, " %s", argName)
			}
			switch f.DefValue {
			case "", "0", "0s", "false":
			default:
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "\n    \t%s\n", strings.ReplaceAll(usage, "\n", "\n    \t"))
		})
	}
	return fs
}

// synopses holds each FlagSet's usage line, for usageError.
var synopses sync.Map // *flag.FlagSet -> string

// parseFlags parses args with fs. For -h it prints the usage on stdout and
// returns exitOK; for a bad flag, the error and the usage on stderr and
// exitUsage; otherwise -1, meaning: go on.
func parseFlags(e *env, fs *flag.FlagSet, args []string) int {
	if code := parseFlagsOnly(e, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, fs, "unexpected argument %q", fs.Arg(0))
	}
	return -1
}

// parseFlagsOnly is parseFlags leaving the arguments after the flags in
// fs.Args().
func parseFlagsOnly(e *env, fs *flag.FlagSet, args []string) int {
	var msgs strings.Builder
	fs.SetOutput(&msgs)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK
	}
	fs.SetOutput(e.stderr)
	if err != nil {
		// The flag package wrote the error and the whole help to msgs:
		// only the error is said, with the usage line.
		return usageError(e, fs, "%v", err)
	}
	return -1
}

// usageError prints a bad command line's error, the command's usage line
// and how to get its help on stderr, and returns exitUsage.
func usageError(e *env, fs *flag.FlagSet, format string, args ...any) int {
	synopsis, _ := synopses.Load(fs)
	fmt.Fprintf(e.stderr, "%s: %s\nusage: %s\nRun '%s --help' for its flags.\n", fs.Name(), fmt.Sprintf(format, args...), synopsis, fs.Name())
	return exitUsage
}
