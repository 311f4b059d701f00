package riverjob

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectionError reports whether err is the database connection failing
// rather than the database refusing a statement: the session was
// terminated (an operator, a restart, a failover), the server could not be
// reached or is starting up or out of connection slots, the socket broke,
// or a timeout ran out. A write that failed so may be tried again as it
// was; one the database refused would fail the same way again.
func ConnectionError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"): // connection exception
			return true
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin shutdown, crash shutdown, cannot connect now
			return true
		case pgErr.Code == "53300": // too many connections
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// RecordRetryDelay is how long a job whose own records lost the database
// connection is snoozed before it runs again (no attempt spent): 1 s,
// doubling with each snooze River counted on the job (its metadata's
// "snoozes"), at most 10 s.
func RecordRetryDelay(metadata []byte) time.Duration {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(metadata, &m)
	return min(time.Second<<min(max(m.Snoozes, 0), 4), 10*time.Second)
}

// NotRunHereWait is how long a job that this process cannot run (one for a
// consumer or an inbox it does not run) is snoozed for a process that can:
// 1 s, doubling with each snooze River counted on the job (its metadata's
// "snoozes"), at most a minute. first reports that the job was not snoozed
// before, so that only its first wait is worth a warning.
func NotRunHereWait(metadata []byte) (wait time.Duration, first bool) {
	var m struct {
		Snoozes int `json:"snoozes"`
	}
	_ = json.Unmarshal(metadata, &m)
	n := max(m.Snoozes, 0)
	return min(time.Second<<min(n, 6), time.Minute), n == 0
}

// recordError is a failure of tributary's own reads and writes around or
// inside a job's handler (a lane's turn, a dispatch's outcome, a workflow
// step's record), as opposed to a failure of the handler's own code. Its
// message is the wrapped error's.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// OwnRecord marks err, when not nil, as a failure of tributary's records.
func OwnRecord(err error) error {
	if err == nil {
		return nil
	}
	return &recordError{err: err}
}

// RecordLostConnection returns the cause when err carries a failure of
// tributary's records (OwnRecord) that is the database connection failing
// (ConnectionError): the job may run again without spending an attempt.
func RecordLostConnection(err error) (error, bool) {
	var rec *recordError
	if errors.As(err, &rec) && ConnectionError(rec.err) {
		return rec.err, true
	}
	return nil, false
}
