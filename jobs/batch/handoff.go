package batch

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

// HandOffFunc takes a batch of JSON payloads durably; nil means every
// payload is safe and the producer may acknowledge them (the AMQP batch-ACK
// consumer acks after it returns).
type HandOffFunc func(ctx context.Context, payloads [][]byte) error

// StageHandOff stages each batch into stream in one transaction: the
// preferred hand-off. Once it returns nil the items are committed and will
// be flushed by the flush jobs; the producer acks after that. A crash
// between the commit and the ack stages the batch again on redelivery
// (at-least-once; put a message id in the payload to deduplicate
// downstream). Any invalid item fails the whole batch; adapters that can
// settle single messages validate first with ValidateItem.
func StageHandOff(stager *Stager, stream string) HandOffFunc {
	return func(ctx context.Context, payloads [][]byte) error {
		return stager.Stage(ctx, stream, payloads...)
	}
}

// ValidateItem reports whether payload can be staged into stream: valid
// JSON, not larger than the stream's MaxBytes.
func (s *Stager) ValidateItem(stream string, payload []byte) error {
	if err := ValidateStream(stream); err != nil {
		return err
	}
	_, _, _, err := prepare(stream, [][]byte{payload}, s.cfg.For(stream).MaxBytes)
	return err
}

// SinkHandOff writes each batch straight to the sink as one object, without
// Postgres: the seed service's behaviour, kept for producers that already
// batch. The key is {prefix}/{stream}/dt=YYYY-MM-DD/hour=HH/{hash}.jsonl.gz,
// hash being a digest of the batch's content, so a redelivered identical
// batch replaces its object in the same hour instead of adding one; a batch
// that is redelivered in another composition or hour is written again
// (at-least-once). The whole object is built in memory (the batch is already
// in memory), so it needs about the batch's size again. Objects are
// compressed at CompressionLevelDefault, as the flush worker's are.
func SinkHandOff(sink Sink, prefix, stream string) (HandOffFunc, error) {
	if err := ValidateStream(stream); err != nil {
		return nil, err
	}
	return func(ctx context.Context, payloads [][]byte) error {
		if len(payloads) == 0 {
			return nil
		}
		lines, _, _, err := prepare(stream, payloads, 1<<62)
		if err != nil {
			return err
		}
		h := sha256.New()
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, CompressionLevelDefault)
		if err != nil {
			return err
		}
		for _, l := range lines {
			h.Write(l)
			h.Write([]byte{'\n'})
			zw.Write(l)
			zw.Write([]byte{'\n'})
		}
		if err := zw.Close(); err != nil {
			return err
		}
		key := ObjectKey(prefix, stream, time.Now(), hex.EncodeToString(h.Sum(nil))[:32])
		if err := sink.Write(ctx, key, &buf); err != nil {
			return fmt.Errorf("error handing %d items of stream %q to the sink: %w", len(lines), stream, err)
		}
		return nil
	}, nil
}

// ValidateJSONLine reports whether payload is one JSON value that can be
// written as a line of stream's objects (no size limit).
func ValidateJSONLine(stream string, payload []byte) error {
	_, _, _, err := prepare(stream, [][]byte{payload}, 1<<62)
	return err
}
