package inbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// The binary encoding of a batch (the messages column of
// tributary_inbox_batch), version 1:
//
//	batch     = version message*
//	version   = byte 1
//	message   = flags [timestamp] field(id) field(type) field(correlation id)
//	            [field(content type) field(source) field(routing key)]
//	            [field(headers)] field(body)
//	flags     = byte: bit 0 a timestamp follows, bit 1 headers follow, bit 2
//	            the content type, source and routing key are the previous
//	            message's and are left out (never on the first message);
//	            the other bits are 0
//	timestamp = varint(Unix seconds) uvarint(nanoseconds, below 1e9)
//	field     = uvarint(length) bytes
//
// The headers are a JSON object. The count of messages is the row's count
// column, not part of the encoding: a decoder reads to the end.
const (
	encodingVersion byte = 1

	flagTimestamp byte = 1 << 0
	flagHeaders   byte = 1 << 1
	// flagRepeat leaves out what the messages of one batch almost always
	// share (the queue they came from, its routing key, the content type):
	// a quarter of the bytes of a 200-byte message from the inbound bridge,
	// which the batch row, its WAL and its TOAST chunks all pay for.
	flagRepeat byte = 1 << 2
	knownFlags      = flagTimestamp | flagHeaders | flagRepeat
)

// BatchBytesMax is about the most bytes of encoded messages one batch row
// holds. An inserter whose batch grows past it writes it and starts
// another in the same transaction: PostgreSQL refuses a value over 1 GiB,
// and a row is read whole by the job that runs it.
const BatchBytesMax = 16 << 20

// ErrMalformed is wrapped by every error of DecodeBatch.
var ErrMalformed = errors.New("malformed inbox batch")

// Batch is a batch of messages being encoded for one insert (Writer), in a
// buffer that is reused: get one with NewBatch, Release it after the
// insert.
type Batch struct {
	buf     []byte
	n       int
	scratch []byte // headers marshalled by Add
	// The previous message's content type, source and routing key, which a
	// message that has the same leaves out (flagRepeat).
	contentType, source, routingKey string
}

var batchPool = sync.Pool{New: func() any { return new(Batch) }}

// batchKeepMax is the largest buffer Release keeps for reuse.
const batchKeepMax = 4 * BatchBytesMax

// NewBatch returns an empty batch, its buffer reused from a released one.
func NewBatch() *Batch {
	b := batchPool.Get().(*Batch)
	b.Reset()
	return b
}

// Release gives b's buffer back for reuse; b must not be used afterwards.
func (b *Batch) Release() {
	if cap(b.buf) > batchKeepMax {
		b.buf = nil
	}
	b.scratch = b.scratch[:0]
	batchPool.Put(b)
}

// Reset empties b, keeping its buffer.
func (b *Batch) Reset() {
	b.buf = append(b.buf[:0], encodingVersion)
	b.n = 0
	b.contentType, b.source, b.routingKey = "", "", ""
}

// Grow makes room for n more bytes of encoding, so that adding messages
// of about that size allocates once instead of doubling the buffer as it
// fills (a released buffer is not always there to reuse: the pool is
// emptied by the garbage collector).
func (b *Batch) Grow(n int) { b.buf = slices.Grow(b.buf, n) }

// Len is the number of messages in b.
func (b *Batch) Len() int { return b.n }

// Size is the length of b's encoding in bytes.
func (b *Batch) Size() int { return len(b.buf) }

// Bytes is b's encoding, valid until b changes.
func (b *Batch) Bytes() []byte { return b.buf }

// Add appends m to b, its Headers marshalled with encoding/json when there
// are any. A message that the inbox could not hold (see AddEncoded), or
// whose headers do not marshal (a NaN, a channel), is refused with an error
// naming its id, and b is left as it was.
func (b *Batch) Add(m *Message) error {
	if len(m.Headers) == 0 {
		return b.AddEncoded(m, nil)
	}
	h, err := json.Marshal(m.Headers)
	if err != nil {
		return fmt.Errorf("message %q: error encoding its headers: %w", m.ID, err)
	}
	b.scratch = append(b.scratch[:0], h...)
	return b.AddEncoded(m, b.scratch)
}

// AddEncoded appends m to b with headers, the message's headers already
// encoded as a JSON object (nil or empty: none); m.Headers is not looked
// at. It is for adapters that encode their protocol's headers themselves
// (amqpinbox). A message is refused, with an error naming its id and b left
// as it was, when a text field (ID, Type, CorrelationID, ContentType,
// Source, RoutingKey) is not UTF-8 or holds a NUL byte, or headers is not a
// JSON object that PostgreSQL's jsonb accepts: a message that fails is
// retried from a River job whose args (jsonb) hold it, so the inbox takes
// in only what that job can hold. The body is not looked at.
func (b *Batch) AddEncoded(m *Message, headers []byte) error {
	if err := checkText(m); err != nil {
		return err
	}
	if len(headers) > 0 {
		if headers[0] != '{' || !json.Valid(headers) {
			return fmt.Errorf("message %q: its headers are not a JSON object", m.ID)
		}
		if err := queue.CheckJSONB(headers); err != nil {
			return fmt.Errorf("message %q: its headers cannot be stored: %w", m.ID, err)
		}
	}
	flags := byte(0)
	if !m.Timestamp.IsZero() {
		flags |= flagTimestamp
	}
	if len(headers) > 0 {
		flags |= flagHeaders
	}
	repeat := b.n > 0 && m.ContentType == b.contentType && m.Source == b.source && m.RoutingKey == b.routingKey
	if repeat {
		flags |= flagRepeat
	}
	buf := append(b.buf, flags)
	if flags&flagTimestamp != 0 {
		buf = binary.AppendVarint(buf, m.Timestamp.Unix())
		buf = binary.AppendUvarint(buf, uint64(m.Timestamp.Nanosecond()))
	}
	buf = appendString(buf, m.ID)
	buf = appendString(buf, m.Type)
	buf = appendString(buf, m.CorrelationID)
	if !repeat {
		buf = appendString(buf, m.ContentType)
		buf = appendString(buf, m.Source)
		buf = appendString(buf, m.RoutingKey)
		b.contentType, b.source, b.routingKey = m.ContentType, m.Source, m.RoutingKey
	}
	if flags&flagHeaders != 0 {
		buf = appendBytes(buf, headers)
	}
	b.buf = appendBytes(buf, m.Body)
	b.n++
	return nil
}

