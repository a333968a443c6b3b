package sandboxd

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxPreferredWait bounds the wait a client may ask for (Prefer: wait=N): a
// longer transition is answered in its current state after it.
const maxPreferredWait = time.Minute

// preference returns the value of the preference name in r's Prefer headers
// (RFC 7240: comma-separated preferences, each a token with an optional
// "=value", then ";"-separated parameters, which are ignored; names are
// case-insensitive, and the first occurrence counts) and whether it is there.
func preference(r *http.Request, name string) (string, bool) {
	for _, h := range r.Header.Values("Prefer") {
		for _, p := range strings.Split(h, ",") {
			p, _, _ = strings.Cut(p, ";")
			k, v, _ := strings.Cut(p, "=")
			if strings.EqualFold(strings.TrimSpace(k), name) {
				return strings.Trim(strings.TrimSpace(v), `"`), true
			}
		}
	}
	return "", false
}

// prefersRepresentation reports whether r asks for the resource in its new
// state in the answer (Prefer: return=representation).
func prefersRepresentation(r *http.Request) bool {
	v, ok := preference(r, "return")
	return ok && strings.EqualFold(v, "representation")
}

// preferredWait is the wait r asks for (Prefer: wait=N seconds), at most
// maxPreferredWait; 0 if none, or not a number of seconds.
func preferredWait(r *http.Request) time.Duration {
	v, ok := preference(r, "wait")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0
	}
	return min(time.Duration(n)*time.Second, maxPreferredWait)
}
