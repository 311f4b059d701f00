package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuPool is a pool whose Postgres backends are known by process id, so a
// benchmark can tell how much CPU the database spent on its work: a figure
// that does not depend on what else the machine runs, unlike a rate. It
// reads the backends' /proc entries, so it sees them only when Postgres
// runs on this machine and this user may read them; otherwise the CPU
// figures are zero and reported as unknown.
type cpuPool struct {
	*pgxpool.Pool

	mu   sync.Mutex
	pids map[uint32]bool
}

// newCPUPool opens a pool configured like base.
func newCPUPool(ctx context.Context, base *pgxpool.Pool) (*cpuPool, error) {
	cp := &cpuPool{pids: map[uint32]bool{}}
	cfg := base.Config()
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		cp.mu.Lock()
		cp.pids[c.PgConn().PID()] = true
		cp.mu.Unlock()
		if after != nil {
			return after(ctx, c)
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cp.Pool = pool
	return cp, nil
}

// cpuMark is the CPU used so far by this process and by each backend.
type cpuMark struct {
	self     time.Duration
	backends map[uint32]time.Duration
}

func (cp *cpuPool) mark() cpuMark {
	m := cpuMark{self: selfCPU(), backends: map[uint32]time.Duration{}}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for pid := range cp.pids {
		if d, ok := processCPU(pid); ok {
			m.backends[pid] = d
		}
	}
	return m
}

// since returns the CPU this process and the backends used since m. A
// backend that exited in between is not counted.
func (cp *cpuPool) since(m cpuMark) (self, db time.Duration) {
	now := cp.mark()
	for pid, d := range now.backends {
		db += d - m.backends[pid]
	}
	return now.self - m.self, db
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU reads a process's user and system time from /proc (in clock
// ticks of 10 ms, Linux's USER_HZ).
func processCPU(pid uint32) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, false
	}
	var user, sys int64
	if _, err := fmt.Sscan(f[11], &user); err != nil {
		return 0, false
	}
	if _, err := fmt.Sscan(f[12], &sys); err != nil {
		return 0, false
	}
	return time.Duration(user+sys) * 10 * time.Millisecond, true
}
