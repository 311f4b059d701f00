package amqpbridge

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
)

// recorder collects the batches a hand-off received.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	notify  chan int
}

func newRecorder() *recorder { return &recorder{notify: make(chan int, 100)} }

func (r *recorder) record(batch []*Delivery) {
	ids := make([]string, len(batch))
	for i, d := range batch {
		ids[i] = string(d.Body)
	}
	r.mu.Lock()
	r.batches = append(r.batches, ids)
	r.mu.Unlock()
	r.notify <- len(batch)
}

func startBatchConsumer(t *testing.T, cfg Config, bc BatchConsumerConfig) *BatchConsumer {
	t.Helper()
	c, err := NewBatchConsumer(cfg, bc)
	require.NoError(t, err)
	cleanupTopology(t, amqptest.Conn(t), c.Topology())
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func TestBatchConsumer(t *testing.T) {
	t.Parallel()

	t.Run("FlushOnCountThenAge", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchcount"))
		rec := newRecorder()
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 5, MaxAge: 300 * time.Millisecond, TimerInterval: 50 * time.Millisecond,
			HandOff: func(ctx context.Context, batch []*Delivery) error { rec.record(batch); return nil }})
		start := time.Now()
		for i := range 12 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprint(i)), nil)
		}
		require.Equal(t, 5, <-rec.notify)
		require.Equal(t, 5, <-rec.notify)
		require.Equal(t, 2, <-rec.notify, "the age timer flushes the partial batch")
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
		rec.mu.Lock()
		require.Equal(t, [][]string{{"0", "1", "2", "3", "4"}, {"5", "6", "7", "8", "9"}, {"10", "11"}}, rec.batches)
		rec.mu.Unlock()
		amqptest.Eventually(t, 5*time.Second, "all acked", func() bool { return c.Stats().HandedOff == 12 })
		require.Equal(t, uint64(3), c.Stats().Flushes)
		require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Main))
	})

	t.Run("FlushOnBytes", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchbytes"))
		rec := newRecorder()
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 100, MaxBytes: 100, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error { rec.record(batch); return nil }})
		for range 3 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(strings.Repeat("x", 40)), nil)
		}
		require.Equal(t, 3, <-rec.notify, "40+40+40 bytes reach the 100-byte limit")
	})

	t.Run("PrefetchEqualsBatchSize", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchprefetch"))
		gate := make(chan struct{})
		rec := newRecorder()
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 4, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				rec.record(batch)
				<-gate
				return nil
			}})
		for i := range 10 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprint(i)), nil)
		}
		require.Equal(t, 4, <-rec.notify)
		// While the first batch is being handed off, the broker holds back
		// everything beyond one batch.
		amqptest.Eventually(t, 5*time.Second, "6 messages wait in the queue", func() bool {
			return amqptest.Depth(t, b.ch, c.Topology().Main) == 6
		})
		require.Equal(t, uint64(4), c.Stats().Delivered)
		close(gate)
		require.Equal(t, 4, <-rec.notify)
	})

	t.Run("FailedHandOffNacksWholeBatch", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchfail"))
		rec := newRecorder()
		var attempts int
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 3, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				attempts++
				if attempts == 1 {
					return errors.New("sink down")
				}
				for _, d := range batch {
					if !d.Redelivered {
						return fmt.Errorf("message %s should be a redelivery", d.Body)
					}
				}
				rec.record(batch)
				return nil
			}})
		for i := range 3 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprint(i)), nil)
		}
		require.Equal(t, 3, <-rec.notify)
		rec.mu.Lock()
		require.Equal(t, [][]string{{"0", "1", "2"}}, rec.batches)
		rec.mu.Unlock()
		amqptest.Eventually(t, 5*time.Second, "acked", func() bool { return c.Stats().HandedOff == 3 })
		require.Equal(t, uint64(1), c.Stats().FlushFailures)
	})

	t.Run("ConcurrentHandOffsAckedInOrder", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchorder"))
		gate := make(chan struct{})
		var openGate sync.Once
		t.Cleanup(func() { openGate.Do(func() { close(gate) }) }) // never leave the hand-off blocked
		started := make(chan string, 10)
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 2, Prefetch: 4, HandOffConcurrency: 2, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				started <- string(batch[0].Body)
				if string(batch[0].Body) == "0" {
					select { // the first batch is slow
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}})
		for i := range 4 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprint(i)), nil)
		}
		// Both batches are handed off at once (in either order) while the
		// first is still running.
		require.ElementsMatch(t, []string{"0", "2"}, []string{<-started, <-started})
		// The second batch is done, but its multiple-ack would also cover
		// the first: nothing is acked until the first is done.
		require.Equal(t, uint64(0), c.Stats().HandedOff)
		openGate.Do(func() { close(gate) })
		amqptest.Eventually(t, 5*time.Second, "both acked", func() bool { return c.Stats().HandedOff == 4 })
		require.Equal(t, uint64(2), c.Stats().Flushes)
	})

	// With FlushWhenIdle, a pause ends a batch only when a hand-off slot is
	// free; while every slot is busy the batch keeps growing, so a slow sink
	// gets fewer, fuller batches instead of one per pause.
	t.Run("BatchGrowsWhileEverySlotIsBusy", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchgrow"))
		gate := make(chan struct{})
		var openGate sync.Once
		t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
		started := make(chan []string, 10)
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 10, Prefetch: 20, HandOffConcurrency: 2,
			FlushWhenIdle: true, IdleWait: time.Nanosecond, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				bodies := make([]string, len(batch))
				for i, d := range batch {
					bodies[i] = string(d.Body)
				}
				started <- bodies
				if bodies[0] == "0" || bodies[0] == "1" { // both slots stay busy
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}})
		publishRaw(t, b.ch, c.Topology().Main, []byte("0"), nil)
		require.Equal(t, []string{"0"}, <-started)
		publishRaw(t, b.ch, c.Topology().Main, []byte("1"), nil)
		require.Equal(t, []string{"1"}, <-started)
		for i := 2; i <= 6; i++ {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprint(i)), nil)
		}
		amqptest.Eventually(t, 5*time.Second, "the consumer takes deliveries while both slots are busy", func() bool { return c.Stats().Delivered == 7 })
		openGate.Do(func() { close(gate) })
		require.Equal(t, []string{"2", "3", "4", "5", "6"}, <-started, "one batch of what gathered")
		amqptest.Eventually(t, 5*time.Second, "all acked", func() bool { return c.Stats().HandedOff == 7 })
		require.Equal(t, uint64(3), c.Stats().Flushes)
	})

	// One multiple-ack settles a batch (the tag of its last delivery nobody
	// settled alone). It must never settle a message that was not handed
	// off: not one of an earlier batch whose hand-off failed (batches
	// finish out of order with concurrent hand-offs), and not one a
	// hand-off dead-lettered alone in the middle of its batch.
	t.Run("MultipleAckNeverCoversAFailedMessage", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchmulti"))
		gate := make(chan struct{})
		var openGate sync.Once
		t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
		var (
			mu       sync.Mutex
			attempts = map[string]int{} // hand-offs that saw the body
			accepted = map[string]int{} // hand-offs that returned nil for it
		)
		secondDone := make(chan struct{})
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 3, Prefetch: 6, HandOffConcurrency: 2, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				mu.Lock()
				first := attempts[string(batch[0].Body)] == 0
				for _, d := range batch {
					attempts[string(d.Body)]++
				}
				mu.Unlock()
				switch {
				case string(batch[0].Body) == "0" && first:
					// The first batch fails, but only after the second one
					// was handed off and is waiting for its ack.
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
					return errors.New("sink down")
				case string(batch[0].Body) == "3":
					if err := batch[1].Nack(Permanent(errors.New("cannot parse"))); err != nil {
						return err
					}
					defer close(secondDone)
				}
				mu.Lock()
				for _, d := range batch {
					if string(d.Body) != "poison" {
						accepted[string(d.Body)]++
					}
				}
				mu.Unlock()
				return nil
			}})
		for _, body := range []string{"0", "1", "2", "3", "poison", "5"} {
			publishRaw(t, b.ch, c.Topology().Main, []byte(body), nil)
		}
		<-secondDone
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Equal(t, "poison", string(failed.Body))
		require.Equal(t, uint64(0), c.Stats().HandedOff, "the second batch waits for the first")
		openGate.Do(func() { close(gate) })

		amqptest.Eventually(t, 10*time.Second, "all handed off", func() bool { return c.Stats().HandedOff == 5 })
		require.Equal(t, uint64(1), c.Stats().FlushFailures)
		mu.Lock()
		require.Equal(t, map[string]int{"0": 2, "1": 2, "2": 2, "3": 1, "poison": 1, "5": 1}, attempts,
			"the failed batch came back, whatever the later batch's multiple-ack covered; nothing else did")
		require.Equal(t, map[string]int{"0": 1, "1": 1, "2": 1, "3": 1, "5": 1}, accepted)
		mu.Unlock()
		require.Equal(t, uint64(1), c.Stats().Generation, "no ack hit a settled tag (the broker would have closed the channel)")
		require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Main))
		require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Failed), "poison was dead-lettered once")
	})

	t.Run("PoisonMessageNackedAloneRestAcked", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("batchpoison"))
		rec := newRecorder()
		c := startBatchConsumer(t, cfg, BatchConsumerConfig{Queue: b.queue, MaxEvents: 3, MaxAge: time.Hour,
			HandOff: func(ctx context.Context, batch []*Delivery) error {
				var good []*Delivery
				for _, d := range batch {
					if string(d.Body) == "poison" {
						if err := d.Nack(Permanent(errors.New("cannot parse"))); err != nil {
							return err
						}
						continue
					}
					good = append(good, d)
				}
				rec.record(good)
				return nil
			}})
		for _, body := range []string{"a", "b", "poison"} {
			publishRaw(t, b.ch, c.Topology().Main, []byte(body), nil)
		}
		require.Equal(t, 2, <-rec.notify)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Equal(t, "poison", string(failed.Body))
		amqptest.Eventually(t, 5*time.Second, "rest acked", func() bool { return c.Stats().HandedOff == 2 })
		require.Equal(t, uint64(1), c.Stats().Generation, "the multiple-ack did not hit an acked tag")
		require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Main))
	})
}

