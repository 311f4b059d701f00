package events

// laneHolder is the dispatcher as the runtime's service. Lane chains run
// the jobs they claim inside their head's Work, so it tells the runtime
// which jobs it holds (queue.Runtime.AddService), and the runtime does not
// take them for lost.
type laneHolder struct{ *Dispatcher }

// HoldsJob reports whether a lane chain of this process runs the job id.
func (h laneHolder) HoldsJob(id int64) bool { return h.runsJob(id) }
