package scheduler

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

func TestAddRejectsBadSchedules(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) *Scheduler {
		t.Helper()
		db := pgtest.New(t)
		return New(db.Client(t), Config{Logger: pgtest.Logger(t)})
	}

	cases := []struct {
		name      string
		schedule  Schedule
		wantField string
		wantValue string
	}{
		{"invalid spec", Schedule{Name: "reports", Spec: "61 * * * *", Args: noopArgs{}}, "spec", "61 * * * *"},
		{"too few fields", Schedule{Name: "reports", Spec: "* * *", Args: noopArgs{}}, "spec", "* * *"},
		{"unknown descriptor", Schedule{Name: "reports", Spec: "@fortnightly", Args: noopArgs{}}, "spec", "@fortnightly"},
		{"sub-second every", Schedule{Name: "reports", Spec: "@every 500ms", Args: noopArgs{}}, "spec", "@every 500ms"},
		{"never fires", Schedule{Name: "reports", Spec: "0 0 30 2 *", Args: noopArgs{}}, "spec", "0 0 30 2 *"},
		{"unknown timezone field", Schedule{Name: "reports", Spec: "0 3 * * *", Timezone: "Mars/Olympus_Mons", Args: noopArgs{}}, "timezone", "Mars/Olympus_Mons"},
		{"unknown CRON_TZ", Schedule{Name: "reports", Spec: "CRON_TZ=Atlantis/Capital 0 3 * * *", Args: noopArgs{}}, "timezone", "Atlantis/Capital"},
		{"CRON_TZ disagrees", Schedule{Name: "reports", Spec: "CRON_TZ=Europe/Berlin 0 3 * * *", Timezone: "Asia/Tokyo", Args: noopArgs{}}, "spec", "CRON_TZ=Europe/Berlin 0 3 * * *"},
		{"empty name", Schedule{Name: "", Spec: "@daily", Args: noopArgs{}}, "name", ""},
		{"bad name", Schedule{Name: "bad name!", Spec: "@daily", Args: noopArgs{}}, "name", "bad name!"},
		{"nil args", Schedule{Name: "reports", Spec: "@daily"}, "args", "<nil>"},
		{"bad catch-up", Schedule{Name: "reports", Spec: "@daily", Args: noopArgs{}, CatchUp: "sometimes"}, "catch-up policy", "sometimes"},
		{"bad overlap", Schedule{Name: "reports", Spec: "@daily", Args: noopArgs{}, Overlap: "queue"}, "overlap policy", "queue"},
		{"each with overlap skip", Schedule{Name: "reports", Spec: "@daily", Args: noopArgs{}, CatchUp: CatchUpEach, Overlap: OverlapSkip}, "catch-up policy", "each"},
		{"bad priority", Schedule{Name: "reports", Spec: "@daily", Args: noopArgs{}, InsertOpts: InsertOpts{Priority: 9}}, "priority", "9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t)
			err := s.Add(tc.schedule)
			require.Error(t, err)
			var se *ScheduleError
			require.True(t, errors.As(err, &se), "want a *ScheduleError, got %T: %v", err, err)
			require.Equal(t, tc.schedule.Name, se.Name)
			require.Equal(t, tc.wantField, se.Field)
			require.Equal(t, tc.wantValue, se.Value)
			require.Contains(t, err.Error(), `schedule "`+tc.schedule.Name+`"`)
			require.Contains(t, err.Error(), tc.wantValue)
			t.Log(err)
		})
	}

	t.Run("duplicate name", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		require.NoError(t, s.Add(Schedule{Name: "reports", Spec: "@daily", Args: noopArgs{}}))
		err := s.Add(Schedule{Name: "reports", Spec: "@hourly", Args: noopArgs{}})
		require.ErrorIs(t, err, ErrDuplicateName)
		require.EqualError(t, err, `schedule "reports": invalid name "reports": a schedule with this name is already registered`)
	})

	t.Run("duplicate within one call registers nothing", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		err := s.Add(
			Schedule{Name: "a", Spec: "@daily", Args: noopArgs{}},
			Schedule{Name: "b", Spec: "@daily", Args: noopArgs{}},
			Schedule{Name: "a", Spec: "@hourly", Args: noopArgs{}},
		)
		require.ErrorIs(t, err, ErrDuplicateName)
		require.Contains(t, err.Error(), `schedule "a"`)
		require.Empty(t, s.names)
	})

	t.Run("valid specs", func(t *testing.T) {
		t.Parallel()
		s := setup(t)
		require.NoError(t, s.Add(
			Schedule{Name: "five", Spec: "*/5 * * * *", Args: noopArgs{}},
			Schedule{Name: "seconds", Spec: "*/10 * * * * *", Args: noopArgs{}},
			Schedule{Name: "every", Spec: "@every 1m30s", Args: noopArgs{}},
			Schedule{Name: "daily", Spec: "@daily", Args: noopArgs{}},
			Schedule{Name: "tz", Spec: "CRON_TZ=Europe/Berlin 0 3 * * *", Args: noopArgs{}},
			Schedule{Name: "tz-field", Spec: "0 3 * * *", Timezone: "America/New_York", Args: noopArgs{}},
		))
	})
}
