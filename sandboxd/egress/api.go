package egress

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
)

// PolicyStatus is the answer of the /policy routes; Policy is set by GET only.
type PolicyStatus struct {
	Status          string  `json:"status"`
	Mode            string  `json:"mode"`
	EnforcementMode string  `json:"enforcementMode"`
	Reason          string  `json:"reason,omitempty"`
	Policy          *Policy `json:"policy,omitempty"`
}

func (p *Proxy) newAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok")
	})
	auth := func(h http.HandlerFunc) http.Handler { return p.authed(h) }
	mux.Handle("GET /policy", auth(p.getPolicy))
	mux.Handle("PATCH /policy", auth(p.patchPolicy))
	mux.Handle("DELETE /policy", auth(p.deletePolicy))
	mux.Handle("POST /policy", auth(p.setPolicy))
	mux.Handle("PUT /policy", auth(p.setPolicy))
	mux.Handle("POST /credential-vault", auth(p.writeGuard(p.createVault)))
	mux.Handle("GET /credential-vault", auth(p.getVault))
	mux.Handle("PATCH /credential-vault", auth(p.writeGuard(p.patchVault)))
	mux.Handle("DELETE /credential-vault", auth(p.writeGuard(p.deleteVault)))
	mux.Handle("GET /credential-vault/credentials", auth(p.listCredentials))
	mux.Handle("GET /credential-vault/credentials/{name}", auth(p.getCredential))
	mux.Handle("GET /credential-vault/bindings", auth(p.listBindings))
	mux.Handle("GET /credential-vault/bindings/{name}", auth(p.getBinding))
	return mux
}

func (p *Proxy) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(AuthHeader)), []byte(p.cfg.Token)) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

// writeGuard refuses vault writes that could travel in clear text over a
// network: they need TLS or a loopback client (426).
func (p *Proxy) writeGuard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil && !loopback(r.RemoteAddr) {
			http.Error(w, "credential vault writes need TLS or a loopback client", http.StatusUpgradeRequired)
			return
		}
		h(w, r)
	}
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// statusOf maps an error of this package to its API status.
func statusOf(err error) int {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe), errors.Is(err, ErrTooManyRules):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrInvalidPolicy), errors.Is(err, ErrInvalidVault), errors.Is(err, errBadBody):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrPrecondition):
		return http.StatusPreconditionFailed
	}
	return http.StatusInternalServerError
}

func writeErr(w http.ResponseWriter, err error) { http.Error(w, err.Error(), statusOf(err)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

var errBadBody = errors.New("bad request body")

// decode reads a JSON body strictly into v. Empty bodies are allowed only with
// allowEmpty (v is left alone). Errors never quote the body: it may hold
// credential values.
func (p *Proxy) decode(w http.ResponseWriter, r *http.Request, v any, allowEmpty bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return fmt.Errorf("%w: empty body", errBadBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("%w: malformed JSON: unexpected end", errBadBody)
		case errors.As(err, &se):
			return fmt.Errorf("%w: malformed JSON at offset %d", errBadBody, se.Offset)
		case errors.As(err, &te):
			return fmt.Errorf("%w: field %q must be %s", errBadBody, te.Field, te.Type)
		default:
			return fmt.Errorf("%w: %w", errBadBody, err)
		}
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the JSON value", errBadBody)
	}
	return nil
}

func (p *Proxy) status(withPolicy bool) PolicyStatus {
	pol := p.policy.Policy()
	st := PolicyStatus{Status: "ok", Mode: pol.Mode(), EnforcementMode: p.cfg.EnforcementMode}
	if withPolicy {
		st.Policy = &pol
	}
	return st
}

func (p *Proxy) getPolicy(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, p.status(true))
}

func (p *Proxy) patchPolicy(w http.ResponseWriter, r *http.Request) {
	var rules []Rule
	if err := p.decode(w, r, &rules, false); err != nil {
		writeErr(w, err)
		return
	}
	if err := p.policy.Patch(rules); err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("egress policy patched", "rules", len(rules), "mode", p.policy.Mode())
	writeJSON(w, http.StatusOK, p.status(false))
}

func (p *Proxy) deletePolicy(w http.ResponseWriter, r *http.Request) {
	var targets []string
	if err := p.decode(w, r, &targets, false); err != nil {
		writeErr(w, err)
		return
	}
	if err := p.policy.Delete(targets); err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("egress rules removed", "targets", targets, "mode", p.policy.Mode())
	writeJSON(w, http.StatusOK, p.status(false))
}

// setPolicy replaces the policy; an empty body, null or {} resets to deny-all.
func (p *Proxy) setPolicy(w http.ResponseWriter, r *http.Request) {
	var pol *Policy
	if err := p.decode(w, r, &pol, true); err != nil {
		writeErr(w, err)
		return
	}
	if pol == nil {
		pol = &Policy{}
	}
	if err := p.policy.Set(*pol); err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("egress policy set", "rules", len(pol.Egress), "mode", p.policy.Mode())
	writeJSON(w, http.StatusOK, p.status(false))
}

func names[T any](xs []T, name func(T) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

func (p *Proxy) createVault(w http.ResponseWriter, r *http.Request) {
	if err := p.vault.precondition(); err != nil {
		writeErr(w, err)
		return
	}
	var req struct {
		Credentials []Credential `json:"credentials"`
		Bindings    []Binding    `json:"bindings"`
	}
	if err := p.decode(w, r, &req, false); err != nil {
		writeErr(w, err)
		return
	}
	st, err := p.vault.Create(req.Credentials, req.Bindings)
	if err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("credential vault created", "revision", st.Revision,
		"credentials", names(st.Credentials, func(c CredentialMetadata) string { return c.Name }),
		"bindings", names(st.Bindings, func(b BindingMetadata) string { return b.Name }))
	writeJSON(w, http.StatusCreated, st)
}

func (p *Proxy) getVault(w http.ResponseWriter, r *http.Request) {
	st, err := p.vault.State()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (p *Proxy) patchVault(w http.ResponseWriter, r *http.Request) {
	if err := p.vault.precondition(); err != nil {
		writeErr(w, err)
		return
	}
	var req VaultPatch
	if err := p.decode(w, r, &req, false); err != nil {
		writeErr(w, err)
		return
	}
	st, err := p.vault.Patch(req)
	if err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("credential vault patched", "revision", st.Revision,
		"credentials", names(st.Credentials, func(c CredentialMetadata) string { return c.Name }),
		"bindings", names(st.Bindings, func(b BindingMetadata) string { return b.Name }))
	writeJSON(w, http.StatusOK, st)
}

func (p *Proxy) deleteVault(w http.ResponseWriter, r *http.Request) {
	if err := p.vault.Delete(); err != nil {
		writeErr(w, err)
		return
	}
	p.log.Info("credential vault deleted")
	w.WriteHeader(http.StatusNoContent)
}

func (p *Proxy) listCredentials(w http.ResponseWriter, r *http.Request) {
	st, err := p.vault.State()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Revision    int64                `json:"revision"`
		Credentials []CredentialMetadata `json:"credentials"`
	}{st.Revision, st.Credentials})
}

func (p *Proxy) getCredential(w http.ResponseWriter, r *http.Request) {
	c, err := p.vault.Credential(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (p *Proxy) listBindings(w http.ResponseWriter, r *http.Request) {
	st, err := p.vault.State()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Revision int64             `json:"revision"`
		Bindings []BindingMetadata `json:"bindings"`
	}{st.Revision, st.Bindings})
}

func (p *Proxy) getBinding(w http.ResponseWriter, r *http.Request) {
	b, err := p.vault.Binding(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}
