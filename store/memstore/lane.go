package memstore

import "time"

// entry is one job's place in a lane: the lane's sort key (a time, then the
// job ID) and the job's generation when the entry was made. An entry whose
// gen no longer matches its job's is stale: the job left the lane and the
// entry is dropped when it reaches the front (lazy deletion).
type entry struct {
	sec  int64
	nsec int32
	gen  uint32
	id   int64
	j    *job
}

// makeEntry returns the entry for j keyed by t.
func makeEntry(t time.Time, j *job) entry {
	return entry{sec: t.Unix(), nsec: int32(t.Nanosecond()), gen: j.gen, id: j.row.ID, j: j}
}

// less orders entries by time, then ID.
func (e *entry) less(o *entry) bool {
	if e.sec != o.sec {
		return e.sec < o.sec
	}
	if e.nsec != o.nsec {
		return e.nsec < o.nsec
	}
	return e.id < o.id
}

// after reports whether e's time is after (sec, nsec).
func (e *entry) after(sec int64, nsec int32) bool {
	return e.sec > sec || (e.sec == sec && e.nsec > nsec)
}

// before reports whether e's time is before (sec, nsec).
func (e *entry) before(sec int64, nsec int32) bool {
	return e.sec < sec || (e.sec == sec && e.nsec < nsec)
}

// stale reports whether e's job has left the lane since e was made.
func (e *entry) stale() bool { return e.j.gen != e.gen }

// lane is a priority queue of entries, smallest first. Most jobs arrive in
// key order (they are enqueued at an increasing Now with increasing IDs), so
// a lane keeps a sorted run that takes in-order entries in O(1) and a binary
// heap for the rest; the front is the smaller of their two fronts. Removal
// from the middle is lazy: the job's generation changes, and stale entries
// are skipped at the front or dropped by compact when they pile up.
type lane struct {
	run  deque   // sorted
	heap []entry // binary min-heap
	dead int     // stale entries still stored in run or heap
}

// size returns the number of stored entries, stale ones included.
func (l *lane) size() int { return l.run.n + len(l.heap) }

// push adds e.
func (l *lane) push(e entry) {
	if l.run.n == 0 || !e.less(l.run.back()) {
		l.run.pushBack(e)
		return
	}
	l.heapPush(e)
}

// top returns the smallest live entry, or nil when the lane holds none. It
// drops the stale entries it meets. The pointer is valid until the lane
// changes.
func (l *lane) top() *entry {
	var r *entry
	for l.run.n > 0 {
		if f := l.run.front(); !f.stale() {
			r = f
			break
		}
		l.run.popFront()
		l.dead--
	}
	for len(l.heap) > 0 && l.heap[0].stale() {
		l.heapPop()
		l.dead--
	}
	if len(l.heap) > 0 && (r == nil || l.heap[0].less(r)) {
		r = &l.heap[0]
	}
	return r
}

// pop removes e, which top just returned.
func (l *lane) pop(e *entry) {
	if l.run.n > 0 && e == l.run.front() {
		l.run.popFront()
		return
	}
	l.heapPop()
}

// forget records that one stored entry went stale, and compacts the lane
// when stale entries make up most of it.
func (l *lane) forget() {
	l.dead++
	if l.dead > 256 && 2*l.dead > l.size() {
		l.compact()
	}
}

// compact drops every stale entry.
func (l *lane) compact() {
	var run deque
	l.run.each(func(e *entry) {
		if !e.stale() {
			run.pushBack(*e)
		}
	})
	l.run = run

	h := l.heap[:0]
	for i := range l.heap {
		if !l.heap[i].stale() {
			h = append(h, l.heap[i])
		}
	}
	clear(l.heap[len(h):])
	l.heap = h
	if cap(h) > 1024 && cap(h) > 4*len(h) {
		l.heap = append([]entry(nil), h...)
	}
	for i := len(l.heap)/2 - 1; i >= 0; i-- {
		l.down(i)
	}
	l.dead = 0
}

// blockSize is the number of entries in one block of a deque.
const blockSize = 256

type block [blockSize]entry

// deque is a FIFO of entries stored in fixed-size blocks, so it grows
// without copying and gives memory back as it drains.
type deque struct {
	blocks []*block
	head   int    // index of the front entry in blocks[0]
	tail   int    // entries used in the last block
	n      int    // entries stored
	spare  *block // one drained block kept for reuse
}

func (d *deque) front() *entry { return &d.blocks[0][d.head] }

func (d *deque) back() *entry { return &d.blocks[len(d.blocks)-1][d.tail-1] }

func (d *deque) pushBack(e entry) {
	if len(d.blocks) == 0 || d.tail == blockSize {
		b := d.spare
		d.spare = nil
		if b == nil {
			b = new(block)
		}
		if len(d.blocks) == 0 {
			d.head = 0
		}
		d.blocks = append(d.blocks, b)
		d.tail = 0
	}
	d.blocks[len(d.blocks)-1][d.tail] = e
	d.tail++
	d.n++
}

func (d *deque) popFront() {
	d.blocks[0][d.head] = entry{}
	d.head++
	d.n--
	if d.head == blockSize || d.n == 0 {
		// Every entry of the first block is popped (and zeroed).
		d.spare = d.blocks[0]
		d.blocks[0] = nil
		d.blocks = d.blocks[1:]
		d.head = 0
		if len(d.blocks) == 0 {
			d.blocks = d.blocks[:0:0]
		}
	}
}

// each calls f on every stored entry, front to back.
func (d *deque) each(f func(*entry)) {
	for i, b := range d.blocks {
		lo, hi := 0, blockSize
		if i == 0 {
			lo = d.head
		}
		if i == len(d.blocks)-1 {
			hi = d.tail
		}
		for j := lo; j < hi; j++ {
			f(&b[j])
		}
	}
}

func (l *lane) heapPush(e entry) {
	l.heap = append(l.heap, e)
	h := l.heap
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(&h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (l *lane) heapPop() {
	h := l.heap
	n := len(h) - 1
	h[0] = h[n]
	h[n] = entry{}
	l.heap = h[:n]
	if n > 0 {
		l.down(0)
	}
}

func (l *lane) down(i int) {
	h := l.heap
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && h[r].less(&h[c]) {
			c = r
		}
		if !h[c].less(&h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
