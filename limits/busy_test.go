package limits

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBusyPlans(t *testing.T) {
	t.Parallel()
	keys := []keyUse{{key: "a", used: 1, waiting: 3}, {key: "b", used: 0, waiting: 2}, {key: "c", used: 1}}

	require.Empty(t, cancelBeforeAdmission(BusyQueue, keys, 1))
	require.Empty(t, cancelAfterAdmission(BusyQueue, keys, nil, 1))

	// Cancel running: keys with waiting jobs keep their newest Max waiting
	// and give up what holds their slots; a key with nothing waiting is
	// left alone.
	require.Equal(t, []busyCancel{{key: "a", keepWaiting: 1, holding: true}, {key: "b", keepWaiting: 1}},
		cancelBeforeAdmission(BusyCancelRunning, keys, 1))
	require.Equal(t, []busyCancel{{key: "a", keepWaiting: 2, holding: true}},
		cancelBeforeAdmission(BusyCancelRunning, keys, 2), "b's two waiting jobs fit its Max of 2")

	// Cancel newest: once the grants fill a key, what still waits goes.
	gs, _ := plan(keys, 1, 0, 0, "")
	require.Equal(t, []grant{{key: "b", n: 1, weight: unlimited}}, gs)
	require.Equal(t, []busyCancel{{key: "a"}, {key: "b"}}, cancelAfterAdmission(BusyCancelNewest, keys, gs, 1))
	gs, _ = plan(keys, 5, 0, 0, "")
	require.Empty(t, cancelAfterAdmission(BusyCancelNewest, keys, gs, 5), "room for all: nothing cancelled")
}

func TestBusyValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Limit{Name: "a", Max: 1, OnBusy: BusyCancelRunning}.Validate())
	require.ErrorContains(t, Limit{Name: "a", Rate: 5, OnBusy: BusyCancelNewest}.Validate(), `OnBusy "cancel_newest" needs a Max`)
	require.ErrorContains(t, Limit{Name: "a", Max: 1, OnBusy: "drop"}.Validate(), `OnBusy "drop": want`)
}
