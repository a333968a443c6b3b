package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/opensandbox"
)

func TestPermanent(t *testing.T) {
	failed := func(reason string) error {
		return &opensandbox.StateError{Kind: "sandbox", ID: "sb", State: "Failed", Reason: reason, Err: opensandbox.ErrSandboxFailed}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"invalid spec", &SpecError{Path: "image", Reason: "is required"}, true},
		{"image not found, waiting", &alineo.ClientError{Status: 500, SandboxID: "sb", Err: failed(opensandbox.ReasonImageNotFound)}, true},
		{"image pull failed, waiting", fmt.Errorf("create: %w", &alineo.ClientError{Status: 500, Err: failed(opensandbox.ReasonImagePullFailed)}), true},
		{"image unauthorized", failed(opensandbox.ReasonImageUnauthorized), true},
		{"image pull failed, answered", &alineo.SandboxError{Op: "create", Err: &opensandbox.APIError{Status: 500, Code: "IMAGE_PULL_FAILED"}}, true},
		{"image not found, prefixed code", &opensandbox.APIError{Status: 424, Code: "SANDBOXD::IMAGE_NOT_FOUND"}, true},
		{"failed dependency", &opensandbox.APIError{Status: 424, Code: "Failed Dependency"}, true},
		{"bad request", &opensandbox.APIError{Status: 400, Code: "INVALID_RESOURCES"}, true},
		{"sandbox failed otherwise", failed("runtime_error"), false},
		{"server unavailable", &opensandbox.APIError{Status: 503, Code: "UNAVAILABLE"}, false},
		{"not found", &opensandbox.APIError{Status: 404, Code: "SANDBOX_NOT_FOUND"}, false},
		{"connection refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{"cancelled", errors.Join(context.Canceled, failed(opensandbox.ReasonImageNotFound)), false},
		{"nil", nil, false},
	} {
		if got := permanent(tc.err); got != tc.want {
			t.Errorf("%s: permanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
