package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The dashboard benchmark's rows of tributary's own tables, written with
// COPY: the event consumers whose dispatch jobs the seeded jobs include,
// and workflows (the tables jobs/workflow writes, migrations 0010 to 0012)
// as a service that started them over the same 24 hours as the seeded
// jobs would have them.

// seededConsumers is how many event consumers the seeded dispatch jobs
// belong to.
const seededConsumers = 5

// seededConsumer is the name of seeded consumer i.
func seededConsumer(i int) string { return fmt.Sprintf("consumer-%d", i) }

// seedConsumers writes the seeded consumers' rows, as a worker running
// them would have registered them.
func seedConsumers(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	now := time.Now().UTC()
	rows := make([][]any, seededConsumers)
	for i := range rows {
		rows[i] = []any{seededConsumer(i), []string{"order.*"}, "events", int32(25), "", []string{}, now, now}
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "tributary_event_consumer"},
		[]string{"name", "patterns", "queue", "max_attempts", "source_service", "skip_own_kinds", "updated_at", "seen_at"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("error seeding tributary_event_consumer with COPY: %w", err)
	}
	return nil
}

// diamondTasks is the five-task workflow most seeded workflows are: one
// task fans out to three that the last one waits for.
var diamondTasks = []struct {
	name string
	deps []string
}{
	{"fetch", nil},
	{"charge", []string{"fetch"}},
	{"reserve", []string{"fetch"}},
	{"notify", []string{"fetch"}},
	{"ship", []string{"charge", "reserve", "notify"}},
}

// seededWorkflowNames are the workflow names, one of them rare.
var seededWorkflowNames = []string{"order.fulfil", "invoice.run", "account.close", "report.nightly"}

// seedWorkflows writes n five-task workflows (90 % completed, 4 % failed
// with the task after the failed one cancelled, 1 % cancelled, 5 % running)
// and one running fan-out of wide tasks, with their task rows and
// attributes (seededAttributes), by COPY, then VACUUM ANALYZEs the tables. Workflow i has the key seededWorkflowKey(i),
// the fan-out seededWorkflowKey(n). Task job ids point at seeded river_job
// rows (jobs up to maxJobID), so the workflow page's job lookups find jobs
// as they would for recent workflows.
func seedWorkflows(ctx context.Context, pool *pgxpool.Pool, schema string, n, wide int, maxJobID int64) error {
	now := time.Now().UTC()
	type task struct {
		name       string
		deps, outs []string
		state      string
	}
	var wfRows, taskRows, attrRows [][]any
	flush := func() error {
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "tributary_workflow"}, workflowColumns, pgx.CopyFromRows(wfRows)); err != nil {
			return fmt.Errorf("error seeding tributary_workflow with COPY: %w", err)
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "tributary_workflow_attribute"}, []string{"workflow_id", "key", "value"}, pgx.CopyFromRows(attrRows)); err != nil {
			return fmt.Errorf("error seeding tributary_workflow_attribute with COPY: %w", err)
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "tributary_workflow_task"}, workflowTaskColumns, pgx.CopyFromRows(taskRows)); err != nil {
			return fmt.Errorf("error seeding tributary_workflow_task with COPY: %w", err)
		}
		wfRows, taskRows, attrRows = wfRows[:0], taskRows[:0], attrRows[:0]
		return nil
	}
	add := func(i int, name, status string, created time.Time, tasks []task) {
		id := uuidV7At(created)
		counts := map[string]int{}
		for _, t := range tasks {
			counts[t.state]++
		}
		var finished any
		if status != "running" {
			finished = created.Add(2 * time.Second)
		}
		wfRows = append(wfRows, []any{id, seededWorkflowKey(i), name, status, []byte(fmt.Sprintf(`{"order_id": %d}`, i)),
			int32(len(tasks)), int32(counts["pending"]), int32(counts["active"]), int32(counts["completed"]), int32(counts["failed"]),
			int32(counts["cancelled"]), int32(counts["skipped"]), created, created.Add(2 * time.Second), finished})
		for _, a := range seededAttributes(i, n) {
			attrRows = append(attrRows, []any{id, a[0], a[1]})
		}
		for pos, t := range tasks {
			var output, started, done any
			attempts := int32(0)
			if t.state != "pending" {
				started, attempts = created.Add(time.Duration(pos)*100*time.Millisecond), 1
			}
			switch t.state {
			case "completed":
				output, done = []byte(fmt.Sprintf(`{"n": %d}`, pos)), created.Add(time.Second)
			case "failed", "cancelled":
				done = created.Add(time.Second)
			}
			errs := []byte(`[]`)
			if t.state == "failed" {
				errs = []byte(`[{"attempt": 1, "error": "card declined"}]`)
			}
			pendingDeps := int32(0)
			if t.state == "pending" {
				pendingDeps = int32(len(t.deps))
			}
			jobID := 1 + (int64(i)*int64(len(diamondTasks))+int64(pos))%max(maxJobID, 1)
			taskRows = append(taskRows, []any{id, t.name, int32(pos), "demo.noop", []byte(`{}`), "default", int16(1), int32(25),
				[]string{}, []byte(`{}`), nonNil(t.deps), nonNil(t.outs), pendingDeps, int32(0), "cancel", t.state, jobID,
				int32(1), attempts, errs, output, created, created.Add(time.Second), started, started, done})
		}
	}
	start := now.Add(-24 * time.Hour)
	for i := range n {
		created := start.Add(time.Duration(float64(24*time.Hour) * float64(i) / float64(n)))
		states := []string{"completed", "completed", "completed", "completed", "completed"}
		status := "completed"
		switch r := i % 100; {
		case r < 4:
			status, states = "failed", []string{"completed", "failed", "completed", "completed", "cancelled"}
		case r < 5:
			status, states = "cancelled", []string{"completed", "cancelled", "cancelled", "cancelled", "cancelled"}
		case r < 10:
			status, states = "running", []string{"completed", "active", "completed", "active", "pending"}
		}
		name := seededWorkflowNames[i%3]
		if i%211 == 0 {
			name = seededWorkflowNames[3] // rare: ~0.5 %
		}
		tasks := make([]task, len(diamondTasks))
		for k, d := range diamondTasks {
			tasks[k] = task{name: d.name, deps: d.deps, state: states[k]}
		}
		for k := range tasks {
			for _, dep := range tasks[k].deps {
				for j := range tasks {
					if tasks[j].name == dep {
						tasks[j].outs = append(tasks[j].outs, tasks[k].name)
					}
				}
			}
		}
		add(i, name, status, created, tasks)
		if len(taskRows) >= 50_000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if wide > 0 {
		fan := make([]string, wide)
		for k := range fan {
			fan[k] = fmt.Sprintf("part-%05d", k)
		}
		tasks := []task{{name: "split", outs: fan, state: "completed"}}
		for k, name := range fan {
			state := "completed"
			if k%3 == 0 {
				state = "active"
			}
			tasks = append(tasks, task{name: name, deps: []string{"split"}, outs: []string{"sum"}, state: state})
		}
		tasks = append(tasks, task{name: "sum", deps: fan, state: "pending"})
		add(n, "demo.fanout", "running", now.Add(-time.Minute), tasks)
	}
	if err := flush(); err != nil {
		return err
	}
	for _, table := range []string{"tributary_workflow", "tributary_workflow_task", "tributary_workflow_attribute"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{schema, table}.Sanitize()); err != nil {
			return fmt.Errorf("error vacuuming %s: %w", table, err)
		}
	}
	return nil
}

