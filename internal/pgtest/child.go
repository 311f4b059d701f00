package pgtest

import (
	"strconv"
	"strings"
	"sync"
)

// SyncBuffer collects a child process's output (or a logger's) and may be
// read while it is written.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// URLWithPoolMax returns the test database's URL with pgx's pool_max_conns
// set to n, for a child process that shares the server with the tests.
func URLWithPoolMax(n int) string {
	url, sep := DatabaseURL(), "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "pool_max_conns=" + strconv.Itoa(n)
}
