package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lifecycle is the start and stop bookkeeping a Service keeps, written once
// so that every service answers a second Start, a Stop without a Start, two
// Stops at once and a Stop past its deadline the same way. A service holds
// one as a field and calls it from its own Start and Stop:
//
//	func (t *Ticker) Start(ctx context.Context) error {
//		return t.life.Start(ctx, t.Name(), func(run *queue.Run) error {
//			run.Go(func() { t.loop(run.Stopping()) })
//			return nil
//		})
//	}
//
//	func (t *Ticker) Stop(ctx context.Context) error {
//		_, err := t.life.Stop(ctx)
//		return err
//	}
//
// The zero value is ready to use. A stopped service may be started again.
type Lifecycle struct {
	// Grace is how long Stop waits for the background work once Stop's
	// context ended and Run.Context was cancelled, before it returns and
	// leaves that work behind. Services whose work may not notice the
	// cancellation at once (a handler, a hand-off) set it.
	//
	// Defaults to 0: Stop returns when its context ends.
	Grace time.Duration

	mu       sync.Mutex
	name     string
	run      *Run
	stopping chan struct{} // closed when the Stop in progress returns
}

// Run is one start of a service: the contexts its background work runs
// under, the goroutines Stop waits for and what Stop does first.
type Run struct {
	stopping context.Context
	stop     context.CancelFunc
	ctx      context.Context
	cancel   context.CancelFunc
	onStop   []func(ctx context.Context) error

	mu     sync.Mutex
	active int           // functions given to Go that have not returned
	ending bool          // Stop began, or the start failed
	idle   chan struct{} // closed once ending and no function is active
}

// Stopping ends when Stop begins: background loops stop taking new work
// when it ends. It carries the values of the context given to Start, but
// the end of that context does not end it.
func (r *Run) Stopping() context.Context { return r.stopping }

// Context ends once Stop is done waiting: when the functions given to Go
// returned, or when Stop's own context ended first, which tells work still
// in flight to give up (a service that abandons work makes it retriable).
// It carries the values of the context given to Start, but the end of that
// context does not end it.
func (r *Run) Context() context.Context { return r.ctx }

// Go runs fn in a goroutine that Stop waits for. Call it from the start
// function only.
func (r *Run) Go(fn func()) {
	r.mu.Lock()
	r.active++
	r.mu.Unlock()
	go func() {
		defer r.exit()
		fn()
	}()
}

func (r *Run) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active--
	if r.active == 0 && r.ending {
		close(r.idle)
	}
}

// end marks the run as ending and returns a channel closed once no
// function given to Go is running; it is closed already when none is.
func (r *Run) end() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ending {
		r.ending = true
		if r.active == 0 {
			close(r.idle)
		}
	}
	return r.idle
}

// OnStop registers fn to run when Stop begins, after Stopping ended and
// before Stop waits for the functions given to Go: for a stop that is a
// call (shutting a server down) rather than the end of a loop. fn gets
// Stop's context; its error is part of Stop's result. Call it from the
// start function only.
func (r *Run) OnStop(fn func(ctx context.Context) error) { r.onStop = append(r.onStop, fn) }

// Start runs start with a new Run and marks the service running. name is
// the service's name, for errors. A second Start while the service runs
// returns an error wrapping ErrAlreadyStarted and changes nothing. If start
// fails, the run's contexts are cancelled, Start waits for what start
// began with Go, and the service stays stopped. Start holds the
// lifecycle's lock while start runs, so a Stop that comes meanwhile waits
// for the start to finish and then stops what it started; a Start during a
// Stop waits for the Stop (or for ctx) first.
func (l *Lifecycle) Start(ctx context.Context, name string, start func(run *Run) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.stopping != nil {
		stopping := l.stopping
		l.mu.Unlock()
		select {
		case <-stopping:
		case <-ctx.Done():
			l.mu.Lock()
			return fmt.Errorf("%s: waiting for its stop to finish: %w", name, ctx.Err())
		}
		l.mu.Lock()
	}
	if l.run != nil {
		return fmt.Errorf("%s: %w", name, ErrAlreadyStarted)
	}
	base := context.WithoutCancel(ctx)
	r := &Run{idle: make(chan struct{})}
	r.stopping, r.stop = context.WithCancel(base)
	r.ctx, r.cancel = context.WithCancel(base)
	if err := start(r); err != nil {
		r.stop()
		r.cancel()
		<-r.end()
		return err
	}
	l.name, l.run = name, r
	return nil
}

// Running reports whether the service was started and not stopped since.
func (l *Lifecycle) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.run != nil
}

// Stop stops the running service: Stopping ends, the OnStop functions run,
// and Stop waits for the functions given to Go until ctx ends; then
// Context ends. It reports whether the service was running (false: nothing
// was done, and the error is nil). When ctx ends first, Stop waits up to
// Grace more and returns an error wrapping ctx's error; the service counts
// as stopped either way. A Stop while another one runs waits for that one
// (or for its own ctx) and reports false.
func (l *Lifecycle) Stop(ctx context.Context) (bool, error) {
	l.mu.Lock()
	r, name, inProgress := l.run, l.name, l.stopping
	if r != nil {
		l.run = nil
		l.stopping = make(chan struct{})
		defer func() {
			l.mu.Lock()
			close(l.stopping)
			l.stopping = nil
			l.mu.Unlock()
		}()
	}
	l.mu.Unlock()
	if r == nil {
		if inProgress != nil {
			select {
			case <-inProgress:
			case <-ctx.Done():
			}
		}
		return false, nil
	}
	r.stop()
	var errs []error
	for _, fn := range r.onStop {
		if err := fn(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	done := r.end()
	select {
	case <-done:
	default:
		select {
		case <-done:
		case <-ctx.Done():
			r.cancel()
			if !l.waitGrace(done) {
				errs = append(errs, fmt.Errorf("%s did not stop in time and left work behind: %w", name, ctx.Err()))
			} else {
				errs = append(errs, fmt.Errorf("%s did not stop in time: %w", name, ctx.Err()))
			}
		}
	}
	r.cancel()
	return true, errors.Join(errs...)
}

// waitGrace waits up to Grace for done and reports whether it came.
func (l *Lifecycle) waitGrace(done <-chan struct{}) bool {
	if l.Grace <= 0 {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(l.Grace)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
