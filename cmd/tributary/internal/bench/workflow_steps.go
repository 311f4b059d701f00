package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// WorkflowStepsOptions configures RunWorkflowSteps.
type WorkflowStepsOptions struct {
	// Waiting is how many workflows wait for a signal at once; each is
	// signalled in turn, the others still waiting.
	Waiting int
	// Steps is how many steps the overhead phase's task runs (each a Step,
	// then each a StepTx), and how many plain calls the baseline makes.
	Steps int
	// Sleepers is how many tasks Sleep at once, each for Sleep.
	Sleepers int
	Sleep    time.Duration
	Logger   *slog.Logger
}

// WorkflowStepsResult is what RunWorkflowSteps measured.
type WorkflowStepsResult struct {
	Waiting   int           `json:"waiting"`
	SignalP50 time.Duration `json:"signal_resume_p50_ns"`
	SignalP99 time.Duration `json:"signal_resume_p99_ns"`
	SignalMax time.Duration `json:"signal_resume_max_ns"`

	Steps          int           `json:"steps"`
	PlainP50       time.Duration `json:"plain_call_p50_ns"`
	StepP50        time.Duration `json:"step_p50_ns"`
	StepP99        time.Duration `json:"step_p99_ns"`
	StepTxP50      time.Duration `json:"step_tx_p50_ns"`
	StepTxP99      time.Duration `json:"step_tx_p99_ns"`
	StepOverhead   time.Duration `json:"step_overhead_p50_ns"`
	StepTxOverhead time.Duration `json:"step_tx_overhead_p50_ns"`

	Sleepers int           `json:"sleepers"`
	Sleep    time.Duration `json:"sleep_ns"`
	LateP50  time.Duration `json:"sleep_late_p50_ns"`
	LateP99  time.Duration `json:"sleep_late_p99_ns"`
	LateMax  time.Duration `json:"sleep_late_max_ns"`
}

// The benchmark's job kinds.
type (
	wf2WaitArgs  struct{}
	wf2StepsArgs struct {
		N  int  `json:"n"`
		Tx bool `json:"tx"`
	}
	wf2PlainArgs struct {
		N int `json:"n"`
	}
	wf2SleepArgs struct {
		MS int64 `json:"ms"`
	}
)

func (wf2WaitArgs) Kind() string  { return "bench.wf2.wait" }
func (wf2StepsArgs) Kind() string { return "bench.wf2.steps" }
func (wf2PlainArgs) Kind() string { return "bench.wf2.plain" }
func (wf2SleepArgs) Kind() string { return "bench.wf2.sleep" }

// wf2Work is the work of a step and of the baseline's plain call: small,
// so what is measured is the step's recording.
func wf2Work(i int) (int, error) { return i * i, nil }

type wf2Observer struct {
	resumed chan wf2Resume
	calls   chan []time.Duration
	late    chan time.Duration
}

type wf2Resume struct {
	workflow string
	at       time.Time
}

type wf2WaitWorker struct {
	river.WorkerDefaults[wf2WaitArgs]
	o *wf2Observer
}

func (w *wf2WaitWorker) Work(ctx context.Context, job *river.Job[wf2WaitArgs]) error {
	if _, err := workflow.AwaitSignal[int](ctx, "go", 0); err != nil {
		return err
	}
	ref, _ := workflow.Current(ctx)
	w.o.resumed <- wf2Resume{workflow: ref.WorkflowID, at: time.Now()}
	return nil
}

type wf2StepsWorker struct {
	river.WorkerDefaults[wf2StepsArgs]
	o *wf2Observer
}

func (w *wf2StepsWorker) Work(ctx context.Context, job *river.Job[wf2StepsArgs]) error {
	return w.o.timeCalls(job.Args.N, func(i int) error {
		name := fmt.Sprint("s", i)
		var err error
		if job.Args.Tx {
			_, err = workflow.StepTx(ctx, name, func(ctx context.Context, tx pgx.Tx) (int, error) { return wf2Work(i) })
		} else {
			_, err = workflow.Step(ctx, name, func(ctx context.Context) (int, error) { return wf2Work(i) })
		}
		return err
	})
}

