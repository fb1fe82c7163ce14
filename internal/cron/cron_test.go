package cron

import (
	"strings"
	"testing"
	"time"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q) = %v", name, err)
	}
	return loc
}

func TestParseNext(t *testing.T) {
	t.Parallel()
	ny := mustLoad(t, "America/New_York")
	paris := mustLoad(t, "Europe/Paris")
	from := time.Date(2024, 3, 9, 12, 0, 0, 0, time.UTC) // a Saturday
	tests := []struct {
		name string
		spec string
		loc  *time.Location
		want []time.Time
	}{
		{"5 fields", "*/15 * * * *", nil, []time.Time{
			time.Date(2024, 3, 9, 12, 15, 0, 0, time.UTC),
			time.Date(2024, 3, 9, 12, 30, 0, 0, time.UTC),
		}},
		{"6 fields", "30 */15 * * * *", nil, []time.Time{
			time.Date(2024, 3, 9, 12, 0, 30, 0, time.UTC),
			time.Date(2024, 3, 9, 12, 15, 30, 0, time.UTC),
		}},
		{"descriptor", "@hourly", nil, []time.Time{
			time.Date(2024, 3, 9, 13, 0, 0, 0, time.UTC),
			time.Date(2024, 3, 9, 14, 0, 0, 0, time.UTC),
		}},
		{"daily in loc", "@daily", paris, []time.Time{
			time.Date(2024, 3, 10, 0, 0, 0, 0, paris),
			time.Date(2024, 3, 11, 0, 0, 0, 0, paris),
		}},
		// New York moves to daylight time on 2024-03-10: 9:00 is 14:00 UTC
		// before and 13:00 UTC after.
		{"CRON_TZ across DST", "CRON_TZ=America/New_York 0 9 * * *", paris, []time.Time{
			time.Date(2024, 3, 9, 14, 0, 0, 0, time.UTC),
			time.Date(2024, 3, 10, 13, 0, 0, 0, time.UTC),
			time.Date(2024, 3, 11, 13, 0, 0, 0, time.UTC),
		}},
		{"TZ prefix", "TZ=America/New_York 0 9 * * MON-FRI", nil, []time.Time{
			time.Date(2024, 3, 11, 9, 0, 0, 0, ny),
			time.Date(2024, 3, 12, 9, 0, 0, 0, ny),
		}},
		{"leap day", "0 0 29 2 *", nil, []time.Time{
			time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC),
			time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tt.spec, tt.loc)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.spec, err)
			}
			at := from
			for i, want := range tt.want {
				got := s.Next(at)
				if !got.Equal(want) {
					t.Fatalf("slot %d: Next(%s) = %s, want %s", i, at, got, want)
				}
				at = got
			}
		})
	}
}

func TestNextAfterCenturyLeapGap(t *testing.T) {
	t.Parallel()
	// 2100 is not a leap year, so the next 29 February after 2096 is in
	// 2104, past robfig/cron's five-year search.
	s, err := Parse("0 0 29 2 *", nil)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2096, 3, 1, 0, 0, 0, 0, time.UTC)
	want := time.Date(2104, 2, 29, 0, 0, 0, 0, time.UTC)
	if got := s.Next(from); !got.Equal(want) {
		t.Fatalf("Next(%s) = %s, want %s", from, got, want)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec string
		want string
	}{
		{"empty", "", "is empty"},
		{"blank", "   ", "is empty"},
		{"4 fields", "0 9 * *", "has 4 fields"},
		{"7 fields", "0 0 9 * * * 2024", "has 7 fields"},
		{"out of range", "61 * * * *", "above maximum"},
		{"bad name", "0 9 * * FUN", "failed to parse"},
		{"zero step", "*/0 * * * *", "step"},
		{"never", "0 0 30 2 *", "matches no date"},
		{"every", "@every 1h", "use an interval"},
		{"unknown descriptor", "@sometimes", "unrecognized descriptor"},
		{"zone only", "CRON_TZ=UTC", "not followed by a schedule"},
		{"zone only padded", "TZ=UTC   ", "not followed by a schedule"},
		{"empty zone", "TZ= 0 9 * * *", "time zone is empty"},
		{"unknown zone", "CRON_TZ=Mars/Olympus 0 9 * * *", `unknown time zone "Mars/Olympus"`},
		{"two zones", "TZ=UTC TZ=UTC 0 9 * * *", "more than one time zone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.spec, nil)
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want one containing %q", tt.spec, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), strings.TrimSpace(tt.spec)) {
				t.Fatalf("Parse(%q) = %q, want it to name the spec and contain %q", tt.spec, err, tt.want)
			}
		})
	}
}

func TestEvery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		d    time.Duration
		at   time.Time
		want time.Time
	}{
		{"on a slot", time.Hour, time.Date(2024, 1, 1, 10, 0, 0, 0, time.UTC), time.Date(2024, 1, 1, 11, 0, 0, 0, time.UTC)},
		{"between", time.Hour, time.Date(2024, 1, 1, 10, 0, 0, 1, time.UTC), time.Date(2024, 1, 1, 11, 0, 0, 0, time.UTC)},
		{"epoch aligned", 7 * time.Second, time.Unix(100, 0), time.Unix(105, 0)},
		{"before 1970", 10 * time.Second, time.Unix(-15, 0), time.Unix(-10, 0)},
		{"just before a slot", time.Minute, time.Unix(59, 999999999), time.Unix(60, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Every(tt.d).Next(tt.at); !got.Equal(tt.want) {
				t.Fatalf("Every(%s).Next(%s) = %s, want %s", tt.d, tt.at, got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"* * * * *", "*/5 * * * *", "0 9 * * MON-FRI", "30 0 9 1,15 * *",
		"0 0 29 2 *", "0 0 30 2 *", "@hourly", "@daily", "@every 1h",
		"CRON_TZ=America/New_York 0 9 * * *", "TZ=Europe/Paris 0 0 0 * * *",
		"TZ=", "CRON_TZ=UTC", "TZ= x", "1-5/2 * * * *", "*/0 * * * *",
		"0-59/100000000000000000000 * * * *", "?", "@", "TZ=Local 0 2 * * *",
		"0 30 2 * * *", "CRON_TZ=Australia/Lord_Howe 0 30 2 * * *",
	} {
		f.Add(seed, int64(1710000000))
	}
	f.Fuzz(func(t *testing.T, spec string, unix int64) {
		s, err := Parse(spec, time.UTC)
		if err != nil {
			if !strings.Contains(err.Error(), "cron spec") {
				t.Fatalf("Parse(%q) error %q does not name the spec", spec, err)
			}
			return
		}
		// Keep t where UnixNano and robfig's year arithmetic are valid.
		at := time.Unix(unix%(200*365*24*3600), 0).UTC()
		next := s.Next(at)
		if !next.IsZero() && !next.After(at) {
			t.Fatalf("Parse(%q).Next(%s) = %s, not after it", spec, at, next)
		}
	})
}
