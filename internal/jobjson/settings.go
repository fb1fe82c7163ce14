package jobjson

import (
	"fmt"
	"time"

	"github.com/sortiehq/sortie/store"
)

// SettingsPatch changes some of a queue's settings: the fields given (not
// nil), by their JSON names. The API takes it as a request body and the
// command line fills it from flags, so both check it the same way.
type SettingsPatch struct {
	MaxRunning          *int    `json:"max_running"`
	RateLimit           *int    `json:"rate_limit"`
	RatePeriod          *string `json:"rate_period"`
	PartitionMaxRunning *int    `json:"partition_max_running"`
	PartitionRateLimit  *int    `json:"partition_rate_limit"`
	PartitionRatePeriod *string `json:"partition_rate_period"`
	MaxDepth            *int    `json:"max_depth"`
	Overflow            *string `json:"overflow"`
}

// Empty reports whether p changes nothing.
func (p *SettingsPatch) Empty() bool { return *p == SettingsPatch{} }

// Apply changes s by p, checking each value. name turns a field's JSON name
// ("max_running") into the caller's own term ("--max-running") for errors.
// A rate limit needs its period (given now or set before); 0 turns a limit
// off, "" a period.
func (p *SettingsPatch) Apply(s *store.QueueSettings, name func(string) string) error {
	for _, f := range []struct {
		field string
		v     *int
		to    *int
	}{
		{"max_running", p.MaxRunning, &s.MaxRunning}, {"rate_limit", p.RateLimit, &s.RateLimit},
		{"partition_max_running", p.PartitionMaxRunning, &s.PartitionMaxRunning},
		{"partition_rate_limit", p.PartitionRateLimit, &s.PartitionRateLimit}, {"max_depth", p.MaxDepth, &s.MaxDepth},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return fmt.Errorf("%s must not be negative (0 turns it off), got %d", name(f.field), *f.v)
		}
		*f.to = *f.v
	}
	for _, f := range []struct {
		field string
		v     *string
		to    *time.Duration
	}{
		{"rate_period", p.RatePeriod, &s.RatePeriod}, {"partition_rate_period", p.PartitionRatePeriod, &s.PartitionRatePeriod},
	} {
		if f.v == nil {
			continue
		}
		d, err := parsePeriod(*f.v)
		if err != nil {
			return fmt.Errorf("%s %w", name(f.field), err)
		}
		*f.to = d
	}
	if p.Overflow != nil {
		switch *p.Overflow {
		case "reject":
			s.Overflow = store.OverflowReject
		case "drop-oldest":
			s.Overflow = store.OverflowDropOldest
		default:
			return fmt.Errorf("%s must be reject or drop-oldest, got %q", name("overflow"), *p.Overflow)
		}
	}
	if s.RateLimit > 0 && s.RatePeriod == 0 {
		return fmt.Errorf("%s is %d but %s is not set", name("rate_limit"), s.RateLimit, name("rate_period"))
	}
	if s.PartitionRateLimit > 0 && s.PartitionRatePeriod == 0 {
		return fmt.Errorf("%s is %d but %s is not set", name("partition_rate_limit"), s.PartitionRateLimit, name("partition_rate_period"))
	}
	return nil
}

// parsePeriod reads a rate period: a positive duration like 1s or 1m, or
// "" for none.
func parsePeriod(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("must be a positive duration like 1s or 1m, got %q", s)
	}
	return d, nil
}
