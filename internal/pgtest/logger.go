package pgtest

import (
	"log/slog"
	"os"
	"testing"
)

// Logger returns a logger for tests: it discards everything unless
// TEST_LOG=1, so failures stay readable.
func Logger(tb testing.TB) *slog.Logger {
	tb.Helper()
	if os.Getenv("TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
