package opensandbox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// The observed execd stream for `echo hello; echo err >&2; exit 3` (API-NOTES §6.1).
var observedExit3 = []string{
	`{"type":"init","text":"7b6d7e9a0f4248afbb47255b0876dcc5","timestamp":1795944079743}`,
	`{"type":"ping","text":"pong","timestamp":1795944079743}`,
	`{"type":"stdout","text":"hello","timestamp":1795944079745}`,
	`{"type":"stderr","text":"err","timestamp":1795944079745}`,
	`{"type":"error","timestamp":1795944079745,"error":{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}}`,
}

var observedSuccess = []string{
	`{"type":"init","text":"cmd-1","timestamp":1795944079743}`,
	`{"type":"stdout","text":"hi","timestamp":1795944079745}`,
	`{"type":"stdout","text":"\n","timestamp":1795944079745}`,
	`{"type":"execution_complete","execution_time":306,"timestamp":1795944080051}`,
}

// writeEvents writes execd's wire format: each JSON object followed by a blank line,
// flushed per event.
func writeEvents(w http.ResponseWriter, events ...string) {
	for _, e := range events {
		_, _ = io.WriteString(w, e+"\n\n")
		w.(http.Flusher).Flush()
	}
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
}

func newExecd(t *testing.T, handler func(w http.ResponseWriter, r *http.Request, body []byte)) (*opensandbox.Execd, *recorder) {
	t.Helper()
	rec := newRecorder(t, handler)
	ex, err := opensandbox.NewExecd(opensandbox.EndpointConfig{
		Endpoint: opensandbox.Endpoint{URL: rec.URL, Headers: map[string]string{"X-EXECD-ACCESS-TOKEN": "tok"}},
		Retry:    fastRetry,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex, rec
}

func kinds(t *testing.T, s *opensandbox.Stream) []string {
	t.Helper()
	var ks []string
	for s.Next() {
		ks = append(ks, string(s.Event().Kind))
	}
	return ks
}

func TestRunCommandNonZeroExit(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedExit3...)
	})
	ctx := context.Background()
	s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hello; echo err >&2; exit 3", Cwd: "/tmp",
		Envs: map[string]string{"A": "1"}, Timeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var texts []string
	var ks []string
	for s.Next() {
		ev := s.Event()
		ks = append(ks, string(ev.Kind))
		if ev.Kind == opensandbox.EventStdout || ev.Kind == opensandbox.EventStderr {
			texts = append(texts, ev.Text)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if got, want := strings.Join(ks, ","), "init,ping,stdout,stderr,error"; got != want {
		t.Errorf("kinds = %s, want %s", got, want)
	}
	if got, want := strings.Join(texts, "|"), "hello|err"; got != want {
		t.Errorf("texts = %s, want %s", got, want)
	}
	res, ok := s.Result()
	if !ok || res.ExitCode != 3 || res.ID != "7b6d7e9a0f4248afbb47255b0876dcc5" || res.Error == nil || res.Error.EName != "CommandExecError" {
		t.Errorf("Result = %+v, %v; want exit 3 with the init id", res, ok)
	}
	r := rec.last(t)
	if r.Method != "POST" || r.Path != "/command" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
	if r.Header.Get("X-EXECD-ACCESS-TOKEN") != "tok" || r.Header.Get("Accept") != "text/event-stream" {
		t.Errorf("headers = %v", r.Header)
	}
	if r.Header.Get("OPEN-SANDBOX-API-KEY") != "" {
		t.Error("API key leaked to execd")
	}
	jsonEqual(t, "command", r.Body, `{"command":"echo hello; echo err >&2; exit 3","cwd":"/tmp","envs":{"A":"1"},"timeout":1500}`)
}

func TestRunCommandSuccessAndWait(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedSuccess...)
	})
	uid, gid := 1000, 1000
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "echo hi", Background: true, UID: &uid, GID: &gid})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait()
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if res.ExitCode != 0 || res.ExecutionTime != 306*time.Millisecond || res.ID != "cmd-1" || res.Error != nil {
		t.Errorf("Result = %+v", res)
	}
	jsonEqual(t, "command", rec.last(t).Body, `{"command":"echo hi","background":true,"uid":1000,"gid":1000}`)
}

