package opensandbox_test

import (
	"testing"

	"github.com/alineo-labs/alineo/opensandbox"
)

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		wantURL string
		wantKey string
	}{
		{map[string]string{}, opensandbox.DefaultBaseURL, ""},
		{map[string]string{"OPEN_SANDBOX_URL": "http://10.0.0.1:9000", "OPEN_SANDBOX_API_KEY": "k"}, "http://10.0.0.1:9000/v1", "k"},
		{map[string]string{"OPEN_SANDBOX_DOMAIN": "sb.example.com", "OPEN_SANDBOX_PROTOCOL": "https"}, "https://sb.example.com/v1", ""},
		{map[string]string{"OPEN_SANDBOX_DOMAIN": "localhost:8080"}, "http://localhost:8080/v1", ""},
		{map[string]string{"OPEN_SANDBOX_DOMAIN": "https://x/api", "OPEN_SANDBOX_URL": ""}, "https://x/api", ""},
	}
	for _, tt := range tests {
		cfg := opensandbox.ConfigFromEnv(func(k string) string { return tt.env[k] })
		if cfg.APIKey != tt.wantKey {
			t.Errorf("%v: APIKey = %q, want %q", tt.env, cfg.APIKey, tt.wantKey)
		}
		c, err := opensandbox.New(cfg)
		if err != nil {
			t.Fatalf("%v: New: %v", tt.env, err)
		}
		if got := c.BaseURL(); got != tt.wantURL {
			t.Errorf("%v: BaseURL = %q, want %q", tt.env, got, tt.wantURL)
		}
	}
}
