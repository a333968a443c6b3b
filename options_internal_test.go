package alineo

import (
	"errors"
	"strings"
	"testing"
)

func TestResourcesValidate(t *testing.T) {
	for _, c := range []struct {
		r     Resources
		field string // "" for valid
	}{
		{Resources{}, ""},
		{Resources{CPU: "500m", Memory: "512Mi", GPU: "1"}, ""},
		{Resources{CPU: "2", Memory: "1Gi"}, ""},
		{Resources{CPU: "0.5", Memory: "1e9"}, ""},
		{Resources{CPU: ".5", Memory: "128M"}, ""},
		{Resources{Memory: "100k"}, ""},
		{Resources{Memory: "100K"}, ""},
		{Resources{CPU: "lots"}, "F.CPU"},
		{Resources{CPU: "-1"}, "F.CPU"},
		{Resources{CPU: " 1"}, "F.CPU"},
		{Resources{CPU: "1 "}, "F.CPU"},
		{Resources{Memory: "1GB"}, "F.Memory"},
		{Resources{Memory: "Mi"}, "F.Memory"},
		{Resources{Memory: "1.5.5Gi"}, "F.Memory"},
		{Resources{GPU: "one"}, "F.GPU"},
		{Resources{GPU: "-1"}, "F.GPU"},
	} {
		err := c.r.validate("F")
		var oe *OptionError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.r, err)
		case c.field != "" && (!errors.As(err, &oe) || oe.Field != c.field):
			t.Errorf("%+v: %v, want an *OptionError on %s", c.r, err, c.field)
		}
	}
}

func TestValidateSpawn(t *testing.T) {
	for _, c := range []struct {
		name  string
		runID string
		env   map[string]string
		shell string
		field string // "" for valid
	}{
		{"zero", "", nil, "", ""},
		{"all set", "run-1 (nightly) ü", map[string]string{"A": "1", "my-var": "x=y", "_": ""}, "/bin/bash", ""},
		{"blank run id", " \t", nil, "", "P.RunID"},
		{"control in run id", "a\x00b", nil, "", "P.RunID"},
		{"newline in run id", "a\nb", nil, "", "P.RunID"},
		{"invalid UTF-8 run id", "a\xffb", nil, "", "P.RunID"},
		{"long run id", strings.Repeat("r", maxRunID+1), nil, "", "P.RunID"},
		{"empty env name", "", map[string]string{"": "x"}, "", "P.Env"},
		{"= in env name", "", map[string]string{"A=B": "x"}, "", "P.Env"},
		{"NUL in env name", "", map[string]string{"A\x00": "x"}, "", "P.Env"},
		{"NUL in env value", "", map[string]string{"A": "x\x00"}, "", "P.Env"},
		{"NUL in shell", "", nil, "/bin/sh\x00", "P.Shell"},
	} {
		err := validateSpawn("P.", c.runID, c.env, c.shell)
		var oe *OptionError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want valid", c.name, err)
		case c.field != "" && (!errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, ErrInvalidOptions)):
			t.Errorf("%s: %v, want an *OptionError on %s", c.name, err, c.field)
		}
	}
}

func TestResourcesMerged(t *testing.T) {
	base := Resources{CPU: "1", Memory: "512Mi", GPU: "1"}
	if got, want := (Resources{Memory: "2Gi"}).merged(base), (Resources{CPU: "1", Memory: "2Gi", GPU: "1"}); got != want {
		t.Fatalf("merged = %+v, want %+v", got, want)
	}
	if got := (Resources{}).merged(base); got != base {
		t.Fatalf("zero merged = %+v, want the base", got)
	}
}
