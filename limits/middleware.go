package limits

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// insertMiddleware marks the jobs of declared limits at insert: their
// limit and key go into the job's metadata, and a job that would be
// available or scheduled is inserted pending, to wait for admission. A job
// its inserter made pending itself (a workflow task waiting for its
// dependencies) is left alone: admission must not release it early.
type insertMiddleware struct {
	river.MiddlewareDefaults
	limits []Limit
}

func (m *insertMiddleware) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	for _, p := range manyParams {
		if err := m.mark(p); err != nil {
			return nil, err
		}
	}
	return doInner(ctx)
}

// mark applies the first matching limit to one job's insert.
func (m *insertMiddleware) mark(p *rivertype.JobInsertParams) error {
	if p.State != rivertype.JobStateAvailable && p.State != rivertype.JobStateScheduled {
		return nil
	}
	for _, l := range m.limits {
		if !l.matches(p.Kind, p.Queue) {
			continue
		}
		key, err := l.key(p.Args, p.EncodedArgs)
		if err != nil {
			return err
		}
		meta := map[string]json.RawMessage{}
		if len(p.Metadata) > 0 {
			if err := json.Unmarshal(p.Metadata, &meta); err != nil {
				return fmt.Errorf("limit %q: reading the job's metadata: %w", l.Name, err)
			}
		}
		meta[riverjob.LimitMetaName], _ = json.Marshal(l.Name)
		meta[riverjob.LimitMetaKey], _ = json.Marshal(key)
		b, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("limit %q: writing the job's metadata: %w", l.Name, err)
		}
		p.Metadata = b
		p.State = rivertype.JobStatePending
		return nil
	}
	return nil
}
