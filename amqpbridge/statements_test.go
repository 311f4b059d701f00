package amqpbridge

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// noBatchDB is a database that cannot send a pgx.Batch.
type noBatchDB struct{}

func (noBatchDB) Begin(context.Context) (pgx.Tx, error) { return nil, nil }
func (noBatchDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, nil
}
func (noBatchDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, nil }
func (noBatchDB) QueryRow(context.Context, string, ...any) pgx.Row        { return nil }

// TestNewInboundInsertFunctions: an inbound bridge takes exactly one of
// Insert and InsertStatements, and InsertStatements only with a database
// that sends a pgx.Batch; each refusal names what is wrong.
func TestNewInboundInsertFunctions(t *testing.T) {
	t.Parallel()
	insert := func(context.Context, pgx.Tx, []*Delivery) error { return nil }
	statements := func(context.Context, *Statements, []*Delivery) error { return nil }
	cfg := Config{URL: URLDefault}
	for name, ic := range map[string]InboundConfig{
		"neither": {Queue: "q", DB: noBatchDB{}},
		"both":    {Queue: "q", DB: noBatchDB{}, Insert: insert, InsertStatements: statements},
	} {
		_, err := NewInbound(cfg, ic)
		require.ErrorContains(t, err, `inbound bridge for queue "q" needs a database and one insert function (Insert or InsertStatements)`, name)
	}
	_, err := NewInbound(cfg, InboundConfig{Queue: "q", DB: noBatchDB{}, InsertStatements: statements})
	require.ErrorContains(t, err, `InsertStatements needs a database that sends a pgx.Batch (a *pgxpool.Pool), not a amqpbridge.noBatchDB`)
	_, err = NewInbound(cfg, InboundConfig{Queue: "q", DB: noBatchDB{}, Insert: insert})
	require.NoError(t, err)
}

// TestInboundDefaultsWithStatements: with InsertStatements the inbound
// bridge inserts two batches at once by default (of half the prefetch
// each), four with Insert; a concurrency that is set is kept either way.
func TestInboundDefaultsWithStatements(t *testing.T) {
	t.Parallel()
	statements := func(context.Context, *Statements, []*Delivery) error { return nil }
	ic := InboundConfig{InsertStatements: statements}.WithDefaults()
	require.Equal(t, [3]int{InboundPrefetchDefault, 2, 500}, [3]int{ic.Prefetch, ic.Concurrency, ic.BatchSize})
	ic = InboundConfig{}.WithDefaults()
	require.Equal(t, [3]int{InboundPrefetchDefault, 4, 250}, [3]int{ic.Prefetch, ic.Concurrency, ic.BatchSize})
	ic = InboundConfig{InsertStatements: statements, Concurrency: 3}.WithDefaults()
	require.Equal(t, 3, ic.Concurrency)
}
