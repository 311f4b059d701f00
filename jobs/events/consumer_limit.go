package events

import (
	"encoding/json"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// A capped consumer's dispatch jobs (ConsumerConfig.MaxHandlers) are
// written by tributary's own statements, which the limits' insert
// middleware never sees, so each of them carries its consumer's limit from
// the start (docs/limits.md, "Workflows and consumers"):
//   - a job that would be available at once (an event without an
//     aggregate, a batch, an idle lane's head, a batch's events split off)
//     is inserted pending with the limit (riverjob.LimitMetaName) and waits
//     for admission;
//   - an event behind its lane's head is a pending dispatch job (not a lane
//     event) with the limit for its release (riverjob.LimitMetaOnRelease):
//     admission does not see it until the lane promotes it, when migration
//     0028's door turns the mark into the limit and the job waits for
//     admission, so an aggregate's events still run one at a time, in
//     order;
//   - a job that leaves running for pending to wait for its lane's turn
//     again turns its limit back into the mark for its release
//     (riverjob.ReturnToPending, GiveBack, RequeueGivenUp).
// A consumer without a cap pays nothing: its jobs and lane events are
// written as before. Every key is "": the cap is over all the consumer's
// jobs.

// limitMetadata is the metadata of a capped consumer's dispatch job: the
// limit under name (riverjob.LimitMetaName, or LimitMetaOnRelease), its
// key "", and the lane's turn for a lane's head.
func limitMetadata(name, limit string, laneTurn bool) []byte {
	m := map[string]any{name: limit, riverjob.LimitMetaKey: ""}
	if laneTurn {
		m[riverjob.LaneTurnKey] = true
	}
	b, _ := json.Marshal(m) // strings and a bool
	return b
}
