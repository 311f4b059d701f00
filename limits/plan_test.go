package limits

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPlan(t *testing.T) {
	t.Parallel()

	t.Run("PerKeyRoomOnly", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "b", used: 2, waiting: 5}, {key: "a", used: 1, waiting: 5}, {key: "c", used: 0, waiting: 1}}
		gs, next := plan(keys, 2, 0, "x")
		require.Equal(t, []grant{{key: "a", n: 1}, {key: "c", n: 1}}, gs)
		require.Equal(t, "x", next, "no total: the cursor does not move")
	})

	t.Run("NothingWaits", func(t *testing.T) {
		t.Parallel()
		gs, next := plan([]keyUse{{key: "a", used: 1}}, 2, 0, "")
		require.Empty(t, gs)
		require.Empty(t, next)
	})

	t.Run("OverLimitAdmitsNothing", func(t *testing.T) {
		t.Parallel()
		// A lowered limit (limits set) with more running than it allows.
		gs, _ := plan([]keyUse{{key: "a", used: 5, waiting: 3}}, 2, 0, "")
		require.Empty(t, gs)
	})

	t.Run("ZeroPauses", func(t *testing.T) {
		t.Parallel()
		gs, _ := plan([]keyUse{{key: "a", waiting: 3}}, 0, 0, "")
		require.Empty(t, gs)
	})

	t.Run("TotalRoundRobinFromCursor", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "a", waiting: 100}, {key: "b", waiting: 100}, {key: "c", waiting: 100}}
		gs, next := plan(keys, 1000, 4, "a")
		// b, c, a, b.
		require.Equal(t, []grant{{key: "a", n: 1}, {key: "b", n: 2}, {key: "c", n: 1}}, gs)
		require.Equal(t, "b", next)
		gs, next = plan(keys, 1000, 2, next)
		require.Equal(t, []grant{{key: "a", n: 1}, {key: "c", n: 1}}, gs)
		require.Equal(t, "a", next)
	})

	t.Run("TotalCountsUsedAcrossKeys", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "a", used: 3, waiting: 10}, {key: "b", waiting: 10}}
		gs, next := plan(keys, 1000, 4, "")
		require.Equal(t, []grant{{key: "a", n: 1}}, gs, "one free slot, first key after the empty cursor")
		require.Equal(t, "a", next)
	})

	t.Run("TotalWithPerKeyCap", func(t *testing.T) {
		t.Parallel()
		keys := []keyUse{{key: "big", waiting: 20000}, {key: "small", waiting: 2}}
		gs, _ := plan(keys, 3, 10, "")
		require.Equal(t, []grant{{key: "big", n: 3}, {key: "small", n: 2}}, gs)
	})

	t.Run("CursorPastLastKeyWraps", func(t *testing.T) {
		t.Parallel()
		gs, next := plan([]keyUse{{key: "a", waiting: 1}, {key: "b", waiting: 1}}, 1, 1, "zzz")
		require.Equal(t, []grant{{key: "a", n: 1}}, gs)
		require.Equal(t, "a", next)
	})

	t.Run("SmallTenantServedWithinOneRound", func(t *testing.T) {
		t.Parallel()
		// A key inserted after another's backlog still gets a slot in the
		// first pass that has room for two.
		keys := []keyUse{{key: "tenant-a", waiting: 20000}, {key: "tenant-b", waiting: 20}}
		gs, _ := plan(keys, 1<<30, 2, "")
		require.Equal(t, []grant{{key: "tenant-a", n: 1}, {key: "tenant-b", n: 1}}, gs)
	})
}

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
	require.ErrorContains(t, err, `limit "a": Max 0 must be at least 1`)
	_, err = New(Config{Limits: []Limit{{Name: "bad name", Max: 1}}})
	require.ErrorContains(t, err, `limit name "bad name"`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Max: 1}, {Name: "a", Max: 2}}})
	require.ErrorContains(t, err, `limit "a" is declared twice`)
	_, err = New(Config{Limits: []Limit{{Name: "a", Max: 1}}})
	require.NoError(t, err)
}
