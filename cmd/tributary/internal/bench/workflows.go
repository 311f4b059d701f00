package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// workflowsInsertBatch is how many diamonds share one inserting
// transaction.
const workflowsInsertBatch = 100

// WorkflowsOptions configures RunWorkflows.
type WorkflowsOptions struct {
	// N is the number of five-task diamonds (a -> b, c, d -> e); the
	// baseline works N*5 plain jobs.
	N int
	// Width is the fan-out of the fan-in workflow (1 -> Width -> 1).
	Width int
	// Length is the number of tasks of the chain.
	Length int
	// Rounds is how many times each measurement runs (the diamonds
	// alternating with their baseline); the median round counts.
	// Defaults to 1.
	Rounds int
	// Logger receives the runtime's and coordinator's errors.
	Logger *slog.Logger
}

// WorkflowsReport is the outcome of RunWorkflows.
type WorkflowsReport struct {
	// Plain and Diamonds are the median rounds of each side; Ratio is the
	// median of the rounds' ratios (diamond tasks/s over plain jobs/s).
	Plain    JobsResult `json:"plain"`
	Diamonds JobsResult `json:"diamonds"`
	Ratio    float64    `json:"ratio"`
	// DiamondRounds holds every round: plain jobs', then the diamonds'.
	DiamondRounds [2][]JobsResult `json:"diamond_rounds"`
	// InsertPlain and InsertDiamonds are the insert rates of the median
	// rounds (jobs/s and tasks/s), for information.
	InsertPlain    float64 `json:"insert_plain_per_sec"`
	InsertDiamonds float64 `json:"insert_diamond_tasks_per_sec"`
	// CPUPerTask is the median rounds' CPU per job or task (plain, then
	// diamonds), in microseconds: this process's and the database
	// backends' (zero when they cannot be read). Unlike the rates, it does
	// not depend on what else the machine runs.
	CPUPerTask [2]CPUPerTask `json:"cpu_per_task_us"`

	FanIn  FanInResult   `json:"fan_in"`
	FanIns []FanInResult `json:"fan_in_rounds"`
	Chain  ChainResult   `json:"chain"`
	Chains []ChainResult `json:"chain_rounds"`
	// RiverChain is the chain's baseline: a chain of bare River jobs, each
	// inserting the next (riverChain), median round; RiverChains every
	// round.
	RiverChain  ChainResult   `json:"chain_river"`
	RiverChains []ChainResult `json:"chain_river_rounds"`

	CPUs         int    `json:"cpus"`
	LoadAvgStart string `json:"load_avg_start"`
	LoadAvgEnd   string `json:"load_avg_end"`
}

// CPUPerTask is CPU per task in microseconds.
type CPUPerTask struct {
	Process  float64 `json:"process"`
	Database float64 `json:"database"`
}

// FanInResult is one run of the 1 -> Width -> 1 workflow.
type FanInResult struct {
	Width int `json:"width"`
	// Start is the time from the last fan-out task's recorded completion to
	// the fan-in task's start (River's attempted_at).
	Start time.Duration `json:"start_ns"`
	// FanOut is the time from the root's completion to the last fan-out
	// task's.
	FanOut time.Duration `json:"fan_out_ns"`
	// Insert is how long inserting the workflow took.
	Insert time.Duration `json:"insert_ns"`
}

// ChainResult is one run of the chain.
type ChainResult struct {
	Length int `json:"length"`
	// P50 and P99 are of the hops: a task's recorded completion to the next
	// task's start.
	P50 time.Duration `json:"hop_p50_ns"`
	P99 time.Duration `json:"hop_p99_ns"`
	Max time.Duration `json:"hop_max_ns"`
}

