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

// TestScanAgreesWithDecoderWalk: the byte scan (check) reports exactly
// what the json.Decoder walk it replaced reports, error text included, for
// documents with every kind of finding at several depths, and for
// malformed or escaped input that it hands to the walk.
func TestScanAgreesWithDecoderWalk(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[outer]()
	docs := []string{
		`{"id":1,"deep":"x","self":{"ANY":1,"Case":2},"at":"2026-01-02T03:04:05Z","ptr":{"id":"p"},"arr":[{"id":"a"},{"deep":"b"}]}`,
		`null`, `[]`, `"s"`, `{}`, ` { } `, `[ 1 , 2 ]`, `{"id" : 1 , "deep" : "a,b}]"}`,
		`{"self":{"a":1,"a":2}}`, `{"DEEP":"x"}`, `{"ptr":{"Id":"p"}}`, `{"arr":[{},{"deep":1,"deep":2}]}`,
		`[{"a":1},{"b":1,"b":2}]`, `{"unknown":{"x":1,"x":2}}`, `{"unknown":[{"y":[1,{"z":1,"z":2}]}]}`,
		`{"id":1,"id":2}`, `{"ptr":{"deep":"\"quoted\" {\"x\":1}"},"ptr":null}`,
		`{"a\u0062":1,"ab":2}`, `{"de\u0065p":1,"DEEP":2}`, `{"id":1`, `{"id":}`, `[1,2`, `{"x":tru}`, ``, `{"s":"unterminated}`,
		`{"arr":[{"ID":"a"}]}`, `{"self":{"x":{"q":1,"q":2}}}`,
	}
	for _, doc := range docs {
		want := checkWithDecoder([]byte(doc), typ)
		got := CheckNames([]byte(doc), typ)
		if want == nil {
			require.NoError(t, got, doc)
			continue
		}
		require.EqualError(t, got, want.Error(), doc)
	}
}

// FuzzScanAgreesWithDecoderWalk: on any input, CheckNames says what the
// decoder walk says.
func FuzzScanAgreesWithDecoderWalk(f *testing.F) {
	for _, seed := range []string{`{"id":1,"deep":"x","arr":[{"id":"a"}]}`, `{"a":1,"a":2}`, `{"DEEP":1}`, `[{"x":[{"y":1,"y":2}]}]`, `{"a\"b":1}`} {
		f.Add([]byte(seed))
	}
	typ := reflect.TypeFor[outer]()
	f.Fuzz(func(t *testing.T, doc []byte) {
		want := checkWithDecoder(doc, typ)
		got := CheckNames(doc, typ)
		if (want == nil) != (got == nil) || (want != nil && want.Error() != got.Error()) {
			t.Fatalf("%q: decoder walk %v, scan %v", doc, want, got)
		}
	})
}

type benchPayload struct {
	N     int    `json:"n"`
	Order string `json:"order_id"`
	Items []struct {
		SKU string `json:"sku"`
		Qty int    `json:"qty"`
	} `json:"items"`
}

var benchDoc = []byte(`{"n":12345,"order_id":"o-1","items":[{"sku":"a","qty":1},{"sku":"b","qty":2}]}`)

// BenchmarkCheckNames: the scan (as the events' decoding calls it, after
// decoding) beside the json.Decoder token walk it replaced
// (go test -run XXX -bench CheckNames ./internal/strictjson/).
func BenchmarkCheckNames(b *testing.B) {
	typ := reflect.TypeFor[*benchPayload]()
	b.Run("Scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = CheckNamesDecoded(benchDoc, typ)
		}
	})
	b.Run("DecoderWalk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = checkWithDecoder(benchDoc, typ)
		}
	})
}
