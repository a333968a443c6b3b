package sandboxd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// startServer starts a server for cfg and closes it when t ends.
func startServer(t testing.TB, cfg sandboxd.Config) (*sandboxd.Server, string) {
	t.Helper()
	if cfg.Logger == nil && testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := sandboxd.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	url, err := s.Start(context.Background())
	if err != nil {
		_ = s.Close(context.Background())
		if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
			testenv.SkipOrFail(t, err.Error())
		}
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, url
}

type resp struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r resp) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

func call(t testing.TB, method, url string, body any, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{Status: res.StatusCode, Header: res.Header, Body: b}
}

func wantStatus(t testing.TB, r resp, want int) {
	t.Helper()
	if r.Status != want {
		t.Fatalf("status = %d, want %d (body %s)", r.Status, want, r.Body)
	}
}

// create posts a sandbox and returns its id.
func create(t testing.TB, base string, req map[string]any) string {
	t.Helper()
	if req == nil {
		req = map[string]any{}
	}
	if _, ok := req["image"]; !ok {
		req["image"] = map[string]any{"uri": "host"}
	}
	if _, ok := req["entrypoint"]; !ok {
		req["entrypoint"] = []string{"tail", "-f", "/dev/null"}
	}
	if _, ok := req["resourceLimits"]; !ok {
		req["resourceLimits"] = map[string]string{"cpu": "500m", "memory": "512Mi"}
	}
	r := call(t, "POST", base+"/v1/sandboxes", req)
	wantStatus(t, r, http.StatusAccepted)
	var out struct{ ID string }
	r.decode(t, &out)
	return out.ID
}

// getSandbox reads sandbox id; hdr are headers to send (the API key).
func getSandbox(t testing.TB, base, id string, hdr ...string) sandboxd.Sandbox {
	t.Helper()
	r := call(t, "GET", base+"/v1/sandboxes/"+id, nil, hdr...)
	wantStatus(t, r, http.StatusOK)
	var sb sandboxd.Sandbox
	r.decode(t, &sb)
	return sb
}

func waitState(t testing.TB, base, id string, want sandboxd.State, hdr ...string) sandboxd.Sandbox {
	t.Helper()
	var sb sandboxd.Sandbox
	testenv.Eventually(t, 20*time.Second, func() error {
		sb = getSandbox(t, base, id, hdr...)
		if sb.Status.State != want {
			return fmt.Errorf("state = %s (%s: %s), want %s", sb.Status.State, sb.Status.Reason, sb.Status.Message, want)
		}
		return nil
	})
	return sb
}

// execd returns the direct execd endpoint of a sandbox.
func execdEndpoint(t testing.TB, base, id string, proxy bool) (string, string) {
	t.Helper()
	r := call(t, "GET", fmt.Sprintf("%s/v1/sandboxes/%s/endpoints/%d?use_server_proxy=%v", base, id, sandboxd.ExecdPort, proxy), nil)
	wantStatus(t, r, http.StatusOK)
	var ep sandboxd.Endpoint
	r.decode(t, &ep)
	return "http://" + ep.Endpoint, ep.Headers[sandboxd.ExecdTokenHeader]
}

type streamEvent struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		Ename  string `json:"ename"`
		Evalue string `json:"evalue"`
	} `json:"error"`
}

// run runs command through execd and returns stdout lines and the exit code.
func run(t testing.TB, execdURL, token, command string) ([]string, int) {
	t.Helper()
	lines, code, err := runErr(context.Background(), execdURL, token, command)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return lines, code
}

func runErr(ctx context.Context, execdURL, token, command string) ([]string, int, error) {
	body, _ := json.Marshal(map[string]any{"command": command})
	req, err := http.NewRequestWithContext(ctx, "POST", execdURL+"/command", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sandboxd.ExecdTokenHeader, token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, 0, fmt.Errorf("status %d: %s", res.StatusCode, b)
	}
	var lines []string
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '{' {
			var ev streamEvent
			if jerr := json.Unmarshal(t, &ev); jerr != nil {
				return nil, 0, jerr
			}
			switch ev.Type {
			case "stdout":
				lines = append(lines, ev.Text)
			case "execution_complete":
				return lines, 0, nil
			case "error":
				var code int
				if _, err := fmt.Sscan(ev.Error.Evalue, &code); err != nil {
					return lines, 0, fmt.Errorf("error event %q", ev.Error.Evalue)
				}
				return lines, code, nil
			}
		}
		if err != nil {
			return lines, 0, fmt.Errorf("stream ended without a terminal event: %v", err)
		}
	}
}
