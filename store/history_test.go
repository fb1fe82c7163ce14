package store

import (
	"testing"
	"time"
)

func TestHistoryMinute(t *testing.T) {
	t.Parallel()
	in := time.Date(2024, 5, 1, 14, 7, 59, 999_999_000, time.FixedZone("x", 2*3600))
	want := time.Date(2024, 5, 1, 12, 7, 0, 0, time.UTC)
	if got := HistoryMinute(in); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("HistoryMinute(%v) = %v, want %v in UTC", in, got, want)
	}
}
