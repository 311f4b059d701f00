package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// copyInsert is EnqueueManyTx's own path for batches of RawArgs jobs (the
// inbound AMQP bridge's): one COPY into river_job through riverjob, writing
// exactly the rows River's InsertManyFastTx writes, without River's per-job
// work that this path does not need (insert parameters built per job, the
// arguments marshalled again through encoding/json, which validates and
// compacts a Marshaler's output, and the same checks a second time; their
// cost is measured in docs/decisions/0008-river-rows-by-copy.md). It is
// nil, and River inserts, where River's insert would do more than write the
// rows: a River client with insert hooks, plugins or insert middleware of
// its own, or a stubbed clock. Per batch, the items decide (copyJobs): only
// RawArgs without unique options or tags, and only while no OpenTelemetry
// provider is set (otelriver's insert middleware then adds a span and the
// trace to each job's metadata).
type copyInsert struct {
	schema      string
	maxAttempts int
	// cooldown spaces the NOTIFYs that make a queue's producers fetch at
	// once, as River's insert does: at most one per fetch cooldown and
	// queue, inside the inserting transaction (woken holds the last).
	cooldown time.Duration
	// checkKinds: River refuses kinds without a registered worker. River's
	// registry cannot be asked, so a kind goes through River's insert until
	// River accepted it once (workers are only ever added).
	checkKinds bool

	mu    sync.Mutex
	woken map[string]time.Time
	known map[string]bool
}

// newCopyInsert returns the COPY path for a River client configured by
// cfg (into cfg.Schema's river_job, where that client inserts), or nil when
// River's insert must run (see copyInsert).
func newCopyInsert(cfg *river.Config) *copyInsert {
	if len(cfg.Hooks) > 0 || len(cfg.Plugins) > 0 || cfg.Test.Time != nil {
		return nil
	}
	for _, m := range cfg.Middleware {
		if _, ours := m.(tracing); ours {
			continue
		}
		if _, inserts := m.(rivertype.JobInsertMiddleware); inserts {
			return nil
		}
	}
	return &copyInsert{
		schema:      cfg.Schema,
		maxAttempts: cmp.Or(cfg.MaxAttempts, river.MaxAttemptsDefault),
		cooldown:    cmp.Or(cfg.FetchCooldown, river.FetchCooldownDefault),
		checkKinds:  cfg.Workers != nil && !cfg.SkipUnknownJobCheck,
		woken:       map[string]time.Time{},
		known:       map[string]bool{},
	}
}

// checkQueueName refuses what River's insert refuses (riverjob.ValidQueueName),
// with River's messages.
func checkQueueName(name string) error {
	switch {
	case name == "":
		return errors.New("queue name cannot be empty")
	case len(name) > 64:
		return fmt.Errorf("queue name %q is longer than 64 characters", name)
	case !riverjob.ValidQueueName(name):
		return fmt.Errorf("queue name is invalid, expected letters and numbers separated by underscores or hyphens: %q", name)
	}
	return nil
}

// copyJobs returns items as the rows River would insert, with ok false when
// an item needs River's insert (not RawArgs, unique options, tags, a kind
// River has not accepted yet). Errors are those of River's insert and
// CheckArgs, for the same values.
func (ci *copyInsert) copyJobs(items []EnqueueItem) (jobs []riverjob.NewJob, ok bool, err error) {
	if len(items) == 0 {
		return nil, false, nil // River's error for an empty batch
	}
	jobs = make([]riverjob.NewJob, len(items))
	for i, it := range items {
		ra, isRaw := it.Args.(RawArgs)
		o := it.Opts
		if o == nil {
			o = &EnqueueOpts{}
		}
		if !isRaw || o.Unique || o.UniqueOpts != nil || len(o.Tags) > 0 || !ci.knownKind(ra.KindName) {
			return nil, false, nil
		}
		// A batch is mostly one kind and one *EnqueueOpts: CheckArgs's
		// kind check and the options' check once for each run of them.
		if i == 0 || ra.KindName != jobs[i-1].Kind {
			if err := checkKind(ra.KindName); err != nil {
				return nil, true, fmt.Errorf("job %d: %w", i, err)
			}
		}
		if err := checkRawJSON(ra); err != nil {
			return nil, true, fmt.Errorf("job %d: %w", i, err)
		}
		if i == 0 || it.Opts != items[i-1].Opts {
			if _, err := o.riverOpts(); err != nil {
				return nil, true, fmt.Errorf("job %d (%s): %w", i, ra.KindName, err)
			}
		}
		queue := cmp.Or(o.Queue, river.QueueDefault)
		if i == 0 || queue != jobs[i-1].Queue { // a batch is mostly one queue: the regexp once
			if err := checkQueueName(queue); err != nil {
				return nil, true, fmt.Errorf("job %d (%s): %w", i, ra.KindName, err)
			}
		}
		args := []byte(ra.JSON)
		if len(args) == 0 {
			args = []byte("{}") // RawArgs.MarshalJSON
		}
		jobs[i] = riverjob.NewJob{
			Kind: ra.KindName, Args: args, Queue: queue,
			Priority:    int16(cmp.Or(o.Priority, river.PriorityDefault)),
			MaxAttempts: riverjob.MaxAttempts(cmp.Or(o.MaxAttempts, ci.maxAttempts)),
			ScheduledAt: o.ScheduledAt,
		}
	}
	return jobs, true, nil
}

func (ci *copyInsert) knownKind(kind string) bool {
	if !ci.checkKinds {
		return true
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.known[kind]
}

// accepted records the kinds of items River's insert accepted.
func (ci *copyInsert) accepted(items []EnqueueItem) {
	if !ci.checkKinds {
		return
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	for _, it := range items {
		ci.known[it.Args.Kind()] = true
	}
}

// insert copies jobs in tx and, for the queues that got available jobs,
// notifies River's producers as River's insert does.
func (ci *copyInsert) insert(ctx context.Context, tx pgx.Tx, jobs []riverjob.NewJob) (int, error) {
	now := time.Now()
	n, err := riverjob.CopyNewJobs(ctx, tx, ci.schema, jobs, now)
	if err != nil {
		return 0, err
	}
	var wake []string
	ci.mu.Lock()
	for _, j := range jobs {
		if !j.ScheduledAt.IsZero() {
			continue
		}
		if last, ok := ci.woken[j.Queue]; !ok || now.Sub(last) >= ci.cooldown {
			ci.woken[j.Queue] = now
			wake = append(wake, j.Queue)
		}
	}
	ci.mu.Unlock()
	if err := riverjob.Wake(ctx, tx, ci.schema, wake); err != nil {
		return 0, err
	}
	return int(n), nil
}
