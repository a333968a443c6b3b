package api

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// The dashboard's view models: what the pages show, built from a session's
// entries. They are pure functions of the entries so the pages and the
// output route agree on every byte.

// Output shown inline before the rest is paged or collapsed.
const (
	// execPageBytes is how much of each stream the exec page renders; the
	// rest is fetched a page at a time from the output route.
	execPageBytes = 64 << 10
	// cardBytes is how much output a sandbox page's exec card shows.
	cardBytes = 4 << 10
)

// execKey names one exec of a session: its step index and parallel branch.
type execKey struct {
	Step   int
	Branch int // -1 when the entry has none
}

func keyOf(e events.Entry) execKey {
	k := execKey{Step: e.StepIndex, Branch: -1}
	if e.Branch != nil {
		k.Branch = *e.Branch
	}
	return k
}

// chunk is one recorded output chunk.
type chunk struct {
	Seq    uint64
	Stream events.Stream
	Data   []byte
}

// execView is one exec as the pages show it.
type execView struct {
	Key         execKey
	Seq         uint64 // the exec.started entry's ledger sequence (0 if none was recorded)
	Kind        string
	Text        string // the command or the code
	StartedAt   int64
	CompletedAt int64
	Done        bool
	// Interrupted is set when the session closed before the exec completed:
	// its attempt died (a takeover or a failed job ended the sandbox), so
	// no exec.completed will ever come.
	Interrupted bool
	ExitCode    int
	Error       string
	Chunks      []chunk
	// Actor is who started the exec (its exec.started's actor), "" when
	// unknown.
	Actor string
}

// Running reports whether the exec may still complete: it has no
// exec.completed and its session is open.
func (x *execView) Running() bool { return !x.Done && !x.Interrupted }

// Failed reports whether the exec failed: it completed with a non-zero exit
// code or an error, or it was interrupted.
func (x *execView) Failed() bool {
	return x.Interrupted || x.Done && (x.ExitCode != 0 || x.Error != "")
}

// Duration is the time from exec.started to exec.completed, "" while running.
func (x *execView) Duration() string {
	if !x.Done || x.StartedAt == 0 {
		return ""
	}
	return formatDuration(time.Duration(x.CompletedAt-x.StartedAt) * time.Millisecond)
}

// DurationMs is the duration in milliseconds, -1 while running.
func (x *execView) DurationMs() int64 {
	if !x.Done || x.StartedAt == 0 {
		return -1
	}
	return x.CompletedAt - x.StartedAt
}

// Stream returns the exact bytes of one stream, chunks joined in order.
func (x *execView) Stream(s events.Stream) []byte {
	var out []byte
	for _, c := range x.Chunks {
		if c.Stream == s {
			out = append(out, c.Data...)
		}
	}
	return out
}

// Bytes is the total output size of both streams.
func (x *execView) Bytes() int {
	n := 0
	for _, c := range x.Chunks {
		n += len(c.Data)
	}
	return n
}

// Step is the exec's label in URLs: its step index, "-branch" appended for a
// parallel branch.
func (x *execView) Step() string { return x.Key.String() }

func (k execKey) String() string {
	if k.Branch < 0 {
		return strconv.Itoa(k.Step)
	}
	return strconv.Itoa(k.Step) + "-" + strconv.Itoa(k.Branch)
}

// parseExecKey parses execKey.String's form.
func parseExecKey(s string) (execKey, bool) {
	step, branch, hasBranch := s, "", false
	for i := 0; i < len(s); i++ {
		if s[i] == '-' && i > 0 {
			step, branch, hasBranch = s[:i], s[i+1:], true
			break
		}
	}
	n, err := strconv.Atoi(step)
	if err != nil || n < 0 {
		return execKey{}, false
	}
	k := execKey{Step: n, Branch: -1}
	if hasBranch {
		b, err := strconv.Atoi(branch)
		if err != nil || b < 0 {
			return execKey{}, false
		}
		k.Branch = b
	}
	return k, true
}

