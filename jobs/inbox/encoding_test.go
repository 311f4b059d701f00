package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// requireSameMessage fails unless got is want as a batch gives it back:
// every field equal, the headers as JSON values (decodeHeaders of their
// encoding), nil and empty bodies alike.
func requireSameMessage(t testing.TB, want, got *Message, headers []byte) {
	t.Helper()
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Type, got.Type)
	require.Equal(t, want.CorrelationID, got.CorrelationID)
	require.Equal(t, want.ContentType, got.ContentType)
	require.Equal(t, want.Source, got.Source)
	require.Equal(t, want.RoutingKey, got.RoutingKey)
	require.True(t, want.Timestamp.Equal(got.Timestamp), "timestamp %v, want %v", got.Timestamp, want.Timestamp)
	if !got.Timestamp.IsZero() {
		require.Equal(t, time.UTC, got.Timestamp.Location())
	}
	require.True(t, bytes.Equal(want.Body, got.Body), "body %q, want %q", got.Body, want.Body)
	if len(headers) == 0 {
		require.Nil(t, got.Headers)
		return
	}
	wantHeaders, err := decodeHeaders(headers)
	require.NoError(t, err)
	require.Equal(t, wantHeaders, got.Headers)
}

func TestBatchEncoding(t *testing.T) {
	t.Parallel()

	binaryBody := []byte{0, 1, 2, 0xff, 0xfe, '\n', '"', 0x80}
	msgs := []Message{
		{ID: "m-1", Type: "order.placed", CorrelationID: "c-1", ContentType: "application/json", Source: "orders",
			RoutingKey: "order.placed", Timestamp: time.Date(2026, 12, 3, 6, 0, 0, 123456789, time.UTC), Body: []byte(`{"n": 1}`),
			Headers: map[string]any{"s": "é\u2028<>", "i": 7, "big": int64(math.MaxInt64), "f": 1.5, "b": true, "nil": nil,
				"nested": map[string]any{"x": []any{1, "two", 3.25}}, "bytes": []byte("raw")}},
		{Body: binaryBody},
		{ID: "m-3", Timestamp: time.Unix(-62135596800, 0)}, // year 1, no body
		{ID: "m-4", Timestamp: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600)), Body: bytes.Repeat([]byte("é"), 70_000)},
	}

	setup := func(t *testing.T) *Batch {
		t.Helper()
		b := NewBatch()
		t.Cleanup(b.Release)
		return b
	}

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for i := range msgs {
			require.NoError(t, b.Add(&msgs[i]))
		}
		require.Equal(t, len(msgs), b.Len())
		got, err := DecodeBatch(b.Bytes())
		require.NoError(t, err)
		require.Len(t, got, len(msgs))
		for i := range msgs {
			var h []byte
			if len(msgs[i].Headers) > 0 {
				h, err = json.Marshal(msgs[i].Headers)
				require.NoError(t, err)
			}
			requireSameMessage(t, &msgs[i], &got[i], h)
		}
		// The types Message.Headers documents.
		require.Equal(t, map[string]any{"s": "é\u2028<>", "i": int64(7), "big": int64(math.MaxInt64), "f": 1.5, "b": true, "nil": nil,
			"nested": map[string]any{"x": []any{int64(1), "two", 3.25}}, "bytes": "cmF3"}, got[0].Headers)

		tail, err := decodeFrom(b.Bytes(), 2, 2)
		require.NoError(t, err)
		require.Len(t, tail, 2)
		require.Equal(t, "m-3", tail[0].ID)
		require.Equal(t, "m-4", tail[1].ID)
	})

	t.Run("RepeatedFieldsLeftOut", func(t *testing.T) {
		t.Parallel()
		// A run of messages from one queue writes its content type, source
		// and routing key once; a message that differs writes them again,
		// and the run after it repeats those.
		b := setup(t)
		in := make([]Message, 6)
		for i := range in {
			in[i] = Message{ID: fmt.Sprintf("r-%d", i), ContentType: "application/json", Source: "orders.inbound", RoutingKey: "orders", Body: []byte(`{}`)}
		}
		in[3].Source, in[3].RoutingKey = "other.queue", "other"
		one := setup(t)
		require.NoError(t, one.Add(&in[0]))
		for i := range in {
			require.NoError(t, b.Add(&in[i]))
		}
		perMessage := one.Size() - 1 // without the version byte
		require.Less(t, b.Size()-1, len(in)*perMessage-3*len("application/jsonorders.inboundorders"), "the repeats are left out")
		got, err := DecodeBatch(b.Bytes())
		require.NoError(t, err)
		for i := range in {
			requireSameMessage(t, &in[i], &got[i], nil)
		}
		tail, err := decodeFrom(b.Bytes(), 4, 2)
		require.NoError(t, err)
		require.Equal(t, "orders.inbound", tail[0].Source, "the message after the different one writes its own again")
		require.Equal(t, "orders", tail[1].RoutingKey, "and the next repeats those")
		b.Reset()
		require.NoError(t, b.Add(&in[4]))
		require.Equal(t, perMessage+1, b.Size()+len("r-4")-len("r-0"), "a batch starts again with every field")
	})

	t.Run("TruncatedIsAnErrorAtEveryByte", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bounds := map[int]int{b.Size(): 0} // encoded length -> messages
		for i := range msgs[:3] {
			require.NoError(t, b.Add(&msgs[i]))
			bounds[b.Size()] = i + 1
		}
		data := b.Bytes()
		for n := 1; n < len(data); n++ {
			got, err := DecodeBatch(data[:n])
			if want, ok := bounds[n]; ok {
				require.NoError(t, err, "cut at a message's end (%d bytes)", n)
				require.Len(t, got, want)
				continue
			}
			require.ErrorIs(t, err, ErrMalformed, "cut at %d of %d bytes", n, len(data))
			require.Regexp(t, `message \d+ \(at byte \d+\): .*(truncated|overflows|headers)`, err.Error())
		}
	})

	t.Run("Strict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.Add(&msgs[0]))
		good := append([]byte(nil), b.Bytes()...)
		for name, tc := range map[string]struct {
			data []byte
			want string
		}{
			"Empty":          {nil, "empty"},
			"Version":        {append([]byte{2}, good[1:]...), "encoding version 2, want 1"},
			"UnknownFlags":   {append([]byte{1, 0x08}, good[2:]...), "unknown flags 0x08"},
			"FirstRepeats":   {append([]byte{1, flagRepeat}, good[2:]...), "the first message repeats"},
			"TrailingByte":   {append(good[:len(good):len(good)], 0), "message 1 (at byte"},
			"Nanoseconds":    {[]byte{1, flagTimestamp, 0, 0x80, 0x94, 0xeb, 0xdc, 0x03, 0, 0, 0, 0, 0, 0, 0}, "nanoseconds 1000000000 out of range"},
			"HeadersNotJSON": {[]byte{1, flagHeaders, 0, 0, 0, 0, 0, 0, 2, '{', 'x', 0}, "headers"},
			"HeadersArray":   {[]byte{1, flagHeaders, 0, 0, 0, 0, 0, 0, 2, '[', ']', 0}, "headers"},
			"HugeLength":     {[]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, "id: truncated: 4294967295 bytes long, 0 left"},
		} {
			_, err := DecodeBatch(tc.data)
			require.ErrorIs(t, err, ErrMalformed, name)
			require.ErrorContains(t, err, tc.want, name)
		}
	})

	t.Run("RefusesWhatItCannotStore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.Add(&msgs[1]))
		before := append([]byte(nil), b.Bytes()...)
		for name, tc := range map[string]struct {
			m       Message
			headers string
			want    string
		}{
			"NULInID":         {m: Message{ID: "a\x00b"}, want: `message "a\x00b": its id cannot be stored: a NUL byte`},
			"BadUTF8Type":     {m: Message{ID: "x", Type: "\xff"}, want: `message "x": its type cannot be stored: invalid UTF-8`},
			"BadUTF8Source":   {m: Message{ID: "x", Source: "q\xc3"}, want: "its source cannot be stored"},
			"NULHeader":       {m: Message{ID: "x"}, headers: `{"a":"\u0000"}`, want: `its headers cannot be stored: the escape \u0000`},
			"HeadersNotJSON":  {m: Message{ID: "x"}, headers: `{"a":`, want: "its headers are not a JSON object"},
			"HeadersNotAnObj": {m: Message{ID: "x"}, headers: `[1]`, want: "its headers are not a JSON object"},
		} {
			err := b.AddEncoded(&tc.m, []byte(tc.headers))
			require.ErrorContains(t, err, tc.want, name)
		}
		err := b.Add(&Message{ID: "nan", Headers: map[string]any{"f": math.NaN()}})
		require.ErrorContains(t, err, `message "nan": error encoding its headers`)
		require.Equal(t, before, b.Bytes(), "a refused message leaves the batch as it was")
		require.Equal(t, 1, b.Len())
	})

	t.Run("ReleasedBufferIsReusedEmpty", func(t *testing.T) {
		t.Parallel()
		b := NewBatch()
		require.NoError(t, b.Add(&msgs[0]))
		b.Release()
		b = NewBatch()
		defer b.Release()
		require.Equal(t, []byte{encodingVersion}, b.Bytes())
		require.Zero(t, b.Len())
	})
}

