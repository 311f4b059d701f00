//go:build chaos

package chaos_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/chaos"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// The runs take CHAOS_DURATION of load (default 60s) with faults, then wait
// for everything to drain and check the logs by id. They run one after
// another: each already loads the two cores with three workers.

func TestChaosWorkerSIGKILL(t *testing.T) {
	runChaos(t, run{name: "sigkill", fault: func(h *harness, stop <-chan struct{}) {
		h.every(stop, 4*time.Second, func() { h.killOne() })
	}})
}

func TestChaosPostgresRestart(t *testing.T) {
	runChaos(t, run{name: "postgres-restart", privateCluster: true, fault: func(h *harness, stop <-chan struct{}) {
		third := h.load / 3
		for i := 0; i < 2; i++ {
			select {
			case <-stop:
				return
			case <-time.After(third):
			}
			h.cluster.restart(h.t)
			h.count("postgres restarts", 1)
		}
	}})
}

func TestChaosTerminateBackends(t *testing.T) {
	runChaos(t, run{name: "terminate-backends", fault: func(h *harness, stop <-chan struct{}) {
		h.every(stop, 2*time.Second, func() {
			var n int
			err := h.pool.QueryRow(context.Background(),
				`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ANY($1)`, h.appNames()).Scan(&n)
			if err != nil {
				h.t.Logf("terminating backends: %v", err)
				return
			}
			h.count("backends terminated", n)
			h.count("terminations", 1)
		})
	}})
}

func TestChaosAMQPConnectionsClosed(t *testing.T) {
	runChaos(t, run{name: "amqp-close", fault: func(h *harness, stop <-chan struct{}) {
		h.every(stop, 3*time.Second, func() {
			h.count("amqp connections closed", closeAMQPConnections(h.t, "chaos-"))
			h.count("amqp closes", 1)
		})
	}})
}

// run is one chaos run: a fault injected while the load runs.
type run struct {
	name           string
	privateCluster bool
	fault          func(h *harness, stop <-chan struct{})
}

var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tributary-chaosworker-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "chaosworker")
	if out, err := exec.Command("go", "build", "-o", workerBin, "../testproc/chaosworker").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building chaosworker: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness holds one run's database, workers, producer bookkeeping and
// counters.
type harness struct {
	t       *testing.T
	name    string
	load    time.Duration
	baseURL string // the workers' database, without application_name
	schema  string
	pool    *pgxpool.Pool // the driver's own
	cluster *cluster      // set for a private cluster
	sinkDir string
	amqpURL string
	queue   string // AMQP queue bound to the chaos exchange

	mu       sync.Mutex
	workers  []*worker
	nextID   int
	counters map[string]int

	// What the producer committed (Commit returned nil), and what it sent
	// in transactions whose commit returned an error: those may or may not
	// have committed.
	jobs, items               map[string]bool
	eventsCommitted           map[string]bool
	ambiguous                 map[string]bool
	aggregates                map[string]int
	amqpSeen                  map[string]int
	producerTx, producerFails int
}

