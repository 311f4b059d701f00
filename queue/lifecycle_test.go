package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/queue"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()

	// held starts a lifecycle whose one background function ignores
	// Stopping and returns once release is closed.
	type testBundle struct {
		run     *queue.Run
		release chan struct{}
	}
	held := func(t *testing.T, l *queue.Lifecycle) *testBundle {
		t.Helper()
		b := &testBundle{release: make(chan struct{})}
		require.NoError(t, l.Start(context.Background(), "svc", func(r *queue.Run) error {
			b.run = r
			r.Go(func() { <-b.release })
			return nil
		}))
		return b
	}

	t.Run("StopEndsStoppingWaitsThenEndsContext", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		var run *queue.Run
		release := make(chan struct{})
		require.NoError(t, l.Start(context.Background(), "svc", func(r *queue.Run) error {
			run = r
			r.Go(func() {
				<-r.Stopping().Done()
				<-release
			})
			return nil
		}))
		require.True(t, l.Running())
		stopped := make(chan error, 1)
		go func() {
			_, err := l.Stop(context.Background())
			stopped <- err
		}()
		<-run.Stopping().Done()
		select {
		case <-stopped:
			t.Fatal("Stop returned before the background work")
		default:
		}
		require.NoError(t, run.Context().Err(), "Context lives while the work winds down")
		close(release)
		require.NoError(t, <-stopped)
		require.Error(t, run.Context().Err())
		require.False(t, l.Running())
	})

	t.Run("SecondStartRefused", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		calls := 0
		start := func(*queue.Run) error { calls++; return nil }
		require.NoError(t, l.Start(context.Background(), "svc", start))
		err := l.Start(context.Background(), "svc", start)
		require.ErrorIs(t, err, queue.ErrAlreadyStarted)
		require.EqualError(t, err, "svc: already started")
		require.Equal(t, 1, calls)
		stopped, err := l.Stop(context.Background())
		require.True(t, stopped)
		require.NoError(t, err)
		require.NoError(t, l.Start(context.Background(), "svc", start), "a stopped service starts again")
		require.Equal(t, 2, calls)
	})

	t.Run("StopWithoutStart", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		stopped, err := l.Stop(context.Background())
		require.False(t, stopped)
		require.NoError(t, err)
	})

	t.Run("FailedStartStaysStopped", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		boom := errors.New("boom")
		ended := false
		err := l.Start(context.Background(), "svc", func(r *queue.Run) error {
			r.Go(func() { <-r.Context().Done(); ended = true })
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.True(t, ended, "Start waited for what the failed start began")
		require.False(t, l.Running(), "a failed start leaves nothing to stop")
	})

	t.Run("StartContextEndDoesNotStop", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		ctx, cancel := context.WithCancel(context.Background())
		var run *queue.Run
		require.NoError(t, l.Start(ctx, "svc", func(r *queue.Run) error { run = r; return nil }))
		cancel()
		require.NoError(t, run.Stopping().Err())
		require.NoError(t, run.Context().Err())
		_, err := l.Stop(context.Background())
		require.NoError(t, err)
	})

	t.Run("DeadlineCancelsContextAndWaitsGrace", func(t *testing.T) {
		t.Parallel()
		l := queue.Lifecycle{Grace: time.Minute}
		require.NoError(t, l.Start(context.Background(), "svc", func(r *queue.Run) error {
			r.Go(func() { <-r.Context().Done() }) // ignores Stopping: only the hard end stops it
			return nil
		}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		stopped, err := l.Stop(ctx)
		require.True(t, stopped)
		require.ErrorIs(t, err, context.Canceled)
		require.EqualError(t, err, "svc did not stop in time: context canceled")
		require.False(t, l.Running())
	})

	t.Run("DeadlinePastGraceLeavesWorkBehind", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		defer close(held(t, &l).release) // ignores both contexts
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := l.Stop(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "left work behind")
	})

	t.Run("OnStopRunsFirstAndReportsErrors", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		shut := errors.New("shutdown failed")
		var order []string
		serving := make(chan struct{})
		require.NoError(t, l.Start(context.Background(), "svc", func(r *queue.Run) error {
			r.Go(func() { <-serving; order = append(order, "work ended") })
			r.OnStop(func(ctx context.Context) error {
				require.Error(t, r.Stopping().Err())
				order = append(order, "on stop")
				close(serving)
				return shut
			})
			return nil
		}))
		_, err := l.Stop(context.Background())
		require.ErrorIs(t, err, shut)
		require.Equal(t, []string{"on stop", "work ended"}, order)
	})

	t.Run("ConcurrentStopWaitsForTheFirst", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		b := held(t, &l)
		first := make(chan bool, 1)
		go func() {
			stopped, _ := l.Stop(context.Background())
			first <- stopped
		}()
		<-b.run.Stopping().Done()
		second := make(chan bool, 1)
		go func() {
			stopped, _ := l.Stop(context.Background())
			second <- stopped
		}()
		select {
		case <-second:
			t.Fatal("the second Stop returned while the first was still stopping")
		case <-time.After(50 * time.Millisecond): // a bounded look for a wrong early return, not synchronisation
		}
		close(b.release)
		require.True(t, <-first)
		require.False(t, <-second)
	})

	t.Run("StartDuringStopWaits", func(t *testing.T) {
		t.Parallel()
		var l queue.Lifecycle
		b := held(t, &l)
		go func() { _, _ = l.Stop(context.Background()) }()
		<-b.run.Stopping().Done()
		started := make(chan error, 1)
		go func() {
			started <- l.Start(context.Background(), "svc", func(*queue.Run) error {
				if b.run.Context().Err() == nil {
					return errors.New("started while the previous run was still stopping")
				}
				return nil
			})
		}()
		close(b.release)
		require.NoError(t, <-started)
	})
}
