package web

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store"
)

// sampler reads the job counts at a fixed interval and keeps, for the last
// n intervals, how many jobs finished in each (completed, cancelled, dead),
// from the difference of the maintained counters. A prune lowers the
// counters; an interval where they went down shows as none finished.
type sampler struct {
	mu       sync.Mutex
	n        int
	last     int64 // finished jobs at the last reading; -1 before the first
	finished []sample
}

type sample struct {
	at       time.Time
	finished int64
}

func newSampler(n int) *sampler { return &sampler{n: n, last: -1} }

func (s *sampler) run(ctx context.Context, c *sortie.Client, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.read(ctx, c)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// read takes one reading; a failed one leaves a gap.
func (s *sampler) read(ctx context.Context, c *sortie.Client) {
	counts, err := c.JobCounts(ctx, "")
	if err != nil {
		s.mu.Lock()
		s.last = -1
		s.mu.Unlock()
		return
	}
	var total int64
	for _, n := range counts {
		switch n.State {
		case store.JobStateCompleted, store.JobStateCancelled, store.JobStateDead:
			total += n.Count
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last >= 0 {
		s.finished = append(s.finished, sample{at: time.Now(), finished: max(total-s.last, 0)})
		if len(s.finished) > s.n {
			s.finished = s.finished[len(s.finished)-s.n:]
		}
	}
	s.last = total
}

// bar is one bar of the chart, in the SVG's coordinates.
type bar struct {
	X, Y, W, H float64
	Label      string
}

// chartData is what the overview draws.
type chartData struct {
	Bars          []bar
	Width, Height float64
	Max           int64
	Every         time.Duration
	Samples       int
}

// chart returns the bars of the samples so far.
func (s *sampler) chart(every time.Duration) chartData {
	s.mu.Lock()
	samples := append([]sample(nil), s.finished...)
	s.mu.Unlock()
	c := chartData{Width: 720, Height: 120, Every: every, Samples: len(samples)}
	for _, x := range samples {
		c.Max = max(c.Max, x.finished)
	}
	w := c.Width / float64(s.n)
	for i, x := range samples {
		h := 0.0
		if c.Max > 0 {
			h = float64(x.finished) / float64(c.Max) * (c.Height - 4)
		}
		c.Bars = append(c.Bars, bar{
			X: float64(s.n-len(samples)+i) * w, Y: c.Height - h, W: w - 1, H: h,
			Label: fmt.Sprintf("%s: %d finished", x.at.UTC().Format("15:04:05Z"), x.finished),
		})
	}
	return c
}
