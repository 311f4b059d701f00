package workflow

import (
	"bytes"
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// completerMaxBatch bounds how many task outcomes share one transaction;
// completerShards is how many such transactions run at once in one process.
// A batch fills only while outcomes wait for the previous commit. A larger
// bound shares each statement's planning and round trip among more tasks
// (bench workflows' 4,000 diamonds: 223-250 us of CPU per task, this
// process and the database, with 1,000 against 257-295 us with 200), but
// all the tasks of one workflow go to one committer, and the fan-in of a
// 10,000-wide workflow then waited for a batch of 1,000 to commit: from
// the last fan-out task's recorded completion to the fan-in task's start,
// a median of 67 ms over three rounds (24 to 181 ms), against medians of
// 20 and 30 ms in two runs with 200 (their slowest rounds 146 and 98 ms).
const (
	completerMaxBatch = 200
	completerShards   = 4
)

// request is one task outcome waiting for its transaction.
type request struct {
	jobCtx   context.Context // the job's work context: River's client and metadata updates
	job      *rivertype.JobRow
	outcome  outcome
	jobState rivertype.JobState
	expand   []*taskDef // tasks Expand staged, inserted with the completion
	done     chan error
}

// completer group-commits task outcomes. Each outcome is a transaction
// (finalize the job, record the task, release its dependents, count), and
// one commit per task would cap a busy worker at the disk's flush rate (the
// events lanes measured 152 completions/s that way, 570/s grouped).
// Outcomes that arrive while a transaction runs share the next one. There is
// no timer: a lone outcome commits at once.
//
// Outcomes are sharded by workflow, one committer per shard: a transaction
// holds its workflows' locks until it commits, and the tasks of one
// workflow that finish together (a diamond's middle tasks) would otherwise
// land in the batches of different committers and wait for each other's
// commits. Measured with 4,000 five-task diamonds in one process: a batch
// waited up to 190 ms for those locks, and the run reached 0.26 to 0.38 of
// plain River jobs' throughput.
type completer struct {
	c *Coordinator

	shards [completerShards]shard
}

type shard struct {
	mu      sync.Mutex
	queue   []*request
	running bool
}

// submit queues an outcome and waits for its transaction.
func (cp *completer) submit(ctx context.Context, req *request) error {
	req.done = make(chan error, 1)
	h := fnv.New32a()
	_, _ = h.Write([]byte(req.outcome.WorkflowID))
	sh := &cp.shards[h.Sum32()%completerShards]
	sh.mu.Lock()
	sh.queue = append(sh.queue, req)
	if !sh.running {
		sh.running = true
		go cp.drain(sh)
	}
	sh.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The outcome may still commit; if it does not, River runs the job
		// again (at-least-once).
		return ctx.Err()
	}
}

func (cp *completer) drain(sh *shard) {
	for {
		sh.mu.Lock()
		if len(sh.queue) == 0 {
			sh.running = false
			sh.mu.Unlock()
			return
		}
		n := min(len(sh.queue), completerMaxBatch)
		batch := make([]*request, n)
		copy(batch, sh.queue[:n])
		sh.queue = sh.queue[n:]
		sh.mu.Unlock()
		cp.commit(batch)
	}
}

// commit records a batch in one transaction. If it fails, each outcome is
// retried in a transaction of its own, so one bad outcome does not fail
// the others.
func (cp *completer) commit(batch []*request) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cp.commitTx(ctx, batch); err == nil || len(batch) == 1 {
		for _, req := range batch {
			req.done <- err
		}
		return
	}
	for _, req := range batch {
		req.done <- cp.commitTx(ctx, []*request{req})
	}
}

