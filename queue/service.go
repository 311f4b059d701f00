package queue

import "context"

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
	// context derives its own.
	Start(ctx context.Context) error

	// Stop stops the service and waits for its background work to finish. The
	// context carries the shutdown deadline: when it is done the service must
	// give up waiting, abandon what is left (so it can be retried later) and
	// return.
	Stop(ctx context.Context) error
}
