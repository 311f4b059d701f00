package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/queue"
)

// ErrNotConfirmed is returned when the broker nacked a publish or the channel
// closed before its confirm arrived. The message may or may not have been
// enqueued; publish it again (consumers see at-least-once delivery).
var ErrNotConfirmed = errors.New("publish not confirmed by the broker")

// ErrMessageTooLarge is returned for a body over Config.MaxMessageBytes.
var ErrMessageTooLarge = errors.New("message too large")

// ErrBlocked is returned (wrapped, with the broker's reason) by a publish
// while the broker blocks the publisher's connection (connection.blocked:
// a memory or disk alarm). Nothing more is written to a blocked
// connection: a publish fails at once, and one already written fails as
// soon as the block is announced; it may still be enqueued when the alarm
// clears. Publish again later.
var ErrBlocked = errors.New("the broker blocked the publisher's connection")

// UnroutableError is returned when the broker returned a mandatory publish
// because no queue was bound for its routing key.
type UnroutableError struct {
	Exchange   string
	RoutingKey string
	Reason     string
}

func (e *UnroutableError) Error() string {
	return fmt.Sprintf("message to exchange %q with routing key %q was returned as unroutable: %s", e.Exchange, e.RoutingKey, e.Reason)
}

// Message is one publish for PublishMany.
type Message struct {
	Exchange   string
	RoutingKey string
	Publishing amqp.Publishing
}

// Publisher publishes with publisher confirms over one long-lived connection.
// It connects lazily on the first publish, reuses the connection, and opens
// a new one on the next publish after the old one closed or failed. A publish
// succeeds only once the broker confirmed it; every publish is mandatory, and
// a message the broker returns as unroutable is reported as an error, not as
// sent. Every publish is bounded by its context and Config.PublishTimeout;
// while the broker blocks the connection (flow control) publishes fail with
// ErrBlocked instead of waiting for the alarm to clear. Safe for concurrent
// use.
type Publisher struct {
	cfg  Config
	name string

	// waitWhileBlocked makes a publish on a blocked connection wait for the
	// block to lift, within its deadline, instead of failing at once. The
	// consumers' republishing publisher uses it: failing at once there
	// would requeue the delivery and run its handler again in a tight loop
	// for as long as the alarm lasts.
	waitWhileBlocked bool

	life queue.Lifecycle

	mu     sync.Mutex
	sess   *pubSession
	closed bool

	idPrefix   string
	seq        atomic.Uint64
	published  atomic.Uint64
	confirmed  atomic.Uint64
	reconnects atomic.Uint64
}

// pubSession is one connection and confirm-mode channel.
type pubSession struct {
	conn    *amqp.Connection
	raw     net.Conn
	ch      *amqp.Channel
	returns chan amqp.Return

	// flow is the connection's blocked state, replaced (never changed in
	// place) by the goroutine that reads the connection's block
	// notifications.
	flow atomic.Pointer[flowState]

	// mu guards returned; returns are moved from the channel into it by
	// whoever needs to know (see takeReturn). Each message id holds its
	// returns in arrival order: ids are the caller's when it sets them, and
	// two publishes with one id that are both returned are both unroutable.
	mu       sync.Mutex
	returned map[string][]string
}

// flowState is whether the broker blocks a connection. changed is closed
// when the state is replaced, so waiters can select on it.
type flowState struct {
	blocked bool
	reason  string
	changed chan struct{}
}

// NewPublisher returns a publisher; it does not connect until the first
// publish. Its connection is named "{ConnectionName}.publisher".
func NewPublisher(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return newPublisher(cfg, cfg.ConnectionName+".publisher"), nil
}

func newPublisher(cfg Config, connectionName string) *Publisher {
	return &Publisher{cfg: cfg, name: connectionName, idPrefix: uuid.NewString() + "-"}
}

// nextID returns a unique message id: a random per-publisher prefix and a
// sequence number (cheaper than a random UUID per message).
func (p *Publisher) nextID() string {
	return p.idPrefix + strconv.FormatUint(p.seq.Add(1), 10)
}

// Name implements queue.Service.
func (p *Publisher) Name() string { return "amqp publisher " + p.name }

// Start implements queue.Service. The connection opens lazily, so Start only
// checks that the publisher was not closed.
func (p *Publisher) Start(ctx context.Context) error {
	return p.life.Start(ctx, p.Name(), func(*queue.Run) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed {
			return errStopped
		}
		return nil
	})
}

