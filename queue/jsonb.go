package queue

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrNotStorable is wrapped by the errors for values that are valid Go and
// valid JSON but that PostgreSQL refuses to store: a \u0000 escape or an
// unpaired surrogate in jsonb, a NUL byte or invalid UTF-8 in text or
// jsonb, a number beyond the range of jsonb's numeric.
var ErrNotStorable = errors.New("not storable in PostgreSQL")

// StorageError says what PostgreSQL would refuse in a value and where.
type StorageError struct {
	// Offset is the byte offset of the problem in the value.
	Offset int
	// Problem says what is wrong, for people.
	Problem string
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("%s at byte %d", e.Problem, e.Offset)
}

// Is makes errors.Is(err, ErrNotStorable) hold.
func (e *StorageError) Is(target error) bool { return target == ErrNotStorable }

// CheckJSONB reports, as a *StorageError, what in raw a PostgreSQL jsonb
// column refuses although raw is valid JSON: invalid UTF-8, the \u0000
// escape, a \u escape of half a surrogate pair, and numbers outside
// numeric's range (more than 131072 digits before the decimal point or
// 16383 after it). raw must be valid JSON (json.Valid); other bytes are
// not checked for syntax.
//
// Checking first keeps a bad value from reaching the database, where the
// insert would fail with an error naming nothing and abort the caller's
// transaction.
func CheckJSONB(raw []byte) error {
	if !utf8.Valid(raw) {
		return &StorageError{Offset: invalidUTF8Offset(raw), Problem: "invalid UTF-8"}
	}
	for i := 0; i < len(raw); {
		switch c := raw[i]; {
		case c == '"':
			end, err := checkJSONString(raw, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end := i + 1
			for end < len(raw) && strings.IndexByte("+-.0123456789eE", raw[end]) >= 0 {
				end++
			}
			if problem := numericRangeProblem(string(raw[i:end])); problem != "" {
				return &StorageError{Offset: i, Problem: problem}
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// CheckText reports, as a *StorageError, what a PostgreSQL text column
// refuses in s: a NUL byte or invalid UTF-8.
func CheckText(s string) error {
	if !utf8.ValidString(s) {
		return &StorageError{Offset: invalidUTF8Offset([]byte(s)), Problem: "invalid UTF-8"}
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return &StorageError{Offset: i, Problem: "a NUL byte (PostgreSQL text cannot hold it)"}
	}
	return nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// checkJSONString checks the escapes of the JSON string starting at the
// quote at start and returns the offset after its closing quote.
func checkJSONString(raw []byte, start int) (int, error) {
	for i := start + 1; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return i + 1, nil
		case '\\':
			if i+1 >= len(raw) {
				return len(raw), nil
			}
			if raw[i+1] != 'u' {
				i++ // \" \\ \/ \b \f \n \r \t
				continue
			}
			r, ok := hex4(raw, i+2)
			switch {
			case !ok:
				i++
			case r == 0:
				return 0, &StorageError{Offset: i, Problem: `the escape \u0000 (PostgreSQL jsonb cannot hold a NUL character)`}
			case r >= 0xD800 && r <= 0xDBFF:
				low, ok := rune(0), false
				if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					low, ok = hex4(raw, i+8)
				}
				if !ok || low < 0xDC00 || low > 0xDFFF {
					return 0, &StorageError{Offset: i, Problem: fmt.Sprintf(`the escape \u%04x, the first half of a surrogate pair without its second half (PostgreSQL jsonb refuses it)`, r)}
				}
				i += 11
			case r >= 0xDC00 && r <= 0xDFFF:
				return 0, &StorageError{Offset: i, Problem: fmt.Sprintf(`the escape \u%04x, the second half of a surrogate pair without its first half (PostgreSQL jsonb refuses it)`, r)}
			default:
				i += 5
			}
		}
	}
	return len(raw), nil
}

func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(raw[at:at+4]), 16, 16)
	return rune(n), err == nil
}

// Limits of PostgreSQL's numeric, which jsonb stores numbers as.
const (
	numericMaxDigitsBefore = 131072 // decimal weight at most 131071
	numericMaxDigitsAfter  = 16383  // display scale at most 16383
)

// numericRangeProblem says why PostgreSQL's numeric input would overflow on
// the JSON number num, or returns "".
func numericRangeProblem(num string) string {
	mant, expPart, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(num, "-")), "e")
	exp := int64(0)
	if expPart != "" {
		var err error
		exp, err = strconv.ParseInt(expPart, 10, 64)
		if err != nil { // beyond int64: certainly beyond numeric
			return fmt.Sprintf("the number %s, beyond the range of PostgreSQL's numeric", preview(num))
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if scale := int64(len(frac)) - exp; scale > numericMaxDigitsAfter {
		return fmt.Sprintf("the number %s, with more than %d digits after the decimal point (PostgreSQL's numeric limit)", preview(num), numericMaxDigitsAfter)
	}
	digits := intPart + frac
	first := strings.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if first < 0 {
		return "" // zero
	}
	if weight := int64(len(intPart)-1-first) + exp; weight >= numericMaxDigitsBefore {
		return fmt.Sprintf("the number %s, with more than %d digits before the decimal point (PostgreSQL's numeric limit)", preview(num), numericMaxDigitsBefore)
	}
	return ""
}

func preview(s string) string {
	if len(s) <= 24 {
		return s
	}
	return s[:24] + "..."
}
