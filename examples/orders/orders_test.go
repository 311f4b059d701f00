package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs for blob.OpenBucket

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/scheduler"
)

func TestMain(m *testing.M) {
	// The S3 sink reads credentials the usual way, from the environment;
	// never from this machine's files or an instance metadata service.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "orders-test",
		"AWS_SECRET_ACCESS_KEY":       "orders-test-secret",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CONFIG_FILE":             os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
	} {
		os.Setenv(k, v)
	}
	os.Exit(m.Run())
}

const testBucket = "orders-access-logs"

type testBundle struct {
	db       *pgtest.DB
	svc      *Service
	api      *httptest.Server
	bucket   *blob.Bucket
	amqpConn *amqp.Connection
	// warehouseQueue is the broker name of the warehouse queue.
	warehouseQueue string
}

// setup starts the whole service in-process, configured from environment
// variables as `go run ./examples/orders` would be, against real Postgres,
// real RabbitMQ and a real S3 HTTP server (gofakes3).
func setup(t *testing.T) *testBundle {
	t.Helper()
	db := pgtest.New(t)

	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket(testBucket))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s3srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s3srv.Serve(ln) }()
	t.Cleanup(func() { _ = s3srv.Close() })
	sinkURL := fmt.Sprintf("s3://%s/orders?endpoint=http://%s&region=us-east-1", testBucket, ln.Addr())

	prefix := amqptest.UniqueName("orders-e2e")
	env := map[string]string{
		"DATABASE_URL":               db.URL,
		"TRIBUTARY_SCHEMA":           db.Schema,
		"AMQP_URL":                   amqptest.URL(),
		"QUEUE_PREFIX":               prefix,
		"BATCH_SINK_URL":             sinkURL,
		"S3_BATCH_MAX_AGE_MS":        "300",
		"S3_BATCH_TIMER_INTERVAL_MS": "100",
	}
	cfg, err := tributary.ConfigFromLookup(func(name string) (string, bool) { v, ok := env[name]; return v, ok })
	require.NoError(t, err)
	cfg.Runtime.FetchCooldown, cfg.Runtime.FetchPollInterval = 10*time.Millisecond, 100*time.Millisecond
	cfg.Runtime.ShutdownTimeout = 5 * time.Second
	cfg.AMQP.Bridge.ConnectionName = prefix
	cfg.Logger = pgtest.Logger(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svc, err := NewService(ctx, db.Pool, cfg, Options{})
	require.NoError(t, err)
	require.NoError(t, svc.App.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, svc.App.Stop(ctx))
	})
	api := httptest.NewServer(svc.Handler())
	t.Cleanup(api.Close)

	conn := amqptest.Conn(t)
	wq := cfg.AMQP.Bridge.QueueName(WarehouseQueueDefault)
	amqptest.DeleteQueuesOnCleanup(t, conn, wq, wq+".failed")

	bucket, err := blob.OpenBucket(ctx, fmt.Sprintf("s3://%s?endpoint=http://%s&region=us-east-1&use_path_style=true", testBucket, ln.Addr()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = bucket.Close() })
	return &testBundle{db: db, svc: svc, api: api, bucket: bucket, amqpConn: conn, warehouseQueue: wq}
}

func TestOrdersEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	// POST /orders: one transaction writes the order, emits order.placed,
	// enqueues the receipt and inserts the fulfilment workflow.
	var placed PlaceOrderResponse
	status := doJSON(t, http.MethodPost, b.api.URL+"/orders", `{"customer":"c-7","cents":1999}`, &placed)
	require.Equal(t, http.StatusCreated, status)
	orderID := placed.Order.ID
	require.NotEmpty(t, orderID)
	require.NotEmpty(t, placed.EventID)

	var got Order
	require.Equal(t, http.StatusOK, doJSON(t, http.MethodGet, b.api.URL+"/orders/"+orderID, "", &got))
	require.Equal(t, "c-7", got.Customer)
	require.EqualValues(t, 1999, got.Cents)
	require.Equal(t, StatusPlaced, got.Status)

	// The receipt job completed and did its work.
	b.db.WaitForJobState(t, placed.ReceiptJob, rivertype.JobStateCompleted, 30*time.Second)
	o, err := b.svc.st.get(ctx, b.db.Pool, orderID)
	require.NoError(t, err)
	require.NotNil(t, o.ReceiptSentAt, "the receipt job marks the receipt as sent")

	// The fulfilment workflow, keyed by the order, completed with outputs;
	// the refund compensation was skipped.
	var wf *workflow.Details
	pgtest.WaitFor(t, 30*time.Second, "the fulfilment workflow to complete", func() (bool, error) {
		var err error
		wf, err = b.svc.App.Workflows().Get(ctx, "order-"+orderID)
		return err == nil && wf.Status == workflow.StatusCompleted, err
	})
	require.Equal(t, placed.WorkflowID, wf.ID)
	tasks := map[string]workflow.TaskInfo{}
	for _, task := range wf.Tasks {
		tasks[task.Name] = task
	}
	require.Equal(t, workflow.TaskState("skipped"), tasks["refund"].State)
	var shipment Shipment
	require.NoError(t, json.Unmarshal(tasks["ship"].Output, &shipment))
	require.Equal(t, Shipment{ReservationID: "res-" + orderID, PaymentID: "pay-" + orderID}, shipment)
	var payment Payment
	require.NoError(t, json.Unmarshal(tasks["charge"].Output, &payment))
	require.Equal(t, Payment{PaymentID: "pay-" + orderID, Cents: 1999}, payment)

	// The warehouse service publishes "shipped" on its queue; the inbound
	// bridge applies it and emits order.shipped in the same transaction.
	ch := waitForQueue(t, b.amqpConn, b.warehouseQueue)
	body, _ := json.Marshal(WarehouseMessage{OrderID: orderID, Status: StatusShipped, Tracking: "trk-1"})
	pubCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, ch.PublishWithContext(pubCtx, "", b.warehouseQueue, false, false,
		amqp.Publishing{ContentType: "application/json", MessageId: "wh-1", Body: body}))
	pgtest.WaitFor(t, 30*time.Second, "the order to be shipped", func() (bool, error) {
		var o Order
		status := doJSON(t, http.MethodGet, b.api.URL+"/orders/"+orderID, "", &o)
		return status == http.StatusOK && o.Status == StatusShipped, nil
	})

	// Both consumers got both events of the order, placed before shipped:
	// the per-aggregate ordering.
	var log []string
	pgtest.WaitFor(t, 30*time.Second, "billing and shipping to handle both events", func() (bool, error) {
		var err error
		log, err = b.svc.st.consumed(ctx, b.db.Pool, orderID)
		return len(log) == 4, err
	})
	for _, consumer := range []string{"billing", "shipping"} {
		var seen []string
		for _, entry := range log {
			if c, typ, _ := strings.Cut(entry, ":"); c == consumer {
				seen = append(seen, typ)
			}
		}
		require.Equal(t, []string{"order.placed", "order.shipped"}, seen, "consumer %s, log %v", consumer, log)
	}

	// The access log lines of the requests reached S3 as a batch object.
	want := []string{"POST /orders 201", "GET /orders/" + orderID + " 200"}
	pgtest.WaitFor(t, 30*time.Second, "the access log object in S3", func() (bool, error) {
		lines, err := accessLogLines(ctx, b.bucket)
		if err != nil {
			return false, err
		}
		for _, w := range want {
			if !slices.Contains(lines, w) {
				return false, fmt.Errorf("no line %q among %v", w, lines)
			}
		}
		return true, nil
	})

	// The service's own clean-up is a registered cron schedule, beside
	// tributary's.
	infos, err := scheduler.List(ctx, b.svc.App.Runtime().Client)
	require.NoError(t, err)
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	require.Contains(t, names, scheduler.CleanupSchedulePrefix+"shipped_orders")
	require.Contains(t, names, scheduler.CleanupSchedulePrefix+"workflows")
}

// A bad order is refused with its reason, and nothing is written.
func TestPlaceOrderRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for body, want := range map[string]string{
		`{"customer":"c-1","cents":0}`:         `"cents" 0 must be positive`,
		`{"customer":"","cents":5}`:            `"customer" is empty`,
		`{"customer":"c-1","cents":5,"x":1}`:   `unknown field "x"`,
		`{"customer":"c-1","cents":5} {"a":1}`: "more than one value",
		`{"customer":"c-1","cents":"five"}`:    "invalid order JSON",
	} {
		var resp map[string]string
		require.Equal(t, http.StatusBadRequest, doJSON(t, http.MethodPost, b.api.URL+"/orders", body, &resp), body)
		require.Contains(t, resp["error"], want, body)
	}
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/orders`)).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind LIKE 'orders.%'`)).Scan(&n))
	require.Zero(t, n, "no receipt or workflow job")
	var resp map[string]string
	require.Equal(t, http.StatusNotFound, doJSON(t, http.MethodGet, b.api.URL+"/orders/nope", "", &resp))
	require.Equal(t, `no order "nope"`, resp["error"])
}

func doJSON(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, out), "response %s", data)
	return resp.StatusCode
}

// waitForQueue waits until the inbound bridge declared the queue and returns
// a channel to publish on.
func waitForQueue(t *testing.T, conn *amqp.Connection, name string) *amqp.Channel {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, "queue "+name+" to be declared", func() (bool, error) {
		ch, err := conn.Channel()
		if err != nil {
			return false, err
		}
		defer ch.Close()
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err == nil, err
	})
	return amqptest.Channel(t, conn)
}

// accessLogLines reads every access-log object as "METHOD PATH STATUS".
func accessLogLines(ctx context.Context, bucket *blob.Bucket) ([]string, error) {
	var out []string
	it := bucket.List(&blob.ListOptions{Prefix: "orders/" + AccessLogStreamDefault + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		data, err := bucket.ReadAll(ctx, obj.Key)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("object %s: %w", obj.Key, err)
		}
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			var l AccessLogLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				return nil, fmt.Errorf("object %s: line %q: %w", obj.Key, sc.Text(), err)
			}
			out = append(out, fmt.Sprintf("%s %s %d", l.Method, l.Path, l.Status))
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
}
