package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// PromtoolInstall is the command that installs promtool where FindPromtool
// looks (make deps runs it when promtool is missing).
const PromtoolInstall = "GOBIN=/usr/local/bin go install github.com/prometheus/prometheus/cmd/promtool@v0.316.0"

// FindPromtool returns the path of Prometheus's promtool: $PROMTOOL, else
// promtool on PATH, in /usr/local/bin or in $GOPATH/bin.
func FindPromtool() (string, error) {
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p, nil
	}
	return testutil.FindTool("promtool")
}

// PromtoolCheck runs `promtool check metrics` on exposition (a /metrics
// answer in the text format) and fails t with what it reports: a metric
// that breaks Prometheus's naming and type conventions (promtool's lint).
// Without promtool it skips t with the command that installs it, or fails
// t when CI=true.
func PromtoolCheck(t testing.TB, exposition string) {
	t.Helper()
	bin, err := FindPromtool()
	if err != nil {
		SkipOrFail(t, fmt.Sprintf("%v (install it: make deps, or %s)", err, PromtoolInstall))
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}
