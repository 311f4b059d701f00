package workflow_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

type ChargeArgs struct {
	Order string `json:"order"`
}

func (ChargeArgs) Kind() string { return "example.charge" }

// Tasks of different workflows share a limit key: the charges of one
// customer run one at a time, across every worker process, while the
// other tasks of the workflows run as they are released. The limit is
// declared once (the front door takes it as Config.Limits); each task
// names its key.
func ExampleTaskOpts_limitKey() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	lim, err := limits.New(limits.Config{Schema: schema, Limits: []limits.Limit{
		{Name: "charges-per-customer", Kind: ChargeArgs{}.Kind(), Max: 1},
	}})
	if err != nil {
		panic(err)
	}
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:     schema,
		Queues:     map[string]int{river.QueueDefault: 10},
		Middleware: []rivertype.Middleware{coord.Middleware(), lim.Middleware()},
	})
	if err != nil {
		panic(err)
	}
	var running, most atomic.Int32
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[ChargeArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(50 * time.Millisecond) // the payment provider's call
		return nil
	}))
	queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[ReserveArgs]) error { return nil }))
	if err := coord.Register(rt); err != nil {
		panic(err)
	}
	if _, err := lim.Register(rt); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	wfc := workflow.NewClient(rt.Client)
	var ids []string
	for _, order := range []string{"o-1", "o-2", "o-3"} {
		wf := workflow.New("checkout", nil)
		wf.Add("reserve", ReserveArgs{SKU: "mug"}, nil)
		wf.Add("charge", ChargeArgs{Order: order}, &workflow.TaskOpts{Deps: []string{"reserve"}, LimitKey: "customer-7"})
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := wfc.InsertTx(ctx, tx, wf)
			if err == nil {
				ids = append(ids, res.ID)
			}
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	for _, id := range ids {
		for {
			d, err := wfc.Get(ctx, id)
			if err != nil {
				panic(err)
			}
			if d.Status != workflow.StatusRunning {
				fmt.Println(d.Name, d.Status)
				break
			}
			select {
			case <-ctx.Done():
				panic("the workflows did not finish in time")
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	fmt.Println("most charges of customer-7 running at once:", most.Load())
	// Output:
	// checkout completed
	// checkout completed
	// checkout completed
	// most charges of customer-7 running at once: 1
}
