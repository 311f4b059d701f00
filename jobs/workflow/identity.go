package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// A task's job carries the task's identity (its workflow and name) in two
// River tags, "tributary_wf_<workflow id>" and "tributary_task_<name>",
// rather than in its metadata. River indexes metadata with a GIN index and
// tags with none: every version of a task's job (inserted, released,
// started, completed) wrote four entries for the two metadata keys into
// that index, against one for the empty metadata of a plain job, and the
// index's clean-up was the largest single cost of the database's share of
// a task's completion. Tags also come
// decoded with the job row, so the middleware reads a task's identity
// without parsing JSON.
//
// A name that cannot be a River tag (tags are letters, digits, '_' and '-',
// at most 255 characters) goes into the metadata key tributary_task
// instead; jobs inserted before the tags (both identity keys in metadata)
// are still read.
const (
	tagWorkflowPrefix = "tributary_wf_"
	tagTaskPrefix     = "tributary_task_"
)

// Metadata keys of a task's identity: tributary_task for a name that is not
// tag-safe, both for jobs inserted before the identity tags.
const (
	metaWorkflow = "tributary_workflow"
	metaTask     = "tributary_task"
)

// taskTag is the tag naming task name, and false when the name cannot be
// a tag.
func taskTag(name string) (string, bool) {
	tag := tagTaskPrefix + name
	return tag, len(tag) <= 255 && riverTag.MatchString(tag)
}

// isIdentityTag says whether tag is one of the identity tags.
func isIdentityTag(tag string) bool {
	return strings.HasPrefix(tag, tagWorkflowPrefix) || strings.HasPrefix(tag, tagTaskPrefix)
}

// ownTags is tags without the identity tags: what a task row keeps.
func ownTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if !isIdentityTag(t) {
			out = append(out, t)
		}
	}
	return out
}

// identify sets the identity of task name of workflow wf on the job's
// insert options: the identity tags added to the task's own tags (those of
// opts, else those the args' InsertOpts give, as River would choose), and
// the task's own metadata, with the name in it when the name is not
// tag-safe.
func identify(opts *river.InsertOpts, args river.JobArgs, wf, name string, metadata json.RawMessage) error {
	tags := opts.Tags
	if tags == nil {
		if a, ok := args.(river.JobArgsWithInsertOpts); ok {
			tags = a.InsertOpts().Tags
		}
	}
	tags = append(slices.Clip(ownTags(tags)), tagWorkflowPrefix+wf)
	opts.Metadata = metadata
	if tag, ok := taskTag(name); ok {
		tags = append(tags, tag)
	} else {
		meta := map[string]json.RawMessage{}
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return fmt.Errorf("error reading the metadata of task %q: %w", name, err)
		}
		meta[metaTask], _ = json.Marshal(name)
		b, err := json.Marshal(meta)
		if err != nil {
			return err
		}
		opts.Metadata = b
	}
	opts.Tags = tags
	return nil
}

// taskMeta is a task's identity as its job carries it.
type taskMeta struct {
	Workflow string `json:"tributary_workflow"`
	Task     string `json:"tributary_task"`
}

// taskMetaOf reads a job's task identity, and false for a job that is not
// a workflow task.
func taskMetaOf(job *rivertype.JobRow) (taskMeta, bool) {
	var m taskMeta
	for _, t := range job.Tags {
		switch {
		case strings.HasPrefix(t, tagWorkflowPrefix):
			m.Workflow = t[len(tagWorkflowPrefix):]
		case strings.HasPrefix(t, tagTaskPrefix):
			m.Task = t[len(tagTaskPrefix):]
		}
	}
	if m.Workflow != "" && m.Task != "" {
		return m, true
	}
	// A name that is not tag-safe, or a job inserted before the identity
	// tags; most jobs are not tasks: skip decoding their metadata.
	if !bytes.Contains(job.Metadata, metaTaskKey) {
		return taskMeta{}, false
	}
	var fromMeta taskMeta
	if err := json.Unmarshal(job.Metadata, &fromMeta); err != nil {
		return taskMeta{}, false
	}
	if m.Workflow == "" {
		m.Workflow = fromMeta.Workflow
	}
	m.Task = fromMeta.Task
	if m.Workflow == "" || m.Task == "" {
		return taskMeta{}, false
	}
	return m, true
}

var metaTaskKey = []byte(`"` + metaTask + `"`)
