package limits

import "fmt"

// Busy is what a limit does with a job whose key has no free slot.
type Busy string

const (
	// BusyQueue: the job waits for a slot, in order. The default.
	BusyQueue Busy = ""
	// BusyCancelNewest: a job that finds its key's slots all taken is
	// cancelled instead of waiting; the jobs that hold them run on.
	BusyCancelNewest Busy = "cancel_newest"
	// BusyCancelRunning: only the newest jobs of a key matter (re-indexing
	// one document): when jobs wait, the key's jobs that hold its slots are
	// cancelled (a running one through its context, as River's JobCancel
	// does), and so are its waiting jobs but the newest Max; those run as
	// the slots come back.
	BusyCancelRunning Busy = "cancel_running"
)

func (b Busy) validate(l Limit) error {
	switch b {
	case BusyQueue:
		return nil
	case BusyCancelNewest, BusyCancelRunning:
		if l.Max < 1 {
			return fmt.Errorf("limit %q: OnBusy %q needs a Max (per key)", l.Name, b)
		}
		return nil
	}
	return fmt.Errorf("limit %q: OnBusy %q: want %q, %q or empty (queue)", l.Name, b, BusyCancelNewest, BusyCancelRunning)
}

// busyCancel is what a busy-key strategy cancels of one key: its waiting
// jobs but the newest keepWaiting, and, with holding, the jobs holding its
// slots.
type busyCancel struct {
	key         string
	keepWaiting int
	holding     bool
}

// cancelBeforeAdmission plans BusyCancelRunning, before the pass plans its
// admissions: every key with jobs waiting keeps its newest perKey waiting
// jobs and cancels the rest and the jobs holding its slots.
func cancelBeforeAdmission(b Busy, keys []keyUse, perKey int) []busyCancel {
	if b != BusyCancelRunning {
		return nil
	}
	var out []busyCancel
	for _, k := range keys {
		if k.waiting == 0 {
			continue
		}
		keep := min(k.waiting, perKey)
		if keep < k.waiting || k.used > 0 {
			out = append(out, busyCancel{key: k.key, keepWaiting: keep, holding: k.used > 0})
		}
	}
	return out
}

// cancelAfterAdmission plans BusyCancelNewest, after the pass's grants: a
// key whose slots the grants fill cancels the jobs still waiting.
func cancelAfterAdmission(b Busy, keys []keyUse, gs []grant, perKey int) []busyCancel {
	if b != BusyCancelNewest {
		return nil
	}
	granted := map[string]int{}
	for _, g := range gs {
		granted[g.key] = g.n
	}
	var out []busyCancel
	for _, k := range keys {
		g := granted[k.key]
		if k.waiting > g && k.used+g >= perKey {
			out = append(out, busyCancel{key: k.key, keepWaiting: 0})
		}
	}
	return out
}
