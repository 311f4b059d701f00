package limits

import (
	"slices"
	"strings"
)

// keyUse is one partition key of a limit when admission looks at it: its
// jobs holding a slot (available or running) and its due pending jobs.
type keyUse struct {
	key           string
	used, waiting int
}

// grant is how many waiting jobs of one key a pass admits.
type grant struct {
	key string
	n   int
}

// plan decides one admission pass of a limit, with no clock and no
// database: each key may have up to perKey jobs holding a slot; with total
// > 0 the limit's keys together may hold at most total, and the free slots
// go round-robin, one job per key per round, starting with the first key
// after cursor (in key order), so a key with a large backlog takes one
// slot per round like every other. It returns the grants in key order and
// the cursor for the next pass: the last key served, or cursor unchanged
// when nothing was admitted or no total binds.
func plan(keys []keyUse, perKey, total int, cursor string) ([]grant, string) {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b keyUse) int { return strings.Compare(a.key, b.key) })
	room := make([]int, len(keys))
	used := 0
	for i, k := range keys {
		used += k.used
		room[i] = min(k.waiting, max(perKey-k.used, 0))
	}
	counts := make([]int, len(keys))
	if total <= 0 {
		copy(counts, room)
		return grants(keys, counts), cursor
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
	return grants(keys, counts), next
}

func grants(keys []keyUse, counts []int) []grant {
	var out []grant
	for i, n := range counts {
		if n > 0 {
			out = append(out, grant{key: keys[i].key, n: n})
		}
	}
	return out
}
