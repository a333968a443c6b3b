package opensandbox_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// ptyExecd creates a sandbox on the embedded sandboxd and returns its execd.
func ptyExecd(t *testing.T, ctx context.Context, proxy bool) *opensandbox.Execd {
	t.Helper()
	c, err := opensandbox.New(opensandbox.Config{BaseURL: testenv.Sandboxd(t), UseServerProxy: proxy})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{
		Image:          &opensandbox.ImageSpec{URI: "host"},
		Entrypoint:     []string{"tail", "-f", "/dev/null"},
		ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"},
	})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sb.ID) })
	if _, err := c.WaitRunning(ctx, sb.ID); err != nil {
		t.Fatalf("WaitRunning: %v", err)
	}
	ex, err := c.Execd(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Execd: %v", err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// ptyReader reads a PTY's events in a goroutine of its own (a Read whose ctx
// ends closes a WebSocket, so reads cannot time out one by one).
type ptyReader struct {
	t   *testing.T
	evs chan opensandbox.PTYEvent
	err chan error
}

func readEvents(t *testing.T, ctx context.Context, p *opensandbox.PTY) *ptyReader {
	r := &ptyReader{t: t, evs: make(chan opensandbox.PTYEvent, 256), err: make(chan error, 1)}
	go func() {
		for {
			ev, err := p.Next(ctx)
			if err != nil {
				r.err <- err
				return
			}
			r.evs <- ev
		}
	}()
	return r
}

// next returns the next event, or the reader's error.
func (r *ptyReader) next(d time.Duration) (opensandbox.PTYEvent, error) {
	r.t.Helper()
	select { // events first: the error comes after the last of them
	case ev := <-r.evs:
		return ev, nil
	default:
	}
	select {
	case ev := <-r.evs:
		return ev, nil
	case err := <-r.err:
		select {
		case ev := <-r.evs:
			r.err <- err
			return ev, nil
		default:
		}
		r.err <- err
		return opensandbox.PTYEvent{}, err
	case <-time.After(d):
		return opensandbox.PTYEvent{}, errTimeout
	}
}

var errTimeout = errors.New("no event in time")

// until reads output events until their bytes contain want, or fails.
func (r *ptyReader) until(want string) string {
	r.t.Helper()
	var out bytes.Buffer
	for !strings.Contains(out.String(), want) {
		ev, err := r.next(10 * time.Second)
		if err != nil {
			r.t.Fatalf("waiting for %q: %v (have %q)", want, err, out.String())
		}
		if ev.Kind == opensandbox.PTYExit {
			r.t.Fatalf("exit %d while waiting for %q (have %q)", ev.ExitCode, want, out.String())
		}
		out.Write(ev.Data)
	}
	return out.String()
}

// exit reads to the exit event and checks that io.EOF follows it.
func (r *ptyReader) exit() int {
	r.t.Helper()
	for {
		ev, err := r.next(10 * time.Second)
		if err != nil {
			r.t.Fatalf("waiting for exit: %v", err)
		}
		if ev.Kind == opensandbox.PTYExit {
			if _, err := r.next(10 * time.Second); !errors.Is(err, io.EOF) {
				r.t.Fatalf("Next after exit = %v, want io.EOF", err)
			}
			return ev.ExitCode
		}
	}
}

func TestPTYAgainstSandboxd(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		name := "direct"
		if proxy {
			name = "server proxy"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ex := ptyExecd(t, ctx, proxy)
			id, err := ex.CreatePTY(ctx, opensandbox.PTYRequest{Cwd: "/tmp"})
			if err != nil {
				t.Fatalf("CreatePTY: %v", err)
			}
			p, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{})
			if err != nil {
				t.Fatalf("AttachPTY: %v", err)
			}
			defer p.Close()
			if p.Mode() != "pty" || p.SessionID() != id {
				t.Fatalf("mode, id = %q, %q", p.Mode(), p.SessionID())
			}
			r := readEvents(t, ctx, p)
			if err := p.Write(ctx, []byte("tty; pwd; stty size\n")); err != nil {
				t.Fatal(err)
			}
			if out := r.until("24 80"); !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "/tmp") {
				t.Fatalf("not a terminal in /tmp: %q", out)
			}
			if err := p.Resize(ctx, 120, 40); err != nil {
				t.Fatal(err)
			}
			if err := p.Write(ctx, []byte("stty size\n")); err != nil {
				t.Fatal(err)
			}
			r.until("40 120")
			if err := p.Resize(ctx, 0, 40); !errors.Is(err, opensandbox.ErrInvalidRequest) {
				t.Fatalf("Resize(0, 40) = %v, want ErrInvalidRequest", err)
			}

			// A signal frame reaches the foreground job, as Ctrl-C would.
			if err := p.Write(ctx, []byte(`sh -c 'trap "echo got-INT; exit 0" INT; echo trap-set; while :; do sleep 0.1; done'`+"\n")); err != nil {
				t.Fatal(err)
			}
			r.until("trap-set\r\n")
			if err := p.Signal(ctx, "SIGINT"); err != nil {
				t.Fatal(err)
			}
			r.until("got-INT\r\n")
			if err := p.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			for {
				ev, err := r.next(10 * time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if ev.Kind == opensandbox.PTYPong {
					break
				}
			}

			// One client at a time; a takeover evicts the holder.
			if _, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{}); !errors.Is(err, opensandbox.ErrConflict) {
				t.Fatalf("second attach = %v, want ErrConflict", err)
			}
			st, err := ex.PTYStatus(ctx, id)
			if err != nil || !st.Running || st.OutputOffset == 0 {
				t.Fatalf("PTYStatus = %+v, %v", st, err)
			}
			p2, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{Takeover: true, Since: st.OutputOffset - 3})
			if err != nil {
				t.Fatalf("takeover: %v", err)
			}
			defer p2.Close()
			for {
				_, err := r.next(10 * time.Second)
				if err == nil {
					continue
				}
				if !errors.Is(err, opensandbox.ErrConflict) || !errors.Is(err, opensandbox.ErrStreamTruncated) {
					t.Fatalf("evicted client's Next = %v, want ErrConflict and ErrStreamTruncated", err)
				}
				break
			}
			r2 := readEvents(t, ctx, p2)
			ev, err := r2.next(10 * time.Second)
			if err != nil || ev.Kind != opensandbox.PTYReplay || ev.Offset != st.OutputOffset-3 || len(ev.Data) < 3 {
				t.Fatalf("first event after takeover = %+v, %v; want a replay from %d", ev, err, st.OutputOffset-3)
			}
			if err := p2.Write(ctx, []byte("exit 3\n")); err != nil {
				t.Fatal(err)
			}
			if code := r2.exit(); code != 3 {
				t.Fatalf("exit code = %d, want 3", code)
			}
			if st, err := ex.PTYStatus(ctx, id); err != nil || st.Running {
				t.Fatalf("PTYStatus after exit = %+v, %v", st, err)
			}
			if err := ex.DeletePTY(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := ex.PTYStatus(ctx, id); !errors.Is(err, opensandbox.ErrNotFound) {
				t.Fatalf("PTYStatus after delete = %v, want ErrNotFound", err)
			}
			if _, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{}); !errors.Is(err, opensandbox.ErrNotFound) {
				t.Fatalf("attach after delete = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestPTYPipeModeAndCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ex := ptyExecd(t, ctx, false)
	id, err := ex.CreatePTY(ctx, opensandbox.PTYRequest{Command: "read x; echo out-$x; echo err-$x >&2; exit 5"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{Pipe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Mode() != "pipe" {
		t.Fatalf("mode = %q, want pipe", p.Mode())
	}
	if err := p.Write(ctx, []byte("v\n")); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	for {
		ev, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == opensandbox.PTYExit {
			if ev.ExitCode != 5 {
				t.Fatalf("exit = %d, want 5", ev.ExitCode)
			}
			break
		}
		if ev.Kind == opensandbox.PTYStderr {
			stderr.Write(ev.Data)
		} else {
			stdout.Write(ev.Data)
		}
	}
	if stdout.String() != "out-v\n" || stderr.String() != "err-v\n" {
		t.Fatalf("stdout, stderr = %q, %q; want out-v, err-v apart", stdout.String(), stderr.String())
	}
}

func TestPTYClosedAndBadInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ex := ptyExecd(t, ctx, false)
	for name, err := range map[string]error{
		"status": func() error { _, err := ex.PTYStatus(ctx, ""); return err }(),
		"delete": ex.DeletePTY(ctx, ""),
		"attach": func() error { _, err := ex.AttachPTY(ctx, "", opensandbox.PTYAttachOptions{}); return err }(),
	} {
		if !errors.Is(err, opensandbox.ErrInvalidRequest) {
			t.Errorf("%s with an empty id = %v, want ErrInvalidRequest", name, err)
		}
	}
	if _, err := ex.CreatePTY(ctx, opensandbox.PTYRequest{Cwd: "/no/such/dir"}); !errors.Is(err, opensandbox.ErrBadRequest) {
		t.Fatalf("CreatePTY in a missing cwd = %v, want ErrBadRequest", err)
	}
	id, err := ex.CreatePTY(ctx, opensandbox.PTYRequest{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Closing the execd client detaches the PTY: Next ends with ErrClosed.
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := p.Next(ctx); err != nil {
				done <- err
				return
			}
		}
	}()
	ex.Close()
	if err := <-done; !errors.Is(err, opensandbox.ErrClosed) {
		t.Fatalf("Next after Execd.Close = %v, want ErrClosed", err)
	}
	if _, err := ex.AttachPTY(ctx, id, opensandbox.PTYAttachOptions{}); !errors.Is(err, opensandbox.ErrClosed) {
		t.Fatalf("attach after Close = %v, want ErrClosed", err)
	}
}
