package events

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// SandboxCreatedPayload is the payload of sandbox.created, written once the
// container reached Running. Exactly one of ResumedFrom, ForkedFrom, FromSnapshot
// and FromEnvironment is set when the sandbox did not start from its image.
type SandboxCreatedPayload struct {
	SandboxID string            `json:"sandboxId"`
	Resources map[string]string `json:"resources,omitempty"`
	// Image is the image the sandbox runs: the one it was created from, or
	// for a fork or a resume the one of the sandbox it came from; "" when
	// unknown (a restore from a snapshot of unrecorded origin, and every
	// entry the TypeScript SDK writes, which has no such field).
	Image string `json:"image,omitempty"`
	// RunID is resolved once at creation and inherited across resume, fork and restore.
	RunID string `json:"runId,omitempty"`
	// ResumedFrom is the sandbox id this one resumed (client.Resume).
	ResumedFrom string `json:"resumedFrom,omitempty"`
	// SnapshotID is the snapshot the sandbox was created from, if any.
	SnapshotID string `json:"snapshotId,omitempty"`
	// ForkedFrom is the snapshot id a fork started from (sb.Fork).
	ForkedFrom string `json:"forkedFrom,omitempty"`
	// FromSnapshot is the snapshot id of client.RestoreSnapshot.
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	// FromEnvironment is the environment name a sandbox was spawned from.
	FromEnvironment string `json:"fromEnvironment,omitempty"`
	// EgressDefault is the default action of the network policy the sandbox
	// was created with (a policy without rules is recorded by it alone);
	// empty when it had none.
	EgressDefault EgressAction `json:"egressDefault,omitempty"`
}