type worker struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func runChaos(t *testing.T, r run) {
	load := 60 * time.Second
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "CHAOS_DURATION")
		load = d
	}
	h := &harness{t: t, name: r.name, load: load, counters: map[string]int{},
		jobs: map[string]bool{}, items: map[string]bool{}, eventsCommitted: map[string]bool{},
		ambiguous: map[string]bool{}, aggregates: map[string]int{}, amqpSeen: map[string]int{}}
	h.setupDatabase(r.privateCluster)
	h.sinkDir = t.TempDir()
	h.setupAMQP()

	for i := 0; i < 3; i++ {
		h.startWorker()
	}
	t.Cleanup(h.killAll)

	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.produce(stop) }()
	go func() { defer wg.Done(); r.fault(h, stop) }()
	time.Sleep(load) // the load's duration itself, not a synchronisation
	close(stop)
	wg.Wait()
	loadEnd := time.Now()

	// Faults are over: every worker slot runs again, and everything must
	// drain.
	h.mu.Lock()
	for i, w := range h.workers {
		select {
		case <-w.done:
			h.mu.Unlock()
			h.replace(i)
			h.mu.Lock()
		default:
		}
	}
	h.mu.Unlock()
	drainStart := time.Now()
	lastLog := drainStart
	for {
		ok, report, err := h.check(loadEnd, false)
		if ok && err == nil {
			break
		}
		if time.Since(lastLog) > 30*time.Second {
			t.Logf("still draining after %.0f s: %s; repairs logged %v", time.Since(drainStart).Seconds(), report, h.repairsLogged())
			lastLog = time.Now()
		}
		if time.Since(drainStart) > 5*time.Minute {
			t.Fatalf("the workload did not drain within 5 minutes of the load's end: %s (last error: %v)", report, err)
		}
		time.Sleep(500 * time.Millisecond) // a poll interval
	}
	drained := time.Since(drainStart)
	h.stopAll()
	_, report, err := h.check(loadEnd, true)
	require.NoError(t, err)
	t.Logf("chaos: %s: %s load, drained %.1f s after it; %s; faults %v; repairs logged %v",
		r.name, loadEnd.Sub(start).Round(time.Second), drained.Seconds(), report, h.counters, h.repairsLogged())
}

// repairMessages are the workers' log messages of the paths that find
// lost work, by a short name for the report: a drain that takes long
// shows which of them it waited for.
var repairMessages = map[string]string{
	"lost jobs":              "made jobs available again that were running under this process",
	"lane heads promoted":    "promoted the stuck head of an event lane",
	"lane heads given back":  "made the head of an event lane available again",
	"lane events taken back": "took back the lane event at the head of a lane",
	"dead processes":         "running jobs of dead processes made available again",
}

// repairsLogged counts the repair messages in every worker's log.
func (h *harness) repairsLogged() map[string]int {
	out := map[string]int{}
	logs, _ := filepath.Glob(filepath.Join(h.sinkDir, "..", "w*.log"))
	for _, path := range logs {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			for name, msg := range repairMessages {
				if strings.Contains(sc.Text(), msg) {
					out[name]++
				}
			}
		}
		f.Close()
	}
	return out
}

func (h *harness) count(name string, n int) {
	h.mu.Lock()
	h.counters[name] += n
	h.mu.Unlock()
}

func (h *harness) every(stop <-chan struct{}, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// setupDatabase creates the run's schema on the shared test server, or on
// a private cluster the run may restart.
func (h *harness) setupDatabase(private bool) {
	t := h.t
	ctx := context.Background()
	if !private {
		db := pgtest.New(t)
		h.baseURL, h.schema = db.URL, db.Schema
	} else {
		h.cluster = startCluster(t)
		h.baseURL, h.schema = h.cluster.url, "chaos"
	}
	cfg, err := pgxpool.ParseConfig(h.baseURL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-driver"
	h.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(h.pool.Close)
	if private {
		m, err := migrations.New(h.pool, migrations.Config{Schema: h.schema})
		require.NoError(t, err)
		_, err = m.Up(ctx)
		require.NoError(t, err)
	}
	_, err = h.pool.Exec(ctx, queue.Qualify(h.schema, chaos.CreateLogsSQL))
	require.NoError(t, err)
}

// setupAMQP declares the chaos exchange and a queue bound to the event type,
// and records every message id that arrives on it.
func (h *harness) setupAMQP() {
	t := h.t
	h.amqpURL = os.Getenv("AMQP_URL")
	if h.amqpURL == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("the chaos runs need RabbitMQ: set AMQP_URL (make chaos finds it)")
		}
		h.amqpURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(h.amqpURL)
	require.NoError(t, err, "the chaos runs need RabbitMQ at %s", h.amqpURL)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(chaos.Exchange, amqp.ExchangeTopic, true, false, false, false, nil))
	h.queue = "chaos." + h.schema
	_, err = ch.QueueDeclare(h.queue, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(h.queue, chaos.Event.Name(), chaos.Exchange, false, nil))
	deliveries, err := ch.Consume(h.queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	go func() {
		for d := range deliveries {
			h.mu.Lock()
			h.amqpSeen[d.MessageId]++
			h.mu.Unlock()
		}
	}()
}

func (h *harness) workerURL(name string) string {
	u, err := url.Parse(h.baseURL)
	require.NoError(h.t, err)
	q := u.Query()
	q.Set("application_name", "chaosworker-"+name)
	u.RawQuery = q.Encode()
	return u.String()
}

func (h *harness) appNames() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.workers))
	for _, w := range h.workers {
		names = append(names, "chaosworker-"+w.name)
	}
	return names
}

