package batch

import (
	"cmp"
	"fmt"
	"regexp"
	"time"
)

// Defaults of the batch flushes. Each is also documented on its field.
const (
	MaxEventsDefault     = 10000
	MaxBytesDefault      = 10 << 20
	MaxAgeDefault        = 10 * time.Minute
	TimerIntervalDefault = 30 * time.Second
	SinkURLDefault       = "file://./.tributary/batches"
)

// StreamConfig are one stream's flush thresholds. A stream is flushed when
// it holds MaxEvents items or MaxBytes payload bytes, or when its oldest item
// is older than MaxAge.
type StreamConfig struct {
	// MaxEvents is the most items per object.
	//
	// Defaults to 10000.
	MaxEvents int

	// MaxBytes is the most payload bytes per object (before compression,
	// not counting the newline after each item). A single item larger than
	// this is refused at staging time.
	//
	// Defaults to 10 MiB.
	MaxBytes int64

	// MaxAge is how long the oldest item of a stream may wait before the
	// stream is flushed even though it is not full.
	//
	// Defaults to 10 minutes.
	MaxAge time.Duration
}

func (c StreamConfig) withDefaults(d StreamConfig) StreamConfig {
	c.MaxEvents = cmp.Or(c.MaxEvents, d.MaxEvents, MaxEventsDefault)
	c.MaxBytes = cmp.Or(c.MaxBytes, d.MaxBytes, MaxBytesDefault)
	c.MaxAge = cmp.Or(c.MaxAge, d.MaxAge, MaxAgeDefault)
	return c
}

func (c StreamConfig) validate(name string) error {
	switch {
	case c.MaxEvents < 0:
		return fmt.Errorf("invalid max events %d for %s: want at least 1", c.MaxEvents, name)
	case c.MaxBytes < 0:
		return fmt.Errorf("invalid max bytes %d for %s: want at least 1", c.MaxBytes, name)
	case c.MaxAge < 0:
		return fmt.Errorf("invalid max age %s for %s: want a positive duration", c.MaxAge, name)
	}
	return nil
}

// Config holds the thresholds of every stream. The stager, the flush worker
// and the age timer must be given the same Config (in one process that is
// natural; across processes, build it from the same settings).
type Config struct {
	// Defaults applies to every stream without an entry in Streams, and fills
	// the zero fields of those with one.
	//
	// Each field defaults to its StreamConfig default.
	Defaults StreamConfig

	// Streams overrides the thresholds of single streams.
	Streams map[string]StreamConfig
}

// For returns the thresholds of stream with every default applied.
func (c Config) For(stream string) StreamConfig {
	defaults := c.Defaults.withDefaults(StreamConfig{})
	if sc, ok := c.Streams[stream]; ok {
		return sc.withDefaults(defaults)
	}
	return defaults
}

// Validate reports the first bad threshold or stream name.
func (c Config) Validate() error {
	if err := c.Defaults.validate("the default stream settings"); err != nil {
		return err
	}
	for name, sc := range c.Streams {
		if err := ValidateStream(name); err != nil {
			return err
		}
		if err := sc.validate(fmt.Sprintf("stream %q", name)); err != nil {
			return err
		}
	}
	return nil
}

var streamRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateStream checks that name can be a stream name. Stream names become
// a path segment of object keys, so they are limited to letters, digits,
// '.', '_' and '-', start with a letter or digit, and have at most 128
// characters.
func ValidateStream(name string) error {
	if !streamRE.MatchString(name) {
		return fmt.Errorf("invalid stream name %q: use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters", name)
	}
	return nil
}
