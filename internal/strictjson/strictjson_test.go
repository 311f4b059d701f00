package strictjson

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// selfDecoding names its own fields: any case goes.
type selfDecoding struct{ v map[string]any }

func (s *selfDecoding) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.v) }

type inner struct {
	ID   string `json:"id"`
	Deep string `json:"deep"`
}

type outer struct {
	*inner
	ID   int          `json:"id"` // shadows inner's
	Self selfDecoding `json:"self"`
	At   time.Time    `json:"at"`
	Ptr  *inner       `json:"ptr"`
	Arr  [2]inner     `json:"arr"`
}

func TestCheckNames(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[outer]()
	for _, ok := range []string{
		`{"id":1,"deep":"x","self":{"ANY":1,"Case":2},"at":"2026-01-02T03:04:05Z","ptr":{"id":"p"},"arr":[{"id":"a"},{"deep":"b"}]}`,
		`null`, `[]`, `"s"`, `{}`,
	} {
		require.NoError(t, CheckNames([]byte(ok), typ), ok)
	}
	for _, tc := range []struct{ json, mention string }{
		{`{"self":{"a":1,"a":2}}`, `duplicate key "a" in self`},
		{`{"DEEP":"x"}`, `key "DEEP" matches field "deep"`},
		{`{"ptr":{"Id":"p"}}`, `key "Id" matches field "id" only when case is ignored (in ptr)`},
		{`{"arr":[{},{"deep":1,"deep":2}]}`, `duplicate key "deep" in arr[1]`},
		{`[{"a":1},{"b":1,"b":2}]`, `duplicate key "b" in [1]`},
	} {
		require.ErrorContains(t, CheckNames([]byte(tc.json), typ), tc.mention, tc.json)
	}
	names := fieldNames(typ)
	require.Equal(t, reflect.TypeFor[int](), names["id"], "the shallower field wins")
	require.Contains(t, names, "deep")
}
