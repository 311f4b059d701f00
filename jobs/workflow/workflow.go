package workflow

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"

	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// MaxTasks is the most tasks one workflow may have. A workflow is inserted
// in one transaction, its task rows in one statement, and a task that fans
// out releases all its dependents in one statement; the bound keeps each of
// those (and the arrays of dependents stored on a row) to a size that
// commits in well under a second. Split larger work into several workflows.
const MaxTasks = 20_000

// NameMaxLen is the longest workflow name, task name or caller key.
const NameMaxLen = 200

// Status is a workflow's status.
type Status string

// A workflow is running until none of its tasks is pending or active.
// Then it is failed if a task failed, else cancelled if one was cancelled,
// else completed (skipped tasks count as done). Cancel makes it cancelled
// at once; Retry makes it running again.
const (
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Statuses lists every status.
func Statuses() []Status {
	return []Status{StatusRunning, StatusCompleted, StatusFailed, StatusCancelled}
}

// ParseStatus returns the status named s, or an error naming s and the
// valid ones.
func ParseStatus(s string) (Status, error) {
	for _, st := range Statuses() {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("invalid workflow status %q: want one of %v", s, Statuses())
}

// TaskState is the state of one task, kept in tributary's table (River's
// job state adds detail while a task is active).
type TaskState string

const (
	// TaskPending waits for its dependencies; its job is in River's
	// pending state.
	TaskPending TaskState = "pending"
	// TaskActive was released to River: its job is available, running,
	// retryable or scheduled there.
	TaskActive TaskState = "active"
	// TaskCompleted finished successfully.
	TaskCompleted TaskState = "completed"
	// TaskFailed used up its attempts (its job was discarded) or gave up
	// by returning river.JobCancel.
	TaskFailed TaskState = "failed"
	// TaskCancelled was cancelled by an operator (Cancel, or River's
	// JobCancel on its job), or because a dependency failed or was
	// cancelled (DepFailureCancel).
	TaskCancelled TaskState = "cancelled"
	// TaskSkipped did not run and counts as done for its dependents: a
	// dependency failed under DepFailureSkip, or its RunIf condition was
	// false.
	TaskSkipped TaskState = "skipped"
)

// TaskStates lists every task state.
func TaskStates() []TaskState {
	return []TaskState{TaskPending, TaskActive, TaskCompleted, TaskFailed, TaskCancelled, TaskSkipped}
}

// finished reports whether the state is final.
func (s TaskState) finished() bool { return s != TaskPending && s != TaskActive }

// DepFailurePolicy says what a task does when one of its dependencies
// failed or was cancelled.
type DepFailurePolicy string

const (
	// DepFailureCancel cancels the task at once, and with it every task
	// after it whose own policy cancels too. The default.
	DepFailureCancel DepFailurePolicy = "cancel"
	// DepFailureSkip skips the task once all its dependencies finished;
	// skipped counts as done, so its dependents run.
	DepFailureSkip DepFailurePolicy = "skip"
	// DepFailureRun runs the task anyway once all its dependencies
	// finished.
	DepFailureRun DepFailurePolicy = "run"
)

// Condition decides, once every dependency of a task has finished, whether
// the task runs; when it is false the task is skipped. A task with a
// condition is never cancelled because a dependency failed: its condition
// decides. Build one with AnyFailed.
type Condition struct {
	// AnyFailed is true when any of these tasks failed.
	AnyFailed []string `json:"any_failed,omitempty"`
}

// AnyFailed is the condition of a compensation task: it runs when any of the
// given tasks failed (TaskFailed: its attempts were used up or it returned
// river.JobCancel), and is skipped otherwise. The tasks become dependencies
// of the task if they are not already.
//
//	wf.Add("refund", RefundArgs{...}, &workflow.TaskOpts{RunIf: workflow.AnyFailed("ship")})
func AnyFailed(tasks ...string) *Condition {
	return &Condition{AnyFailed: tasks}
}

// eval evaluates the condition on the final states of its tasks.
func (c *Condition) eval(state func(task string) TaskState) bool {
	for _, t := range c.AnyFailed {
		if state(t) == TaskFailed {
			return true
		}
	}
	return false
}

// names returns the tasks the condition reads.
func (c *Condition) names() []string { return c.AnyFailed }

// ConflictPolicy says what InsertTx does when the workflow's caller key
// (Opts.ID) is taken.
type ConflictPolicy int

const (
	// ConflictFail returns a *ConflictError (errors.Is ErrKeyConflict)
	// naming the existing workflow, and writes nothing. The default.
	ConflictFail ConflictPolicy = iota
	// ConflictReturnExisting returns the existing workflow
	// (InsertResult.Existing) and writes nothing.
	ConflictReturnExisting
)

// Opts are a workflow's options.
type Opts struct {
	// ID is the caller's key for the workflow ("order-42"): at most one
	// workflow has it, so starting the same work twice is safe. It is
	// unique among the workflows still stored (retention deletes finished
	// ones). At most NameMaxLen characters.
	//
	// Defaults to none: every insert starts a new workflow.
	ID string

	// OnConflict is what happens when a workflow with ID exists.
	//
	// Defaults to ConflictFail.
	OnConflict ConflictPolicy

	// ConcurrencyKey limits how many workflows of the key run at once
	// ("customer-7"): a workflow inserted while ConcurrencyLimit of them
	// run waits queued, holding no worker slot (its first tasks' jobs are
	// pending), and the workflows waiting for a key start one by one in
	// the order they were inserted as running ones finish or are
	// cancelled. The key is the limit "workflow:" + key of package limits
	// (`tributary limits list`, `tributary limits set workflow:KEY N`).
	// At most NameMaxLen characters. A Retry that makes a finished
	// workflow run again runs at once and holds a slot while it runs.
	//
	// Defaults to none: no limit.
	ConcurrencyKey string

	// ConcurrencyLimit is how many workflows of ConcurrencyKey may run at
	// once: the key's declared max, which each insert declares (the latest
	// wins; workflows of one key should agree on it) and a run-time
	// override replaces.
	//
	// Defaults to 1 when ConcurrencyKey is set.
	ConcurrencyLimit int

	// Attributes are key/value strings to find the workflow by
	// ("customer": "c-42"): ListParams.Attributes, `workflows list --attr`.
	// Tasks add more with SetAttributes. At most MaxAttributes; keys and
	// values at most NameMaxLen characters, keys without '='.
	//
	// Defaults to none.
	Attributes map[string]string
}

// TaskOpts are a task's options.
type TaskOpts struct {
	// Deps are the tasks that must finish before this one runs. Each must
	// be a task of the same workflow, added before or after this one.
	//
	// Defaults to none: the task runs when the workflow is inserted.
	Deps []string

	// OnDepFailure is what the task does when a dependency failed or was
	// cancelled.
	//
	// Defaults to DepFailureCancel.
	OnDepFailure DepFailurePolicy

	// RunIf, when set, decides whether the task runs once its dependencies
	// finished (see Condition); the tasks it names become dependencies.
	//
	// Defaults to none: the task runs when its dependencies completed (and
	// as OnDepFailure says otherwise).
	RunIf *Condition

	// InsertOpts are River's options for the task's job: Queue, Priority,
	// MaxAttempts, Tags, Metadata, ScheduledAt (a task with dependencies
	// whose ScheduledAt is still ahead when they finish waits for it).
	// UniqueOpts and Pending are refused: uniqueness could leave a task
	// without a job of its own, and the workflow decides when a job is
	// pending. Options the args give through InsertOpts() apply as in
	// River, below these.
	//
	// Defaults to River's (and the args').
	InsertOpts *river.InsertOpts

	// Limit names a declared limit (package limits) that governs the
	// task's job whatever its kind and queue, in place of the first limit
	// that matches them. Inserting the workflow fails when the inserting
	// client's limits do not declare it.
	//
	// Defaults to the first declared limit that matches the job's kind and
	// queue, if any.
	Limit string

	// LimitKey is the task's partition key under the limit that governs
	// its job ("customer-7"), in place of the limit's KeyArg or the args'
	// LimitKey(): tasks of any workflows that share a key share its Max.
	// Inserting the workflow fails when no declared limit governs the job.
	//
	// Defaults to the key the limit takes from the args.
	LimitKey string
}

// Task is a task added to a workflow; its Name is what other tasks list in
// their Deps.
type Task struct {
	Name string
}

// taskDef is one task as added.
type taskDef struct {
	name     string
	args     river.JobArgs
	opts     TaskOpts
	position int
	deps     []string        // Deps plus the names RunIf reads, each once
	encoded  json.RawMessage // the args' JSON, set by validate
	metadata json.RawMessage // InsertOpts.Metadata, set by validate

	extraDependents []string // ExpandTask.Dependents
}

// Workflow is a definition: named tasks, each a River job, and their
// dependencies. Build it with New and Add, insert it with
// Client.InsertTx. A Workflow is not safe for concurrent use while it is
// being built.
type Workflow struct {
	name  string
	opts  Opts
	input json.RawMessage
	tasks []*taskDef
}

// New starts the definition of a workflow called name (what listings show
// and filter on; several workflows share a name). opts may be nil.
func New(name string, opts *Opts) *Workflow {
	w := &Workflow{name: name}
	if opts != nil {
		w.opts = *opts
	}
	return w
}

// Name returns the workflow's name.
func (w *Workflow) Name() string { return w.name }

// Opts returns the workflow's options.
func (w *Workflow) Opts() Opts { return w.opts }

// SetOpts replaces the workflow's options.
func (w *Workflow) SetOpts(opts Opts) { w.opts = opts }

// Add adds a task: name is unique within the workflow, args are the job's
// args (any River job kind, worked by its usual worker), opts may be nil.
// Problems are reported by Validate and InsertTx, before anything is
// written.
func (w *Workflow) Add(name string, args river.JobArgs, opts *TaskOpts) Task {
	t := &taskDef{name: name, args: args, position: len(w.tasks)}
	if opts != nil {
		t.opts = *opts
		t.opts.Deps = slices.Clone(opts.Deps)
	}
	w.tasks = append(w.tasks, t)
	return Task{Name: name}
}

// TaskNames returns the task names in the order they were added.
func (w *Workflow) TaskNames() []string {
	out := make([]string, len(w.tasks))
	for i, t := range w.tasks {
		out[i] = t.name
	}
	return out
}

// Validate checks the definition: a name, at least one and at most
// MaxTasks tasks, unique task names, known dependencies, no cycle, valid
// options. The error is a *ValidationError naming the workflow and the
// task; errors.Is tells its kind (ErrEmptyWorkflow, ErrDuplicateTask, ...).
func (w *Workflow) Validate() error {
	_, err := w.validate()
	return err
}

// validate checks the definition and returns the tasks by name.
func (w *Workflow) validate() (map[string]*taskDef, error) {
	if err := checkName("workflow name", w.name); err != nil {
		return nil, w.errf("", ErrInvalidWorkflow, "%v", err)
	}
	if w.opts.ID != "" {
		if err := checkName("key", w.opts.ID); err != nil {
			return nil, w.errf("", ErrInvalidWorkflow, "%v", err)
		}
	}
	if w.opts.ConcurrencyKey != "" {
		if err := checkName("concurrency key", w.opts.ConcurrencyKey); err != nil {
			return nil, w.errf("", ErrInvalidWorkflow, "%v", err)
		}
	}
	if w.opts.ConcurrencyLimit < 0 || (w.opts.ConcurrencyLimit > 0 && w.opts.ConcurrencyKey == "") {
		return nil, w.errf("", ErrInvalidWorkflow, "has invalid ConcurrencyLimit %d: want at least 1, with a ConcurrencyKey", w.opts.ConcurrencyLimit)
	}
	if err := checkAttributes(w.opts.Attributes); err != nil {
		return nil, w.errf("", ErrInvalidWorkflow, "%v", err)
	}
	if w.opts.OnConflict != ConflictFail && w.opts.OnConflict != ConflictReturnExisting {
		return nil, w.errf("", ErrInvalidWorkflow, "invalid OnConflict %d", w.opts.OnConflict)
	}
	if len(w.tasks) == 0 {
		return nil, w.errf("", ErrEmptyWorkflow, "has no tasks")
	}
	if len(w.tasks) > MaxTasks {
		return nil, w.errf("", ErrTooManyTasks, "has %d tasks, more than the %d a workflow may have", len(w.tasks), MaxTasks)
	}
	byName := make(map[string]*taskDef, len(w.tasks))
	for _, t := range w.tasks {
		if err := checkName("task name", t.name); err != nil {
			return nil, w.errf(t.name, ErrInvalidTask, "%v", err)
		}
		if _, dup := byName[t.name]; dup {
			return nil, w.errf(t.name, ErrDuplicateTask, "is added twice")
		}
		byName[t.name] = t
	}
	for _, t := range w.tasks {
		if err := w.validateTask(t, byName); err != nil {
			return nil, err
		}
	}
	if cycle := findCycle(w.tasks, byName); cycle != nil {
		return nil, w.errf(cycle[0], ErrCycle, "is part of a cycle: %s", formatCycle(cycle))
	}
	return byName, nil
}

func (w *Workflow) validateTask(t *taskDef, byName map[string]*taskDef) error {
	if t.args == nil || (reflect.ValueOf(t.args).Kind() == reflect.Pointer && reflect.ValueOf(t.args).IsNil()) {
		return w.errf(t.name, ErrInvalidTask, "has no job args")
	}
	if t.args.Kind() == "" {
		return w.errf(t.name, ErrInvalidTask, "has args of type %T whose Kind() is empty", t.args)
	}
	encoded, err := json.Marshal(t.args)
	if err != nil {
		return w.errf(t.name, ErrInvalidTask, "has args that do not encode to JSON: %v", err)
	}
	t.encoded = encoded
	switch t.opts.OnDepFailure {
	case "":
		t.opts.OnDepFailure = DepFailureCancel
	case DepFailureCancel, DepFailureSkip, DepFailureRun:
	default:
		return w.errf(t.name, ErrInvalidTask, "has invalid OnDepFailure %q: want %q, %q or %q", t.opts.OnDepFailure, DepFailureCancel, DepFailureSkip, DepFailureRun)
	}
	if err := validateInsertOpts(t); err != nil {
		return w.errf(t.name, ErrInvalidTask, "%v", err)
	}
	if err := askLimit(t); err != nil {
		return w.errf(t.name, ErrInvalidTask, "%v", err)
	}
	t.deps = t.deps[:0]
	seen := map[string]bool{}
	for _, d := range t.opts.Deps {
		if seen[d] {
			return w.errf(t.name, ErrInvalidTask, "lists dependency %q twice", d)
		}
		seen[d] = true
		if _, ok := byName[d]; !ok {
			return w.errf(t.name, ErrUnknownDependency, "depends on %q, which is not a task of this workflow", d)
		}
		t.deps = append(t.deps, d)
	}
	if c := t.opts.RunIf; c != nil {
		if len(c.names()) == 0 {
			return w.errf(t.name, ErrInvalidTask, "has a RunIf condition that names no task")
		}
		for _, d := range c.names() {
			if _, ok := byName[d]; !ok {
				return w.errf(t.name, ErrUnknownDependency, "has a RunIf condition on %q, which is not a task of this workflow", d)
			}
			if !seen[d] {
				seen[d] = true
				t.deps = append(t.deps, d)
			}
		}
	}
	return nil
}

func validateInsertOpts(t *taskDef) error {
	o := t.opts.InsertOpts
	t.metadata = json.RawMessage(`{}`)
	if o == nil {
		return nil
	}
	if o.Pending {
		return fmt.Errorf("sets InsertOpts.Pending: the workflow decides when its job is pending")
	}
	if !reflect.ValueOf(o.UniqueOpts).IsZero() {
		return fmt.Errorf("sets InsertOpts.UniqueOpts: a unique job could leave the task without a job of its own")
	}
	if o.Priority != 0 && (o.Priority < 1 || o.Priority > 4) {
		return fmt.Errorf("has invalid priority %d: want 1 to 4", o.Priority)
	}
	if o.MaxAttempts < 0 {
		return fmt.Errorf("has invalid MaxAttempts %d: want at least 1", o.MaxAttempts)
	}
	if o.Queue != "" && !riverjob.ValidQueueName(o.Queue) {
		return fmt.Errorf("has invalid queue %q: want at most 64 lower-case letters and digits, separated by single '_' or '-'", o.Queue)
	}
	for _, tag := range o.Tags {
		if len(tag) > 255 || !riverTag.MatchString(tag) {
			return fmt.Errorf("has invalid tag %q: want 3 to 255 letters, digits, '_' and '-', starting and ending with a letter or digit", tag)
		}
		if isIdentityTag(tag) {
			return fmt.Errorf("has tag %q, which starts like the tags the workflow writes (%q, %q)", tag, tagWorkflowPrefix, tagTaskPrefix)
		}
	}
	if len(o.Metadata) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(o.Metadata, &m); err != nil || m == nil {
			return fmt.Errorf("has InsertOpts.Metadata that is not a JSON object")
		}
		for _, k := range []string{metaWorkflow, metaTask} {
			if _, ok := m[k]; ok {
				return fmt.Errorf("sets InsertOpts.Metadata key %q, which the workflow writes", k)
			}
		}
		t.metadata = o.Metadata
	}
	return nil
}

// askLimit writes the task's Limit and LimitKey into its metadata, where
// the limits' insert middleware reads them (riverjob.LimitMetaAsk). They
// stay on the task's record with the rest of its metadata, so the jobs of
// a retry or a fork ask the same.
func askLimit(t *taskDef) error {
	ask := riverjob.LimitAsk{Limit: t.opts.Limit, Key: t.opts.LimitKey}
	if ask == (riverjob.LimitAsk{}) {
		return nil
	}
	if ask.Limit != "" {
		if err := checkName("Limit", ask.Limit); err != nil {
			return err
		}
	}
	if ask.Key != "" {
		if err := checkName("LimitKey", ask.Key); err != nil {
			return err
		}
	}
	meta := map[string]json.RawMessage{}
	if err := json.Unmarshal(t.metadata, &meta); err != nil {
		return fmt.Errorf("has metadata that is not a JSON object: %v", err)
	}
	meta[riverjob.LimitMetaAsk], _ = json.Marshal(ask)
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	t.metadata = b
	return nil
}

// River's rule for tags (v0.51.2, insert_opts.go; queue names:
// riverjob.ValidQueueName), checked here too so that a bad one is refused
// before anything is written with an error naming the task; River checks
// them again at insert.
var riverTag = regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > NameMaxLen:
		return fmt.Errorf("%s %.20q... is %d characters long, more than %d", what, s, len(s), NameMaxLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q contains a control character", what, s)
		}
	}
	return nil
}

