package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigValidateNamesTheField(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate(), "the defaults are valid")
	for _, tc := range []struct {
		err   error
		field string
	}{
		{Config{DatabaseURL: "postgres://u@h:notaport/db"}.Validate(), "DatabaseURL"},
		{Config{Schema: "bad-schema;"}.Validate(), "Schema"},
		{RuntimeConfig{RescueStuckJobsAfter: 15 * time.Second}.Validate(), "RescueStuckJobsAfter"},
		{RuntimeConfig{LivenessTimeout: 500 * time.Millisecond}.Validate(), "LivenessTimeout"},
		{RuntimeConfig{Queues: map[string]int{"default": 0}}.Validate(), "Queues"},
	} {
		var ce *ConfigError
		require.True(t, errors.As(tc.err, &ce), "%v", tc.err)
		require.Equal(t, tc.field, ce.Name)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres://u:xxxxx@h/db", RedactURL("postgres://u:hunter2@h/db"))
	require.Equal(t, "postgres://h/db?password=xxxxx", RedactURL("postgres://h/db?password=hunter2"))
	require.Equal(t, "(redacted)", RedactURL("host=h password=hunter2"))
	err := Config{DatabaseURL: "postgres://u:hunter2@h:notaport/db"}.Validate()
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
}
