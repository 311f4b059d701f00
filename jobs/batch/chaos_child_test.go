package batch

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// childEnv makes the test binary run as a flush worker process (see
// TestMain) for TestChaosWorkerKilledAfterUpload.
const childEnv = "TRIBUTARY_BATCH_CHILD"

// runChildWorker works flush jobs on the default queue until it is killed.
func runChildWorker() int {
	ctx := context.Background()
	cfg := queue.Config{DatabaseURL: os.Getenv("CHILD_DATABASE_URL")}.WithDefaults()
	pool, err := queue.NewPool(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sink, err := OpenSink(ctx, os.Getenv("CHILD_SINK_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: os.Getenv("CHILD_SCHEMA"), Queues: map[string]int{"default": 2},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond})
	if err == nil {
		_, err = Register(rt, FlusherConfig{Streams: chaosStreams, Sink: sink}, AgeTimerConfig{Interval: time.Hour})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := rt.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {}
}

var chaosStreams = Config{Defaults: StreamConfig{MaxEvents: 10, MaxAge: time.Hour}}
