package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// The list page's filters beyond the read model's own (status, name, run):
// a time range and sessions with failed execs.
const (
	// listScanMax bounds the sessions the failed-exec filter reads for one
	// page: each is read from the ledger (the read model keeps no exit
	// codes). Past it the page ends, and the next one goes on from there.
	listScanMax = 1000
	// listScanPage is how many sessions it lists from the store at a time.
	listScanPage = 200
	// rangeLayout is an <input type="datetime-local">'s value, read as UTC.
	rangeLayout = "2006-01-02T15:04:05"
)

type listPage struct {
	Status, Name, Run string
	// Failed keeps only the sessions with a failed exec (a non-zero exit
	// code, an error, or interrupted), FailedExecs counting them per row.
	Failed      bool
	FailedExecs map[string]int // by sandbox id + "/" + name
	// From and To bound StartedAt (Unix ms, From inclusive, To exclusive; 0
	// for none); FromInput and ToInput are the same as the form shows them.
	From, To           int64
	FromInput, ToInput string
	// Scanned is how many sessions the failed-exec filter read.
	Scanned int
	// Event filters the live tail (one canonical event name or an extension
	// event, "" for all); Events are the known names it offers.
	Event      string
	Events     []events.Event
	Sandboxes  []adapters.SandboxDetails
	Counts     statusCounts
	Limit      int
	NextBefore int64
}

// Filtered reports whether any filter of the list is set.
func (p listPage) Filtered() bool {
	return p.Status != "" || p.Name != "" || p.Run != "" || p.Failed || p.From != 0 || p.To != 0
}

// Query is the list's query string with the filters in effect, kv (pairs of
// a parameter and its value, "" to drop it) changed: the links of the
// filters keep every other filter.
func (p listPage) Query(kv ...string) string {
	v := url.Values{}
	for _, f := range [][2]string{{"status", p.Status}, {"name", p.Name}, {"run", p.Run}, {"failed", boolParam(p.Failed)},
		{"from", p.FromInput}, {"to", p.ToInput}, {"event", p.Event}} {
		if f[1] != "" {
			v.Set(f[0], f[1])
		}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			v.Del(kv[i])
		} else {
			v.Set(kv[i], kv[i+1])
		}
	}
	return "?" + v.Encode()
}

// FailedOf is the number of failed execs of d (failed filter only).
func (p listPage) FailedOf(d adapters.SandboxDetails) int {
	return p.FailedExecs[d.SandboxID+"/"+d.Name]
}

func boolParam(b bool) string {
	if b {
		return "1"
	}
	return ""
}

// parseRange reads a time bound: an <input type="datetime-local"> value
// (minutes or seconds, UTC), or Unix milliseconds. It returns the bound in
// ms and how the form shows it.
func parseRange(v string) (int64, string, bool) {
	if v == "" {
		return 0, "", true
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
		return ms, time.UnixMilli(ms).UTC().Format(rangeLayout), true
	}
	for _, layout := range []string{rangeLayout, "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t.UnixMilli(), t.Format(rangeLayout), true
		}
	}
	return 0, "", false
}

func (s *Server) dashboardList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := adapters.SandboxStatus(q.Get("status"))
	if st != adapters.StatusRunning && st != adapters.StatusCompleted {
		st = ""
	}
	before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
	p := listPage{Status: string(st), Name: q.Get("name"), Run: q.Get("run"), Limit: listLimit, Events: events.All}
	if ev := events.Event(q.Get("event")).Canonical(); ev.Valid() { // known or an extension event
		p.Event = string(ev)
	}
	p.Failed = q.Get("failed") == "1" || q.Get("failed") == "true"
	var ok bool
	for _, b := range []struct {
		name      string
		ms        *int64
		formValue *string
	}{{"from", &p.From, &p.FromInput}, {"to", &p.To, &p.ToInput}} {
		if *b.ms, *b.formValue, ok = parseRange(q.Get(b.name)); !ok {
			s.renderError(w, r, http.StatusBadRequest, "Bad time range",
				b.name+" must be a UTC date and time (2006-01-02T15:04[:05]) or Unix milliseconds, got "+strconv.Quote(q.Get(b.name)))
			return
		}
	}
	o := adapters.ListOptions{Status: st, RunID: p.Run, Before: max(before, 0)}
	if p.To > 0 && (o.Before == 0 || p.To < o.Before) {
		o.Before = p.To
	}
	var err error
	if p.Failed {
		err = s.listFailed(r.Context(), &p, o)
	} else {
		err = s.listRange(r.Context(), &p, o)
	}
	if err != nil {
		s.renderStoreError(w, r, err)
		return
	}
	p.Counts = countStatus(p.Sandboxes)
	s.render(w, r, http.StatusOK, "list.html", page{Title: "sandboxes", Nav: "sandboxes", Data: p})
}

// listSessions lists the sessions o selects, of p's name if it has one.
func (s *Server) listSessions(ctx context.Context, p *listPage, o adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	if p.Name != "" {
		return s.cfg.Store.ListSandboxDetails(ctx, p.Name, o)
	}
	return s.cfg.Store.ListAllSandboxDetails(ctx, o)
}

// listRange fills p with a page of the sessions o selects, started at or
// after p.From.
func (s *Server) listRange(ctx context.Context, p *listPage, o adapters.ListOptions) error {
	o.Limit = listLimit + 1
	ds, err := s.listSessions(ctx, p, o)
	if err != nil {
		return err
	}
	for i, d := range ds { // newest first: the rest started earlier still
		if d.StartedAt < p.From {
			ds = ds[:i]
			break
		}
	}
	if len(ds) > listLimit {
		ds = ds[:listLimit]
		p.NextBefore = ds[len(ds)-1].StartedAt
	}
	p.Sandboxes = ds
	return nil
}

// listFailed fills p with a page of the sessions o selects, started at or
// after p.From, that have a failed exec: it reads the sessions from the
// ledger, newest first, until it has a page of them or has read
// listScanMax; the next page goes on from the last one read.
func (s *Server) listFailed(ctx context.Context, p *listPage, o adapters.ListOptions) error {
	p.FailedExecs = map[string]int{}
	o.Limit = listScanPage
	for {
		ds, err := s.listSessions(ctx, p, o)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.StartedAt < p.From {
				return nil
			}
			if p.Scanned == listScanMax || len(p.Sandboxes) == listLimit {
				p.NextBefore = o.Before // the last one read
				return nil
			}
			es, err := s.cfg.Store.ReadAll(ctx, d.Name, d.SandboxID)
			if err != nil {
				return err
			}
			p.Scanned++
			o.Before = d.StartedAt
			if n := failedExecs(es); n > 0 {
				p.Sandboxes = append(p.Sandboxes, d)
				p.FailedExecs[d.SandboxID+"/"+d.Name] = n
			}
		}
		if len(ds) < listScanPage {
			return nil
		}
	}
}

// failedExecs counts the failed execs of a session (execView.Failed).
func failedExecs(es []events.Entry) int {
	n := 0
	for _, x := range buildSession(es).Execs {
		if x.Failed() {
			n++
		}
	}
	return n
}