// Stop implements queue.Service: it closes the connection, also that of a
// publisher that was used without Start. Register the publisher before
// everything that publishes, so the runtime stops it after them.
func (p *Publisher) Stop(ctx context.Context) error {
	_, _ = p.life.Stop(ctx) // nothing runs in the background: this cannot fail
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.sess != nil {
		p.sess.close()
		p.sess = nil
		p.cfg.Logger.Info("amqp publisher closed", "connection", p.name)
	}
	return nil
}

// Connect opens the connection now instead of on the first publish (to fail
// fast at start-up, or to keep the dial out of a measurement).
func (p *Publisher) Connect(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.session()
	return err
}

// PublisherStats are cumulative counters.
type PublisherStats struct {
	Published, Confirmed, Reconnects uint64
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{Published: p.published.Load(), Confirmed: p.confirmed.Load(), Reconnects: p.reconnects.Load()}
}

// Publish publishes one message and waits for the broker's confirm.
func (p *Publisher) Publish(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) error {
	pending, err := p.PublishDeferred(ctx, exchange, routingKey, msg)
	if err != nil {
		return err
	}
	return pending.Wait(ctx)
}

// PublishMany publishes msgs keeping up to Config.ConfirmWindow confirms
// outstanding, and returns nil only when every message was confirmed.
func (p *Publisher) PublishMany(ctx context.Context, msgs []Message) error {
	pending := make([]*Pending, 0, len(msgs))
	head := 0
	var firstErr error
	wait := func() {
		if err := pending[head].Wait(ctx); err != nil && firstErr == nil {
			firstErr = err
		}
		pending[head] = nil
		head++
	}
	for i, m := range msgs {
		if len(pending)-head == p.cfg.ConfirmWindow {
			wait()
		}
		if firstErr != nil {
			break
		}
		pd, err := p.PublishDeferred(ctx, m.Exchange, m.RoutingKey, m.Publishing)
		if err != nil {
			firstErr = fmt.Errorf("error publishing message %d of %d: %w", i+1, len(msgs), err)
			break
		}
		pending = append(pending, pd)
	}
	for head < len(pending) {
		wait()
	}
	return firstErr
}

// Pending is a publish awaiting its broker confirm.
type Pending struct {
	p          *Publisher
	sess       *pubSession
	dc         *amqp.DeferredConfirmation
	id         string
	exchange   string
	routingKey string
	// deadline is Config.PublishTimeout after the write.
	deadline time.Time
}

// Wait blocks until the broker confirmed the publish (nil), nacked it or lost
// the channel (ErrNotConfirmed), returned it as unroutable (*UnroutableError),
// the broker blocked the connection (ErrBlocked), Config.PublishTimeout
// passed since the write (ErrNotConfirmed and context.DeadlineExceeded), or
// ctx ended.
func (pd *Pending) Wait(ctx context.Context) error {
	select {
	case <-pd.dc.Done():
		// Already confirmed (the usual case in PublishMany's window): no
		// timer needed.
		return pd.result()
	default:
	}
	timer := time.NewTimer(time.Until(pd.deadline))
	defer timer.Stop()
	flow := pd.sess.flow.Load()
	for waiting := true; waiting; {
		if flow.blocked && !pd.p.waitWhileBlocked {
			select {
			case <-pd.dc.Done(): // confirmed before the block: take it
				waiting = false
				continue
			default:
			}
			pd.abandon()
			return pd.p.blockedError(pd.exchange, pd.routingKey, flow.reason)
		}
		select {
		case <-pd.dc.Done():
			waiting = false
		case <-flow.changed:
			flow = pd.sess.flow.Load()
		case <-ctx.Done():
			pd.abandon()
			return fmt.Errorf("error waiting for publish confirm: %w", ctx.Err())
		case <-timer.C:
			pd.abandon()
			if flow.blocked {
				return pd.p.blockedError(pd.exchange, pd.routingKey, flow.reason)
			}
			// A broker that confirms nothing for this long is as good as
			// gone: the next publish dials again.
			pd.p.invalidate(pd.sess)
			return fmt.Errorf("publish to exchange %q routing key %q: no confirm within %s: %w (%w)",
				pd.exchange, pd.routingKey, pd.p.cfg.PublishTimeout, ErrNotConfirmed, context.DeadlineExceeded)
		}
	}
	return pd.result()
}

