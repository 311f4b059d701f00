package migrations

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var sqlFS embed.FS

// Migration is one of tributary's own schema steps.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Config configures a Migrator.
type Config struct {
	// Schema is the schema that holds River's and tributary's tables. It is
	// created if missing.
	//
	// Defaults to "public".
	Schema string

	// Logger receives progress at info level.
	//
	// Defaults to a logger that discards everything.
	Logger *slog.Logger
}

// Migrator applies River's migrations and tributary's own into one schema.
type Migrator struct {
	pool       *pgxpool.Pool
	schema     string
	logger     *slog.Logger
	migrations []Migration
}

// Step is one applied or rolled-back migration in a result.
type Step struct {
	Line    string `json:"line"` // "river" or "tributary"
	Version int    `json:"version"`
	Name    string `json:"name"`
}

// Result lists what a run of Up or Down changed. Empty means nothing to do.
type Result struct {
	Steps []Step `json:"steps"`
}

// Status lists applied and pending migrations of both lines.
type Status struct {
	Applied []Step `json:"applied"`
	Pending []Step `json:"pending"`
}

var schemaNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateSchemaName reports whether name can be used as a schema name
// without quoting surprises.
func ValidateSchemaName(name string) error {
	if !schemaNameRE.MatchString(name) {
		return fmt.Errorf("invalid schema name %q: use letters, digits and underscores, starting with a letter or underscore, at most 63 characters", name)
	}
	return nil
}

// New returns a Migrator for the pool's database.
func New(pool *pgxpool.Pool, cfg Config) (*Migrator, error) {
	schema := cmp.Or(cfg.Schema, "public")
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	migs, err := load(sqlFS)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Migrator{pool: pool, schema: schema, logger: logger, migrations: migs}, nil
}

// All returns tributary's own migrations in version order.
func (m *Migrator) All() []Migration { return m.migrations }

var fileRE = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "sql")
	if err != nil {
		return nil, fmt.Errorf("error reading embedded migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		match := fileRE.FindStringSubmatch(e.Name())
		if match == nil {
			return nil, fmt.Errorf("embedded migration file %q does not match NNNN_name.(up|down).sql", e.Name())
		}
		version, _ := strconv.Atoi(match[1])
		body, err := fs.ReadFile(fsys, "sql/"+e.Name())
		if err != nil {
			return nil, fmt.Errorf("error reading migration %s: %w", e.Name(), err)
		}
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Version: version, Name: match[2]}
			byVersion[version] = mig
		} else if mig.Name != match[2] {
			return nil, fmt.Errorf("migration version %d has two names: %q and %q", version, mig.Name, match[2])
		}
		if match[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	migs := make([]Migration, 0, len(byVersion))
	for _, mig := range byVersion {
		if mig.Up == "" || mig.Down == "" {
			return nil, fmt.Errorf("migration %04d_%s needs both an up and a down file", mig.Version, mig.Name)
		}
		migs = append(migs, *mig)
	}
	sort.Slice(migs, func(i, j int) bool { return migs[i].Version < migs[j].Version })
	return migs, nil
}

// lockKey is the advisory lock that serialises migration runs per schema.
func (m *Migrator) lockKey() string { return "tributary.migrate." + m.schema }

// withLock runs fn on one connection that holds the schema's migration lock.
func (m *Migrator) withLock(ctx context.Context, fn func(conn *pgxpool.Conn) error) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("error acquiring a connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", m.lockKey()); err != nil {
		return fmt.Errorf("error taking the migration lock: %w", err)
	}
	defer func() {
		// Unlock with a fresh context: the caller's may be cancelled, and a
		// lock left on a pooled connection would block the next run.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", m.lockKey()); err != nil {
			conn.Conn().Close(unlockCtx) //nolint:errcheck // drop the session, which drops the lock
		}
	}()
	return fn(conn)
}

func (m *Migrator) riverMigrator() (*rivermigrate.Migrator[pgx.Tx], error) {
	// River's migrator logs every step at info; the Migrator reports River's
	// steps itself, in the same shape as its own.
	rm, err := rivermigrate.New(riverpgxv5.New(m.pool), &rivermigrate.Config{Schema: m.schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("error creating River migrator: %w", err)
	}
	return rm, nil
}

// Up creates the schema if needed, applies River's pending migrations, then
// tributary's. It is idempotent.
func (m *Migrator) Up(ctx context.Context) (*Result, error) {
	res := &Result{Steps: []Step{}}
	err := m.withLock(ctx, func(conn *pgxpool.Conn) error {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.schema}.Sanitize()); err != nil {
			return fmt.Errorf("error creating schema %q: %w", m.schema, err)
		}
		rm, err := m.riverMigrator()
		if err != nil {
			return err
		}
		riverRes, err := rm.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return fmt.Errorf("error applying River migrations: %w", err)
		}
		for _, v := range riverRes.Versions {
			res.Steps = append(res.Steps, Step{Line: "river", Version: v.Version, Name: v.Name})
			m.logger.InfoContext(ctx, "applied River migration", "schema", m.schema, "version", v.Version, "name", v.Name, "duration", v.Duration)
		}
		applied, err := m.applied(ctx, conn)
		if err != nil {
			return err
		}
		for _, mig := range m.migrations {
			if _, ok := applied[mig.Version]; ok {
				continue
			}
			if err := m.step(ctx, conn, mig, true); err != nil {
				return err
			}
			res.Steps = append(res.Steps, Step{Line: "tributary", Version: mig.Version, Name: mig.Name})
			m.logger.InfoContext(ctx, "applied migration", "schema", m.schema, "version", mig.Version, "name", mig.Name)
		}
		return nil
	})
	return res, err
}

