package amqpbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Topology names the queues that belong to one logical queue.
type Topology struct {
	// Main is the queue consumers read ("{prefix}/{name}").
	Main string
	// Failed is the dead-letter queue ("{main}.failed").
	Failed string
	// Retry lists one queue per delay tier ("{main}.retry.<ms>").
	Retry []RetryTier
}

// RetryTier is one retry queue: messages wait in it for Delay, then the
// broker dead-letters them back to the main queue.
type RetryTier struct {
	Queue string
	Delay time.Duration
}

// Topology returns the queue names for logical queue name.
func (c Config) Topology(name string) Topology {
	main := c.QueueName(name)
	t := Topology{Main: main, Failed: main + ".failed"}
	for _, d := range c.RetryTiers() {
		t.Retry = append(t.Retry, RetryTier{
			Queue: main + ".retry." + strconv.FormatInt(d.Milliseconds(), 10),
			Delay: d,
		})
	}
	return t
}

// tierFor returns the retry queue for a delay; the delay is always one of the
// tiers because both come from the same Config.
func (t Topology) tierFor(d time.Duration) RetryTier {
	for _, tier := range t.Retry {
		if tier.Delay >= d {
			return tier
		}
	}
	return t.Retry[len(t.Retry)-1]
}

// queueDecl is one queue declaration with its arguments.
type queueDecl struct {
	name string
	args amqp.Table
}

func (t Topology) declarations() []queueDecl {
	decls := []queueDecl{
		{name: t.Failed},
		{name: t.Main, args: amqp.Table{
			// A plain nack (requeue=false) from any client, ours or the Node
			// service's, still ends up in .failed rather than being dropped.
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": t.Failed,
		}},
	}
	for _, tier := range t.Retry {
		decls = append(decls, queueDecl{name: tier.Queue, args: amqp.Table{
			// One fixed TTL per queue: messages expire in FIFO order, so a
			// short delay never waits behind a long one.
			"x-message-ttl":             int32(tier.Delay.Milliseconds()),
			"x-dead-letter-exchange":    "",
			"x-dead-letter-routing-key": t.Main,
		}})
	}
	return decls
}

// ArgumentMismatch describes a queue that already exists with arguments other
// than the bridge's.
type ArgumentMismatch struct {
	Queue    string
	Argument string
	Detail   string
}

var inequivalentArgRe = regexp.MustCompile(`inequivalent arg '([^']+)'`)

// channelOpener opens a fresh channel; declarations need a new one after the
// broker closed the previous channel with PRECONDITION_FAILED.
type channelOpener func() (*amqp.Channel, error)

// declareTopology declares every queue of t. A queue that exists with other
// arguments is reported (logged as a warning and returned) and used as it is:
// the broker closes the channel on PRECONDITION_FAILED, so the declaration
// goes on on a new one, and the queue's existence is checked passively.
func declareTopology(ctx context.Context, logger *slog.Logger, open channelOpener, t Topology) ([]ArgumentMismatch, error) {
	ch, err := open()
	if err != nil {
		return nil, fmt.Errorf("error opening channel for declarations: %w", err)
	}
	defer func() { _ = ch.Close() }()

	var mismatches []ArgumentMismatch
	for _, d := range t.declarations() {
		_, err := ch.QueueDeclare(d.name, true, false, false, false, d.args)
		if err == nil {
			continue
		}
		var aerr *amqp.Error
		if !errors.As(err, &aerr) || aerr.Code != amqp.PreconditionFailed {
			return mismatches, fmt.Errorf("error declaring queue %q: %w", d.name, err)
		}
		m := ArgumentMismatch{Queue: d.name, Argument: "unknown", Detail: aerr.Reason}
		if sm := inequivalentArgRe.FindStringSubmatch(aerr.Reason); sm != nil {
			m.Argument = sm[1]
		}
		mismatches = append(mismatches, m)
		logger.WarnContext(ctx, "queue exists with different arguments; using it as it is",
			"queue", m.Queue, "argument", m.Argument, "broker_reason", m.Detail)

		_ = ch.Close()
		if ch, err = open(); err != nil {
			return mismatches, fmt.Errorf("error reopening channel after PRECONDITION_FAILED on %q: %w", d.name, err)
		}
		if _, err := ch.QueueDeclarePassive(d.name, true, false, false, false, nil); err != nil {
			return mismatches, fmt.Errorf("queue %q exists with other arguments and cannot be used: %w", d.name, err)
		}
	}
	return mismatches, nil
}
