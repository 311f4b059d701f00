package queue

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// BenchmarkGuardJob is the runtime's guard around one job's Work, from
// River's job context on, against the bare call; the guard adds no context
// of its own:
// go test -run XXX -bench GuardJob ./queue/
func BenchmarkGuardJob(b *testing.B) {
	work := func(ctx context.Context) error { return nil }
	run := func(b *testing.B, call func(ctx context.Context, job *rivertype.JobRow)) {
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var id int64
			for pb.Next() {
				id++
				// As River's producer gives each job a context of its own.
				jobCtx, jobCancel := context.WithCancelCause(parent)
				call(jobCtx, &rivertype.JobRow{ID: id})
				jobCancel(nil)
			}
		})
	}
	b.Run("bare", func(b *testing.B) {
		run(b, func(ctx context.Context, job *rivertype.JobRow) { _ = work(ctx) })
	})
	b.Run("guard", func(b *testing.B) {
		lostCtx, lose := context.WithCancelCause(context.Background())
		defer lose(nil)
		rt := &Runtime{lostCtx: lostCtx, live: &liveness{base: time.Now(), fenceAfter: time.Hour}}
		rt.live.markBeat(time.Now())
		run(b, func(ctx context.Context, job *rivertype.JobRow) { _ = rt.guardJob(ctx, job, work) })
	})
}
