package tributary

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// parseDuration parses the one duration syntax of tributary's variables: a
// Go duration ("90s", "36h") or whole days ("7d"), at least lo. Where a
// duration is a retention (forever true), "forever" keeps rows for ever and
// is -1; "off" and "-1", the clean-up variables' older spellings, mean the
// same. (The variables ending in _MS are whole milliseconds instead: their
// names come from the Node service.)
func parseDuration(raw string, lo time.Duration, forever bool) (time.Duration, error) {
	if forever {
		switch strings.ToLower(raw) {
		case "forever", "off", "-1":
			return -1, nil
		}
	}
	d, err := time.ParseDuration(raw)
	if days, ok := strings.CutSuffix(raw, "d"); ok && err != nil {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	}
	if err != nil || d < lo {
		return 0, errors.New(durationWant(lo, forever))
	}
	return d, nil
}

// durationWant says what parseDuration accepts.
func durationWant(lo time.Duration, forever bool) string {
	least := "a positive duration"
	if lo > time.Nanosecond {
		least = "a duration of at least " + lo.String()
	}
	want := fmt.Sprintf("want %s such as 90s, 36h or 7d", least)
	if forever {
		want += ", or forever"
	}
	return want
}