// marker is a sandbox-level event on the timeline: created, checkpoint,
// pause, resume, closed, egress and credential changes.
type marker struct {
	Seq   uint64
	Ts    int64
	Kind  string // the canonical event name
	Label string
}

// sessionView is a session's entries grouped for the sandbox page.
type sessionView struct {
	Created *events.SandboxCreatedPayload
	Closed  *events.SandboxClosedPayload
	Execs   []*execView
	Markers []marker
	// Items is the timeline: each exec at its first entry, each marker, in
	// ledger order.
	Items   []timelineItem
	LastSeq uint64
}

// timelineItem is an exec or a marker.
type timelineItem struct {
	Exec   *execView
	Marker *marker
}

// buildSession groups es (one session, in ledger order).
func buildSession(es []events.Entry) sessionView {
	var v sessionView
	byKey := map[execKey]*execView{}
	get := func(e events.Entry) *execView {
		k := keyOf(e)
		x := byKey[k]
		if x == nil {
			x = &execView{Key: k}
			byKey[k] = x
			v.Execs = append(v.Execs, x)
			v.Items = append(v.Items, timelineItem{Exec: x})
		}
		return x
	}
	for _, e := range es {
		v.LastSeq = max(v.LastSeq, e.Seq)
		switch ev := e.Event.Canonical(); ev {
		case events.ExecStarted:
			var p events.ExecStartedPayload
			_ = e.Decode(&p)
			x := get(e)
			x.Seq, x.StartedAt, x.Kind, x.Text, x.Actor = e.Seq, e.Ts, string(p.Kind), p.Text(), e.Actor
			if x.Kind == "" {
				x.Kind = string(events.KindCommand)
			}
			x.Error = e.Error
		case events.ExecOutput:
			st, ok := events.OutputStream(e.Payload)
			if !ok {
				continue // a TypeScript exec_event that is not output
			}
			var p events.ExecOutputPayload
			_ = e.Decode(&p)
			x := get(e)
			x.Chunks = append(x.Chunks, chunk{Seq: e.Seq, Stream: st, Data: p.Bytes()})
		case events.ExecCompleted:
			var p events.ExecCompletedPayload
			_ = e.Decode(&p)
			x := get(e)
			x.Done, x.CompletedAt, x.ExitCode = true, e.Ts, p.ExitCode
			if e.Error != "" {
				x.Error = e.Error
			}
		default:
			v.addMarker(e, ev)
		}
	}
	if v.Closed != nil {
		// Nothing runs in a closed sandbox: an exec without its
		// exec.completed will not get one.
		for _, x := range v.Execs {
			x.Interrupted = !x.Done
		}
	}
	return v
}

func (v *sessionView) addMarker(e events.Entry, ev events.Event) {
	m := marker{Seq: e.Seq, Ts: e.Ts, Kind: string(ev)}
	switch ev {
	case events.SandboxCreated:
		var p events.SandboxCreatedPayload
		if e.Decode(&p) == nil {
			v.Created = &p
		}
		m.Label = "created"
		if r := relationOf(v.Created); r.Kind != "" {
			m.Label += " (" + r.Kind + " " + r.From + ")"
		}
	case events.CheckpointCreated:
		var p events.CheckpointCreatedPayload
		_ = e.Decode(&p)
		m.Label = "checkpoint " + p.SnapshotID
		if p.Name != "" {
			m.Label += " “" + p.Name + "”"
		}
	case events.SandboxPaused:
		m.Label = "paused"
	case events.SandboxResumed:
		m.Label = "resumed"
	case events.SandboxClosed:
		var p events.SandboxClosedPayload
		_ = e.Decode(&p)
		v.Closed = &p
		m.Label = "closed"
		if p.Reason != "" {
			m.Label += ": " + p.Reason
		}
		if p.By != "" {
			m.Label += " by " + p.By
		}
	default: // egress, credential and extension events: the name and the payload as JSON
		m.Label = string(e.Event)
		if len(e.Payload) > 0 {
			m.Label += " " + truncLabel(string(e.Payload))
		}
	}
	if e.Error != "" && ev != events.SandboxCreated {
		m.Label += " (error: " + e.Error + ")"
	}
	v.Markers = append(v.Markers, m)
	mm := m
	v.Items = append(v.Items, timelineItem{Marker: &mm})
}