// TestBatchShutdownSIGTERM runs a real worker process (internal/testproc/batchworker),
// lets it buffer a partial batch, sends SIGTERM, and checks the batch was
// handed off and acked before the connection closed: nothing is left in the
// queue, and a restarted process never sees those messages again.
// TestWorkerAMQPBatchQueueSIGTERM (cmd/tributary) does the same with
// `tributary worker` staging into Postgres.
func TestBatchShutdownSIGTERM(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t, amqptest.UniqueName("batchsigterm"))
	topo := cfg.Topology(b.queue)
	// The worker process runs with the default retry tiers.
	cleanupTopology(t, b.conn, Config{}.Topology(b.queue))

	dir := t.TempDir()
	bin := filepath.Join(dir, "batchworker")
	build := exec.Command("go", "build", "-o", bin, "./internal/testproc/batchworker")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	outFile := filepath.Join(dir, "handed-off.txt")

	runWorker := func(publish []string) []string {
		cmd := exec.Command(bin)
		pgtest.DieWithTest(cmd)
		cmd.Env = append(os.Environ(),
			"AMQP_URL="+amqptest.URL(),
			"BATCHDEMO_QUEUE="+b.queue,
			"BATCHDEMO_CONNECTION_NAME="+cfg.ConnectionName,
			"BATCHDEMO_OUT="+outFile,
			"BATCHDEMO_MAX_EVENTS=100",
		)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		stderr := &logBuffer{}
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		require.Equal(t, "ready", <-lines, stderr.String())
		for _, body := range publish {
			publishRaw(t, b.ch, topo.Main, []byte(body), nil)
		}
		// All delivered to the worker (prefetch 100 > batch) and none acked:
		// the batch sits in its buffer.
		amqptest.Eventually(t, 10*time.Second, "messages delivered to the worker", func() bool {
			return amqptest.Depth(t, b.ch, topo.Main) == 0
		})
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		var got []string
		for l := range lines {
			got = append(got, l)
		}
		require.NoError(t, cmd.Wait(), stderr.String())
		return got
	}

	first := []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7"}
	lines := runWorker(first)
	require.Equal(t, []string{"handed off 7", "stopped handed_off=7 flushes=1"}, lines)
	// Acked before the connection closed: had the ack been lost, the broker
	// would have put the 7 messages back.
	require.Equal(t, 0, amqptest.Depth(t, b.ch, topo.Main))

	lines = runWorker([]string{"n1", "n2"})
	require.Equal(t, []string{"handed off 2", "stopped handed_off=2 flushes=1"}, lines)
	data, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Equal(t, "m1 m2 m3 m4 m5 m6 m7\nn1 n2\n", string(data), "the restarted worker got none of the first batch again")
}
