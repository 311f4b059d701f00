package amqpbridge

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Defaults for Config. They match the Node service the bridge replaces (its
// variables are read by the process configuration, tributary.ConfigFromEnv for
// tributary's commands), so both can share queues.
const (
	URLDefault                = "amqp://guest:guest@127.0.0.1:5672/"
	MaxMessageRetriesDefault  = 5
	RetryBaseDefault          = 4 * time.Second
	RetryMaxDefault           = 60 * time.Second
	MaxMessageBytesDefault    = 1 << 20
	BatchMaxEventsDefault     = 10000
	BatchMaxBytesDefault      = 10 << 20
	BatchMaxAgeDefault        = 10 * time.Minute
	BatchTimerIntervalDefault = 30 * time.Second
	ConfirmWindowDefault      = 512
	PublishTimeoutDefault     = 30 * time.Second
	ConnectionNameDefault     = "tributary"
	ReconnectMinDefault       = 100 * time.Millisecond
	ReconnectMaxDefault       = 5 * time.Second
)

// Config is the bridge-wide configuration shared by publishers, consumers and
// the DLQ tools. The zero value is usable: every field has a default.
type Config struct {
	// URL is the broker address. Defaults to URLDefault.
	URL string

	// QueuePrefix is prepended to every queue name as "{prefix}/{name}".
	// Empty means no prefix. Defaults to empty.
	QueuePrefix string

	// MaxMessageRetries is how many times a failing message is retried before
	// it goes to "{name}.failed". Defaults to 5. Use
	// NoRetries (-1) for zero retries.
	MaxMessageRetries int

	// RetryBase and RetryMax shape the retry delay min(RetryBase*2^n,
	// RetryMax). Default to 4s and 60s.
	RetryBase time.Duration
	RetryMax  time.Duration

	// MaxMessageBytes is the largest body the bridge publishes or hands to a
	// handler; larger deliveries go to "{name}.failed". Defaults to 1 MiB.
	MaxMessageBytes int

	// BatchMaxEvents, BatchMaxBytes, BatchMaxAge and BatchTimerInterval drive
	// the batch consumer. BatchMaxEvents is also the batch consumer's
	// prefetch, so it is at most 65535. Default to 10000, 10 MiB, 10 minutes
	// and 30 seconds.
	BatchMaxEvents     int
	BatchMaxBytes      int
	BatchMaxAge        time.Duration
	BatchTimerInterval time.Duration

	// ConfirmWindow is how many publishes may await their broker confirm at
	// once in Publisher.PublishMany. Defaults to 512.
	ConfirmWindow int

	// PublishTimeout bounds one publish, from its write to the broker's
	// confirm, when the caller's context has no earlier deadline; a publish
	// past it fails with ErrNotConfirmed (the message may or may not be
	// enqueued) and the next one reconnects. It also bounds any write to a
	// connection the broker stopped reading (a memory or disk alarm blocks
	// publishers that way), after which the connection is closed. Defaults
	// to 30s.
	PublishTimeout time.Duration

	// ConnectionName is sent as the connection_name client property, suffixed
	// per connection ("{name}.publisher", "{name}.consumer.{queue}"), so
	// operators (and tests) can tell the bridge's connections apart. Defaults
	// to "tributary".
	ConnectionName string

	// ReconnectMin and ReconnectMax bound the reconnect backoff. Default to
	// 100ms and 5s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration

	// Logger receives lifecycle and trouble logs. Defaults to slog.Default().
	Logger *slog.Logger
}

// NoRetries as Config.MaxMessageRetries sends a failing message straight to
// "{name}.failed".
const NoRetries = -1

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.URL = cmp.Or(c.URL, URLDefault)
	c.MaxMessageRetries = cmp.Or(c.MaxMessageRetries, MaxMessageRetriesDefault)
	if c.MaxMessageRetries == NoRetries {
		c.MaxMessageRetries = 0
	}
	c.RetryBase = cmp.Or(c.RetryBase, RetryBaseDefault)
	c.RetryMax = cmp.Or(c.RetryMax, RetryMaxDefault)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, MaxMessageBytesDefault)
	c.BatchMaxEvents = cmp.Or(c.BatchMaxEvents, BatchMaxEventsDefault)
	c.BatchMaxBytes = cmp.Or(c.BatchMaxBytes, BatchMaxBytesDefault)
	c.BatchMaxAge = cmp.Or(c.BatchMaxAge, BatchMaxAgeDefault)
	c.BatchTimerInterval = cmp.Or(c.BatchTimerInterval, BatchTimerIntervalDefault)
	c.ConfirmWindow = cmp.Or(c.ConfirmWindow, ConfirmWindowDefault)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	c.ConnectionName = cmp.Or(c.ConnectionName, ConnectionNameDefault)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, ReconnectMinDefault)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, ReconnectMaxDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first invalid setting as a *queue.ConfigError naming
