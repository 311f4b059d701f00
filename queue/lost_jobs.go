package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// A live process can leave a job running in the database that it no
// longer runs: River's fetch committed but its answer never reached the
// process (the database restarted, or the session was terminated, between
// the commit and the reply), or the job's Work returned and its end has
// not been recorded yet. River's rescuer would make such a job available
// again after RescueStuckJobsAfter (an hour by default), and the liveness
// sweep leaves a live process's jobs alone, so until then the job holds
// what it holds: an event lane, a batch stream's flush. The runtime
// therefore looks, after every sweep (every heartbeat interval), at the
// jobs running under its own id that no Work of this runtime runs. A job
// seen so is a suspect; one still seen so lostJobAfter after it was first
// seen, whose attempt began more than lostJobAfter ago, is
// lost, and is made available again the way the liveness sweep does for
// a dead process (TestLostCompletionRunsAgain).
//
// The wait is what keeps a pending end from being overtaken. River's
// completer keeps a failed completion and tries it again (three tries
// with 1, 2 and 4 s between, each bounded by 10 s, then again with its
// next batch, every 250 ms), so while the database answers, an end in its
// hands lands within seconds. The suspects' clock runs only while this
// process reaches its database: a failed heartbeat or a failed look
// between two looks starts it again for every suspect
// (TestLostJobClockWaitsForTheDatabase). Only the sweep's look keeps
// state (the suspects, a handful); a Work's return writes nothing: a map
// of every return of the last minute, an earlier design, held a million
// entries at 35,000 jobs/s and cost the runtime a tenth of its rate in
// bench jobs.

// lostJobAfterMin is the shortest time a job must be seen not run by its
// process, with the database reachable throughout, before it is taken for
// lost: River's completer, which retries within seconds while the
// database answers, has had twice its longest try to record the end.
const lostJobAfterMin = 20 * time.Second

// lostJobAfter is how old a job's attempt must be, and how long ago the
// job must have been first seen not run by the process, before it counts
// as lost: four heartbeat intervals, at least lostJobAfterMin (20 s with
// the default liveness timeout of 30 s).
func (rt *Runtime) lostJobAfter() time.Duration {
	return max(4*rt.live.interval, lostJobAfterMin)
}

// notRunning returns those of ids not in River's Work in this process.
func (rt *Runtime) notRunning(ids []int64) []int64 {
	var out []int64
	for _, id := range ids {
		if !rt.inWork.has(id) {
			out = append(out, id)
		}
	}
	return out
}

// suspectsLost records the jobs seen now not run by the process (keeping
// when each was first seen, forgetting the others) and returns those first
// seen at least after ago. Only the sweep loop calls it.
func (rt *Runtime) suspectsLost(notRun []int64, now time.Time, after time.Duration) []int64 {
	next := make(map[int64]time.Time, len(notRun))
	var lost []int64
	for _, id := range notRun {
		first, ok := rt.lostSuspects[id]
		if !ok {
			first = now
		}
		next[id] = first
		if now.Sub(first) >= after {
			lost = append(lost, id)
		}
	}
	rt.lostSuspects = next
	return lost
}

// checkLostJobs runs from the liveness sweep loop; it looks at most once
// a heartbeat interval.
func (rt *Runtime) checkLostJobs(ctx context.Context) {
	if time.Since(rt.lostCheckedAt) < rt.live.interval {
		return
	}
	rt.lostCheckedAt = time.Now()
	if err := rt.rescueLostJobs(ctx); err != nil && ctx.Err() == nil {
		rt.cfg.Logger.WarnContext(ctx, "error looking for jobs running under this process that it no longer runs", "error", err)
	}
}

func (rt *Runtime) rescueLostJobs(ctx context.Context) error {
	after := rt.lostJobAfter()
	// A heartbeat that failed since the last look: the database was away
	// for this process, and so maybe for River's completer; every
	// suspect's clock starts again.
	if failures := rt.live.beatFailures.Load(); failures != rt.lostBeatFailures {
		rt.lostBeatFailures, rt.lostSuspects = failures, nil
	}
	ids, err := riverjob.RunningUnder(ctx, rt.pool, rt.cfg.Schema, rt.cfg.ID)
	if err != nil {
		rt.lostSuspects = nil
		return err
	}
	lost := rt.suspectsLost(rt.notRunning(ids), time.Now(), after)
	if len(lost) == 0 {
		return nil
	}
	proc := riverjob.Process{ID: rt.cfg.ID, Hostname: rt.live.hostname, PID: rt.live.pid}
	var rescued []riverjob.Rescued
	err = pgx.BeginFunc(ctx, rt.pool, func(tx pgx.Tx) error {
		rescued, err = riverjob.RescueLost(ctx, tx, rt.cfg.Schema, proc, lost, after,
			"the process found the job running under its name and no longer ran it (its end was not recorded, e.g. the database was away)")
		return err
	})
	if err != nil {
		return fmt.Errorf("error making %d lost jobs available again: %w", len(lost), err)
	}
	if len(rescued) == 0 {
		return nil
	}
	var queues []string
	for _, r := range rescued {
		if r.State == rivertype.JobStateAvailable { // riverjob.Wake drops repeats
			queues = append(queues, r.Queue)
		}
	}
	rt.cfg.Logger.ErrorContext(ctx, "made jobs available again that were running under this process, which no longer ran them: their end was not recorded",
		"jobs", len(rescued), "ids", lost, "queues", queues)
	rt.live.sweeper.wake(ctx, queues)
	return nil
}
