package tributary

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
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
		require.Equal(t, queue.DatabaseURLDefault, cfg.DatabaseURL)
		require.Equal(t, queue.DatabaseURLDefault, cfg.DatabaseURL)
		require.Equal(t, "public", cfg.Schema)
		require.Equal(t, queue.RuntimeConfig{}, cfg.Runtime, "the runtime applies its own defaults")
		require.Equal(t, AMQPConfig{}, cfg.AMQP, "the bridge applies its own defaults")
		require.Equal(t, batch.Config{}, cfg.Batch.Streams, "the flushes apply their own defaults")
		require.Equal(t, DashboardConfig{}, cfg.Dashboard, "no dashboard unless TRIBUTARY_HTTP_ADDR says where")
		require.Equal(t, batch.SinkURLDefault, cfg.Batch.SinkURL)
		require.Equal(t, "info", cfg.LogLevel)
		require.Equal(t, "text", cfg.LogFormat)
		require.Equal(t, CleanupConfig{}, cfg.Cleanup)
		require.NoError(t, cfg.Validate())
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
			"TRIBUTARY_JOB_RETENTION_CANCELLED": "3d",
			"TRIBUTARY_RESCUE_STUCK_AFTER":      "10m",
			"TRIBUTARY_LIVENESS_TIMEOUT":        "5s",
			"TRIBUTARY_FETCH_COOLDOWN":          "2ms",
			"TRIBUTARY_FETCH_POLL_INTERVAL":     "250ms",
			"TRIBUTARY_OUTBOX_SENT_RETENTION":   "3d",
			"TRIBUTARY_OUTBOX_FAILED_RETENTION": "off",
			"TRIBUTARY_BATCH_OBJECT_RETENTION":  "36h",
			"TRIBUTARY_EVENT_LANE_RETENTION":    "forever",
			"TRIBUTARY_CLEANUP_SPEC":            "*/15 * * * *",
			"TRIBUTARY_CLEANUP_BATCH_SIZE":      "2000",
			"TRIBUTARY_WORKFLOW_ARCHIVE":        "true",
			"TRIBUTARY_DASHBOARD_AMQP_QUEUES":   "orders, emails,",
			"TRIBUTARY_OUTBOX_EXCHANGE":         "events",
			"TRIBUTARY_AMQP_BATCH_QUEUE":        "access-logs:access_logs",
			"TRIBUTARY_HTTP_ADDR":               "127.0.0.1:9090",
			"TRIBUTARY_DASHBOARD_TOKEN":         "tok",
			"BATCH_SINK_URL":                    "mem://",
		}))
		require.NoError(t, err)
		require.Equal(t, "jobs", cfg.Schema)
		require.Equal(t, "db:6543", cfg.DatabaseHost())
		require.Equal(t, queue.RuntimeConfig{
			ShutdownTimeout: 3 * time.Second, RescueStuckJobsAfter: 10 * time.Minute, LivenessTimeout: 5 * time.Second,
			CompletedJobRetention: 2 * time.Hour, CancelledJobRetention: 72 * time.Hour, DiscardedJobRetention: -1,
			FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 250 * time.Millisecond,
		}, cfg.Runtime)
		require.Equal(t, amqpbridge.Config{
			URL: "amqp://guest:guest@127.0.0.1:5672/", QueuePrefix: "mike",
			MaxMessageRetries: amqpbridge.NoRetries, // an explicit 0 is kept
			RetryBase:         100 * time.Millisecond, RetryMax: 800 * time.Millisecond,
			BatchMaxEvents: 5, BatchMaxBytes: 1024, BatchMaxAge: time.Second, BatchTimerInterval: 250 * time.Millisecond,
		}, cfg.AMQP.Bridge)
		require.Equal(t, batch.StreamConfig{MaxEvents: 5, MaxBytes: 1024, MaxAge: time.Second}, cfg.Batch.Streams.Defaults)
		require.Equal(t, 250*time.Millisecond, cfg.Batch.TimerInterval)
		require.Equal(t, "mem://", cfg.Batch.SinkURL)
		require.Equal(t, CleanupConfig{
			Retentions: map[string]time.Duration{
				events.OutboxSentCleanup().Name: 72 * time.Hour, events.OutboxFailedCleanup().Name: -1,
				batch.ObjectCleanup().Name: 36 * time.Hour, events.IdleLaneCleanup().Name: -1,
			},
			Spec: "*/15 * * * *", BatchSize: 2000, ArchiveWorkflows: true,
		}, cfg.Cleanup)
		require.Equal(t, DashboardConfig{Addr: "127.0.0.1:9090", Token: "tok", AMQPQueues: []string{"orders", "emails"}}, cfg.Dashboard)
		require.Equal(t, "events", cfg.AMQP.OutboxExchange)
		require.Equal(t, BatchQueue{Queue: "access-logs", Stream: "access_logs"}, cfg.AMQP.BatchQueue)
		require.Equal(t, "debug", cfg.LogLevel)
		require.Equal(t, "json", cfg.LogFormat)
		require.NoError(t, cfg.Validate())
	})

	t.Run("InvalidValuesNameVariableAndValue", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ name, value string }{
			{"DATABASE_URL", "postgres://u@h:notaport/db"},
			{"TRIBUTARY_SCHEMA", "bad-schema;"},
			{"AMQP_URL", "http://example"},
			{"MAX_MESSAGE_RETRIES", "-1"},
			{"MAX_MESSAGE_RETRIES", "101"},
			{"QUEUE_PREFIX", "a b"},
			{"RETRY_BASE_MS", "soon"},
			{"S3_BATCH_MAX_EVENTS", "0"},
			{"S3_BATCH_MAX_BYTES", "1e9x"},
			{"BATCH_SINK_URL", "ftp://x"},
			{"BATCH_SINK_URL", "s3://"},
			{"LOG_LEVEL", "loud"},
			{"LOG_FORMAT", "xml"},
			{"TRIBUTARY_SHUTDOWN_TIMEOUT", "forever"},
			{"TRIBUTARY_JOB_RETENTION_CANCELLED", "a while"},
			{"TRIBUTARY_RESCUE_STUCK_AFTER", "-5m"},
			{"TRIBUTARY_RESCUE_STUCK_AFTER", "15s"}, // below River's job timeout
			{"TRIBUTARY_HTTP_ADDR", "nope:nope:nope"},
			{"TRIBUTARY_HTTP_ADDR", "127.0.0.1:http-ish"},
			{"TRIBUTARY_LIVENESS_TIMEOUT", "soon"},
			{"TRIBUTARY_LIVENESS_TIMEOUT", "500ms"},
			{"TRIBUTARY_FETCH_COOLDOWN", "soon"},
			{"TRIBUTARY_FETCH_COOLDOWN", "500us"},    // below River's 1ms
			{"TRIBUTARY_FETCH_POLL_INTERVAL", "2ms"}, // below the 5ms cooldown
			{"TRIBUTARY_FETCH_POLL_INTERVAL", "-1s"},
			{"TRIBUTARY_OUTBOX_SENT_RETENTION", "a week"},
			{"TRIBUTARY_EVENT_LANE_RETENTION", "0d"},
			{"TRIBUTARY_BATCH_OBJECT_RETENTION", "500ms"},
			{"TRIBUTARY_CLEANUP_SPEC", "every hour"},
			{"TRIBUTARY_CLEANUP_BATCH_SIZE", "0"},
			{"TRIBUTARY_WORKFLOW_ARCHIVE", "sometimes"},
			{"TRIBUTARY_DASHBOARD_AMQP_QUEUES", "ok,bad name"},
			{"TRIBUTARY_OUTBOX_EXCHANGE", "a/b"},
			{"TRIBUTARY_AMQP_BATCH_QUEUE", ":logs"},
			{"TRIBUTARY_AMQP_BATCH_QUEUE", "logs:"},
		} {
			_, err := ConfigFromLookup(lookupFrom(map[string]string{tc.name: tc.value}))
			var ce *queue.ConfigError
			require.True(t, errors.As(err, &ce), "%s=%s: %v", tc.name, tc.value, err)
			require.Equal(t, tc.name, ce.Name, "%s=%s: %v", tc.name, tc.value, err)
			require.Contains(t, err.Error(), tc.name)
			if tc.name != "DATABASE_URL" && tc.name != "AMQP_URL" && tc.name != "BATCH_SINK_URL" {
				require.Contains(t, err.Error(), strconv.Quote(tc.value), "the value as written")
			}
		}
	})

	t.Run("RetryMaxBelowBase", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromLookup(lookupFrom(map[string]string{"RETRY_BASE_MS": "5000", "RETRY_MAX_MS": "1000"}))
		require.EqualError(t, err, `invalid RETRY_MAX_MS "1000": want at least the retry base (5s)`)
	})

	t.Run("BatchConsumerLimitsOnlyWithTheBridge", func(t *testing.T) {
		t.Parallel()
		// 70,000 items per object are fine for the flushes; as the batch
		// consumer's prefetch they are not.
		env := map[string]string{"S3_BATCH_MAX_EVENTS": "70000"}
		cfg, err := ConfigFromLookup(lookupFrom(env))
		require.NoError(t, err)
		require.NoError(t, cfg.Validate())
		env["AMQP_URL"] = "amqp://127.0.0.1/"
		_, err = ConfigFromLookup(lookupFrom(env))
		require.EqualError(t, err, `invalid S3_BATCH_MAX_EVENTS "70000": want 1..65535 (it is the batch consumer's prefetch)`)
	})

	t.Run("PasswordsNeverInErrors", func(t *testing.T) {
		t.Parallel()
		for name, value := range map[string]string{
			"DATABASE_URL":   "postgres://u:hunter2@h:notaport/db",
			"AMQP_URL":       "http://u:hunter2@h/",
			"BATCH_SINK_URL": "ftp://u:hunter2@h/",
		} {
			_, err := ConfigFromLookup(lookupFrom(map[string]string{name: value}))
			require.ErrorContains(t, err, name)
			require.NotContains(t, err.Error(), "hunter2")
		}
	})
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw     string
		forever bool
		want    time.Duration
		err     string
	}{
		{raw: "90s", want: 90 * time.Second},
		{raw: "36h", want: 36 * time.Hour},
		{raw: "7d", want: 7 * 24 * time.Hour},
		{raw: "forever", forever: true, want: -1},
		{raw: "OFF", forever: true, want: -1},
		{raw: "-1", forever: true, want: -1},
		{raw: "forever", err: "want a duration of at least 1s such as 90s, 36h or 7d"},
		{raw: "-1", err: "want a duration of at least 1s"},
		{raw: "0d", forever: true, err: "want a duration of at least 1s such as 90s, 36h or 7d, or forever"},
		{raw: "1.5d", err: "want a duration"},
		{raw: "999ms", err: "at least 1s"},
	} {
		d, err := parseDuration(tc.raw, time.Second, tc.forever)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.raw)
			continue
		}
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, d, tc.raw)
	}
}

