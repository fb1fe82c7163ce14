// Command peerbench runs sortie's benchmark workloads against River, raw
// PostgreSQL, backlite, asynq and BullMQ; see package peers, or run it with
// -h.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/sortiehq/sortie/bench/peers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := peers.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