// RunWorkflows measures workflows against plain River jobs in one run and
// writes a report to w:
//
//   - tasks/s of N five-task diamonds against N*5 plain jobs, both of the
//     demo.noop worker on the same runtime configuration (the coordinator's
//     middleware included), each on a fresh schema, alternating for
//     opts.Rounds rounds;
//   - a 1 -> Width -> 1 fan-in: the last fan-out task's recorded completion
//     to the fan-in task's start;
//   - a chain of Length tasks: per hop, a task's recorded completion to the
//     next task's start; beside it, in each round, a chain of Length bare
//     River jobs, each inserting the next (riverChain).
func RunWorkflows(ctx context.Context, pool *pgxpool.Pool, opts WorkflowsOptions, w io.Writer) (*WorkflowsReport, error) {
	rep := &WorkflowsReport{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg()}
	rounds := max(1, opts.Rounds)
	fmt.Fprintf(w, "load average at start: %s (%d CPUs)\n", rep.LoadAvgStart, rep.CPUs)

	fmt.Fprintf(w, "\n(a) %d five-task diamonds (a -> b,c,d -> e) against %d plain jobs, same worker and runtime\n", opts.N, opts.N*5)
	var insertRates, procCPU, dbCPU [2][]float64
	for r := 0; r < rounds; r++ {
		for i, fn := range []func(context.Context, *pgxpool.Pool, WorkflowsOptions) (sideResult, error){plainJobs, diamonds} {
			sr, err := fn(ctx, pool, opts)
			if err != nil {
				return nil, err
			}
			res := sr.res
			batches := ""
			if sr.batches > 0 {
				batches = fmt.Sprintf("; %.1f tasks per completion transaction", float64(res.Jobs)/float64(sr.batches))
			}
			fmt.Fprintf(w, "round %d  %-18s %8d tasks in %7.2fs  %8.0f tasks/s  (insert %6.0f/s; %s%s)\n", r+1, res.Name, res.Jobs, res.Duration.Seconds(), res.JobsPerSec, sr.insert, sr.cpu.String(res.Jobs), batches)
			rep.DiamondRounds[i] = append(rep.DiamondRounds[i], res)
			insertRates[i] = append(insertRates[i], sr.insert)
			procCPU[i] = append(procCPU[i], float64(sr.cpu.Self.Microseconds())/float64(res.Jobs))
			dbCPU[i] = append(dbCPU[i], float64(sr.cpu.Database.Microseconds())/float64(res.Jobs))
		}
	}
	rep.CPUPerTask = [2]CPUPerTask{{Process: median(procCPU[0]), Database: median(dbCPU[0])}, {Process: median(procCPU[1]), Database: median(dbCPU[1])}}
	rep.Plain, rep.Diamonds = medianRound(rep.DiamondRounds[0]), medianRound(rep.DiamondRounds[1])
	rep.InsertPlain, rep.InsertDiamonds = median(insertRates[0]), median(insertRates[1])
	plainRates, diamondRates := make([]float64, rounds), make([]float64, rounds)
	for r := range rounds {
		plainRates[r], diamondRates[r] = rep.DiamondRounds[0][r].JobsPerSec, rep.DiamondRounds[1][r].JobsPerSec
	}
	rep.Ratio = medianRatio(diamondRates, plainRates)
	fmt.Fprintf(w, "median: plain jobs %.0f jobs/s, diamonds %.0f tasks/s, ratio %.2fx (median of the rounds' ratios)\n",
		rep.Plain.JobsPerSec, rep.Diamonds.JobsPerSec, rep.Ratio)
	fmt.Fprintf(w, "median CPU per task: plain jobs process %.0f us + database %.0f us, diamonds process %.0f us + database %.0f us\n",
		rep.CPUPerTask[0].Process, rep.CPUPerTask[0].Database, rep.CPUPerTask[1].Process, rep.CPUPerTask[1].Database)

	fmt.Fprintf(w, "\n(b) fan-in 1 -> %d -> 1\n", opts.Width)
	for r := 0; r < rounds; r++ {
		res, err := fanIn(ctx, pool, opts)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "round %d  fan-in start %s after the last fan-out task (fan-out of %d took %s; insert %s)\n",
			r+1, ms(res.Start), res.Width, res.FanOut.Round(time.Millisecond), res.Insert.Round(time.Millisecond))
		rep.FanIns = append(rep.FanIns, res)
	}
	rep.FanIn = slices.SortedFunc(slices.Values(rep.FanIns), func(a, b FanInResult) int { return int(a.Start - b.Start) })[(rounds-1)/2]
	fmt.Fprintf(w, "median: fan-in start %s after the last fan-out task\n", ms(rep.FanIn.Start))

	fmt.Fprintf(w, "\n(c) chain of %d\n", opts.Length)
	for r := 0; r < rounds; r++ {
		res, err := chain(ctx, pool, opts)
		if err != nil {
			return nil, err
		}
		base, err := riverChain(ctx, pool, opts)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "round %d  hop p50 %s  p99 %s  max %s  (bare River jobs, each inserting the next: p50 %s  p99 %s  max %s)\n",
			r+1, ms(res.P50), ms(res.P99), ms(res.Max), ms(base.P50), ms(base.P99), ms(base.Max))
		rep.Chains = append(rep.Chains, res)
		rep.RiverChains = append(rep.RiverChains, base)
	}
	byP50 := func(a, b ChainResult) int { return int(a.P50 - b.P50) }
	rep.Chain = slices.SortedFunc(slices.Values(rep.Chains), byP50)[(rounds-1)/2]
	rep.RiverChain = slices.SortedFunc(slices.Values(rep.RiverChains), byP50)[(rounds-1)/2]
	fmt.Fprintf(w, "median: hop p50 %s  p99 %s; bare River jobs p50 %s  p99 %s (River's fetch cooldown %s bounds both from below)\n",
		ms(rep.Chain.P50), ms(rep.Chain.P99), ms(rep.RiverChain.P50), ms(rep.RiverChain.P99), riverBenchFetchCooldown)

	rep.LoadAvgEnd = loadAvg()
	fmt.Fprintf(w, "\nload average at end: %s\n", rep.LoadAvgEnd)
	return rep, nil
}

