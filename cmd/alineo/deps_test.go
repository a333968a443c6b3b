package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoNATSServer: the auditor's CLI talks to the API over HTTP, so its
// binary must not carry the embedded NATS server (package api's server side
// imports bus, which imports it; the client lives in api/apiclient for this).
func TestLinksNoNATSServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var server []string
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.HasPrefix(dep, "github.com/nats-io/nats-server/") {
			server = append(server, dep)
		}
	}
	if len(server) > 0 {
		t.Errorf("cmd/alineo links %d packages of the NATS server (%s, ...); want none", len(server), server[0])
	}
}
