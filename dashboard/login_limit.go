package dashboard

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Failed logins through the form are slowed per client address. These
// are fixed; the bearer token is not affected (it has no form to guess at).
const (
	// LoginFailuresFree is how many wrong tokens an address may send before
	// it has to wait.
	LoginFailuresFree = 5
	// LoginDelayBase is the wait after the first failure beyond the free
	// ones; it doubles with each further failure, up to LoginDelayMax.
	LoginDelayBase = 2 * time.Second
	// LoginDelayMax caps the wait.
	LoginDelayMax = 10 * time.Minute
	// LoginForgetAfter is how long after its last failure (and the end of
	// its wait) an address starts again with free attempts.
	LoginForgetAfter = time.Hour
	// LoginLimiterEntries bounds how many addresses are remembered, so a
	// flood from many addresses costs bounded memory.
	LoginLimiterEntries = 10_000
)

// loginFailures is one address's record.
type loginFailures struct {
	count int       // failures since the record was created
	last  time.Time // the latest failure
	until time.Time // no attempt is checked before this
}

// loginLimiter slows repeated failed logins from one address. It is per
// process: replicas each keep their own records.
type loginLimiter struct {
	mu      sync.Mutex
	max     int
	entries map[netip.Prefix]*loginFailures
}

func newLoginLimiter(maxEntries int) *loginLimiter {
	return &loginLimiter{max: maxEntries, entries: map[netip.Prefix]*loginFailures{}}
}

// clientKey is the request's remote address; an IPv6 client is its /64,
// since one host usually holds a whole /64 and could otherwise try from
// each address in turn. Behind a proxy every client is the proxy.
func clientKey(r *http.Request) netip.Prefix {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{} // unparsable addresses share one record
	}
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

// wait returns how long key must wait before its next attempt is checked;
// zero means now.
func (l *loginLimiter) wait(key netip.Prefix, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.entries[key]; e != nil && now.Before(e.until) {
		return e.until.Sub(now)
	}
	return 0
}

// fail records a failed attempt and returns the wait it earns (zero while
// free attempts are left).
func (l *loginLimiter) fail(key netip.Prefix, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[key]
	if e != nil && now.Sub(e.last) > LoginForgetAfter && !now.Before(e.until) {
		e = nil
	}
	if e == nil {
		if len(l.entries) >= l.max {
			l.evict(now)
		}
		e = &loginFailures{}
		l.entries[key] = e
	}
	e.count++
	e.last = now
	over := e.count - LoginFailuresFree
	if over <= 0 {
		return 0
	}
	delay := LoginDelayMax
	if over <= 20 { // 2 s << 20 is well past the cap
		delay = min(LoginDelayBase<<(over-1), LoginDelayMax)
	}
	e.until = now.Add(delay)
	return delay
}

// succeed forgets key's failures.
func (l *loginLimiter) succeed(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.entries, key)
}

// evict makes room: records that are forgotten anyway go first; then the
// oldest record of an address that is not waiting, so a flood of one-off
// addresses pushes out its own records, not those of an address that is
// being slowed; only when every record is waiting does the one whose wait
// ends first go.
func (l *loginLimiter) evict(now time.Time) {
	var oldestFree, firstDone netip.Prefix
	var oldestFreeAt, firstDoneAt time.Time
	for key, e := range l.entries {
		waiting := now.Before(e.until)
		switch {
		case !waiting && now.Sub(e.last) > LoginForgetAfter:
			delete(l.entries, key)
		case !waiting && (oldestFreeAt.IsZero() || e.last.Before(oldestFreeAt)):
			oldestFree, oldestFreeAt = key, e.last
		case waiting && (firstDoneAt.IsZero() || e.until.Before(firstDoneAt)):
			firstDone, firstDoneAt = key, e.until
		}
	}
	switch {
	case len(l.entries) < l.max:
	case !oldestFreeAt.IsZero():
		delete(l.entries, oldestFree)
	case !firstDoneAt.IsZero():
		delete(l.entries, firstDone)
	}
}
