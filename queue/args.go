package queue

import (
	"encoding/json"
	"fmt"
)

// RawArgs is a job whose kind is known only at run time and whose arguments
// are already JSON: the CLI's enqueue, the inbound AMQP bridge, replays. The
// JSON is inserted as is.
type RawArgs struct {
	KindName string
	JSON     json.RawMessage
}

// Kind returns the job kind.
func (a RawArgs) Kind() string { return a.KindName }

// MarshalJSON returns the raw arguments.
func (a RawArgs) MarshalJSON() ([]byte, error) {
	if len(a.JSON) == 0 {
		return []byte("{}"), nil
	}
	if !json.Valid(a.JSON) {
		return nil, fmt.Errorf("arguments for job kind %q are not valid JSON", a.KindName)
	}
	return a.JSON, nil
}
