package dashboard

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config. Each is also documented on its field.
const (
	AddrDefault                    = "127.0.0.1:8080"
	CountCapDefault                = 10000
	PageSizeDefault                = 50
	PageSizeMax                    = 500
	ThroughputWindowDefault        = 15 * time.Minute
	QueryTimeoutDefault            = 5 * time.Second
	SessionTTLDefault              = 12 * time.Hour
	SessionIdleTimeoutDefault      = time.Hour
	PendingDispatchesMaxAgeDefault = 30 * time.Second
	MetricsCountsMaxAgeDefault     = 5 * time.Second
)

// Config configures a dashboard Server.
type Config struct {
	// Addr is where the HTTP service listens (InstallWorker, NewService).
	//
	// Defaults to 127.0.0.1:8080: loopback only.
	Addr string

	// Token enables actions: a request must carry it as
	// `Authorization: Bearer TOKEN`, or log in with it through the form.
	//
	// Defaults to empty: the dashboard is read-only and every action answers
	// 403.
	Token string

	// Logger for requests that fail and for the service lifecycle.
	//
	// Defaults to the client's logger.
	Logger *slog.Logger

	// CountCap bounds every count: a state or a queue is counted exactly up
	// to CountCap jobs (an index scan that stops there); above it the
	// planner's estimate is shown and marked approximate.
	//
	// Defaults to 10000.
	CountCap int

	// ThroughputWindow is how far back the overview's throughput chart goes,
	// in whole minutes.
	//
	// Defaults to 15 minutes.
	ThroughputWindow time.Duration

	// QueryTimeout bounds the database work of one request or scrape.
	//
	// Defaults to 5 seconds.
	QueryTimeout time.Duration

	// PendingDispatchesMaxAge is how old the event consumers' pending
	// dispatch counts on /metrics may get before a scrape starts a recount
	// in the background (the scrape itself serves the last count and its
	// age, tributary_event_consumer_pending_dispatches_age_seconds): the
	// count reads every unfinished dispatch job, too slow for every scrape
	// with a large backlog.
	//
	// Defaults to 30 seconds.
	PendingDispatchesMaxAge time.Duration

	// MetricsCountsMaxAge is how old the job and workflow counts on
	// /metrics (tributary_jobs, tributary_queue_jobs,
	// tributary_queue_oldest_available_age_seconds, tributary_workflows,
	// tributary_workflows_running_tasks*) may get before a scrape reads them
	// again in the background; the scrape itself serves the last read and
	// its age (tributary_dashboard_counts_age_seconds). Those capped counts
	// read up to the count cap of index entries per state, per queue and
	// per workflow status, most of a scrape on a large table; with it, one
	// read serves every scrape of the interval and a scrape waits for none
	// but the first. A scraper at a longer interval than this sees counts
	// one interval old.
	//
	// Defaults to 5 seconds.
	MetricsCountsMaxAge time.Duration

	// SessionTTL is how long a login through the form lasts at most, used
	// or not.
	//
	// Defaults to 12 hours.
	SessionTTL time.Duration

	// SessionIdleTimeout ends a login session that made no request for this
	// long (to within a minute: a session records its use at most once a
	// minute).
	//
	// Defaults to 1 hour.
	SessionIdleTimeout time.Duration

	// Registry receives the dashboard's collectors and is served on /metrics.
	//
	// Defaults to a new registry (never the global default one) with the Go
	// runtime and process collectors.
	Registry *prometheus.Registry

	// Collectors are registered on Registry as well: the AMQP bridge's and the
	// batch engine's counters, or an application's own.
	Collectors []prometheus.Collector

	// AMQP enables the AMQP queues page and DLQ replay. Nil shows the page
	// as not enabled.
	AMQP *AMQPConfig
}

// CheckAddr returns why addr cannot be the dashboard's listen address, or
// "" when it can. It only looks at the form (HOST:PORT, PORT a number or a
// service name), so it never waits on DNS; an address that is well formed
// but unusable (in use, not local) fails when the service starts.
func CheckAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want HOST:PORT such as 127.0.0.1:8080"
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("port %q is not a port number", port)
	}
	return ""
}

func (c Config) withDefaults(logger *slog.Logger) Config {
	c.Addr = cmp.Or(c.Addr, AddrDefault)
	c.Logger = cmp.Or(c.Logger, logger, slog.Default())
	c.CountCap = cmp.Or(c.CountCap, CountCapDefault)
	c.ThroughputWindow = cmp.Or(c.ThroughputWindow, ThroughputWindowDefault)
	if c.ThroughputWindow < time.Minute {
		c.ThroughputWindow = time.Minute
	}
	c.QueryTimeout = cmp.Or(c.QueryTimeout, QueryTimeoutDefault)
	c.PendingDispatchesMaxAge = cmp.Or(c.PendingDispatchesMaxAge, PendingDispatchesMaxAgeDefault)
	c.MetricsCountsMaxAge = cmp.Or(c.MetricsCountsMaxAge, MetricsCountsMaxAgeDefault)
	c.SessionTTL = cmp.Or(c.SessionTTL, SessionTTLDefault)
	c.SessionIdleTimeout = cmp.Or(c.SessionIdleTimeout, SessionIdleTimeoutDefault)
	return c
}
