package postgres

import "errors"

// ErrInvalidConfig is returned by Open for a DSN it cannot parse.
var ErrInvalidConfig = errors.New("checkpoints/postgres: invalid config")
