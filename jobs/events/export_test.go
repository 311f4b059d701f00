package events

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SelectClaim exposes the forwarder's claim query to the tests.
func (f *Forwarder) SelectClaim(ctx context.Context, tx pgx.Tx) (ids []string, candidates int, err error) {
	return f.selectClaim(ctx, tx, time.Now(), nil)
}