// FuzzBatchRoundTrip: a batch of messages built from the fuzzer's fields
// decodes to the same messages (decode(encode(x)) == x), or Add refused a
// field with an error.
func FuzzBatchRoundTrip(f *testing.F) {
	f.Add("m-1", "order.placed", "c-1", "application/json", "orders", "rk", true, int64(1764741600), int64(123456789), `{"a":1,"b":[true,null,"x"]}`, []byte(`{"n":1}`), uint8(2))
	f.Add("", "", "", "", "", "", false, int64(0), int64(0), "", []byte(nil), uint8(0))
	f.Add("é", "\u2028", "x", "", "q", "", true, int64(-62135596800), int64(999999999), `{}`, []byte{0, 0xff, 0x80}, uint8(5))
	f.Add("a\x00b", "\xff", "", "", "", "", true, int64(math.MaxInt32), int64(-1), `{"n":1e400}`, []byte("not json"), uint8(1))
	f.Add("id", "", "", "", "", "", false, int64(0), int64(0), `{"big":18446744073709551616,"f":-0.0,"s":"\ud83d\ude00"}`, bytes.Repeat([]byte{7}, 300), uint8(3))
	f.Fuzz(func(t *testing.T, id, typ, corr, ct, source, rk string, hasTS bool, sec, nsec int64, headers string, body []byte, copies uint8) {
		var ts time.Time
		if hasTS {
			ts = time.Unix(sec%(1<<40), nsec%1_000_000_000)
		}
		n := int(copies%5) + 1
		b := NewBatch()
		defer b.Release()
		var want []Message
		for i := range n {
			m := Message{ID: id + fmt.Sprint(i), Type: typ, CorrelationID: corr, ContentType: ct, Source: source, RoutingKey: rk,
				Timestamp: ts, Body: body[:len(body)*i/n]}
			if err := b.AddEncoded(&m, []byte(headers)); err != nil {
				require.Equal(t, len(want), b.Len(), "a refused message is not added")
				continue
			}
			want = append(want, m)
		}
		got, err := DecodeBatch(b.Bytes())
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			requireSameMessage(t, &want[i], &got[i], []byte(headers))
		}
	})
}

