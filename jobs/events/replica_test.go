package events_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/events/internal/replica"
	"github.com/tributary-run/tributary/outbox"
)

// replicaEvents is the size of the replica runs: EVENTS_REPLICA_N, else
// def.
func replicaEvents(def int) int {
	if n, err := strconv.Atoi(os.Getenv("EVENTS_REPLICA_N")); err == nil && n > 0 {
		return n
	}
	return def
}

// emitReplicaEvents emits n events from 4 goroutines, 100 per transaction:
// every tenth without an aggregate (so it travels in batched dispatch jobs),
// the rest over aggregates. Emit order is the outbox position.
func emitReplicaEvents(t *testing.T, db *pgtest.DB, n, aggregates int) {
	t.Helper()
	reg, err := events.NewRegistry(replica.Event)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * 100; i < n; i += 400 {
				batch := make([]events.Emission, 0, 100)
				for j := i; j < min(n, i+100); j++ {
					meta := events.Meta{CorrelationID: fmt.Sprint("c-", j)}
					if j%10 != 9 {
						meta.AggregateID = fmt.Sprintf("agg-%03d", j%aggregates)
					}
					batch = append(batch, events.Emission{Def: replica.Event, Payload: replica.Payload{N: j}, Meta: meta})
				}
				if _, err := em.EmitMany(context.Background(), db.Pool, batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// checkReplicaLog checks that every event reached every consumer and that,
// per (consumer, aggregate), successful calls follow emit order.
func checkReplicaLog(t *testing.T, db *pgtest.DB, n int) {
	t.Helper()
	ctx := context.Background()
	want := emitOrder(t, db)
	rows, err := db.Pool.Query(ctx, db.Q(`SELECT id::text FROM /*schema*/tributary_outbox WHERE aggregate_id IS NULL`))
	require.NoError(t, err)
	unordered, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, unordered)
	rows, err = db.Pool.Query(ctx, db.Q(`SELECT consumer, coalesce(aggregate_id, ''), event_id::text FROM /*schema*/replica_log ORDER BY id`))
	require.NoError(t, err)
	got := map[string]map[string][]string{}
	gotUnordered := map[string]map[string]bool{}
	for rows.Next() {
		var c, agg, id string
		require.NoError(t, rows.Scan(&c, &agg, &id))
		if agg == "" {
			if gotUnordered[c] == nil {
				gotUnordered[c] = map[string]bool{}
			}
			gotUnordered[c][id] = true
			continue
		}
		if got[c] == nil {
			got[c] = map[string][]string{}
		}
		l := got[c][agg]
		if len(l) > 0 && l[len(l)-1] == id {
			continue // a re-run of the same event (at-least-once), still in order
		}
		got[c][agg] = append(l, id)
	}
	require.NoError(t, rows.Err())
	rows.Close()
	for _, c := range replica.ConsumerNames {
		delivered := 0
		for agg, ids := range want {
			require.Equal(t, ids, got[c][agg], "consumer %s, aggregate %s: calls in emit order, each event once", c, agg)
			delivered += len(ids)
		}
		for _, id := range unordered {
			require.True(t, gotUnordered[c][id], "consumer %s got event %s (no aggregate)", c, id)
		}
		delivered += len(gotUnordered[c])
		require.Equal(t, n, delivered, "consumer %s got every event", c)
	}
}

func waitReplicaLog(t *testing.T, db *pgtest.DB, n int, timeout time.Duration) {
	t.Helper()
	pgtest.WaitFor(t, timeout, "every event to reach every consumer", func() (bool, error) {
		var got int
		err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(DISTINCT (consumer, event_id)) FROM /*schema*/replica_log`)).Scan(&got)
		return got == n*len(replica.ConsumerNames), err
	})
}

func TestReplicasInProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(replica.CreateLogSQL))
	require.NoError(t, err)
	n := replicaEvents(500)

	var forwarders []*events.Forwarder
	for i := range 3 {
		consumers, err := replica.Consumers(db.Pool, replica.Config{Schema: db.Schema, Replica: fmt.Sprint("r", i),
			FailRate: 0.05, MaxLatency: 2 * time.Millisecond, RetryDelay: 10 * time.Millisecond})
		require.NoError(t, err)
		_, inst := startEvents(t, db, events.ForwarderConfig{ID: fmt.Sprint("fwd-", i), ClaimSize: 100}, consumers...)
		forwarders = append(forwarders, inst.Forwarder)
	}
	emitReplicaEvents(t, db, n, 200)
	// A liveness bound, not a speed: the 10,000-event run of make chaos
	// under -race on a loaded two-core machine needs more than three minutes.
	waitReplicaLog(t, db, n, 5*time.Minute)
	checkReplicaLog(t, db, n)
	var forwarded int64
	for _, f := range forwarders {
		forwarded += f.Stats().Forwarded
	}
	require.Equal(t, int64(n), forwarded, "each row forwarded exactly once")
}

// TestReplicasSeparateProcesses runs three worker processes on one schema.
// The normal run uses 1,500 events over 200 aggregates (500 in process);
// `make chaos` sets EVENTS_REPLICA_N=10000 for the full-size run.
func TestReplicasSeparateProcesses(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(replica.CreateLogSQL))
	require.NoError(t, err)
	n := replicaEvents(1500)

	bin := buildReplicaWorker(t)
	for i := range 3 {
		startReplica(t, bin, db, fmt.Sprint("proc-", i))
	}
	pgtest.WaitFor(t, 60*time.Second, "the replicas to register their consumers", func() (bool, error) {
		var c int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_event_consumer`)).Scan(&c)
		return c == len(replica.ConsumerNames), err
	})
	// Every process must be up and listening before the events arrive, so
	// all three compete for them.
	pgtest.WaitFor(t, 60*time.Second, "the replicas' River clients", func() (bool, error) {
		var c int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN "tributary_outbox_%'`).Scan(&c)
		return c >= 3, err
	})

	emitReplicaEvents(t, db, n, 200)
	waitReplicaLog(t, db, n, 5*time.Minute)
	checkReplicaLog(t, db, n)

	var forwarders, handlers int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(DISTINCT claimed_by) FROM /*schema*/tributary_outbox`)).Scan(&forwarders))
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(DISTINCT replica) FROM /*schema*/replica_log`)).Scan(&handlers))
	t.Logf("%d events: forwarded by %d processes, handled in %d processes", n, forwarders, handlers)
	// Usually all three; a process starved by the machine's load may get
	// none of a small run's jobs, which is not a failure of the library.
	require.GreaterOrEqual(t, handlers, 2, "several processes handled events")
	// The last handler's completion may still be committing when its log
	// row is visible.
	pgtest.WaitFor(t, 30*time.Second, "every dispatch job to be completed", func() (bool, error) {
		var notCompleted int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE state <> 'completed'`)).Scan(&notCompleted)
		return notCompleted == 0, err
	})
	_ = outbox.Event{}
}

// buildReplicaWorker builds the replica worker binary into a temporary
// directory.
func buildReplicaWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "replicaworker")
	build := exec.Command("go", "build", "-o", bin, "./internal/testproc/replicaworker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the replica worker: %s", out)
	return bin
}

// startReplica starts one replica worker process on the test's schema; it
// is stopped with SIGTERM when the test ends. env adds variables.
func startReplica(t *testing.T, bin string, db *pgtest.DB, name string, env ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(bin)
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.URLWithPoolMax(8),
		"TRIBUTARY_SCHEMA="+db.Schema,
		"REPLICA_NAME="+name,
		"REPLICA_FAIL_RATE=0.05",
		"REPLICA_MAX_LATENCY=2ms",
	)
	cmd.Env = append(cmd.Env, env...)
	stderr := &pgtest.SyncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		if t.Failed() {
			t.Logf("replica %s stderr:\n%s", name, stderr.String())
		}
	})
	return cmd, exited
}

// TestStaleClaimKilledProcess kills a worker process (SIGKILL) right after
// its forwarder claimed rows; another process returns them to PENDING after
// the cut-off and forwards them.
func TestStaleClaimKilledProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(replica.CreateLogSQL))
	require.NoError(t, err)
	bin := buildReplicaWorker(t)

	// The victim's claim hands the rows to the bus; it must not start the
	// dispatch jobs that inserted, as it dies right after (the running jobs
	// of a killed process are the liveness sweep's, not this test's).
	victim, victimExited := startReplica(t, bin, db, "victim", "REPLICA_BROKER=1", "REPLICA_DIE_AFTER_CLAIM=1", "REPLICA_WORK_QUEUE=victim-idle")
	pgtest.WaitFor(t, 60*time.Second, "the victim to register its consumers", func() (bool, error) {
		var c int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_event_consumer`)).Scan(&c)
		return c == len(replica.ConsumerNames), err
	})
	const n = 100
	emitReplicaEvents(t, db, n, 10)
	select {
	case <-victimExited:
	case <-time.After(60 * time.Second):
		t.Fatal("the victim did not die after claiming")
	}
	require.Equal(t, "signal: killed", victim.ProcessState.String())
	var claimed int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status = 'CLAIMED' AND claimed_by = 'victim'`)).Scan(&claimed))
	require.Positive(t, claimed, "the dead forwarder's claim is left behind")

	startReplica(t, bin, db, "survivor", "REPLICA_BROKER=1", "REPLICA_STALE_AFTER=1s")
	waitReplicaLog(t, db, n, 2*time.Minute)
	checkReplicaLog(t, db, n)
	// The bus got the rows in the victim's claim transaction, so the log
	// can be complete before the survivor has sent them to the broker.
	pgtest.WaitFor(t, time.Minute, "the survivor to send every row", func() (bool, error) {
		var left int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status <> 'SENT'`)).Scan(&left)
		return left == 0, err
	})
	var notSent int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status <> 'SENT' OR claimed_by <> 'survivor'`)).Scan(&notSent))
	require.Zero(t, notSent, "every row was sent by the survivor after the reset")
}
