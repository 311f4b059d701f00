// Package workflow runs DAGs of River jobs: named tasks, each a normal River
// job (any args, any worker), with dependencies, inserted together in the
// caller's transaction. A task waits in River's pending state until its
// dependencies finished and is released in the transaction that records
// the last of them; tasks read their dependencies' outputs; per-task
// policies say what a failed dependency does; Cancel and Retry act on a
// whole workflow. The record (tributary_workflow, tributary_workflow_task)
// outlives River's job retention.
//
// App code:
//
//	wfc := workflow.NewClient(qc) // a *queue.Client
//	wf := workflow.New("order", &workflow.Opts{ID: "order-42"})
//	wf.Add("charge", ChargeArgs{OrderID: "42"}, nil)
//	wf.Add("ship", ShipArgs{OrderID: "42"}, &workflow.TaskOpts{Deps: []string{"charge"}})
//	wf.Add("refund", RefundArgs{OrderID: "42"}, &workflow.TaskOpts{RunIf: workflow.AnyFailed("ship")})
//	res, err := wfc.InsertTx(ctx, tx, wf) // with the order row, in one transaction
//
// Worker process:
//
//	coord, _ := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema})
//	cfg.Middleware = append(cfg.Middleware, coord.Middleware()) // queue.RuntimeConfig
//	rt, _ := queue.NewRuntime(pool, cfg)
//	queue.AddWorker(rt, &ShipWorker{})
//	_ = coord.Register(rt)
//
//	func (w *ShipWorker) Work(ctx context.Context, job *river.Job[ShipArgs]) error {
//		charge, err := workflow.Output[ChargeResult](ctx, "charge")
//		...
//		return workflow.SetOutput(ctx, Shipment{Tracking: t})
//	}
//
// Inside a task, state that survives retries, crashes and restarts: Step
// and StepTx (recorded once per run, by name), Sleep and AwaitSignal (the
// job snoozes; no worker slot is held), Expand (tasks added at run time),
// RunChild (a child workflow waited for like a dependency). Client.SignalTx
// sends a signal in the caller's transaction; Opts.ConcurrencyKey bounds how
// many workflows of a key run at once.
//
//	quote, err := workflow.Step(ctx, "quote", func(ctx context.Context) (Quote, error) { ... })
//	approval, err := workflow.AwaitSignal[Approval](ctx, "approve", 48*time.Hour)
//	if err != nil {
//		return err // a *WaitError while it waits
//	}
//
// See docs/ARCHITECTURE.md ("Workflows") for the tables, the release of
// dependents, the policies and how waits sit on River's snooze.
package workflow