// checkText refuses a message whose text fields PostgreSQL's text and jsonb
// cannot hold.
func checkText(m *Message) error {
	for _, f := range [...]struct {
		name, s string
	}{{"id", m.ID}, {"type", m.Type}, {"correlation id", m.CorrelationID}, {"content type", m.ContentType},
		{"source", m.Source}, {"routing key", m.RoutingKey}} {
		if err := queue.CheckText(f.s); err != nil {
			return fmt.Errorf("message %q: its %s cannot be stored: %w", m.ID, f.name, err)
		}
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// DecodeBatch decodes data, a batch's encoding, into its messages. Strings
// are copies; each Body is a slice of data. It is strict: a version it does
// not know, unknown flags, a field longer than what is left, nanoseconds
// out of range, headers that are not a JSON object, or bytes after the last
// message are errors wrapping ErrMalformed that say where.
func DecodeBatch(data []byte) ([]Message, error) {
	return decodeFrom(data, 0, 0)
}

// decodeFrom decodes data's messages from the from-th on (the first from
// are checked and skipped); n is how many it expects, for the slice's
// capacity.
func decodeFrom(data []byte, from, n int) ([]Message, error) {
	d := decoder{data: data}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	if data[0] != encodingVersion {
		return nil, fmt.Errorf("%w: encoding version %d, want %d", ErrMalformed, data[0], encodingVersion)
	}
	d.off = 1
	msgs := make([]Message, 0, n)
	for i := 0; d.off < len(d.data); i++ {
		var m Message
		if err := d.message(&m, i >= from); err != nil {
			return nil, fmt.Errorf("%w: message %d (at byte %d): %v", ErrMalformed, i, d.start, err)
		}
		if i >= from {
			msgs = append(msgs, m)
		}
	}
	return msgs, nil
}

// decoder reads a batch's encoding.
type decoder struct {
	data  []byte
	off   int
	start int // where the current message began
	n     int // messages read so far
	// The last content type, source and routing key written out, for a
	// message with flagRepeat: one string each for a run of messages.
	contentType, source, routingKey string
}

// message decodes the next message into m (when keep; it is only checked
// otherwise).
func (d *decoder) message(m *Message, keep bool) error {
	d.start = d.off
	flags := d.data[d.off]
	d.off++
	if flags&^knownFlags != 0 {
		return fmt.Errorf("unknown flags 0x%02x", flags)
	}
	if flags&flagTimestamp != 0 {
		sec, n := binary.Varint(d.data[d.off:])
		if n <= 0 {
			return errors.New("timestamp seconds truncated or overlong")
		}
		d.off += n
		nsec, n := binary.Uvarint(d.data[d.off:])
		if n <= 0 {
			return errors.New("timestamp nanoseconds truncated or overlong")
		}
		d.off += n
		if nsec >= 1e9 {
			return fmt.Errorf("timestamp nanoseconds %d out of range", nsec)
		}
		if keep {
			m.Timestamp = time.Unix(sec, int64(nsec)).UTC()
		}
	}
	if flags&flagRepeat != 0 && d.n == 0 {
		return errors.New("the first message repeats a previous one's fields")
	}
	d.n++
	for _, f := range [...]struct {
		name string
		to   *string
	}{{"id", &m.ID}, {"type", &m.Type}, {"correlation id", &m.CorrelationID}} {
		v, err := d.field(f.name)
		if err != nil {
			return err
		}
		if keep && len(v) > 0 {
			*f.to = string(v)
		}
	}
	if flags&flagRepeat == 0 {
		for _, f := range [...]struct {
			name string
			to   *string
		}{{"content type", &d.contentType}, {"source", &d.source}, {"routing key", &d.routingKey}} {
			v, err := d.field(f.name)
			if err != nil {
				return err
			}
			if string(v) != *f.to {
				*f.to = string(v)
			}
		}
	}
	if keep {
		m.ContentType, m.Source, m.RoutingKey = d.contentType, d.source, d.routingKey
	}
	if flags&flagHeaders != 0 {
		v, err := d.field("headers")
		if err != nil {
			return err
		}
		if keep {
			if m.Headers, err = decodeHeaders(v); err != nil {
				return err
			}
			m.rawHeaders = v[:len(v):len(v)]
		}
	}
	body, err := d.field("body")
	if err != nil {
		return err
	}
	if keep && len(body) > 0 {
		m.Body = body[:len(body):len(body)]
	}
	return nil
}

// field reads one length-prefixed field.
func (d *decoder) field(name string) ([]byte, error) {
	n, size := binary.Uvarint(d.data[d.off:])
	switch {
	case size == 0:
		return nil, fmt.Errorf("%s: length truncated (the data ends)", name)
	case size < 0:
		return nil, fmt.Errorf("%s: length overflows", name)
	}
	d.off += size
	if left := len(d.data) - d.off; n > uint64(left) || n > math.MaxInt32 {
		return nil, fmt.Errorf("%s: truncated: %d bytes long, %d left", name, n, left)
	}
	v := d.data[d.off : d.off+int(n)]
	d.off += int(n)
	return v, nil
}
