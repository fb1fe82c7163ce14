// Command sortie is sortie's one binary. Run `sortie help` for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sortiehq/sortie/cmd/sortie/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels ctx, so the command stops
	// gracefully; the handler is then removed, so a second one kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
