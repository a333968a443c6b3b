package sandboxd

import (
	"testing"
)

func TestSmoke(t *testing.T) {
	_, base := startServer(t, Config{})
	id := create(t, base, nil)
	waitState(t, base, id, StateRunning)
	u, tok := execdEndpoint(t, base, id, false)
	lines, code := run(t, u, tok, "echo hi; cat /proc/1/cmdline; hostname")
	t.Logf("%q %d", lines, code)
}
