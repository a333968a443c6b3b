package alineo

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// TestFakePipeStderr: Pipe streams stdout, and stderr to the writers given
// after it; Pipe(w, w) interleaves both in recorded order.
func TestFakePipeStderr(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(ctx)
	var out, errb, both bytes.Buffer
	x := sb.Exec(ctx, "make test")
	if err := x.Pipe(&out); err != nil || out.String() != "make test\n" {
		t.Errorf("Pipe(out) = %q, %v; want stdout only", out.String(), err)
	}
	out.Reset()
	if err := x.Pipe(&out, &errb); err != nil || out.String() != "make test\n" || errb.String() != "err:make test\n" {
		t.Errorf("Pipe(out, err) = %q, %q, %v; want stdout and stderr apart", out.String(), errb.String(), err)
	}
	if err := x.Pipe(&both, &both); err != nil || both.String() != "make test\nerr:make test\n" {
		t.Errorf("Pipe(w, w) = %q, %v; want both in recorded order", both.String(), err)
	}
	var ce *CommandError
	errb.Reset()
	if err := sb.Exec(ctx, "fail 2").Pipe(&out, &errb); !errors.As(err, &ce) || errb.String() != "failing\n" {
		t.Errorf("failing Pipe = %q, %v; want its stderr and a *CommandError", errb.String(), err)
	}
}

// TestFakeErrNotFound: unknown sessions, sandboxes, snapshots and
// environments all match ErrNotFound (and still are *ClientError 404 where
// they were).
func TestFakeErrNotFound(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	ctx := context.Background()
	_, err := c.Resume(ctx, "no-such-sandbox", ResumeOptions{})
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Resume(unknown) = %v, want ErrNotFound", err)
	}
	var ce *ClientError
	if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
		t.Errorf("Resume(unknown) = %v, want a *ClientError 404 too", err)
	}
	if _, err := c.Connect(ctx, "no-such-sandbox", "", ConnectOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Connect(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := c.RestoreSnapshot(ctx, "no-such-snapshot", "", Resources{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("RestoreSnapshot(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := c.Environments().Get(ctx, "no-such-env"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Environments().Get(unknown) = %v, want ErrNotFound", err)
	}
	if errors.Is(&ClientError{Status: http.StatusConflict}, ErrNotFound) {
		t.Error("a 409 matches ErrNotFound")
	}
}

// TestFakeErrorNamesOperationOnce: a failed create says "create sandbox"
// once, and "alineo:" once.
func TestFakeErrorNamesOperationOnce(t *testing.T) {
	f := newFakeServer(t)
	f.failCreate = http.StatusInternalServerError
	c := newFakeClient(t, f, nil)
	_, err := c.Sandbox(context.Background(), SandboxOptions{Image: "ubuntu"})
	if err == nil {
		t.Fatal("Sandbox succeeded against a failing server")
	}
	msg := err.Error()
	if got := strings.Count(msg, "create sandbox"); got != 1 {
		t.Errorf("error %q names the create %d times, want once", msg, got)
	}
	if got := strings.Count(msg, "alineo:"); got != 1 {
		t.Errorf("error %q has %d alineo: prefixes, want one", msg, got)
	}
}
