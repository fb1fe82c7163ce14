package sortie

import (
	"context"
	"log/slog"
	"slices"

	"github.com/sortiehq/sortie/store"
)

// ServerProblem is a state of the store's server that puts jobs at risk,
// such as a Redis server that may evict keys, keeps no append-only file,
// or is about to run out of memory. See Client.ServerProblems.
type ServerProblem = store.ServerProblem

// The ServerProblem codes.
const (
	ProblemEviction      = store.ProblemEviction
	ProblemNoPersistence = store.ProblemNoPersistence
	ProblemNoAppendOnly  = store.ProblemNoAppendOnly
	ProblemMemory        = store.ProblemMemory
)

// ServerProblems returns the problems the last check of the store's server
// found, none when its settings are sound or the store has no server to
// check (see store.ServerChecker). A started client checks when it starts
// and on every maintenance round (Config.RescueInterval), logs each
// problem as an error when it appears and once more when it is gone; the
// HTTP API's health check, the dashboard and the metrics show them.
func (c *Client) ServerProblems() []ServerProblem {
	if p := c.problems.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// checkServer reads the store's server settings, when the store can, and
// logs the problems that appeared or cleared since the last check.
func (c *Client) checkServer(ctx context.Context) {
	sc, ok := c.store.(store.ServerChecker)
	if !ok {
		return
	}
	now, err := sc.ServerCheck(ctx, &store.ServerCheckParams{})
	if err != nil {
		return // an unreachable store is the store health's to log
	}
	before := c.problems.Swap(&now)
	had := func(code string, in *[]ServerProblem) bool {
		return in != nil && slices.ContainsFunc(*in, func(p ServerProblem) bool { return p.Code == code })
	}
	for _, p := range now {
		if !had(p.Code, before) {
			c.logger.ErrorContext(ctx, "store server puts jobs at risk", slog.String(logKeyProblem, p.Code),
				slog.String(logKeyError, p.Message))
		}
	}
	if before != nil {
		for _, p := range *before {
			if !had(p.Code, &now) {
				c.logger.InfoContext(ctx, "store server problem cleared", slog.String(logKeyProblem, p.Code))
			}
		}
	}
}
