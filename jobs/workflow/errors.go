package workflow

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// Kinds of *ValidationError, for errors.Is.
var (
	ErrInvalidWorkflow   = errors.New("invalid workflow")
	ErrEmptyWorkflow     = errors.New("empty workflow")
	ErrTooManyTasks      = errors.New("too many tasks")
	ErrInvalidTask       = errors.New("invalid task")
	ErrDuplicateTask     = errors.New("duplicate task")
	ErrUnknownDependency = errors.New("unknown dependency")
	ErrCycle             = errors.New("dependency cycle")
)

// ValidationError is a workflow definition that cannot be inserted. Nothing
// was written.
type ValidationError struct {
	Workflow string // the workflow's name
	Task     string // the task at fault; empty when it is the workflow's
	Kind     error  // ErrEmptyWorkflow, ErrCycle, ...
	Detail   string
}

func (e *ValidationError) Error() string {
	if e.Task == "" {
		return fmt.Sprintf("workflow %q %s", e.Workflow, e.Detail)
	}
	return fmt.Sprintf("workflow %q: task %q %s", e.Workflow, e.Task, e.Detail)
}

// Unwrap returns the error's kind.
func (e *ValidationError) Unwrap() error { return e.Kind }

// ErrKeyConflict is the kind of *ConflictError.
var ErrKeyConflict = errors.New("workflow key taken")

// ConflictError is an insert whose caller key (Opts.ID) another workflow
// has. Nothing was written.
type ConflictError struct {
	Key        string
	ExistingID string    // the workflow that has the key
	Name       string    // its name
	Status     Status    // its status when the insert looked
	CreatedAt  time.Time // when it was started
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("workflow key %q is taken by workflow %s (%s, %s, started %s)", e.Key, e.ExistingID, e.Name, e.Status, e.CreatedAt.Format(time.RFC3339))
}

// Unwrap returns ErrKeyConflict.
func (e *ConflictError) Unwrap() error { return ErrKeyConflict }

// ErrNotFound is the kind of *NotFoundError.
var ErrNotFound = errors.New("workflow not found")

// NotFoundError is a workflow id or key that names no stored workflow.
type NotFoundError struct {
	Ref string // the id or key asked for
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no workflow with id or key %q", e.Ref)
}

// Unwrap returns ErrNotFound.
func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// Errors of operator actions, for errors.Is.
var (
	// ErrFinished: Cancel of a workflow that already finished.
	ErrFinished = errors.New("workflow already finished")
	// ErrNothingToRetry: Retry found no task its mode would run again.
	ErrNothingToRetry = errors.New("nothing to retry")
	// ErrTaskActive: Retry would re-run a task that is still active.
	ErrTaskActive = errors.New("task still active")
)

// Errors of the task API, for errors.Is.
var (
	// ErrNotInTask: Output, SetOutput or Current called outside a
	// workflow task's Work (or on a runtime without the Coordinator's
	// middleware).
	ErrNotInTask = errors.New("not inside a workflow task")
	// ErrNoOutput: the task asked for has not completed, or completed
	// without recording an output.
	ErrNoOutput = errors.New("no output")
	// ErrUnknownTask: the task asked for is not a task of the workflow.
	ErrUnknownTask = errors.New("unknown task")
)

// OutputTooLargeError is an output bigger than the Coordinator's
// OutputMaxBytes.
type OutputTooLargeError struct {
	Task  string
	Bytes int
	Max   int
}

func (e *OutputTooLargeError) Error() string {
	return "output of task " + strconv.Quote(e.Task) + " is " + strconv.Itoa(e.Bytes) + " bytes of JSON, more than the limit of " + strconv.Itoa(e.Max)
}

// PanicError is a task's panic, recovered by the Coordinator's middleware
// and returned to River as the attempt's error (with the stack, which River
// would otherwise lose), so it is retried like any failed attempt.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("task panicked: %v\n%s", e.Value, e.Stack)
}

// ownRecord marks a failure of tributary's own reads and writes inside a
// running task (a step's record, a sleep's, a signal wait's, the outputs of
// its dependencies), as opposed to a failure of the task's own code. A task
// that returns one which is the database connection failing runs again
// without spending an attempt (see middleware.Work).
var ownRecord = riverjob.OwnRecord
