package jobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestParse(t *testing.T) {
	s, err := Parse([]byte(`{"name":"n","image":"i","resources":{"cpu":"500m","memory":"1Gi"},"env":{"A":"1"},
		"steps":[{"exec":{"command":"true","strict":false,"timeout":"1m30s","cwd":"/tmp","env":{"B":"2"}}},
		{"execCode":{"code":"print(1)","language":"python"}},{"writeFile":{"path":"/a/b","content":"aGk=","base64":true}},
		{"checkpoint":{"tag":"t1"}},{"exec":{"command":"x","timeout":5}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(s.Steps), 5; got != want {
		t.Fatalf("steps = %d, want %d", got, want)
	}
	if got, want := time.Duration(s.Steps[0].Exec.Timeout), 90*time.Second; got != want {
		t.Errorf("timeout = %v, want %v", got, want)
	}
	if got, want := time.Duration(s.Steps[4].Exec.Timeout), 5*time.Second; got != want {
		t.Errorf("numeric timeout = %v, want %v", got, want)
	}
	if s.Steps[0].Exec.Strict == nil || *s.Steps[0].Exec.Strict {
		t.Errorf("strict = %v, want false", s.Steps[0].Exec.Strict)
	}
	data, _ := s.Steps[2].WriteFile.Data()
	if got, want := string(data), "hi"; got != want {
		t.Errorf("file = %q, want %q", got, want)
	}
	kinds := []StepKind{KindExec, KindExecCode, KindWriteFile, KindCheckpoint, KindExec}
	for i, k := range kinds {
		if got := s.Steps[i].Kind(); got != k {
			t.Errorf("steps[%d].Kind() = %q, want %q", i, got, k)
		}
	}
	// A spec survives a round trip through JSON (the queue's message body).
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b); err != nil {
		t.Fatalf("round trip: %v (%s)", err, b)
	}
}

func TestParseErrors(t *testing.T) {
	const ok = `"name":"n","image":"i"`
	tests := []struct {
		name, doc, path, reason string
	}{
		{"not json", `{`, "", "not valid JSON"},
		{"trailing", `{` + ok + `,"steps":[{"exec":{"command":"x"}}]} {}`, "", "trailing data"},
		{"unknown top", `{` + ok + `,"stepz":[]}`, "stepz", `unknown field "stepz"`},
		{"unknown nested", `{` + ok + `,"steps":[{"exec":{"command":"x"}},{"exec":{"comand":"x"}}]}`, "steps[1].exec.comand", `unknown field "comand"`},
		{"unknown resources", `{` + ok + `,"resources":{"cpus":"1"},"steps":[{"exec":{"command":"x"}}]}`, "resources.cpus", "unknown field"},
		{"unknown step kind", `{` + ok + `,"steps":[{"run":{"command":"x"}}]}`, "steps[0].run", "unknown field"},
		{"wrong type", `{` + ok + `,"steps":[{"exec":{"command":7}}]}`, "steps.exec.command", "want string"},
		{"no name", `{"image":"i","steps":[{"exec":{"command":"x"}}]}`, "name", "is required"},
		{"no image", `{"name":"n","steps":[{"exec":{"command":"x"}}]}`, "image", "is required"},
		{"no steps", `{` + ok + `,"steps":[]}`, "steps", "at least one"},
		{"empty step", `{` + ok + `,"steps":[{}]}`, "steps[0]", "exactly one"},
		{"two kinds", `{` + ok + `,"steps":[{"exec":{"command":"x"},"checkpoint":{"tag":"a"}}]}`, "steps[0]", "got 2"},
		{"empty command", `{` + ok + `,"steps":[{"exec":{"command":" "}}]}`, "steps[0].exec.command", "is required"},
		{"bad timeout", `{` + ok + `,"steps":[{"exec":{"command":"x","timeout":"soon"}}]}`, "", "duration"},
		{"negative timeout", `{` + ok + `,"steps":[{"exec":{"command":"x","timeout":"-1s"}}]}`, "steps[0].exec.timeout", "negative"},
		{"relative path", `{` + ok + `,"steps":[{"writeFile":{"path":"a/b","content":""}}]}`, "steps[0].writeFile.path", "absolute"},
		{"bad base64", `{` + ok + `,"steps":[{"writeFile":{"path":"/a","content":"!!","base64":true}}]}`, "steps[0].writeFile.content", "base64"},
		{"dup tag", `{` + ok + `,"steps":[{"checkpoint":{"tag":"a"}},{"checkpoint":{"tag":"a"}}]}`, "steps[1].checkpoint.tag", "already"},
		{"reserved tag", `{` + ok + `,"steps":[{"checkpoint":{"tag":"alineo-drain-1"}}]}`, "steps[0].checkpoint.tag", "reserved"},
		{"bad quantity", `{` + ok + `,"resources":{"memory":"lots"},"steps":[{"exec":{"command":"x"}}]}`, "resources.memory", "quantity"},
		{"bad env", `{` + ok + `,"env":{"A-B":"1"},"steps":[{"exec":{"command":"x"}}]}`, "env.A-B", "variable name"},
		{"steps not array", `{` + ok + `,"steps":{}}`, "steps", "want"},
		{"control in name", `{"name":"a\u0001","image":"i","steps":[{"exec":{"command":"x"}}]}`, "name", "control"},
		{"duplicate top key", `{` + ok + `,"name":"m","steps":[{"exec":{"command":"x"}}]}`, "name", `duplicate key "name"`},
		{"duplicate nested key", `{` + ok + `,"steps":[{"exec":{"command":"x"}},{"exec":{"command":"x","command":"y"}}]}`, "steps[1].exec.command", `duplicate key "command"`},
		{"duplicate env key", `{` + ok + `,"env":{"A":"1","A":"2"},"steps":[{"exec":{"command":"x"}}]}`, "env.A", `duplicate key "A"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SpecError", err)
			}
			if !errors.Is(err, ErrInvalidSpec) {
				t.Errorf("err does not wrap ErrInvalidSpec")
			}
			if se.Path != tt.path {
				t.Errorf("path = %q, want %q (%v)", se.Path, tt.path, err)
			}
			if !strings.Contains(se.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", se.Reason, tt.reason)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"name":"n","image":"i","steps":[{"exec":{"command":"x","timeout":"1s"}}]}`))
	f.Add([]byte(`{"name":"n","image":"i","steps":[{"checkpoint":{"tag":"a"}},{"writeFile":{"path":"/a","content":"eA==","base64":true}}]}`))
	f.Add([]byte(`{"steps":[{"exec":{"comand":1}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %T %v, want a *SpecError", err, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted a spec Validate rejects: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(b); err != nil {
			t.Fatalf("re-parse of %s: %v", b, err)
		}
	})
}

// TestParseSyntaxErrorPosition: a document that is not JSON is reported
// with the line and column of its first error (in characters), once.
func TestParseSyntaxErrorPosition(t *testing.T) {
	for _, tc := range []struct {
		name, doc  string
		line, col  int
		wantReason string
	}{
		{"missing colon", "{\n  \"name\": \"n\",\n  \"image\" \"i\"\n}", 3, 11, "after object key"},
		{"trailing comma", `{"a":1,}`, 1, 8, "beginning of object key"},
		{"after non-ASCII", "{\n\"é\": x}", 2, 6, "invalid character 'x'"},
		{"cut short", "{\"name\":\n", 2, 1, "ends early"},
		{"empty", "", 1, 1, "ends early"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SpecError", err)
			}
			if se.Line != tc.line || se.Column != tc.col || !strings.Contains(se.Reason, tc.wantReason) {
				t.Errorf("err = %v (line %d, column %d), want line %d, column %d and %q", err, se.Line, se.Column, tc.line, tc.col, tc.wantReason)
			}
			if want := fmt.Sprintf("job spec: line %d, column %d: not valid JSON: ", tc.line, tc.col); !strings.HasPrefix(err.Error(), want) {
				t.Errorf("err = %q, want it to start with %q", err, want)
			}
		})
	}
}
