package events_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/migrations"
)

// laneEventCount counts the lane events waiting for aggregate agg.
func (b *laneBundle) laneEventCount(t *testing.T, agg string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/tributary_event_lane_event
        WHERE aggregate_id = $1`), agg).Scan(&n))
	return n
}

// dispatchJobs counts the dispatch jobs of aggregate agg in state ("" for
// any state).
func (b *laneBundle) dispatchJobs(t *testing.T, agg, state string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND args->>'aggregate_id' = $1 AND ($2 = '' OR state::text = $2)`), agg, state).Scan(&n))
	return n
}

// lostHead emits a "gate" head, a "lost" event and the texts on aggregate
// agg, waits until the gate runs and the rest wait as lane events, and then
// moves the lane's head to "lost" without promoting it. It returns the
// ids of "lost" and the texts.
func (b *laneBundle) lostHead(t *testing.T, agg string, texts ...string) (string, []string) {
	t.Helper()
	ids := b.chainBacklog(t, agg, append([]string{"lost"}, texts...)...)
	_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`UPDATE /*schema*/tributary_event_lane SET head_seq = head_seq + 1 WHERE aggregate_id = $1`), agg)
	require.NoError(t, err)
	return ids[1], ids[2:]
}

// TestLaneEventsWaitOutsideRiver: a chained consumer's events behind their
// lane's head wait as lane events, not as River jobs, counted as pending;
// the chain runs them in order without inserting a job for any.
func TestLaneEventsWaitOutsideRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	ids := b.chainBacklog(t, "W", "a", "b", "c")
	require.Equal(t, 1, b.dispatchJobs(t, "W", ""), "only the head has a dispatch job")
	require.Equal(t, 3, b.laneEventCount(t, "W"))
	pending, err := events.CountPendingDispatches(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.EqualValues(t, 4, pending["lanes"], "lane events count as pending dispatches")

	close(b.gate)
	pgtest.WaitFor(t, 15*time.Second, "every event to be handled", func() (bool, error) {
		return b.rec.count(nil) == len(ids), nil
	})
	require.Equal(t, ids, b.handledOrder())
	require.Positive(t, b.inst.Dispatcher.Stats().Chained, "the events after the head ran in place")
	// A lane event is deleted by the chain step that records it, which
	// commits after its handler returned.
	pgtest.WaitFor(t, 15*time.Second, "the lane events to be recorded", func() (bool, error) {
		return b.laneEventCount(t, "W") == 0, nil
	})
	// The head's job, and any a chain that ended (its wall time, on a busy
	// machine) left its lane's next event to.
	pgtest.WaitFor(t, 15*time.Second, "the dispatch jobs to be completed", func() (bool, error) {
		all := b.dispatchJobs(t, "W", "")
		return all > 0 && all < len(ids) && b.dispatchJobs(t, "W", "completed") == all, nil
	})
}

// TestLaneJobsOfTheOldPath: the events an older version left waiting behind
// a lane's head as pending dispatch jobs (a consumer without lane chains)
// are all delivered in emit order with the lane events written after them:
// by the promotions and chains as they are (a worker of that version still
// running in a rolling deploy), and after migration 0022 turned them into
// lane events.
func TestLaneJobsOfTheOldPath(t *testing.T) {
	t.Parallel()
	for _, migrate := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrate=%v", migrate), func(t *testing.T) {
			t.Parallel()
			b := setupLanes(t, events.OrderingBlock)
			ids := b.chainBacklog(t, "U", "a", "b")
			b.asPendingJobs(t, "U") // the old path's rows
			b.waitJob(t, ids[1], "pending")
			b.waitJob(t, ids[2], "pending")
			if migrate {
				applyMigration(t, b.db, 22)
				require.Zero(t, b.dispatchJobs(t, "U", "pending"))
				b.waitJob(t, ids[1], laneEvent)
				b.waitJob(t, ids[2], laneEvent)
			}
			ids = append(ids, b.emit(t, "U", "c"), b.emit(t, "U", "d"))
			b.waitJob(t, ids[3], laneEvent)
			b.waitJob(t, ids[4], laneEvent)

			close(b.gate)
			pgtest.WaitFor(t, 15*time.Second, "every event to be handled", func() (bool, error) {
				return b.rec.count(nil) == len(ids), nil
			})
			require.Equal(t, ids, b.handledOrder())
			pgtest.WaitFor(t, 15*time.Second, "the lane events to be recorded", func() (bool, error) {
				return b.laneEventCount(t, "U") == 0, nil
			})
		})
	}
}

// applyMigration runs tributary's migration version's up step again on
// db's schema, as the migrator does.
func applyMigration(t *testing.T, db *pgtest.DB, version int) {
	t.Helper()
	ctx := context.Background()
	m, err := migrations.New(db.Pool, migrations.Config{Schema: db.Schema})
	require.NoError(t, err)
	for _, mig := range m.All() {
		if mig.Version != version {
			continue
		}
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{db.Schema}.Sanitize()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, mig.Up)
			return err
		}))
		return
	}
	t.Fatalf("no migration %d", version)
}

