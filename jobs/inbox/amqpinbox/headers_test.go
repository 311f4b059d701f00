package amqpinbox

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/inbox"
)

// throughInbox encodes t as a delivery's headers and returns them as the
// inbox's handler gets them.
func throughInbox(t *testing.T, table amqp.Table) map[string]any {
	t.Helper()
	h, err := appendHeaders(nil, table)
	require.NoError(t, err)
	require.True(t, json.Valid(h), "%s", h)
	b := inbox.NewBatch()
	defer b.Release()
	require.NoError(t, b.AddEncoded(&inbox.Message{ID: "m"}, h))
	msgs, err := inbox.DecodeBatch(b.Bytes())
	require.NoError(t, err)
	return msgs[0].Headers
}

func TestHeaders(t *testing.T) {
	t.Parallel()

	t.Run("EveryAMQPTypeAsDocumented", func(t *testing.T) {
		t.Parallel()
		at := time.Date(2026, 12, 3, 6, 0, 0, 0, time.FixedZone("CET", 3600))
		got := throughInbox(t, amqp.Table{
			"string": "é \"quoted\" \\ \n\t\r \x01 \u2028 <&>", "empty": "", "true": true, "false": false, "nil": nil,
			"int8": int8(-8), "uint8": uint8(200), "int16": int16(-1600), "uint16": uint16(60000), "int32": int32(-32),
			"uint32": uint32(4_000_000_000), "int64": int64(math.MinInt64), "int": 42, "uint64": uint64(math.MaxUint64),
			"float32": float32(0.1), "float64": 2.5, "integral": 3.0, "tiny": 1e-300, "huge": 1e300,
			"nan": math.NaN(), "inf": math.Inf(1), "-inf": math.Inf(-1),
			"decimal": amqp.Decimal{Scale: 2, Value: 12345}, "small": amqp.Decimal{Scale: 4, Value: -5}, "whole": amqp.Decimal{Value: 7},
			"time": at, "bytes": []byte{0, 1, 2, 0xff},
			"table": amqp.Table{"x-retry-count": int32(3), "deep": amqp.Table{"k": []any{"v"}}},
			"array": []any{int32(1), "two", 3.5, nil, amqp.Table{"a": true}, []any{}},
		})
		require.Equal(t, map[string]any{
			"string": "é \"quoted\" \\ \n\t\r \x01 \u2028 <&>", "empty": "", "true": true, "false": false, "nil": nil,
			"int8": int64(-8), "uint8": int64(200), "int16": int64(-1600), "uint16": int64(60000), "int32": int64(-32),
			"uint32": int64(4_000_000_000), "int64": int64(math.MinInt64), "int": int64(42), "uint64": float64(math.MaxUint64),
			"float32": 0.1, "float64": 2.5, "integral": int64(3), "tiny": 1e-300, "huge": 1e300,
			"nan": "NaN", "inf": "+Inf", "-inf": "-Inf",
			"decimal": 123.45, "small": -0.0005, "whole": int64(7),
			"time": "2026-12-03T05:00:00Z", "bytes": "AAEC/w==",
			"table": map[string]any{"x-retry-count": int64(3), "deep": map[string]any{"k": []any{"v"}}},
			"array": []any{int64(1), "two", 3.5, nil, map[string]any{"a": true}, []any{}},
		}, got)
	})

	t.Run("WhatPostgresCannotHoldIsRefusedNamingTheHeader", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			table amqp.Table
			want  string
		}{
			{amqp.Table{"bad": "a\xffb"}, `header "bad": invalid UTF-8 at byte 1`},
			{amqp.Table{"nul": "a\x00"}, `header "nul": a NUL byte at byte 1`},
			{amqp.Table{"k\xff": "v"}, `header name "k\xff": invalid UTF-8`},
			{amqp.Table{"t": amqp.Table{"inner": []any{"x", "\x00"}}}, `header "t": header "inner": element 1: a NUL byte`},
			{amqp.Table{"odd": struct{}{}}, `header "odd": a struct {} has no JSON form`},
		} {
			_, err := appendHeaders(nil, tc.table)
			require.ErrorContains(t, err, tc.want)
		}
		deep := amqp.Table{}
		for range maxHeaderDepth + 2 {
			deep = amqp.Table{"d": deep}
		}
		_, err := appendHeaders(nil, deep)
		require.ErrorContains(t, err, "nested deeper than")
	})

	t.Run("DecimalsAreExact", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			d    amqp.Decimal
			want string
		}{
			{amqp.Decimal{Value: 0}, "0"}, {amqp.Decimal{Scale: 3, Value: 0}, "0.000"}, {amqp.Decimal{Scale: 1, Value: -15}, "-1.5"},
			{amqp.Decimal{Scale: 10, Value: math.MaxInt32}, "0.2147483647"}, {amqp.Decimal{Scale: 2, Value: math.MinInt32}, "-21474836.48"},
		} {
			require.Equal(t, tc.want, string(appendDecimal(nil, tc.d)))
		}
	})
}

// FuzzAppendString: any string is either refused (not UTF-8, or a NUL) or
// written as the JSON string encoding/json reads back as the same string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "é\u2028", "\"\\\n\r\t\x01\x1f\x7f", "a\x00", "\xff", strings.Repeat("<&>", 10)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := appendString(nil, s)
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			require.Error(t, err, "%q", s)
			return
		}
		require.NoError(t, err)
		var back string
		require.NoError(t, json.Unmarshal(b, &back), "%s", b)
		require.Equal(t, s, back)
	})
}