// the field and its value. It applies defaults first, so zero values are
// valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field string, value any, reason string) error {
		return &queue.ConfigError{Name: field, Value: fmt.Sprint(value), Reason: reason}
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
		return bad("URL", queue.RedactURL(c.URL), "want amqp://user:pass@host:port/vhost")
	}
	switch {
	case strings.ContainsAny(c.QueuePrefix, " \t\n"):
		return bad("QueuePrefix", c.QueuePrefix, "must not contain white space")
	case c.MaxMessageRetries < 0 || c.MaxMessageRetries > 100:
		return bad("MaxMessageRetries", c.MaxMessageRetries, "want 0..100")
	case c.RetryBase < time.Millisecond:
		return bad("RetryBase", c.RetryBase, "want at least 1ms")
	case c.RetryMax < c.RetryBase:
		return bad("RetryMax", c.RetryMax, fmt.Sprintf("want at least the retry base (%s)", c.RetryBase))
	case c.MaxMessageBytes < 0:
		return bad("MaxMessageBytes", c.MaxMessageBytes, "want > 0")
	case c.BatchMaxEvents < 1 || c.BatchMaxEvents > 65535:
		return bad("BatchMaxEvents", c.BatchMaxEvents, "want 1..65535 (it is the batch consumer's prefetch)")
	case c.BatchMaxBytes < 1:
		return bad("BatchMaxBytes", c.BatchMaxBytes, "want > 0")
	case c.BatchMaxAge < time.Millisecond:
		return bad("BatchMaxAge", c.BatchMaxAge, "want at least 1ms")
	case c.BatchTimerInterval < time.Millisecond:
		return bad("BatchTimerInterval", c.BatchTimerInterval, "want at least 1ms")
	case c.ConfirmWindow < 1:
		return bad("ConfirmWindow", c.ConfirmWindow, "want > 0")
	case c.PublishTimeout < time.Millisecond:
		return bad("PublishTimeout", c.PublishTimeout, "want at least 1ms")
	case c.ReconnectMax < c.ReconnectMin:
		return bad("ReconnectMax", c.ReconnectMax, fmt.Sprintf("want at least ReconnectMin (%s)", c.ReconnectMin))
	}
	return nil
}

// QueueName returns the broker name of a logical queue: "{prefix}/{name}", or
// just name when the prefix is empty.
func (c Config) QueueName(name string) string {
	if c.QueuePrefix == "" {
		return name
	}
	return c.QueuePrefix + "/" + name
}

// RetryDelay is the wait before retry n (0-based): min(RetryBase*2^n, RetryMax).
func (c Config) RetryDelay(n int) time.Duration {
	c = c.withDefaults()
	d := c.RetryBase
	for i := 0; i < n && d < c.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.RetryMax)
}

// RetryTiers lists the distinct retry delays in increasing order; each gets
// its own retry queue.
func (c Config) RetryTiers() []time.Duration {
	c = c.withDefaults()
	var tiers []time.Duration
	for n := range c.MaxMessageRetries {
		d := c.RetryDelay(n)
		if len(tiers) == 0 || tiers[len(tiers)-1] != d {
			tiers = append(tiers, d)
		}
	}
	return tiers
}

var errStopped = errors.New("amqpbridge: stopped")
