package tributarytest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// RequireEmittedOpts narrow what RequireEmitted looks for; a zero field is
// not checked. A nil *RequireEmittedOpts checks the event type only.
type RequireEmittedOpts struct {
	// Schema holds tributary's tables. Defaults to the connection's
	// current schema: the test's schema on a DB's pool.
	Schema string
	// AggregateID is the events.Meta.AggregateID the event was emitted
	// with.
	AggregateID string
	// Version is the event type's version (events.EventOpts.Version).
	Version int
}

// RequireEmittedTx requires that exactly one event of eventType matching
// opts is in the outbox as tx sees it (so an event the transaction emitted
// and has not committed counts), whether or not it has been forwarded yet,
// and returns it; its Payload is the JSON emitted. Otherwise the test
// fails with the events found instead.
//
//	ev := tributarytest.RequireEmittedTx(ctx, t, tx, OrderPlaced.Name(), &tributarytest.RequireEmittedOpts{AggregateID: "o-1"})
func RequireEmittedTx(ctx context.Context, tb testing.TB, tx pgx.Tx, eventType string, opts *RequireEmittedOpts) *outbox.Event {
	tb.Helper()
	ev, err := requireEmitted(ctx, tx, eventType, opts)
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return ev
}

// RequireEmitted is RequireEmittedTx on what has been committed: it reads
// in a transaction of its own on pool.
func RequireEmitted(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, eventType string, opts *RequireEmittedOpts) *outbox.Event {
	tb.Helper()
	var ev *outbox.Event
	err := readTx(ctx, pool, func(tx pgx.Tx) (err error) {
		ev, err = requireEmitted(ctx, tx, eventType, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return ev
}

func requireEmitted(ctx context.Context, tx pgx.Tx, eventType string, opts *RequireEmittedOpts) (*outbox.Event, error) {
	if opts == nil {
		opts = &RequireEmittedOpts{}
	}
	schema, err := schemaOf(ctx, tx, opts.Schema)
	if err != nil {
		return nil, err
	}
	rows, err := events.ListOutbox(ctx, tx, schema, events.ListParams{Limit: listLimit})
	if err != nil {
		return nil, err
	}
	var ofType, matched []events.OutboxRow
	for i := len(rows) - 1; i >= 0; i-- { // ListOutbox returns newest first
		r := rows[i]
		if r.EventType != eventType {
			continue
		}
		ofType = append(ofType, r)
		if (opts.AggregateID == "" || r.AggregateID == opts.AggregateID) && (opts.Version == 0 || r.EventVersion == opts.Version) {
			matched = append(matched, r)
		}
	}
	switch {
	case len(ofType) == 0:
		return nil, fmt.Errorf("no event of type %q in schema %s; found instead %s", eventType, schema, describeEvents(rows, true))
	case len(matched) == 0:
		return nil, fmt.Errorf("no event of type %q with %s in schema %s; found instead %s", eventType, opts.describe(), schema, describeEvents(ofType, false))
	case len(matched) > 1:
		return nil, fmt.Errorf("%d events of type %q with %s in schema %s, want one (narrow the options): %s", len(matched), eventType, opts.describe(), schema, describeEvents(matched, false))
	}
	ev := matched[0].Event
	return &ev, nil
}

// describe names the options that are set, as a failure message shows them.
func (o *RequireEmittedOpts) describe() string {
	var parts []string
	if o.AggregateID != "" {
		parts = append(parts, fmt.Sprintf("aggregate id %q", o.AggregateID))
	}
	if o.Version != 0 {
		parts = append(parts, fmt.Sprintf("version %d", o.Version))
	}
	if len(parts) == 0 {
		return "any options"
	}
	return strings.Join(parts, ", ")
}

// describeEvents lists rows for a failure message; newestFirst says the
// order rows come in, so the message lists them oldest first either way.
func describeEvents(rows []events.OutboxRow, newestFirst bool) string {
	if len(rows) == 0 {
		return "no events at all"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d event(s):", len(rows))
	for i := range rows {
		if i == showLimit {
			fmt.Fprintf(&b, "\n\t... and %d more", len(rows)-showLimit)
			break
		}
		r := rows[i]
		if newestFirst {
			r = rows[len(rows)-1-i]
		}
		fmt.Fprintf(&b, "\n\tevent %s type %q version %d aggregate id %q status %s payload %s",
			r.ID, r.EventType, r.EventVersion, r.AggregateID, r.Status, r.Payload)
	}
	return b.String()
}
