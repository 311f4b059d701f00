package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

func TestConfigFromLookup(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := ConfigFromLookup(lookupFrom(nil))
		require.NoError(t, err)
		require.Equal(t, DatabaseURLDefault, cfg.DatabaseURL)
		require.Equal(t, "public", cfg.Schema)
		require.Equal(t, 5, cfg.MaxMessageRetries)
		require.Equal(t, 4*time.Second, cfg.RetryBase)
		require.Equal(t, 60*time.Second, cfg.RetryMax)
		require.Equal(t, 10000, cfg.BatchMaxEvents)
		require.Equal(t, int64(10485760), cfg.BatchMaxBytes)
		require.Equal(t, 10*time.Minute, cfg.BatchMaxAge)
		require.Equal(t, 30*time.Second, cfg.BatchTimerInterval)
		require.Equal(t, "127.0.0.1:8080", cfg.HTTPAddr)
		require.Equal(t, LivenessTimeoutDefault, cfg.LivenessTimeout)
		require.Empty(t, cfg.AMQPURL)
		require.Empty(t, cfg.DashboardToken)
	})

	t.Run("Values", func(t *testing.T) {
		t.Parallel()
		cfg, err := ConfigFromLookup(lookupFrom(map[string]string{
			"DATABASE_URL":                      "postgres://u:p@db:6543/app",
			"TRIBUTARY_SCHEMA":                  "jobs",
			"AMQP_URL":                          "amqp://guest:guest@127.0.0.1:5672/",
			"QUEUE_PREFIX":                      "mike",
			"MAX_MESSAGE_RETRIES":               "0",
			"RETRY_BASE_MS":                     "100",
			"RETRY_MAX_MS":                      "800",
			"S3_BATCH_MAX_EVENTS":               "5",
			"S3_BATCH_MAX_BYTES":                "1024",
			"S3_BATCH_MAX_AGE_MS":               "1000",
			"S3_BATCH_TIMER_INTERVAL_MS":        "250",
			"TRIBUTARY_SHUTDOWN_TIMEOUT":        "3s",
			"LOG_LEVEL":                         "debug",
			"LOG_FORMAT":                        "json",
			"TRIBUTARY_JOB_RETENTION_COMPLETED": "2h",
			"TRIBUTARY_JOB_RETENTION_DISCARDED": "forever",
			"TRIBUTARY_RESCUE_STUCK_AFTER":      "10m",
			"TRIBUTARY_LIVENESS_TIMEOUT":        "5s",
		}))
		require.NoError(t, err)
		require.Equal(t, "jobs", cfg.Schema)
		require.Equal(t, 0, cfg.MaxMessageRetries, "an explicit 0 is kept")
		require.Equal(t, 100*time.Millisecond, cfg.RetryBase)
		require.Equal(t, 800*time.Millisecond, cfg.RetryMax)
		require.Equal(t, 5, cfg.BatchMaxEvents)
		require.Equal(t, int64(1024), cfg.BatchMaxBytes)
		require.Equal(t, 250*time.Millisecond, cfg.BatchTimerInterval)
		require.Equal(t, 3*time.Second, cfg.ShutdownTimeout)
		require.Equal(t, "db:6543", cfg.DatabaseHost())
		require.Equal(t, 2*time.Hour, cfg.CompletedJobRetention)
		require.Equal(t, time.Duration(0), cfg.CancelledJobRetention)
		require.Equal(t, time.Duration(-1), cfg.DiscardedJobRetention)
		require.Equal(t, 10*time.Minute, cfg.RescueStuckJobsAfter)
		require.Equal(t, 5*time.Second, cfg.LivenessTimeout)
	})

	t.Run("InvalidValuesNameVariableAndValue", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ name, value string }{
			{"DATABASE_URL", "postgres://u@h:notaport/db"},
			{"TRIBUTARY_SCHEMA", "bad-schema;"},
			{"AMQP_URL", "http://example"},
			{"MAX_MESSAGE_RETRIES", "-1"},
			{"RETRY_BASE_MS", "soon"},
			{"S3_BATCH_MAX_EVENTS", "0"},
			{"S3_BATCH_MAX_BYTES", "1e9x"},
			{"BATCH_SINK_URL", "ftp://x"},
			{"LOG_LEVEL", "loud"},
			{"LOG_FORMAT", "xml"},
			{"TRIBUTARY_SHUTDOWN_TIMEOUT", "forever"},
			{"TRIBUTARY_JOB_RETENTION_CANCELLED", "a while"},
			{"TRIBUTARY_RESCUE_STUCK_AFTER", "-5m"},
			{"TRIBUTARY_RESCUE_STUCK_AFTER", "15s"}, // below River's job timeout
			{"TRIBUTARY_HTTP_ADDR", "nope:nope:nope"},
			{"TRIBUTARY_LIVENESS_TIMEOUT", "soon"},
			{"TRIBUTARY_LIVENESS_TIMEOUT", "500ms"},
			{"TRIBUTARY_HTTP_ADDR", "127.0.0.1:http-ish"},
		} {
			_, err := ConfigFromLookup(lookupFrom(map[string]string{tc.name: tc.value}))
			var ce *ConfigError
			require.True(t, errors.As(err, &ce), "%s=%s: %v", tc.name, tc.value, err)
			require.Equal(t, tc.name, ce.Name)
			require.Contains(t, err.Error(), tc.name)
		}
	})

	t.Run("RetryMaxBelowBase", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromLookup(lookupFrom(map[string]string{"RETRY_BASE_MS": "5000", "RETRY_MAX_MS": "1000"}))
		require.ErrorContains(t, err, "RETRY_MAX_MS")
	})

	t.Run("PasswordsNeverInErrors", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromLookup(lookupFrom(map[string]string{"DATABASE_URL": "postgres://u:hunter2@h:notaport/db"}))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
		_, err = ConfigFromLookup(lookupFrom(map[string]string{"AMQP_URL": "http://u:hunter2@h/"}))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
		require.Equal(t, "(redacted)", RedactURL("host=h password=hunter2"))
	})
}