// TestREADMEConfigurationTables checks the documented table of environment
// variables (docs/configuration.md's, or README.md's configuration tables
// where that page does not exist yet) against the code: every variable read
// here has a row and every row is read here, and each default it states is
// the default of the feature that owns it.
func TestREADMEConfigurationTables(t *testing.T) {
	t.Parallel()
	doc, sections := "docs/configuration.md", []string{"## Environment variables\n"}
	text, err := os.ReadFile(doc)
	if errors.Is(err, fs.ErrNotExist) {
		doc, sections = "README.md", []string{"## Configuration\n", "### Clean-up\n"}
		text, err = os.ReadFile(doc)
	}
	require.NoError(t, err)
	rows := readmeRows(t, string(text), sections)

	var read []string
	for _, v := range variables() {
		read = append(read, v.name)
	}
	var documented []string
	for name := range rows {
		documented = append(documented, name)
	}
	slices.Sort(read)
	slices.Sort(documented)
	require.Equal(t, read, documented, "the variables read here and %s's rows", doc)

	days := func(d time.Duration) string { return fmt.Sprintf("`%dd`", d/(24*time.Hour)) }
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	defaults := map[string]string{
		"DATABASE_URL":                      "`" + strings.Split(queue.DatabaseURLDefault, "?")[0] + "`",
		"TRIBUTARY_SCHEMA":                  "`" + queue.SchemaDefault + "`",
		"TRIBUTARY_SHUTDOWN_TIMEOUT":        "`" + queue.ShutdownTimeoutDefault.String() + "`",
		"TRIBUTARY_LIVENESS_TIMEOUT":        "`" + queue.LivenessTimeoutDefault.String() + "`",
		"MAX_MESSAGE_RETRIES":               strconv.Itoa(amqpbridge.MaxMessageRetriesDefault),
		"RETRY_BASE_MS":                     ms(amqpbridge.RetryBaseDefault) + " / " + ms(amqpbridge.RetryMaxDefault),
		"S3_BATCH_MAX_EVENTS":               strconv.Itoa(batch.MaxEventsDefault),
		"S3_BATCH_MAX_BYTES":                strconv.Itoa(batch.MaxBytesDefault),
		"S3_BATCH_MAX_AGE_MS":               ms(batch.MaxAgeDefault),
		"S3_BATCH_TIMER_INTERVAL_MS":        ms(batch.TimerIntervalDefault),
		"BATCH_SINK_URL":                    "`" + batch.SinkURLDefault + "`",
		"TRIBUTARY_HTTP_ADDR":               "`" + dashboard.AddrDefault + "`",
		"LOG_LEVEL":                         "`" + LogLevelDefault + "` / `" + LogFormatDefault + "`",
		"TRIBUTARY_OUTBOX_SENT_RETENTION":   days(events.OutboxSentCleanup().Retention),
		"TRIBUTARY_OUTBOX_FAILED_RETENTION": days(events.OutboxFailedCleanup().Retention),
		"TRIBUTARY_EVENT_LANE_RETENTION":    days(events.IdleLaneCleanup().Retention),
		"TRIBUTARY_BATCH_OBJECT_RETENTION":  days(batch.ObjectCleanup().Retention),
		"TRIBUTARY_CLEANUP_SPEC":            "`" + scheduler.CleanupSpecDefault + "`",
		"TRIBUTARY_CLEANUP_BATCH_SIZE":      "`" + strconv.Itoa(scheduler.CleanupBatchSizeDefault) + "`",
		"TRIBUTARY_WORKFLOW_ARCHIVE":        "`false`",
	}
	for name, want := range defaults {
		require.Contains(t, rows[name], want, "%s's default for %s", doc, name)
	}

	// One variable, two features: the flushes' and the batch consumer's
	// defaults must agree, or the README's one default would be wrong for
	// one of them.
	require.Equal(t, batch.MaxEventsDefault, amqpbridge.BatchMaxEventsDefault)
	require.Equal(t, batch.MaxBytesDefault, amqpbridge.BatchMaxBytesDefault)
	require.Equal(t, batch.MaxAgeDefault, amqpbridge.BatchMaxAgeDefault)
	require.Equal(t, batch.TimerIntervalDefault, amqpbridge.BatchTimerIntervalDefault)
}

