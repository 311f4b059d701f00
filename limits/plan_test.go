package limits

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPlan(t *testing.T) {
	t.Parallel()

	t.Run("PerKeyRoomOnly", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "b", used: 2, waiting: 5}, {key: "a", used: 1, waiting: 5}, {key: "c", used: 0, waiting: 1}}
		gs, next := plan(keys, 2, 0, 0, "x")
		require.Equal(t, []grant{{key: "a", n: 1, weight: unlimited}, {key: "c", n: 1, weight: unlimited}}, gs)
		require.Equal(t, "x", next, "no total: the cursor does not move")
	})

	t.Run("NothingWaits", func(t *testing.T) {
		t.Parallel()
		gs, next := plan([]keyUse{{key: "a", used: 1}}, 2, 0, 0, "")
		require.Empty(t, gs)
		require.Empty(t, next)
	})

	t.Run("OverLimitAdmitsNothing", func(t *testing.T) {
		t.Parallel()
		// A lowered limit (limits set) with more running than it allows.
		gs, _ := plan([]keyUse{{key: "a", used: 5, waiting: 3}}, 2, 0, 0, "")
		require.Empty(t, gs)
	})

	t.Run("ZeroPauses", func(t *testing.T) {
		t.Parallel()
		gs, _ := plan([]keyUse{{key: "a", waiting: 3}}, 0, 0, 0, "")
		require.Empty(t, gs)
	})

	t.Run("TotalRoundRobinFromCursor", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "a", waiting: 100}, {key: "b", waiting: 100}, {key: "c", waiting: 100}}
		gs, next := plan(keys, 1000, 4, 0, "a")
		// b, c, a, b.
		require.Equal(t, []grant{{key: "a", n: 1, weight: unlimited}, {key: "b", n: 2, weight: unlimited}, {key: "c", n: 1, weight: unlimited}}, gs)
		require.Equal(t, "b", next)
		gs, next = plan(keys, 1000, 2, 0, next)
		require.Equal(t, []grant{{key: "a", n: 1, weight: unlimited}, {key: "c", n: 1, weight: unlimited}}, gs)
		require.Equal(t, "a", next)
	})

	t.Run("TotalCountsUsedAcrossKeys", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "a", used: 3, waiting: 10}, {key: "b", waiting: 10}}
		gs, next := plan(keys, 1000, 4, 0, "")
		require.Equal(t, []grant{{key: "a", n: 1, weight: unlimited}}, gs, "one free slot, first key after the empty cursor")
		require.Equal(t, "a", next)
	})

	t.Run("TotalWithPerKeyCap", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "big", waiting: 20000}, {key: "small", waiting: 2}}
		gs, _ := plan(keys, 3, 10, 0, "")
		require.Equal(t, []grant{{key: "big", n: 3, weight: unlimited}, {key: "small", n: 2, weight: unlimited}}, gs)
	})

	t.Run("CursorPastLastKeyWraps", func(t *testing.T) {
		t.Parallel()
		gs, next := plan([]keyUse{{key: "a", waiting: 1}, {key: "b", waiting: 1}}, 1, 1, 0, "zzz")
		require.Equal(t, []grant{{key: "a", n: 1, weight: unlimited}}, gs)
		require.Equal(t, "a", next)
	})

	t.Run("SmallTenantServedWithinOneRound", func(t *testing.T) {
		t.Parallel()
		// A key inserted after another's backlog still gets a slot in the
		// first pass that has room for two.
		keys := []keyUse{{key: "tenant-a", waiting: 20000}, {key: "tenant-b", waiting: 20}}
		gs, _ := plan(keys, 1<<30, 2, 0, "")
		require.Equal(t, []grant{{key: "tenant-a", n: 1, weight: unlimited}, {key: "tenant-b", n: 1, weight: unlimited}}, gs)
	})
}

