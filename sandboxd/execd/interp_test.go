package execd_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

func (e *env) newContext(lang string) string {
	e.t.Helper()
	var ctx struct{ ID, Language string }
	if err := json.Unmarshal(wantStatus(e.t, e.do("POST", "/code/context", map[string]string{"language": lang}), 200), &ctx); err != nil || ctx.ID == "" {
		e.t.Fatalf("create %s context: %+v %v", lang, ctx, err)
	}
	return ctx.ID
}

func (e *env) code(id, lang, code string) result {
	e.t.Helper()
	return e.stream("/code", map[string]any{"code": code, "context": map[string]string{"id": id, "language": lang}})
}

func resultText(res result) (string, bool) {
	for _, ev := range res.events {
		if ev.Type == "result" {
			s, ok := ev.Results["text"].(string)
			return s, ok
		}
	}
	return "", false
}

func lastType(res result) string { return res.events[len(res.events)-1].Type }

func TestPythonContextKeepsState(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	e := newEnv(t, execd.Config{})
	id := e.newContext("python")
	if res := e.code(id, "python", "x = 41\nimport sys\nprint('a\\nb')\nprint('err', file=sys.stderr)"); strings.Join(res.stdout, "") != "a\nb\n" ||
		strings.Join(res.stderr, "") != "err\n" || lastType(res) != "execution_complete" {
		t.Fatalf("first run: stdout %q stderr %q events %+v", res.stdout, res.stderr, res.events)
	}
	res := e.code(id, "python", "x + 1")
	if got, ok := resultText(res); !ok || got != "42" {
		t.Fatalf("result = %q %v (events %+v)", got, ok, res.events)
	}
	var count int
	for _, ev := range res.events {
		if ev.Type == "execution_count" {
			count = ev.ExecutionCount
		}
	}
	if got, want := count, 2; got != want {
		t.Fatalf("execution_count = %d, want %d", got, want)
	}
	res = e.code(id, "python", "1/0")
	if lastType(res) != "error" || res.events[len(res.events)-1].Error.Ename != "ZeroDivisionError" ||
		!strings.Contains(strings.Join(res.trace, ""), "ZeroDivisionError") {
		t.Fatalf("error run: %+v", res.events)
	}
	// Interrupt: a long run is broken off and the context survives.
	done := make(chan result, 1)
	go func() { done <- e.code(id, "python", "import time\nfor _ in range(600): time.sleep(0.1)") }()
	// The interrupt of an idle context is a no-op: interrupt until the run,
	// once started, is broken off.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
interrupt:
	for {
		select {
		case res := <-done:
			if res.events[len(res.events)-1].Error == nil || res.events[len(res.events)-1].Error.Ename != "KeyboardInterrupt" {
				t.Fatalf("interrupted run: %+v", res.events)
			}
			break interrupt
		case <-tick.C:
			wantStatus(t, e.do("DELETE", "/code?id="+id, nil), 200)
		case <-deadline:
			t.Fatal("interrupt did not end the run")
		}
	}
	if got, _ := resultText(e.code(id, "python", "x")); got != "41" {
		t.Fatalf("after interrupt x = %q", got)
	}
	var list []struct{ ID, Language string }
	if err := json.Unmarshal(wantStatus(t, e.do("GET", "/code/contexts?language=python", nil), 200), &list); err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("list = %+v %v", list, err)
	}
	wantStatus(t, e.do("GET", "/code/contexts/"+id, nil), 200)
	wantStatus(t, e.do("DELETE", "/code/contexts/"+id, nil), 200)
	wantError(t, e.do("GET", "/code/contexts/"+id, nil), 404, "CONTEXT_NOT_FOUND")
}

func TestNodeContextKeepsState(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node not installed")
	}
	e := newEnv(t, execd.Config{})
	id := e.newContext("javascript")
	if res := e.code(id, "javascript", "let x = 41; console.log('hi')"); strings.Join(res.stdout, "") != "hi\n" {
		t.Fatalf("first run: %+v", res.events)
	}
	if got, _ := resultText(e.code(id, "javascript", "x + 1")); got != "42" {
		t.Fatalf("result = %q", got)
	}
	if res := e.code(id, "javascript", "null.y"); lastType(res) != "error" || res.events[len(res.events)-1].Error.Ename != "TypeError" {
		t.Fatalf("error run: %+v", res.events)
	}
}
