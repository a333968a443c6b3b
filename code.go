package alineo

import (
	"encoding/json"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// Exception is an exception raised by code that execd's interpreter ran
// (CodeContext.Run, ExecCode with a Language): the interpreter's report of
// it, execd's error event. An exception is exit code 1 (but for Python's
// SystemExit, whose integer value is the exit code), and its traceback is
// also on the exec's stderr.
type Exception struct {
	Name      string   // the exception's class, e.g. "ValueError" (execd's ename)
	Value     string   // its message, e.g. "boom" (execd's evalue)
	Traceback []string // the interpreter's traceback, in the pieces execd sent
}

func (x *Exception) Error() string {
	if x.Value == "" {
		return x.Name
	}
	return x.Name + ": " + x.Value
}

// Output stream types of the exec.output rows that record code's error and
// result events, as the TypeScript SDK records every execd event (an
// exec_event whose type is the event's). They are not output: their readers
// get nothing of them but ExecResult.Exception and ExecResult.Value.
const (
	streamError  events.Stream = "error"
	streamResult events.Stream = "result"
)

// codeResult is what code reported besides its output and exit code: the
// value of its last expression and the exception it raised, as recorded
// (bound credential values redacted).
type codeResult struct {
	value     string
	exception *Exception
}

// codeEvent is the payload of an exec.output row of type "error" or
// "result": the execd event with the TypeScript SDK's field names.
type codeEvent struct {
	Seq     int                    `json:"seq"`
	Type    events.Stream          `json:"type"`
	Error   *opensandbox.ExecError `json:"error,omitempty"`
	Results map[string]any         `json:"results,omitempty"`
}

// codeResultOf returns what a run that ended with res reported, as it is
// recorded: its exception (an error event that is not a command's exit),
// the text of its last result event, and that event's results, every
// string in them redacted.
func (e *Exec) codeResultOf(res opensandbox.Result) (codeResult, map[string]any) {
	var cr codeResult
	if res.Error.Exception() {
		x := res.Error
		cr.exception = &Exception{Name: e.sb.redactText(x.EName), Value: e.sb.redactText(x.EValue)}
		for _, l := range x.Traceback {
			cr.exception.Traceback = append(cr.exception.Traceback, e.sb.redactText(l))
		}
	}
	var results map[string]any
	if res.Results != nil {
		results = make(map[string]any, len(res.Results))
		for k, v := range res.Results {
			if s, ok := v.(string); ok {
				v = e.sb.redactText(s)
			}
			results[k] = v
		}
		cr.value, _ = results["text"].(string)
	}
	return cr, results
}

// appendCompletion returns the rows that end e, whose stream ended with res:
// code's result and exception, as exec.output rows of type "result" and
// "error" (written with exec.completed, after every output row, so output
// chunks and the exec's rows still correspond one to one from its first),
// then exec.completed. They are appended to ems.
func (e *Exec) appendCompletion(ems []emission, res opensandbox.Result) []emission {
	if res.Results != nil || res.Error.Exception() {
		cr, results := e.codeResultOf(res)
		if results != nil {
			ems = append(ems, emission{ev: events.ExecOutput, step: e.step, payload: codeEvent{Seq: e.step, Type: streamResult, Results: results}})
		}
		if x := cr.exception; x != nil {
			ee := &opensandbox.ExecError{EName: x.Name, EValue: x.Value, Traceback: x.Traceback}
			ems = append(ems, emission{ev: events.ExecOutput, step: e.step, payload: codeEvent{Seq: e.step, Type: streamError, Error: ee}})
		}
	}
	return append(ems, emission{ev: events.ExecCompleted, step: e.step, payload: completedPayload(e.step, res.ExitCode)})
}

// settle ends e's result: it sets its exit code and code result, and
// returns its error, a *CommandError (with the exception) for a strict exec
// that exited non-zero, else nil. Called before e's output is finished.
func (e *Exec) settle(exitCode int, cr codeResult) error {
	e.exitCode, e.code = exitCode, cr
	if e.strict && exitCode != 0 {
		return &CommandError{ExitCode: exitCode, Command: e.text, SandboxID: e.sb.id, Exception: cr.exception}
	}
	return nil
}

// output returns the stream event ev as recorder.record takes it: stdout
// and stderr as they are, an exception's traceback as stderr (its text, as
// the interpreter prints it), and false for every other event.
func (r *recorder) output(ev opensandbox.Event) (opensandbox.Event, bool) {
	switch {
	case ev.Kind == opensandbox.EventStdout || ev.Kind == opensandbox.EventStderr:
		return ev, true
	case ev.Kind != opensandbox.EventError || !ev.Error.Exception() || len(ev.Error.Traceback) == 0:
		return ev, false
	}
	text := tracebackText(ev.Error.Traceback)
	if r.lines {
		text = strings.TrimSuffix(text, "\n") // each event is a line; the recorder ends it
	}
	return opensandbox.Event{Kind: opensandbox.EventStderr, Text: text}, true
}

// tracebackText joins a traceback's pieces, each ended by a newline: a
// Python driver sends pieces that end with one (traceback.format_exception),
// a Jupyter kernel and Node lines that do not.
func tracebackText(tb []string) string {
	var sb strings.Builder
	for _, l := range tb {
		sb.WriteString(l)
		if !strings.HasSuffix(l, "\n") {
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// recordedCode adds to cr what the exec.output row raw, of type typ,
// recorded if it is an "error" or "result" row (either SDK's): a result's
// text is the value, an error that is an exception the exception (a shell's
// exit is not). Rows of other types are ignored.
func recordedCode(raw json.RawMessage, typ events.Stream, cr *codeResult) error {
	if typ != streamError && typ != streamResult {
		return nil
	}
	var p codeEvent
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	switch {
	case typ == streamResult:
		if v, ok := p.Results["text"].(string); ok {
			cr.value = v
		}
	case p.Error.Exception():
		cr.exception = &Exception{Name: p.Error.EName, Value: p.Error.EValue, Traceback: p.Error.Traceback}
	}
	return nil
}
