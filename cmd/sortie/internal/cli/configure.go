package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/internal/jobjson"
)

const configureDescription = `
Configure changes a queue's shared settings for every process using the
store: the flags given change, the others stay (0 turns a limit off, ""
a period). A rate limit needs its period. It prints the queue's settings
afterwards. A queue no job, setting, pause or running process uses is
refused, with the known queues, as a likely typo; --create configures it
anyway.`

func runConfigure(ctx context.Context, e *env, args []string) int {
	var (
		a      adminFlags
		patch  jobjson.SettingsPatch
		create bool
	)
	fs := flagSet("configure", adminSynopsis+" [--max-running N] [--rate-limit N --rate-period D] [...] QUEUE", configureDescription)
	a.register(fs)
	intFlag(fs, &patch.MaxRunning, "max-running", "the most running jobs of the queue (0: no limit)")
	intFlag(fs, &patch.RateLimit, "rate-limit", "the most starts in any window of --rate-period (0: no limit)")
	stringFlag(fs, &patch.RatePeriod, "rate-period", "the window of --rate-limit, like 1s or 1m")
	intFlag(fs, &patch.PartitionMaxRunning, "partition-max-running", "the most running jobs per partition key (0: no limit)")
	intFlag(fs, &patch.PartitionRateLimit, "partition-rate-limit", "the most starts per partition key in any window of --partition-rate-period")
	stringFlag(fs, &patch.PartitionRatePeriod, "partition-rate-period", "the window of --partition-rate-limit")
	intFlag(fs, &patch.MaxDepth, "max-depth", "the most queued jobs (0: no limit)")
	stringFlag(fs, &patch.Overflow, "overflow", "what an enqueue past --max-depth does: reject or drop-oldest")
	fs.BoolVar(&create, "create", false, createFlagHelp)
	queues, code := parseInterleaved(e, fs, args)
	if code >= 0 {
		return code
	}
	if len(queues) != 1 {
		return usageError(e, fs, "give one queue to configure, got %d", len(queues))
	}
	if patch.Empty() {
		return usageError(e, fs, "give the settings to change: --max-running, --rate-limit, --rate-period, --partition-max-running, --partition-rate-limit, --partition-rate-period, --max-depth or --overflow")
	}
	c, closeStore, err := a.open(ctx)
	if err != nil {
		return adminFail(e, fs, err)
	}
	defer closeStore()
	if unknownQueue(ctx, e, fs, c, queues[0], create) {
		return exitError
	}
	row, err := c.QueueGet(ctx, queues[0])
	if err != nil {
		return adminFail(e, fs, err)
	}
	settings := row.Settings
	if err := patch.Apply(&settings, flagName); err != nil {
		return usageError(e, fs, "%v", err)
	}
	if row, err = c.QueueConfigure(ctx, queues[0], settings); err != nil {
		return adminFail(e, fs, err)
	}
	q := jobjson.FromQueue(row, nil)
	if a.json {
		if err := writeJSON(e.stdout, q); err != nil {
			return adminFail(e, fs, err)
		}
		return exitOK
	}
	fmt.Fprintf(e.stdout, "queue %s: %s\n", row.Name, describeSettings(q.Settings))
	return exitOK
}

// flagName is the flag of a setting's JSON name.
func flagName(field string) string { return "--" + strings.ReplaceAll(field, "_", "-") }

// describeSettings is one line of a queue's settings.
func describeSettings(s *jobjson.Settings) string {
	if s == nil {
		return "no limits"
	}
	var parts []string
	add := func(on bool, format string, args ...any) {
		if on {
			parts = append(parts, fmt.Sprintf(format, args...))
		}
	}
	add(s.MaxRunning > 0, "max running %d", s.MaxRunning)
	add(s.RateLimit > 0, "rate %d per %s", s.RateLimit, s.RatePeriod)
	add(s.PartitionMaxRunning > 0, "max running per partition %d", s.PartitionMaxRunning)
	add(s.PartitionRateLimit > 0, "rate per partition %d per %s", s.PartitionRateLimit, s.PartitionRatePeriod)
	add(s.MaxDepth > 0, "max depth %d (%s)", s.MaxDepth, s.Overflow)
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// intFlag defines an int flag that sets *p only when given.
func intFlag(fs *flag.FlagSet, p **int, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		var n int
		if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != s {
			return fmt.Errorf("want a whole number, got %q", s)
		}
		*p = &n
		return nil
	})
}

// stringFlag defines a string flag that sets *p only when given.
func stringFlag(fs *flag.FlagSet, p **string, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		*p = &s
		return nil
	})
}
