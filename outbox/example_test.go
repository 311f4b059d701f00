package outbox_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/outbox"
)

// printPublisher is a destination of the outbox: it prints what it is
// handed. A real one sends to a broker or an API and returns nil only once
// the destination has the events durably.
type printPublisher struct {
	got chan<- outbox.Event
}

// Name is recorded with each row the publisher has accepted: keep it
// stable.
func (printPublisher) Name() string { return "print" }

func (p printPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	for _, ev := range evs {
		p.got <- ev
	}
	return nil // an error makes the forwarder retry the batch: dedupe by ev.ID
}

type TicketOpenedV1 struct {
	Subject string `json:"subject"`
}

var TicketOpened = events.Define[TicketOpenedV1]("ticket.opened", nil)

// An event emitted in a transaction reaches a Publisher of the user's own
// through the forwarder, once the transaction commits. The example runs on
// a fresh schema of the test database (TEST_DATABASE_URL, else
// DATABASE_URL), dropped at the end.
func Example_publisher() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	got := make(chan outbox.Event, 1)
	fwd, err := events.NewForwarder(pool, events.ForwarderConfig{Schema: schema, Publishers: []outbox.Publisher{printPublisher{got: got}}})
	if err != nil {
		panic(err)
	}
	if err := fwd.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = fwd.Stop(context.Background()) }()

	reg, err := events.NewRegistry(TicketOpened)
	if err != nil {
		panic(err)
	}
	em, err := events.NewEmitter(events.EmitterConfig{Schema: schema, Registry: reg, SourceService: "support"})
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := em.EmitTx(ctx, tx, TicketOpened, TicketOpenedV1{Subject: "printer on fire"}, events.Meta{AggregateID: "t-9"})
		return err
	})
	if err != nil {
		panic(err)
	}
	ev := <-got
	fmt.Println(ev.EventType, ev.EventVersion, ev.AggregateID, ev.SourceService, string(ev.Payload))
	// Output: ticket.opened 1 t-9 support {"subject": "printer on fire"}
}

// exampleSchema migrates a new schema on the test database and returns a
// func that drops it.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	schema := "example_" + strings.ToLower(rand.Text()[:10])
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := m.Up(ctx); err != nil {
		panic(fmt.Sprintf("this example needs PostgreSQL (set TEST_DATABASE_URL or DATABASE_URL): %v", err))
	}
	return pool, schema, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
