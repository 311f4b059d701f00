package riverjob

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueueStateCount is the number of jobs of one queue in one state.
type QueueStateCount struct {
	Queue string
	State string
	Count int64
}

// CountByQueueState counts every job by queue and state, sorted by queue
// then state. It reads the whole table: dashboards on large tables use the
// capped read model instead (readmodel.go).
func CountByQueueState(ctx context.Context, db DBTX, schema string) ([]QueueStateCount, error) {
	rows, err := db.Query(ctx, q(schema, countByQueueStateSQL))
	if err != nil {
		return nil, fmt.Errorf("error counting jobs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QueueStateCount, error) {
		var c QueueStateCount
		err := r.Scan(&c.Queue, &c.State, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("error counting jobs: %w", err)
	}
	return out, nil
}

const countByQueueStateSQL = `
SELECT queue, state::text, count(*)
FROM /*schema*/river_job
GROUP BY queue, state
ORDER BY queue, state`
