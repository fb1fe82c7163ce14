package health

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

// testHealth returns a health whose clock the test moves, logging into
// the returned buffer.
func testHealth() (*Health, *bytes.Buffer, *time.Time) {
	var buf bytes.Buffer
	now := time.Unix(1_000_000, 0)
	h := &Health{Logger: slog.New(slog.NewTextHandler(&buf, nil)), What: "store", Now: func() time.Time { return now }}
	return h, &buf, &now
}

// A call that began during an outage and whose failure is reported after
// the outage was logged over (a fetch whose answer waited behind another
// fetch's backoff) belongs to that outage: it does not log another. A call
// that began after the recovery and fails does.
func TestHealthLateFailureOfAnOutageThatIsOver(t *testing.T) {
	t.Parallel()
	h, logs, now := testHealth()
	ctx := context.Background()
	refused := errors.New("connection refused")
	began := *now
	h.Fail(ctx, "fetch", refused)
	*now = now.Add(2 * time.Second)
	h.OK(ctx)
	*now = now.Add(healthSettle)
	h.OK(ctx)
	h.FailCall(ctx, "fetch", began, refused)
	*now = now.Add(healthSettle)
	h.OK(ctx)
	if down, up := strings.Count(logs.String(), "store unreachable"), strings.Count(logs.String(), "store reachable again"); down != 1 || up != 1 {
		t.Fatalf("one outage, then the late failure of a call begun during it: logged unreachable %d times and reachable %d times, want 1 and 1:\n%s", down, up, logs)
	}
	h.FailCall(ctx, "fetch", *now, refused)
	if down := strings.Count(logs.String(), "store unreachable"); down != 2 {
		t.Errorf("a call begun after the recovery failed: logged unreachable %d times in all, want 2:\n%s", down, logs)
	}
}

// While a failing store recovers, the late failure of a call begun before
// the successes does not start the settling over.
func TestHealthLateFailureDuringRecovery(t *testing.T) {
	t.Parallel()
	h, logs, now := testHealth()
	ctx := context.Background()
	refused := errors.New("connection refused")
	began := *now
	h.Fail(ctx, "fetch", refused)
	*now = now.Add(2 * time.Second)
	h.OK(ctx)
	*now = now.Add(healthSettle / 2)
	h.FailCall(ctx, "fetch", began, refused)
	*now = now.Add(healthSettle / 2)
	h.OK(ctx)
	if up := strings.Count(logs.String(), "store reachable again"); up != 1 {
		t.Errorf("successes for %s with only a late failure among them: logged reachable %d times, want 1:\n%s", healthSettle, up, logs)
	}
	// A call begun during the successes that fails starts them over.
	h, logs, now = testHealth()
	h.Fail(ctx, "fetch", refused)
	*now = now.Add(2 * time.Second)
	h.OK(ctx)
	*now = now.Add(healthSettle / 2)
	h.FailCall(ctx, "fetch", *now, refused)
	*now = now.Add(healthSettle / 2)
	h.OK(ctx)
	if up := strings.Count(logs.String(), "store reachable again"); up != 0 {
		t.Errorf("a failure among the successes: logged reachable %d times %s after it, want 0:\n%s", up, healthSettle/2, logs)
	}
}

// A store that has no room is logged as full, not as unreachable, and its
// end as room made, once each however many calls failed.
func TestHealthFullStore(t *testing.T) {
	t.Parallel()
	h, logs, now := testHealth()
	ctx := context.Background()
	full := store.FullError("the Redis server is at its maxmemory", errors.New("OOM command not allowed"))
	for range 3 {
		h.Fail(ctx, "enqueue", full)
		*now = now.Add(time.Second)
	}
	h.OK(ctx)
	*now = now.Add(healthSettle)
	h.OK(ctx)
	out := logs.String()
	if n := strings.Count(out, "store full, backing off"); n != 1 || !strings.Contains(out, "maxmemory") {
		t.Errorf("logged %q %d times, want once with the store's reason:\n%s", "store full, backing off", n, out)
	}
	if n := strings.Count(out, "store has room again"); n != 1 || strings.Contains(out, "unreachable") || strings.Contains(out, "reachable again") {
		t.Errorf("want one %q and no reachability lines:\n%s", "store has room again", out)
	}
}

// Quiet lets the first line of a kind in a period through and counts the
// others, reporting them with the next line of the kind let through; a
// failure of another kind is not held back behind the first.
func TestQuiet(t *testing.T) {
	t.Parallel()
	q := &Quiet{Every: time.Minute}
	at := time.Unix(1_000_000, 0)
	var got []string
	for i := range 5 {
		if ok, held := q.Allow("unreachable", at.Add(time.Duration(i)*20*time.Second)); ok {
			got = append(got, strconv.Itoa(i)+":"+strconv.Itoa(held))
		}
	}
	// At 0 s, 20 s, 40 s, 60 s, 80 s: let through at 0 and at 60, which
	// carries the two held back.
	if want := "0:0 3:2"; strings.Join(got, " ") != want {
		t.Errorf("lines let through (call:held) = %q, want %q", strings.Join(got, " "), want)
	}
	if ok, _ := q.Allow("full", at.Add(70*time.Second)); !ok {
		t.Errorf("the first failure of another kind was held back")
	}
}
