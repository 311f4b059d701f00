package amqpinbox

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxHeaderDepth bounds the nesting of tables and arrays a header may have
// (amqp091-go reads deeper ones from the wire, but no sane producer writes
// them).
const maxHeaderDepth = 64

// appendHeaders appends t as a JSON object (the package doc says what each
// AMQP value becomes), with no map of its own and no reflection: on the
// inbound path a message's headers cost one pass over them. Keys are in
// the table's order, which jsonb does not keep anyway. A value that has no
// JSON form is an error naming its header.
func appendHeaders(b []byte, t amqp.Table) ([]byte, error) {
	return appendTable(b, t, 0)
}

func appendTable(b []byte, t amqp.Table, depth int) ([]byte, error) {
	if depth > maxHeaderDepth {
		return b, fmt.Errorf("tables nested deeper than %d", maxHeaderDepth)
	}
	b = append(b, '{')
	first := true
	for k, v := range t {
		if !first {
			b = append(b, ',')
		}
		first = false
		var err error
		if b, err = appendString(b, k); err != nil {
			return b, fmt.Errorf("header name %q: %w", k, err)
		}
		b = append(b, ':')
		if b, err = appendValue(b, v, depth); err != nil {
			return b, fmt.Errorf("header %q: %w", k, err)
		}
	}
	return append(b, '}'), nil
}

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return appendString(b, v)
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"'), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int8:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int16:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case uint8:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	case float32:
		return appendFloat(b, float64(v), 32), nil
	case float64:
		return appendFloat(b, v, 64), nil
	case amqp.Decimal:
		return appendDecimal(b, v), nil
	case time.Time:
		b = append(b, '"')
		b = v.UTC().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"'), nil
	case amqp.Table:
		return appendTable(b, v, depth+1)
	case map[string]any:
		return appendTable(b, v, depth+1)
	case []any:
		if depth >= maxHeaderDepth {
			return b, fmt.Errorf("arrays nested deeper than %d", maxHeaderDepth)
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, fmt.Errorf("element %d: %w", i, err)
			}
		}
		return append(b, ']'), nil
	default:
		return b, fmt.Errorf("a %T has no JSON form", v)
	}
}

// appendFloat writes f as a JSON number, in its shortest form for its size
// (a float32 header 0.1 is 0.1), and NaN and the infinities, which JSON has
// no number for, as the strings "NaN", "+Inf" and "-Inf".
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"+Inf"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Inf"`...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

// appendDecimal writes an AMQP decimal (Value / 10^Scale) as the exact JSON
// number it is: 12345 with scale 2 is 123.45.
func appendDecimal(b []byte, d amqp.Decimal) []byte {
	digits := strconv.AppendInt(nil, int64(d.Value), 10)
	neg := digits[0] == '-'
	if neg {
		digits = digits[1:]
		b = append(b, '-')
	}
	scale := int(d.Scale)
	if scale == 0 {
		return append(b, digits...)
	}
	if len(digits) <= scale {
		b = append(b, "0."...)
		for range scale - len(digits) {
			b = append(b, '0')
		}
		return append(b, digits...)
	}
	b = append(b, digits[:len(digits)-scale]...)
	b = append(b, '.')
	return append(b, digits[len(digits)-scale:]...)
}

// appendString writes s as a JSON string. s must be UTF-8 without a NUL
// byte: PostgreSQL's jsonb, where a failed message's headers go, refuses
// both, and there is no JSON string that keeps invalid UTF-8 as it is.
func appendString(b []byte, s string) ([]byte, error) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return b, fmt.Errorf("invalid UTF-8 at byte %d", i)
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		if c == 0 {
			return b, fmt.Errorf("a NUL byte at byte %d (PostgreSQL cannot hold it)", i)
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		default:
			b = append(b, `\u00`...)
			b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

const hexDigits = "0123456789abcdef"
