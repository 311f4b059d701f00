package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// MaxAttributes is the most attributes one workflow has. Each is a row of
// tributary_workflow_attribute with two index entries.
const MaxAttributes = 32

// ErrInvalidAttribute is the kind of an attribute SetAttributes refuses.
var ErrInvalidAttribute = errors.New("invalid workflow attribute")

// checkAttributes checks keys (a name: 1 to NameMaxLen characters, no
// control character, no '=', which separates key and value on the command
// line) and values (at most NameMaxLen characters, no control character).
func checkAttributes(attrs map[string]string) error {
	if len(attrs) > MaxAttributes {
		return &LimitError{What: "attributes", Name: "workflow", Value: len(attrs), Max: MaxAttributes}
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if err := checkName("attribute key", k); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidAttribute, err)
		}
		if strings.Contains(k, "=") {
			return fmt.Errorf("%w: key %q contains '='", ErrInvalidAttribute, k)
		}
		v := attrs[k]
		if len(v) > NameMaxLen {
			return fmt.Errorf("%w: value of %q is %d characters long, more than %d", ErrInvalidAttribute, k, len(v), NameMaxLen)
		}
		if v != "" {
			if err := checkName("attribute value", v); err != nil {
				return fmt.Errorf("%w: %v", ErrInvalidAttribute, err)
			}
		}
	}
	return nil
}

// ParseAttribute splits "key=value" (the command line's and the dashboard's
// form of an attribute filter) at its first '='.
func ParseAttribute(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("invalid attribute %q: want key=value", s)
	}
	return k, v, nil
}

// insertAttributesSQL sets attributes ($2, a JSON object) on workflow $1,
// replacing the values of keys it has, and returns how many it has after.
const insertAttributesSQL = `
WITH ins AS (
    INSERT INTO /*schema*/tributary_workflow_attribute (workflow_id, key, value)
    SELECT $1::uuid, a.key, a.value FROM jsonb_each_text($2::jsonb) AS a
    ON CONFLICT (workflow_id, key) DO UPDATE SET value = excluded.value
    RETURNING key
)
SELECT count(*) FROM (
    SELECT key FROM /*schema*/tributary_workflow_attribute WHERE workflow_id = $1::uuid
    UNION
    SELECT key FROM ins
) k`

// setAttributes writes attrs on workflow id in tx, refusing (with a
// *LimitError) more than MaxAttributes in all.
func setAttributes(ctx context.Context, tx pgx.Tx, sql string, id string, attrs map[string]string) error {
	doc, err := json.Marshal(attrs)
	if err != nil {
		return fmt.Errorf("error encoding the attributes of workflow %s: %w", id, err)
	}
	var n int
	if err := tx.QueryRow(ctx, sql, customPlan, id, string(doc)).Scan(&n); err != nil {
		return fmt.Errorf("error setting the attributes of workflow %s: %w", id, err)
	}
	if n > MaxAttributes {
		return &LimitError{What: "attributes", Name: id, Value: n, Max: MaxAttributes}
	}
	return nil
}

// SetAttributes sets attributes of the workflow the task belongs to, in a
// transaction of its own (it does not wait for the task's completion, and
// a task that runs again sets them again): keys it has take the new values,
// others are added. A workflow has at most MaxAttributes; keys and values
// are at most NameMaxLen characters, and keys have no '='.
//
//	err := workflow.SetAttributes(ctx, map[string]string{"invoice": inv.ID})
func SetAttributes(ctx context.Context, attrs map[string]string) error {
	tc, err := taskFrom(ctx)
	if err != nil {
		return fmt.Errorf("workflow.SetAttributes: %w", err)
	}
	if err := checkAttributes(attrs); err != nil || len(attrs) == 0 {
		return err
	}
	return pgx.BeginFunc(ctx, tc.c.pool, func(tx pgx.Tx) error {
		return setAttributes(ctx, tx, queue.Qualify(tc.c.cfg.Schema, insertAttributesSQL), tc.ref.WorkflowID, attrs)
	})
}

// SetAttributes sets attributes of the workflow ref names, as the
// package's SetAttributes does from inside a task.
func (c *Client) SetAttributes(ctx context.Context, ref string, attrs map[string]string) error {
	if err := checkAttributes(attrs); err != nil || len(attrs) == 0 {
		return err
	}
	return pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		id, err := c.resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		return setAttributes(ctx, tx, queue.Qualify(c.schema, insertAttributesSQL), id, attrs)
	})
}

// selectAttributesSQL is the column of a workflow's attributes (a JSON
// object) that selectWorkflowSQL reads.
const selectAttributesSQL = `(SELECT jsonb_object_agg(a.key, a.value) FROM /*schema*/tributary_workflow_attribute a WHERE a.workflow_id = w.id)`

// decodeAttributes decodes selectAttributesSQL's column.
func decodeAttributes(raw []byte) (map[string]string, error) {
	if raw == nil {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("error decoding workflow attributes: %w", err)
	}
	return m, nil
}

// attributeJoins returns the joins that keep the workflows w having every
// attribute, one per key in key order, each through a subquery whose only
// column is the workflow's id (so the attribute table's key and value do
// not shadow w's columns). The planner reads the (key, value, workflow_id)
// index backwards for the newest first and stops after the page, whatever
// the value's frequency (migration workflow_attribute).
func attributeJoins(schema string, attrs map[string]string, arg func(any) string) string {
	var sb strings.Builder
	for i, k := range slices.Sorted(maps.Keys(attrs)) {
		alias := "attr" + strconv.Itoa(i)
		fmt.Fprintf(&sb, " JOIN (SELECT workflow_id AS %s_id FROM %s WHERE key = %s AND value = %s) %s ON %s.%s_id = w.id",
			alias, queue.Qualify(schema, "/*schema*/tributary_workflow_attribute"), arg(k), arg(attrs[k]), alias, alias, alias)
	}
	return sb.String()
}

// CountByStatus counts the workflows the filters of p select (Statuses,
// Name, Attributes; After and Limit are ignored) per status, reading at
// most countCap of them, newest first: with as many, the counts are of the
// newest countCap and each is marked approximate.
func (c *Client) CountByStatus(ctx context.Context, p ListParams, countCap int) (map[Status]queue.Count, error) {
	if countCap < 1 {
		return nil, fmt.Errorf("invalid count cap %d: want at least 1", countCap)
	}
	p.After = ""
	sql, args, err := c.listQuery(p)
	if err != nil {
		return nil, err
	}
	sql = `SELECT status, count(*) FROM (` + sql + ` LIMIT ` + strconv.Itoa(countCap) + `) m GROUP BY status`
	rows, err := c.qc.Pool().Query(ctx, sql, append([]any{customPlan}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("error counting workflows: %w", err)
	}
	out := make(map[Status]queue.Count, len(Statuses()))
	for _, st := range Statuses() {
		out[st] = queue.Count{}
	}
	var total int64
	var st Status
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[st] = queue.Count{N: n}
		total += n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error counting workflows: %w", err)
	}
	if total >= int64(countCap) {
		for s, cnt := range out {
			out[s] = queue.Count{N: cnt.N, Approximate: true}
		}
	}
	return out, nil
}
