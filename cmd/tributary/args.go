package main

import "strings"

// nonEmptyArg rejects an empty (or blank) positional argument such as a
// schedule NAME or a QUEUE as a usage error (exit 2) naming it. Without it
// an empty schedule name would reach the database and fail as an unknown
// schedule (exit 1), as if it were a real name.
func nonEmptyArg(what, value string) error {
	if strings.TrimSpace(value) == "" {
		return usagef("%s must not be empty", what)
	}
	return nil
}
