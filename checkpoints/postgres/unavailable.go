package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/alineo-labs/alineo/checkpoints"
)

// markUnavailable wraps *err with checkpoints.ErrUnavailable when it says the
// server could not be reached or the connection was lost, so that a caller
// (sandboxd's snapshots) can tell an outage from a refusal. Errors of the
// contract, of the caller's context and of a closed store stay as they are.
func markUnavailable(err *error) {
	if *err == nil || !unavailable(*err) {
		return
	}
	*err = fmt.Errorf("%w: %w", checkpoints.ErrUnavailable, *err)
}

func unavailable(err error) bool {
	var ce *checkpoints.Error
	if errors.As(err, &ce) || errors.Is(err, checkpoints.ErrClosed) || errors.Is(err, checkpoints.ErrUnavailable) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08 is "connection exception"; 57P01-57P03 are the server
		// shutting down or starting up; 53300 is too many connections.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || pe.Code == "53300"
	}
	var (
		conn *pgconn.ConnectError
		ne   net.Error
	)
	return errors.As(err, &conn) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
