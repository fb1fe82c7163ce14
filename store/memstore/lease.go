package memstore

// leaseHeap holds the running jobs, earliest LeaseUntil first, so JobRescue
// finds expired leases without scanning. Each job knows its position
// (job.leaseIdx), so finishing or extending one costs O(log running).
type leaseHeap []*job

func leaseLess(a, b *job) bool {
	if a.lsec != b.lsec {
		return a.lsec < b.lsec
	}
	if a.lnsec != b.lnsec {
		return a.lnsec < b.lnsec
	}
	return a.row.ID < b.row.ID
}

func (h *leaseHeap) push(j *job) {
	*h = append(*h, j)
	j.leaseIdx = len(*h) - 1
	h.up(j.leaseIdx)
}

// remove takes j out of the heap.
func (h *leaseHeap) remove(j *job) {
	s := *h
	i := j.leaseIdx
	n := len(s) - 1
	if i != n {
		s[i] = s[n]
		s[i].leaseIdx = i
	}
	s[n] = nil
	*h = s[:n]
	j.leaseIdx = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the order after j's lease changed.
func (h *leaseHeap) fix(j *job) {
	if !h.down(j.leaseIdx) {
		h.up(j.leaseIdx)
	}
}

func (h leaseHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !leaseLess(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		h[i].leaseIdx = i
		h[p].leaseIdx = p
		i = p
	}
}

// down moves h[i] down and reports whether it moved.
func (h leaseHeap) down(i int) bool {
	start := i
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && leaseLess(h[r], h[c]) {
			c = r
		}
		if !leaseLess(h[c], h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		h[i].leaseIdx = i
		h[c].leaseIdx = c
		i = c
	}
	return i > start
}
