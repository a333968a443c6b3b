package jobs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of a spec.
const (
	MaxSpecBytes   = 4 << 20 // a whole spec document
	MaxSteps       = 1000
	MaxFileBytes   = 1 << 20 // one writeFile's decoded content
	MaxCommandSize = 64 << 10
	maxNameLen     = 128
)

// DrainTagPrefix starts the tags of the checkpoints a worker takes when it is
// drained mid-job; spec tags may not use it.
const DrainTagPrefix = "alineo-drain-"

// Spec is one job: a sandbox and the steps to run in it, in order.
type Spec struct {
	// Name is the sandbox's session name in the ledger. Required.
	Name string `json:"name"`
	// Image is the sandbox image, e.g. "host". Required.
	Image string `json:"image"`
	// Resources are the sandbox's limits; empty values take the SDK's defaults.
	Resources Resources `json:"resources,omitzero"`
	// Env is set in the sandbox for every step.
	Env map[string]string `json:"env,omitempty"`
	// Steps run in order; a failing step fails the job. At least one.
	Steps []Step `json:"steps"`
}

// Resources are Kubernetes-style quantities: cpu "500m" or "2", memory "512Mi".
type Resources struct {
	CPU    string `json:"cpu,omitempty"`
	Memory string `json:"memory,omitempty"`
	GPU    string `json:"gpu,omitempty"`
}

// Step is one step: exactly one of its fields is set.
type Step struct {
	Exec       *ExecStep       `json:"exec,omitempty"`
	ExecCode   *CodeStep       `json:"execCode,omitempty"`
	WriteFile  *WriteFileStep  `json:"writeFile,omitempty"`
	Checkpoint *CheckpointStep `json:"checkpoint,omitempty"`
}

// StepKind names a step's kind, as the spec's key does.
type StepKind string

// Step kinds.
const (
	KindExec       StepKind = "exec"
	KindExecCode   StepKind = "execCode"
	KindWriteFile  StepKind = "writeFile"
	KindCheckpoint StepKind = "checkpoint"
)

// Kind returns the step's kind, "" when no field (or more than one) is set.
func (s Step) Kind() StepKind {
	var k StepKind
	n := 0
	if s.Exec != nil {
		k, n = KindExec, n+1
	}
	if s.ExecCode != nil {
		k, n = KindExecCode, n+1
	}
	if s.WriteFile != nil {
		k, n = KindWriteFile, n+1
	}
	if s.Checkpoint != nil {
		k, n = KindCheckpoint, n+1
	}
	if n != 1 {
		return ""
	}
	return k
}

