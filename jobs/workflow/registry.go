package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
)

// BuildFunc adds a named workflow's tasks to wf from the JSON input it was
// started with. A bad input is an error saying what is wrong with it.
type BuildFunc func(wf *Workflow, input json.RawMessage) error

// Registry holds named workflow builders, so a workflow can be started by
// name from JSON (the CLI's `workflows start NAME JSON`, the dashboard). It
// is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	builders map[string]BuildFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{builders: map[string]BuildFunc{}} }

// Register adds a builder under name, which becomes the name of the
// workflows it builds. A name registered twice is an error.
func (r *Registry) Register(name string, build BuildFunc) error {
	if err := checkName("workflow name", name); err != nil {
		return err
	}
	if build == nil {
		return fmt.Errorf("workflow %q: BuildFunc is nil", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.builders[name]; dup {
		return fmt.Errorf("workflow %q is registered twice", name)
	}
	r.builders[name] = build
	return nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.builders))
	for n := range r.builders {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// UnknownWorkflowError is a name no builder is registered under.
type UnknownWorkflowError struct {
	Name       string
	Registered []string
}

func (e *UnknownWorkflowError) Error() string {
	return fmt.Sprintf("unknown workflow %q: registered are %v", e.Name, e.Registered)
}

// InputError is input a builder refused.
type InputError struct {
	Workflow string
	Err      error
}

func (e *InputError) Error() string {
	return fmt.Sprintf("invalid input for workflow %q: %v", e.Workflow, e.Err)
}

func (e *InputError) Unwrap() error { return e.Err }

// Build builds the workflow registered under name from input (JSON; empty
// means null) with opts (may be nil), and validates it. The input is kept
// on the workflow's row (Details.Input). An unknown name is an
// *UnknownWorkflowError, input that is not JSON or that the builder
// refuses an *InputError, a definition that does not validate a
// *ValidationError.
func (r *Registry) Build(name string, input json.RawMessage, opts *Opts) (*Workflow, error) {
	r.mu.RLock()
	build := r.builders[name]
	r.mu.RUnlock()
	if build == nil {
		return nil, &UnknownWorkflowError{Name: name, Registered: r.Names()}
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if !json.Valid(input) {
		return nil, &InputError{Workflow: name, Err: fmt.Errorf("not JSON: %.60q", input)}
	}
	wf := New(name, opts)
	wf.input = append(json.RawMessage(nil), input...)
	if err := build(wf, input); err != nil {
		return nil, &InputError{Workflow: name, Err: err}
	}
	if err := wf.Validate(); err != nil {
		return nil, err
	}
	return wf, nil
}

// Start builds the workflow registered under name from input and inserts
// it in a transaction of its own.
func (c *Client) Start(ctx context.Context, r *Registry, name string, input json.RawMessage, opts *Opts) (*InsertResult, error) {
	wf, err := r.Build(name, input, opts)
	if err != nil {
		return nil, err
	}
	return c.Insert(ctx, wf)
}

// StartTx is Start in the caller's transaction.
func (c *Client) StartTx(ctx context.Context, tx pgx.Tx, r *Registry, name string, input json.RawMessage, opts *Opts) (*InsertResult, error) {
	wf, err := r.Build(name, input, opts)
	if err != nil {
		return nil, err
	}
	return c.InsertTx(ctx, tx, wf)
}
