package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// seeded is what seed made: a job of each kind of page worth looking at.
type seeded struct {
	dead, scheduled, inWorkflow, cancelledDependent, withSteps int64
	// beat beats the seeded processes again, so they show as alive.
	beat func()
}

// seed fills s's store as a busy system looks: a few hundred jobs in every
// state across five queues (one paused, some with limits), running jobs
// of two processes and of remote workers with progress, workflows (one
// whose failed step cancelled its dependents), periodic schedules and
// the processes running them.
func seed(t *testing.T, s *site) seeded {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	var out seeded
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, set := range map[string]sortie.QueueSettings{
		"mail":     {MaxRunning: 4, RateLimit: 10, RatePeriod: time.Second},
		"billing":  {MaxDepth: 5000, Overflow: sortie.OverflowDropOldest, PartitionMaxRunning: 1},
		"webhooks": {RateLimit: 600, RatePeriod: time.Minute},
	} {
		_, err := s.c.QueueConfigure(ctx, name, set)
		must(err)
	}
	kinds := map[string][]string{
		"mail":     {"email.send", "email.digest"},
		"default":  {"image.resize", "cache.warm", "search.reindex"},
		"reports":  {"report.render"},
		"billing":  {"invoice.charge", "invoice.remind"},
		"webhooks": {"webhook.deliver"},
	}
	queues := []string{"mail", "default", "reports", "billing", "webhooks"}
	enqueue := func(i int, opts *sortie.EnqueueOpts) int64 {
		q := queues[i%len(queues)]
		if opts.Queue == "" {
			opts.Queue = q
		}
		k := kinds[opts.Queue][i%len(kinds[opts.Queue])]
		args := fmt.Sprintf(`{"user_id":%d,"email":"user%d@example.com","template":"welcome","locale":"en-GB"}`, 1000+i, i)
		res, err := s.c.Enqueue(ctx, rawArgs{k, args}, opts)
		must(err)
		return res.ID
	}
	// finish claims n jobs of queue as worker and reports each with how,
	// one at a time; spread, over the last hour (jobs due an hour ago),
	// so the charts have a shape.
	finish := func(queue, worker string, n int, spread bool, how func(i int, j *store.JobRow) *store.Report) {
		for i := range n {
			at := time.Now()
			if spread {
				at = now.Add(-time.Duration((i*17+len(queue)*5)%57+1) * time.Minute)
			}
			took := time.Duration(40+(i*37)%900) * time.Millisecond
			jobs, err := store.FetchedJobs(s.st.JobFetch(ctx, &store.JobFetchParams{Queue: queue, Limit: 1, Worker: worker,
				Now: at.Add(-took), Lease: time.Hour}))
			must(err)
			if len(jobs) == 0 {
				return
			}
			r := how(i, jobs[0])
			if r == nil {
				continue
			}
			r.ID, r.ClaimToken = jobs[0].ID, jobs[0].ClaimToken
			if !r.RunAt.IsZero() {
				r.RunAt = r.RunAt.Add(now.Sub(at))
			}
			_, err = s.st.JobFinish(ctx, &store.JobFinishParams{Now: at, Reports: []*store.Report{r}})
			must(err)
		}
	}
	errs := []string{
		"smtp: 550 5.1.1 mailbox unavailable: user unknown",
		"charge declined: card_expired (the customer's card expired in 2025-09; ask them for another before retrying)",
		"render: template \"monthly\" line 48: undefined variable .Totals.Net",
		"post https://hooks.example.com/orders: context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
	}
	stack := "goroutine 17 [running]:\nmain.(*Mailer).Send(0xc000118000)\n\t/app/mail/send.go:88 +0x1f4\nmain.work(...)\n\t/app/worker.go:41 +0x95"
	for q := range queues {
		// Completed, dead and retrying jobs, per queue.
		for i := range 60 {
			enqueue(i, &sortie.EnqueueOpts{Queue: queues[q], MaxAttempts: 1 + i%3, RunAt: now.Add(-2 * time.Hour)})
		}
		finish(queues[q], "host-a-4211-k3x9", 60, true, func(i int, j *store.JobRow) *store.Report {
			switch {
			case i < 34:
				return &store.Report{Kind: store.ReportCompleted, Result: []byte(`{"ok":true,"took_ms":42}`)}
			case i < 50:
				return &store.Report{Kind: store.ReportFailed, RunAt: now.Add(time.Duration(i) * time.Minute),
					Error: &store.AttemptError{Message: errs[i%len(errs)], Stack: stack}}
			}
			return &store.Report{Kind: store.ReportFailed, Error: &store.AttemptError{Message: errs[(i+q)%len(errs)], Stack: stack}}
		})
	}
	// Scheduled, in no order of ID.
	for i := range 80 {
		id := enqueue(i, &sortie.EnqueueOpts{RunAt: now.Add(time.Duration((i*37)%300+1) * time.Minute)})
		if out.scheduled == 0 {
			out.scheduled = id
		}
	}
	// Available, and cancelled.
	for i := range 90 {
		enqueue(i, &sortie.EnqueueOpts{Tags: []string{"signup"}})
	}
	for i := range 30 {
		id := enqueue(i, &sortie.EnqueueOpts{Queue: "reports", RunIn: time.Hour})
		_, err := s.c.JobCancel(ctx, id)
		must(err)
	}
	// Workflows: a thumbnail pipeline under way, and an import whose first
	// step died and cancelled the rest.
	wf := sortie.NewWorkflow()
	fetch := wf.Add(rawArgs{"media.fetch", `{"url":"https://cdn.example.com/u/42.png"}`}, &sortie.EnqueueOpts{Queue: "default", Priority: 1})
	small := wf.Add(rawArgs{"image.resize", `{"size":"small"}`}, &sortie.EnqueueOpts{Queue: "default"}, fetch)
	large := wf.Add(rawArgs{"image.resize", `{"size":"large"}`}, &sortie.EnqueueOpts{Queue: "default"}, fetch)
	thumb := wf.Add(rawArgs{"image.thumbnail", `{}`}, &sortie.EnqueueOpts{Queue: "default"}, small)
	publish := wf.Add(rawArgs{"media.publish", `{}`}, &sortie.EnqueueOpts{Queue: "default"}, small, large, thumb)
	wf.Add(rawArgs{"email.send", `{"template":"media_ready"}`}, &sortie.EnqueueOpts{Queue: "mail"}, publish)
	res, err := s.c.EnqueueWorkflow(ctx, wf)
	must(err)
	out.inWorkflow = res[4].ID
	finish("default", "host-a-4211-k3x9", 1, false, func(int, *store.JobRow) *store.Report {
		return &store.Report{Kind: store.ReportCompleted}
	})
	imp := sortie.NewWorkflow()
	first := imp.Add(rawArgs{"import.download", `{"file":"customers.csv"}`}, &sortie.EnqueueOpts{Queue: "imports", MaxAttempts: 1})
	parse := imp.Add(rawArgs{"import.parse", `{}`}, &sortie.EnqueueOpts{Queue: "imports"}, first)
	imp.Add(rawArgs{"import.load", `{}`}, &sortie.EnqueueOpts{Queue: "imports"}, parse)
	res, err = s.c.EnqueueWorkflow(ctx, imp)
	must(err)
	out.cancelledDependent = res[1].ID
	// Running: two processes and two remote workers, some with progress.
	procs := []store.ProcessRow{
		{ID: "host-a-4211-k3x9", Host: "host-a", PID: 4211, Version: "devel+7b1ae327cce8", Busy: 9, StartedAt: now.Add(-3 * time.Hour),
			Queues: []store.ProcessQueue{{Queue: "mail", Workers: 10}, {Queue: "default", Workers: 20}, {Queue: "webhooks", Workers: 5}}},
		{ID: "host-b-977-p2m1", Host: "host-b", PID: 977, Version: "devel+7b1ae327cce8", Busy: 4, StartedAt: now.Add(-26 * time.Minute),
			Queues: []store.ProcessQueue{{Queue: "billing", Workers: 4}, {Queue: "reports", Workers: 2}},
			Periodic: []store.ProcessSchedule{{Name: "nightly-invoices", Spec: "0 3 * * *", Misfire: "catch_up", Next: now.Add(5 * time.Hour),
				MissedAt: now.Add(-20 * time.Minute), Missed: 3, Enqueued: 3}, {Name: "cache-warm", Spec: "every 5m", Misfire: "skip", Next: now.Add(3 * time.Minute)}}},
		{ID: "host-c-88-q7zz", Host: "host-c", PID: 88, Version: "v0.4.0", StartedAt: now.Add(-2 * time.Hour),
			Queues: []store.ProcessQueue{{Queue: "mail", Workers: 10}}},
	}
	out.beat = func() {
		for _, p := range procs {
			_, err := s.st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: time.Now(), Process: p})
			must(err)
		}
	}
	out.beat()
	_, err = s.c.CommandProcess(ctx, "host-c-88-q7zz", sortie.ProcessQuiet)
	must(err)
	_, err = s.st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "nightly-invoices", To: now.Add(-21 * time.Hour), Now: now})
	must(err)
	_, err = s.st.PeriodicAdvance(ctx, &store.PeriodicAdvanceParams{Name: "legacy-export", To: now.Add(-72 * time.Hour), Now: now})
	must(err)
	finish("imports", "host-a-4211-k3x9", 1, false, func(int, *store.JobRow) *store.Report {
		return &store.Report{Kind: store.ReportFailed, Error: &store.AttemptError{Message: "download: 404 Not Found", Stack: stack}}
	})
	running := []struct {
		queue, worker string
		n             int
	}{{"default", "host-a-4211-k3x9", 6}, {"mail", "host-a-4211-k3x9", 3}, {"billing", "host-b-977-p2m1", 2},
		{"reports", "host-b-977-p2m1", 2}, {"webhooks", "py-worker@ingest-1", 4}, {"mail", "http:10.0.0.7:50412", 2}}
	for _, r := range running {
		jobs, err := store.FetchedJobs(s.st.JobFetch(ctx, &store.JobFetchParams{Queue: r.queue, Limit: r.n, Worker: r.worker, Now: now, Lease: 10 * time.Minute}))
		must(err)
		progress := map[store.LeaseRef]float64{}
		var refs []store.LeaseRef
		for i, j := range jobs {
			ref := store.LeaseRef{ID: j.ID, ClaimToken: j.ClaimToken}
			refs = append(refs, ref)
			if i%2 == 0 {
				progress[ref] = float64(15 + 30*i%90)
			}
		}
		_, err = s.st.LeaseExtend(ctx, &store.LeaseExtendParams{Leases: refs, Now: now, Lease: 10 * time.Minute, Progress: progress})
		must(err)
	}
	// Some available jobs wait on the paused queue.
	_, err = s.c.QueuePause(ctx, "reports")
	must(err)
	rows, err := s.c.JobList(ctx, &sortie.JobListParams{State: sortie.JobStateDead, Limit: 1})
	must(err)
	out.dead = rows.Jobs[0].ID
	// An order in durable steps: charged, its receipts spawned and awaited.
	out.withSteps = s.enqueue(t, "order.checkout", "orders")
	order := s.claim(t, "orders", out.withSteps, now.Add(-time.Minute))
	_, err = s.st.StepRecord(ctx, &store.StepRecordParams{Now: now.Add(-50 * time.Second), Steps: []*store.StepRecord{
		{ID: order.ID, ClaimToken: order.ClaimToken, Name: "charge", Result: []byte(`{"charge_id":"ch_3NqLx2","amount":4200,"currency":"eur"}`)}}})
	must(err)
	kids := []*store.NewJob{{Kind: "email.send", Queue: "mail", Args: []byte(`{"template":"receipt"}`)},
		{Kind: "invoice.render", Queue: "billing", Args: []byte(`{}`)}}
	_, err = s.st.StepSpawn(ctx, &store.StepSpawnParams{ID: order.ID, ClaimToken: order.ClaimToken, Name: "receipts", Jobs: kids, Now: now.Add(-40 * time.Second)})
	must(err)
	_, err = s.st.StepAwait(ctx, &store.StepAwaitParams{ID: order.ID, ClaimToken: order.ClaimToken, Name: "receipts", Now: now.Add(-40 * time.Second)})
	must(err)
	return out
}
