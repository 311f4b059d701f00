package pgtest

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// CutProxy forwards TCP connections to the test database until Cut, which
// closes every connection and refuses new ones (until Restore): a process
// connected through it loses its database the way a network partition or a
// dead link makes it lose it, while the database stays up for everyone
// else.
type CutProxy struct {
	ln       net.Listener
	upstream string
	url      string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// NewCutProxy starts a proxy in front of the database at dbURL (a TCP
// host, not a socket path), closed when the test ends.
func NewCutProxy(tb testing.TB, dbURL string) *CutProxy {
	tb.Helper()
	cfg, err := pgx.ParseConfig(dbURL)
	require.NoError(tb, err)
	require.False(tb, strings.HasPrefix(cfg.Host, "/"), "a cut proxy needs a database URL with a TCP host, not the socket %s", cfg.Host)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &CutProxy{ln: ln, upstream: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	p.url = strings.Replace(dbURL, p.upstream, ln.Addr().String(), 1)
	require.NotEqual(tb, dbURL, p.url, "cannot find %s in the database URL to point it at the proxy", p.upstream)
	tb.Cleanup(func() {
		p.Cut()
		_ = ln.Close()
	})
	go p.serve()
	return p
}

// URL is the database URL through the proxy.
func (p *CutProxy) URL() string { return p.url }

func (p *CutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *CutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// Cut closes every forwarded connection and refuses new ones.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Restore forwards new connections again after Cut.
func (p *CutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// ThroughCutProxy returns a cut proxy in front of db and db as seen through
// it: the same schema, a pool of its own (closed when the test ends) whose
// connections the proxy can cut.
func ThroughCutProxy(tb testing.TB, db *DB) (*CutProxy, *DB) {
	tb.Helper()
	proxy := NewCutProxy(tb, db.URL)
	cfg, err := pgxpool.ParseConfig(proxy.URL())
	require.NoError(tb, err)
	cfg.ConnConfig.ConnectTimeout = time.Second
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return proxy, &DB{Pool: pool, Schema: db.Schema, URL: proxy.URL()}
}
