package scheduler

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestFailoverSIGKILL runs two real worker processes on one @every 1s
// schedule for 30 seconds and SIGKILLs the one that fired last, midway. The
// fire times must form a gapless one-second chain with no duplicates, and
// their number must be the expected count ±1.
//
// The unique index on (schedule, fire time) is dropped first, so what is
// shown is the row-lock protocol itself, not the index catching it.
func TestFailoverSIGKILL(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), db.Q(`DROP INDEX /*schema*/river_job_tributary_schedule_fire`))
	require.NoError(t, err)

	bin := filepath.Join(t.TempDir(), "schedproc")
	build := exec.Command("go", "build", "-o", bin, "./internal/schedproc")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run(), "building the test worker")

	type proc struct {
		id  string
		cmd *exec.Cmd
	}
	startProc := func(id string) *proc {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "TRIBUTARY_SCHEMA="+db.Schema, "SCHEDPROC_ID="+id)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		if testing.Verbose() {
			cmd.Stderr = os.Stderr
		}
		require.NoError(t, cmd.Start())
		p := &proc{id: id, cmd: cmd}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "process %s did not start", id)
		require.Equal(t, "ready", strings.TrimSpace(line))
		return p
	}
	procs := map[string]*proc{"A": startProc("A"), "B": startProc("B")}
	started := time.Now()

	// Midway: kill whichever process inserted the latest job.
	pgtest.WaitFor(t, 30*time.Second, "15 fires", func() (bool, error) { return len(firedJobs(t, db, "tick")) >= 15, nil })
	jobs := firedJobs(t, db, "tick")
	victim := procs[jobs[len(jobs)-1].FiredBy]
	require.NotNil(t, victim, "latest job fired by %q", jobs[len(jobs)-1].FiredBy)
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	_ = victim.cmd.Wait()
	survivor := procs[map[string]string{"A": "B", "B": "A"}[victim.id]]
	t.Logf("killed %s after %s with %d jobs fired", victim.id, killedAt.Sub(started).Round(time.Millisecond), len(jobs))

	// Run on until 30 s in all, then stop the survivor cleanly.
	pgtest.WaitFor(t, 40*time.Second, "30 s of fires", func() (bool, error) {
		jobs := firedJobs(t, db, "tick")
		return len(jobs) > 0 && jobs[len(jobs)-1].FireAt.Sub(jobs[0].FireAt) >= 29*time.Second, nil
	})
	require.NoError(t, survivor.cmd.Process.Signal(syscall.SIGTERM))
	stoppedAt := time.Now()
	require.NoError(t, survivor.cmd.Wait(), "survivor exits 0 on SIGTERM")

	jobs = firedJobs(t, db, "tick")
	first, last := jobs[0].FireAt, jobs[len(jobs)-1].FireAt

	var dups int
	err = db.Pool.QueryRow(context.Background(), db.Q(`
SELECT count(*) FROM (SELECT 1 FROM /*schema*/river_job WHERE metadata->>'tributary_schedule' = 'tick'
GROUP BY metadata->>'tributary_fire_at' HAVING count(*) > 1) d`)).Scan(&dups)
	require.NoError(t, err)
	require.Zero(t, dups, "fire times with more than one job")

	for i := 1; i < len(jobs); i++ {
		require.Equal(t, time.Second, jobs[i].FireAt.Sub(jobs[i-1].FireAt), "gap or duplicate between %s and %s", jobs[i-1].FireAt, jobs[i].FireAt)
	}
	// Every whole second from the first fire to the survivor's stop fired
	// once; ±1 for the fire that may or may not have happened as it stopped.
	expected := int(stoppedAt.Sub(first)/time.Second) + 1
	require.InDelta(t, expected, len(jobs), 1, "fired %d jobs from %s to %s, expected %d", len(jobs), first, last, expected)

	var afterKill int
	for _, j := range jobs {
		if j.FiredBy == survivor.id && j.FireAt.After(killedAt) {
			afterKill++
		}
	}
	require.Positive(t, afterKill, "the survivor took over")
	byProc := map[string]int{}
	for _, j := range jobs {
		byProc[j.FiredBy]++
	}
	t.Logf("%d jobs over %s, expected %d; fired by %v", len(jobs), last.Sub(first), expected, fmt.Sprint(byProc))
}
