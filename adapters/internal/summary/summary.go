package summary

import (
	"strings"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// Summarised reports whether ev changes a session's details, in either
// vocabulary (see events.Event.Canonical).
func Summarised(ev events.Event) bool {
	switch ev.Canonical() {
	case events.SandboxCreated, events.SandboxClosed, events.ExecCompleted:
		return true
	}
	return false
}

// Names are the stored names of the events that change a session's details,
// in both vocabularies.
var Names = func() []events.Event {
	var out []events.Event
	for _, ev := range []events.Event{events.SandboxCreated, events.SandboxClosed, events.ExecCompleted} {
		out = append(out, events.Names(ev)...)
	}
	return out
}()

// InList returns the SQL list "('a', 'b', ...)" of the names of evs in both
// vocabularies, for a condition "event IN ...". The names are constants of
// package events and hold no quote.
func InList(evs ...events.Event) string {
	var b strings.Builder
	b.WriteByte('(')
	first := true
	for _, ev := range evs {
		for _, n := range events.Names(ev) {
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString("'" + string(n) + "'")
		}
	}
	b.WriteByte(')')
	return b.String()
}

// Pending is the condition that selects the entries a store has not folded
// into its summary yet: the rows of the summarised events that another
// process appended (this module's stores write summarised = 1 or true with
// every row, and fold it in the same transaction). The stores' partial index
// alineo_events_unsummarised has exactly this condition, so a query with it
// reads only such rows: none, once the summary has caught up.
var Pending = `summarised IS NULL AND event IN ` + InList(events.SandboxCreated, events.SandboxClosed, events.ExecCompleted)

// RunID returns the runId of a sandbox.created payload, or the SandboxID when it has none.
func RunID(e events.Entry) string {
	var p struct {
		RunID string `json:"runId"`
	}
	if e.Decode(&p) != nil || p.RunID == "" {
		return e.SandboxID
	}
	return p.RunID
}

// Delta is what a set of entries changes in one session's details.
type Delta struct {
	Started   int64 // Ts of the earliest sandbox.created; 0 for none
	RunID     string
	Completed int64 // Ts of the latest sandbox.closed; 0 for none
	Execs     int   // number of exec.completed
}

// Row is a Delta in the form of the summary table's upsert parameters:
// Started, Completed and RunID are nil where the delta has no value, so that
// the upsert keeps what the row already holds.
type Row struct {
	Session   events.Session
	Status    adapters.SandboxStatus
	Started   any // int64 or nil
	Completed any // int64 or nil
	RunID     any // string or nil
	Execs     int
}

// Deltas collects the changes of a batch per session, in first-seen order.
// The zero value is ready to use; it is not safe for concurrent use.
type Deltas struct {
	order []events.Session
	m     map[events.Session]*Delta
}

// Add folds e into its session's delta; entries that change no details are ignored.
func (ds *Deltas) Add(e events.Entry) {
	if !Summarised(e.Event) {
		return
	}
	k := e.Session()
	d := ds.m[k]
	if d == nil {
		if ds.m == nil {
			ds.m = make(map[events.Session]*Delta)
		}
		d = &Delta{}
		ds.m[k] = d
		ds.order = append(ds.order, k)
	}
	switch e.Event.Canonical() {
	case events.SandboxCreated:
		if d.Started == 0 || e.Ts < d.Started {
			d.Started, d.RunID = e.Ts, RunID(e)
		}
	case events.SandboxClosed:
		d.Completed = max(d.Completed, e.Ts)
	case events.ExecCompleted:
		d.Execs++
	}
}

// Len returns the number of sessions touched.
func (ds *Deltas) Len() int { return len(ds.order) }

// Rows returns one upsert row per session touched, in first-seen order.
func (ds *Deltas) Rows() []Row {
	rows := make([]Row, 0, len(ds.order))
	for _, k := range ds.order {
		d := ds.m[k]
		r := Row{Session: k, Status: adapters.StatusRunning, Execs: d.Execs}
		if d.Started != 0 {
			r.Started, r.RunID = d.Started, d.RunID
		}
		if d.Completed != 0 {
			r.Completed, r.Status = d.Completed, adapters.StatusCompleted
		}
		rows = append(rows, r)
	}
	return rows
}
