package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
)

const processesDescription = `
Processes lists the client processes registered in the store: every started
sortie client (workers, sortie serve) records its host, PID, version,
queues and busy workers every 10 seconds, and a process silent for a minute
is dropped. ALIVE is no when it missed its last three beats.

--quiet ID asks that process to stop fetching jobs (the running ones
finish); --stop ID asks it to stop gracefully. Either takes effect at its
next beat.`

func runProcesses(ctx context.Context, e *env, args []string) int {
	var (
		a           adminFlags
		quiet, stop string
	)
	fs := flagSet("processes", adminSynopsis+" [--quiet ID | --stop ID]", processesDescription)
	a.register(fs)
	fs.StringVar(&quiet, "quiet", "", "ask process `ID` to stop fetching jobs")
	fs.StringVar(&stop, "stop", "", "ask process `ID` to stop gracefully")
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	if quiet != "" && stop != "" {
		return usageError(e, fs, "--quiet and --stop together: give one")
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	if id, cmd := quiet+stop, commandOf(quiet, stop); id != "" {
		row, err := c.CommandProcess(ctx, id, cmd)
		if err != nil {
			fmt.Fprintf(e.stderr, "processes: %s\n", say(err))
			return exitError
		}
		if a.json {
			return jsonOut(e, fs, jobjson.FromProcess(row, c.ProcessAlive(row)))
		}
		fmt.Fprintf(e.stdout, "process %s: %s requested; it acts at its next beat\n", row.ID, cmd)
		return exitOK
	}
	rows, err := c.Processes(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	out := make([]jobjson.Process, len(rows))
	for i, r := range rows {
		out[i] = jobjson.FromProcess(r, c.ProcessAlive(r))
	}
	if a.json {
		return jsonOut(e, fs, map[string]any{"processes": out})
	}
	printProcesses(e, out)
	return exitOK
}

func commandOf(quiet, stop string) sortie.ProcessCommand {
	if stop != "" {
		return sortie.ProcessStop
	}
	return sortie.ProcessQuiet
}

func jsonOut(e *env, fs interface{ Name() string }, v any) int {
	if err := writeJSON(e.stdout, v); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", fs.Name(), err)
		return exitError
	}
	return exitOK
}

// printProcesses writes the table of processes.
func printProcesses(e *env, rows []jobjson.Process) {
	if len(rows) == 0 {
		fmt.Fprintln(e.stdout, "no processes registered")
		return
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tPID\tVERSION\tQUEUES\tBUSY\tSTARTED\tLAST BEAT\tALIVE\tCOMMAND")
	for _, p := range rows {
		var qs []string
		for _, q := range p.Queues {
			qs = append(qs, fmt.Sprintf("%s:%d", q.Queue, q.Workers))
		}
		cmd := "-"
		switch {
		case p.Stop:
			cmd = "stop"
		case p.Quiet:
			cmd = "quiet"
		}
		alive := "yes"
		if !p.Alive {
			alive = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, dash(p.Host), p.PID, dash(p.Version), dash(strings.Join(qs, ",")),
			p.Busy, p.StartedAt.Format(time.RFC3339), p.LastBeat.Format(time.RFC3339), alive, cmd)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