// findCycle returns the tasks of a cycle, first task repeated at the end,
// or nil when the graph is acyclic. The search is iterative (a workflow may
// be a chain of MaxTasks tasks) and visits tasks in the order they were
// added, so the reported cycle is deterministic.
func findCycle(tasks []*taskDef, byName map[string]*taskDef) []string {
	const (
		unvisited = iota
		onStack
		done
	)
	state := make(map[string]int, len(tasks))
	type frame struct {
		t    *taskDef
		next int
	}
	for _, root := range tasks {
		if state[root.name] != unvisited {
			continue
		}
		stack := []frame{{t: root}}
		state[root.name] = onStack
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next == len(top.t.deps) {
				state[top.t.name] = done
				stack = stack[:len(stack)-1]
				continue
			}
			d := top.t.deps[top.next]
			top.next++
			switch state[d] {
			case onStack:
				// The cycle is the stack from d to the top, then d again.
				var cycle []string
				for i := range stack {
					if stack[i].t.name == d {
						for _, f := range stack[i:] {
							cycle = append(cycle, f.t.name)
						}
						break
					}
				}
				return append(cycle, d)
			case unvisited:
				state[d] = onStack
				stack = append(stack, frame{t: byName[d]})
			}
		}
	}
	return nil
}

// formatCycle writes a cycle as dependency arrows: "a" needs "b" needs "a".
func formatCycle(cycle []string) string {
	s := ""
	for i, n := range cycle {
		if i > 0 {
			s += " depends on "
		}
		s += fmt.Sprintf("%q", n)
	}
	return s
}

func (w *Workflow) errf(task string, kind error, format string, args ...any) error {
	return &ValidationError{Workflow: w.name, Task: task, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}