// result is the outcome of a completed confirmation.
func (pd *Pending) result() error {
	if !pd.dc.Acked() {
		pd.sess.takeReturn(pd.id)
		pd.p.invalidate(pd.sess)
		return fmt.Errorf("publish to exchange %q routing key %q: %w", pd.exchange, pd.routingKey, ErrNotConfirmed)
	}
	// The broker sends basic.return before the basic.ack of the same
	// publish, and amqp091-go hands the return to our channel before it
	// closes the confirmation's Done channel, so it is visible now.
	if reason, ok := pd.sess.takeReturn(pd.id); ok {
		return &UnroutableError{Exchange: pd.exchange, RoutingKey: pd.routingKey, Reason: reason}
	}
	pd.p.confirmed.Add(1)
	return nil
}

// abandon is called when a waiter gives up before the confirm: once the
// confirm arrives (or the channel closes, which completes it too), the
// message's return, if the broker sent one, is dropped. Left alone it would
// stay in the session's map for as long as the connection lives; the
// forwarder's deadlines give up often enough under a slow broker to make
// that a leak.
func (pd *Pending) abandon() {
	go func() {
		<-pd.dc.Done()
		pd.sess.takeReturn(pd.id)
	}()
}

// PublishDeferred publishes one message without waiting for its confirm; the
// caller must call Wait on the result. A message without MessageId gets a
// unique one (consumers can use it as an idempotency key; the publisher uses
// it to match broker returns); a zero DeliveryMode becomes persistent. On a
// connection the broker blocks it fails with ErrBlocked without writing.
func (p *Publisher) PublishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) (*Pending, error) {
	if len(msg.Body) > p.cfg.MaxMessageBytes {
		return nil, fmt.Errorf("%w: %d bytes > limit %d", ErrMessageTooLarge, len(msg.Body), p.cfg.MaxMessageBytes)
	}
	if msg.MessageId == "" {
		msg.MessageId = p.nextID()
	}
	if msg.DeliveryMode == 0 {
		msg.DeliveryMode = amqp.Persistent
	}
	msg, span := startPublishSpan(ctx, exchange, routingKey, msg)
	pd, err := p.publishDeferred(ctx, exchange, routingKey, msg)
	endSpan(span, err)
	return pd, err
}

func (p *Publisher) publishDeferred(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) (*Pending, error) {
	deadline := time.Now().Add(p.cfg.PublishTimeout)
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("error publishing to exchange %q routing key %q: %w", exchange, routingKey, err)
		}
		p.mu.Lock()
		sess, err := p.session()
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		flow := sess.flow.Load()
		if !flow.blocked {
			pd, err := p.publishLocked(ctx, sess, exchange, routingKey, msg, deadline)
			p.mu.Unlock()
			return pd, err
		}
		p.mu.Unlock()
		if !p.waitWhileBlocked {
			return nil, p.blockedError(exchange, routingKey, flow.reason)
		}
		if err := flow.await(ctx, deadline); err != nil {
			return nil, fmt.Errorf("%w (waited: %w)", p.blockedError(exchange, routingKey, flow.reason), err)
		}
	}
}

// publishLocked writes one message on sess. Callers hold p.mu.
func (p *Publisher) publishLocked(ctx context.Context, sess *pubSession, exchange, routingKey string, msg amqp.Publishing, deadline time.Time) (*Pending, error) {
	dc, err := sess.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, routingKey, true, false, msg)
	if err != nil {
		p.dropSessionLocked(sess)
		return nil, fmt.Errorf("error publishing to exchange %q routing key %q: %w", exchange, routingKey, err)
	}
	p.published.Add(1)
	return &Pending{p: p, sess: sess, dc: dc, id: msg.MessageId, exchange: exchange, routingKey: routingKey, deadline: deadline}, nil
}

func (p *Publisher) blockedError(exchange, routingKey, reason string) error {
	return fmt.Errorf("publish to exchange %q routing key %q: %w (%s); publish again when the broker's alarm clears",
		exchange, routingKey, ErrBlocked, cmp.Or(reason, "no reason given"))
}

// await waits until the flow state changes, ctx ends or deadline passes.
func (f *flowState) await(ctx context.Context, deadline time.Time) error {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-f.changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return context.DeadlineExceeded
	}
}

