package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// jsQuote is s as a JavaScript string literal.
func jsQuote(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// TestDashboardListLiveInChromium: the sandbox list and its header figures
// follow the live stream: a new sandbox appears, its exec count and status
// change, all without a reload and within 1 s of the event.
func TestDashboardListLiveInChromium(t *testing.T) {
	e := newEnv(t, token)
	e.session("build", "sb-old", 2, true)
	e.session("build", "sb-running", 1, false)
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)

	b.waitEval(t, s, `document.querySelectorAll("tr.sandbox").length`, "2")
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	figs := `["shown","running","completed","execs"].map(function (k) { return document.getElementById("fig-" + k).textContent }).join(" ")`
	if got := b.mustEval(t, s, figs); got != "2 1 1 3" {
		t.Fatalf("figures (shown running completed execs) = %q, want 2 1 1 3", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('tr.sandbox[data-id="sb-old"] .started-at').textContent`); !strings.HasPrefix(got, time.Now().UTC().Format("2006-01-02 ")) {
		t.Errorf("started cell = %q, want a formatted UTC time", got)
	}

	// A new sandbox: a row appears at the top, formatted like the others.
	emitted := time.Now().UnixMilli()
	e.publish("deploy", "sb-new", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: "sb-new", RunID: "run-7"}))
	row := `document.querySelector('tr.sandbox[data-id="sb-new"]')`
	b.waitEval(t, s, row+` !== null`, "true")
	at, _ := strconv.ParseInt(b.mustEval(t, s, row+`.getAttribute("data-updated-at")`), 10, 64)
	if lat := at - emitted; lat > 1000 {
		t.Errorf("new sandbox shown %d ms after it was emitted, want within 1000 ms", lat)
	} else {
		t.Logf("new sandbox shown %d ms after it was emitted", lat)
	}
	if got := b.mustEval(t, s, `document.querySelector("#sandboxes-body tr").getAttribute("data-id")`); got != "sb-new" {
		t.Errorf("first row = %q, want the new sandbox on top", got)
	}
	cells := `.map(function (td) { return td.textContent.trim() }).join("|")`
	got := strings.Split(b.mustEval(t, s, `Array.from(`+row+`.cells)`+cells), "|")
	old := strings.Split(b.mustEval(t, s, `Array.from(document.querySelector('tr.sandbox[data-id="sb-running"]').cells)`+cells), "|")
	when := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$`)
	if len(got) != 7 || got[0] != "deploy" || got[1] != "sb-new" || got[2] != "running" || !when.MatchString(got[3]) ||
		got[4] != "—" || got[5] != "0" || got[6] != "run-7" || len(old) != 7 || !when.MatchString(old[3]) {
		t.Errorf("new row = %q, want it formatted as the server formats %q", got, old)
	}
	b.waitEval(t, s, figs, "3 2 1 3")

	// An exec completes, then the sandbox closes.
	e.publish("deploy", "sb-new",
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Kind: events.KindCommand, Cmd: "true"}),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}))
	b.waitEval(t, s, row+`.querySelector(".execs").textContent`, "1")
	b.waitEval(t, s, figs, "3 2 1 4")
	e.publish("deploy", "sb-new", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	b.waitEval(t, s, row+`.querySelector(".status").textContent`, "completed")
	b.waitEval(t, s, figs, "3 1 2 4")
	if got := b.mustEval(t, s, row+`.querySelector(".completed-at").textContent`); got == "—" {
		t.Errorf("completed cell not filled in")
	}
	// The tail shows formatted rows, not raw JSON.
	b.mustEval(t, s, `document.getElementById("tail").open = true`)
	if got := b.mustEval(t, s, `document.querySelector("#tail-body tr.live:last-child").textContent`); strings.Contains(got, "{") || !strings.Contains(got, "sandbox.closed") {
		t.Errorf("tail row = %q", got)
	}
	b.screenshot(t, s, "list")

	// A filter is a link; the filtered list takes only matching new rows.
	b.navigate(t, s, e.srv.URL+"/?status=completed")
	b.waitEval(t, s, `Array.prototype.map.call(document.querySelectorAll("tr.sandbox"), function (r) { return r.getAttribute("data-id") }).sort().join(",")`, "sb-new,sb-old")
}

