package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// printer writes results as an aligned table, one JSON document or JSON
// lines. A list is buffered until flush in json mode (one array); a stream
// (stream set) is written one JSON object per line in both JSON modes.
type printer struct {
	w      io.Writer
	format string // table, json, jsonl
	colour bool
	stream bool
	tw     *tabwriter.Writer
	items  []any // json mode, not streaming
}

func newPrinter(w io.Writer, format string, colour bool) *printer {
	return &printer{w: w, format: format, colour: colour, tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

// ANSI colours.
const (
	reset  = "\x1b[0m"
	bold   = "\x1b[1m"
	dim    = "\x1b[2m"
	red    = "\x1b[31m"
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	cyan   = "\x1b[36m"
)

// paint wraps s in colour c on a terminal. Tabwriter counts the escape bytes
// as width, so a painted cell is always the last one of its row or is
// painted in every row alike.
func (p *printer) paint(c, s string) string {
	if !p.colour || c == "" {
		return s
	}
	return c + s + reset
}

// emit prints one item in a JSON mode; it reports whether it did.
func (p *printer) emit(v any) (bool, error) {
	switch {
	case p.format == "table":
		return false, nil
	case p.format == "json" && !p.stream:
		p.items = append(p.items, v)
		return true, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return true, err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return true, err
}

// one prints a single document (json: the object itself, not an array).
func (p *printer) one(v any) (bool, error) {
	if p.format == "table" {
		return false, nil
	}
	var b []byte
	var err error
	if p.format == "json" {
		b, err = json.MarshalIndent(v, "", "  ")
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		return true, err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return true, err
}

// flush writes what is buffered: the table, or the JSON array.
func (p *printer) flush() error {
	if p.format == "json" && !p.stream && p.items != nil {
		b, err := json.MarshalIndent(p.items, "", "  ")
		p.items = nil
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(p.w, "%s\n", b); err != nil {
			return err
		}
	}
	return p.tw.Flush()
}

// list marks a list that may be empty: json prints [] for it.
func (p *printer) list() {
	if p.items == nil {
		p.items = []any{}
	}
}

func (p *printer) sandboxes(ds []adapters.SandboxDetails) error {
	p.list()
	if p.format == "table" {
		fmt.Fprintln(p.tw, "NAME\tSANDBOX\tSTARTED\tCOMPLETED\tEXECS\tRUN\tSTATUS")
	}
	for _, d := range ds {
		if ok, err := p.emit(d); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.Name, d.SandboxID, when(d.StartedAt), when(d.CompletedAt),
			d.ExecCount, d.RunID, p.paint(statusColour(d.Status), string(d.Status)))
	}
	return nil
}

func statusColour(s adapters.SandboxStatus) string {
	if s == adapters.StatusRunning {
		return green
	}
	return dim
}

func (p *printer) details(d adapters.SandboxDetails) error {
	if ok, err := p.one(d); ok {
		return err
	}
	for _, kv := range [][2]string{
		{"name", d.Name}, {"sandbox", d.SandboxID}, {"status", p.paint(statusColour(d.Status), string(d.Status))},
		{"started", when(d.StartedAt)}, {"completed", when(d.CompletedAt)},
		{"execs", strconv.Itoa(d.ExecCount)}, {"run", d.RunID},
	} {
		fmt.Fprintf(p.tw, "%s:\t%s\n", kv[0], kv[1])
	}
	return nil
}

// eventsHeader prints the events table's header; session adds its column.
func (p *printer) eventsHeader(session bool) {
	if p.format != "table" {
		if !p.stream {
			p.list()
		}
		return
	}
	if session {
		fmt.Fprintf(p.w, "%-8s %-12s %-36s %4s  %-26s %s %s\n", "SEQ", "TIME", "SESSION", "STEP", "EVENT", actorCell("ACTOR"), "DETAIL")
	} else {
		fmt.Fprintf(p.w, "%-8s %-12s %4s  %-26s %s %s\n", "SEQ", "TIME", "STEP", "EVENT", actorCell("ACTOR"), "DETAIL")
	}
}

// event prints one entry: fixed-width columns, so a stream stays aligned
// line by line.
func (p *printer) event(e events.Entry, session bool) error {
	if ok, err := p.emit(e); ok {
		return err
	}
	step := "-"
	if e.StepIndex != events.SandboxLevel {
		step = strconv.Itoa(e.StepIndex)
	}
	detail, c := summary(e)
	ev := fmt.Sprintf("%-26s", e.Event)
	ts := time.UnixMilli(e.Ts).Format("15:04:05.000")
	var err error
	actor := e.Actor
	if actor == "" {
		actor = "-"
	}
	if session {
		_, err = fmt.Fprintf(p.w, "%-8d %-12s %-36s %4s  %s %s %s\n", e.Seq, ts, trunc(e.Name+"/"+e.SandboxID, 36), step, p.paint(c, ev), actorCell(actor), detail)
	} else {
		_, err = fmt.Fprintf(p.w, "%-8d %-12s %4s  %s %s %s\n", e.Seq, ts, step, p.paint(c, ev), actorCell(actor), detail)
	}
	return err
}

// actorWidth is the width of the events table's ACTOR column, in runes.
const actorWidth = 22

// actorCell is s cut or padded to actorWidth runes ("alice via executor-3").
func actorCell(s string) string {
	r := []rune(s)
	if len(r) > actorWidth {
		return string(r[:actorWidth-1]) + "…"
	}
	return s + strings.Repeat(" ", actorWidth-len(r))
}

// summary is an entry's one-line detail and the colour of its event name.
func summary(e events.Entry) (string, string) {
	switch e.Event.Canonical() { // either vocabulary
	case events.ExecStarted:
		var pl events.ExecStartedPayload
		if e.Decode(&pl) == nil {
			return "$ " + oneLine(pl.Text()), cyan
		}
	case events.ExecOutput:
		var pl events.ExecOutputPayload
		if _, output := events.OutputStream(e.Payload); output && e.Decode(&pl) == nil { // not a TypeScript exec_event of another type
			if pl.Type == events.Stderr {
				return "stderr " + oneLine(pl.Text), red
			}
			return "stdout " + oneLine(pl.Text), ""
		}
	case events.ExecCompleted:
		var pl events.ExecCompletedPayload
		if e.Decode(&pl) == nil {
			if pl.ExitCode != 0 {
				return "exit " + strconv.Itoa(pl.ExitCode), red
			}
			return "exit 0", green
		}
	}
	c := ""
	if strings.HasPrefix(string(e.Event), "sandbox.") {
		c = yellow
	}
	payload := strings.Join(strings.Fields(string(e.Payload)), " ")
	if e.Error != "" {
		if !e.Event.Known() && payload != "" { // an extension event: its payload too
			return trunc(payload, 80) + " error: " + oneLine(e.Error), red
		}
		return "error: " + oneLine(e.Error), red
	}
	return trunc(payload, 120), c
}

func (p *printer) jobs(sts []jobs.Status) error {
	p.list()
	if p.format == "table" {
		fmt.Fprintln(p.tw, "ID\tNAME\tATTEMPT\tSTEPS\tWORKER\tSANDBOX\tUPDATED\tSTATE")
	}
	for _, st := range sts {
		if ok, err := p.emit(st); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		state := p.paint(jobColour(st.State), string(st.State))
		if st.Error != "" {
			state += ": " + oneLine(st.Error)
		}
		fmt.Fprintf(p.tw, "%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\t%s\n", st.ID, st.Name, st.Attempt, st.Done, st.Steps,
			dash(st.Worker), dash(st.SandboxID), when(st.UpdatedAt), state)
	}
	return nil
}

func (p *printer) jobs1(st jobs.Status) error {
	if ok, err := p.one(st); ok {
		return err
	}
	return p.jobs([]jobs.Status{st})
}

func (p *printer) submitted(st jobs.Status) error {
	if ok, err := p.one(st); ok {
		return err
	}
	_, err := fmt.Fprintln(p.w, st.ID)
	return err
}

func jobColour(s jobs.State) string {
	switch s {
	case jobs.StateSucceeded:
		return green
	case jobs.StateFailed:
		return red
	case jobs.StateRunning:
		return yellow
	}
	return ""
}

func when(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	s = strings.ReplaceAll(s, "\n", `\n`)
	return trunc(s, 120)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
