package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryableSetup(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 400, ErrorCode: errCodeNoSuitablePeers, Description: "no suitable peers for placement"}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: errCodeClusterNotAvailable}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: errCodeNoMetaLeader}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNameInUse}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}, false},
		{context.DeadlineExceeded, true},
	} {
		if got := retryableSetup(fmt.Errorf("create: %w", tt.err)); got != tt.want {
			t.Errorf("retryableSetup(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestRetryablePublish: publishSync tries again, with the same message id,
// what may go away by itself, and not an answer about the message.
func TestRetryablePublish(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true},
		{&jetstream.APIError{Code: 409, ErrorCode: errCodeDuplicateInProcess, Description: "duplicate message id is in process"}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: errCodeClusterNotAvailable}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false}, // fenced
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest}, false},
		{context.DeadlineExceeded, true},
		{nats.ErrTimeout, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrNoStreamResponse, true},
		{errors.New("connection closed"), false},
	} {
		if got := retryablePublish(fmt.Errorf("publish: %w", tt.err)); got != tt.want {
			t.Errorf("retryablePublish(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
