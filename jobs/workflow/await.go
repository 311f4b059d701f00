package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AwaitRecheckInterval bounds what a lost notification costs a waiter: Await
// reads the workflow's row again at this interval whatever it heard. A
// notification is lost only while the listening connection is down, and the
// hub re-reads every waited-for row when it is back, so the interval is a
// last resort.
const AwaitRecheckInterval = 5 * time.Second

// awaitChannel is the channel of the NOTIFY that the trigger of migration workflow_await
// sends when an awaited workflow ends; its payload is "schema id".
const awaitChannel = "tributary_workflow_end"

// awaitIdle is how long the hub keeps its listening connection open after
// its last waiter left, so that a steady stream of waits (a handler per
// request) does not connect and LISTEN for each.
const awaitIdle = time.Minute

// FinalTask is a task nothing depends on, as it ended.
type FinalTask struct {
	Name  string    `json:"name"`
	State TaskState `json:"state"`
	// Output is the task's output when it completed with one.
	Output json.RawMessage `json:"output,omitempty"`
}

// Outcome is how a workflow ended, as Await returns it.
type Outcome struct {
	ID         string    `json:"id"`
	Key        string    `json:"key,omitempty"`
	Name       string    `json:"name"`
	Status     Status    `json:"status"`
	FinishedAt time.Time `json:"finished_at"`
	// Final are the workflow's final tasks (those no task depends on), in
	// the order they were added: their outputs are the workflow's result.
	Final []FinalTask `json:"final"`
	// Failed maps each failed task (anywhere in the graph) to the error of
	// its last attempt.
	Failed map[string]string `json:"failed,omitempty"`
}

// Output decodes the output of final task into v; a task that is not
// final or has no output is an error naming it.
func (o *Outcome) Output(task string, v any) error {
	for _, t := range o.Final {
		if t.Name != task {
			continue
		}
		if t.Output == nil {
			return fmt.Errorf("task %q of workflow %s ended %s without an output", task, o.ID, t.State)
		}
		if err := json.Unmarshal(t.Output, v); err != nil {
			return fmt.Errorf("error decoding the output of task %q of workflow %s into %T: %w", task, o.ID, v, err)
		}
		return nil
	}
	return fmt.Errorf("task %q is not a final task of workflow %s", task, o.ID)
}

// ErrNotCompleted is the kind of *OutcomeError.
var ErrNotCompleted = errors.New("workflow did not complete")

// OutcomeError is a workflow AwaitResult waited for that ended failed or
// cancelled; Outcome says how.
type OutcomeError struct {
	Outcome *Outcome
}

func (e *OutcomeError) Error() string {
	msg := fmt.Sprintf("workflow %s ended %s", e.Outcome.ID, e.Outcome.Status)
	if len(e.Outcome.Failed) > 0 {
		var parts []string
		for _, t := range e.Outcome.Final {
			if err, ok := e.Outcome.Failed[t.Name]; ok {
				parts = append(parts, fmt.Sprintf("%s: %s", t.Name, err))
			}
		}
		if len(parts) == 0 {
			for name, err := range e.Outcome.Failed {
				parts = append(parts, fmt.Sprintf("%s: %s", name, err))
				break
			}
		}
		msg += " (" + strings.Join(parts, "; ") + ")"
	}
	return msg
}

// Unwrap returns ErrNotCompleted.
func (e *OutcomeError) Unwrap() error { return ErrNotCompleted }

// AwaitResult waits for the workflow ref names (Await) and decodes the
// output of its final task into a T. A workflow that ended failed or
// cancelled is an *OutcomeError.
//
//	res, _ := wfc.Insert(ctx, wf)
//	receipt, err := workflow.AwaitResult[Receipt](ctx, wfc, res.ID, "ship")
func AwaitResult[T any](ctx context.Context, c *Client, ref, task string) (T, error) {
	var v T
	o, err := c.Await(ctx, ref)
	if err != nil {
		return v, err
	}
	if o.Status != StatusCompleted {
		return v, &OutcomeError{Outcome: o}
	}
	err = o.Output(task, &v)
	return v, err
}