// ExecStartedPayload is the payload of exec.started. Cmd is set for a command,
// Code for code; Seq equals the entry's StepIndex. An interactive exec (a
// command on a terminal, whose stdin chunks are recorded as exec.output of
// type Stdin) has Interactive set and its Cwd and Env, as the TypeScript SDK
// records them.
type ExecStartedPayload struct {
	Seq         int               `json:"seq"`
	Kind        ExecKind          `json:"kind,omitempty"`
	Cmd         string            `json:"cmd,omitempty"`
	Code        string            `json:"code,omitempty"`
	Fingerprint string            `json:"fingerprint,omitempty"`
	Interactive bool              `json:"interactive,omitempty"`
	Cwd         string            `json:"cwd,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
}

// Text returns the command or the code.
func (p ExecStartedPayload) Text() string {
	if p.Kind == KindCode || (p.Cmd == "" && p.Code != "") {
		return p.Code
	}
	return p.Cmd
}

// Stream names an output stream.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
	// Stdin is what was written to an interactive exec's terminal: recorded,
	// but not output.
	Stdin Stream = "stdin"
)

// ExecOutputPayload is the payload of exec.output: one chunk of one stream.
// Text is the chunk as valid UTF-8. When the chunk's bytes are not valid UTF-8,
// or hold a NUL byte (which a Postgres JSONB column cannot store), Text holds a
// rendering (invalid bytes and NUL as U+FFFD) and Data the exact bytes (base64
// in JSON); Bytes returns the exact bytes either way.
type ExecOutputPayload struct {
	Seq  int    `json:"seq"`
	Type Stream `json:"type"`
	Text string `json:"text"`
	Data []byte `json:"data,omitempty"`
}

// NewOutput returns the payload for chunk b of stream s of exec seq.
func NewOutput(seq int, s Stream, b []byte) ExecOutputPayload {
	p := ExecOutputPayload{Seq: seq, Type: s}
	if utf8.Valid(b) && !bytes.ContainsRune(b, 0) {
		p.Text = string(b)
		return p
	}
	p.Text = render(b)
	p.Data = append([]byte(nil), b...)
	return p
}

// render returns b as valid UTF-8 without NUL, in one pass: each run of
// invalid bytes and each NUL becomes U+FFFD (strings.ToValidUTF8, then NUL
// replaced). Runs of valid bytes are copied whole.
func render(b []byte) string {
	const repl = "\uFFFD"
	var sb strings.Builder
	sb.Grow(len(b) + 2*len(repl))
	invalid := false // the last thing written was an invalid run's U+FFFD
	run := 0         // start of the valid bytes not yet written
	for i := 0; i < len(b); {
		c := b[i]
		if c != 0 && c < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if c != 0 && (r != utf8.RuneError || n > 1) {
			i += n // a valid multi-byte rune
			continue
		}
		if run < i {
			sb.Write(b[run:i])
			invalid = false
		}
		if c == 0 || !invalid {
			sb.WriteString(repl)
		}
		invalid = c != 0
		i += n
		run = i
	}
	if run == 0 {
		return string(b) // nothing to replace (not reached from NewOutput)
	}
	sb.Write(b[run:])
	return sb.String()
}

// Bytes returns the chunk's exact bytes.
func (p ExecOutputPayload) Bytes() []byte {
	if p.Data != nil {
		return p.Data
	}
	return []byte(p.Text)
}

// ExecCompletedPayload is the payload of exec.completed, written when the command
// finished and before a strict failure is raised.
type ExecCompletedPayload struct {
	Seq      int `json:"seq"`
	ExitCode int `json:"exitCode"`
}

// CheckpointCreatedPayload is the payload of sandbox.checkpoint_created.
// Name is the checkpoint's tag, if it has one.
type CheckpointCreatedPayload struct {
	SnapshotID string `json:"snapshotId"`
	Name       string `json:"name,omitempty"`
}

// SandboxClosedPayload is the payload of sandbox.closed when someone other
// than the sandbox's handle ends it, or when the sandbox was not simply
// deleted; a handle's own Close that deleted its sandbox writes none. Reason
// says why ("taken over", "job failed"), By names the new owner (a worker
// id), Job the job whose sandbox it was. Outcome says what became of the
// sandbox on its server (OutcomeClosed, OutcomeExpired, OutcomeUnreachable);
// empty means OutcomeClosed, as everything written before the field was.
//
// A session may end with several sandbox.closed: a later one gives a more
// exact account (a host that comes back records that it deleted a sandbox
// another worker found unreachable); the last one says what happened.
type SandboxClosedPayload struct {
	Reason  string `json:"reason,omitempty"`
	By      string `json:"by,omitempty"`
	Job     string `json:"job,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

// Reasons of SandboxClosedPayload.
const (
	ClosedTakenOver = "taken over"
	ClosedJobFailed = "job failed"
)

// Outcomes of SandboxClosedPayload: what became of the sandbox.
const (
	// OutcomeClosed: the sandbox no longer runs: the recorder deleted it, or
	// its server ended it otherwise than by its expiration.
	OutcomeClosed = "closed"
	// OutcomeExpired: its server ended it when its expiration passed (the
	// status reason ttl_expiry), nobody having renewed it.
	OutcomeExpired = "expired"
	// OutcomeUnreachable: the recorder could not end it nor see it ended:
	// its server did not answer, refused the delete, or is another host's
	// (the sandbox is not on the recorder's server). It may still run,
	// until its expiration.
	OutcomeUnreachable = "unreachable"
)

// Final reports whether p says the sandbox no longer runs: its outcome is
// closed (or empty) or expired.
func (p SandboxClosedPayload) Final() bool { return p.Outcome != OutcomeUnreachable }

// EgressAction is allow or deny.
type EgressAction string

const (
	Allow EgressAction = "allow"
	Deny  EgressAction = "deny"
)

// EgressRulePayload is the payload of egress.rule_added and egress.rule_removed.
// Target is an exact domain, "*.domain", an IP or a CIDR.
type EgressRulePayload struct {
	Action EgressAction `json:"action"`
	Target string       `json:"target"`
}

// CredentialBinding says where a credential is injected: which outbound requests
// match and how the header is formed. It never holds the credential's value.
type CredentialBinding struct {
	// Hosts the binding applies to: exact names or "*.domain".
	Hosts   []string `json:"hosts"`
	Schemes []string `json:"schemes,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Methods []string `json:"methods,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	// Type is "bearer", "basic", "apiKey" or "customHeaders".
	Type string `json:"type"`
	// Header is the header name for apiKey; Headers the names for customHeaders.
	Header  string   `json:"header,omitempty"`
	Headers []string `json:"headers,omitempty"`
}

// CredentialPayload is the payload of credential.bound and credential.revoked:
// the credential's name and binding, never its value.
type CredentialPayload struct {
	Name    string             `json:"name"`
	Binding *CredentialBinding `json:"binding,omitempty"`
	Source  string             `json:"source,omitempty"`
}