func (cp *completer) commitTx(ctx context.Context, batch []*request) error {
	c := cp.c
	var queues []string
	var recorded []outcome
	var finished map[string]Status
	stale := 0
	now := time.Now().UTC()
	err := pgx.BeginTxFunc(ctx, c.pool, completionTx, func(tx pgx.Tx) error {
		ids := make([]string, len(batch))
		for i, req := range batch {
			ids[i] = req.outcome.WorkflowID
		}
		// Finalize the jobs first (after the workflows' lock), guarded by
		// running at this attempt: an attempt that was rescued and handed
		// on meanwhile is stale, and its outcome is dropped.
		var completions []riverjob.Attempt
		var finals []riverjob.Final
		// A limited task's job is completed in this transaction (below,
		// completeJobs) rather than by River's batched completer up to
		// 250 ms after it: its slot of the limit returns at this commit
		// (docs/decisions/0030-flow-control.md, latency).
		expanding, limited := false, false
		byJob := make(map[int64]*request, len(batch))
		for _, req := range batch {
			byJob[req.job.ID] = req
			expanding = expanding || len(req.expand) > 0
			limited = limited || (req.jobState == rivertype.JobStateCompleted && bytes.Contains(req.job.Metadata, limitMetaName))
			if req.jobState == rivertype.JobStateCompleted {
				completions = append(completions, riverjob.Attempt{ID: req.job.ID, Attempt: req.job.Attempt})
				continue
			}
			last := req.outcome.Errors[len(req.outcome.Errors)-1]
			finals = append(finals, riverjob.Final{ID: req.job.ID, Attempt: req.job.Attempt, State: req.jobState,
				Error: rivertype.AttemptError{At: last.At, Attempt: last.Attempt, Error: last.Error, Trace: last.Trace}})
		}
		a := newAdvance(tx, &c.sql, c.cfg.Schema, now)
		a.probeCounts = true
		common := !expanding && !limited && len(completions) > 0
		if common && len(finals) == 0 {
			// Locked in the round trip of completeReleaseSQL, its first
			// statement (completeRelease).
			a.lock = ids
		} else if _, err := lockWorkflows(ctx, tx, &c.sql, ids); err != nil {
			return err
		}
		finalized, err := riverjob.FinalizeRunning(ctx, tx, c.cfg.Schema, finals, now)
		if err != nil {
			return err
		}
		if common {
			// The common case: one statement records the outcomes and
			// releases the dependents (completeReleaseSQL); River's
			// completer completes the successes' jobs after the commit.
			outs := make([]outcome, 0, len(batch))
			for _, req := range batch {
				if req.jobState == rivertype.JobStateCompleted {
					outs = append(outs, req.outcome)
				}
			}
			for _, id := range finalized {
				outs = append(outs, byJob[id].outcome)
			}
			completed, done, err := a.completeFinish(ctx, completions, outs)
			if err != nil {
				return err
			}
			recorded = done
			stale = len(batch) - len(completed) - len(finalized)
		} else {
			completed, err := cp.completeJobs(ctx, tx, completions, now)
			if err != nil {
				return err
			}
			live := make([]outcome, 0, len(batch))
			for _, id := range append(completed, finalized...) {
				req := byJob[id]
				live = append(live, req.outcome)
				if len(req.expand) > 0 {
					// Before finish: it reads the task's dependents, the
					// expanded tasks among them.
					rc, _ := river.ClientFromContextSafely[pgx.Tx](req.jobCtx)
					if err := insertExpanded(ctx, tx, &c.sql, rc, req.outcome.WorkflowID, req.outcome.Task, req.expand, now); err != nil {
						return err
					}
				}
			}
			stale = len(batch) - len(live)
			if recorded, err = a.finish(ctx, live); err != nil {
				return err
			}
		}
		if queues, err = a.flush(ctx); err != nil {
			return err
		}
		finished = a.finished
		return nil
	})
	if err != nil {
		return err
	}
	c.batches.Add(1)
	c.stale.Add(int64(stale))
	for _, o := range recorded {
		switch o.State {
		case TaskCompleted:
			c.completed.Add(1)
		case TaskFailed:
			c.failed.Add(1)
		case TaskCancelled:
			c.cancelled.Add(1)
		}
	}
	for id, st := range finished {
		c.logger.DebugContext(ctx, "workflow finished", "workflow_id", id, "status", st)
	}
	if err := riverjob.Wake(ctx, c.pool, c.cfg.Schema, queues); err != nil {
		// The jobs are available; River's poll finds them without it.
		c.logger.WarnContext(ctx, "error waking River for released tasks", "error", err)
	}
	return nil
}

// completionTx begins a completion transaction with the planner's
// sequential scans, hash joins and merge joins off (SET LOCAL, in the
// BEGIN's round trip). Every statement of the transaction reaches its rows
// through a primary key, and completeReleaseSQL runs with a generic plan
// (generic): without these settings, the generic plan Postgres built while
// the tables were small or empty read them whole (a sequential scan of
// river_job, a hash join over an index scan of every task) and would be
// kept per connection after they grew. With them, the generic plan is
// primary-key probes whatever the tables' sizes, as the custom plans are
// for every statement of the path.
var completionTx = pgx.TxOptions{
	BeginQuery: "BEGIN; SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off",
}

// completeJobs completes the jobs of successful tasks in one statement
// (riverjob.CompleteRunning, what River's JobCompleteTx writes for each)
// and returns those it completed. River's completer, told of the success
// after the commit, merges the attempt's metadata updates into the row. A
// lone completion goes the same way: River's JobCompleteTx, which merges
// them in the transaction, is a general state-change statement that cost 2
// ms a job here, on the path of every hop of a chain.
func (cp *completer) completeJobs(ctx context.Context, tx pgx.Tx, attempts []riverjob.Attempt, now time.Time) ([]int64, error) {
	return riverjob.CompleteRunning(ctx, tx, cp.c.cfg.Schema, attempts, now)
}

// limitMetaName is how a limited job's metadata names its limit.
var limitMetaName = []byte(`"` + riverjob.LimitMetaName + `"`)
