package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/alineo-labs/alineo/adapters"
)

// ErrInvalidConfig is returned by Open for an unusable path or Config.
var ErrInvalidConfig = errors.New("sqlite: invalid config")

// translate maps a driver error to the adapters sentinels, keeping the cause:
// constraint violations wrap ErrConflict; a locked, unopenable or failing
// database file wraps ErrUnavailable.
func (s *Store) translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.isClosed() && (errors.Is(err, sql.ErrConnDone) || errors.Is(err, sql.ErrTxDone) || err.Error() == "sql: database is closed") {
		return fmt.Errorf("sqlite: %s: %w", op, adapters.ErrClosed)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CONSTRAINT:
			return fmt.Errorf("sqlite: %s: %w: %w", op, adapters.ErrConflict, err)
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			return fmt.Errorf("sqlite: %s: %w: %w", op, adapters.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && (se.Code()&0xff == sqlite3.SQLITE_BUSY || se.Code()&0xff == sqlite3.SQLITE_LOCKED)
}
