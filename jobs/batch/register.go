package batch

import "github.com/tributary-run/tributary/queue"

// Register adds the flush worker and the age timer to a runtime. The
// runtime's client is used for the pool, schema and enqueues; fc.Streams is
// also the timer's stream configuration when tc.Streams is empty.
func Register(rt *queue.Runtime, fc FlusherConfig, tc AgeTimerConfig) (*FlushWorker, error) {
	fw, err := NewFlushWorker(rt.Client, fc)
	if err != nil {
		return nil, err
	}
	if tc.Streams.Defaults == (StreamConfig{}) && tc.Streams.Streams == nil {
		tc.Streams = fc.Streams
	}
	timer, err := NewAgeTimer(rt.Client, tc)
	if err != nil {
		return nil, err
	}
	queue.AddWorker(rt, fw)
	if err := rt.AddService(timer); err != nil {
		return nil, err
	}
	return fw, nil
}
