package queue

import (
	"cmp"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/migrations"
)

// Defaults for Config. Each is also documented on its field.
const (
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	SchemaDefault      = "public"
)

// Config says where tributary's tables are: the database and the schema.
// The process's configuration as a whole, read from the environment, is
// the composition root's (tributary.ConfigFromEnv);
// each feature's settings are in the feature's own Config.
type Config struct {
	// DatabaseURL is the Postgres connection string.
	//
	// Defaults to DatabaseURLDefault, a local server on 127.0.0.1:5432.
	DatabaseURL string

	// Schema holds River's and tributary's tables.
	//
	// Defaults to "public".
	Schema string
}

// ConfigError is a configuration value that cannot be used. Its message
// names the setting and the bad value; passwords are never part of it. A
// feature's Validate names its Config field ("LivenessTimeout"); the
// process configuration renames it to the environment variable that set it.
type ConfigError struct {
	Name   string
	Value  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %s", e.Name, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Name, e.Value, e.Reason)
}

// WithDefaults returns a copy of c with every zero field set to its
// default.
func (c Config) WithDefaults() Config {
	c.DatabaseURL = cmp.Or(c.DatabaseURL, DatabaseURLDefault)
	c.Schema = cmp.Or(c.Schema, SchemaDefault)
	return c
}

// Validate checks c with its defaults applied and returns a *ConfigError
// naming the first bad field.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if _, err := pgx.ParseConfig(c.DatabaseURL); err != nil {
		return &ConfigError{Name: "DatabaseURL", Value: RedactURL(c.DatabaseURL), Reason: "not a valid Postgres connection string"}
	}
	if err := migrations.ValidateSchemaName(c.Schema); err != nil {
		return &ConfigError{Name: "Schema", Value: c.Schema, Reason: "use letters, digits and underscores, starting with a letter or underscore"}
	}
	return nil
}

// DatabaseHost returns host:port of the database for messages, without user
// or password.
func (c Config) DatabaseHost() string {
	pc, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return "(unparsable DATABASE_URL)"
	}
	return fmt.Sprintf("%s:%d", pc.Host, pc.Port)
}

// RedactURL replaces the password in a URL-shaped string with "xxxxx" so
// the string can be logged. Strings that do not parse as a URL are replaced
// wholesale when they look like they may carry a password.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		if strings.Contains(raw, "@") || strings.Contains(strings.ToLower(raw), "password") {
			return "(redacted)"
		}
		return raw
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}
