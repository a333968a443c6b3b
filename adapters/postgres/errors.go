package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
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
		case strings.HasPrefix(pe.Code, "08"), // connection_exception
			pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", // admin/crash shutdown, cannot connect now
			pe.Code == "53300": // too_many_connections
			return fmt.Errorf("postgres: %s: %w: %w", op, adapters.ErrUnavailable, err)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if unreachable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, adapters.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// unreachable reports errors of the connection rather than of the statement.
func unreachable(err error) bool {
	var (
		ce *pgconn.ConnectError
		ne net.Error
	)
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded) // a connect timeout, the caller's ctx being alive
}