// timeCalls runs call n times and sends their durations to o.calls.
func (o *wf2Observer) timeCalls(n int, call func(i int) error) error {
	ds := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		if err := call(i); err != nil {
			return err
		}
		ds = append(ds, time.Since(start))
	}
	o.calls <- ds
	return nil
}

type wf2PlainWorker struct {
	river.WorkerDefaults[wf2PlainArgs]
	o *wf2Observer
}

func (w *wf2PlainWorker) Work(ctx context.Context, job *river.Job[wf2PlainArgs]) error {
	return w.o.timeCalls(job.Args.N, func(i int) error {
		_, err := wf2Work(i)
		return err
	})
}

type wf2SleepWorker struct {
	river.WorkerDefaults[wf2SleepArgs]
	o *wf2Observer
}

func (w *wf2SleepWorker) Work(ctx context.Context, job *river.Job[wf2SleepArgs]) error {
	start, err := workflow.Step(ctx, "start", func(ctx context.Context) (time.Time, error) { return time.Now(), nil })
	if err != nil {
		return err
	}
	if err := workflow.Sleep(ctx, "nap", time.Duration(job.Args.MS)*time.Millisecond); err != nil {
		return err
	}
	w.o.late <- time.Since(start.Add(time.Duration(job.Args.MS) * time.Millisecond))
	return nil
}

