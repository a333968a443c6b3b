package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/internal/pgerr"
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
	return pgerr.Unavailable(err)
}
