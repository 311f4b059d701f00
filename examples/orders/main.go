// Command orders is the example service to start from: an orders HTTP API
// on tributary that uses every feature together. See README.md beside it.
//
//	make run                 # in another terminal: Postgres (and RabbitMQ) found or started
//	go run ./examples/orders # then: curl -X POST localhost:8081/orders -d '{"customer":"c-1","cents":1999}'
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/queue"
)

// AddrDefault is where the API listens unless ORDERS_ADDR says otherwise.
const AddrDefault = "127.0.0.1:8081"

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "orders:", err)
		var ce *queue.ConfigError
		if errors.As(err, &ce) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run reads tributary's configuration from the environment like
// `tributary worker` does (DATABASE_URL, TRIBUTARY_SCHEMA, AMQP_URL,
// BATCH_SINK_URL, S3_BATCH_*, ...), plus the example's ORDERS_ADDR and
// ORDERS_WAREHOUSE_QUEUE, and serves until SIGINT or SIGTERM.
func run(ctx context.Context) error {
	cfg, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger := cfg.NewLogger(os.Stderr)
	cfg.Logger = logger
	pool, err := tributary.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if cfg.AMQP.Bridge.URL == "" {
		logger.InfoContext(ctx, "AMQP_URL is not set: not reading the warehouse queue")
	}
	svc, err := NewService(ctx, pool, cfg, Options{WarehouseQueue: os.Getenv("ORDERS_WAREHOUSE_QUEUE")})
	if err != nil {
		return err
	}
	addr := cmp.Or(os.Getenv("ORDERS_ADDR"), AddrDefault)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return &queue.ConfigError{Name: "ORDERS_ADDR", Value: addr, Reason: err.Error()}
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.InfoContext(ctx, "orders API listening", "addr", ln.Addr().String(), "schema", cfg.Schema)
	runErr := svc.App.Run(ctx) // until SIGINT/SIGTERM; running jobs get TRIBUTARY_SHUTDOWN_TIMEOUT
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(runErr, srv.Shutdown(shutdownCtx))
}