func TestStreamErrors(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		want   error
		detail string
		events int
	}{
		{"cut before terminal", observedExit3[0] + "\n\n" + observedExit3[2] + "\n\n", opensandbox.ErrStreamTruncated, "", 2},
		{"empty stream", "", opensandbox.ErrStreamTruncated, "", 0},
		{"cut inside an event", observedExit3[0] + "\n\n" + `{"type":"stdout","te`, opensandbox.ErrMalformedStream, "ended inside", 1},
		{"garbage bytes", observedExit3[0] + "\n\nHTTP/1.1 200 OK\x00\xff\n\n", opensandbox.ErrMalformedStream, "unexpected line", 1},
		{"bad json", `{"type":"init",]` + "\n\n", opensandbox.ErrMalformedStream, "invalid JSON", 0},
		{"event without type", `{"text":"x"}` + "\n\n", opensandbox.ErrMalformedStream, "no type", 0},
		{"non-object data", "data: 42\n\n", opensandbox.ErrMalformedStream, "not a JSON object", 0},
		{"ping only then EOF", `{"type":"ping","text":"pong"}` + "\n\n", opensandbox.ErrStreamTruncated, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				startStream(w)
				_, _ = io.WriteString(w, tt.body)
			})
			s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Wait()
			var se *opensandbox.StreamError
			if !errors.Is(err, tt.want) || !errors.As(err, &se) {
				t.Fatalf("err = %v, want *StreamError wrapping %v", err, tt.want)
			}
			if !strings.Contains(se.Detail, tt.detail) || se.Events != tt.events {
				t.Errorf("StreamError = %+v, want detail containing %q after %d events", se, tt.detail, tt.events)
			}
			if _, ok := s.Result(); ok || res.ExitCode == 0 {
				t.Errorf("Result = %+v, ok %v; a stream without a terminal event must not look like exit 0", res, ok)
			}
		})
	}
}

// Standard SSE framing (data:/event: lines, comments, CRLF, multi-line data) is read too.
func TestStreamSSEFraming(t *testing.T) {
	body := ": keep-alive\r\n" +
		"event: init\r\ndata: {\"text\":\"c1\"}\r\n\r\n" +
		"id: 2\nretry: 100\ndata: {\"type\":\"stdout\",\ndata:  \"text\":\"multi\"}\n\n" +
		"{\"type\":\"stderr\",\n \"text\":\"pretty\"}\n\n" +
		"data: {\"type\":\"error\",\"ename\":\"CommandExecError\",\"evalue\":\"-1\",\"traceback\":[\"signal: killed\"]}\n\n"
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		_, _ = io.WriteString(w, body)
	})
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for s.Next() {
		got = append(got, string(s.Event().Kind)+":"+s.Event().Text)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "init:c1,stdout:multi,stderr:pretty,error:"; strings.Join(got, ",") != want {
		t.Errorf("events = %s, want %s", strings.Join(got, ","), want)
	}
	if res, _ := s.Result(); res.ExitCode != -1 || res.Error.Traceback[0] != "signal: killed" {
		t.Errorf("Result = %+v, want exit -1 from the flat legacy error fields", res)
	}
}

// execd keeps /command open after the terminal event; the client must return at once.
func TestStreamReturnsAtTerminalEventWithoutServerClose(t *testing.T) {
	release := make(chan struct{})
	serverSawCancel := make(chan struct{})
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedSuccess...)
		select {
		case <-release:
		case <-r.Context().Done():
			close(serverSawCancel)
		}
	})
	defer close(release)
	start := time.Now()
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Wait took %v; it must not wait for the server to close", d)
	}
	s.Close()
	// The leftover response is drained in the background; Close of the execd client
	// cancels it.
	closeStart := time.Now()
	ex.Close()
	if d := time.Since(closeStart); d > time.Second {
		t.Errorf("Execd.Close took %v", d)
	}
	select {
	case <-serverSawCancel:
	case <-time.After(5 * time.Second):
		t.Fatal("server never saw the leftover request cancelled")
	}
}

