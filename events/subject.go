package events

import (
	"fmt"
	"strings"
)

// DefaultSubjectPrefix is the subject prefix of the ledger stream.
const DefaultSubjectPrefix = "alineo.ledger"

// Subject returns the subject of ev for sandboxID under prefix
// ("alineo.ledger.<sandboxId>.<event>"). The sandbox id must be one subject
// token: non-empty, without '.', '*', '>' or white space. The event is a known
// name or an extension event (Event.Valid), whose dot-separated tokens are
// subject tokens; ParseSubject maps the subject back.
func Subject(prefix, sandboxID string, ev Event) (string, error) {
	if err := checkToken(sandboxID); err != nil {
		return "", err
	}
	if !ev.Valid() {
		return "", fmt.Errorf("%w: %w", ErrInvalidSubject, CheckEvent(ev))
	}
	return prefix + "." + sandboxID + "." + string(ev), nil
}

// SandboxSubject returns the wildcard subject of every event of one sandbox.
func SandboxSubject(prefix, sandboxID string) (string, error) {
	if err := checkToken(sandboxID); err != nil {
		return "", err
	}
	return prefix + "." + sandboxID + ".>", nil
}

// ParseSubject splits a ledger subject under prefix into its sandbox id and event.
func ParseSubject(prefix, subject string) (sandboxID string, ev Event, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not under %q", ErrInvalidSubject, subject, prefix)
	}
	id, name, ok := strings.Cut(rest, ".")
	if !ok || checkToken(id) != nil || !Event(name).Valid() {
		return "", "", fmt.Errorf("%w: %q", ErrInvalidSubject, subject)
	}
	return id, Event(name), nil
}

func checkToken(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty sandbox id", ErrInvalidSubject)
	}
	if strings.ContainsAny(id, ".*> \t\r\n") {
		return fmt.Errorf("%w: sandbox id %q is not a single subject token", ErrInvalidSubject, id)
	}
	return nil
}
