package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	handle := func(context.Context, *inbox.Message) error { return nil }

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		ib, err := inbox.New(inbox.Config{Name: "orders.v1_in-2", HandleFunc: handle})
		require.NoError(t, err)
		cfg := ib.Config()
		require.Equal(t, "default", cfg.Queue)
		require.Equal(t, 25, cfg.MaxAttempts)
		require.Equal(t, inbox.SplitAfterDefault, cfg.SplitAfter)
		require.Nil(t, cfg.RetryDelayFunc)

		ib, err = inbox.New(inbox.Config{Name: "x", HandleFunc: handle, SplitAfter: -1, Queue: "in_q", MaxAttempts: 32767})
		require.NoError(t, err)
		require.Equal(t, -time.Duration(1), ib.Config().SplitAfter)
	})

	t.Run("BadValuesNameTheFieldAndTheValue", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			cfg  inbox.Config
			name string
			want string
		}{
			{inbox.Config{HandleFunc: handle}, "Name", "invalid Name: an inbox needs a name"},
			{inbox.Config{Name: "has space", HandleFunc: handle}, "Name", `invalid Name "has space": use at most 128 letters, digits, '.', '_' and '-'`},
			{inbox.Config{Name: "é", HandleFunc: handle}, "Name", `invalid Name "é"`},
			{inbox.Config{Name: strings.Repeat("n", 129), HandleFunc: handle}, "Name", `invalid Name "nnnn`},
			{inbox.Config{Name: "orders"}, "HandleFunc", `invalid HandleFunc: inbox "orders" needs a handler`},
			{inbox.Config{Name: "orders", HandleFunc: handle, Queue: "Bad Queue"}, "Queue", `invalid Queue "Bad Queue": inbox "orders": River accepts`},
			{inbox.Config{Name: "orders", HandleFunc: handle, Queue: "a__b"}, "Queue", `invalid Queue "a__b"`},
			{inbox.Config{Name: "orders", HandleFunc: handle, MaxAttempts: -1}, "MaxAttempts", `invalid MaxAttempts "-1": inbox "orders": want 1 to 32767 (0 for the default, 25)`},
			{inbox.Config{Name: "orders", HandleFunc: handle, MaxAttempts: 40000}, "MaxAttempts", `invalid MaxAttempts "40000"`},
		} {
			_, err := inbox.New(tc.cfg)
			require.ErrorContains(t, err, tc.want)
			var ce *queue.ConfigError
			require.True(t, errors.As(err, &ce), "%v", err)
			require.Equal(t, tc.name, ce.Name)
		}
	})

	t.Run("WriterRefusesABadSchema", func(t *testing.T) {
		t.Parallel()
		ib, err := inbox.New(inbox.Config{Name: "orders", HandleFunc: handle})
		require.NoError(t, err)
		_, err = ib.Writer(`x"; drop table y; --`)
		require.ErrorContains(t, err, "invalid schema name")
	})
}
