package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// decodeHeaders decodes a message's headers, a JSON object, into the types
// Message.Headers documents: numbers become int64 when they are integers
// within its range, float64 otherwise.
func decodeHeaders(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var h map[string]any
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if h == nil {
		return nil, errors.New("headers: not a JSON object")
	}
	if dec.More() {
		return nil, errors.New("headers: data after the JSON object")
	}
	for k, v := range h {
		h[k] = headerValue(v)
	}
	return h, nil
}

// headerValue replaces the json.Numbers in v.
func headerValue(v any) any {
	switch v := v.(type) {
	case json.Number:
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(string(v), 64) // ±Inf for a number beyond float64
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = headerValue(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = headerValue(e)
		}
		return v
	default:
		return v
	}
}
