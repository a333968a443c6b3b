package pgerr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err says the server is unavailable: a
// server error of class 08 (connection exception), 57P01-57P03 (shutting
// down, starting up) or 53300 (too many connections), or an error of the
// connection rather than of a statement (Unreachable).
func Unavailable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return ServerUnavailable(pe)
	}
	return Unreachable(err)
}

// ServerUnavailable reports whether the server's error pe says it cannot
// serve now rather than refusing the statement.
func ServerUnavailable(pe *pgconn.PgError) bool {
	return strings.HasPrefix(pe.Code, "08") || // connection_exception
		pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03" || // admin/crash shutdown, cannot connect now
		pe.Code == "53300" // too_many_connections
}

// Unreachable reports errors of the connection rather than of the
// statement: connecting, the network, a connection closed or cut midway,
// a connect timeout (context.DeadlineExceeded: callers check their own
// context first).
func Unreachable(err error) bool {
	var (
		ce *pgconn.ConnectError
		ne net.Error
	)
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, context.DeadlineExceeded)
}
