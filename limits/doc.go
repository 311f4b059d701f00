// Package limits is tributary's flow control: at most N jobs running at
// once across every worker process, globally, per queue, per kind, or per
// partition key (a field of the job's args, such as a customer id).
//
// A limited job waits in River's pending state, holding no worker slot and
// spending no attempt, until an admitter (a service in every worker
// process, serialised per limit in the database) makes it available; its
// slot is its state, so a crashed process's slots come back when liveness
// makes its jobs available again. docs/limits.md is the user's page,
// docs/decisions/0030-flow-control.md the design.
//
//	lim, err := limits.New(limits.Config{Limits: []limits.Limit{
//	    {Name: "per-customer-sync", Kind: "sync_customer", KeyArg: "customer_id", Max: 2},
//	}})
//	// lim.Middleware() goes into queue.RuntimeConfig.Middleware (the
//	// front door does this for tributary.Config.Limits), then:
//	err = lim.Register(rt)
package limits
