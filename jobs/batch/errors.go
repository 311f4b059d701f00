package batch

import (
	"errors"
	"fmt"
)

// ErrItemTooLarge is matched by every *ItemTooLargeError.
var ErrItemTooLarge = errors.New("batch item larger than the stream's max bytes")

// ItemTooLargeError refuses an item whose payload alone is larger than its
// stream's MaxBytes: it could never fit an object within the limit. Nothing
// of the call that staged it is written.
type ItemTooLargeError struct {
	Stream   string
	Index    int // position in the staged slice
	Size     int
	MaxBytes int64
}

func (e *ItemTooLargeError) Error() string {
	return fmt.Sprintf("item %d of stream %q is %d bytes, more than the stream's max bytes %d", e.Index, e.Stream, e.Size, e.MaxBytes)
}

// Is makes errors.Is(err, ErrItemTooLarge) true.
func (e *ItemTooLargeError) Is(target error) bool { return target == ErrItemTooLarge }

// ErrInvalidItem is matched by every *InvalidItemError.
var ErrInvalidItem = errors.New("batch item is not valid JSON")

// InvalidItemError refuses an item that is not one JSON value. Nothing of
// the call that staged it is written.
type InvalidItemError struct {
	Stream string
	Index  int
	Reason string
}

func (e *InvalidItemError) Error() string {
	return fmt.Sprintf("item %d of stream %q is not valid JSON: %s", e.Index, e.Stream, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidItem) true.
func (e *InvalidItemError) Is(target error) bool { return target == ErrInvalidItem }
