package api

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ms   int64
		form string
		ok   bool
	}{
		{"", 0, "", true},
		{"2025-06-01T11:30", 1748777400000, "2025-06-01T11:30:00", true},
		{"2025-06-01T11:30:15", 1748777415000, "2025-06-01T11:30:15", true},
		{"1748777415000", 1748777415000, "2025-06-01T11:30:15", true},
		{"yesterday", 0, "", false},
		{"2025-06-01", 0, "", false},
		{"-5", 0, "", false},
		{"0", 0, "", false},
	} {
		ms, form, ok := parseRange(tc.in)
		if ms != tc.ms || form != tc.form || ok != tc.ok {
			t.Errorf("parseRange(%q) = %d %q %v, want %d %q %v", tc.in, ms, form, ok, tc.ms, tc.form, tc.ok)
		}
	}
}

func TestListQueryKeepsFilters(t *testing.T) {
	p := listPage{Status: "running", Name: "a b&c", Failed: true, FromInput: "2025-06-01T11:30:00", Event: "exec.started"}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{nil, "?event=exec.started&failed=1&from=2025-06-01T11%3A30%3A00&name=a+b%26c&status=running"},
		{[]string{"failed", ""}, "?event=exec.started&from=2025-06-01T11%3A30%3A00&name=a+b%26c&status=running"},
		{[]string{"status", "completed", "from", "", "to", "2025-06-02T00:00:00"}, "?event=exec.started&failed=1&name=a+b%26c&status=completed&to=2025-06-02T00%3A00%3A00"},
		{[]string{"before", "42"}, "?before=42&event=exec.started&failed=1&from=2025-06-01T11%3A30%3A00&name=a+b%26c&status=running"},
	} {
		if got := p.Query(tc.kv...); got != tc.want {
			t.Errorf("Query(%q) = %q, want %q", tc.kv, got, tc.want)
		}
	}
	if !p.Filtered() || (listPage{Event: "exec.started"}).Filtered() {
		t.Errorf("Filtered: a page with filters says %v, one with only a tail event %v", p.Filtered(), (listPage{Event: "exec.started"}).Filtered())
	}
}

// TestListFailedPages: the failed-exec filter pages through every session
// with a failed exec exactly once, whether a page ends full or at the scan
// bound, newest first.
func TestListFailedPages(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		failing func(i int) bool
	}{
		{"a page fills before the scan bound", 1100, func(i int) bool { return i%3 == 0 }},
		{"the scan bound ends a page", 1100, func(i int) bool { return i == 5 || i == 1050 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := memory.New()
			var want []string
			for i := range tc.n {
				id := fmt.Sprintf("s%04d", i)
				ts := int64(1_000_000 + 10*i)
				code := 0
				if tc.failing(i) {
					code = 1
					want = append([]string{id}, want...) // newest first
				}
				if err := st.AppendBatch(ctx, []events.Entry{
					events.New(ts, "n", id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id}),
					events.New(ts+1, "n", id, 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "x"}),
					events.New(ts+2, "n", id, 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1, ExitCode: code}),
				}); err != nil {
					t.Fatal(err)
				}
			}
			s := &Server{cfg: Config{Store: st}}
			var got []string
			var before int64
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("no end to the pages")
				}
				p := listPage{Failed: true}
				if err := s.listFailed(ctx, &p, adapters.ListOptions{Before: before}); err != nil {
					t.Fatal(err)
				}
				if len(p.Sandboxes) > listLimit || p.Scanned > listScanMax {
					t.Fatalf("page of %d rows, %d read", len(p.Sandboxes), p.Scanned)
				}
				for _, d := range p.Sandboxes {
					got = append(got, d.SandboxID)
					if p.FailedOf(d) != 1 {
						t.Errorf("%s: %d failed, want 1", d.SandboxID, p.FailedOf(d))
					}
				}
				if p.NextBefore == 0 {
					break
				}
				before = p.NextBefore
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("sessions over the pages: %d, want %d (first %v, want %v)", len(got), len(want), got[:min(3, len(got))], want[:min(3, len(want))])
			}
		})
	}
}
