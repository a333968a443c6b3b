package opensandbox_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

func TestErrorMessages(t *testing.T) {
	tests := []struct {
		err  error
		want []string
		is   error
	}{
		{&opensandbox.APIError{Status: 404, Code: "X::NOT_FOUND", Message: "gone", RequestID: "r1", Method: "GET", URL: "http://h/v1/sandboxes/a"},
			[]string{"GET http://h/v1/sandboxes/a", "404", "X::NOT_FOUND", "gone", "request id r1"}, opensandbox.ErrNotFound},
		{&opensandbox.APIError{Status: 418}, []string{"418", "I'm a teapot"}, nil},
		{&opensandbox.StreamError{Op: "command", ID: "c1", Events: 3, Detail: "bad bytes", Err: opensandbox.ErrMalformedStream},
			[]string{"command stream c1", "after 3 events", "malformed", "bad bytes"}, opensandbox.ErrMalformedStream},
		{&opensandbox.StateError{Kind: "sandbox", ID: "s1", State: "Failed", Reason: "runtime_error", Message: "oom", Err: opensandbox.ErrSandboxFailed},
			[]string{"sandbox s1 is Failed", "runtime_error", "oom"}, opensandbox.ErrSandboxFailed},
	}
	for _, tt := range tests {
		msg := tt.err.Error()
		for _, w := range tt.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%T message %q lacks %q", tt.err, msg, w)
			}
		}
		if tt.is != nil && !errors.Is(tt.err, tt.is) {
			t.Errorf("%T does not match %v", tt.err, tt.is)
		}
	}
	if errors.Is(&opensandbox.APIError{Status: 418}, opensandbox.ErrServer) {
		t.Error("418 must not match ErrServer")
	}
}

// Empty identifiers are rejected before anything is sent.
func TestEmptyIdentifiersRejected(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.WriteHeader(500) })
	c := newClient(t, rec.URL)
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.WriteHeader(500) })
	ctx := context.Background()
	calls := map[string]func() error{
		"GetSandbox":        func() error { _, err := c.GetSandbox(ctx, ""); return err },
		"DeleteSandbox":     func() error { return c.DeleteSandbox(ctx, "") },
		"PauseSandbox":      func() error { return c.PauseSandbox(ctx, "") },
		"ResumeSandbox":     func() error { return c.ResumeSandbox(ctx, "") },
		"RenewExpiration":   func() error { _, err := c.RenewExpiration(ctx, "", time.Now()); return err },
		"PatchMetadata":     func() error { _, err := c.PatchMetadata(ctx, "", nil); return err },
		"GetEndpoint":       func() error { _, err := c.GetEndpoint(ctx, "", 1); return err },
		"CreateSnapshot":    func() error { _, err := c.CreateSnapshot(ctx, "", ""); return err },
		"GetSnapshot":       func() error { _, err := c.GetSnapshot(ctx, ""); return err },
		"DeleteSnapshot":    func() error { return c.DeleteSnapshot(ctx, "") },
		"Diagnostics":       func() error { _, err := c.Diagnostics(ctx, "", "logs", ""); return err },
		"RunCode":           func() error { _, err := ex.RunCode(ctx, opensandbox.CodeRequest{}); return err },
		"CreateCodeContext": func() error { _, err := ex.CreateCodeContext(ctx, "", ""); return err },
		"DeleteCodeContext": func() error { return ex.DeleteCodeContext(ctx, "") },
		"InterruptCode":     func() error { return ex.InterruptCode(ctx, "") },
		"Interrupt":         func() error { return ex.Interrupt(ctx, "") },
		"CommandStatus":     func() error { _, err := ex.CommandStatus(ctx, ""); return err },
		"CommandLogs":       func() error { _, err := ex.CommandLogs(ctx, "", 0); return err },
		"DeleteSession":     func() error { return ex.DeleteSession(ctx, "") },
		"RunInSession":      func() error { _, err := ex.RunInSession(ctx, "s", opensandbox.SessionRunRequest{}); return err },
		"DeleteFiles":       func() error { return ex.DeleteFiles(ctx) },
		"SetPermissions":    func() error { return ex.SetPermissions(ctx, nil) },
		"SearchFiles":       func() error { _, err := ex.SearchFiles(ctx, "", ""); return err },
		"ReplaceInFiles":    func() error { _, err := ex.ReplaceInFiles(ctx, nil); return err },
		"CreateDirectory":   func() error { return ex.CreateDirectory(ctx, "", opensandbox.Permission{}) },
		"DeleteDirectory":   func() error { return ex.DeleteDirectory(ctx, "") },
		"ListDirectory":     func() error { _, err := ex.ListDirectory(ctx, "", 1); return err },
		"DownloadFile":      func() error { _, err := ex.DownloadFile(ctx, ""); return err },
		"UploadFile":        func() error { return ex.UploadFile(ctx, "/a", nil, opensandbox.Permission{}) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, opensandbox.ErrInvalidRequest) {
			t.Errorf("%s err = %v, want ErrInvalidRequest", name, err)
		}
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("lifecycle requests sent = %d, want 0", n)
	}
}

// TestImageErrorSentinels: an APIError whose code names an image failure
// (sandboxd's answer to a create whose image cannot be had) matches that
// image sentinel beside its status sentinel, and no other image sentinel.
func TestImageErrorSentinels(t *testing.T) {
	images := []error{opensandbox.ErrImageNotFound, opensandbox.ErrImageUnauthorized, opensandbox.ErrImagePullFailed}
	for _, c := range []struct {
		err          error
		image, state error // state: the status sentinel; image: nil for none
	}{
		{&opensandbox.APIError{Status: 404, Code: "IMAGE_NOT_FOUND"}, opensandbox.ErrImageNotFound, opensandbox.ErrNotFound},
		{&opensandbox.APIError{Status: 424, Code: "IMAGE_UNAUTHORIZED"}, opensandbox.ErrImageUnauthorized, nil},
		{&opensandbox.APIError{Status: 424, Code: "IMAGE_PULL_FAILED"}, opensandbox.ErrImagePullFailed, nil},
		{&opensandbox.APIError{Status: 500, Code: "DOCKER::IMAGE_PULL_FAILED"}, opensandbox.ErrImagePullFailed, opensandbox.ErrServer},
		{&opensandbox.APIError{Status: 404, Code: "SANDBOX_NOT_FOUND"}, nil, opensandbox.ErrNotFound},
		{&opensandbox.StateError{Reason: "IMAGE_NOT_FOUND", Err: opensandbox.ErrSandboxFailed}, opensandbox.ErrImageNotFound, opensandbox.ErrSandboxFailed},
	} {
		for _, im := range images {
			if got, want := errors.Is(c.err, im), im == c.image; got != want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", c.err, im, got, want)
			}
		}
		if c.state != nil && !errors.Is(c.err, c.state) {
			t.Errorf("%v does not match %v", c.err, c.state)
		}
	}
}
