package amqpbridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/queue"
)

// abandonGrace is how long a consumer's Stop waits, once its deadline
// passed and its connection was closed, for handlers and hand-offs to
// return. One that ignores its cancelled context must not hold the process
// past its shutdown: it is abandoned, and its messages, unacked, are
// redelivered.
const abandonGrace = 2 * time.Second

// consumerSession is one connection and the channel that consumes on it.
type consumerSession struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	gen        uint64
	tag        string
	deliveries <-chan amqp.Delivery
}

func (s *consumerSession) close() {
	_ = s.ch.Close()
	_ = s.conn.Close()
}

// consumerBase is what Consumer and BatchConsumer share besides the
// settlement: the lifecycle, the current session, and the loop that keeps
// one open, reconnecting with backoff when the broker or the network drops
// it.
type consumerBase struct {
	settlement
	connName string // the connection_name of every session
	what     string // "consumer" or "batch consumer", in logs and errors
	prefetch int
	life     queue.Lifecycle

	declared bool // the topology was declared; touched by the start, then by the loop only

	mu      sync.Mutex
	current *queue.Run // the start sess belongs to
	sess    *consumerSession
}

func newConsumerBase(cfg Config, topo Topology, connName, what string, prefetch int) consumerBase {
	return consumerBase{
		settlement: newSettlement(cfg, topo, connName),
		connName:   connName,
		what:       what,
		prefetch:   prefetch,
		life:       queue.Lifecycle{Grace: abandonGrace},
	}
}

// consumeFunc consumes one session until the session is lost (false) or
// the stop began (true).
type consumeFunc func(run *queue.Run, sess *consumerSession) (stopping bool)

// start connects (declaring the topology once), then consumes in the
// background until Stop: begin runs first (workers), consume runs on each
// session, and once consuming ended for good, finish runs before the
// session and the republishing connection close.
func (b *consumerBase) start(ctx context.Context, name string, begin func(run *queue.Run), consume consumeFunc, finish func()) error {
	return b.life.Start(ctx, name, func(run *queue.Run) error {
		b.mu.Lock()
		b.current = run
		b.mu.Unlock()
		sess, err := b.connect(ctx)
		if err != nil {
			return fmt.Errorf("error starting %s for %q: %w", b.what, b.topo.Main, err)
		}
		b.settlement.ctx = run.Context()
		// Past the stop's deadline the connection goes under the handlers:
		// what they did not settle is redelivered later (at-least-once).
		context.AfterFunc(run.Context(), func() { b.closeConn(run) })
		begin(run)
		run.Go(func() { b.run(run, sess, consume, finish) })
		return nil
	})
}

// stop stops consuming and lets what the broker already delivered finish,
// until ctx ends (see start).
func (b *consumerBase) stop(ctx context.Context) error {
	_, err := b.life.Stop(ctx)
	return err
}

func (b *consumerBase) connect(ctx context.Context) (*consumerSession, error) {
	sess, err := b.openSession(ctx, b.connName, b.what, &b.declared, b.prefetch)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.sess = sess
	b.mu.Unlock()
	return sess, nil
}

// closeConn closes the connection of run's current session; a later start's
// is not run's to close.
func (b *consumerBase) closeConn(run *queue.Run) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.current == run && b.sess != nil {
		_ = b.sess.conn.Close()
	}
}

// run consumes sess, and a new session after each one is lost, until the
// stop; then it shuts down in order: finish (the handlers), the channel
// and connection, the republishing connection.
func (b *consumerBase) run(run *queue.Run, sess *consumerSession, consume consumeFunc, finish func()) {
	bo := newBackoff(b.cfg)
	for sess != nil {
		if stopping := consume(run, sess); stopping {
			break
		}
		b.logger.Warn("amqp "+b.what+" lost its channel; reconnecting", "generation", sess.gen)
		sess.close()
		sess = nil
		for sess == nil && bo.wait(run.Context(), run.Stopping().Done()) {
			var err error
			if sess, err = b.connect(run.Context()); err != nil {
				b.logger.Warn("amqp "+b.what+" reconnect failed", "error", err)
				sess = nil
				continue
			}
			b.stats.reconnects.Add(1)
			bo.reset()
			b.logger.Info("amqp "+b.what+" reconnected", "generation", sess.gen)
		}
	}
	finish()
	if sess != nil {
		sess.close()
	}
	_ = b.pub.Stop(context.Background())
	b.logger.Info("amqp " + b.what + " stopped")
}

// consumerStats returns the counters both consumers keep.
func (b *consumerBase) consumerStats() ConsumerStats {
	return ConsumerStats{
		Delivered:  b.stats.delivered.Load(),
		Acked:      b.stats.acked.Load(),
		Retried:    b.stats.retried.Load(),
		Failed:     b.stats.failed.Load(),
		Stale:      b.stats.stale.Load(),
		Reconnects: b.stats.reconnects.Load(),
		Generation: b.gen.Load(),
	}
}