// RunWorkflowSteps measures Workflows II on a fresh schema with one
// runtime: (a) signal to resume: Waiting workflows wait for a signal
// (snoozed), then each is signalled in turn and the time from the send to
// the task running past its AwaitSignal is taken; (b) a durable step's
// cost: one task runs Steps Steps, then one runs Steps StepTxs, each timed
// around the call, against the same work called plainly in a River job;
// (c) sleep lateness: Sleepers tasks Sleep for Sleep and report how late
// they ran past their wake-up time. It writes a table to w.
func RunWorkflowSteps(ctx context.Context, pool *pgxpool.Pool, o WorkflowStepsOptions, w io.Writer) (*WorkflowStepsResult, error) {
	schema, drop, err := TempSchema(ctx, pool, "bench_wf2")
	if err != nil {
		return nil, err
	}
	defer drop()
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	obs := &wf2Observer{resumed: make(chan wf2Resume, o.Waiting), calls: make(chan []time.Duration, 3), late: make(chan time.Duration, o.Sleepers)}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: schema, Logger: logger, Middleware: []rivertype.Middleware{coord.Middleware()},
		// Woken by notifications, not by polling: the poll interval is
		// River's default.
		FetchCooldown: 2 * time.Millisecond, FetchPollInterval: time.Second,
		Queues: map[string]int{river.QueueDefault: max(o.Waiting, o.Sleepers, 10)},
	})
	if err != nil {
		return nil, err
	}
	queue.AddWorker(rt, &wf2WaitWorker{o: obs})
	queue.AddWorker(rt, &wf2StepsWorker{o: obs})
	queue.AddWorker(rt, &wf2PlainWorker{o: obs})
	queue.AddWorker(rt, &wf2SleepWorker{o: obs})
	if err := coord.Register(rt); err != nil {
		return nil, err
	}
	if err := rt.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
	}()
	wfc := workflow.NewClient(rt.Client)
	res := &WorkflowStepsResult{Waiting: o.Waiting, Steps: o.Steps, Sleepers: o.Sleepers, Sleep: o.Sleep}

	// (a) signal -> resume.
	ids := make([]string, o.Waiting)
	for i := range ids {
		wf := workflow.New("bench.wait", nil)
		wf.Add("wait", wf2WaitArgs{}, nil)
		r, err := wfc.Insert(ctx, wf)
		if err != nil {
			return nil, err
		}
		ids[i] = r.ID
	}
	if err := stepsWaitFor(ctx, time.Minute, func() (bool, error) {
		n, err := riverjob.CountJobs(ctx, pool, schema, rivertype.JobStateScheduled)
		return n == int64(o.Waiting), err
	}); err != nil {
		return nil, fmt.Errorf("waiting for %d workflows to wait: %w", o.Waiting, err)
	}
	lat := make([]time.Duration, 0, o.Waiting)
	for _, id := range ids {
		start := time.Now()
		if _, err := wfc.Signal(ctx, id, "go", 1, nil); err != nil {
			return nil, err
		}
		select {
		case r := <-obs.resumed:
			if r.workflow != id {
				return nil, fmt.Errorf("workflow %s resumed, %s was signalled", r.workflow, id)
			}
			lat = append(lat, r.at.Sub(start))
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("workflow %s did not resume within a minute of its signal", id)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.SignalP50, res.SignalP99, res.SignalMax = stepsPctl(lat, 0.50), stepsPctl(lat, 0.99), slices.Max(lat)

	// (b) a step's overhead.
	run := func(args river.JobArgs, asTask bool) ([]time.Duration, error) {
		if asTask {
			wf := workflow.New("bench.steps", nil)
			wf.Add("steps", args, nil)
			if _, err := wfc.Insert(ctx, wf); err != nil {
				return nil, err
			}
		} else if _, err := rt.Enqueue(ctx, args, nil); err != nil {
			return nil, err
		}
		select {
		case ds := <-obs.calls:
			return ds, nil
		case <-time.After(5 * time.Minute):
			return nil, fmt.Errorf("%s did not finish", args.Kind())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	plain, err := run(wf2PlainArgs{N: o.Steps}, false)
	if err != nil {
		return nil, err
	}
	steps, err := run(wf2StepsArgs{N: o.Steps}, true)
	if err != nil {
		return nil, err
	}
	stepTxs, err := run(wf2StepsArgs{N: o.Steps, Tx: true}, true)
	if err != nil {
		return nil, err
	}
	res.PlainP50 = stepsPctl(plain, 0.5)
	res.StepP50, res.StepP99 = stepsPctl(steps, 0.5), stepsPctl(steps, 0.99)
	res.StepTxP50, res.StepTxP99 = stepsPctl(stepTxs, 0.5), stepsPctl(stepTxs, 0.99)
	res.StepOverhead, res.StepTxOverhead = res.StepP50-res.PlainP50, res.StepTxP50-res.PlainP50

	// (c) sleep lateness.
	for range o.Sleepers {
		wf := workflow.New("bench.sleep", nil)
		wf.Add("sleep", wf2SleepArgs{MS: o.Sleep.Milliseconds()}, nil)
		if _, err := wfc.Insert(ctx, wf); err != nil {
			return nil, err
		}
	}
	late := make([]time.Duration, 0, o.Sleepers)
	for range o.Sleepers {
		select {
		case d := <-obs.late:
			late = append(late, d)
		case <-time.After(o.Sleep + time.Minute):
			return nil, fmt.Errorf("a sleeping task did not wake within a minute of its wake-up")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.LateP50, res.LateP99, res.LateMax = stepsPctl(late, 0.5), stepsPctl(late, 0.99), slices.Max(late)

	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	fmt.Fprintf(w, "workflow steps, signals and sleeps (one runtime, fetch cooldown 2 ms, poll interval 1 s)\n\n")
	fmt.Fprintln(w, "| measure | p50 | p99 | max |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| signal -> resume, %d workflows waiting | %s | %s | %s |\n", o.Waiting, ms(res.SignalP50), ms(res.SignalP99), ms(res.SignalMax))
	fmt.Fprintf(w, "| plain call (baseline), %d calls | %s | - | - |\n", o.Steps, ms(res.PlainP50))
	fmt.Fprintf(w, "| Step, %d in one task | %s | %s | - |\n", o.Steps, ms(res.StepP50), ms(res.StepP99))
	fmt.Fprintf(w, "| StepTx, %d in one task | %s | %s | - |\n", o.Steps, ms(res.StepTxP50), ms(res.StepTxP99))
	fmt.Fprintf(w, "| sleep %s lateness, %d tasks | %s | %s | %s |\n", o.Sleep, o.Sleepers, ms(res.LateP50), ms(res.LateP99), ms(res.LateMax))
	fmt.Fprintf(w, "\nstep overhead over the plain call at p50: Step %s, StepTx %s\n", ms(res.StepOverhead), ms(res.StepTxOverhead))
	return res, nil
}

// stepsPctl is the q-quantile (nearest rank) of ds.
func stepsPctl(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*q+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// stepsWaitFor polls cond every 10 ms until it holds or timeout passes.
func stepsWaitFor(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
