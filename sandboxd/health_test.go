package sandboxd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// TestReady (issue 40 item 8): Server.Ready, what sandboxd's /healthz
// answers, fails naming the checkpoint store while that store is down, and
// passes again once it is back. (cmd/sandboxd's TestRunMetrics takes the
// runtime's binary away.)
func TestReady(t *testing.T) {
	pg := testenv.PostgresServer(t)
	s, _ := startServer(t, sandboxd.Config{Checkpoints: pg.DSN()})
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.Ready(ctx)
	}
	if err := ready(); err != nil {
		t.Fatalf("Ready = %v, want nil", err)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ready(); err == nil || !strings.Contains(err.Error(), "checkpoint store") {
		t.Errorf("Ready with the checkpoint store down = %v, want an error naming it", err)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := ready(); err != nil {
			return errors.New("not ready again yet: " + err.Error())
		}
		return nil
	})
}
