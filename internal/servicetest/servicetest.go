// Package servicetest is the lifecycle contract every queue.Service keeps,
// as one suite that each service's package runs against its own services:
//
//	func TestServiceContract(t *testing.T) {
//		t.Parallel()
//		servicetest.Run(t, "events.Forwarder", func(t *testing.T) (queue.Service, error) {
//			return events.NewForwarder(pgtest.New(t).Pool, events.ForwarderConfig{...})
//		})
//	}
//
// TestEveryServiceRunsTheContract (in this package) finds every type with a
// Stop(ctx) method in the module and fails for one whose package does not
// call Run with the type's name.
package servicetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/queue"
)

// stopBound is how long a Stop may take in the contract: the services run
// no work of their own in it, so anything near the bound is a hang.
const stopBound = 15 * time.Second

// Run runs the lifecycle contract against services built by newService,
// one fresh service per subtest. typeName is the service's Go type name
// with its package name ("events.Forwarder"; TestEveryServiceRunsTheContract
// looks for it). newService registers whatever clean-up its service needs;
// the service it returns is not started.
func Run(t *testing.T, typeName string, build func(t *testing.T) (queue.Service, error)) {
	t.Helper()
	newService := func(t *testing.T) queue.Service {
		svc, err := build(t)
		require.NoError(t, err)
		return svc
	}
	t.Run(typeName+"Contract", func(t *testing.T) {
		t.Parallel()

		t.Run("StartStop", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NotEmpty(t, svc.Name())
			require.NoError(t, svc.Start(ctxFor(t)))
			require.NoError(t, stop(t, svc, ctxFor(t)))
		})

		t.Run("StopWithoutStart", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NoError(t, stop(t, svc, ctxFor(t)))
		})

		t.Run("DoubleStart", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NoError(t, svc.Start(ctxFor(t)))
			err := svc.Start(ctxFor(t))
			require.ErrorIs(t, err, queue.ErrAlreadyStarted, "a second Start must be refused, not start the service again")
			require.Contains(t, err.Error(), svc.Name(), "the error names the service")
			require.NoError(t, stop(t, svc, ctxFor(t)))
		})

		t.Run("StopTwice", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NoError(t, svc.Start(ctxFor(t)))
			require.NoError(t, stop(t, svc, ctxFor(t)))
			require.NoError(t, stop(t, svc, ctxFor(t)), "a second Stop finds nothing to stop")
		})

		t.Run("ConcurrentStops", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NoError(t, svc.Start(ctxFor(t)))
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Go(func() { errs[i] = stop(t, svc, ctxFor(t)) })
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
		})

		t.Run("StopUnderCancelledContext", func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			require.NoError(t, svc.Start(ctxFor(t)))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			// The service may have stopped in time or given up waiting; if
			// it gave up, the error says why.
			if err := stop(t, svc, ctx); err != nil {
				require.ErrorIs(t, err, context.Canceled)
			}
			require.NoError(t, stop(t, svc, ctxFor(t)), "after a stop under a cancelled context the service is stopped")
		})
	})
}

// ctxFor is a start or stop context that ends with the test.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), stopBound)
	t.Cleanup(cancel)
	return ctx
}

// stop stops svc, failing the test when Stop does not return within
// stopBound: a Stop that ignores its context hangs the process it runs in.
func stop(t *testing.T, svc queue.Service, ctx context.Context) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- svc.Stop(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(stopBound + 5*time.Second):
		require.FailNow(t, "Stop did not return", "%s: Stop hung past its context", svc.Name())
		return nil
	}
}
