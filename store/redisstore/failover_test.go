package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sortiehq/sortie/internal/testkit"
	"github.com/sortiehq/sortie/internal/testkit/redistest"
	"github.com/sortiehq/sortie/store/redisstore"
)

// A server that was a primary fails over to its replica, follows it (a
// partial resync, which keeps the library's state), and is promoted again
// while the other server hands out more IDs and claim tokens that it
// never gets: its own next ones must still be new. With part of the other
// server's values replicated, its counters hold values it did not write;
// before library version 16 it went on from them without a jump and
// handed out the other server's last ID and token again. With none
// replicated, its counters hold its own last values, and only its
// replication ID, read once a counter was idle for a second, says it
// failed over.
func TestFailoverBackRepeatsNoIDOrToken(t *testing.T) {
	t.Parallel()
	for _, part := range []bool{true, false} {
		name := map[bool]string{true: "part replicated", false: "none replicated"}[part]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			failOverBack(t, part)
		})
	}
}

// failOverBack runs the scenario of TestFailoverBackRepeatsNoIDOrToken,
// part saying whether the server promoted again got part of the other's
// values.
func failOverBack(t *testing.T, part bool) {
	a := redistest.StartServer(t, &redistest.ServerOptions{})
	b := redistest.StartServer(t, &redistest.ServerOptions{})
	ra, rb := rawClient(t, a.URL), rawClient(t, b.URL)
	redistest.Follow(t, rb, ra)

	stA := openAt(t, a.URL, "")
	idA, tokA := enqueueAndClaim(t, stA)
	stA.Close()
	lastA := serverClock(t, ra)
	redistest.Replicated(t, ra)

	// b takes over, and a follows it from where it stopped.
	redistest.FailOver(t, rb, ra)
	stB := openAt(t, b.URL, "")
	var idB1, tokB1 int64
	if part {
		idB1, tokB1 = enqueueAndClaim(t, stB)
		redistest.Replicated(t, rb)
	}

	// a is promoted again, lagging: b hands out more that a never gets.
	redistest.Promote(t, ra)
	idB2, tokB2 := enqueueAndClaim(t, stB)
	if !part {
		// a's counters were last written by a itself: only a
		// second of their idleness makes it read its replication ID.
		testkit.WaitFor(t, 10*time.Second, "a second of a's clock since its last write", nil, nil, func() (bool, error) {
			return serverClock(t, ra).Sub(lastA) > 1100*time.Millisecond, nil
		})
	}
	stA = openAt(t, a.URL, "")
	idA2, tokA2 := enqueueAndClaim(t, stA)

	t.Logf("IDs: a %d, b %d and %d, a again %d; tokens: a %d, b %d and %d, a again %d", idA, idB1, idB2, idA2, tokA, tokB1, tokB2, tokA2)
	if idA2 <= idB2 {
		t.Errorf("the server promoted again handed out job ID %d, not above %d, the last the other one handed out", idA2, idB2)
	}
	if tokA2 <= tokB2 {
		t.Errorf("the server promoted again handed out claim token %d, not above %d, the last the other one handed out", tokA2, tokB2)
	}
}

// A counter that no other server wrote keeps its pace after a second
// idle: the server's replication ID it reads then is the one it read
// before, so the next ID and claim token follow the last ones instead of
// jumping 10 s ahead of the clock (which would also let the failover test
// above pass if the ID could not be read).
func TestIdleCounterKeepsItsPace(t *testing.T) {
	t.Parallel()
	st := openAt(t, redistest.URL(t), redistest.Prefix(t))
	rc := rawClient(t, redistest.URL(t))
	id1, tok1 := enqueueAndClaim(t, st)
	last := serverClock(t, rc)
	testkit.WaitFor(t, 10*time.Second, "a second of the server's clock since the last write", nil, nil, func() (bool, error) {
		return serverClock(t, rc).Sub(last) > 1100*time.Millisecond, nil
	})
	id2, tok2 := enqueueAndClaim(t, st)
	// A jump would put them at least the second waited above the first.
	if id2-id1 > 500_000 || tok2-tok1 > 500_000 {
		t.Errorf("after a second idle the ID went from %d to %d and the claim token from %d to %d: a jump, with no failover", id1, id2, tok1, tok2)
	}
}

// serverClock reads the clock of the server at c (TIME).
func serverClock(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// enqueueAndClaim enqueues a job and claims it, and returns its ID and
// claim token.
func enqueueAndClaim(t *testing.T, st *redisstore.Store) (id, token int64) {
	t.Helper()
	now := time.Now()
	id = enqueueJobs(t, st, now, newJobIn("failover", "k"))[0]
	return id, claimKind(t, st, "failover", "k", now, time.Minute).ClaimToken
}
