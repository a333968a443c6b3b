package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/projections/projectorcmd"
)

// TestRegistersTheExamples: the binary is projectorcmd over the product's
// tables and the two example projections.
func TestRegistersTheExamples(t *testing.T) {
	var out bytes.Buffer
	if err := projectorcmd.Run(context.Background(), []string{"list"}, func(string) string { return "" }, &out); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"tables", "execstats", "audit"} {
		if !strings.Contains(out.String(), "\n"+n+" ") && !strings.HasPrefix(out.String(), n+" ") {
			t.Errorf("list = %q, want %s", out.String(), n)
		}
	}
}
