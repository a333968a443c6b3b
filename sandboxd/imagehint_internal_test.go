package sandboxd

import "testing"

func TestShortImageName(t *testing.T) {
	for _, c := range []struct {
		name  string
		short bool
	}{
		{"python:3.12", true},
		{"python", true},
		{"library/python:3.12", true},
		{"org/app@sha256:0123", true},
		{"ghcr.io/org/app:1", false},
		{"127.0.0.1:5000/app:1", false},
		{"registry:5000/app", false},
		{"localhost/app:1", false},
	} {
		if got := shortImageName(c.name); got != c.short {
			t.Errorf("shortImageName(%q) = %v, want %v", c.name, got, c.short)
		}
	}
}
