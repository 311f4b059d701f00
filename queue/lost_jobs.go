package queue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// A live process can leave a job running in the database that it no
// longer runs: the job's Work returned, and River's completer could not
// record the end because the database was away (a restart, a terminated
// session) longer than the completer retries. River's rescuer would make
// the job available again after RescueStuckJobsAfter (an hour by default),
// and the liveness sweep leaves a live process's jobs alone, so until then
// the job holds what it holds: an event lane, a batch stream's flush. The
// runtime therefore looks, every LivenessTimeout, at the jobs running under
// its own id that nothing in the process runs (no Work of this runtime, no
// holder: a lane chain running a job inside another's Work). A job seen so
// is a suspect; one still seen so lostJobAfter after it was first seen,
// whose attempt began more than lostJobAfter ago, is lost, and is made
// available again the way the liveness sweep does for a dead process
// (TestLostCompletionRunsAgain). Its Work returned before it was first
// seen, so its completion had lostJobAfter to land, well past River's
// completer's retries. Only the sweep's look keeps state (the suspects, a
// handful); a Work's return writes nothing: a map of every return of the
// last minute, the earlier design, held a million entries at 35,000 jobs/s
// and cost the runtime a tenth of its rate in bench jobs.

// lostJobAfterMin is the shortest time after its attempt began that a job
// may be taken for lost; River's completer gives a completion up well
// within it.
const lostJobAfterMin = time.Minute

// lostJobAfter is how old a job's attempt must be, and how long ago the
// job must have been first seen not run by the process, before it counts
// as lost: two liveness timeouts, at least a minute.
func (rt *Runtime) lostJobAfter() time.Duration {
	return max(2*rt.cfg.LivenessTimeout, lostJobAfterMin)
}

// AddJobHolder registers holds, which reports whether this process runs
// the job id outside River's Work (a lane chain runs the jobs it claims
// inside its head job's Work). The runtime never takes a held job for lost.
func (rt *Runtime) AddJobHolder(holds func(id int64) bool) {
	rt.jobsMu.Lock()
	defer rt.jobsMu.Unlock()
	rt.jobHolders = append(rt.jobHolders, holds)
}

// notRunning returns those of ids nothing in this process runs.
func (rt *Runtime) notRunning(ids []int64) []int64 {
	rt.jobsMu.Lock()
	running := make(map[int64]bool, len(rt.jobCancels))
	for job := range rt.jobCancels {
		running[job.ID] = true
	}
	holders := slices.Clone(rt.jobHolders)
	rt.jobsMu.Unlock()
	var out []int64
	for _, id := range ids {
		if running[id] || slices.ContainsFunc(holders, func(holds func(int64) bool) bool { return holds(id) }) {
			continue
		}
		out = append(out, id)
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
// a LivenessTimeout.
func (rt *Runtime) checkLostJobs(ctx context.Context) {
	if time.Since(rt.lostCheckedAt) < rt.cfg.LivenessTimeout {
		return
	}
	rt.lostCheckedAt = time.Now()
	if err := rt.rescueLostJobs(ctx); err != nil && ctx.Err() == nil {
		rt.cfg.Logger.WarnContext(ctx, "error looking for jobs running under this process that it no longer runs", "error", err)
	}
}

func (rt *Runtime) rescueLostJobs(ctx context.Context) error {
	after := rt.lostJobAfter()
	ids, err := riverjob.RunningUnder(ctx, rt.pool, rt.cfg.Schema, rt.cfg.ID)
	if err != nil {
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
