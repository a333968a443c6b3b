package snapshots

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestPutError: what an S3 PutObject's failure becomes. The refusals of a
// body that does not hash to its key (the signed payload hash, the
// checksum header) and a file that got shorter are ErrCorruptBlob; a
// throttled or unavailable server (after the SDK's retries) is
// ErrUnavailable; anything else stays as it is.
func TestPutError(t *testing.T) {
	status := func(code int) error {
		return fmt.Errorf("operation error S3: PutObject: %w", &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
			Err:      &smithy.GenericAPIError{Code: http.StatusText(code)},
		}})
	}
	api := func(code string) error {
		return fmt.Errorf("operation error S3: PutObject: %w", &smithy.GenericAPIError{Code: code})
	}
	other := errors.New("something else")
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"payload hash", api("XAmzContentSHA256Mismatch"), ErrCorruptBlob},
		{"checksum", api("BadDigest"), ErrCorruptBlob},
		{"shorter", fmt.Errorf("send: %w", errShrunk), ErrCorruptBlob},
		{"503", status(http.StatusServiceUnavailable), ErrUnavailable},
		{"429", status(http.StatusTooManyRequests), ErrUnavailable},
		{"403", status(http.StatusForbidden), nil},
		{"access denied", api("AccessDenied"), nil},
		{"canceled", context.Canceled, nil},
		{"other", other, nil},
	} {
		got := putError(c.err)
		switch {
		case c.want != nil && !errors.Is(got, c.want):
			t.Errorf("%s: %v, want it to wrap %v", c.name, got, c.want)
		case c.want == nil && (errors.Is(got, ErrCorruptBlob) || errors.Is(got, ErrUnavailable) || !errors.Is(got, c.err)):
			t.Errorf("%s: %v, want %v as it is", c.name, got, c.err)
		}
	}
	if putError(nil) != nil {
		t.Error("putError(nil) != nil")
	}
}
