package amqpbatch

import (
	"context"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/batch"
)

// StageHandOff stages the bodies of each batch into stream in one
// transaction. A body that can never be staged (not JSON, larger than the
// stream's max bytes) is nacked as permanent, so it goes to the queue's
// .failed queue instead of failing its batch forever; the rest of the batch
// is staged and acked together. A database failure fails the whole batch,
// which the consumer nacks for redelivery.
func StageHandOff(stager *batch.Stager, stream string) amqpbridge.HandOffFunc {
	return func(ctx context.Context, deliveries []*amqpbridge.Delivery) error {
		payloads := make([][]byte, 0, len(deliveries))
		for _, d := range deliveries {
			if err := stager.ValidateItem(stream, d.Body); err != nil {
				if nerr := d.Nack(amqpbridge.Permanent(err)); nerr != nil {
					return nerr
				}
				continue
			}
			payloads = append(payloads, d.Body)
		}
		return stager.Stage(ctx, stream, payloads...)
	}
}

// SinkHandOff writes each batch straight to the sink as one object, like
// the seed service (see batch.SinkHandOff). Bodies that are not JSON are
// nacked as permanent.
func SinkHandOff(sink batch.Sink, prefix, stream string) (amqpbridge.HandOffFunc, error) {
	write, err := batch.SinkHandOff(sink, prefix, stream)
	if err != nil {
		return nil, err
	}
	validate := func(body []byte) error {
		return batch.ValidateJSONLine(stream, body)
	}
	return func(ctx context.Context, deliveries []*amqpbridge.Delivery) error {
		payloads := make([][]byte, 0, len(deliveries))
		for _, d := range deliveries {
			if err := validate(d.Body); err != nil {
				if nerr := d.Nack(amqpbridge.Permanent(err)); nerr != nil {
					return nerr
				}
				continue
			}
			payloads = append(payloads, d.Body)
		}
		return write(ctx, payloads)
	}, nil
}
