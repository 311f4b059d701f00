package amqpbridge

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dial opens one connection with connectionName as its connection_name client
// property. amqp091-go's experimental Config.Recovery is deliberately left
// off: after its recovery, delivery tags restart and an ack of a
// pre-disconnect delivery would settle a different message. The bridge
// reconnects by itself and stamps deliveries with a channel generation.
func dial(cfg Config, connectionName string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(connectionName)
	conn, err := amqp.DialConfig(cfg.URL, amqp.Config{
		Properties: props,
		Heartbeat:  10 * time.Second,
		Dial:       amqp.DefaultDial(10 * time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("error connecting to %s as %q: %w", RedactURL(cfg.URL), connectionName, err)
	}
	return conn, nil
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
