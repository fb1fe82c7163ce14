package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
)

func TestConfigure(t *testing.T) { onAdminStores(t, testConfigure) }

// configure changes the settings it is given, for every process on the
// store, and keeps the others; bad values are refused by their flags.
func testConfigure(t *testing.T, a adminStore) {
	ctx := context.Background()
	if out := a.ok(t, "configure", "--create", "--max-running", "3", "--rate-limit", "5", "--rate-period", "1s", "mail"); out != "queue mail: max running 3, rate 5 per 1s\n" {
		t.Errorf("configure printed %q", out)
	}
	a.ok(t, "configure", "--max-depth", "10", "--overflow", "drop-oldest", "--max-running", "0", "mail")
	row, err := a.st.QueueGet(ctx, &store.QueueGetParams{Queue: "mail"})
	want := store.QueueSettings{RateLimit: 5, RatePeriod: time.Second, MaxDepth: 10, Overflow: store.OverflowDropOldest}
	if err != nil || row.Settings != want {
		t.Errorf("settings in the store = %+v, %v; want %+v", row.Settings, err, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"configure", "mail"}, "give the settings to change"},
		{[]string{"configure", "--max-running", "2"}, "give one queue to configure, got 0"},
		{[]string{"configure", "--max-running", "-1", "mail"}, "--max-running must not be negative"},
		{[]string{"configure", "--max-running", "many", "mail"}, `want a whole number, got "many"`},
		{[]string{"configure", "--partition-rate-limit", "2", "mail"}, "--partition-rate-limit is 2 but --partition-rate-period is not set"},
		{[]string{"configure", "--overflow", "spill", "mail"}, "--overflow must be reject or drop-oldest"},
	} {
		if code, _, stderr := a.cmd(t, c.args...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("sortie %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
