package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Machine is what a benchmark's figures depend on besides the code: the
// load average and how long one round trip to Postgres takes. The second
// differs between days of the same VM by several times (context switches
// and loopback on a busy host), and every figure of a path that waits on
// Postgres (a commit-to-handler latency, a rate at small batches) moves
// with it, so each run prints it beside its figures.
type Machine struct {
	LoadAvg string        `json:"load_avg"`
	RTT     time.Duration `json:"postgres_round_trip_ns"`
}

// machineProbes is how many SELECT 1 the round trip is the median of.
const machineProbes = 200

// ProbeMachine reads the load average and times machineProbes round trips
// (SELECT 1 on one connection of pool), returning their median.
func ProbeMachine(ctx context.Context, pool *pgxpool.Pool) (Machine, error) {
	m := Machine{LoadAvg: loadAvg()}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return m, err
	}
	defer conn.Release()
	took := make([]time.Duration, machineProbes)
	var one int
	for i := range took {
		start := time.Now()
		if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return m, fmt.Errorf("error timing a round trip to Postgres: %w", err)
		}
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	m.RTT = took[len(took)/2]
	return m, nil
}

// String is the line a benchmark prints first.
func (m Machine) String() string {
	return fmt.Sprintf("machine: load average %s, Postgres round trip (SELECT 1, median of %d) %.0f µs",
		m.LoadAvg, machineProbes, float64(m.RTT)/float64(time.Microsecond))
}
