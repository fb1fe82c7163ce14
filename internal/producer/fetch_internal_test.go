package producer

import "testing"

// A second fetch goes out beside one already out only while the last one
// came back full: behind a backlog it keeps freed workers busy; when the
// queues keep up, the two would only split the same few new jobs.
func TestMayStartOverlapsFetchesOnlyBehindABacklog(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		st   fetchState
		free int32
		want bool
	}{
		{"first fetch", fetchState{}, 4, true},
		{"no free slot", fetchState{}, 0, false},
		{"drained, no wake-up since", fetchState{drained: true}, 4, false},
		{"second fetch behind a full one", fetchState{inFlight: 1}, 4, true},
		{"second fetch after a short one", fetchState{inFlight: 1, short: true}, 4, false},
		{"fetch after a short one, none out", fetchState{short: true}, 4, true},
		{"both fetches out", fetchState{inFlight: fetchesInFlight}, 4, false},
	}
	for _, c := range cases {
		if got := c.st.mayStart(c.free); got != c.want {
			t.Errorf("%s: mayStart(%d) = %v, want %v", c.name, c.free, got, c.want)
		}
	}
}
