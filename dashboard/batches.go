package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/batch"
)

// BatchesPage is the batches page: what each stream has staged and the
// newest objects written.
type BatchesPage struct {
	notEnabled
	Stream     string               `json:"stream,omitempty"`
	Streams    []batch.StreamStatus `json:"streams,omitempty"`
	Objects    []batch.Object       `json:"objects,omitempty"`
	NextBefore int64                `json:"next_before,omitempty"`
	NextURL    string               `json:"-"`
}

// Batches reads the batches page.
func (s *Server) Batches(ctx context.Context, stream string, before int64) (*BatchesPage, error) {
	page := &BatchesPage{notEnabled: notEnabled{Feature: "batches", Enabled: true}, Stream: stream}
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		ok, err := s.tableExists(ctx, tx, "tributary_batch_object")
		if err != nil {
			return err
		}
		if !ok {
			page.Enabled = false
			page.Reason = "the batch tables are not in this schema (run `tributary migrate up` with a build that has batch flushes)"
			return nil
		}
		if page.Streams, err = batch.ListStreams(ctx, tx, s.schema, ""); err != nil {
			return err
		}
		page.Objects, err = batch.ListObjects(ctx, tx, s.schema, batch.ListObjectsParams{Stream: stream, BeforeID: before, Limit: PageSizeDefault + 1})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(page.Objects) > PageSizeDefault {
		page.Objects = page.Objects[:PageSizeDefault]
		page.NextBefore = page.Objects[len(page.Objects)-1].ID
		q := url.Values{}
		if stream != "" {
			q.Set("stream", stream)
		}
		q.Set("before", strconv.FormatInt(page.NextBefore, 10))
		page.NextURL = "/batches?" + q.Encode()
	}
	return page, nil
}

func (s *Server) handleBatches(w http.ResponseWriter, r *http.Request) error {
	v, err := pageQuery(r, "stream", "before")
	if err != nil {
		return err
	}
	stream := strings.TrimSpace(v.Get("stream"))
	if stream != "" {
		if err := batch.ValidateStream(stream); err != nil {
			return badRequestf("invalid stream %q: %v", stream, err)
		}
	}
	var before int64
	if raw := strings.TrimSpace(v.Get("before")); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 1 {
			return badRequestf("invalid cursor before=%q: want a positive integer", raw)
		}
		before = n
	}
	page, err := s.Batches(r.Context(), stream, before)
	if err != nil {
		return fmt.Errorf("error reading batches: %w", err)
	}
	return s.render(w, r, "batches", "Batches", "batches", page)
}
