package apiclient

import (
	"errors"

	"github.com/alineo-labs/alineo/api/wire"
)

// ErrInvalidURL reports a base URL New cannot use.
var ErrInvalidURL = errors.New("invalid API URL")

// Error is the server's error answer: its HTTP status and the code, message
// and field of its JSON body (the codes are wire's Code constants).
type Error = wire.Error
