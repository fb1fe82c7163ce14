// Package cron turns the schedules of periodic jobs into slot times: cron
// expressions (parsed by github.com/robfig/cron/v3) and fixed intervals
// aligned to the Unix epoch.
package cron

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	robfig "github.com/robfig/cron/v3"
)

// Schedule gives the slots of a periodic job.
type Schedule interface {
	// Next returns the first slot strictly after t, or the zero time if the
	// schedule has no slot after t.
	Next(t time.Time) time.Time
}

var (
	parser5 = robfig.NewParser(robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)
	parser6 = robfig.NewParser(robfig.Second | robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)
)

// neverRef is the time Parse looks for a first slot after, to reject specs
// that match no date at all (February 30).
var neverRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Parse parses a cron expression: 5 fields (minute hour day-of-month month
// day-of-week), or 6 with seconds first, or a descriptor (@yearly,
// @annually, @monthly, @weekly, @daily, @midnight, @hourly). A
// "CRON_TZ=Zone " or "TZ=Zone " prefix sets its time zone; otherwise it is
// loc (UTC when loc is nil). Errors name the spec.
func Parse(spec string, loc *time.Location) (Schedule, error) {
	s, err := parse(spec, loc)
	if err != nil {
		return nil, fmt.Errorf("cron spec %q: %w", spec, err)
	}
	return s, nil
}

func parse(spec string, loc *time.Location) (Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	rest := strings.TrimSpace(spec)
	if rest == "" {
		return nil, errors.New("is empty")
	}
	// robfig/cron handles the prefix itself, but panics when nothing
	// follows it and loads time.Local when it is absent, so we take it off.
	if name, ok := strings.CutPrefix(rest, "CRON_TZ="); ok {
		rest = name
	} else if name, ok := strings.CutPrefix(rest, "TZ="); ok {
		rest = name
	} else {
		return parseFields(rest, loc)
	}
	i := strings.IndexFunc(rest, unicode.IsSpace)
	if i < 0 {
		return nil, errors.New("time zone prefix is not followed by a schedule")
	}
	zone := rest[:i]
	if zone == "" {
		return nil, errors.New("time zone is empty")
	}
	tz, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q", zone)
	}
	return parseFields(strings.TrimSpace(rest[i:]), tz)
}

func parseFields(spec string, loc *time.Location) (Schedule, error) {
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, errors.New("has more than one time zone prefix")
	}
	p := parser5
	if strings.HasPrefix(spec, "@") {
		if strings.HasPrefix(spec, "@every") {
			return nil, errors.New("@every is not supported; use an interval")
		}
	} else {
		switch n := len(strings.Fields(spec)); n {
		case 5:
		case 6:
			p = parser6
		default:
			return nil, fmt.Errorf("has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)", n)
		}
	}
	s, err := p.Parse(spec)
	if err != nil {
		return nil, err
	}
	ss, ok := s.(*robfig.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unsupported schedule type %T", s)
	}
	ss.Location = loc
	cs := cronSchedule{spec: ss}
	if cs.Next(neverRef).IsZero() {
		return nil, errors.New("matches no date")
	}
	return cs, nil
}

// cronSchedule is a parsed cron expression.
type cronSchedule struct {
	spec *robfig.SpecSchedule
}

// searchRounds bounds how often Next restarts robfig's search, which gives
// up after about five years (February 29 of a leap year after a century
// that is not one can be eight years away).
const searchRounds = 4

// Next returns the first slot after t in the schedule's time zone.
func (s cronSchedule) Next(t time.Time) time.Time {
	from := t
	for range searchRounds {
		next := s.spec.Next(from)
		if next.IsZero() {
			// robfig searched every year up to from's year + 5.
			from = from.AddDate(5, 0, 0)
			continue
		}
		if !next.After(t) {
			// Not seen, but a slot must be after t whatever a time zone
			// transition did to robfig's arithmetic; look again a second on.
			from = later(from, next).Add(time.Second)
			continue
		}
		return next.In(s.spec.Location)
	}
	return time.Time{}
}

// Every returns slots every d, aligned to the Unix epoch (d > 0). Slots are
// in UTC; t must be within the years 1678 to 2262.
func Every(d time.Duration) Schedule {
	if d <= 0 {
		panic("cron: Every with a non-positive interval")
	}
	return every(d)
}

type every time.Duration

func (e every) Next(t time.Time) time.Time {
	ns, d := t.UnixNano(), int64(e)
	k := ns / d
	if ns%d < 0 {
		k-- // floor, for times before 1970
	}
	return time.Unix(0, (k+1)*d).UTC()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
