package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// SendReceiptArgs is the receipt job POST /orders enqueues with the order.
type SendReceiptArgs struct {
	OrderID string `json:"order_id"`
}

// Kind is the job kind.
func (SendReceiptArgs) Kind() string { return "orders.send_receipt" }

// SendReceiptWorker "sends" the receipt and records when.
type SendReceiptWorker struct {
	river.WorkerDefaults[SendReceiptArgs]
	st store
	db queue.DBTX
}

// Work marks the order's receipt as sent; a second run changes nothing.
func (w *SendReceiptWorker) Work(ctx context.Context, job *river.Job[SendReceiptArgs]) error {
	_, err := w.db.Exec(ctx, w.st.q(markReceiptSQL), job.Args.OrderID)
	return err
}

// The fulfilment workflow: reserve -> charge -> ship, and a refund that runs
// only when shipping failed. Its key is the order id, so an order has one.

// ReserveArgs reserves the order's stock.
type ReserveArgs struct {
	OrderID string `json:"order_id"`
}

// Kind is the job kind.
func (ReserveArgs) Kind() string { return "orders.reserve" }

// ChargeArgs charges the customer.
type ChargeArgs struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

// Kind is the job kind.
func (ChargeArgs) Kind() string { return "orders.charge" }

// ShipArgs hands the order to the warehouse.
type ShipArgs struct {
	OrderID string `json:"order_id"`
}

// Kind is the job kind.
func (ShipArgs) Kind() string { return "orders.ship" }

// RefundArgs refunds the charge: the compensation of a failed shipment.
type RefundArgs struct {
	OrderID string `json:"order_id"`
}

// Kind is the job kind.
func (RefundArgs) Kind() string { return "orders.refund" }

// Reservation, Payment and Shipment are the tasks' outputs.
type (
	Reservation struct {
		ReservationID string `json:"reservation_id"`
	}
	Payment struct {
		PaymentID string `json:"payment_id"`
		Cents     int64  `json:"cents"`
	}
	Shipment struct {
		ReservationID string `json:"reservation_id"`
		PaymentID     string `json:"payment_id"`
	}
)

type reserveWorker struct {
	river.WorkerDefaults[ReserveArgs]
}

func (reserveWorker) Work(ctx context.Context, job *river.Job[ReserveArgs]) error {
	return workflow.SetOutput(ctx, Reservation{ReservationID: "res-" + job.Args.OrderID})
}

type chargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
}

func (chargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	if _, err := workflow.Output[Reservation](ctx, "reserve"); err != nil {
		return err
	}
	return workflow.SetOutput(ctx, Payment{PaymentID: "pay-" + job.Args.OrderID, Cents: job.Args.Cents})
}

type shipWorker struct{ river.WorkerDefaults[ShipArgs] }

func (shipWorker) Work(ctx context.Context, job *river.Job[ShipArgs]) error {
	res, err := workflow.Output[Reservation](ctx, "reserve")
	if err != nil {
		return err
	}
	pay, err := workflow.Output[Payment](ctx, "charge")
	if err != nil {
		return err
	}
	return workflow.SetOutput(ctx, Shipment{ReservationID: res.ReservationID, PaymentID: pay.PaymentID})
}

type refundWorker struct {
	river.WorkerDefaults[RefundArgs]
}

func (refundWorker) Work(ctx context.Context, job *river.Job[RefundArgs]) error {
	pay, err := workflow.Output[Payment](ctx, "charge")
	if err != nil {
		return err
	}
	return workflow.SetOutput(ctx, map[string]string{"refunded": pay.PaymentID})
}

// fulfilment builds the order's workflow.
func fulfilment(o *Order) *workflow.Workflow {
	wf := workflow.New("fulfilment", &workflow.Opts{ID: "order-" + o.ID, OnConflict: workflow.ConflictReturnExisting})
	wf.Add("reserve", ReserveArgs{OrderID: o.ID}, nil)
	wf.Add("charge", ChargeArgs{OrderID: o.ID, Cents: o.Cents}, &workflow.TaskOpts{Deps: []string{"reserve"}})
	wf.Add("ship", ShipArgs{OrderID: o.ID}, &workflow.TaskOpts{Deps: []string{"charge"}})
	wf.Add("refund", RefundArgs{OrderID: o.ID}, &workflow.TaskOpts{RunIf: workflow.AnyFailed("ship")})
	return wf
}

// WarehouseMessage is what the warehouse service publishes on its queue.
type WarehouseMessage struct {
	OrderID  string `json:"order_id"`
	Status   string `json:"status"`
	Tracking string `json:"tracking,omitempty"`
}

// warehouseInsert applies one warehouse message in the inbound bridge's
// transaction: the order's status changes and order.shipped is emitted
// together, and the message is acked only after that commits. A message
// that can never apply (not JSON, an unknown status or order) is permanent:
// it goes to the queue's .failed queue with the reason.
func (s *Service) warehouseInsert(ctx context.Context, tx pgx.Tx, d *amqpbridge.Delivery) error {
	var m WarehouseMessage
	if err := json.Unmarshal(d.Body, &m); err != nil {
		return amqpbridge.Permanent(fmt.Errorf("warehouse message %q is not JSON: %w", d.MessageID, err))
	}
	if m.Status != StatusShipped {
		return amqpbridge.Permanent(fmt.Errorf("warehouse message %q: unknown status %q (want %q)", d.MessageID, m.Status, StatusShipped))
	}
	var exists bool
	if err := tx.QueryRow(ctx, s.st.q(orderExistsSQL), m.OrderID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return amqpbridge.Permanent(fmt.Errorf("warehouse message %q: %w: %q", d.MessageID, errOrderNotFound, m.OrderID))
	}
	tag, err := tx.Exec(ctx, s.st.q(updateStatusSQL), m.OrderID, m.Status)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return nil // already shipped: a redelivery
	}
	_, err = s.App.EmitTx(ctx, tx, orderShippedEvent, OrderShipped{OrderID: m.OrderID, Tracking: m.Tracking},
		events.Meta{AggregateID: m.OrderID, CausationID: d.MessageID, Actor: "warehouse"})
	if errors.Is(err, events.ErrUnknownEventType) {
		return amqpbridge.Permanent(err)
	}
	return err
}
