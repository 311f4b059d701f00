package riverjob

import (
	"context"
	"encoding/json"
	"fmt"
)

// InsertChannel is the notification channel River's producers of schema
// listen on for newly available jobs; a payload {"queue": "name"} makes the
// producers of that queue fetch at once instead of at their next poll.
func InsertChannel(schema string) string { return schema + ".river_insert" }

// Wake tells the producers of the given queues, in every process, that
// jobs became available, as River's own insert does. Empty names and
// repeats are left out. Send it after the commit that made the jobs
// available, as a statement of its own: a NOTIFY inside a writing
// transaction holds Postgres' global notify lock through that
// transaction's WAL flush, serialising the commits of every worker, while a
// read-only NOTIFY commits without a flush. Callers usually only log an
// error: the jobs are available, and River's poll finds them without it.
func Wake(ctx context.Context, db DBTX, schema string, queues []string) error {
	sql, args, err := WakeStatement(schema, queues)
	if err != nil || sql == "" {
		return err
	}
	if _, err := db.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("error waking River's producers: %w", err)
	}
	return nil
}

// WakeStatement is Wake as a statement and its arguments, for a caller
// that sends it with others in one round trip (after the commit, as a
// statement of its own); nil when queues has no name.
func WakeStatement(schema string, queues []string) (sql string, args []any, err error) {
	channel, payloads, err := WakeNotices(schema, queues)
	if err != nil || len(payloads) == 0 {
		return "", nil, err
	}
	return wakeSQL, []any{channel, payloads}, nil
}

// WakeNotices is what Wake sends, for a caller that sends it together with
// notifications of its own in one statement: the channel and one payload
// per queue (none when queues has no name).
func WakeNotices(schema string, queues []string) (channel string, payloads []string, err error) {
	seen := make(map[string]bool, len(queues))
	for _, name := range queues {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		b, err := json.Marshal(map[string]string{"queue": name})
		if err != nil {
			return "", nil, err
		}
		payloads = append(payloads, string(b))
	}
	return InsertChannel(schema), payloads, nil
}

const wakeSQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`