// truncLabel cuts s to 200 bytes, as summary does.
func truncLabel(s string) string {
	if len(s) > 200 {
		return s[:197] + "..."
	}
	return s
}

// find returns the exec k, or nil.
func (v *sessionView) find(k execKey) *execView {
	for _, x := range v.Execs {
		if x.Key == k {
			return x
		}
	}
	return nil
}

// relation is how a sandbox came from another: Kind is "resumed from",
// "forked from", "restored from", "spawned from environment" or "created
// from snapshot"; From the sandbox id, snapshot id or environment name.
type relation struct {
	Kind string
	From string
}

func relationOf(p *events.SandboxCreatedPayload) relation {
	switch {
	case p == nil:
		return relation{}
	case p.ResumedFrom != "":
		return relation{"resumed from", p.ResumedFrom}
	case p.ForkedFrom != "":
		return relation{"forked from", p.ForkedFrom}
	case p.FromSnapshot != "":
		return relation{"restored from", p.FromSnapshot}
	case p.FromEnvironment != "":
		return relation{"spawned from environment", p.FromEnvironment}
	case p.SnapshotID != "":
		return relation{"created from snapshot", p.SnapshotID}
	}
	return relation{}
}

// textPage is a prefix of a stream cut at a UTF-8 boundary, at most limit
// bytes (a rune longer than the limit is taken whole).
type textPage struct {
	Text  string
	Shown int // bytes in Text
	Total int
	// Exact is false when the bytes are not valid UTF-8 or hold NUL: Text
	// then shows U+FFFD for those and the raw route has the exact bytes.
	Exact bool
}

// More reports whether bytes follow the page.
func (p textPage) More() bool { return p.Shown < p.Total }

// Rest is the number of bytes after the page.
func (p textPage) Rest() int { return p.Total - p.Shown }

func pageOf(b []byte, limit int) textPage {
	n := min(len(b), limit)
	for n > 0 && n < len(b) && !utf8.RuneStart(b[n]) {
		n--
	}
	if n == 0 && len(b) > 0 {
		_, size := utf8.DecodeRune(b)
		n = size
	}
	p := textPage{Text: string(b[:n]), Shown: n, Total: len(b), Exact: utf8.Valid(b) && !bytes.ContainsRune(b, 0)}
	if !p.Exact {
		// As the recorded text has it (events.NewOutput): U+FFFD for bytes
		// that are not UTF-8 and for NUL, which HTML cannot carry.
		p.Text = strings.ReplaceAll(strings.ToValidUTF8(p.Text, "\uFFFD"), "\x00", "\uFFFD")
	}
	return p
}

// cardChunk is a piece of an exec card's interleaved output.
type cardChunk struct {
	Stream string
	Text   string
}

// card is the output an exec card shows.
type card struct {
	Chunks []cardChunk
	Rest   int // bytes left out
}

// cardOutput returns the first cardBytes of x's output, both streams in
// recorded order, and how many bytes it leaves out.
func cardOutput(x *execView) card {
	var out []cardChunk
	left, rest := cardBytes, 0
	for _, c := range x.Chunks {
		if left <= 0 {
			rest += len(c.Data)
			continue
		}
		p := pageOf(c.Data, left)
		out = append(out, cardChunk{Stream: string(c.Stream), Text: p.Text})
		left -= p.Shown
		rest += p.Rest()
	}
	return card{Chunks: out, Rest: rest}
}

func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "—"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// statusCounts are the list page's header figures.
type statusCounts struct {
	Shown, Running, Completed, Execs int
}

func countStatus(ds []adapters.SandboxDetails) statusCounts {
	c := statusCounts{Shown: len(ds)}
	for _, d := range ds {
		if d.Status == adapters.StatusRunning {
			c.Running++
		} else {
			c.Completed++
		}
		c.Execs += d.ExecCount
	}
	return c
}