// loadAvg is the first three fields of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// workflowSide is a runtime with the coordinator's middleware and the demo
// workers on a fresh schema, not started, on a pool of its own (so the CPU
// of its database backends can be told apart).
type workflowSide struct {
	rt     *queue.Runtime
	coord  *workflow.Coordinator
	client *workflow.Client
	pool   *cpuPool
	drop   func()
}

func newWorkflowSide(ctx context.Context, base *pgxpool.Pool, prefix string, logger *slog.Logger) (*workflowSide, error) {
	cp, err := newCPUPool(ctx, base)
	if err != nil {
		return nil, err
	}
	pool := cp.Pool
	schema, dropSchema, err := TempSchema(ctx, pool, prefix)
	if err != nil {
		pool.Close()
		return nil, err
	}
	drop := func() { dropSchema(); pool.Close() }
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema, Logger: logger, RepairInterval: -1})
	if err != nil {
		drop()
		return nil, err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:            schema,
		Logger:            logger,
		FetchCooldown:     riverBenchFetchCooldown,
		FetchPollInterval: riverBenchFetchPollInterval,
		Queues:            map[string]int{river.QueueDefault: riverBenchMaxWorkers},
		Middleware:        []rivertype.Middleware{coord.Middleware()},
	})
	if err != nil {
		drop()
		return nil, err
	}
	demojobs.Register(rt)
	return &workflowSide{rt: rt, coord: coord, client: workflow.NewClient(rt.Client), pool: cp, drop: drop}, nil
}

