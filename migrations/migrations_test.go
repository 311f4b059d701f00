package migrations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/migrations"
)

func TestMigrator(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*migrations.Migrator, string) {
		t.Helper()
		pool := pgtest.Pool(t)
		b := make([]byte, 5)
		_, _ = rand.Read(b)
		schema := "t_mig_" + hex.EncodeToString(b)
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		})
		m, err := migrations.New(pool, migrations.Config{Schema: schema})
		require.NoError(t, err)
		return m, schema
	}

	t.Run("UpIsIdempotent", func(t *testing.T) {
		t.Parallel()
		m, _ := setup(t)
		ctx := context.Background()
		res, err := m.Up(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, res.Steps)
		res, err = m.Up(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Steps)
		current, err := m.Current(ctx)
		require.NoError(t, err)
		require.True(t, current)
	})

	t.Run("StatusBeforeUpListsEverythingPending", func(t *testing.T) {
		t.Parallel()
		m, _ := setup(t)
		ctx := context.Background()
		st, err := m.Status(ctx)
		require.NoError(t, err, "a schema River has not migrated yet is not an error")
		require.Empty(t, st.Applied)
		lines := map[string]int{}
		for _, s := range st.Pending {
			lines[s.Line]++
		}
		require.Positive(t, lines["river"])
		require.Equal(t, len(m.All()), lines["tributary"])
		current, err := m.Current(ctx)
		require.NoError(t, err)
		require.False(t, current)
	})

	t.Run("ConcurrentUpMigratesOnce", func(t *testing.T) {
		t.Parallel()
		m, _ := setup(t)
		ctx := context.Background()
		var wg sync.WaitGroup
		counts := make([]int, 4)
		errs := make([]error, 4)
		for i := range counts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := m.Up(ctx)
				errs[i] = err
				if err == nil {
					counts[i] = len(res.Steps)
				}
			}()
		}
		wg.Wait()
		nonZero := 0
		for i := range counts {
			require.NoError(t, errs[i])
			if counts[i] > 0 {
				nonZero++
			}
		}
		require.Equal(t, 1, nonZero, "exactly one run migrates: %v", counts)
	})

	t.Run("DownRollsBackOneOfOurs", func(t *testing.T) {
		t.Parallel()
		m, _ := setup(t)
		ctx := context.Background()
		_, err := m.Up(ctx)
		require.NoError(t, err)
		all := m.All()
		res, err := m.Down(ctx)
		require.NoError(t, err)
		require.Len(t, res.Steps, 1)
		require.Equal(t, "tributary", res.Steps[0].Line)
		require.Equal(t, all[len(all)-1].Version, res.Steps[0].Version)
		st, err := m.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st.Pending, 1)
		current, err := m.Current(ctx)
		require.NoError(t, err)
		require.False(t, current)
		// Down all the way, then nothing more to roll back, then up again.
		for range len(all) - 1 {
			_, err := m.Down(ctx)
			require.NoError(t, err)
		}
		res, err = m.Down(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Steps)
		res, err = m.Up(ctx)
		require.NoError(t, err)
		require.Len(t, res.Steps, len(all))
	})

	t.Run("InvalidSchemaName", func(t *testing.T) {
		t.Parallel()
		_, err := migrations.New(pgtest.Pool(t), migrations.Config{Schema: `x"; drop table y; --`})
		require.ErrorContains(t, err, "invalid schema name")
	})
}
