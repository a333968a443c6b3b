package sandboxd_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// metricValue returns the value of the series name{labels} gathered from
// reg: a counter's or gauge's value, a histogram's count; -1 if there is no
// such series.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

// TestMetrics (issue 40 item 8): the server's metrics follow what it did:
// creates (from the host image, a pulled image and a snapshot), a pull
// that found nothing, commands sent to execd directly and through the proxy
// route, a snapshot's
// capture, restore and delete, and the sandboxes by state.
func TestMetrics(t *testing.T) {
	m := sandboxd.NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	regy, _, base := imageServer(t, sandboxd.Config{Metrics: m})
	val := func(name string, labels ...string) float64 { t.Helper(); return metricValue(t, reg, name, labels...) }
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"alineo_sandboxd_sandboxes", []string{"state", "Running"}},
		{"alineo_sandboxd_create_duration_seconds", []string{"result", "ok"}},
		{"alineo_sandboxd_exec_duration_seconds", nil},
		{"alineo_sandboxd_image_pulls_total", []string{"result", "not_found"}},
		{"alineo_sandboxd_image_pull_bytes_total", nil},
		{"alineo_sandboxd_snapshot_bytes_total", []string{"direction", "written", "store", "file"}},
		{"alineo_sandboxd_snapshot_operations_total", []string{"op", "restore", "result", "failed"}},
	} {
		if got := val(c.name, c.labels...); got != 0 {
			t.Errorf("at the start: %s%v = %v, want 0", c.name, c.labels, got)
		}
	}

	src := create(t, base, nil)
	waitState(t, base, src, sandboxd.StateRunning)
	image := regy.Push(t, "test/app:metrics", registrytest.Image(t, appConfig, appLayers(t)...))
	waitState(t, base, imageCreate(t, base, image, nil), sandboxd.StateRunning)
	missing := call(t, "POST", base+"/v1/sandboxes", map[string]any{"image": map[string]any{"uri": regy.Host + "/no/such-image:1"}, "entrypoint": []string{"x"}})
	if missing.Status/100 != 4 && missing.Status != http.StatusAccepted {
		t.Fatalf("create of a missing image: %d %s", missing.Status, missing.Body)
	}

	u, tok := execdEndpoint(t, base, src, true) // through the server's proxy route
	sh(t, u, tok, "head -c 262144 /dev/urandom > /root/blob.bin")
	u, tok = execdEndpoint(t, base, src, false) // to execd itself
	// A command inherits none of execd's descriptors: its config (4) and
	// stats (5) pipes.
	if got, want := sh(t, u, tok, "test -s /root/blob.bin && ls -l /proc/$$/fd/ >&2; test -e /proc/$$/fd/4 || test -e /proc/$$/fd/5 || echo none"), "none"; got != want {
		t.Errorf("a command holds execd's descriptor 4 or 5 (stdout %q)", got)
	}
	// Timed in execd, reported through the init: seen a moment later.
	testenv.Eventually(t, 10*time.Second, func() error {
		if got, want := val("alineo_sandboxd_exec_duration_seconds"), 2.0; got != want {
			return fmt.Errorf("commands timed = %v, want %v", got, want)
		}
		return nil
	})
	snap := snapshot(t, base, src, "")
	waitSnapshot(t, base, snap.ID, sandboxd.SnapshotReady)
	restored, _, _ := fromSnapshot(t, base, snap.ID)
	wantStatus(t, call(t, "DELETE", base+"/v1/snapshots/"+snap.ID, nil), http.StatusNoContent)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"alineo_sandboxd_sandboxes", []string{"state", "Running"}, 3},
		{"alineo_sandboxd_create_duration_seconds", []string{"result", "ok"}, 3},
		{"alineo_sandboxd_create_duration_seconds", []string{"result", "failed"}, 1},
		{"alineo_sandboxd_image_pulls_total", []string{"result", "ok"}, 1},
		{"alineo_sandboxd_image_pulls_total", []string{"result", "not_found"}, 1},
		{"alineo_sandboxd_image_pull_duration_seconds", nil, 2},
		{"alineo_sandboxd_snapshot_operations_total", []string{"op", "capture", "result", "ok"}, 1},
		{"alineo_sandboxd_snapshot_operations_total", []string{"op", "restore", "result", "ok"}, 1},
		{"alineo_sandboxd_snapshot_operations_total", []string{"op", "delete", "result", "ok"}, 1},
		{"alineo_sandboxd_snapshot_operations_total", []string{"op", "capture", "result", "failed"}, 0},
	} {
		if got := val(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"alineo_sandboxd_image_pull_bytes_total", nil, 1},
		{"alineo_sandboxd_snapshot_bytes_total", []string{"direction", "written", "store", "file"}, 262144},
		{"alineo_sandboxd_snapshot_bytes_total", []string{"direction", "read", "store", "file"}, 262144},
	} {
		if got := val(c.name, c.labels...); got < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, got, c.min)
		}
	}

	wantStatus(t, call(t, "DELETE", base+"/v1/sandboxes/"+restored, nil), http.StatusNoContent)
	if got, want := val("alineo_sandboxd_sandboxes", "state", "Running"), 2.0; got != want {
		t.Errorf("after a delete: Running sandboxes = %v, want %v", got, want)
	}
	if t.Failed() {
		var b strings.Builder
		fams, _ := reg.Gather()
		for _, f := range fams {
			b.WriteString(f.String() + "\n")
		}
		t.Logf("metrics:\n%s", b.String())
	}
}