// Without Close, the drain still ends on its own once the server closes.
func TestStreamDrainEndsWhenServerCloses(t *testing.T) {
	done := make(chan struct{})
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		defer close(done)
		startStream(w)
		writeEvents(w, observedSuccess...)
		time.Sleep(50 * time.Millisecond) // execd's grace period, shortened
	})
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(); err != nil {
		t.Fatal(err)
	}
	<-done
	ex.Close() // must not hang
}

func TestStreamContextCancelAndStall(t *testing.T) {
	for _, tt := range []struct {
		name string
		want error
	}{{"cancel", context.Canceled}, {"deadline", context.DeadlineExceeded}, {"close", context.Canceled}, {"execd close", context.Canceled}} {
		t.Run(tt.name, func(t *testing.T) {
			gone := make(chan struct{})
			ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				startStream(w)
				writeEvents(w, observedExit3[0])
				<-r.Context().Done() // stall: no more events, never closes
				close(gone)
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.name == "deadline" {
				ctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
			}
			s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "sleep 100"})
			if err != nil {
				t.Fatal(err)
			}
			if !s.Next() || s.Event().Kind != opensandbox.EventInit || s.ID() == "" {
				t.Fatalf("first event = %+v, err %v", s.Event(), s.Err())
			}
			go func() {
				time.Sleep(50 * time.Millisecond)
				switch tt.name {
				case "cancel":
					cancel()
				case "close":
					s.Close()
				case "execd close":
					ex.Close()
				}
			}()
			if s.Next() {
				t.Fatalf("unexpected event %+v", s.Event())
			}
			var se *opensandbox.StreamError
			if err := s.Err(); !errors.Is(err, tt.want) || !errors.As(err, &se) {
				t.Fatalf("Err = %v, want *StreamError wrapping %v", err, tt.want)
			}
			if se.ID == "" {
				t.Error("StreamError lost the command id")
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("server request never cancelled")
			}
		})
	}
}

// An http.Client.Timeout must not cut a long stream: the client strips it.
func TestLongStreamNotCutByHTTPClientTimeout(t *testing.T) {
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedSuccess[0])
		for range 4 {
			time.Sleep(100 * time.Millisecond)
			writeEvents(w, `{"type":"ping","text":"pong"}`)
		}
		writeEvents(w, observedSuccess[3])
	})
	ex, err := opensandbox.NewExecd(opensandbox.EndpointConfig{Endpoint: opensandbox.Endpoint{URL: rec.URL},
		HTTPClient: &http.Client{Timeout: 150 * time.Millisecond}, RequestTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
}

func TestRunCommandStartupErrors(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		writeJSON(w, 400, `{"code":"INVALID_REQUEST_BODY","message":"cwd does not exist"}`)
	})
	_, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x", Cwd: "/nope"})
	var apiErr *opensandbox.APIError
	if !errors.Is(err, opensandbox.ErrBadRequest) || !errors.As(err, &apiErr) || apiErr.Code != "INVALID_REQUEST_BODY" {
		t.Fatalf("err = %v, want *APIError INVALID_REQUEST_BODY", err)
	}
	if n := len(rec.requests()); n != 1 {
		t.Errorf("requests = %d, want 1 (commands are never retried)", n)
	}
	gid := 1
	for _, req := range []opensandbox.CommandRequest{{}, {Command: "  "}, {Command: "x", GID: &gid}, {Command: "x", Timeout: -1}} {
		if _, err := ex.RunCommand(context.Background(), req); !errors.Is(err, opensandbox.ErrInvalidRequest) {
			t.Errorf("RunCommand(%+v) err = %v, want ErrInvalidRequest", req, err)
		}
	}
}