// run starts the runtime, waits until n jobs completed, stops it and
// returns the time from the start to the last completion, with the CPU
// this process and the side's database backends used meanwhile.
func (s *workflowSide) run(ctx context.Context, n int) (time.Duration, cpuUse, error) {
	events, cancel := s.rt.River().SubscribeConfig(subscribeConfig(n))
	defer cancel()
	mark := s.pool.mark()
	start := time.Now()
	if err := s.rt.Start(ctx); err != nil {
		return 0, cpuUse{}, err
	}
	last, werr := waitCompleted(ctx, events, n)
	var use cpuUse
	use.Self, use.Database = s.pool.since(mark)
	s.stop(ctx)
	return last.Sub(start), use, werr
}

// cpuUse is CPU spent on a benchmark side's work: by this process (River,
// tributary, the benchmark's waiting) and by its database backends.
type cpuUse struct {
	Self     time.Duration `json:"process_cpu_ns"`
	Database time.Duration `json:"database_cpu_ns"`
}

func (u cpuUse) String(n int) string {
	per := func(d time.Duration) string { return fmt.Sprintf("%.0f us", float64(d.Microseconds())/float64(n)) }
	db := "unknown"
	if u.Database > 0 {
		db = per(u.Database)
	}
	return fmt.Sprintf("CPU per task: process %s, database %s", per(u.Self), db)
}

func (s *workflowSide) stop(ctx context.Context) {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = s.rt.Stop(stopCtx)
}

// plainJobs works N*5 demo.noop jobs.
func plainJobs(ctx context.Context, pool *pgxpool.Pool, opts WorkflowsOptions) (sideResult, error) {
	s, err := newWorkflowSide(ctx, pool, "bench_wf_plain", opts.Logger)
	if err != nil {
		return sideResult{}, err
	}
	defer s.drop()
	n := opts.N * 5
	t0 := time.Now()
	if err := insertNoops(ctx, s.rt.River(), n); err != nil {
		return sideResult{}, err
	}
	ins := rate(n, time.Since(t0))
	d, use, err := s.run(ctx, n)
	if err != nil {
		return sideResult{}, err
	}
	return sideResult{res: result("plain jobs", n, d), insert: ins, cpu: use}, nil
}

// sideResult is one side's round of the diamonds part.
type sideResult struct {
	res     JobsResult
	insert  float64 // rows/s of the insert before the run
	cpu     cpuUse
	batches int64 // the coordinator's completion transactions (diamonds)
}

func diamondWorkflow() *workflow.Workflow {
	wf := workflow.New("bench.diamond", nil)
	wf.Add("a", demojobs.NoopArgs{}, nil)
	for _, t := range []string{"b", "c", "d"} {
		wf.Add(t, demojobs.NoopArgs{}, &workflow.TaskOpts{Deps: []string{"a"}})
	}
	wf.Add("e", demojobs.NoopArgs{}, &workflow.TaskOpts{Deps: []string{"b", "c", "d"}})
	return wf
}

// diamonds works N five-task diamonds of demo.noop tasks.
func diamonds(ctx context.Context, pool *pgxpool.Pool, opts WorkflowsOptions) (sideResult, error) {
	s, err := newWorkflowSide(ctx, pool, "bench_wf_diamond", opts.Logger)
	if err != nil {
		return sideResult{}, err
	}
	defer s.drop()
	t0 := time.Now()
	for left := opts.N; left > 0; left -= workflowsInsertBatch {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			for range min(left, workflowsInsertBatch) {
				if _, err := s.client.InsertTx(ctx, tx, diamondWorkflow()); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return sideResult{}, fmt.Errorf("error inserting benchmark diamonds: %w", err)
		}
	}
	n := opts.N * 5
	ins := rate(n, time.Since(t0))
	d, use, err := s.run(ctx, n)
	if err != nil {
		return sideResult{}, err
	}
	return sideResult{res: result("diamond workflows", n, d), insert: ins, cpu: use, batches: s.coord.Stats().Batches}, nil
}

