// Package metrics exports a sortie Client's activity to Prometheus.
//
// A Collector counts the jobs the client enqueues, starts and finishes (from
// its events), times how long jobs wait to start and how long they run, and
// at each scrape reads the number of jobs per queue and state from the store.
// Its Handler serves them, with the metrics of a prometheus.Gatherer such as
// the default registry's (Go runtime, process, your own):
//
//	col := metrics.New(client, nil)
//	defer col.Close()
//	http.Handle("GET /metrics", col.Handler(prometheus.DefaultGatherer))
//
// A Collector is also a prometheus.Collector, to register like any other
// (a Registry holding it is then not for its Handler):
//
//	prometheus.MustRegister(col)
//	http.Handle("GET /metrics", promhttp.Handler())
//
// Both serve the same metrics; Handler is promhttp.HandlerFor over a
// Registry of its own and also.
//
// Labels are limited to queue, kind, outcome and state, so the number of
// series grows with the queues and kinds an application has, never with its
// jobs.
//
// Counters and histograms describe this process: the jobs its client
// enqueued and ran. Add them up across processes in queries
// (sum by (queue) (rate(sortie_jobs_finished_total[5m]))). The queue gauges
// describe the whole store, so every process reports the same figures; take
// max() across processes, or set Options.SkipQueueJobs on all but one.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// DefaultBuckets are the default histogram buckets, in seconds: from 5
// milliseconds to an hour, since jobs wait and run much longer than the
// requests prometheus.DefBuckets is made for.
var DefaultBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
	60, 120, 300, 600, 1800, 3600,
}

// Keys of the attributes the collector logs.
const (
	logKeyError   = "error"
	logKeyTimeout = "timeout"
)

// Options configure a Collector. A nil *Options means all defaults; a zero
// field means that field's default.
type Options struct {
	// Namespace prefixes every metric name. Defaults to "sortie".
	Namespace string
	// ConstLabels are added to every metric, for example to tell apart
	// several clients in one process. Defaults to none.
	ConstLabels prometheus.Labels
	// LatencyBuckets are the buckets, in seconds, of the start latency
	// histogram. Defaults to DefaultBuckets.
	LatencyBuckets []float64
	// DurationBuckets are the buckets, in seconds, of the run duration
	// histogram. Defaults to DefaultBuckets.
	DurationBuckets []float64
	// QueueJobsTimeout bounds the store read of the queue gauges at each
	// scrape. Defaults to 5 seconds.
	QueueJobsTimeout time.Duration
	// SkipQueueJobs leaves out the queue gauges (and the store up gauge), so
	// a scrape never reads the store. Set it on all processes sharing a store
	// but one. Defaults to false.
	SkipQueueJobs bool
	// Logger receives a warning when the store cannot be read at a scrape
	// and a note when it can again. Defaults to slog.Default().
	Logger *slog.Logger
}