func TestExecdClosedRejectsCalls(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { w.WriteHeader(200) })
	ex.Close()
	ex.Close() // idempotent
	if _, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"}); !errors.Is(err, opensandbox.ErrClosed) {
		t.Errorf("RunCommand err = %v, want ErrClosed", err)
	}
	if err := ex.Ping(context.Background()); !errors.Is(err, opensandbox.ErrClosed) {
		t.Errorf("Ping err = %v, want ErrClosed", err)
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("requests = %d, want 0", n)
	}
}

func TestRunCodeAndSessionStreams(t *testing.T) {
	ex, rec := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		switch r.URL.Path {
		case "/session":
			writeJSON(w, 200, `{"session_id":"s-1"}`)
		default:
			startStream(w)
			writeEvents(w, `{"type":"init","text":"ctx-1"}`, `{"type":"execution_count","execution_count":1}`,
				`{"type":"result","results":{"text":"2","image/png":"aGk="}}`,
				`{"type":"error","error":{"ename":"ZeroDivisionError","evalue":"division by zero","traceback":["..."]}}`)
		}
	})
	ctx := context.Background()
	s, err := ex.RunCode(ctx, opensandbox.CodeRequest{Code: "1/0", Context: &opensandbox.CodeContext{ID: "ctx-1", Language: "python"}})
	if err != nil {
		t.Fatal(err)
	}
	var results map[string]any
	for s.Next() {
		if s.Event().Kind == opensandbox.EventResult {
			results = s.Event().Results
		}
	}
	if res, ok := s.Result(); !ok || res.ExitCode != 1 || res.Error.EValue != "division by zero" {
		t.Errorf("Result = %+v, %v; a non-numeric evalue is exit code 1", res, ok)
	}
	if results["text"] != "2" {
		t.Errorf("results = %v", results)
	}
	if res, _ := s.Result(); res.Results["text"] != "2" || res.Results["image/png"] != "aGk=" || !res.Error.Exception() {
		t.Errorf("Result = %+v; want the result event's results and an exception", res)
	}
	r := rec.last(t)
	if r.Path != "/code" {
		t.Errorf("path = %s", r.Path)
	}
	jsonEqual(t, "code", r.Body, `{"code":"1/0","context":{"id":"ctx-1","language":"python"}}`)

	sid, err := ex.CreateSession(ctx, "/work")
	if err != nil || sid != "s-1" {
		t.Fatalf("CreateSession = %q, %v", sid, err)
	}
	jsonEqual(t, "session", rec.last(t).Body, `{"cwd":"/work"}`)
	s, err = ex.RunInSession(ctx, sid, opensandbox.SessionRunRequest{Command: "export X=1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ks := kinds(t, s); len(ks) != 4 {
		t.Errorf("kinds = %v", ks)
	}
	r = rec.last(t)
	if r.Method != "POST" || r.Path != "/session/s-1/run" {
		t.Errorf("request = %s %s", r.Method, r.Path)
	}
	jsonEqual(t, "session run", r.Body, `{"command":"export X=1","timeout":1000}`)
}

func TestExecdNoGoroutineLeak(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedSuccess...)
		<-r.Context().Done()
	})
	before := countGoroutines()
	for range 5 {
		s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	ex.Close()
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := countGoroutines(); n > before+2 {
			return errors.New("goroutines still running after Close: " + itoa(n) + " > " + itoa(before))
		}
		return nil
	})
}

// A connection cut inside a chunk is a truncation too, and keeps the transport error.
func TestStreamBrokenConnection(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		ev := observedExit3[0] + "\n\n"
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		_, _ = buf.WriteString(strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n")
		_, _ = buf.WriteString("400\r\n{\"type\":\"stdout\"") // chunk announced, never finished
		_ = buf.Flush()
	})
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Wait()
	if !errors.Is(err, opensandbox.ErrStreamTruncated) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrStreamTruncated wrapping io.ErrUnexpectedEOF", err)
	}
	if s.ID() != "7b6d7e9a0f4248afbb47255b0876dcc5" {
		t.Errorf("ID = %q", s.ID())
	}
}

