// Package sortie is a durable background-job system: the application
// enqueues small, idempotent jobs and workers run them with at-least-once
// delivery, retries with backoff, a dead-letter set and scheduling. It runs
// embedded on one SQLite file (store/sqlitestore) and the same code runs on
// other stores.
//
// # Args and worker
//
// A job's args are a JSON-encodable type whose Kind names its worker:
//
//	type Email struct {
//		To string `json:"to"`
//	}
//
//	func (Email) Kind() string { return "email" }
//
//	workers := sortie.NewWorkers()
//	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Email]) error {
//		return send(ctx, job.Args.To)
//	}), &sortie.WorkerOpts{Queue: "mail"})
//
// A worker returns nil (completed), an error (retried with exponential
// backoff; dead after MaxAttempts), Cancel(err) (cancelled, never retried)
// or Snooze(d) (run again after d; the attempt is not counted). A panic is
// recorded with its stack and retried like an error.
//
// # Client
//
// A Client enqueues, inspects and, when given queues, works jobs:
//
//	st, err := sqlitestore.Open("sortie.db", nil)
//	client, err := sortie.NewClient(st, &sortie.Config{
//		Queues:  map[string]sortie.QueueConfig{"mail": {MaxWorkers: 10}},
//		Workers: workers,
//	})
//	err = client.Run(ctx, nil) // works until SIGINT or SIGTERM, then stops
//
// Run is the whole life of a worker process (see Stop below). A program
// that works beside other duties calls Start, and Stop when it is done.
//
// # Enqueue
//
// Enqueue returns once the job is committed; EnqueueMany inserts a batch
// atomically:
//
//	res, err := client.Enqueue(ctx, Email{To: "a@example.com"}, &sortie.EnqueueOpts{
//		RunIn:     time.Minute,
//		UniqueKey: "welcome:a@example.com",
//	})
//
// A job with a UniqueKey is not enqueued while another job with that key is
// scheduled, available, running or retrying; res.Duplicate then says so and
// res.ID is the existing job's.
//
// # Stop
//
// Run stops on the first SIGINT or SIGTERM: no new jobs, running jobs
// finish within RunOpts.DrainTimeout (25 s). A second signal, or the end of
// the timeout, cancels them and puts their jobs back without counting the
// attempt, and Run returns within about a second.
//
// Stop does the same for a program that called Start: it stops fetching,
// waits for running jobs, and returns by its context's deadline. Shortly
// before it, or when the context is cancelled, Stop cancels the handlers'
// contexts and puts their jobs back without counting the attempt; a handler
// that ignores its context keeps its job claimed until the lease expires:
//
//	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	err = client.Stop(ctx)
//
// # Guarantees
//
// A claimed job is leased and its lease extended by heartbeats; a job whose
// worker died is rescued after its lease expires and runs again. Every claim
// carries a fencing token, so a stale worker cannot record an outcome over a
// newer attempt. Attempts are counted when a job is claimed, so a job that
// kills its process every time still ends dead.
package sortie