// startWorker starts a new worker process and appends it.
func (h *harness) startWorker() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.workers = append(h.workers, h.spawnLocked())
}

// replace starts a new process in slot i (whose process has exited).
func (h *harness) replace(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.workers[i] = h.spawnLocked()
	h.counters["restarts"]++
}

func (h *harness) spawnLocked() *worker {
	h.nextID++
	name := fmt.Sprintf("w%d", h.nextID)
	logPath := filepath.Join(h.sinkDir, "..", name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(h.t, err)
	cmd := exec.Command(workerBin)
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+h.workerURL(name),
		"TRIBUTARY_SCHEMA="+h.schema,
		"AMQP_URL="+h.amqpURL,
		"CHAOS_NAME="+name,
		"CHAOS_SINK_DIR="+h.sinkDir,
		"S3_BATCH_MAX_EVENTS=500",
		"S3_BATCH_MAX_AGE_MS=2000",
		"S3_BATCH_TIMER_INTERVAL_MS=1000",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(h.t, cmd.Start())
	w := &worker{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		w.err = cmd.Wait()
		logFile.Close()
		close(w.done)
	}()
	return w
}

// killOne SIGKILLs a random worker and starts another in its place.
func (h *harness) killOne() {
	h.mu.Lock()
	i := rand.N(len(h.workers))
	w := h.workers[i]
	h.mu.Unlock()
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
	h.count("kills", 1)
	h.replace(i)
}

// stopAll sends SIGTERM to every worker and requires a clean exit.
func (h *harness) stopAll() {
	h.mu.Lock()
	workers := append([]*worker(nil), h.workers...)
	h.mu.Unlock()
	for _, w := range workers {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		select {
		case <-w.done:
		case <-time.After(90 * time.Second):
			h.t.Errorf("worker %s did not exit 90 s after SIGTERM; log:\n%s", w.name, tail(w.log))
			continue
		}
		if w.err != nil {
			h.t.Errorf("worker %s exited with %v after SIGTERM; log:\n%s", w.name, w.err, tail(w.log))
		}
	}
}

func (h *harness) killAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.workers {
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			<-w.done
		}
		if h.t.Failed() {
			h.t.Logf("log of worker %s:\n%s", w.name, tail(w.log))
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// produce commits, every 25 ms until stop, one transaction with a job, two
// events on random aggregates of 50, one event without aggregate and two
// batch items.
func (h *harness) produce(stop <-chan struct{}) {
	t := h.t
	client, err := queue.NewClient(h.pool, queue.ClientConfig{Schema: h.schema})
	require.NoError(t, err)
	reg, err := events.NewRegistry(chaos.Event)
	require.NoError(t, err)
	emitter, err := events.NewEmitter(events.EmitterConfig{Schema: h.schema, Registry: reg})
	require.NoError(t, err)
	stager, err := batch.NewStager(client, batch.Config{Defaults: batch.StreamConfig{MaxEvents: 500, MaxAge: 2 * time.Second}})
	require.NoError(t, err)

	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		jobKey := fmt.Sprintf("j%d", seq)
		itemKeys := []string{fmt.Sprintf("i%d.0", seq), fmt.Sprintf("i%d.1", seq)}
		var emitted []string
		h.mu.Lock()
		var ems []events.Emission
		for k := 0; k < 2; k++ {
			agg := fmt.Sprintf("a%d", rand.N(50))
			h.aggregates[agg]++
			ems = append(ems, events.Emission{Def: chaos.Event, Payload: chaos.Payload{N: h.aggregates[agg]}, Meta: events.Meta{AggregateID: agg}})
		}
		h.mu.Unlock()
		ems = append(ems, events.Emission{Def: chaos.Event, Payload: chaos.Payload{N: seq}})
		tx, err := h.pool.Begin(ctx)
		if err == nil {
			err = func() error {
				if _, err := client.EnqueueTx(ctx, tx, chaos.WorkArgs{Key: jobKey, SleepMS: rand.N(300)}, nil); err != nil {
					return err
				}
				ids, err := emitter.EmitManyTx(ctx, tx, ems)
				if err != nil {
					return err
				}
				emitted = ids
				for _, k := range itemKeys {
					if err := stager.StageTx(ctx, tx, chaos.Stream, []byte(`{"key":"`+k+`"}`)); err != nil {
						return err
					}
				}
				return nil
			}()
			if err != nil {
				_ = tx.Rollback(ctx)
			} else {
				err = tx.Commit(ctx)
				h.mu.Lock()
				h.producerTx++
				// A failed commit may still have committed: its ids are
				// ambiguous, neither required nor unexpected.
				record := func(m map[string]bool, ids ...string) {
					for _, id := range ids {
						if err == nil {
							m[id] = true
						} else {
							h.ambiguous[id] = true
						}
					}
				}
				record(h.jobs, jobKey)
				record(h.eventsCommitted, emitted...)
				record(h.items, itemKeys...)
				h.mu.Unlock()
			}
		}
		if err != nil {
			h.mu.Lock()
			h.producerFails++
			h.mu.Unlock()
		}
		cancel()
	}
}

// check reads the logs and compares them with what was committed. Until
// final it reports whether everything has arrived; with final it fails the
// test on any loss or order violation and returns the figures.
func (h *harness) check(loadEnd time.Time, final bool) (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := func(s string) string { return queue.Qualify(h.schema, s) }
	h.mu.Lock()
	jobs, items, evs := copySet(h.jobs), copySet(h.items), copySet(h.eventsCommitted)
	ambiguous := copySet(h.ambiguous)
	amqpSeen := map[string]int{}
	for k, v := range h.amqpSeen {
		amqpSeen[k] = v
	}
	producerTx, producerFails := h.producerTx, h.producerFails
	h.mu.Unlock()

	jobRuns, err := countBy(ctx, h.pool, q(`SELECT key, count(*) FROM /*schema*/chaos_job_log GROUP BY key`))
	if err != nil {
		return false, "", err
	}
	rows, err := h.pool.Query(ctx, q(`SELECT consumer, event_id::text, coalesce(aggregate_id, ''), n FROM /*schema*/chaos_event_log ORDER BY id`))
	if err != nil {
		return false, "", err
	}
	seen := map[string]map[string]int{}
	last := map[string]int{}
	orderViolations := 0
	for rows.Next() {
		var consumer, id, agg string
		var n int
		if err := rows.Scan(&consumer, &id, &agg, &n); err != nil {
			rows.Close()
			return false, "", err
		}
		if seen[consumer] == nil {
			seen[consumer] = map[string]int{}
		}
		seen[consumer][id]++
		if agg != "" {
			key := consumer + "/" + agg
			if n < last[key] {
				orderViolations++
				if final {
					h.t.Errorf("order violation: consumer %s aggregate %s handled n=%d after n=%d", consumer, agg, n, last[key])
				}
			}
			last[key] = max(last[key], n)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, "", err
	}
	// Jobs per fire time (the scheduler's promise: exactly one), and runs of
	// a job beyond its first (at-least-once: a killed worker's tick job runs
	// again).
	fires, err := countBy(ctx, h.pool, q(`SELECT to_char(fire_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS'), count(DISTINCT job_id) FROM /*schema*/chaos_tick_log GROUP BY 1`))
	if err != nil {
		return false, "", err
	}
	var tickReruns int
	if err := h.pool.QueryRow(ctx, q(`SELECT count(*) - count(DISTINCT (fire_at, job_id)) FROM /*schema*/chaos_tick_log`)).Scan(&tickReruns); err != nil {
		return false, "", err
	}
	var staged int
	if err := h.pool.QueryRow(ctx, q(`SELECT coalesce(sum(item_count - done_items), 0) FROM /*schema*/tributary_batch_chunk WHERE stream = $1`), chaos.Stream).Scan(&staged); err != nil {
		return false, "", err
	}
	var unfinished int
	if err := h.pool.QueryRow(ctx, q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'chaos.work' AND state <> 'completed'`)).Scan(&unfinished); err != nil {
		return false, "", err
	}
	// What is still on its way, for a run that does not drain.
	waiting, err := countBy(ctx, h.pool, q(`SELECT kind || ':' || state, count(*) FROM /*schema*/river_job
        WHERE finalized_at IS NULL AND kind <> 'chaos.tick' GROUP BY 1
        UNION ALL SELECT 'outbox:' || status || coalesce(':retry in ' || ceil(extract(epoch FROM max(next_attempt_at) - now())) || 's', ''), count(*)
        FROM /*schema*/tributary_outbox WHERE status IN ('PENDING', 'CLAIMED') GROUP BY status`))
	if err != nil {
		return false, "", err
	}
	flushed, err := readObjects(h.sinkDir)
	if err != nil {
		return false, "", err
	}

	lostJobs, dupJobs := lostAndDup(jobs, jobRuns)
	lostItems, dupItems := lostAndDup(items, flushed)
	lostAMQP, dupAMQP := lostAndDup(evs, amqpSeen)
	lostEvents, dupEvents := map[string]int{}, map[string]int{}
	for _, c := range chaos.ConsumerNames {
		lostEvents[c], dupEvents[c] = lostAndDup(evs, seen[c])
	}
	gaps, dupFires, lastFire := fireGaps(fires)
	lostTotal := lostJobs + lostItems + lostAMQP + gaps
	for _, n := range lostEvents {
		lostTotal += n
	}
	done := lostTotal == 0 && staged == 0 && unfinished == 0 && !lastFire.Before(loadEnd.Add(-2*time.Second))
	report := fmt.Sprintf("producer %d tx (%d failed, %d ids ambiguous); jobs %d (lost %d, duplicates %d); events %d over %d aggregates (lost %v, duplicates %v; AMQP lost %d, duplicates %d); order violations %d; batch items %d (lost %d, duplicates %d, staged %d); cron fires %d (gaps %d, fire times with more than one job %d, tick jobs run again %d); unfinished chaos.work jobs %d; waiting %v",
		producerTx, producerFails, len(ambiguous), len(jobs), lostJobs, dupJobs, len(evs), len(h.aggregates), lostEvents, dupEvents,
		lostAMQP, dupAMQP, orderViolations, len(items), lostItems, dupItems, staged, len(fires), gaps, dupFires, tickReruns, unfinished, waiting)
	if final {
		require.Zero(h.t, orderViolations, report)
		require.Zero(h.t, dupFires, "a fire time inserted more than one job: %s", report)
		require.True(h.t, done, "lost or unfinished work: %s (unfinished jobs %d, last fire %s, load end %s)", report, unfinished, lastFire, loadEnd)
	}
	return done, report, nil
}

func copySet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func countBy(ctx context.Context, pool *pgxpool.Pool, sql string) (map[string]int, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[k] = n
	}
	rows.Close()
	return out, rows.Err()
}

// lostAndDup counts the committed ids never seen, and the extra sightings.
func lostAndDup(committed map[string]bool, seen map[string]int) (lost, dup int) {
	for id := range committed {
		if seen[id] == 0 {
			lost++
		}
	}
	for _, n := range seen {
		dup += n - 1
	}
	return lost, dup
}

// fireTimeLayout is the fire times' keys in fires: to_char's
// 'YYYY-MM-DD"T"HH24:MI:SS' of the UTC time.
const fireTimeLayout = time.DateOnly + "T" + time.TimeOnly

// fireGaps counts the missing seconds between the first and the last fire
// time, and the jobs beyond one per fire time (fires holds jobs per fire
// time).
func fireGaps(fires map[string]int) (gaps, dup int, last time.Time) {
	var first time.Time
	for k, n := range fires {
		ts, err := time.Parse(fireTimeLayout, k)
		if err != nil {
			continue
		}
		if first.IsZero() || ts.Before(first) {
			first = ts
		}
		if ts.After(last) {
			last = ts
		}
		dup += n - 1
	}
	if first.IsZero() {
		return 0, 0, last
	}
	for ts := first; !ts.After(last); ts = ts.Add(time.Second) {
		if fires[ts.Format(fireTimeLayout)] == 0 {
			gaps++
		}
	}
	return gaps, dup, last
}

// readObjects counts, by key, the items in every object of the sink.
func readObjects(dir string) (map[string]int, error) {
	out := map[string]int{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".jsonl.gz") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("object %s: %w", path, err)
		}
		sc := bufio.NewScanner(zr)
		for sc.Scan() {
			var item struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(sc.Bytes(), &item); err != nil {
				return fmt.Errorf("object %s: %w", path, err)
			}
			out[item.Key]++
		}
		return sc.Err()
	})
	return out, err
}

// closeAMQPConnections force-closes the broker connections whose
// connection_name starts with prefix and returns how many.
func closeAMQPConnections(t *testing.T, prefix string) int {
	expr := fmt.Sprintf(`Prefix = <<"%s">>,
Info = fun(P) -> try rabbit_networking:connection_info(P, [client_properties]) catch _:_ -> [] end end,
L = [P || P <- rabbit_networking:connections(),
      {client_properties, Props} <- Info(P),
      is_list(Props),
      {<<"connection_name">>, longstr, N} <- Props,
      binary:longest_common_prefix([N, Prefix]) =:= byte_size(Prefix)],
[catch rabbit_networking:close_connection(P, "chaos fault injection") || P <- L],
length(L).`, prefix)
	out, err := exec.Command("rabbitmqctl", "eval", expr).CombinedOutput()
	if err != nil {
		t.Logf("rabbitmqctl eval: %v: %s", err, out)
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// cluster is a private Postgres cluster the run starts, restarts and stops.
type cluster struct {
	dir, data, pgCtl, url string
}

func startCluster(t *testing.T) *cluster {
	initdb, pgCtl := findPGBin(t, "initdb"), findPGBin(t, "pg_ctl")
	dir, err := os.MkdirTemp("", "tributary-chaos-pg-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	c := &cluster{dir: dir, data: filepath.Join(dir, "data"), pgCtl: pgCtl}
	if os.Geteuid() == 0 {
		out, err := exec.Command("chown", "postgres:", dir).CombinedOutput()
		require.NoError(t, err, "chown %s to postgres (initdb refuses root): %s", dir, out)
	}
	out, err := asPGUser(initdb, "-D", c.data, "-U", "postgres", "--auth=trust", "-E", "UTF8").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c max_connections=200", port, dir)
	out, err = asPGUser(pgCtl, "-D", c.data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "-o", opts, "start").CombinedOutput()
	require.NoError(t, err, "pg_ctl start: %s", out)
	t.Cleanup(func() {
		_, _ = asPGUser(pgCtl, "-D", c.data, "-m", "immediate", "-w", "stop").CombinedOutput()
		os.RemoveAll(dir)
	})
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c
}

// restart restarts the cluster as a crash would end it: no checkpoint, no
// goodbye to the clients.
func (c *cluster) restart(t *testing.T) {
	// -l again: without it the new postmaster writes to pg_ctl's output,
	// which the pipe of CombinedOutput would then wait on forever.
	out, err := asPGUser(c.pgCtl, "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-m", "immediate", "-w", "-t", "60", "restart").CombinedOutput()
	if err != nil {
		t.Errorf("pg_ctl restart: %v: %s", err, out)
	}
}

func asPGUser(bin string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	}
	return exec.Command(bin, args...)
}

func findPGBin(t *testing.T, name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		t.Fatalf("the Postgres restart run needs %s: install PostgreSQL's server package (apt-get install postgresql)", name)
	}
	return matches[len(matches)-1]
}
