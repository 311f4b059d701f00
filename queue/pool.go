package queue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolMaxConnsDefault is the pool size when DATABASE_URL does not set
// pool_max_conns. River's producers, the completer, LISTEN and tributary's
// services each hold a connection at times, so the pgx default (4 on a
// 2-core machine) starves a worker.
const PoolMaxConnsDefault = 20

// ConnectError is a failure to reach the database. Its message names the
// host and port, never the user's password.
type ConnectError struct {
	Host string
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot connect to the database at %s: %s", e.Host, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// NewPool opens a pgx pool for cfg.DatabaseURL (DatabaseURLDefault when
// empty) and checks that the database answers within the context's
// deadline (or 10 seconds).
func NewPool(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	cfg = cfg.WithDefaults()
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, &ConfigError{Name: "DatabaseURL", Value: RedactURL(cfg.DatabaseURL), Reason: "not a valid Postgres connection string"}
	}
	if !hasParam(cfg.DatabaseURL, "pool_max_conns") {
		pcfg.MaxConns = PoolMaxConnsDefault
	}
	pcfg.MaxConnIdleTime = 5 * time.Minute
	if pcfg.ConnConfig.RuntimeParams["application_name"] == "" {
		pcfg.ConnConfig.RuntimeParams["application_name"] = "tributary"
	}
	host := fmt.Sprintf("%s:%d", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port)
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, &ConnectError{Host: host, Err: err}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, &ConnectError{Host: host, Err: err}
	}
	return pool, nil
}

func hasParam(dsn, name string) bool { return strings.Contains(dsn, name) }
