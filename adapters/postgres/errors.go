package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/pgerr"
)

// ErrInvalidConfig is returned by Open for an unusable DSN or Config.
var ErrInvalidConfig = errors.New("postgres: invalid config")

// translate maps a driver error to the adapters sentinels, keeping the cause.
func (s *Store) translate(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, adapters.ErrClosed) || s.isClosed() {
		return fmt.Errorf("postgres: %s: %w", op, adapters.ErrClosed)
	}
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505": // unique_violation
			return fmt.Errorf("postgres: %s: %w: %w", op, adapters.ErrConflict, err)
		case pe.Code == "22P05" || pe.Code == "22021": // untranslatable_character, character_not_in_repertoire
			return fmt.Errorf("postgres: %s: %w", op, &events.ValidationError{
				Field: "payload", Reason: "holds a character Postgres cannot store (\\u0000)", Err: err})
		case pgerr.ServerUnavailable(pe):
			return fmt.Errorf("postgres: %s: %w: %w", op, adapters.ErrUnavailable, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if pgerr.Unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, adapters.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}
