package bus

import (
	"context"
	"fmt"
	"testing"

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