// readmeRows returns the default column (the second) of every row of the
// tables in the sections of the document, by variable. A row naming several
// variables ("`A` / `_B`", the second a suffix of the first) counts for
// each.
func readmeRows(t *testing.T, readme string, sections []string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	varRE := regexp.MustCompile("`([A-Z0-9_]+)`")
	for _, section := range sections {
		i := strings.Index(readme, section)
		require.GreaterOrEqual(t, i, 0, "no %q section", strings.TrimSpace(section))
		body := readme[i+len(section):]
		if j := strings.Index(body, "\n#"); j >= 0 {
			body = body[:j]
		}
		for _, line := range strings.Split(body, "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
				continue
			}
			var first string
			for _, m := range varRE.FindAllStringSubmatch(cells[1], -1) {
				name := m[1]
				if strings.HasPrefix(name, "_") {
					name = first[:strings.LastIndex(first, "_")] + name
				} else if first == "" {
					first = name
				}
				rows[name] = strings.TrimSpace(cells[2])
			}
		}
	}
	require.NotEmpty(t, rows)
	return rows
}

// TestOnlyConfigFromEnvReadsTributarysVariables fails for code outside this
// package that reads one of the variables above from the environment, or
// reads the environment in a way that cannot be checked (a computed name,
// the whole environment). Test helpers and example programs are not
// tributary's processes and may.
func TestOnlyConfigFromEnvReadsTributarysVariables(t *testing.T) {
	t.Parallel()
	exempt := []string{
		"internal/pgtest/",     // test harness: the tests' database
		"internal/amqptest/",   // test harness: the tests' broker
		"examples/",            // a user's own service, which reads its own settings
		"internal/outsidemod/", // test harness: passes the environment to the go command it runs
		"tributarytest/",       // the users' test kit: the tests' database, as pgtest's
	}
	owner := map[string]bool{"env.go": true} // the root package's reader
	ours := map[string]bool{}
	for _, v := range variables() {
		ours[v.name] = true
	}
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if owner[filepath.ToSlash(rel)] || slices.ContainsFunc(exempt, func(prefix string) bool { return strings.HasPrefix(filepath.ToSlash(rel), prefix) }) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked := map[ast.Expr]bool{} // reads whose variable was looked at
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if !readsEnv(n.Fun) || len(n.Args) != 1 {
					return true
				}
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					checked[n.Fun] = true
					if name, _ := strconv.Unquote(lit.Value); ours[name] {
						found = append(found, fmt.Sprintf("%s reads %s", fset.Position(n.Pos()), name))
					}
				}
			case *ast.SelectorExpr:
				if readsEnv(n) && !checked[n] {
					found = append(found, fmt.Sprintf("%s reads the environment in a way this test cannot check", fset.Position(n.Pos())))
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "read tributary's variables through tributary.ConfigFromEnv")
}

// readsEnv reports whether e is os.Getenv, os.LookupEnv, os.Environ or
// os.ExpandEnv.
func readsEnv(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "os" && slices.Contains([]string{"Getenv", "LookupEnv", "Environ", "ExpandEnv"}, sel.Sel.Name)
}

// TestBridgeNeeded: a variable that only works with the bridge is no error
// for a command that does not use it, and an error naming it for a process
// that would (Validate, New).
func TestBridgeNeeded(t *testing.T) {
	t.Parallel()
	for name, value := range map[string]string{"TRIBUTARY_OUTBOX_EXCHANGE": "events", "TRIBUTARY_AMQP_BATCH_QUEUE": "logs", "TRIBUTARY_DASHBOARD_AMQP_QUEUES": "orders"} {
		cfg, err := ConfigFromLookup(lookupFrom(map[string]string{name: value}))
		require.NoError(t, err, "other commands do not care")
		require.EqualError(t, cfg.Validate(), fmt.Sprintf("invalid %s %q: needs AMQP_URL", name, value))
		cfg, err = ConfigFromLookup(lookupFrom(map[string]string{name: value, "AMQP_URL": "amqp://127.0.0.1/"}))
		require.NoError(t, err)
		require.NoError(t, cfg.Validate())
	}
}
