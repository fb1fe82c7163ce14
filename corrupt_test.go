package sortie_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/testkit/storefault"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// Damage a client's own work meets in the store is not an outage: it is
// logged once, as an error saying to restore from a backup, and kept for
// StoreCorruption, whatever the store's calls do afterwards.
func TestStoreCorruptionFoundLater(t *testing.T) {
	t.Parallel()
	inner := memstore.New()
	t.Cleanup(func() { _ = inner.Close() })
	st := storefault.New(inner)
	t.Cleanup(st.Heal)
	damage := fmt.Errorf("sqlitestore: rescue: /data/sortie.db is corrupt: database disk image is malformed; restore it from a backup: %w", store.ErrCorrupt)
	st.Fail("JobRescue", damage)
	logs := &syncBuffer{}
	c := startClient(t, st, &sortie.Config{RescueInterval: time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The loop records a failure before it calls again.
	if err := st.WaitCalls(ctx, "JobRescue", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreCorruption(); err != damage {
		t.Fatalf("StoreCorruption() = %v, want the rescue's error", err)
	}
	out := logs.String()
	if n := strings.Count(out, "store is corrupt: retrying will not help; restore it from a backup"); n != 1 || !strings.Contains(out, "level=ERROR") || strings.Contains(out, "unreachable") {
		t.Errorf("log after 5 failed rescues on a damaged store, want one error line saying it is corrupt and no outage:\n%s", out)
	}
}