// Collector is a prometheus.Collector for one sortie Client. It is safe for
// concurrent use. Register it with a prometheus.Registerer, or serve it with
// its Handler; the metrics it exports are listed below, with the default
// namespace:
//
//	sortie_jobs_enqueued_total{queue,kind}          counter
//	sortie_jobs_started_total{queue,kind}           counter
//	sortie_jobs_finished_total{queue,kind,outcome}  counter
//	sortie_job_start_latency_seconds{queue,kind}    histogram
//	sortie_job_run_duration_seconds{queue,kind}     histogram
//	sortie_queue_jobs{queue,state}                  gauge, read at scrape
//	sortie_store_up                                 gauge, read at scrape
//	sortie_store_server_problem{problem}            gauge, the client's last check
//
// Outcomes are those of sortie.Outcome (completed, retrying, dead,
// cancelled, snoozed, released); states are those of sortie.JobState.
type Collector struct {
	// counts reads the job counts; the client's JobCounts, replaced in tests.
	counts  func(ctx context.Context, queue string) ([]sortie.QueueStateCount, error)
	timeout time.Duration
	skip    bool
	logger  *slog.Logger

	enqueued *prometheus.CounterVec
	started  *prometheus.CounterVec
	finished *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	// queueJobs and storeUp describe the gauges read at each scrape.
	queueJobs *prometheus.Desc
	storeUp   *prometheus.Desc
	// storeProblem is 1 per problem of the store's server
	// (sortie.Client.ServerProblems), read at scrape without a store call.
	storeProblem *prometheus.Desc
	problems     func() []sortie.ServerProblem

	unsubscribe func()
	closeOnce   sync.Once

	mu     sync.Mutex // guards failed
	failed bool       // the last store read failed; logged when it starts and clears
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector counting the events of client from now on; it
// counts nothing that happened before. It does not register the Collector;
// call Close to stop counting. New panics if opts would make invalid metrics
// (an invalid Namespace, a ConstLabels name that is invalid or clashes with
// queue, kind, outcome, state or le, unsorted buckets), as those are
// programming mistakes.
func New(client *sortie.Client, opts *Options) *Collector {
	if client == nil {
		panic("metrics: New: client is nil")
	}
	c := newCollector(client.JobCounts, opts)
	c.problems = client.ServerProblems
	c.unsubscribe = client.Subscribe(c.observe)
	return c
}

// newCollector builds a Collector reading job counts from counts, without
// subscribing to anything.
func newCollector(counts func(context.Context, string) ([]sortie.QueueStateCount, error), opts *Options) *Collector {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Namespace == "" {
		o.Namespace = "sortie"
	}
	if len(o.LatencyBuckets) == 0 {
		o.LatencyBuckets = DefaultBuckets
	}
	if len(o.DurationBuckets) == 0 {
		o.DurationBuckets = DefaultBuckets
	}
	if o.QueueJobsTimeout <= 0 {
		o.QueueJobsTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ns, cl := o.Namespace, o.ConstLabels
	// A vector checks its buckets (increasing) and constant labels (no le)
	// only when its first child is made; make one of each now, so a mistake
	// panics here with client_golang's message.
	for _, b := range [][]float64{o.LatencyBuckets, o.DurationBuckets} {
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "check", ConstLabels: cl, Buckets: b})
	}
	pair := []string{"queue", "kind"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl}, labels)
	}
	histogram := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, ConstLabels: cl, Buckets: buckets}, pair)
	}
	c := &Collector{
		counts:   counts,
		timeout:  o.QueueJobsTimeout,
		skip:     o.SkipQueueJobs,
		logger:   o.Logger,
		enqueued: counter("jobs_enqueued_total", "Jobs this process enqueued (duplicates of unique jobs left out).", pair),
		started:  counter("jobs_started_total", "Attempts this process started.", pair),
		finished: counter("jobs_finished_total", "Attempts this process finished, by outcome (completed, retrying, dead, cancelled, snoozed, released).",
			[]string{"queue", "kind", "outcome"}),
		latency: histogram("job_start_latency_seconds", "Time from when a job was due (the later of its creation and its RunAt) to the start of an attempt.",
			o.LatencyBuckets),
		duration: histogram("job_run_duration_seconds", "Time an attempt's handler ran.", o.DurationBuckets),
		queueJobs: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "queue_jobs"),
			"Jobs in the store by queue and state, read at scrape time.", []string{"queue", "state"}, cl),
		storeUp: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "store_up"),
			"1 if the job counts were read from the store at this scrape, 0 if not.", nil, cl),
		storeProblem: prometheus.NewDesc(prometheus.BuildFQName(ns, "", "store_server_problem"),
			"1 for each state of the store's server that puts jobs at risk, as the client's last check found it (eviction, no-persistence, no-append-only, memory).",
			[]string{"problem"}, cl),
	}
	// Descriptors record rather than report their errors (an invalid
	// Namespace, a ConstLabels name clashing with a label); registering
	// surfaces them.
	if err := prometheus.NewPedanticRegistry().Register(c); err != nil {
		panic("metrics: invalid Options: " + err.Error())
	}
	return c
}

// Handler returns an http.Handler serving the Collector's metrics and those
// gathered from also (nil for none; for example prometheus.DefaultGatherer,
// or a Registry holding client_golang's Go runtime and process collectors):
// promhttp's handler over both, with its content negotiation, compression
// and name[] filter. The Collector must not be registered in also: a family
// gathered twice answers 500, as does an error of also.Gather (logged as a
// warning on Options.Logger). A store that cannot be read does not fail the
// scrape (see Collect).
func (c *Collector) Handler(also prometheus.Gatherer) http.Handler {
	own := prometheus.NewRegistry()
	own.MustRegister(c)
	g := prometheus.Gatherers{own}
	if also != nil {
		g = append(g, also)
	}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(c.logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.HTTPErrorOnError,
	})
}

// Close stops counting the client's events. Metrics counted so far are
// still exported, and the queue gauges are still read at each scrape.
// Close may be called more than once.
func (c *Collector) Close() {
	c.closeOnce.Do(func() {
		if c.unsubscribe != nil {
			c.unsubscribe()
		}
	})
}

