// Package bench holds the measurement code behind `tributary bench`. Each
// benchmark runs tributary's path and a baseline in the same process run, on
// fresh schemas, so the ratio between them holds on whatever machine runs
// it; each writes a human report to an io.Writer as it goes and returns its
// figures for --json. cmd/tributary only wires flags to the Run functions.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
)

// TempSchema creates and migrates a schema for one benchmark side and
// returns it with a function that drops it.
func TempSchema(ctx context.Context, pool *pgxpool.Pool, prefix string) (string, func(), error) {
	schema := prefix + "_" + randomSuffix()
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		return "", nil, err
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = pool.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	if _, err := m.Up(ctx); err != nil {
		drop()
		return "", nil, fmt.Errorf("error migrating benchmark schema: %w", err)
	}
	return schema, drop, nil
}

// randomSuffix keeps the schemas and queues of concurrent runs apart.
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// median is the lower middle value for an even count.
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func medianRatio(num, den []float64) float64 {
	return median(ratios(num, den))
}

// ratios are num[i] / den[i].
func ratios(num, den []float64) []float64 {
	r := make([]float64, len(num))
	for i := range num {
		r[i] = num[i] / den[i]
	}
	return r
}

// spread prints per-round ratios and their range.
func spread(rs []float64) string {
	if len(rs) == 0 {
		return "no rounds"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("per-round ratios %s (spread %.2f-%.2f)", strings.Join(parts, ", "), slices.Min(rs), slices.Max(rs))
}
