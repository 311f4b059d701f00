package events

import (
	"fmt"
	"hash/fnv"
)

// notifyChannel is the LISTEN/NOTIFY channel that wakes the forwarders of a
// schema. Channel names are global to a database, so the schema is part of
// it (hashed to stay within Postgres' 63-byte identifier limit).
func notifyChannel(schema string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(schema))
	return fmt.Sprintf("tributary_outbox_%016x", h.Sum64())
}
