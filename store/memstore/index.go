package memstore

// IDs are assigned from 1 upward, so jobs live in an array indexed by ID,
// cut into chunks of chunkSize so that deleted ranges give their memory back.
const (
	chunkShift = 10
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
)

// chunk holds the jobs of chunkSize consecutive IDs, and how many of them are
// in each state so that a listing filtered by state skips chunks without one.
type chunk struct {
	jobs   [chunkSize]*job
	live   int
	counts [numStates]int32
}

// index finds jobs by ID and walks them in ID order.
type index struct {
	chunks []*chunk // chunks[i] holds chunk number base+i; nil when empty
	base   int64
}

// chunkNum returns the number of the chunk holding id (id >= 1).
func chunkNum(id int64) int64 { return (id - 1) >> chunkShift }

// chunkAt returns chunk number n, or nil.
func (x *index) chunkAt(n int64) *chunk {
	i := n - x.base
	if i < 0 || i >= int64(len(x.chunks)) {
		return nil
	}
	return x.chunks[i]
}

// get returns the job with id, or nil.
func (x *index) get(id int64) *job {
	if id <= 0 {
		return nil
	}
	c := x.chunkAt(chunkNum(id))
	if c == nil {
		return nil
	}
	return c.jobs[(id-1)&chunkMask]
}

// add stores j under j.row.ID, which must be free. IDs come in increasing
// order, except those JobImport writes.
func (x *index) add(j *job) {
	id := j.row.ID
	n := chunkNum(id)
	if len(x.chunks) == 0 {
		x.base = n
	}
	if n < x.base {
		// An imported job below every stored one (JobImport).
		x.chunks = append(make([]*chunk, x.base-n), x.chunks...)
		x.base = n
	}
	for n-x.base >= int64(len(x.chunks)) {
		x.chunks = append(x.chunks, nil)
	}
	c := x.chunks[n-x.base]
	if c == nil {
		c = new(chunk)
		x.chunks[n-x.base] = c
	}
	c.jobs[(id-1)&chunkMask] = j
	c.live++
	c.counts[j.st]++
}

// remove deletes j from the index.
func (x *index) remove(j *job) {
	id := j.row.ID
	i := chunkNum(id) - x.base
	c := x.chunks[i]
	c.jobs[(id-1)&chunkMask] = nil
	c.counts[j.st]--
	c.live--
	if c.live > 0 {
		return
	}
	x.chunks[i] = nil
	k := 0
	for k < len(x.chunks) && x.chunks[k] == nil {
		k++
	}
	if k == 0 {
		return
	}
	if k == len(x.chunks) {
		x.chunks, x.base = x.chunks[:0], 0
		return
	}
	if k > len(x.chunks)/2 && cap(x.chunks) > 64 {
		x.chunks = append([]*chunk(nil), x.chunks[k:]...)
	} else {
		x.chunks = x.chunks[k:]
	}
	x.base += int64(k)
}

// moved records that j changed from state old to j.st.
func (x *index) moved(j *job, old uint8) {
	c := x.chunks[chunkNum(j.row.ID)-x.base]
	c.counts[old]--
	c.counts[j.st]++
}

// walk calls f on jobs in ID order, starting at from (inclusive) and going
// up, or down when desc, until f returns false. When state >= 0, chunks
// without a job in that state are skipped.
func (x *index) walk(from int64, desc bool, state int, f func(*job) bool) {
	if len(x.chunks) == 0 {
		return
	}
	first := x.base<<chunkShift + 1
	last := (x.base + int64(len(x.chunks))) << chunkShift // inclusive
	if !desc {
		id := max(from, first)
		for id <= last {
			c := x.chunks[chunkNum(id)-x.base]
			if c != nil && (state < 0 || c.counts[state] > 0) {
				for s := (id - 1) & chunkMask; s < chunkSize; s++ {
					if j := c.jobs[s]; j != nil && !f(j) {
						return
					}
				}
			}
			id = (chunkNum(id)+1)<<chunkShift + 1
		}
		return
	}
	id := min(from, last)
	for id >= first {
		c := x.chunks[chunkNum(id)-x.base]
		if c != nil && (state < 0 || c.counts[state] > 0) {
			for s := (id - 1) & chunkMask; s >= 0; s-- {
				if j := c.jobs[s]; j != nil && !f(j) {
					return
				}
			}
		}
		id = chunkNum(id) << chunkShift // last ID of the previous chunk
	}
}

// walkQueued calls f on the queued jobs (waiting, scheduled, available,
// retrying) in ascending ID order until f returns false, skipping chunks
// without one.
func (x *index) walkQueued(f func(*job) bool) {
	for _, c := range x.chunks {
		if c == nil || c.counts[stWaiting]+c.counts[stScheduled]+c.counts[stAvailable]+c.counts[stRetrying] == 0 {
			continue
		}
		for _, j := range c.jobs {
			if j != nil && isPending(j.st) && j.st != stRunning && !f(j) {
				return
			}
		}
	}
}