// TestLaneRepairPromotesALaneEvent: a quiet lane whose head is a lane event
// with no job (a lost promotion) gets its job from the repair sweep, which
// before lane events took a head without a job for one deleted and moved
// the lane past it.
func TestLaneRepairPromotesALaneEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	lost, after := b.lostHead(t, "R", "after")
	b.ageLanes(t)
	require.Equal(t, 1, b.inst.Dispatcher.RepairLanes(ctx))
	b.waitHandled(t, after[0])
	require.Equal(t, []string{lost, after[0]}, b.handledOrder())
	close(b.gate)
}

// TestRemoveConsumerDeletesLaneEvents: removing a consumer deletes its lane
// events with its waiting dispatch jobs.
func TestRemoveConsumerDeletesLaneEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	b.chainBacklog(t, "D", "a", "b")
	res, err := events.RemoveConsumer(ctx, b.db.Pool, b.db.Schema, "lanes", events.RemoveConsumerOpts{Force: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Jobs, "the two lane events (the head runs)")
	require.Zero(t, b.laneEventCount(t, "D"))
	close(b.gate)
}

// TestLaneRepairTakesBackALostLaneEvent: a lane event at a quiet lane's head
// claimed by a chain that no longer runs (its process died, or this
// process lost it) is taken back and runs as a dispatch job; one claimed by
// a live process's chain is left alone.
func TestLaneRepairTakesBackALostLaneEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`INSERT INTO /*schema*/tributary_process (id, hostname, pid, queues, started_at, heartbeat_at)
        VALUES ('dead', 'h', 1, '{}', now() - interval '1 hour', now() - interval '1 hour'),
               ('live', 'h', 2, '{}', now(), now() + interval '1 hour')`))
	require.NoError(t, err)
	claim := func(agg, by string) string {
		lost, _ := b.lostHead(t, agg)
		// ... which a chain of process by claimed 30 s ago.
		_, err := b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_event_lane_event SET claimed_by = $2, claimed_at = now() - interval '30 seconds'
            WHERE aggregate_id = $1`), agg, by)
		require.NoError(t, err)
		return lost
	}
	deadLost := claim("X", "dead")
	ownLost := claim("Y", b.rt.ProcessID())
	liveLost := claim("Z", "live")
	b.ageLanes(t)
	b.inst.Dispatcher.RepairLanes(ctx)
	b.waitHandled(t, deadLost)
	b.waitHandled(t, ownLost)
	require.Equal(t, laneEventClaimed, b.laneEventState(t, liveLost), "a live chain's claim is left alone")
	require.ElementsMatch(t, []string{deadLost, ownLost}, b.handledOrder())
	close(b.gate)
}

// TestLaneChainClaimsLaneEventsAhead: a chain claims the run of lane events
// behind the head in one go (as many as its DispatchBatch allows), not one
// per step: while it runs one, the ones after it are claimed already.
func TestLaneChainClaimsLaneEventsAhead(t *testing.T) {
	t.Parallel()
	// A split after a minute: the head's handler waits for the gate, and
	// with the default 50 ms that wait alone would end the chain at once.
	b := setupLanesWith(t, events.ConsumerConfig{Ordering: events.OrderingBlock, RetryDelays: []time.Duration{10 * time.Millisecond},
		DispatchBatchSplitAfter: time.Minute})
	ids := b.chainBacklog(t, "A", "a", "hang", "b", "c")
	close(b.gate)
	b.waitHandled(t, ids[1])
	pgtest.WaitFor(t, 15*time.Second, "the lane events after the running one to be claimed", func() (bool, error) {
		return b.laneEventState(t, ids[3]) == laneEventClaimed && b.laneEventState(t, ids[4]) == laneEventClaimed, nil
	})
	require.Equal(t, laneEventClaimed, b.laneEventState(t, ids[2]), "the running one")
	require.Equal(t, []string{ids[0], ids[1]}, b.handledOrder())
}

// TestLaneRepairTakesBackAClaimedRun: the lane events a dead process's
// chain claimed ahead of its head are taken back with the head, so the lane
// runs on through them in order after one sweep instead of stalling for a
// sweep at each.
func TestLaneRepairTakesBackAClaimedRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`INSERT INTO /*schema*/tributary_process (id, hostname, pid, queues, started_at, heartbeat_at)
        VALUES ('dead', 'h', 1, '{}', now() - interval '1 hour', now() - interval '1 hour')`))
	require.NoError(t, err)
	lost, after := b.lostHead(t, "X", "after1", "after2")
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_event_lane_event SET claimed_by = 'dead', claimed_at = now() - interval '30 seconds'
        WHERE aggregate_id = 'X'`))
	require.NoError(t, err)
	b.ageLanes(t)
	b.inst.Dispatcher.RepairLanes(ctx)
	var stillClaimed int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_event_lane_event
        WHERE aggregate_id = 'X' AND claimed_by = 'dead'`)).Scan(&stillClaimed))
	require.Zero(t, stillClaimed, "the dead chain's claims after the head are taken back too")
	b.waitHandled(t, after[1])
	require.Equal(t, []string{lost, after[0], after[1]}, b.handledOrder())
	close(b.gate)
}