// Await waits until the workflow ref names (its id, else its caller key)
// is no longer running and returns its outcome: its status and the outputs
// of its final tasks. A workflow that already ended returns at once.
//
// It is woken by a notification sent in the transaction that ends the
// workflow, not by polling: one listening connection per Client serves
// every waiter, and a wait costs a few queries whatever its length. The
// context bounds the wait: its end is an error wrapping
// context.DeadlineExceeded or context.Canceled and naming the workflow.
// An unknown workflow is a *NotFoundError.
func (c *Client) Await(ctx context.Context, ref string) (*Outcome, error) {
	if c.hub == nil {
		return nil, errors.New("workflow.Client.Await: not available on a task's client")
	}
	id, err := c.resolve(ctx, c.qc.Pool(), ref)
	if err != nil {
		return nil, awaitErr(ctx, ref, err)
	}
	w, err := c.hub.subscribe(ctx, id)
	if err != nil {
		return nil, awaitErr(ctx, id, err)
	}
	defer c.hub.unsubscribe(id, w)

	// Flag the row only while it is running: the update waits for a
	// transaction ending it, and then finds it ended.
	var flagged bool
	err = c.qc.Pool().QueryRow(ctx, c.hub.sql.markAwaited, customPlan, id).Scan(&flagged)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, awaitErr(ctx, id, fmt.Errorf("error registering the wait: %w", err))
	}
	recheck := time.NewTimer(AwaitRecheckInterval)
	defer recheck.Stop()
	read := !flagged // ended already, or another waiter flagged it
	for {
		if read {
			o, err := c.readOutcome(ctx, id)
			switch {
			case err != nil && ctx.Err() == nil && connectionLost(err):
				// Read again at the next wake: the listener's
				// reconnect, or the recheck.
				c.logger.WarnContext(ctx, "await could not read the workflow, reading again later", "workflow_id", id, "error", err)
			case err != nil:
				return nil, awaitErr(ctx, id, err)
			case o != nil:
				return o, nil
			}
		}
		read = true
		select {
		case <-ctx.Done():
			return nil, awaitErr(ctx, id, ctx.Err())
		case <-w.wake:
		case <-recheck.C:
			recheck.Reset(AwaitRecheckInterval)
		}
	}
}

// connectionLost reports whether err is a failure to reach the database
// rather than an error the server reported.
func connectionLost(err error) bool {
	var pgErr *pgconn.PgError
	var nf *NotFoundError
	return !errors.As(err, &pgErr) && !errors.As(err, &nf)
}

// awaitErr names the workflow in an error of Await; the end of the
// context is reported as the context's error, whatever the query said.
func awaitErr(ctx context.Context, ref string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	var nf *NotFoundError
	if errors.As(err, &nf) {
		return err
	}
	return fmt.Errorf("awaiting workflow %s: %w", ref, err)
}

const markAwaitedSQL = `
UPDATE /*schema*/tributary_workflow SET awaited = true
WHERE id = $1::uuid AND status = 'running' AND NOT awaited
RETURNING true`

// selectOutcomeSQL reads a workflow's status and, once it ended, its final
// tasks (no dependents) and its failed tasks' last errors, through the task
// table's primary key; the subqueries run only for an ended workflow.
const selectOutcomeSQL = `
SELECT w.id::text, coalesce(w.key, ''), w.name, w.status, w.finished_at,
    CASE WHEN w.status <> 'running' THEN
        (SELECT coalesce(jsonb_agg(jsonb_build_object('name', t.name, 'state', t.state, 'output', t.output) ORDER BY t.position), '[]')
         FROM /*schema*/tributary_workflow_task t WHERE t.workflow_id = w.id AND cardinality(t.dependents) = 0)
    END,
    CASE WHEN w.status <> 'running' AND w.tasks_failed > 0 THEN
        (SELECT jsonb_object_agg(t.name, coalesce(t.errors -> -1 ->> 'error', ''))
         FROM /*schema*/tributary_workflow_task t WHERE t.workflow_id = w.id AND t.state = 'failed')
    END
FROM /*schema*/tributary_workflow w WHERE w.id = $1::uuid`

// readOutcome returns the outcome of workflow id, or nil while it runs. A
// workflow deleted meanwhile is a *NotFoundError.
func (c *Client) readOutcome(ctx context.Context, id string) (*Outcome, error) {
	var o Outcome
	var final, failed []byte
	var finished *time.Time
	err := c.qc.Pool().QueryRow(ctx, c.hub.sql.selectOutcome, customPlan, id).Scan(&o.ID, &o.Key, &o.Name, &o.Status, &finished, &final, &failed)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &NotFoundError{Ref: id} // deleted by retention meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("error reading the outcome of workflow %s: %w", id, err)
	}
	if o.Status == StatusRunning {
		return nil, nil
	}
	if finished != nil {
		o.FinishedAt = *finished
	}
	if err := json.Unmarshal(final, &o.Final); err != nil {
		return nil, fmt.Errorf("error decoding the final tasks of workflow %s: %w", id, err)
	}
	for i := range o.Final {
		if string(o.Final[i].Output) == "null" {
			o.Final[i].Output = nil
		}
	}
	if failed != nil {
		if err := json.Unmarshal(failed, &o.Failed); err != nil {
			return nil, fmt.Errorf("error decoding the failed tasks of workflow %s: %w", id, err)
		}
	}
	return &o, nil
}

