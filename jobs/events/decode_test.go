package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/events"
)

type strictInner struct {
	Sku string `json:"sku"`
}

type strictBase struct {
	ID string `json:"id"`
}

type strictPayload struct {
	strictBase
	OrderID string            `json:"order_id"`
	Items   []strictInner     `json:"items"`
	Attrs   map[string]string `json:"attrs"`
	Extra   any               `json:"extra"`
	Raw     json.RawMessage   `json:"raw"`
	Plain   int
	Skipped string `json:"-"`
}

// TestDecodeStrict: a payload has one reading. A repeated key (Go keeps the
// last value, other decoders the first) or a key that matches a field only
// when case is ignored (Go's decoder folds case; most others do not) would
// let producer and consumer see different values, so both are refused,
// wherever they occur.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	var ok strictPayload
	require.NoError(t, events.DecodeStrict([]byte(`{"id":"i","order_id":"o","items":[{"sku":"s"}],"attrs":{"a":"1","A":"2"},"extra":{"k":1},"raw":{"x":1},"Plain":3}`), &ok))
	require.Equal(t, "i", ok.ID)
	require.Equal(t, map[string]string{"a": "1", "A": "2"}, ok.Attrs, "map keys are free")

	for _, tc := range []struct {
		name, json, mention string
	}{
		{"DuplicateField", `{"order_id":"a","order_id":"b"}`, `duplicate key "order_id"`},
		{"DuplicateEmbeddedField", `{"id":"a","id":"b"}`, `duplicate key "id"`},
		{"DuplicateInArrayElement", `{"items":[{"sku":"a"},{"sku":"a","sku":"b"}]}`, `duplicate key "sku" in items[1]`},
		{"DuplicateMapKey", `{"attrs":{"a":"1","a":"2"}}`, `duplicate key "a" in attrs`},
		{"DuplicateInsideAny", `{"extra":{"k":1,"k":2}}`, `duplicate key "k" in extra`},
		{"DuplicateInsideRawMessage", `{"raw":{"x":1,"x":2}}`, `duplicate key "x" in raw`},
		{"EscapedDuplicate", `{"order_id":"a","order\u005fid":"b"}`, `duplicate key "order_id"`},
		{"FieldByCaseOnly", `{"ORDER_ID":"a"}`, `key "ORDER_ID" matches field "order_id" only when case is ignored`},
		{"UntaggedFieldByCaseOnly", `{"plain":1}`, `key "plain" matches field "Plain" only when case is ignored`},
		{"EmbeddedFieldByCaseOnly", `{"Id":"a"}`, `key "Id" matches field "id" only when case is ignored`},
		{"NestedFieldByCaseOnly", `{"items":[{"SKU":"a"}]}`, `key "SKU" matches field "sku" only when case is ignored (in items[0])`},
	} {
		var p strictPayload
		err := events.DecodeStrict([]byte(tc.json), &p)
		require.Error(t, err, tc.name)
		require.ErrorContains(t, err, tc.mention, tc.name)
	}

	var top map[string]int
	require.ErrorContains(t, events.DecodeStrict([]byte(`{"a":1,"a":2}`), &top), `duplicate key "a"`)
	require.ErrorContains(t, events.DecodeStrict([]byte(`{} {}`), &top), "trailing data")
}
