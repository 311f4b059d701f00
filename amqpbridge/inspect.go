package amqpbridge

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueDepth is the state of one broker queue of the bridge.
type QueueDepth struct {
	Name      string `json:"name"`
	Role      string `json:"role"` // main, retry, failed
	Messages  int    `json:"messages"`
	Consumers int    `json:"consumers"`
	// Missing is true when the broker has no such queue (not declared yet).
	Missing bool `json:"missing,omitempty"`
}

// QueueDepths reports the main, retry and failed queues of each logical
// queue name, for dashboards. It checks each queue passively on a short
// connection of its own.
func QueueDepths(ctx context.Context, cfg Config, names ...string) ([]QueueDepth, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	conn, err := dial(cfg, cfg.ConnectionName+".inspect")
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	var out []QueueDepth
	for _, name := range names {
		topo := cfg.Topology(name)
		queues := []QueueDepth{{Name: topo.Main, Role: "main"}}
		for _, r := range topo.Retry {
			queues = append(queues, QueueDepth{Name: r.Queue, Role: "retry"})
		}
		queues = append(queues, QueueDepth{Name: topo.Failed, Role: "failed"})
		for _, q := range queues {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			// A passive declare of a missing queue closes the channel, so
			// each check gets its own.
			ch, err := conn.Channel()
			if err != nil {
				return out, fmt.Errorf("error opening channel: %w", err)
			}
			info, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
			var aerr *amqp.Error
			switch {
			case err == nil:
				q.Messages, q.Consumers = info.Messages, info.Consumers
				_ = ch.Close()
			case errors.As(err, &aerr) && aerr.Code == amqp.NotFound:
				q.Missing = true
			default:
				return out, fmt.Errorf("error inspecting queue %q: %w", q.Name, err)
			}
			out = append(out, q)
		}
	}
	return out, nil
}