// FuzzDecodeBatch: decoding any bytes never panics; it either fails with
// ErrMalformed or gives messages that, where the encoder takes them (text
// it can store: not every decodable batch was written by it), encode and
// decode to themselves.
func FuzzDecodeBatch(f *testing.F) {
	b := NewBatch()
	_ = b.AddEncoded(&Message{ID: "m", Type: "t", Timestamp: time.Unix(1, 2), Body: []byte("body")}, []byte(`{"h":[1,2.5,"x"]}`))
	_ = b.AddEncoded(&Message{Body: []byte{0, 1}}, nil)
	f.Add(append([]byte(nil), b.Bytes()...))
	b.Release()
	f.Add([]byte{1})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 3, 0x80})
	f.Add([]byte{2, 0})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 0, 0, 3, '{', '}', ' ', 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := DecodeBatch(data)
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed), "%v", err)
			return
		}
		again := NewBatch()
		defer again.Release()
		var kept []Message
		for i := range msgs {
			if again.AddEncoded(&msgs[i], msgs[i].rawHeaders) == nil {
				kept = append(kept, msgs[i])
			}
		}
		got, err := DecodeBatch(again.Bytes())
		require.NoError(t, err)
		require.Len(t, got, len(kept))
		for i := range kept {
			requireSameMessage(t, &kept[i], &got[i], kept[i].rawHeaders)
		}
	})
}
