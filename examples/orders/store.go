package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// The example's own table lives in tributary's schema, so one
// TRIBUTARY_SCHEMA (and one test schema) holds everything, and the clean-up
// target below can name it.
const (
	// migrateSQL is the example's migration: idempotent, run at start after
	// tributary's own. A real service would use its migration tool.
	migrateSQL = `
CREATE TABLE IF NOT EXISTS /*schema*/orders (
	id              text PRIMARY KEY,
	customer        text NOT NULL,
	cents           bigint NOT NULL,
	status          text NOT NULL DEFAULT 'placed',
	receipt_sent_at timestamptz,
	created_at      timestamptz NOT NULL DEFAULT now(),
	updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS orders_shipped_updated_at ON /*schema*/orders (updated_at) WHERE status = 'shipped';
CREATE TABLE IF NOT EXISTS /*schema*/order_consumer_log (
	seq        bigserial PRIMARY KEY,
	consumer   text NOT NULL,
	event_id   text NOT NULL,
	event_type text NOT NULL,
	order_id   text NOT NULL,
	UNIQUE (consumer, event_id)
);`

	insertOrderSQL = `INSERT INTO /*schema*/orders (id, customer, cents) VALUES ($1, $2, $3) RETURNING created_at`

	selectOrderSQL = `SELECT id, customer, cents, status, receipt_sent_at, created_at, updated_at
FROM /*schema*/orders WHERE id = $1`

	// updateStatusSQL moves an order forward; a status it already has is no
	// change (a redelivered warehouse message).
	updateStatusSQL = `UPDATE /*schema*/orders SET status = $2, updated_at = now()
WHERE id = $1 AND status <> $2`

	orderExistsSQL = `SELECT EXISTS (SELECT 1 FROM /*schema*/orders WHERE id = $1)`

	markReceiptSQL = `UPDATE /*schema*/orders SET receipt_sent_at = coalesce(receipt_sent_at, now()) WHERE id = $1`

	// logConsumedSQL records that a consumer handled an event, once per
	// event: the event id is the idempotency key of at-least-once delivery.
	logConsumedSQL = `INSERT INTO /*schema*/order_consumer_log (consumer, event_id, event_type, order_id)
VALUES ($1, $2, $3, $4) ON CONFLICT (consumer, event_id) DO NOTHING`

	selectConsumedSQL = `SELECT consumer, event_type FROM /*schema*/order_consumer_log
WHERE order_id = $1 ORDER BY seq`
)

// Order statuses.
const (
	StatusPlaced  = "placed"
	StatusShipped = "shipped"
)

// Order is a row of the orders table, as GET /orders/{id} returns it.
type Order struct {
	ID            string     `json:"id"`
	Customer      string     `json:"customer"`
	Cents         int64      `json:"cents"`
	Status        string     `json:"status"`
	ReceiptSentAt *time.Time `json:"receipt_sent_at,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// errOrderNotFound is returned for an order id with no row.
var errOrderNotFound = errors.New("order not found")

// store runs the example's statements on its schema.
type store struct {
	schema string
}

func (s store) q(sql string) string { return queue.Qualify(s.schema, sql) }

func (s store) migrate(ctx context.Context, db queue.DBTX) error {
	if _, err := db.Exec(ctx, s.q(migrateSQL)); err != nil {
		return fmt.Errorf("error migrating the orders tables: %w", err)
	}
	return nil
}

func (s store) get(ctx context.Context, db queue.DBTX, id string) (*Order, error) {
	var o Order
	err := db.QueryRow(ctx, s.q(selectOrderSQL), id).Scan(&o.ID, &o.Customer, &o.Cents, &o.Status, &o.ReceiptSentAt, &o.CreatedAt, &o.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errOrderNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("error reading order %q: %w", id, err)
	}
	return &o, nil
}

// consumed lists "consumer:event_type" in the order the handlers ran.
func (s store) consumed(ctx context.Context, db queue.DBTX, orderID string) ([]string, error) {
	rows, err := db.Query(ctx, s.q(selectConsumedSQL), orderID)
	if err != nil {
		return nil, fmt.Errorf("error reading the consumer log of order %q: %w", orderID, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var c, t string
		err := r.Scan(&c, &t)
		return c + ":" + t, err
	})
}

// shippedCleanup is the example's own clean-up target: shipped orders are
// deleted a while after they shipped (ORDERS_SHIPPED_RETENTION), on the same
// cron schedule machinery as tributary's own tables.
func shippedCleanup(retention time.Duration) queue.CleanupTarget {
	return queue.CleanupTarget{
		Name:      "shipped_orders",
		Table:     "orders",
		Where:     "status = 'shipped' AND updated_at < $1",
		OrderBy:   "updated_at",
		Retention: retention,
	}
}