// observe counts one event. It runs on the client's goroutines.
func (c *Collector) observe(e *sortie.Event) {
	if e.Job == nil {
		return
	}
	q, k := e.Job.Queue, e.Job.Kind
	switch e.Kind {
	case sortie.EventJobEnqueued:
		c.enqueued.WithLabelValues(q, k).Inc()
	case sortie.EventJobStarted:
		due := e.Job.RunAt
		if e.Job.CreatedAt.After(due) {
			due = e.Job.CreatedAt
		}
		// Clocks of different processes disagree a little; a start before
		// the due time is a start on time.
		wait := max(e.At.Sub(due), 0)
		c.started.WithLabelValues(q, k).Inc()
		c.latency.WithLabelValues(q, k).Observe(wait.Seconds())
	case sortie.EventJobFinished:
		c.finished.WithLabelValues(q, k, string(e.Outcome)).Inc()
		c.duration.WithLabelValues(q, k).Observe(e.Duration.Seconds())
	}
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.vecs(func(v prometheus.Collector) { v.Describe(ch) })
	ch <- c.storeProblem
	if !c.skip {
		ch <- c.queueJobs
		ch <- c.storeUp
	}
}

// Collect sends the current metrics. Unless Options.SkipQueueJobs is set, it
// reads the job counts from the store, waiting at most
// Options.QueueJobsTimeout. If that fails, the scrape still succeeds: the
// queue gauges are left out, sortie_store_up is 0, and a warning is logged
// (once, until a read succeeds again). Failing the whole scrape instead
// would hide the counters exactly when the store is in trouble.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.vecs(func(v prometheus.Collector) { v.Collect(ch) })
	if c.problems != nil {
		for _, p := range c.problems() {
			ch <- prometheus.MustNewConstMetric(c.storeProblem, prometheus.GaugeValue, 1, p.Code)
		}
	}
	if c.skip {
		return
	}
	jobs := c.readQueueJobs()
	up := 0.0
	if jobs.up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.storeUp, prometheus.GaugeValue, up)
	for _, q := range jobs.queues {
		for i, n := range q.counts {
			ch <- prometheus.MustNewConstMetric(c.queueJobs, prometheus.GaugeValue, float64(n), q.queue, sortedStates[i])
		}
	}
}

// vecs calls f with each of the Collector's counter and histogram vectors.
func (c *Collector) vecs(f func(prometheus.Collector)) {
	for _, v := range []prometheus.Collector{c.enqueued, c.started, c.finished, c.latency, c.duration} {
		f(v)
	}
}

// queueJobs is what a scrape read from the store.
type queueJobs struct {
	up     bool         // the read succeeded
	queues []queueCount // by queue name
}

// queueCount is the number of jobs of one queue in each of sortedStates.
type queueCount struct {
	queue  string
	counts []int64
}

// sortedStates are the job states in name order, the order of their
// series.
var sortedStates = func() []string {
	var s []string
	for _, st := range store.JobStates {
		s = append(s, string(st))
	}
	slices.Sort(s)
	return s
}()

// readQueueJobs reads the job counts of every queue from the store.
func (c *Collector) readQueueJobs() *queueJobs {
	// prometheus.Collector.Collect takes no context, so the scrape's own
	// deadline cannot reach here; the timeout bounds the store read instead.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts, err := c.counts(ctx, "")
	c.noteRead(ctx, err)
	if err != nil {
		return &queueJobs{}
	}
	// The store leaves zero counts out. Report every state of each queue it
	// names, so a state that empties drops to 0 instead of vanishing.
	jobs := &queueJobs{up: true}
	byQueue := map[string]int{}
	for _, qc := range counts {
		i, ok := byQueue[qc.Queue]
		if !ok {
			i = len(jobs.queues)
			byQueue[qc.Queue] = i
			jobs.queues = append(jobs.queues, queueCount{queue: qc.Queue, counts: make([]int64, len(sortedStates))})
		}
		if st, found := slices.BinarySearch(sortedStates, string(qc.State)); found {
			jobs.queues[i].counts[st] += qc.Count
		}
	}
	slices.SortFunc(jobs.queues, func(a, b queueCount) int { return strings.Compare(a.queue, b.queue) })
	return jobs
}

// noteRead logs a failed store read when failures start, and when they clear.
func (c *Collector) noteRead(ctx context.Context, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && !c.failed:
		c.failed = true
		c.logger.WarnContext(ctx, "job counts unreadable, queue gauges left out of scrapes",
			slog.String(logKeyError, err.Error()), slog.Duration(logKeyTimeout, c.timeout))
	case err == nil && c.failed:
		c.failed = false
		c.logger.InfoContext(ctx, "job counts readable again")
	}
}