// runOne inserts wf, works it until it finished and returns its tasks and
// how long the insert took.
func runOne(ctx context.Context, pool *pgxpool.Pool, prefix string, opts WorkflowsOptions, wf *workflow.Workflow) (*workflow.Details, time.Duration, error) {
	s, err := newWorkflowSide(ctx, pool, prefix, opts.Logger)
	if err != nil {
		return nil, 0, err
	}
	defer s.drop()
	t0 := time.Now()
	res, err := s.client.Insert(ctx, wf)
	if err != nil {
		return nil, 0, err
	}
	insert := time.Since(t0)
	if err := s.rt.Start(ctx); err != nil {
		return nil, 0, err
	}
	defer s.stop(ctx)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		sum, err := s.client.Summary(ctx, res.ID)
		if err != nil {
			return nil, 0, err
		}
		if sum.Status != workflow.StatusRunning {
			if sum.Status != workflow.StatusCompleted {
				return nil, 0, fmt.Errorf("benchmark workflow %s ended %s", res.ID, sum.Status)
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("benchmark workflow %s not finished after 10 minutes: %+v", res.ID, sum.Counts)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	d, err := s.client.Get(ctx, res.ID)
	return d, insert, err
}

// fanIn runs root -> Width leaves -> sink.
func fanIn(ctx context.Context, pool *pgxpool.Pool, opts WorkflowsOptions) (FanInResult, error) {
	wf := workflow.New("bench.fanin", nil)
	wf.Add("root", demojobs.NoopArgs{}, nil)
	leaves := make([]string, opts.Width)
	for i := range leaves {
		leaves[i] = fmt.Sprintf("leaf-%d", i)
		wf.Add(leaves[i], demojobs.NoopArgs{}, &workflow.TaskOpts{Deps: []string{"root"}})
	}
	wf.Add("sink", demojobs.NoopArgs{}, &workflow.TaskOpts{Deps: leaves})
	d, insert, err := runOne(ctx, pool, "bench_wf_fanin", opts, wf)
	if err != nil {
		return FanInResult{}, err
	}
	var rootDone, lastLeaf, sinkStart time.Time
	for _, t := range d.Tasks {
		if t.FinishedAt == nil || t.StartedAt == nil {
			return FanInResult{}, fmt.Errorf("task %s of the fan-in has no recorded start or finish", t.Name)
		}
		switch {
		case t.Name == "root":
			rootDone = *t.FinishedAt
		case t.Name == "sink":
			sinkStart = *t.StartedAt
		case t.FinishedAt.After(lastLeaf):
			lastLeaf = *t.FinishedAt
		}
	}
	return FanInResult{Width: opts.Width, Start: sinkStart.Sub(lastLeaf), FanOut: lastLeaf.Sub(rootDone), Insert: insert}, nil
}

// chain runs Length tasks, each depending on the one before.
func chain(ctx context.Context, pool *pgxpool.Pool, opts WorkflowsOptions) (ChainResult, error) {
	wf := workflow.New("bench.chain", nil)
	name := func(i int) string { return fmt.Sprintf("step-%d", i) }
	for i := range opts.Length {
		var to *workflow.TaskOpts
		if i > 0 {
			to = &workflow.TaskOpts{Deps: []string{name(i - 1)}}
		}
		wf.Add(name(i), demojobs.NoopArgs{}, to)
	}
	d, _, err := runOne(ctx, pool, "bench_wf_chain", opts, wf)
	if err != nil {
		return ChainResult{}, err
	}
	byName := make(map[string]workflow.TaskInfo, len(d.Tasks))
	for _, t := range d.Tasks {
		if t.FinishedAt == nil || t.StartedAt == nil {
			return ChainResult{}, fmt.Errorf("task %s of the chain has no recorded start or finish", t.Name)
		}
		byName[t.Name] = t
	}
	hops := make([]time.Duration, 0, opts.Length-1)
	for i := 1; i < opts.Length; i++ {
		hops = append(hops, byName[name(i)].StartedAt.Sub(*byName[name(i-1)].FinishedAt))
	}
	return hopStats(opts.Length, hops), nil
}
