package sandboxd

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

func TestParseLimits(t *testing.T) {
	for _, c := range []struct {
		in      map[string]string
		want    limits
		wantErr bool
	}{
		{map[string]string{"cpu": "500m", "memory": "512Mi"}, limits{MilliCPU: 500, MemoryBytes: 512 << 20}, false},
		{map[string]string{"cpu": "2", "memory": "2Gi"}, limits{MilliCPU: 2000, MemoryBytes: 2 << 30}, false},
		{map[string]string{"cpu": "0.25", "memory": "1G"}, limits{MilliCPU: 250, MemoryBytes: 1e9}, false},
		{map[string]string{"memory": "1048576"}, limits{MemoryBytes: 1 << 20}, false},
		{map[string]string{"gpu": "0", "ephemeral-storage": "1Gi"}, limits{}, false},
		{nil, limits{}, false},
		{map[string]string{"cpu": ""}, limits{}, true},
		{map[string]string{"cpu": "abc"}, limits{}, true},
		{map[string]string{"cpu": "-1"}, limits{}, true},
		{map[string]string{"cpu": "0m"}, limits{}, true},
		{map[string]string{"cpu": "NaN"}, limits{}, true},
		{map[string]string{"memory": "512Qi"}, limits{}, true},
		{map[string]string{"memory": "Mi"}, limits{}, true},
		{map[string]string{"memory": "1Ki"}, limits{}, true},
		{map[string]string{"memory": "-5Gi"}, limits{}, true},
		{map[string]string{"gpu": "1"}, limits{}, true},
		{map[string]string{"gpu": "x"}, limits{}, true},
	} {
		got, err := parseLimits(c.in)
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("parseLimits(%v) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("parseLimits(%v) error %v does not wrap ErrInvalidRequest", c.in, err)
		}
	}
}

func TestMetadataKeys(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"name", true}, {"runId", true}, {"a.b-c_d", true}, {"example.com/team", true},
		{"", false}, {"-x", false}, {"x-", false}, {"has space", false}, {"opensandbox.io/x", false},
		{"/x", false}, {"Bad_Prefix/x", false}, {string(make([]byte, 64)), false},
	} {
		if err := validateMetaKey(c.key); (err == nil) != c.ok {
			t.Errorf("validateMetaKey(%q) = %v, want ok=%v", c.key, err, c.ok)
		}
	}
	if err := validateMetaValue("k", "Data Processing Sandbox"); err != nil {
		t.Errorf("free-text value rejected: %v", err)
	}
	if err := validateMetaValue("k", "a\nb"); err == nil {
		t.Error("value with a newline accepted")
	}
}

func TestParseMetadataFilter(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"project=Apollo", map[string]string{"project": "Apollo"}, false},
		{"project=Apollo&note=Demo%20Test", map[string]string{"project": "Apollo", "note": "Demo Test"}, false},
		{"a=&b=1", map[string]string{"a": "", "b": "1"}, false},
		{"novalue", nil, true},
		{"=v", nil, true},
		{"a=%zz", nil, true},
	} {
		got, err := parseMetadataFilter(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("parseMetadataFilter(%q) error = %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("parseMetadataFilter(%q) = %v, want %v", c.in, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("parseMetadataFilter(%q)[%q] = %q, want %q", c.in, k, got[k], v)
			}
		}
	}
}

func FuzzParseMetadataFilter(f *testing.F) {
	for _, s := range []string{"", "a=b", "a=b&c=d%20e", "x", "=", "&&", "a=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMetadataFilter(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		for k := range m {
			if k == "" {
				t.Fatalf("empty key accepted from %q", s)
			}
		}
	})
}

func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{"500m", "1", "0.5", "512Mi", "1e3", "-1", "Mi", ""} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, cpu, mem string) {
		l, err := parseLimits(map[string]string{"cpu": cpu, "memory": mem})
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if l.MilliCPU <= 0 || l.MemoryBytes < 1<<20 {
			t.Fatalf("parseLimits(%q, %q) = %+v: accepted a non-positive limit", cpu, mem, l)
		}
	})
}

func TestImageDirName(t *testing.T) {
	for in, want := range map[string]string{
		"ubuntu:22.04":              "ubuntu_22.04",
		"gcr.io/p/model-server:v1":  "gcr.io_p_model-server_v1",
		"..":                        "_..",
		".hidden":                   "_.hidden",
		"":                          "_",
		"../../etc":                 "_.._.._etc",
		"python:3.11@sha256:abcdef": "python_3.11_sha256_abcdef",
	} {
		if got := imageDirName(in); got != want {
			t.Errorf("imageDirName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseNetworkPolicy(t *testing.T) {
	on := &CredentialProxy{Enabled: true}
	for _, c := range []struct {
		name    string
		raw     string
		cp      *CredentialProxy
		wantOn  bool
		wantDef egress.Action
		wantErr bool
	}{
		{"absent", "", nil, false, "", false},
		{"null", "null", nil, false, "", false},
		{"credential proxy alone", "", on, true, egress.Allow, false},
		{"empty object allows all", "{}", nil, true, egress.Allow, false},
		{"rules without default deny", `{"egress":[{"action":"allow","target":"a.com"}]}`, nil, true, "", false},
		{"deny all", `{"defaultAction":"deny"}`, nil, true, egress.Deny, false},
		{"cidr", `{"defaultAction":"deny","egress":[{"action":"allow","target":"10.0.0.0/8"}]}`, on, true, egress.Deny, false},
		{"bad action", `{"egress":[{"action":"maybe","target":"a.com"}]}`, nil, false, "", true},
		{"bad default", `{"defaultAction":"sometimes"}`, nil, false, "", true},
		{"unknown field", `{"ingress":[]}`, nil, false, "", true},
		{"array", `[]`, nil, false, "", true},
		{"trailing garbage", `{"defaultAction":"deny"} x`, nil, false, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol, gotOn, err := parseNetworkPolicy(&CreateRequest{NetworkPolicy: json.RawMessage(c.raw), CredentialProxy: c.cp})
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidRequest) {
					t.Fatalf("err = %v, does not wrap ErrInvalidRequest", err)
				}
				return
			}
			if gotOn != c.wantOn {
				t.Fatalf("on = %v, want %v", gotOn, c.wantOn)
			}
			if gotOn && pol.DefaultAction != c.wantDef {
				t.Fatalf("defaultAction = %q, want %q", pol.DefaultAction, c.wantDef)
			}
		})
	}
}

func FuzzParseNetworkPolicy(f *testing.F) {
	for _, s := range []string{"", "null", "{}", `{"defaultAction":"deny","egress":[{"action":"allow","target":"*.a.com"}]}`, `{"egress":[{"action":"deny","target":"::1/128"}]}`, `[1]`} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, cp bool) {
		pol, on, err := parseNetworkPolicy(&CreateRequest{NetworkPolicy: json.RawMessage(raw), CredentialProxy: &CredentialProxy{Enabled: cp}})
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if on != (pol != nil) {
			t.Fatalf("on = %v with policy %v", on, pol)
		}
		if on {
			// What the create accepted, the sandbox's proxy must accept.
			if _, err := egress.NewEnforcer(pol, egress.DefaultMaxRules); err != nil {
				t.Fatalf("accepted policy %+v rejected by the enforcer: %v", pol, err)
			}
		}
	})
}
