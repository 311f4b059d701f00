package queue

import "sync"

// runningShards is how many locks the set of running jobs is split over,
// so that the Work of one job rarely waits for another's.
const runningShards = 32

// runningSet is the ids of the jobs this process runs in River's Work, for
// the lost-jobs check (lost_jobs.go). A job is added when its Work starts
// and removed when it returns: two map operations under a lock of its own
// shard, no allocation, and no context of its own (BenchmarkGuardJob).
type runningSet struct {
	shards [runningShards]runningShard
}

type runningShard struct {
	mu sync.Mutex
	// ids counts the Works of each id: one, unless River runs a job again
	// while an earlier Work of it has not returned yet.
	ids map[int64]int32
	_   [48]byte // 64 bytes, a cache line, each
}

func (s *runningSet) shard(id int64) *runningShard {
	return &s.shards[uint64(id)%runningShards]
}

func (s *runningSet) add(id int64) {
	sh := s.shard(id)
	sh.mu.Lock()
	if sh.ids == nil {
		sh.ids = make(map[int64]int32)
	}
	sh.ids[id]++
	sh.mu.Unlock()
}

func (s *runningSet) remove(id int64) {
	sh := s.shard(id)
	sh.mu.Lock()
	if n := sh.ids[id]; n > 1 {
		sh.ids[id] = n - 1
	} else {
		delete(sh.ids, id)
	}
	sh.mu.Unlock()
}

func (s *runningSet) has(id int64) bool {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.ids[id] > 0
}
