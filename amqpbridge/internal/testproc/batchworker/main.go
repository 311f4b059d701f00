// Command batchworker is a small worker process used by the shutdown test: it
// runs one BatchConsumer whose hand-off appends the message ids of each batch
// to a file, and stops it in order on SIGTERM or SIGINT.
//
// Environment: AMQP_URL, BATCHDEMO_QUEUE, BATCHDEMO_CONNECTION_NAME,
// BATCHDEMO_OUT (file to append to), BATCHDEMO_MAX_EVENTS.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/amqpbridge"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "batchworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	maxEvents, _ := strconv.Atoi(os.Getenv("BATCHDEMO_MAX_EVENTS"))
	out, err := os.OpenFile(os.Getenv("BATCHDEMO_OUT"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()

	c, err := amqpbridge.NewBatchConsumer(amqpbridge.Config{
		URL:            cfg.AMQP.Bridge.URL,
		ConnectionName: os.Getenv("BATCHDEMO_CONNECTION_NAME"),
		Logger:         logger,
	}, amqpbridge.BatchConsumerConfig{
		Queue:     os.Getenv("BATCHDEMO_QUEUE"),
		MaxEvents: maxEvents,
		// Only count, bytes or shutdown flush here: the age timer would race
		// the test.
		MaxAge:        time.Hour,
		TimerInterval: time.Hour,
		HandOff: func(ctx context.Context, batch []*amqpbridge.Delivery) error {
			ids := make([]string, len(batch))
			for i, d := range batch {
				ids[i] = string(d.Body)
			}
			if _, err := fmt.Fprintln(out, strings.Join(ids, " ")); err != nil {
				return err
			}
			if err := out.Sync(); err != nil {
				return err
			}
			fmt.Printf("handed off %d\n", len(batch))
			return nil
		},
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		return err
	}
	st := c.Stats()
	fmt.Printf("stopped handed_off=%d flushes=%d\n", st.HandedOff, st.Flushes)
	return nil
}
