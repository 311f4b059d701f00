package demojobs

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Producer is a service that enqueues a mix of demo jobs at a steady pace,
// so `make run` has something to show: mostly demo.noop, some demo.sleep,
// a demo.fail that recovers after two attempts, and now and then one that
// never recovers and ends discarded.
type Producer struct {
	client   *queue.Client
	interval time.Duration
	life     queue.Lifecycle
}

// NewProducer returns a producer that enqueues one round of demo jobs every
// interval (defaults to 2 seconds).
func NewProducer(client *queue.Client, interval time.Duration) *Producer {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	return &Producer{client: client, interval: interval}
}

// Name implements queue.Service.
func (p *Producer) Name() string { return "demo producer" }

// Start implements queue.Service.
func (p *Producer) Start(ctx context.Context) error {
	return p.life.Start(ctx, p.Name(), func(run *queue.Run) error {
		run.Go(func() { p.loop(run.Stopping()) })
		return nil
	})
}

// Stop implements queue.Service.
func (p *Producer) Stop(ctx context.Context) error {
	_, err := p.life.Stop(ctx)
	return err
}

func (p *Producer) loop(ctx context.Context) {
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for round := 0; ; round++ {
		items := []queue.EnqueueItem{
			{Args: NoopArgs{}},
			{Args: NoopArgs{}},
			{Args: SleepArgs{MS: 200 + rand.IntN(1800)}},
		}
		if round%5 == 0 {
			items = append(items, queue.EnqueueItem{Args: FailArgs{Times: 2}})
		}
		if round%15 == 0 {
			items = append(items, queue.EnqueueItem{Args: FailArgs{Times: -1}, Opts: &queue.EnqueueOpts{MaxAttempts: 2}})
		}
		if _, err := p.client.EnqueueMany(ctx, items); err != nil && ctx.Err() == nil {
			p.client.Logger().WarnContext(ctx, "demo producer could not enqueue", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