// Describe returns a one-line description of the step for progress output.
func (s Step) Describe() string {
	switch s.Kind() {
	case KindExec:
		return "exec " + oneLine(s.Exec.Command)
	case KindExecCode:
		lang := s.ExecCode.Language
		if lang == "" {
			lang = "shell"
		}
		return "execCode (" + lang + ") " + oneLine(s.ExecCode.Code)
	case KindWriteFile:
		return "writeFile " + s.WriteFile.Path
	case KindCheckpoint:
		return "checkpoint " + s.Checkpoint.Tag
	}
	return "invalid step"
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// ExecStep runs a shell command (Sandbox.Exec).
type ExecStep struct {
	Command string `json:"command"`
	// Strict (default true) fails the job when the command exits non-zero.
	Strict *bool `json:"strict,omitempty"`
	// Timeout kills the command after this long ("30s", "5m"); 0 for none.
	Timeout Duration          `json:"timeout,omitzero"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
}

// CodeStep runs code through the sandbox's interpreter (Sandbox.ExecCode).
type CodeStep struct {
	Code string `json:"code"`
	// Language selects the interpreter ("python", "bash"); empty runs the code
	// as a shell script.
	Language string `json:"language,omitempty"`
	// Strict (default true) fails the job on a non-zero exit or an exception.
	Strict *bool `json:"strict,omitempty"`
}

// WriteFileStep writes a file into the sandbox. File writes are not recorded
// in the ledger.
type WriteFileStep struct {
	Path    string `json:"path"`
	Content string `json:"content"`
	// Base64 says Content is base64 (standard encoding) of the file's bytes.
	Base64 bool `json:"base64,omitempty"`
}

// Data returns the file's bytes.
func (w WriteFileStep) Data() ([]byte, error) {
	if !w.Base64 {
		return []byte(w.Content), nil
	}
	return base64.StdEncoding.DecodeString(w.Content)
}

// CheckpointStep snapshots the sandbox under a tag, unique within the spec.
type CheckpointStep struct {
	Tag string `json:"tag"`
}

// Duration is a time.Duration written in JSON as a Go duration string ("90s",
// "5m") or a number of seconds.
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case string:
		p, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("want a duration like \"30s\", got %q", v)
		}
		*d = Duration(p)
	case float64:
		*d = Duration(v * float64(time.Second))
	default:
		return fmt.Errorf("want a duration string or seconds, got %s", b)
	}
	return nil
}

// Parse decodes and validates a spec. Unknown fields, trailing data, wrong
// types and invalid values all fail with a *SpecError naming the field.
func Parse(data []byte) (Spec, error) {
	var s Spec
	if len(data) > MaxSpecBytes {
		return s, &SpecError{Reason: fmt.Sprintf("larger than %d bytes", MaxSpecBytes)}
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return s, syntaxError(data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return s, &SpecError{Reason: "trailing data after the JSON document"}
	}
	if err := checkDuplicateKeys(data); err != nil {
		return s, err
	}
	if err := checkFields(raw, reflect.TypeFor[Spec](), ""); err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return Spec{}, typeError(err)
	}
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// checkDuplicateKeys reports the first object key that appears twice in
// one object of data (valid JSON): encoding/json would keep the last value
// silently.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dupValue(dec, "")
}

// dupValue reads one JSON value from dec, checking its objects' keys.
func dupValue(dec *json.Decoder, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return &SpecError{Reason: "not valid JSON: " + jsonReason(err)}
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return &SpecError{Reason: "not valid JSON: " + jsonReason(err)}
			}
			k, _ := kt.(string)
			if seen[k] {
				return &SpecError{Path: join(path, k), Reason: "duplicate key " + strconv.Quote(k)}
			}
			seen[k] = true
			if err := dupValue(dec, join(path, k)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := dupValue(dec, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
	}
	if err != nil {
		return &SpecError{Reason: "not valid JSON: " + jsonReason(err)}
	}
	return nil
}

// syntaxError is the *SpecError of data that is not JSON, err being the
// decoder's: its reason, and the line and column of the offending character
// (of the end, for a document cut short).
func syntaxError(data []byte, err error) *SpecError {
	se := &SpecError{Reason: "not valid JSON: " + jsonReason(err)}
	var sx *json.SyntaxError
	switch {
	case errors.As(err, &sx):
		// Offset counts the bytes read up to and including the offending one.
		se.Line, se.Column = position(data, max(int(sx.Offset)-1, 0))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		se.Line, se.Column = position(data, len(data))
		se.Reason = "not valid JSON: the document ends early"
	}
	return se
}

// position returns the 1-based line and column (in characters) of byte
// offset off of data.
func position(data []byte, off int) (line, col int) {
	off = min(off, len(data))
	before := data[:off]
	line = 1 + bytes.Count(before, []byte("\n"))
	if i := bytes.LastIndexByte(before, '\n'); i >= 0 {
		before = before[i+1:]
	}
	return line, 1 + utf8.RuneCount(before)
}

func jsonReason(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

// typeError turns a json decoding error into a *SpecError with its field path.
func typeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &SpecError{Path: te.Field, Reason: fmt.Sprintf("want %s, got JSON %s", te.Type, te.Value)}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &SpecError{Reason: "not valid JSON: " + jsonReason(err)} // Parse decoded it already: not reached
	}
	// A field's own UnmarshalJSON failed (Duration); the message names the value.
	return &SpecError{Reason: jsonReason(err)}
}

// checkFields walks the decoded document beside the Go type and reports the
// first object key that the type does not have.
func checkFields(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[Duration]() {
			return nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			if v == nil {
				return nil
			}
			return &SpecError{Path: path, Reason: "want an object"}
		}
		fields := map[string]reflect.Type{}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ft, ok := fields[k]
			if !ok {
				return &SpecError{Path: join(path, k), Reason: "unknown field " + strconv.Quote(k) + knownList(fields)}
			}
			if err := checkFields(obj[k], ft, join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return nil // a type error, reported by json.Unmarshal
		}
		for i, e := range arr {
			if err := checkFields(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	}
	return nil
}

func knownList(fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	slices.Sort(names)
	return " (known: " + strings.Join(names, ", ") + ")"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var (
	quantityRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$`)
	tagRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	envRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks a spec; the first problem is returned as a *SpecError.
func (s Spec) Validate() error {
	switch {
	case strings.TrimSpace(s.Name) == "":
		return &SpecError{Path: "name", Reason: "is required"}
	case len(s.Name) > maxNameLen:
		return &SpecError{Path: "name", Reason: fmt.Sprintf("longer than %d bytes", maxNameLen)}
	case !printable(s.Name):
		return &SpecError{Path: "name", Reason: "contains control characters or invalid UTF-8"}
	case strings.TrimSpace(s.Image) == "":
		return &SpecError{Path: "image", Reason: "is required"}
	case !printable(s.Image):
		return &SpecError{Path: "image", Reason: "contains control characters or invalid UTF-8"}
	}
	for _, q := range []struct{ path, v string }{
		{"resources.cpu", s.Resources.CPU}, {"resources.memory", s.Resources.Memory}, {"resources.gpu", s.Resources.GPU},
	} {
		if q.v != "" && !quantityRE.MatchString(q.v) {
			return &SpecError{Path: q.path, Reason: fmt.Sprintf("%q is not a quantity like \"500m\", \"2\" or \"512Mi\"", q.v)}
		}
	}
	if err := validEnv("env", s.Env); err != nil {
		return err
	}
	switch {
	case len(s.Steps) == 0:
		return &SpecError{Path: "steps", Reason: "at least one step is required"}
	case len(s.Steps) > MaxSteps:
		return &SpecError{Path: "steps", Reason: fmt.Sprintf("%d steps, at most %d", len(s.Steps), MaxSteps)}
	}
	tags := map[string]int{}
	for i, st := range s.Steps {
		p := fmt.Sprintf("steps[%d]", i)
		if err := st.validate(p); err != nil {
			return err
		}
		if st.Checkpoint != nil {
			if j, dup := tags[st.Checkpoint.Tag]; dup {
				return &SpecError{Path: p + ".checkpoint.tag", Reason: fmt.Sprintf("%q is already the tag of steps[%d]", st.Checkpoint.Tag, j)}
			}
			tags[st.Checkpoint.Tag] = i
		}
	}
	return nil
}

func (st Step) validate(p string) error {
	n := 0
	for _, set := range []bool{st.Exec != nil, st.ExecCode != nil, st.WriteFile != nil, st.Checkpoint != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return &SpecError{Path: p, Reason: fmt.Sprintf("want exactly one of exec, execCode, writeFile, checkpoint; got %d", n)}
	}
	switch {
	case st.Exec != nil:
		e := st.Exec
		switch {
		case strings.TrimSpace(e.Command) == "":
			return &SpecError{Path: p + ".exec.command", Reason: "is required"}
		case len(e.Command) > MaxCommandSize:
			return &SpecError{Path: p + ".exec.command", Reason: fmt.Sprintf("longer than %d bytes", MaxCommandSize)}
		case strings.ContainsRune(e.Command, 0):
			return &SpecError{Path: p + ".exec.command", Reason: "contains a NUL byte"}
		case e.Timeout < 0:
			return &SpecError{Path: p + ".exec.timeout", Reason: "is negative"}
		case e.Timeout > 0 && time.Duration(e.Timeout) < time.Second:
			return &SpecError{Path: p + ".exec.timeout", Reason: "is shorter than 1s"}
		}
		return validEnv(p+".exec.env", e.Env)
	case st.ExecCode != nil:
		c := st.ExecCode
		switch {
		case strings.TrimSpace(c.Code) == "":
			return &SpecError{Path: p + ".execCode.code", Reason: "is required"}
		case len(c.Code) > MaxCommandSize:
			return &SpecError{Path: p + ".execCode.code", Reason: fmt.Sprintf("longer than %d bytes", MaxCommandSize)}
		case strings.ContainsRune(c.Code, 0):
			return &SpecError{Path: p + ".execCode.code", Reason: "contains a NUL byte"}
		case c.Language != "" && !envRE.MatchString(c.Language):
			return &SpecError{Path: p + ".execCode.language", Reason: fmt.Sprintf("%q is not a language name", c.Language)}
		}
	case st.WriteFile != nil:
		w := st.WriteFile
		switch {
		case !strings.HasPrefix(w.Path, "/"):
			return &SpecError{Path: p + ".writeFile.path", Reason: fmt.Sprintf("%q is not an absolute path", w.Path)}
		case strings.ContainsRune(w.Path, 0) || strings.HasSuffix(w.Path, "/"):
			return &SpecError{Path: p + ".writeFile.path", Reason: fmt.Sprintf("%q is not a file path", w.Path)}
		}
		data, err := w.Data()
		if err != nil {
			return &SpecError{Path: p + ".writeFile.content", Reason: "is not valid base64: " + err.Error()}
		}
		if len(data) > MaxFileBytes {
			return &SpecError{Path: p + ".writeFile.content", Reason: fmt.Sprintf("%d bytes, at most %d", len(data), MaxFileBytes)}
		}
	case st.Checkpoint != nil:
		tag := st.Checkpoint.Tag
		switch {
		case tag == "":
			return &SpecError{Path: p + ".checkpoint.tag", Reason: "is required"}
		case !tagRE.MatchString(tag):
			return &SpecError{Path: p + ".checkpoint.tag", Reason: fmt.Sprintf("%q: use letters, digits, '.', '_' and '-' (at most 128)", tag)}
		case strings.HasPrefix(tag, DrainTagPrefix):
			return &SpecError{Path: p + ".checkpoint.tag", Reason: fmt.Sprintf("the prefix %q is reserved", DrainTagPrefix)}
		}
	}
	return nil
}

func validEnv(path string, env map[string]string) error {
	for k, v := range env {
		if !envRE.MatchString(k) {
			return &SpecError{Path: join(path, k), Reason: fmt.Sprintf("%q is not a variable name", k)}
		}
		if strings.ContainsRune(v, 0) {
			return &SpecError{Path: join(path, k), Reason: "value contains a NUL byte"}
		}
	}
	return nil
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
