package amqpbridge

import (
	"context"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/queue"
)

// dial opens one connection with connectionName as its connection_name client
// property. amqp091-go's experimental Config.Recovery is deliberately left
// off: after its recovery, delivery tags restart and an ack of a
// pre-disconnect delivery would settle a different message. The bridge
// reconnects by itself and stamps deliveries with a channel generation.
func dial(cfg Config, connectionName string) (*amqp.Connection, error) {
	conn, _, err := dialRaw(cfg, connectionName)
	return conn, err
}

// dialRaw is dial that also returns the connection's socket, so a close
// can be forced when the broker no longer reads the connection (see
// pubSession.close).
func dialRaw(cfg Config, connectionName string) (*amqp.Connection, net.Conn, error) {
	var raw net.Conn
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(connectionName)
	dialTCP := amqp.DefaultDial(10 * time.Second)
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Properties: props,
		Heartbeat:  10 * time.Second,
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := dialTCP(network, addr)
			if err != nil {
				return nil, err
			}
			raw = &writeDeadlineConn{Conn: c, timeout: cfg.PublishTimeout}
			return raw, nil
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error connecting to %s as %q: %w", queue.RedactURL(cfg.URL), connectionName, err)
	}
	return conn, raw, nil
}

// writeDeadlineConn gives every write a deadline. A broker under a memory
// or disk alarm stops reading the connections that publish; without a
// deadline a write then blocks (holding amqp091-go's channel lock, and the
// publisher's) for as long as the alarm lasts. Past the deadline the write
// fails, amqp091-go closes the connection, every waiter gets an error, and
// the next publish dials again.
type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// backoff yields growing waits between reconnect attempts.
type backoff struct {
	min, max, next time.Duration
}

func newBackoff(cfg Config) *backoff {
	return &backoff{min: cfg.ReconnectMin, max: cfg.ReconnectMax, next: cfg.ReconnectMin}
}

func (b *backoff) reset() { b.next = b.min }

// wait sleeps for the next delay; it returns false when stop or ctx ends the
// wait first.
func (b *backoff) wait(ctx context.Context, stop <-chan struct{}) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(b.next*2, b.max)
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-ctx.Done():
		return false
	}
}
