package dashboard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestThroughputCache(t *testing.T) {
	t.Parallel()
	at := func(hms string) time.Time {
		tm, err := time.Parse(time.TimeOnly, hms)
		require.NoError(t, err)
		return time.Date(2026, 11, 29, tm.Hour(), tm.Minute(), tm.Second(), 0, time.UTC)
	}
	point := func(m string, completed int64) *ThroughputPoint {
		return &ThroughputPoint{Minute: at(m), Completed: completed}
	}
	byMinute := func(points []ThroughputPoint) map[string]int64 {
		out := map[string]int64{}
		for _, p := range points {
			out[p.Minute.Format("15:04")] = p.Completed
		}
		return out
	}
	c := &throughputCache{}

	// Nothing cached: the query reads the whole window.
	require.Equal(t, time.Unix(0, 0).UTC(), c.uncachedFrom())
	out := c.merge(at("10:05:30"), 15, c.uncachedFrom(), map[time.Time]*ThroughputPoint{
		at("10:00:00"): point("10:00:00", 3), at("10:05:00"): point("10:05:00", 1),
	})
	require.Len(t, out, 15)
	require.Equal(t, at("09:51:00"), out[0].Minute)
	require.Equal(t, int64(3), byMinute(out)["10:00"])
	require.Equal(t, int64(1), byMinute(out)["10:05"])
	// 10:04 and 10:05 may still receive rows; everything before is cached.
	require.Equal(t, at("10:04:00"), c.uncachedFrom())

	// Next minute: only 10:04 on is read; the cached 10:00 stays, even if
	// the fresh rows (which the query did not read) say otherwise.
	out = c.merge(at("10:06:10"), 15, c.uncachedFrom(), map[time.Time]*ThroughputPoint{
		at("10:00:00"): point("10:00:00", 99),
		at("10:04:00"): point("10:04:00", 2), at("10:06:00"): point("10:06:00", 5),
	})
	require.Equal(t, at("09:52:00"), out[0].Minute)
	got := byMinute(out)
	require.Equal(t, int64(3), got["10:00"])
	require.Equal(t, int64(2), got["10:04"])
	require.Equal(t, int64(0), got["10:05"], "10:05 was read again and had no rows this time")
	require.Equal(t, int64(5), got["10:06"])
	require.Equal(t, at("10:05:00"), c.uncachedFrom())

	// Minutes leave the cache with the window.
	c.merge(at("10:30:00"), 15, c.uncachedFrom(), nil)
	_, kept := c.points[at("10:00:00")]
	require.False(t, kept)
	require.Equal(t, at("10:29:00"), c.uncachedFrom())

	// The database clock going back starts over: what this query read (from
	// 10:29, nothing in the new window) is not trusted, and the next query
	// reads the whole window again.
	out = c.merge(at("09:00:30"), 15, c.uncachedFrom(), nil)
	require.Len(t, out, 15)
	require.Equal(t, at("08:46:00"), c.uncachedFrom())
	out = c.merge(at("09:00:40"), 15, c.uncachedFrom(), map[time.Time]*ThroughputPoint{at("08:50:00"): point("08:50:00", 7)})
	require.Equal(t, int64(7), byMinute(out)["08:50"])
	require.Equal(t, at("08:59:00"), c.uncachedFrom())
}