// Down rolls back the latest applied tributary migration. River's own
// migrations are left alone. Rolling back nothing is not an error.
func (m *Migrator) Down(ctx context.Context) (*Result, error) {
	res := &Result{Steps: []Step{}}
	err := m.withLock(ctx, func(conn *pgxpool.Conn) error {
		applied, err := m.applied(ctx, conn)
		if err != nil {
			return err
		}
		for i := len(m.migrations) - 1; i >= 0; i-- {
			mig := m.migrations[i]
			if _, ok := applied[mig.Version]; !ok {
				continue
			}
			if err := m.step(ctx, conn, mig, false); err != nil {
				return err
			}
			res.Steps = append(res.Steps, Step{Line: "tributary", Version: mig.Version, Name: mig.Name})
			m.logger.InfoContext(ctx, "rolled back migration", "schema", m.schema, "version", mig.Version, "name", mig.Name)
			return nil
		}
		return nil
	})
	return res, err
}

// Status lists applied and pending migrations of River and tributary.
func (m *Migrator) Status(ctx context.Context) (*Status, error) {
	st := &Status{Applied: []Step{}, Pending: []Step{}}
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("error acquiring a connection: %w", err)
	}
	defer conn.Release()

	riverApplied := map[int]bool{}
	rm, err := m.riverMigrator()
	if err != nil {
		return nil, err
	}
	// River's own API: it finds no versions, rather than an error, in a
	// schema it has not migrated yet.
	existing, err := rm.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("error reading River migrations: %w", err)
	}
	for _, v := range existing {
		riverApplied[v.Version] = true
	}
	for _, v := range rm.AllVersions() {
		step := Step{Line: "river", Version: v.Version, Name: v.Name}
		if riverApplied[v.Version] {
			st.Applied = append(st.Applied, step)
		} else {
			st.Pending = append(st.Pending, step)
		}
	}
	applied, err := m.applied(ctx, conn)
	if err != nil {
		return nil, err
	}
	for _, mig := range m.migrations {
		step := Step{Line: "tributary", Version: mig.Version, Name: mig.Name}
		if _, ok := applied[mig.Version]; ok {
			st.Applied = append(st.Applied, step)
		} else {
			st.Pending = append(st.Pending, step)
		}
	}
	return st, nil
}

// Current reports whether every migration of both lines is applied.
func (m *Migrator) Current(ctx context.Context) (bool, error) {
	st, err := m.Status(ctx)
	if err != nil {
		return false, err
	}
	return len(st.Pending) == 0, nil
}

func (m *Migrator) applied(ctx context.Context, q *pgxpool.Conn) (map[int]time.Time, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", m.schema+".tributary_migration").Scan(&exists); err != nil {
		return nil, fmt.Errorf("error checking for tributary_migration: %w", err)
	}
	out := map[int]time.Time{}
	if !exists {
		return out, nil
	}
	rows, err := q.Query(ctx, "SELECT version, applied_at FROM "+pgx.Identifier{m.schema, "tributary_migration"}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("error listing applied migrations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, fmt.Errorf("error scanning applied migration: %w", err)
		}
		out[v] = at
	}
	return out, rows.Err()
}

// step applies or rolls back one migration in its own transaction.
func (m *Migrator) step(ctx context.Context, conn *pgxpool.Conn, mig Migration, up bool) error {
	dir := map[bool]string{true: "up", false: "down"}[up]
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{m.schema}.Sanitize()); err != nil {
			return err
		}
		body := mig.Up
		if !up {
			body = mig.Down
		}
		if _, err := tx.Exec(ctx, body); err != nil {
			return err
		}
		table := pgx.Identifier{m.schema, "tributary_migration"}.Sanitize()
		if up {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name, applied_at) VALUES ($1, $2, $3)", mig.Version, mig.Name, time.Now().UTC())
			return err
		}
		if mig.Version == 1 {
			return nil // the down step dropped the bookkeeping table itself
		}
		_, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE version = $1", mig.Version)
		return err
	})
	if err != nil {
		return fmt.Errorf("error migrating %s %04d_%s in schema %q: %w", dir, mig.Version, mig.Name, m.schema, err)
	}
	return nil
}

// Names returns "NNNN_name" for every embedded migration, for listings.
func Names(migs []Migration) []string {
	out := make([]string, len(migs))
	for i, mig := range migs {
		out[i] = fmt.Sprintf("%04d_%s", mig.Version, mig.Name)
	}
	return out
}