func TestPlanRate(t *testing.T) {
	t.Parallel()

	t.Run("RateBudgetPerKey", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "a", waiting: 500, started: 60}, {key: "b", waiting: 5, started: 0}, {key: "c", waiting: 9, started: 100}}
		gs, _ := plan(keys, unlimited, 0, 100, "")
		require.Equal(t, []grant{{key: "a", n: 40, weight: 40}, {key: "b", n: 5, weight: 100}}, gs,
			"a has 40 left of 100 (at most 40 jobs of weight 1); b all five within 100; c none")
	})

	t.Run("RateAndMax", func(t *testing.T) {
		t.Parallel()
		gs, _ := plan([]keyUse{{key: "a", used: 1, waiting: 50, started: 10}}, 3, 0, 100, "")
		require.Equal(t, []grant{{key: "a", n: 2, weight: 90}}, gs)
	})

	t.Run("StartedOverRate", func(t *testing.T) {
		t.Parallel()
		// A lowered rate, or conservative counting: nothing, never negative.
		gs, _ := plan([]keyUse{{key: "a", waiting: 50, started: 130}}, unlimited, 0, 100, "")
		require.Empty(t, gs)
	})
}

func TestLimitWeight(t *testing.T) {
	t.Parallel()
	l := Limit{Name: "r", Rate: 10, WeightArg: "cost"}
	for _, tt := range []struct {
		args string
		want int
		err  string
	}{
		{`{"cost":3}`, 3, ""},
		{`{}`, 1, ""},
		{`{"cost":null}`, 1, ""},
		{`{"cost":11}`, 0, "weight 11 must be 1 to the limit's Rate 10"},
		{`{"cost":0}`, 0, "weight 0 must be 1"},
		{`{"cost":"x"}`, 0, "not a whole number"},
	} {
		got, err := l.weight(nil, []byte(tt.args))
		if tt.err != "" {
			require.ErrorContains(t, err, tt.err, tt.args)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.args)
	}
	got, err := l.weight(weighed(7), []byte(`{"cost":3}`))
	require.NoError(t, err)
	require.Equal(t, 7, got, "Weigher wins")
}

type weighed int

func (w weighed) LimitWeight() int { return int(w) }

func TestLimitKey(t *testing.T) {
	t.Parallel()
	l := Limit{Name: "l", KeyArg: "customer_id", Max: 1}
	for _, tt := range []struct {
		args string
		want string
	}{
		{`{"customer_id":"c-1"}`, "c-1"},
		{`{"customer_id":42}`, "42"},
		{`{"customer_id":null}`, ""},
		{`{"other":1}`, ""},
		{`{"customer_id":{"a":1}}`, `{"a":1}`},
	} {
		got, err := l.key(nil, []byte(tt.args))
		require.NoError(t, err)
		require.Equal(t, tt.want, got, tt.args)
	}
	got, err := l.key(keyed("explicit"), []byte(`{"customer_id":"c-1"}`))
	require.NoError(t, err)
	require.Equal(t, "explicit", got)
	got, err = Limit{Name: "g", Max: 1}.key(nil, []byte(`{"customer_id":"c-1"}`))
	require.NoError(t, err)
	require.Empty(t, got, "no KeyArg: one key")
}

type keyed string

func (k keyed) LimitKey() string { return string(k) }

func TestValidate(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Limits: []Limit{{Name: "a", Max: 0}}})
	require.ErrorContains(t, err, `limit "a": Max 0 must be at least 1 (or give a Total or a Rate)`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Rate: 10, Period: time.Microsecond}}})
	require.ErrorContains(t, err, `Period 1µs must be at least 1ms`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Max: 1, WeightArg: "w"}}})
	require.ErrorContains(t, err, `WeightArg "w" needs a Rate`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Rate: 100}}})
	require.NoError(t, err, "a rate limit needs no Max")
	_, err = New(Config{Limits: []Limit{{Name: "bad name", Max: 1}}})
	require.ErrorContains(t, err, `limit name "bad name"`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Max: 1}, {Name: "a", Max: 2}}})
	require.ErrorContains(t, err, `limit "a" is declared twice`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Max: 1}}})
	require.NoError(t, err)
}

func TestCapGrants(t *testing.T) {
	t.Parallel()
	gs := []grant{{key: "a", n: 600}, {key: "b", n: 600}, {key: "c", n: 5}}
	got, capped := capGrants(gs, 1000)
	require.True(t, capped)
	require.Equal(t, []grant{{key: "a", n: 600}, {key: "b", n: 400}}, got)
	got, capped = capGrants(gs[:1], 1000)
	require.False(t, capped)
	require.Equal(t, gs[:1], got)
	got, capped = capGrants([]grant{{key: "a", n: 1000}, {key: "b", n: 1}}, 1000)
	require.True(t, capped)
	require.Equal(t, []grant{{key: "a", n: 1000}}, got)
}
