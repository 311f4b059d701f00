package dashboard

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoginLimiter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	addr := func(i int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 32)
	}

	t.Run("WaitsDoubleUpToTheCap", func(t *testing.T) {
		t.Parallel()
		l := newLoginLimiter(100)
		k := addr(1)
		for range LoginFailuresFree {
			require.Zero(t, l.fail(k, now))
		}
		var waits []time.Duration
		for range 12 {
			waits = append(waits, l.fail(k, now))
		}
		require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}, waits[:4])
		require.Equal(t, LoginDelayMax, waits[len(waits)-1])
		require.Equal(t, LoginDelayMax, l.wait(k, now))
		require.Zero(t, l.wait(addr(2), now), "other addresses are not slowed")
		l.succeed(k)
		require.Zero(t, l.wait(k, now))
	})

	t.Run("ForgetsAfterAnHourQuiet", func(t *testing.T) {
		t.Parallel()
		l := newLoginLimiter(100)
		k := addr(1)
		for range LoginFailuresFree {
			l.fail(k, now)
		}
		require.Zero(t, l.fail(k, now.Add(LoginForgetAfter+time.Second)), "a fresh start with free attempts")
	})

	t.Run("MemoryIsBoundedAndAFloodKeepsTheSlowedAddress", func(t *testing.T) {
		t.Parallel()
		l := newLoginLimiter(500)
		slowed := addr(0)
		for range LoginFailuresFree + 10 {
			l.fail(slowed, now)
		}
		require.Equal(t, LoginDelayMax, l.wait(slowed, now))
		for i := 1; i <= 5000; i++ {
			l.fail(addr(i), now.Add(time.Duration(i)*time.Millisecond))
			require.LessOrEqual(t, len(l.entries), 500)
		}
		require.Positive(t, l.wait(slowed, now.Add(time.Second)), "one-off addresses evicted each other, not the slowed one")
	})

	t.Run("ClientKeys", func(t *testing.T) {
		t.Parallel()
		key := func(remote string) string {
			r := httptest.NewRequest("POST", "/login", nil)
			r.RemoteAddr = remote
			return clientKey(r).String()
		}
		require.Equal(t, "192.0.2.7/32", key("192.0.2.7:51234"))
		require.Equal(t, "192.0.2.7/32", key("[::ffff:192.0.2.7]:51234"))
		require.Equal(t, "2001:db8:1:2::/64", key("[2001:db8:1:2:aaaa::1]:443"))
		require.Equal(t, key("[2001:db8:1:2:aaaa::1]:443"), key("[2001:db8:1:2:bbbb::9]:443"), "one /64 is one client")
		require.Equal(t, fmt.Sprint(netip.Prefix{}), key("not an address"))
	})
}
