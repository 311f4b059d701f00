package queue

import (
	"context"
	"errors"
)

// ErrAlreadyStarted is what Start returns, wrapped with the service's name,
// for a service that is running: a second Start never starts a second copy
// of its work.
var ErrAlreadyStarted = errors.New("already started")

// Service is the lifecycle shape shared by everything that runs inside a
// worker process: the River client, forwarders, schedulers, AMQP consumers,
// the HTTP server. The Runtime starts services in the order they were added
// and stops them in reverse order, so a service may rely on everything added
// before it while it runs.
type Service interface {
	// Name identifies the service in logs and errors.
	Name() string

	// Start starts the service's background work and returns once the service
	// is ready. It must not block for the service's whole lifetime. The
	// context is only for the start itself; a service that needs a long-lived
	// context derives its own. Start on a running service returns an error
	// wrapping ErrAlreadyStarted.
	Start(ctx context.Context) error

	// Stop stops the service and waits for its background work to finish. The
	// context carries the shutdown deadline: when it is done the service must
	// give up waiting, abandon what is left (so it can be retried later) and
	// return. Stop on a service that is not running returns nil.
	//
	// Lifecycle implements these rules; internal/servicetest checks them.
	Stop(ctx context.Context) error
}
