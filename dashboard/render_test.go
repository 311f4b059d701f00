package dashboard

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/queue"
)

func TestFormatting(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		require.Equal(t, want, formatNum(n))
	}
	require.Equal(t, "≈1,000,000", formatCount(queue.Count{N: 1000000, Approximate: true}))
	require.Equal(t, "12", formatCount(queue.Count{N: 12}))
	require.Equal(t, "512 B", formatBytes(512))
	require.Equal(t, "1.5 KiB", formatBytes(1536))
	require.Equal(t, "3.0 MiB", formatBytes(3<<20))
	require.Equal(t, "250ms", formatSeconds(0.25))
	require.Equal(t, "1m 5s", formatSeconds(65))
	require.Equal(t, "2d 3h", formatSeconds((51 * time.Hour).Seconds()))
	require.Equal(t, "—", formatTime((*time.Time)(nil)))

	require.Equal(t, "{\n  \"a\": 1\n}", prettyJSON(json.RawMessage(`{"a":1}`)))
	big := json.RawMessage(`"` + strings.Repeat("é", prettyShowMax) + `"`)
	shown := prettyJSON(big)
	require.Less(t, len(shown), prettyShowMax+100)
	require.Contains(t, shown, "the JSON API has it whole")
	require.True(t, strings.HasPrefix(shown, `"é`))

	require.Equal(t, "/", safeNext("//evil.example"))
	require.Equal(t, "/", safeNext(`/\evil.example`))
	require.Equal(t, "/", safeNext("https://evil.example"))
	require.Equal(t, "/jobs?state=discarded", safeNext("/jobs?state=discarded"))
}