// seededRegions are the values of the seeded "region" attribute: a
// quarter of the workflows each.
var seededRegions = []string{"eu", "us", "ap", "sa"}

// seededAttributes are the attributes of seeded workflow i of n: a
// customer of ten workflows (spread over the day), a region of a quarter
// of them, and, for the oldest 2 %, a cohort: a value whose every match is
// far from the newest workflows.
func seededAttributes(i, n int) [][2]string {
	attrs := [][2]string{{"customer", seededCustomer(i % max(n/10, 1))}, {"region", seededRegions[i%len(seededRegions)]}}
	if i < n/50 {
		attrs = append(attrs, [2]string{"cohort", "early"})
	}
	return attrs
}

// seededCustomer is the customer attribute of seeded customer c.
func seededCustomer(c int) string { return fmt.Sprintf("c-%d", c) }

// seededWorkflowKey is the caller key of seeded workflow i.
func seededWorkflowKey(i int) string { return fmt.Sprintf("seed-%d", i) }

var workflowColumns = []string{"id", "key", "name", "status", "input", "task_count", "tasks_pending", "tasks_active",
	"tasks_completed", "tasks_failed", "tasks_cancelled", "tasks_skipped", "created_at", "updated_at", "finished_at"}

var workflowTaskColumns = []string{"workflow_id", "name", "position", "kind", "args", "queue", "priority", "max_attempts",
	"tags", "metadata", "deps", "dependents", "pending_deps", "failed_deps", "on_dep_failure", "state", "job_id",
	"run", "attempts", "errors", "output", "created_at", "updated_at", "ready_at", "started_at", "finished_at"}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// uuidV7At is a version 7 UUID for time t, so seeded ids sort by creation
// as the workflow package's do.
func uuidV7At(t time.Time) uuid.UUID {
	var u uuid.UUID
	_, _ = rand.Read(u[:])
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}
