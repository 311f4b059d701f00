package dashboard

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// Overview is the dashboard's landing page: the job read model and the
// throughput of the last minutes.
type Overview struct {
	queue.JobStats
	// Throughput counts finalized jobs per minute, oldest first; the last
	// point is the current, partial minute.
	Throughput []ThroughputPoint `json:"throughput"`
}

// Overview reads the overview. Its cost does not grow with the number of
// finalized jobs beyond the throughput window.
func (s *Server) Overview(ctx context.Context) (*Overview, error) {
	var ov *Overview
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		ov, err = s.overview(ctx, tx)
		return err
	})
	return ov, err
}

func (s *Server) overview(ctx context.Context, tx pgx.Tx) (*Overview, error) {
	st, err := s.jobStats(ctx, tx)
	if err != nil {
		return nil, err
	}
	ov := &Overview{JobStats: *st}
	minutes := int(s.cfg.ThroughputWindow / time.Minute)
	queriedFrom := s.throughput.uncachedFrom()
	perMinute, err := s.readThroughput(ctx, tx, minutes, queriedFrom)
	if err != nil {
		return nil, err
	}
	ov.Throughput = s.throughput.merge(ov.TakenAt, minutes, queriedFrom, perMinute)
	return ov, nil
}

// jobStats reads the job read model with the dashboard's count cap.
func (s *Server) jobStats(ctx context.Context, tx pgx.Tx) (*queue.JobStats, error) {
	return queue.ReadJobStats(ctx, tx, s.schema, queue.JobStatsParams{CountCap: s.cfg.CountCap})
}

// readTx runs fn in queue.ReadTx under the dashboard's query timeout.
func (s *Server) readTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	return queue.ReadTx(ctx, s.pool, s.cfg.QueryTimeout, fn)
}

// q qualifies a SQL constant with the dashboard's schema.
func (s *Server) q(sql string) string { return queue.Qualify(s.schema, sql) }
