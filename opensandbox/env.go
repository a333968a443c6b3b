package opensandbox

import "strings"

// ConfigFromEnv returns a Config read from the ecosystem's environment variables:
// OPEN_SANDBOX_URL for the base URL, else OPEN_SANDBOX_DOMAIN (may include a
// scheme) with OPEN_SANDBOX_PROTOCOL (default http), the official SDKs' names; and
// OPEN_SANDBOX_API_KEY. Unset variables leave the zero value (defaults). getenv is
// usually os.Getenv.
func ConfigFromEnv(getenv func(string) string) Config {
	var cfg Config
	cfg.BaseURL = strings.TrimSpace(getenv("OPEN_SANDBOX_URL"))
	if cfg.BaseURL == "" {
		if domain := strings.TrimSpace(getenv("OPEN_SANDBOX_DOMAIN")); domain != "" {
			if strings.Contains(domain, "://") {
				cfg.BaseURL = domain
			} else {
				proto := strings.TrimSpace(getenv("OPEN_SANDBOX_PROTOCOL"))
				if proto == "" {
					proto = "http"
				}
				cfg.BaseURL = proto + "://" + domain
			}
		}
	}
	cfg.APIKey = getenv("OPEN_SANDBOX_API_KEY")
	return cfg
}