// TestDashboardExecInChromium: the sandbox page groups execs (command, exit
// code, duration) and the exec page shows stdout and stderr exactly as
// recorded, a long output paged and fetched byte-exact.
func TestDashboardExecInChromium(t *testing.T) {
	e := newEnv(t, token)
	stdout := "<b>bold?</b> & \"quotes\" 'single'\ttab  trailing  \r\nünïcødé ✓ 日本\n\n  indented\n"
	stderr := "warning: <script>alert(1)</script>\n"
	var big strings.Builder
	for i := 0; big.Len() < 150<<10; i++ {
		fmt.Fprintf(&big, "line %05d ✓ ünïcødé ", i)
		if i%7 == 0 {
			big.WriteString("\n")
		}
	}
	bigOut := big.String()
	es := []events.Entry{
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbx"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "make test ARGS='-v -x'"}),
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte(stdout[:20]))),
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, []byte(stderr))),
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte(stdout[20:]))),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1, ExitCode: 3}),
		events.New(0, "", "", events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap-1", Name: "after-test"}),
		events.New(0, "", "", 2, events.ExecStarted, events.ExecStartedPayload{Seq: 2, Kind: events.KindCommand, Cmd: "cat big.log"}),
	}
	// The big output in chunks of 7 KiB: chunk edges split multi-byte runes.
	for i := 0; i < len(bigOut); i += 7 << 10 {
		es = append(es, events.New(0, "", "", 2, events.ExecOutput, events.NewOutput(2, events.Stdout, []byte(bigOut[i:min(i+7<<10, len(bigOut))]))))
	}
	es = append(es,
		events.New(0, "", "", 2, events.ExecCompleted, events.ExecCompletedPayload{Seq: 2}),
		events.New(0, "", "", 3, events.ExecStarted, events.ExecStartedPayload{Seq: 3, Kind: events.KindCommand, Cmd: "printf '\\xff\\x00ok'; ls --color"}),
		events.New(0, "", "", 3, events.ExecOutput, events.NewOutput(3, events.Stdout, []byte("\xff\x00ok\n"))),
		events.New(0, "", "", 3, events.ExecOutput, events.NewOutput(3, events.Stderr, []byte("\x1b[31mred\x1b[0m plain\n"))),
		events.New(0, "", "", 3, events.ExecCompleted, events.ExecCompletedPayload{Seq: 3}))
	e.publish("ci", "sbx", es...)
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)

	page := e.srv.URL + "/ui/sandboxes/ci/sbx"
	b.navigate(t, s, page)
	b.waitEval(t, s, `document.querySelectorAll("#timeline li.exec").length`, "3")
	if got := b.mustEval(t, s, `document.querySelector('li.exec[data-key="1"] .exec-head').textContent.replace(/\s+/g, " ").trim()`); !strings.Contains(got, "make test ARGS='-v -x'") || !strings.Contains(got, "exit 3") {
		t.Errorf("exec 1 head = %q, want the command and exit 3", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('li.exec[data-key="1"] .exit').className`); got != "exit fail" {
		t.Errorf("exit badge class = %q", got)
	}
	if got := b.mustEval(t, s, `document.querySelector("li.marker.m-sandbox\\.checkpoint_created").textContent`); !strings.Contains(got, "snap-1") || !strings.Contains(got, "after-test") {
		t.Errorf("checkpoint marker = %q", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('li.exec[data-key="2"] p.more').hidden`); got != "false" {
		t.Errorf("long output not collapsed (more hidden = %s)", got)
	}
	// ANSI colours render as classes; the escape bytes are not shown.
	if got := b.mustEval(t, s, `(function () { var x = document.querySelector('li.exec[data-key="3"] pre .a-31'); return x ? x.textContent : "none" })()`); got != "red" {
		t.Errorf("ANSI red span = %q", got)
	}
	b.screenshot(t, s, "sandbox")

	b.navigate(t, s, page+"/execs/1")
	if got := b.mustEval(t, s, `JSON.stringify(document.getElementById("stdout").textContent)`); got != jsQuote(stdout) {
		t.Errorf("stdout shown = %s\nwant %s", got, jsQuote(stdout))
	}
	if got := b.mustEval(t, s, `JSON.stringify(document.getElementById("stderr").textContent)`); got != jsQuote(stderr) {
		t.Errorf("stderr shown = %s, want %s", got, jsQuote(stderr))
	}
	if got := b.mustEval(t, s, `document.getElementById("exec-cmd").textContent + " | " + document.getElementById("exec-exit").textContent.trim()`); got != "make test ARGS='-v -x' | exit 3" {
		t.Errorf("command | exit = %q", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("exec-duration").textContent`); !strings.HasSuffix(got, " ms") {
		t.Errorf("duration = %q, want milliseconds", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("stdout-total").textContent`); got != strconv.Itoa(len(stdout)) {
		t.Errorf("stdout size = %s, want %d", got, len(stdout))
	}
	b.screenshot(t, s, "exec")

	// The long output: the first page, then the rest fetched byte-exact.
	b.navigate(t, s, page+"/execs/2")
	shown, _ := strconv.Atoi(b.mustEval(t, s, `document.getElementById("stdout").getAttribute("data-shown")`))
	if shown <= 0 || shown > 64<<10 || shown >= len(bigOut) {
		t.Fatalf("first page shows %d bytes of %d, want at most 64 KiB", shown, len(bigOut))
	}
	if got := b.mustEval(t, s, `document.querySelector("#stdout-section .pager").hidden`); got != "false" {
		t.Fatalf("no pager for a long output")
	}
	b.mustEval(t, s, `document.querySelector('button.load-more[data-for="stdout"]').click()`)
	b.waitEval(t, s, `Number(document.getElementById("stdout").getAttribute("data-shown")) > `+strconv.Itoa(shown), "true")
	b.mustEval(t, s, `document.querySelector('button.load-all[data-for="stdout"]').click()`)
	b.waitEval(t, s, `document.getElementById("stdout").getAttribute("data-shown")`, strconv.Itoa(len(bigOut)))
	b.waitEval(t, s, `document.querySelector("#stdout-section .pager").hidden`, "true")
	if got := b.mustEval(t, s, `document.getElementById("stdout").textContent === `+jsQuote(bigOut)); got != "true" {
		t.Errorf("paged output differs from the recorded bytes")
	}

	// Bytes that are not UTF-8: the raw route has them exactly.
	b.navigate(t, s, page+"/execs/3")
	if got := b.mustEval(t, s, `document.querySelectorAll("#stdout-section .warn").length`); got != "1" {
		t.Errorf("no warning for a stream that is not UTF-8")
	}
	b.mustEval(t, s, `(window.raw = "", fetch(document.getElementById("stdout-raw").href).then(function (r) { return r.arrayBuffer() }).then(function (b) { window.raw = Array.prototype.join.call(new Uint8Array(b), ",") }), "")`)
	b.waitEval(t, s, `window.raw`, "255,0,111,107,10")

	// Delete, from the sandbox page: two clicks, sent with the bearer header.
	b.navigate(t, s, page)
	b.mustEval(t, s, `document.getElementById("delete-sandbox").click()`)
	if got := b.mustEval(t, s, `document.getElementById("delete-result").textContent`); got != "" {
		t.Fatalf("one click deleted: %q", got)
	}
	b.mustEval(t, s, `document.getElementById("delete-sandbox").click()`)
	b.waitEval(t, s, `document.getElementById("delete-result").textContent`, "deleted")
	if resp := e.do("GET", "/v1/sandboxes/ci/sbx", token, nil, nil); resp.StatusCode != 404 {
		t.Errorf("after delete: GET = %d, want 404", resp.StatusCode)
	}
}

// TestDashboardLineageInChromium: the run page shows each sandbox under the
// one it resumed or forked from, and the sandbox page links its parent.
func TestDashboardLineageInChromium(t *testing.T) {
	e := newEnv(t, token)
	e.publish("agent", "sb-a",
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-a", RunID: "run-1"}),
		events.New(0, "", "", events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap-a", Name: "base"}),
		events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	e.publish("agent", "sb-b", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: "sb-b", RunID: "run-1", ResumedFrom: "sb-a"}))
	e.publish("agent-fork", "sb-c", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: "sb-c", RunID: "run-1", ForkedFrom: "snap-a"}))
	e.publish("agent-fork", "sb-d", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: "sb-d", RunID: "run-1", FromSnapshot: "snap-elsewhere"}))
	e.publish("agent-env", "sb-e", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated,
		events.SandboxCreatedPayload{SandboxID: "sb-e", RunID: "run-1", FromEnvironment: "py311"}))
	e.session("other", "sb-other", 0, false)
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)

	b.navigate(t, s, e.srv.URL+"/ui/runs/run-1")
	if got := b.mustEval(t, s, `document.getElementById("run-count").textContent`); got != "5" {
		t.Errorf("run sessions = %s, want 5", got)
	}
	if got := b.mustEval(t, s, `Array.prototype.map.call(document.querySelectorAll('#lineage-tree > li.env[data-env="py311"] > ul.children > li.node'), function (n) { return n.getAttribute("data-id") }).join(",")`); got != "sb-e" {
		t.Errorf("sessions under environment py311 = %q, want sb-e", got)
	}
	children := `Array.prototype.map.call(document.querySelectorAll('#lineage-tree > li.node[data-id="sb-a"] > ul.children > li.node'), function (n) { return n.getAttribute("data-id") + ":" + n.querySelector(".rel").textContent.replace(/\s+/g, " ").trim() }).join(" | ")`
	if got := b.mustEval(t, s, children); got != "sb-b:resumed from sb-a | sb-c:forked from checkpoint snap-a of sb-a" {
		t.Errorf("children of sb-a = %q", got)
	}
	// Each node reads the right way round: the session, then where it came
	// from (not "resumed from" followed by its own id).
	head := func(id string) string {
		return b.mustEval(t, s, `document.querySelector('li.node[data-id="`+id+`"] > .node-head').textContent.replace(/\s+/g, " ").trim()`)
	}
	for id, want := range map[string]string{
		"sb-b": "agent sb-b resumed from sb-a running",
		"sb-c": "agent-fork sb-c forked from checkpoint snap-a of sb-a running",
		"sb-d": "agent-fork sb-d restored from checkpoint snap-elsewhere (not in this run) running",
		"sb-e": "agent-env sb-e spawned from environment py311 running",
		"sb-a": "agent sb-a completed",
	} {
		if got := head(id); !strings.HasPrefix(got, want) {
			t.Errorf("node %s reads %q, want it to start %q", id, got, want)
		}
	}
	if got := b.mustEval(t, s, `document.querySelector('li.node[data-id="sb-b"] .rel a').getAttribute("href")`); got != "/ui/sandboxes/agent/sb-a" {
		t.Errorf("sb-b's parent link = %q, want sb-a's page", got)
	}
	roots := `Array.prototype.map.call(document.querySelectorAll("#lineage-tree > li.node:not(.env)"), function (n) { return n.getAttribute("data-id") }).join(",")`
	if got := b.mustEval(t, s, roots); got != "sb-a,sb-d" {
		t.Errorf("roots = %q, want sb-a and the restore whose snapshot is not in the run", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('li.node[data-id="sb-d"]').className`); got != "node orphan" {
		t.Errorf("sb-d class = %q", got)
	}
	b.screenshot(t, s, "run")

	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/agent/sb-b")
	if got := b.mustEval(t, s, `document.getElementById("parent-link").getAttribute("href")`); got != "/ui/sandboxes/agent/sb-a" {
		t.Errorf("parent link = %q", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("lineage").textContent.replace(/\s+/g, " ")`); !strings.Contains(got, "resumed from sb-a") {
		t.Errorf("lineage line = %q", got)
	}
}

