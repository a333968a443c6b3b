package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// auditorFilters are the event filters the auditors use, in turn ("" is
// every event).
var auditorFilters = [][]events.Event{
	nil,
	{events.ExecStarted},
	{events.SandboxCreated, events.SandboxClosed},
	{events.ExecCompleted, events.CheckpointCreated},
	{events.ExecOutput},
}

// Seen is one event an auditor received.
type Seen struct {
	Seq   uint64
	Event events.Event
}

// AuditorLog is what one auditor saw.
type AuditorLog struct {
	Name       string
	Events     []events.Event // the filter; empty for all
	Seen       []Seen
	Reconnects int
}

// auditor tails /v1/events/stream with a filter and reconnects with
// Last-Event-ID whenever its stream ends (the server dropped it, the API
// restarted, the soak cut it on purpose).
type auditor struct {
	name   string
	api    string
	token  string // the API's bearer token; "" for none
	filter []events.Event

	mu         sync.Mutex
	seen       []Seen
	connected  bool
	reconnects int
	cut        context.CancelFunc
}

func (a *auditor) url(last uint64, first bool) string {
	q := url.Values{}
	if len(a.filter) > 0 {
		names := make([]string, len(a.filter))
		for i, e := range a.filter {
			names[i] = string(e)
		}
		q.Set("event", strings.Join(names, ","))
	}
	if !first && last == 0 {
		q.Set("from", "1") // connected before the first event: nothing to miss
	}
	return a.api + "/v1/events/stream?" + q.Encode()
}

func (a *auditor) last() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return 0
	}
	return a.seen[len(a.seen)-1].Seq
}

// run connects until ctx is done: the first connection live (the API's
// shared feed), every later one resuming after the last event seen.
func (a *auditor) run(ctx context.Context) {
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			a.mu.Lock()
			a.reconnects++
			a.mu.Unlock()
		}
		_ = a.stream(ctx, first)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (a *auditor) stream(ctx context.Context, first bool) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.cut = cancel
	a.mu.Unlock()
	last := a.last()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, a.url(last, first), nil)
	if err != nil {
		return err
	}
	if last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", a.name, resp.Status)
	}
	return a.read(bufio.NewReaderSize(resp.Body, 1<<16))
}

// read parses Server-Sent Events until the stream ends or fails.
func (a *auditor) read(r *bufio.Reader) error {
	var id, data, kind string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if kind == "error" {
				return fmt.Errorf("%s: server: %s", a.name, data)
			}
			if id != "" {
				if err := a.note(id, data); err != nil {
					return err
				}
			}
			id, data, kind = "", "", ""
		case line == ": connected":
			a.mu.Lock()
			a.connected = true
			a.mu.Unlock()
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		case strings.HasPrefix(line, "event: "):
			kind = line[7:]
		}
	}
}

func (a *auditor) note(id, data string) error {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return fmt.Errorf("%s: bad id %q", a.name, id)
	}
	var e struct {
		Event events.Event `json:"event"`
	}
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		return fmt.Errorf("%s: event %d: %w", a.name, seq, err)
	}
	a.mu.Lock()
	a.seen = append(a.seen, Seen{Seq: seq, Event: e.Event})
	a.mu.Unlock()
	return nil
}

// drop cuts the auditor's connection; it reconnects with Last-Event-ID.
func (a *auditor) drop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cut != nil {
		a.cut()
	}
}

func (a *auditor) isConnected() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connected
}

func (a *auditor) log() AuditorLog {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AuditorLog{Name: a.name, Events: a.filter, Seen: append([]Seen(nil), a.seen...), Reconnects: a.reconnects}
}
