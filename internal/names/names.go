// Package names holds the rules for the names of kinds and queues, so the
// library, the HTTP API and the command line check them the same way. The
// rules are the store contract's (store.ValidateKind and
// store.ValidateQueueName), which every store enforces on enqueue.
package names

import "github.com/sortiehq/sortie/store"

// MaxLen is the longest kind or queue name, in bytes.
const MaxLen = store.MaxNameLen

// Kind checks a kind name: 1 to 128 bytes of printable UTF-8, no spaces.
func Kind(kind string) error { return store.ValidateKind(kind) }

// Queue checks a queue name: 1 to 128 of a-z A-Z 0-9 _ - . :
func Queue(q string) error { return store.ValidateQueueName(q) }