// TestDashboardJobsInChromium: the jobs page starts empty, submits a job with
// the bearer header (the cookie alone is refused), lists it without a
// reload, shows a bad spec's error, and a job's page shows its takeovers.
func TestDashboardJobsInChromium(t *testing.T) {
	e := newEnv(t, token)
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	b.navigate(t, s, e.srv.URL+"/ui/jobs")
	if got := b.mustEval(t, s, `document.getElementById("jobs-empty").hidden + " " + document.getElementById("jobs-empty").textContent.trim().split("\n")[0]`); got != "false No jobs yet" {
		t.Errorf("empty state = %q", got)
	}
	b.screenshot(t, s, "jobs-empty")

	// The cookie alone cannot write (what a cross-site form would send).
	b.mustEval(t, s, `(window.plain = "", fetch("/v1/jobs", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"}).then(function (r) { window.plain = String(r.status) }), "")`)
	b.waitEval(t, s, `window.plain`, "401")

	b.mustEval(t, s, `document.getElementById("submit").open = true`)
	b.mustEval(t, s, `(document.getElementById("spec").value = '{"name": "from-the-dashboard", "image": "host", "steps": [{"exec": {"command": "true"}}]}', document.getElementById("submit-form").requestSubmit(), "")`)
	b.waitEval(t, s, `document.getElementById("submit-result").className`, "ok")
	id := b.mustEval(t, s, `document.getElementById("submitted-job").textContent`)
	if !jobs.ValidID(id) {
		t.Fatalf("submitted job id = %q", id)
	}
	b.waitEval(t, s, `document.querySelector('tr.job[data-id="`+id+`"] .state').textContent`, "queued")
	b.waitEval(t, s, `document.getElementById("jobs-empty").hidden`, "true")
	if st, err := e.queue.Status(context.Background(), id); err != nil || st.Name != "from-the-dashboard" {
		t.Fatalf("queued job = %+v, %v", st, err)
	}

	// Signed in by a link (no token in this tab): the write asks for the
	// token instead of sending the cookie alone.
	b.mustEval(t, s, `(sessionStorage.clear(), document.getElementById("spec").value = '{"name": "asked", "image": "host", "steps": [{"exec": {"command": "true"}}]}', document.getElementById("submit-form").requestSubmit(), "")`)
	b.waitEval(t, s, `document.getElementById("token-bar").hidden`, "false")
	b.mustEval(t, s, `(document.getElementById("token-input").value = `+jsQuote(token)+`, document.getElementById("token-form").requestSubmit(), "")`)
	b.waitEval(t, s, `document.getElementById("submit-result").className + " " + document.getElementById("token-bar").hidden`, "ok true")

	// A bad spec: the API's error, shown where the user submitted.
	b.mustEval(t, s, `(document.getElementById("spec").value = '{"name": "x", "image": "host", "steps": [{"exec": {}}]}', document.getElementById("submit-form").requestSubmit(), "")`)
	b.waitEval(t, s, `document.getElementById("submit-result").className`, "err")
	if got := b.mustEval(t, s, `document.getElementById("submit-result").textContent`); !strings.Contains(got, "command") {
		t.Errorf("bad spec error = %q, want it to name the missing command", got)
	}
	b.screenshot(t, s, "jobs")

	// A job another worker took over: its status names the new attempt's
	// sandbox (what a worker records), the old sandbox's session ends with
	// the takeover's sandbox.closed.
	taken := jobs.NewID()
	e.publish("job", "sb-first", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-first", RunID: "run-job"}),
		events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, events.SandboxClosedPayload{Reason: events.ClosedTakenOver, By: "worker-2", Job: taken}))
	e.publish("job", "sb-second", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-second", RunID: "run-job", FromSnapshot: "snap-j"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "make build"}),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}))
	e.waitProjected()
	now := time.Now().UnixMilli()
	putStatus(t, e, jobs.Status{ID: taken, Name: "taken", State: jobs.StateRunning, Attempt: 2, Worker: "worker-2",
		SandboxID: "sb-second", SandboxName: "job", Steps: 4, Done: 2, SubmittedAt: now - 5000, UpdatedAt: now,
		Checkpoint: &jobs.Checkpoint{SandboxID: "sb-first", Name: "job", Tag: "half", Next: 2}})
	b.waitEval(t, s, `document.querySelector('tr.job[data-id="`+taken+`"] .worker').textContent`, "worker-2")
	b.navigate(t, s, e.srv.URL+"/ui/jobs/"+taken)
	head := `["state","worker","attempt","steps","takeovers"].map(function (k) { return document.getElementById("job-" + k).textContent.trim() }).join(" ")`
	if got := b.mustEval(t, s, head); got != "running worker-2 2 2/4 1" {
		t.Errorf("job figures = %q, want running worker-2 2 2/4 1", got)
	}
	attempts := `Array.prototype.map.call(document.querySelectorAll("#attempts li.attempt"), function (a) { return a.getAttribute("data-id") + (a.classList.contains("current") ? "*" : "") }).join(",")`
	if got := b.mustEval(t, s, attempts); got != "sb-first,sb-second*" {
		t.Errorf("attempts = %q", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('li.attempt[data-id="sb-first"] .closed-reason').textContent`); !strings.Contains(got, "taken over") || !strings.Contains(got, "worker-2") {
		t.Errorf("takeover line = %q", got)
	}
	if got := b.mustEval(t, s, `document.querySelector('li.attempt[data-id="sb-second"] li.step').textContent.replace(/\s+/g, " ").trim()`); !strings.HasPrefix(got, "#1 make build exit 0") {
		t.Errorf("current attempt's step = %q", got)
	}
	b.screenshot(t, s, "job")
}

// putStatus records st in the jobs status bucket, as a worker does.
func putStatus(t *testing.T, e *env, st jobs.Status) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.bus.JetStream().KeyValue(ctx, e.queue.Config().Bucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, st.ID, data); err != nil {
		t.Fatal(err)
	}
}

// failingStore answers every listing with ErrUnavailable.
type failingStore struct{ api.Store }

func (failingStore) ListAllSandboxDetails(context.Context, adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return nil, fmt.Errorf("list: %w", adapters.ErrUnavailable)
}

// TestDashboardStatesInChromium: the empty list, an unknown sandbox (404)
// and a read model that is down (503) each get a page that says so.
func TestDashboardStatesInChromium(t *testing.T) {
	e := newEnv(t, token)
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	if got := b.mustEval(t, s, `document.getElementById("empty").hidden + " " + document.querySelector("#empty h2").textContent`); got != "false No sandboxes yet" {
		t.Errorf("empty state = %q", got)
	}
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	b.screenshot(t, s, "empty")
	// The empty state goes once a sandbox appears.
	e.session("first", "sb-first", 0, false)
	b.waitEval(t, s, `document.getElementById("empty").hidden`, "true")

	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/first/nope")
	if got := b.mustEval(t, s, `document.getElementById("error").getAttribute("data-status") + " " + document.getElementById("error-message").textContent`); !strings.HasPrefix(got, "404 no sandbox nope") {
		t.Errorf("404 page = %q", got)
	}
	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/first/sb-first/execs/9")
	if got := b.mustEval(t, s, `document.getElementById("error").getAttribute("data-status")`); got != "404" {
		t.Errorf("unknown exec page status = %q", got)
	}

	srv, err := api.New(api.Config{Store: failingStore{e.store}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	down := httptest.NewServer(srv)
	defer down.Close()
	b.signIn(t, s, down.URL, token)
	if got := b.mustEval(t, s, `document.getElementById("error").getAttribute("data-status") + " " + document.querySelector("#error h1").textContent`); got != "503 The read model is not available" {
		t.Errorf("store down page = %q", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("error-message").textContent`); !strings.Contains(got, "unavailable") {
		t.Errorf("store down message = %q", got)
	}
	b.screenshot(t, s, "error")
	b.navigate(t, s, down.URL+"/ui/jobs")
	if got := b.mustEval(t, s, `document.getElementById("error").getAttribute("data-status") + " " + document.querySelector("#error h1").textContent`); got != "503 No jobs queue" {
		t.Errorf("no queue page = %q", got)
	}
}

// TestDashboardExecLiveInChromium: an exec that is still running fills in
// live, on its own page (exactly, CR included) and on the sandbox page,
// whose header follows too.
func TestDashboardExecLiveInChromium(t *testing.T) {
	e := newEnv(t, token)
	e.publish("live", "sbl",
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sbl"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "sleep 1; echo done"}),
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("first\n"))))
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)

	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/live/sbl/execs/1")
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	if got := b.mustEval(t, s, `document.getElementById("exec-exit").textContent.trim()`); got != "running" {
		t.Errorf("exit before completion = %q", got)
	}
	e.publish("live", "sbl",
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, []byte("progress 50%\rprogress 100%\r\n"))),
		events.New(0, "", "", 1, events.ExecOutput, events.NewOutput(1, events.Stderr, []byte("\x1b[33mwarn\x1b[0m\n"))),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1, ExitCode: 0}))
	b.waitEval(t, s, `document.getElementById("exec-exit").textContent.trim()`, "exit 0")
	if got, want := b.mustEval(t, s, `JSON.stringify(document.getElementById("stdout").textContent)`), jsQuote("first\nprogress 50%\rprogress 100%\r\n"); got != want {
		t.Errorf("live stdout = %s, want %s", got, want)
	}
	if got := b.mustEval(t, s, `document.getElementById("stdout-total").textContent + " " + document.querySelector("#stderr .a-33").textContent`); got != "34 warn" {
		t.Errorf("stdout total and coloured stderr = %q", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("exec-duration").textContent`); got == "—" || got == "" {
		t.Errorf("no duration after completion")
	}

	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/live/sbl")
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	e.publish("live", "sbl",
		events.New(0, "", "", 2, events.ExecStarted, events.ExecStartedPayload{Seq: 2, Kind: events.KindCommand, Cmd: "false"}),
		events.New(0, "", "", 2, events.ExecOutput, events.NewOutput(2, events.Stderr, []byte("nope\n"))),
		events.New(0, "", "", 2, events.ExecCompleted, events.ExecCompletedPayload{Seq: 2, ExitCode: 1}),
		events.New(0, "", "", events.SandboxLevel, events.SandboxPaused, nil))
	card := `document.querySelector('li.exec[data-key="2"]')`
	b.waitEval(t, s, card+` && `+card+`.querySelector(".exit").textContent`, "exit 1")
	if got := b.mustEval(t, s, card+`.querySelector(".cmd").textContent + "|" + `+card+`.querySelector("pre .stderr").textContent`); got != "false|nope\n" {
		t.Errorf("live card = %q", got)
	}
	b.waitEval(t, s, `document.getElementById("sandbox-execs").textContent`, "2")
	b.waitEval(t, s, `document.querySelector("#timeline li.marker:last-child .label").textContent`, "paused")
	e.publish("live", "sbl", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, nil))
	b.waitEval(t, s, `document.getElementById("sandbox-status").textContent`, "completed")
	if got := b.mustEval(t, s, `document.getElementById("sandbox-completed").textContent`); got == "—" {
		t.Errorf("completion time not filled in")
	}
	b.screenshot(t, s, "sandbox-live")
}

// TestDashboardJobsLiveFromListInChromium: the jobs page, opened on a list
// the server rendered, follows a job's change without a reload, and its
// live indicator says live (not "reconnecting…" as it did when a rendered
// row's cells did not match the script's).
func TestDashboardJobsLiveFromListInChromium(t *testing.T) {
	e := newEnv(t, token)
	ctx := context.Background()
	spec, err := jobs.Parse([]byte(`{"name": "listed", "image": "host", "steps": [{"exec": {"command": "true"}}, {"exec": {"command": "true"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.queue.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	b.navigate(t, s, e.srv.URL+"/ui/jobs")
	row := `document.querySelector('tr.job[data-id="` + st.ID + `"]')`
	if got := b.mustEval(t, s, row+`.getAttribute("data-state") + " " + `+row+`.querySelector(".worker").textContent`); got != "queued —" {
		t.Fatalf("rendered row = %q, want queued —", got)
	}
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")

	// A worker picks the job up and finishes a step: the row follows.
	st.State, st.Worker, st.Attempt, st.Done = jobs.StateRunning, "worker-live", 1, 1
	st.UpdatedAt = time.Now().UnixMilli()
	putStatus(t, e, st)
	b.waitEval(t, s, row+`.querySelector(".worker").textContent + " " + `+row+`.querySelector(".steps").textContent`, "worker-live 1/2")
	if got := b.mustEval(t, s, row+`.querySelector(".badge").textContent + " " + document.getElementById("live-status").textContent`); got != "running live" {
		t.Errorf("state badge and live status = %q, want running live", got)
	}
	b.screenshot(t, s, "jobs-live")
}

// TestDashboardInterruptedExecInChromium: an exec whose attempt died (its
// sandbox closed, taken over, before exec.completed) reads as interrupted,
// not running: on the sandbox page, on its own page, and live when the
// sandbox.closed arrives while the page is open.
func TestDashboardInterruptedExecInChromium(t *testing.T) {
	e := newEnv(t, token)
	job := jobs.NewID()
	e.publish("job", "sb-dead",
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-dead"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "true"}),
		events.New(0, "", "", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}),
		events.New(0, "", "", 2, events.ExecStarted, events.ExecStartedPayload{Seq: 2, Kind: events.KindCommand, Cmd: "make build"}),
		events.New(0, "", "", 2, events.ExecOutput, events.NewOutput(2, events.Stdout, []byte("compiling\n"))),
		events.New(0, "", "", events.SandboxLevel, events.SandboxClosed, events.SandboxClosedPayload{Reason: events.ClosedTakenOver, By: "worker-2", Job: job}))
	e.publish("job", "sb-dying",
		events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-dying"}),
		events.New(0, "", "", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Kind: events.KindCommand, Cmd: "sleep 600"}))
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)

	badge := func(key string) string {
		return `document.querySelector('li.exec[data-key="` + key + `"] .exit').className + " " + document.querySelector('li.exec[data-key="` + key + `"] .exit').textContent`
	}
	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/job/sb-dead")
	if got := b.mustEval(t, s, badge("1")+` + " | " + `+badge("2")); got != "exit ok exit 0 | exit interrupted interrupted" {
		t.Errorf("exec badges = %q, want exec 2 interrupted", got)
	}
	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/job/sb-dead/execs/2")
	if got := b.mustEval(t, s, `document.getElementById("exec-exit").textContent.trim() + " | " + document.getElementById("exec-interrupted").hidden + " | " + document.getElementById("exec-interrupted").textContent`); !strings.HasPrefix(got, "interrupted | false | ") || !strings.Contains(got, "taken over by worker-2") {
		t.Errorf("exec page = %q, want interrupted and why", got)
	}
	b.screenshot(t, s, "exec-interrupted")

	// Live: the sandbox closes while its exec runs, on both pages.
	b.navigate(t, s, e.srv.URL+"/ui/sandboxes/job/sb-dying/execs/1")
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	if got := b.mustEval(t, s, `document.getElementById("exec-exit").textContent.trim() + " " + document.getElementById("exec-interrupted").hidden`); got != "running true" {
		t.Fatalf("exec page before the close = %q, want running", got)
	}
	s2 := b.open(t, "about:blank")
	b.navigate(t, s2, e.srv.URL+"/ui/sandboxes/job/sb-dying")
	b.waitEval(t, s2, `document.getElementById("live-status").textContent`, "live")
	if got := b.mustEval(t, s2, badge("1")); got != "exit running running" {
		t.Fatalf("sandbox page before the close = %q, want running", got)
	}
	e.publish("job", "sb-dying", events.New(0, "", "", events.SandboxLevel, events.SandboxClosed,
		events.SandboxClosedPayload{Reason: events.ClosedJobFailed, By: "worker-3", Job: job}))
	b.waitEval(t, s2, badge("1"), "exit interrupted interrupted")
	b.waitEval(t, s, `document.getElementById("exec-exit").textContent.trim() + " " + document.getElementById("exec-interrupted").hidden`, "interrupted false")
	if got := b.mustEval(t, s, `document.getElementById("exec-interrupted").textContent`); !strings.Contains(got, "job failed by worker-3") {
		t.Errorf("live interruption note = %q", got)
	}
}

// TestDashboardExecutorsInChromium: the executors page lists a running
// worker with its jobs and last heartbeat, and follows it live: the
// heartbeat moves on, a job it takes appears, and once it stops it is known
// only from its job's status.
func TestDashboardExecutorsInChromium(t *testing.T) {
	e := newEnv(t, token)
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: "http://127.0.0.1:1", Adapter: e.ledger}) // never given a job
	if err != nil {
		t.Fatal(err)
	}
	w := &jobs.Worker{Queue: e.queue, Client: client, ID: "w-ui", Heartbeat: 300 * time.Millisecond, Concurrency: 2}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	now := time.Now().UnixMilli()
	first := jobs.Status{ID: jobs.NewID(), Name: "building", State: jobs.StateRunning, Attempt: 1, Worker: "w-ui", Steps: 3, Done: 1, SubmittedAt: now, UpdatedAt: now}
	putStatus(t, e, first)
	testenv.Eventually(t, 10*time.Second, func() error {
		ws, err := e.queue.Workers(ctx)
		if err != nil || len(ws) != 1 {
			return fmt.Errorf("workers = %+v, %v", ws, err)
		}
		return nil
	})

	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	b.navigate(t, s, e.srv.URL+"/ui/executors")
	row := `document.querySelector('tr.executor[data-id="w-ui"]')`
	cells := `Array.from(` + row + `.cells).map(function (td) { return td.textContent.replace(/\s+/g, " ").trim() }).join("|")`
	got := strings.Split(b.mustEval(t, s, cells), "|")
	when := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$`)
	if len(got) != 7 || got[0] != "w-ui" || got[1] != "live" || !strings.Contains(got[2], "(pid ") || !when.MatchString(got[3]) || !when.MatchString(got[4]) || got[6] != "building 1/3" {
		t.Fatalf("rendered row = %q, want w-ui live with its host, times and job", got)
	}
	if got := b.mustEval(t, s, row+`.querySelector('a.job').getAttribute("href")`); got != "/ui/jobs/"+first.ID {
		t.Errorf("job link = %q", got)
	}
	// Live: the heartbeat moves on.
	beat := b.mustEval(t, s, row+`.querySelector(".heartbeat").getAttribute("data-at")`)
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	b.waitEval(t, s, `(function () { var r = `+row+`; return r !== null && r.querySelector(".heartbeat").getAttribute("data-at") !== `+jsQuote(beat)+` })()`, "true")
	if after := strings.Split(b.mustEval(t, s, cells), "|"); len(after) != 7 || after[0] != got[0] || after[1] != "live" || after[2] != got[2] ||
		after[3] != got[3] || !when.MatchString(after[4]) || after[5] != got[5] || after[6] != got[6] {
		t.Errorf("row after a live update = %q, want it formatted as the server formats %q", after, got)
	}
	// A second job of the worker appears without a reload.
	second := jobs.Status{ID: jobs.NewID(), Name: "testing", State: jobs.StateRunning, Attempt: 1, Worker: "w-ui", Steps: 2, SubmittedAt: now + 1, UpdatedAt: now + 1}
	putStatus(t, e, second)
	b.waitEval(t, s, row+` && `+row+`.querySelectorAll("a.job").length`, "2")
	b.waitEval(t, s, `document.getElementById("fig-live").textContent + " " + document.getElementById("fig-jobs").textContent`, "1 2")
	b.screenshot(t, s, "executors")

	// The worker stops: its record goes, its jobs' statuses still name it.
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.waitEval(t, s, row+` && `+row+`.getAttribute("data-state")`, "unknown")
	if got := b.mustEval(t, s, `document.getElementById("fig-live").textContent + " " + `+row+`.querySelector(".heartbeat").textContent`); got != "0 —" {
		t.Errorf("after the worker stopped: %q, want no live worker and no heartbeat", got)
	}
}

// TestDashboardCancelRetryInChromium: a job running on a real worker is
// canceled from its page (two clicks, with the bearer header): the cancel
// reaches it before its next step, the page follows it to canceled, the
// ledger records it, and Retry submits it again as a new job that names it.
func TestDashboardCancelRetryInChromium(t *testing.T) {
	e := newEnv(t, token)
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: e.ledger})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan int, 16)
	w := &jobs.Worker{Queue: e.queue, Client: client, Ledger: e.ledger, ID: "w-run", Heartbeat: 300 * time.Millisecond, DrainTimeout: time.Second,
		Progress: func(_ string, ev jobs.Event) {
			if ev.State == jobs.StepStarted {
				started <- ev.Index
			}
		}}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		<-done
	}()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	b.navigate(t, s, e.srv.URL+"/ui/executors")
	// Step 1 waits until the test opens its gate (release), so the cancel
	// lands while it runs, however slow the machine.
	st, err := e.queue.Submit(ctx, mustSpec(t, `{"name":"long","image":"host","steps":[
		{"exec":{"command":"while [ ! -e /tmp/gate ]; do sleep 0.05; done"}},{"exec":{"command":"echo never"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(90 * time.Second):
		t.Fatal("the job's first step never started")
	}
	// The executors page shows the worker running the job.
	b.waitEval(t, s, `(function () { var a = document.querySelector('tr.executor[data-id="w-run"] a.job[data-job="`+st.ID+`"]'); return a ? a.textContent.replace(/\s+/g, " ").trim() : "" })()`, "long 0/2")

	b.navigate(t, s, e.srv.URL+"/ui/jobs/"+st.ID)
	// Shown as the user sees it: hidden, and no style that shows it anyway.
	visible := func(id string) string {
		return `(getComputedStyle(document.getElementById("` + id + `")).display !== "none")`
	}
	if got := b.mustEval(t, s, `document.getElementById("job-state").textContent.trim() + " " + `+visible("job-cancel")+` + " " + `+visible("job-retry")); got != "running true false" {
		t.Fatalf("running job's page = %q, want running with Cancel and no Retry", got)
	}
	b.mustEval(t, s, `document.getElementById("job-cancel").click()`)
	if got := b.mustEval(t, s, `document.getElementById("job-action-result").textContent`); got != "" {
		t.Fatalf("one click canceled: %q", got)
	}
	b.mustEval(t, s, `document.getElementById("job-cancel").click()`)
	b.waitEval(t, s, `document.getElementById("job-action-result").textContent`, "cancel requested")
	if got := b.mustEval(t, s, visible("job-cancel-requested")+` + " " + `+visible("job-cancel")); got != "true false" {
		t.Errorf("after the cancel: chip visible, Cancel visible = %q, want true false", got)
	}
	release(t, client, e.queue, st.ID)
	// The worker stops the job before step 2; the page follows.
	b.waitEval(t, s, `document.getElementById("job-state").textContent.trim()`, "canceled")
	b.waitEval(t, s, visible("job-retry")+` + " " + `+visible("job-cancel-requested"), "true false")
	if got := b.mustEval(t, s, `document.getElementById("job-error").textContent`); got != "job canceled by admin before step 2" {
		t.Errorf("job error = %q", got)
	}
	select {
	case i := <-started:
		t.Errorf("step %d started after the cancel", i+1)
	default:
	}
	final, err := e.queue.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	es, err := e.ledger.ReadAll(ctx, final.SandboxName, final.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var p events.SandboxClosedPayload
	if last := es[len(es)-1]; last.Event != events.SandboxClosed || last.Decode(&p) != nil || p.Reason != jobs.ClosedCanceled || p.Job != st.ID {
		t.Errorf("the session ends with %s %s, want sandbox.closed of reason %q", last.Event, last.Payload, jobs.ClosedCanceled)
	}
	e.waitProjected()
	b.navigate(t, s, e.srv.URL+"/ui/jobs/"+st.ID)
	if got := b.mustEval(t, s, `document.querySelector("#attempts .closed-reason").textContent`); !strings.Contains(got, "job canceled, by w-run") {
		t.Errorf("attempt's end = %q, want job canceled by w-run", got)
	}
	if got := b.mustEval(t, s, visible("job-cancel")+` + " " + `+visible("job-cancel-requested")+` + " " + `+visible("job-retry")); got != "false false true" {
		t.Errorf("canceled job's page shows Cancel, the cancel chip, Retry = %q, want false false true", got)
	}
	b.screenshot(t, s, "job-canceled")

	// Retry: a new job with the same spec, linked both ways.
	b.mustEval(t, s, `document.getElementById("job-retry").click()`)
	b.waitEval(t, s, `document.getElementById("job-action-result").className`, "ok")
	next := b.mustEval(t, s, `document.getElementById("retry-job").textContent`)
	if !jobs.ValidID(next) || next == st.ID {
		t.Fatalf("retry job id = %q", next)
	}
	if got := b.mustEval(t, s, visible("job-retry")+` + " " + `+visible("job-retried")+` + " " + document.getElementById("job-retried-as").getAttribute("href")`); got != "false true /ui/jobs/"+next {
		t.Errorf("after the retry = %q", got)
	}
	b.navigate(t, s, e.srv.URL+"/ui/jobs/"+next)
	if got := b.mustEval(t, s, `document.getElementById("job-retry-of").getAttribute("href")`); got != "/ui/jobs/"+st.ID {
		t.Errorf("retry-of link = %q", got)
	}
	if ns, err := e.queue.Status(ctx, next); err != nil || ns.RetryOf != st.ID || ns.Name != "long" {
		t.Errorf("the retry's status = %+v, %v", ns, err)
	}
}

// release opens the gate the first step of job id waits for (a file in its
// sandbox, written past the ledger).
func release(t *testing.T, client *alineo.Client, q *jobs.Queue, id string) {
	t.Helper()
	ctx := context.Background()
	st, err := q.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	x, err := client.OpenSandbox().Execd(ctx, st.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.UploadFile(ctx, "/tmp/gate", strings.NewReader("go"), opensandbox.Permission{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardListFiltersInChromium: the list keeps the sessions with a
// failed exec (a non-zero exit, or interrupted) and those started in a time
// range, each filter keeping the others, and a new sandbox does not appear
// live where the filters exclude it.
func TestDashboardListFiltersInChromium(t *testing.T) {
	e := newEnv(t, token)
	ctx := context.Background()
	at := func(hhmm string) int64 {
		ts, err := time.Parse(time.RFC3339, "2025-06-01T"+hhmm+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return ts.UnixMilli()
	}
	// session records a session started at hhmm whose execs exit with codes
	// (-1: started, never completed), closed when closed.
	session := func(id, hhmm string, closed bool, codes ...int) {
		ts := at(hhmm)
		es := []events.Entry{events.New(ts, "filtered", id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})}
		for i, code := range codes {
			step := i + 1
			ts++
			es = append(es, events.New(ts, "filtered", id, step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Kind: events.KindCommand, Cmd: "run"}))
			if code >= 0 {
				ts++
				es = append(es, events.New(ts, "filtered", id, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step, ExitCode: code}))
			}
		}
		if closed {
			es = append(es, events.New(ts+1, "filtered", id, events.SandboxLevel, events.SandboxClosed, nil))
		}
		if err := e.ledger.AppendBatch(ctx, es); err != nil {
			t.Fatal(err)
		}
		if err := e.ledger.Sync(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	session("ok-old", "10:00", true, 0)
	session("bad-old", "11:00", true, 2)
	session("bad-new", "12:00", true, 0, 1, 3)
	session("dead", "13:00", true, 0, -1) // its attempt died mid-exec
	session("ok-new", "14:00", false, 0, -1)
	e.waitProjected()
	b := chromium(t)
	s := b.open(t, "about:blank")
	b.signIn(t, s, e.srv.URL, token)
	rows := `Array.prototype.map.call(document.querySelectorAll("tr.sandbox"), function (r) { var f = r.querySelector(".failed-execs"); return r.getAttribute("data-id") + (f ? ":" + f.textContent : "") }).join(" ")`
	if got := b.mustEval(t, s, rows); got != "ok-new dead bad-new bad-old ok-old" {
		t.Fatalf("unfiltered rows = %q", got)
	}

	// Failed execs only.
	b.mustEval(t, s, `document.getElementById("filter-failed").click()`)
	b.ready(t, s, e.srv.URL+"/?failed=1")
	if got := b.mustEval(t, s, rows); got != "dead:1 failed bad-new:2 failed bad-old:1 failed" {
		t.Errorf("failed rows = %q, want dead, bad-new (2) and bad-old", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("scan-note").textContent`); !strings.HasPrefix(got, "Read 5 sessions") {
		t.Errorf("scan note = %q", got)
	}

	// A time range, with the failed filter kept.
	b.mustEval(t, s, `(document.getElementById("range-from").value = "2025-06-01T11:30:00", document.getElementById("range-to").value = "2025-06-01T14:30:00", document.getElementById("range-form").requestSubmit(), "")`)
	b.ready(t, s, e.srv.URL+"/?failed=1&from=2025-06-01T11%3A30&to=2025-06-01T14%3A30") // the browser drops :00 seconds
	if got := b.mustEval(t, s, rows); got != "dead:1 failed bad-new:2 failed" {
		t.Errorf("failed rows started 11:30 to 14:30 = %q, want dead and bad-new", got)
	}
	if got := b.mustEval(t, s, `document.getElementById("chip-range").textContent`); !strings.Contains(got, "from 2025-06-01T11:30:00 before 2025-06-01T14:30:00") {
		t.Errorf("range chip = %q", got)
	}
	b.screenshot(t, s, "list-filtered")
	// Any exec, the range kept.
	b.mustEval(t, s, `document.getElementById("filter-any").click()`)
	b.ready(t, s, e.srv.URL+"/?from=2025-06-01T11%3A30%3A00&to=2025-06-01T14%3A30%3A00")
	if got := b.mustEval(t, s, rows); got != "ok-new dead bad-new" {
		t.Errorf("rows started 11:30 to 14:30 = %q, want ok-new, dead and bad-new", got)
	}

	// A new sandbox starts now: outside the range, so not added live (the
	// tail shows the event, so the page has handled it).
	b.waitEval(t, s, `document.getElementById("live-status").textContent`, "live")
	e.publish("filtered", "sb-now", events.New(0, "", "", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-now"}))
	b.waitEval(t, s, fmt.Sprintf(`document.querySelector('#tail-body tr.live[data-seq="%d"]') !== null`, e.ledger.LastSeq()), "true")
	if got := b.mustEval(t, s, rows); got != "ok-new dead bad-new" {
		t.Errorf("rows after a new sandbox outside the range = %q", got)
	}
	// Bad input is a page that says which.
	b.navigate(t, s, e.srv.URL+"/?from=yesterday")
	if got := b.mustEval(t, s, `document.getElementById("error").getAttribute("data-status") + " " + document.getElementById("error-message").textContent`); !strings.HasPrefix(got, "400 from must be") {
		t.Errorf("bad range page = %q", got)
	}
}
