package queue

// jobStackRoom is how much stack growJobStack asks for: enough, with what a
// job's goroutine has used by then, for River's decoding of the job's args
// and a small worker, so the goroutine's stack is grown to 16 KiB (the
// largest size Go takes from its per-P stack caches) once.
const jobStackRoom = 8 << 10

// growJobStackIndex is read so the compiler keeps growJobStack's frame.
var growJobStackIndex = 0

// growJobStack makes a job's goroutine grow its stack once, near the top of
// the job's call stack, instead of step by step deep inside it.
//
// River runs every job on a new goroutine, which starts with a small stack
// (2 KiB, or the running average Go keeps). Each time the job's calls
// outgrow it, Go copies the whole stack to one twice the size, and the cost
// of a copy is in walking the frames to adjust their pointers: deep inside
// River's args decoding (encoding/json under the middleware chain) that
// walk is about a sixth of the CPU per job of `tributary bench jobs`
// without this. A function with a large frame called here, where the stack
// is still shallow, makes Go grow the stack to fit it in one copy of the
// few frames above.
//
//go:noinline
func growJobStack() byte {
	var room [jobStackRoom]byte
	return room[growJobStackIndex]
}