// session returns the live session, opening one if needed. Callers hold p.mu.
func (p *Publisher) session() (*pubSession, error) {
	if p.closed {
		return nil, fmt.Errorf("publisher %s: %w", p.name, errStopped)
	}
	if p.sess != nil && !p.sess.ch.IsClosed() && !p.sess.conn.IsClosed() {
		return p.sess, nil
	}
	if p.sess != nil {
		p.sess.close()
		p.sess = nil
		p.reconnects.Add(1)
	}
	conn, raw, err := dialRaw(p.cfg, p.name)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("error opening publish channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("error enabling publisher confirms: %w", err)
	}
	s := &pubSession{conn: conn, raw: raw, ch: ch, returns: make(chan amqp.Return, 4096), returned: map[string][]string{}}
	s.flow.Store(&flowState{changed: make(chan struct{})})
	ch.NotifyReturn(s.returns)
	// amqp091-go gives up on a notification nobody reads within 5 s, so
	// block notifications are read at once, for the connection's life (the
	// channel closes with the connection).
	go s.watchFlow(conn.NotifyBlocked(make(chan amqp.Blocking, 1)), p.cfg.Logger.With("connection", p.name))
	p.sess = s
	p.cfg.Logger.Debug("amqp publisher connected", "connection", p.name)
	return s, nil
}

// invalidate drops sess if it is still the current session, so the next
// publish reconnects.
func (p *Publisher) invalidate(sess *pubSession) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropSessionLocked(sess)
}

func (p *Publisher) dropSessionLocked(sess *pubSession) {
	if p.sess == sess {
		p.sess.close()
		p.sess = nil
		p.reconnects.Add(1)
	}
}

// watchFlow records the broker's connection.blocked and
// connection.unblocked notifications.
func (s *pubSession) watchFlow(blocks <-chan amqp.Blocking, logger *slog.Logger) {
	for b := range blocks {
		old := s.flow.Load()
		if b.Active == old.blocked {
			continue
		}
		s.flow.Store(&flowState{blocked: b.Active, reason: b.Reason, changed: make(chan struct{})})
		close(old.changed)
		if b.Active {
			logger.Warn("amqp broker blocked the publisher (flow control); publishes fail until it unblocks", "reason", b.Reason)
		} else {
			logger.Info("amqp broker unblocked the publisher")
		}
	}
}

// sessionCloseTimeout bounds the close handshake.
const sessionCloseTimeout = 5 * time.Second

// close closes the connection (and with it the channel). A broker that
// blocked the connection does not read it, so its close-ok would never
// come; amqp091-go's CloseDeadline does not help either, because the
// broker's heartbeats keep pushing the read deadline out. Then, or when the
// handshake takes too long, the socket is closed under the connection,
// which ends it at once.
func (s *pubSession) close() {
	if s.flow.Load().blocked {
		_ = s.raw.Close()
		_ = s.conn.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.conn.Close()
	}()
	timer := time.NewTimer(sessionCloseTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		_ = s.raw.Close()
		<-done
	}
}

// takeReturn moves returns that arrived so far into the map and reports (and
// forgets) the one for message id.
func (s *pubSession) takeReturn(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for drained := false; !drained; {
		select {
		case r, ok := <-s.returns:
			if !ok {
				drained = true
				break
			}
			s.returned[r.MessageId] = append(s.returned[r.MessageId], fmt.Sprintf("%d %s", r.ReplyCode, r.ReplyText))
		default:
			drained = true
		}
	}
	reasons := s.returned[id]
	if len(reasons) == 0 {
		return "", false
	}
	if len(reasons) == 1 {
		delete(s.returned, id)
	} else {
		s.returned[id] = reasons[1:]
	}
	return reasons[0], true
}

// withChannel runs fn on a short-lived channel of the publisher's connection
// (declarations), so a channel-level error does not close the publish
// channel.
func (p *Publisher) withChannel(fn func(ch *amqp.Channel) error) error {
	p.mu.Lock()
	sess, err := p.session()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	// A blocked connection is not read by the broker: a declaration on it
	// would wait for its reply until the alarm clears.
	if flow := sess.flow.Load(); flow.blocked {
		return fmt.Errorf("error declaring: %w (%s)", ErrBlocked, cmp.Or(flow.reason, "no reason given"))
	}
	ch, err := sess.conn.Channel()
	if err != nil {
		p.invalidate(sess)
		return fmt.Errorf("error opening channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	return fn(ch)
}