// After Close, buffered events are not handed out.
func TestStreamCloseStopsBufferedEvents(t *testing.T) {
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		writeEvents(w, observedExit3[:4]...)
		<-r.Context().Done()
	})
	s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatalf("no first event: %v", s.Err())
	}
	s.Close()
	if s.Next() {
		t.Fatalf("event %+v after Close", s.Event())
	}
	if err := s.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err = %v, want context.Canceled", err)
	}
}

// TestStreamEventsOutliveTheStream: a finished stream's reading buffer is
// reused by the next ones; the events read from it, kept, stay as they were
// (in every framing: bare objects, SSE data lines, an object over lines).
func TestStreamEventsOutliveTheStream(t *testing.T) {
	bodies := []string{
		strings.Join(observedSuccess, "\n\n") + "\n\n",
		"event: stdout\ndata: {\"text\":\"sse one\"}\n\n" +
			"data: {\"type\":\"execution_complete\"}\n\n",
		"{\"type\":\"stdout\",\n\"text\":\"over lines\"}\n\n" + `{"type":"execution_complete"}` + "\n\n",
	}
	call := 0
	ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		startStream(w)
		_, _ = io.WriteString(w, bodies[call%len(bodies)])
		call++
	})
	type kept struct{ kind, text, raw string }
	var first [][]opensandbox.Event
	var want [][]kept
	for range 2 * len(bodies) {
		s, err := ex.RunCommand(context.Background(), opensandbox.CommandRequest{Command: "x"})
		if err != nil {
			t.Fatal(err)
		}
		var evs []opensandbox.Event
		var ks []kept
		for s.Next() {
			ev := s.Event()
			evs = append(evs, ev)
			ks = append(ks, kept{string(ev.Kind), strings.Clone(ev.Text), string(ev.Raw)})
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		first, want = append(first, evs), append(want, ks)
	}
	for i, evs := range first {
		for j, ev := range evs {
			if got := (kept{string(ev.Kind), ev.Text, string(ev.Raw)}); got != want[i][j] {
				t.Errorf("stream %d event %d = %+v after later streams, was %+v", i, j, got, want[i][j])
			}
		}
	}
	if want[1][0].text != "sse one" || want[2][0].text != "over lines" {
		t.Errorf("texts = %q, %q", want[1][0].text, want[2][0].text)
	}
}

// TestExitCodeOfErrorEvents: a shell's error event carries the exit code in
// evalue; an exception is exit code 1 whatever its message, but for
// SystemExit, whose integer value is the exit code.
func TestExitCodeOfErrorEvents(t *testing.T) {
	for _, c := range []struct {
		name, err string
		want      int
		exception bool
	}{
		{"exit 3", `{"ename":"CommandExecError","evalue":"3","traceback":["exit status 3"]}`, 3, false},
		{"killed", `{"ename":"CommandExecError","evalue":"-1","traceback":["signal: killed"]}`, -1, false},
		{"start failure", `{"ename":"CommandExecError","evalue":"fork/exec /x: no such file"}`, 1, false},
		{"no ename", `{"evalue":"4"}`, 4, false},
		{"exception", `{"ename":"ValueError","evalue":"boom","traceback":["Traceback...","ValueError: boom\n"]}`, 1, true},
		{"exception with a numeric message", `{"ename":"ValueError","evalue":"2"}`, 1, true},
		{"sys.exit(3)", `{"ename":"SystemExit","evalue":"3"}`, 3, true},
		{"sys.exit('bye')", `{"ename":"SystemExit","evalue":"bye"}`, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex, _ := newExecd(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				startStream(w)
				writeEvents(w, `{"type":"init","text":"c-1"}`, `{"type":"error","error":`+c.err+`}`)
			})
			s, err := ex.RunCode(context.Background(), opensandbox.CodeRequest{Code: "x"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if got := res.ExitCode; got != c.want {
				t.Errorf("ExitCode = %d, want %d", got, c.want)
			}
			if got := res.Error.Exception(); got != c.exception {
				t.Errorf("Exception() = %v, want %v", got, c.exception)
			}
			if res.Results != nil {
				t.Errorf("Results = %v, want nil without a result event", res.Results)
			}
		})
	}
}
