package inbox_test

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
)

// An inbox of webhook calls: the HTTP handler writes each request's
// messages as one batch in its transaction and answers once it committed;
// the workers run the handler for each message, retrying a failed one on
// its own.
func Example() {
	run := func(ctx context.Context, rt *queue.Runtime, webhooks []inbox.Message) error {
		payments, err := inbox.New(inbox.Config{
			Name:  "payments",
			Queue: "inbox",
			HandleFunc: func(ctx context.Context, m *inbox.Message) error {
				var p struct {
					Amount int `json:"amount"`
				}
				if err := json.Unmarshal(m.Body, &p); err != nil {
					return inbox.Permanent(err) // retrying will not help
				}
				if p.Amount < 0 {
					return errors.New("the ledger refuses it for now") // retried later, alone
				}
				return nil // m.ID is the idempotency key: a crash can run a message twice
			},
		})
		if err != nil {
			return err
		}
		if err := inbox.Install(rt, payments); err != nil { // before rt starts
			return err
		}
		w, err := payments.Writer(rt.Schema())
		if err != nil {
			return err
		}
		if err := pgx.BeginFunc(ctx, rt.Pool(), func(tx pgx.Tx) error {
			_, err := w.InsertMessagesTx(ctx, tx, webhooks)
			return err
		}); err != nil {
			return err
		}
		return w.Wake(ctx, rt.Pool()) // after the commit
	}
	_ = run // needs a database, so it is compiled, not run
}