// awaitHub is a Client's one listening connection, shared by its waiters:
// it is opened by the first wait and closed awaitIdle after the last.
type awaitHub struct {
	pool   *pgxpool.Pool
	schema string
	logger *slog.Logger
	sql    awaitStatements

	mu      sync.Mutex
	waiters map[string]map[*awaitWaiter]struct{} // by workflow id
	cur     *awaitListener                       // nil while no listener runs
	idle    *time.Timer                          // stops the listener awaitIdle after the last waiter left
}

// awaitListener is one run of the listening goroutine.
type awaitListener struct {
	stop  context.CancelFunc
	ready chan struct{} // closed while LISTEN is active; replaced (under the hub's mu) when the connection is lost
}

type awaitStatements struct{ markAwaited, selectOutcome string }

type awaitWaiter struct{ wake chan struct{} }

func newAwaitHub(pool *pgxpool.Pool, schema string, logger *slog.Logger, q func(string) string) *awaitHub {
	return &awaitHub{pool: pool, schema: schema, logger: logger, waiters: map[string]map[*awaitWaiter]struct{}{},
		sql: awaitStatements{markAwaited: q(markAwaitedSQL), selectOutcome: q(selectOutcomeSQL)}}
}

// subscribe adds a waiter for workflow id, starting the listener if it is
// not running, and returns once the listener is LISTENing (or it could not
// within AwaitRecheckInterval: the waiter then relies on its rechecks).
func (h *awaitHub) subscribe(ctx context.Context, id string) (*awaitWaiter, error) {
	w := &awaitWaiter{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	set := h.waiters[id]
	if set == nil {
		set = map[*awaitWaiter]struct{}{}
		h.waiters[id] = set
	}
	set[w] = struct{}{}
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	if h.cur == nil {
		lctx, cancel := context.WithCancel(context.Background())
		h.cur = &awaitListener{stop: cancel, ready: make(chan struct{})}
		go h.listen(lctx, h.cur)
	}
	ready := h.cur.ready
	h.mu.Unlock()
	t := time.NewTimer(AwaitRecheckInterval)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
		h.unsubscribe(id, w)
		return nil, ctx.Err()
	}
	return w, nil
}

func (h *awaitHub) unsubscribe(id string, w *awaitWaiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.waiters[id]
	delete(set, w)
	if len(set) == 0 {
		delete(h.waiters, id)
	}
	if len(h.waiters) == 0 && h.cur != nil && h.idle == nil {
		var idle *time.Timer
		idle = time.AfterFunc(awaitIdle, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if len(h.waiters) > 0 || h.idle != idle {
				return
			}
			h.cur.stop()
			h.idle, h.cur = nil, nil
		})
		h.idle = idle
	}
}

// wakeAll wakes every waiter, to read its row again after notifications may
// have been missed.
func (h *awaitHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.waiters {
		for w := range set {
			wake(w)
		}
	}
}

func (h *awaitHub) wakeID(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[id] {
		wake(w)
	}
}

func wake(w *awaitWaiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// listen holds l's LISTEN connection until ctx ends, reconnecting after a
// loss. l.ready is closed while LISTEN is active; after a reconnect every
// waiter reads its row again, since a workflow may have ended unheard.
func (h *awaitHub) listen(ctx context.Context, l *awaitListener) {
	prefix := h.schema + " "
	connects := 0
	backoff := 100 * time.Millisecond
	for {
		conn, err := h.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			h.logger.WarnContext(ctx, "await cannot listen, waiters rely on their rechecks", "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, AwaitRecheckInterval)
			continue
		}
		backoff = 100 * time.Millisecond
		connects++
		h.mu.Lock()
		close(l.ready)
		h.mu.Unlock()
		if connects > 1 {
			h.wakeAll()
		}
		for {
			n, err := conn.WaitForNotification(ctx)
			if err == nil {
				if id, ok := strings.CutPrefix(n.Payload, prefix); ok {
					h.wakeID(id)
				}
				continue
			}
			closeCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			conn.Close(closeCtx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			h.logger.WarnContext(ctx, "await lost its LISTEN connection, reconnecting", "error", err)
			h.mu.Lock()
			l.ready = make(chan struct{})
			h.mu.Unlock()
			break
		}
	}
}

// connect opens a connection of its own (a pooled one would be lost to
// the pool's other users) and LISTENs.
func (h *awaitHub) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, h.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("error opening the await connection: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{awaitChannel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("error listening on %s: %w", awaitChannel, err)
	}
	return conn, nil
}
