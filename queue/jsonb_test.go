package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestCheckJSONBAgreesWithPostgres runs every case through a real jsonb
// cast: CheckJSONB must refuse exactly what PostgreSQL refuses.
func TestCheckJSONBAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	cases := []struct {
		json    string
		mention string // empty: storable
	}{
		{`{"a":"plain"}`, ""},
		{`{"a":"\u0000"}`, `\u0000`},
		{`{"\u0000":1}`, `\u0000`},
		{`["x","\u0000"]`, `\u0000`},
		{`{"a":"\\u0000"}`, ""}, // an escaped backslash, then text
		{`{"a":"\\\u0000"}`, `\u0000`},
		{`{"a":"\u0001\u001f"}`, ""},
		{`{"a":"\ud83d\ude00"}`, ""},
		{`{"a":"\uD83D\uDE00"}`, ""},
		{`{"a":"\ud800"}`, "first half of a surrogate pair"},
		{`{"a":"\ud800x"}`, "first half of a surrogate pair"},
		{`{"a":"\ud800\u0041"}`, "first half of a surrogate pair"},
		{`{"a":"\udc00"}`, "second half of a surrogate pair"},
		{`{"a":"\ud800\ud800"}`, "first half of a surrogate pair"},
		{"{\"a\":\"\xff\"}", "invalid UTF-8"},
		{"{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8"}, // a surrogate written as UTF-8
		{`{"a":"é ü 日本"}`, ""},
		{`[0, -0, 1.5, -2e3, 1E+2, 0.000001]`, ""},
		{`1e131071`, ""},
		{`9.9e131071`, ""},
		{`0.1e131072`, ""},
		{`10e131071`, "digits before the decimal point"},
		{`1e131072`, "digits before the decimal point"},
		{`-1e1000000`, "digits before the decimal point"},
		{`1e-16383`, ""},
		{`1e-16384`, "digits after the decimal point"},
		{`0.5e-16383`, "digits after the decimal point"},
		{`0e-999999`, "digits after the decimal point"},
		{`0e999999`, ""},
		{`0.0000e131072`, ""},
		{`1e99999999999999999999`, "beyond the range"},
		{`{"n":1e-20000}`, "digits after the decimal point"},
	}
	for _, tc := range cases {
		err := queue.CheckJSONB([]byte(tc.json))
		_, pgErr := pool.Exec(ctx, "SELECT $1::text::jsonb", tc.json)
		if strings.Contains(tc.json, "\xff") || strings.Contains(tc.json, "\xed") {
			// pgx cannot even send invalid UTF-8 as text; Postgres refuses
			// it before any cast. Send the bytes instead.
			_, pgErr = pool.Exec(ctx, "SELECT convert_from($1::bytea, 'UTF8')::jsonb", []byte(tc.json))
		}
		if tc.mention == "" {
			require.NoError(t, err, "%s", tc.json)
			require.NoError(t, pgErr, "Postgres refuses %s", tc.json)
			continue
		}
		require.Error(t, pgErr, "Postgres accepts %s, CheckJSONB need not refuse it", tc.json)
		var se *queue.StorageError
		require.ErrorAs(t, err, &se, "%s", tc.json)
		require.True(t, errors.Is(err, queue.ErrNotStorable))
		require.Contains(t, err.Error(), tc.mention, "%s", tc.json)
	}
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	require.NoError(t, queue.CheckText(""))
	require.NoError(t, queue.CheckText("order-17 é"))
	require.ErrorContains(t, queue.CheckText("a\x00b"), "NUL byte (PostgreSQL text cannot hold it) at byte 1")
	require.ErrorContains(t, queue.CheckText("ab\xff"), "invalid UTF-8 at byte 2")
}
