package amqpbridge

import (
	"log/slog"

	"github.com/tributary-run/tributary/queue"
)

// ConfigFromQueue maps the process configuration (environment variables read
// by queue.Config) onto the bridge's Config. An unset AMQP_URL maps to the
// local default; callers decide whether the bridge runs at all.
func ConfigFromQueue(c queue.Config, logger *slog.Logger) Config {
	cfg := Config{
		URL:                c.AMQPURL,
		QueuePrefix:        c.QueuePrefix,
		MaxMessageRetries:  c.MaxMessageRetries,
		RetryBase:          c.RetryBase,
		RetryMax:           c.RetryMax,
		BatchMaxEvents:     c.BatchMaxEvents,
		BatchMaxBytes:      int(c.BatchMaxBytes),
		BatchMaxAge:        c.BatchMaxAge,
		BatchTimerInterval: c.BatchTimerInterval,
		Logger:             logger,
	}
	// queue.Config has applied its defaults already, so 0 is an explicit
	// MAX_MESSAGE_RETRIES=0.
	if cfg.MaxMessageRetries == 0 {
		cfg.MaxMessageRetries = NoRetries
	}
	return cfg
}
