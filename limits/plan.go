package limits

import (
	"math"
	"slices"
	"strings"
)

// keyUse is one partition key of a limit when admission looks at it: its
// jobs holding a slot (available or running), its due pending jobs, and
// the weight of its starts within a rate limit's period.
type keyUse struct {
	key           string
	used, waiting int
	started       int64
}

// grant is how many waiting jobs of one key a pass admits (at most n),
// and the most weight they may add up to.
type grant struct {
	key    string
	n      int
	weight int64
}

// unlimited stands for no cap: a rate limit without Max, or no rate.
const unlimited = math.MaxInt32

// plan decides one admission pass of a limit, with no clock and no
// database: each key may have up to perKey jobs holding a slot and, with
// rate > 0, start jobs weighing up to rate less what it started within the
// period (each job weighs at least 1, so that also bounds their number);
// with total
// > 0 the limit's keys together may hold at most total, and the free slots
// go round-robin, one job per key per round, starting with the first key
// after cursor (in key order), so a key with a large backlog takes one
// slot per round like every other. It returns the grants in key order and
// the cursor for the next pass: the last key served, or cursor unchanged
// when nothing was admitted or no total binds.
func plan(keys []keyUse, perKey, total int, rate int64, cursor string) ([]grant, string) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b keyUse) int { return strings.Compare(a.key, b.key) })
	room := make([]int, len(keys))
	budget := make([]int64, len(keys))
	used := 0
	for i, k := range keys {
		used += k.used
		room[i] = min(k.waiting, max(perKey-k.used, 0))
		budget[i] = unlimited
		if rate > 0 {
			budget[i] = max(rate-k.started, 0)
			room[i] = int(min(int64(room[i]), budget[i]))
		}
	}
	counts := make([]int, len(keys))
	if total <= 0 {
		copy(counts, room)
		return grants(keys, counts, budget), cursor
	}
	free := max(total-used, 0)
	// The first key after the cursor, wrapping to the first key.
	start, _ := slices.BinarySearchFunc(keys, cursor, func(k keyUse, c string) int {
		if k.key <= c {
			return -1
		}
		return 1
	})
	next := cursor
	for free > 0 {
		served := false
		for j := range keys {
			i := (start + j) % len(keys)
			if free == 0 {
				break
			}
			if counts[i] < room[i] {
				counts[i]++
				free--
				served = true
				next = keys[i].key
			}
		}
		if !served {
			break
		}
	}
	return grants(keys, counts, budget), next
}

func grants(keys []keyUse, counts []int, budget []int64) []grant {
	var out []grant
	for i, n := range counts {
		if n > 0 {
			out = append(out, grant{key: keys[i].key, n: n, weight: budget[i]})
		}
	}
	return out
}
