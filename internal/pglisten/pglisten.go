// Package pglisten keeps a dedicated LISTEN connection open for a
// background service: the forwarder's outbox channel, the limits'
// admitters.
package pglisten

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open opens a connection of its own (a pooled one would be lost to the
// pool's other users) and subscribes it to channel; who names the service
// in the errors.
func Open(ctx context.Context, pool *pgxpool.Pool, channel, who string) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("error opening the %s's LISTEN connection: %w", who, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("error listening on %s: %w", channel, err)
	}
	return conn, nil
}

// Loop is a LISTEN loop's settings.
type Loop struct {
	Pool    *pgxpool.Pool
	Channel string
	// Who names the service in the logs; Fallback says what it relies on
	// while it cannot listen ("its poll").
	Who, Fallback string
	// Retry is the wait between attempts to connect again.
	Retry  time.Duration
	Logger *slog.Logger
	// Reconnected runs after every reconnection: notifications may have
	// been missed while the connection was down.
	Reconnected func()
	// Notified runs for each notification's payload.
	Notified func(payload string)
}

// Run waits for notifications on conn (nil: it connects first) until ctx
// ends, reconnecting after a lost connection, and closes the connection
// it holds when it returns.
func (l Loop) Run(ctx context.Context, conn *pgx.Conn) {
	closeConn := func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn.Close(closeCtx)
	}
	defer func() {
		if conn != nil {
			closeConn()
		}
	}()
	for {
		if conn == nil {
			var err error
			if conn, err = Open(ctx, l.Pool, l.Channel, l.Who); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.Logger.WarnContext(ctx, l.Who+" cannot listen, relying on "+l.Fallback, "error", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(l.Retry):
				}
				continue
			}
			l.Reconnected()
		}
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.Logger.WarnContext(ctx, l.Who+" lost its LISTEN connection, reconnecting", "error", err)
			closeConn()
			conn = nil
			continue
		}
		l.Notified(n.Payload)
	}
}
