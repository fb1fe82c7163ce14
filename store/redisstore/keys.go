package redisstore

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/sortiehq/sortie/store"
)

// groups is how many key groups there are. A queue lives in one group
// (groupOf), and every key of the queue carries the group's hash tag {g}.
const groups = 16384

// newIDMin is the least job ID library version 8 and later hand out: an ID
// is at least the server's clock in microseconds (see sortie.lua's
// new_values), and holds no group. Its job's hash is P:j:<id> on one
// server and P:{g}:j:<id> in its queue's group g on a cluster (see
// locate.go). An ID below it was handed out by an earlier version as
// seq*groups + g, or imported: its group is the one it gives (naturalGroup),
// unless P:fid records another.
const newIDMin = 1 << 50

// isNewID reports whether id is at least newIDMin.
func isNewID(id int64) bool { return id >= newIDMin }

// DefaultGroup is the key group of a queue when Options.Group is nil: the
// part of its name before the first ':', or the whole name. So "mail:high"
// and "mail:low" share a group, and "billing" has its own.
func DefaultGroup(queue string) string {
	name, _, _ := strings.Cut(queue, ":")
	return name
}

// groupOf returns the group number of queue q.
func (k keys) groupOf(q string) int64 {
	name := DefaultGroup(q)
	if k.groupName != nil {
		name = k.groupName(q)
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return int64(h.Sum32() % groups)
}

// naturalGroup returns the group an ID below newIDMin gives.
func naturalGroup(id int64) int64 { return id % groups }

// group returns a group as the library's arguments give it.
func group(g int64) string { return strconv.FormatInt(g, 10) }

// keys builds the names of the store's keys under its prefix; the Lua
// library builds the same names (see sortie.lua's header).
type keys struct {
	prefix    string
	groupName func(queue string) string
	// cluster: the store is on a Redis Cluster, where a job's hash
	// carries its group's hash tag whatever its ID.
	cluster bool
}

func (k keys) tag(g int64) string {
	return k.prefix + ":{" + strconv.FormatInt(g, 10) + "}:"
}

// job is the hash of job id where its ID says: for an ID below newIDMin
// in the group it gives (every such job's but an imported one's that
// P:fid records, see locate.go); for a new ID on one server, its own.
// A new ID on a cluster says nothing: see jobIn.
func (k keys) job(id int64) string {
	return k.jobIn(id, naturalGroup(id))
}

// jobIn is the hash of job id in group g (on one server, a new ID's
// hash, whatever g).
func (k keys) jobIn(id, g int64) string {
	if isNewID(id) && !k.cluster {
		return k.prefix + ":j:" + idString(id)
	}
	return k.tag(g) + "j:" + idString(id)
}

// fid is the hash of imported job ID -> group, for the imported jobs
// whose ID gives another group than their queue's (see locate.go).
func (k keys) fid() string { return k.prefix + ":fid" }

// token is group g's claim token counter.
func (k keys) token(g int64) string { return k.tag(g) + "tok" }

// queue is the prefix of queue q's keys.
func (k keys) queue(q string) string {
	return k.tag(k.groupOf(q)) + "q" + strconv.Itoa(len(q)) + ":" + q + ":"
}

// watch is the shard channel announcing that jobs of q may be available.
func (k keys) watch(q string) string {
	return k.tag(k.groupOf(q)) + "w:" + strconv.Itoa(len(q)) + ":" + q
}

// done is the shard channel carrying the IDs of group g's jobs that finished.
func (k keys) done(g int64) string { return k.tag(g) + "done" }

// running is the set of queue q's running jobs by lease expiry; its size
// is their count.
func (k keys) running(q string) string { return k.queue(q) + "r" }

// stateIndex is the ID index of queue q's jobs in state st (not running):
// a set of buckets of IDs (see sortie.lua's index_add).
func (k keys) stateIndex(q string, st store.JobState) string {
	return k.queue(q) + "i:" + string(st)
}

// counts is the hash of state -> count of queue q's jobs in it, for every
// state but running.
func (k keys) counts(q string) string { return k.queue(q) + "n" }

// oldStateSet is the ID index of queue q's jobs in state st of library
// versions before 13, one sorted set, until Open moves it into the
// state's index (migrateIndexes).
func (k keys) oldStateSet(q string, st store.JobState) string {
	return k.queue(q) + "x:" + string(st)
}

// seq is the job sequence number.
func (k keys) seq() string { return k.prefix + ":seq" }

// queues is the set of every queue used.
func (k keys) queues() string { return k.prefix + ":queues" }

// periodic is the hash of schedule name -> last slot.
func (k keys) periodic() string { return k.prefix + ":periodic" }

// periodics is, on a cluster, the hash of schedule name -> key group.
func (k keys) periodics() string { return k.prefix + ":periodics" }

// procs is the hash of the process registry's data; its beat and cmd keys
// share its hash tag (see sortie.lua's process functions).
func (k keys) procs() string { return k.prefix + ":{procs}:data" }

// procKey is one of the registry's other keys: "beat" or "cmd".
func (k keys) procKey(name string) string { return k.prefix + ":{procs}:" + name }
