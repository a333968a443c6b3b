package checkpoints

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"
)

// maxMillis bounds the times decoding accepts: those of a JavaScript Date,
// ±8.64e15 ms around the epoch.
const maxMillis = 8.64e15

// millis is a time.Time as the contract writes it: epoch milliseconds.
type millis time.Time

// TruncateTime returns t as checkpoints keep it: UTC, to the millisecond (the
// contract's precision), the zero time staying zero. Stores apply it to
// every time of a checkpoint they store, so what Get returns is what the
// checkpoint's JSON says.
func TruncateTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return fromMillis(t.UnixMilli())
}

func fromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func (m millis) MarshalJSON() ([]byte, error) {
	t := time.Time(m)
	if t.IsZero() {
		return []byte("0"), nil
	}
	return strconv.AppendInt(nil, t.UnixMilli(), 10), nil
}

func (m *millis) UnmarshalJSON(b []byte) error {
	t, err := parseTime(b)
	if err != nil {
		return err
	}
	*m = millis(t)
	return nil
}

// parseTime decodes a createdAt: a number of epoch milliseconds, null, or,
// as this package wrote it before, an RFC 3339 string.
func parseTime(b []byte) (time.Time, error) {
	s := string(b)
	switch {
	case s == "null":
		return time.Time{}, nil
	case len(s) > 0 && s[0] == '"':
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return time.Time{}, errorf(CodeInvalidEntry, "time %s: %v", s, err)
		}
		t, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return time.Time{}, errorf(CodeInvalidEntry, "time %q is neither epoch milliseconds nor RFC 3339", str)
		}
		return TruncateTime(t), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < -maxMillis || n > maxMillis {
			return time.Time{}, errorf(CodeInvalidEntry, "time %d ms is out of a Date's range", n)
		}
		return fromMillis(n), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < -maxMillis || f > maxMillis {
		return time.Time{}, errorf(CodeInvalidEntry, "time %.40s is not epoch milliseconds", s)
	}
	return fromMillis(int64(math.Floor(f))), nil
}

// invalidJSON wraps a decoding error of what into an *Error with
// CodeInvalidEntry, unless it is one already.
func invalidJSON(what string, err error) error {
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	return &Error{Code: CodeInvalidEntry, Message: "decode " + what + ": " + err.Error(), Err: err}
}

// entryJSON is an Entry on the wire. BlobKey and Size are pointers so that
// a file entry always has them and another entry has them only when set.
type entryJSON struct {
	Path    string   `json:"path"`
	Kind    Kind     `json:"kind"`
	BlobKey *string  `json:"blobKey,omitempty"`
	Size    *int64   `json:"size,omitempty"`
	Mode    uint32   `json:"mode,omitempty"`
	ModTime int64    `json:"mtime,omitempty"`
	Target  string   `json:"target,omitempty"`
	Opaque  bool     `json:"opaque,omitempty"`
	UID     int      `json:"uid,omitempty"`
	GID     int      `json:"gid,omitempty"`
	Holes   []Extent `json:"holes,omitempty"`
}

// wire returns e on the wire; its pointers point into e.
func (e *Entry) wire() entryJSON {
	w := entryJSON{Path: e.Path, Kind: e.Kind, Mode: e.Mode, ModTime: e.ModTime, Target: e.Target,
		Opaque: e.Opaque, UID: e.UID, GID: e.GID, Holes: e.Holes}
	if e.Kind == KindFile || e.BlobKey != "" {
		w.BlobKey = &e.BlobKey
	}
	if e.Kind == KindFile || e.Size != 0 {
		w.Size = &e.Size
	}
	return w
}

// entryIn is an Entry as decoding reads it: Entry's fields with their JSON
// names, so that it converts to an Entry. An absent blobKey or size and an
// empty one decode alike, so it needs no pointers (and no allocation).
type entryIn struct {
	Path    string   `json:"path"`
	Kind    Kind     `json:"kind"`
	BlobKey string   `json:"blobKey"`
	Size    int64    `json:"size"`
	Mode    uint32   `json:"mode"`
	ModTime int64    `json:"mtime"`
	Target  string   `json:"target"`
	Opaque  bool     `json:"opaque"`
	UID     int      `json:"uid"`
	GID     int      `json:"gid"`
	Holes   []Extent `json:"holes"`
}

// MarshalJSON writes e as the contract's SandboxSnapshotEntry: a file entry
// with blobKey and size, a dir entry with path and kind, and the additions
// when set.
func (e Entry) MarshalJSON() ([]byte, error) {
	return json.Marshal(e.wire())
}

// UnmarshalJSON reads a SandboxSnapshotEntry. It returns an error wrapping
// ErrInvalidEntry when b is not one.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var w entryIn
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidJSON("snapshot entry", err)
	}
	*e = Entry(w)
	return nil
}

// artifactJSON is an Artifact on the wire.
type artifactJSON struct {
	ArtifactID string `json:"artifactId"`
	Name       string `json:"name"`
	MimeType   string `json:"mimeType"`
	Size       int64  `json:"size"`
	BlobKey    string `json:"blobKey"`
	CreatedAt  millis `json:"createdAt"`
}

func (a *Artifact) wire() artifactJSON {
	return artifactJSON{ArtifactID: a.ArtifactID, Name: a.Name, MimeType: a.MimeType, Size: a.Size,
		BlobKey: a.BlobKey, CreatedAt: millis(a.CreatedAt)}
}

func (w *artifactJSON) artifact() Artifact {
	return Artifact{ArtifactID: w.ArtifactID, Name: w.Name, MimeType: w.MimeType, Size: w.Size,
		BlobKey: w.BlobKey, CreatedAt: time.Time(w.CreatedAt)}
}

// MarshalJSON writes a as the contract's SandboxSnapshotArtifact, createdAt
// in epoch milliseconds.
func (a Artifact) MarshalJSON() ([]byte, error) {
	return json.Marshal(a.wire())
}

// UnmarshalJSON reads a SandboxSnapshotArtifact. It returns an error
// wrapping ErrInvalidEntry when b is not one.
func (a *Artifact) UnmarshalJSON(b []byte) error {
	var w artifactJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidJSON("snapshot artifact", err)
	}
	*a = w.artifact()
	return nil
}

// checkpointJSON is a Checkpoint on the wire, in the contract's order.
// Entries and artifacts are their wire types, which have no methods, so a
// checkpoint of many files encodes in one pass.
type checkpointJSON struct {
	ID          string          `json:"id"`
	ThreadID    string          `json:"threadId"`
	ParentID    *string         `json:"parentCheckpointId"`
	CreatedAt   millis          `json:"createdAt"`
	Reason      Reason          `json:"reason"`
	Label       string          `json:"label,omitempty"`
	SourceRunID string          `json:"sourceRunId,omitempty"`
	ForkedFrom  string          `json:"forkedFrom,omitempty"`
	Files       []entryJSON     `json:"files"`
	Convo       json.RawMessage `json:"conversation"`
	Artifacts   []artifactJSON  `json:"artifacts"`
}

// checkpointIn is a Checkpoint as decoding reads it.
type checkpointIn struct {
	ID          string          `json:"id"`
	ThreadID    string          `json:"threadId"`
	ParentID    *string         `json:"parentCheckpointId"`
	CreatedAt   millis          `json:"createdAt"`
	Reason      Reason          `json:"reason"`
	Label       string          `json:"label"`
	SourceRunID string          `json:"sourceRunId"`
	ForkedFrom  string          `json:"forkedFrom"`
	Files       []entryIn       `json:"files"`
	Convo       json.RawMessage `json:"conversation"`
	Artifacts   []artifactJSON  `json:"artifacts"`
}

var emptyArray = json.RawMessage("[]")

// MarshalJSON writes c as the contract's SandboxCheckpoint, member for
// member:
//
//   - createdAt is epoch milliseconds, a JSON number; the zero time.Time is 0;
//   - parentCheckpointId is a string, or null when ParentID is "";
//   - files, conversation and artifacts are always arrays, [] when empty;
//   - label and sourceRunId, the contract's optional members, are left out
//     when empty;
//   - a file entry always has blobKey and size, a dir entry neither (see
//     Entry.MarshalJSON); artifacts are as Artifact.MarshalJSON writes them.
//
// The additions (forkedFrom, and an entry's mode, mtime, target, opaque, uid,
// gid and holes) are left out when empty, so a checkpoint that uses none of
// them is exactly the contract's document.
//
// json.Marshal(c) validates and compacts what MarshalJSON returns in a second
// pass, which for a checkpoint of many files costs more than the encoding:
// call c.MarshalJSON() directly where that matters, as the stores do.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	w := checkpointJSON{ID: c.ID, ThreadID: c.ThreadID, CreatedAt: millis(c.CreatedAt), Reason: c.Reason,
		Label: c.Label, SourceRunID: c.SourceRunID, ForkedFrom: c.ForkedFrom,
		Files: make([]entryJSON, len(c.Files)), Convo: c.Conversation, Artifacts: make([]artifactJSON, len(c.Artifacts))}
	if c.ParentID != "" {
		w.ParentID = &c.ParentID
	}
	for i := range c.Files {
		w.Files[i] = c.Files[i].wire()
	}
	for i := range c.Artifacts {
		w.Artifacts[i] = c.Artifacts[i].wire()
	}
	if isNull(w.Convo) {
		w.Convo = emptyArray
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a SandboxCheckpoint. It takes what the contract allows
// and what this package wrote before it spoke the contract (which SQLite and
// Postgres stores of that time hold):
//
//   - createdAt as a number of epoch milliseconds (a fraction of a
//     millisecond is dropped; 0 and null are the zero time), or as an
//     RFC 3339 string, truncated to the millisecond;
//   - parentCheckpointId as a string, null, "" or absent (the last three are
//     no parent);
//   - files, conversation and artifacts as arrays, null or absent.
//
// Members it does not know are ignored. It returns an error wrapping
// ErrInvalidEntry, and leaves c as it was, when b is not a checkpoint. It
// does not validate: Validate does, and Append calls it. Calling it directly
// rather than through json.Unmarshal saves a pass over b.
func (c *Checkpoint) UnmarshalJSON(b []byte) error {
	var w checkpointIn
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidJSON("checkpoint", err)
	}
	d := Checkpoint{ID: w.ID, ThreadID: w.ThreadID, CreatedAt: time.Time(w.CreatedAt), Reason: w.Reason,
		Label: w.Label, SourceRunID: w.SourceRunID, ForkedFrom: w.ForkedFrom}
	if w.ParentID != nil {
		d.ParentID = *w.ParentID
	}
	if w.Files != nil {
		d.Files = make([]Entry, len(w.Files))
		for i := range w.Files {
			d.Files[i] = Entry(w.Files[i])
		}
	}
	if w.Artifacts != nil {
		d.Artifacts = make([]Artifact, len(w.Artifacts))
		for i := range w.Artifacts {
			d.Artifacts[i] = w.Artifacts[i].artifact()
		}
	}
	if !isNull(w.Convo) {
		d.Conversation = w.Convo
	}
	*c = d
	return nil
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// appendInputJSON is an AppendInput on the wire: the argument of the
// contract's append.
type appendInputJSON struct {
	Checkpoint   *Checkpoint `json:"checkpoint"`
	ExpectedHead *string     `json:"expectedHeadId"`
	Writer       Writer      `json:"writer"`
}

// MarshalJSON writes in as the argument of the contract's append:
// {checkpoint, expectedHeadId (null when ""), writer}.
func (in AppendInput) MarshalJSON() ([]byte, error) {
	w := appendInputJSON{Checkpoint: in.Checkpoint, Writer: in.Writer}
	if in.ExpectedHead != "" {
		w.ExpectedHead = &in.ExpectedHead
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the argument of the contract's append. It returns an
// error wrapping ErrInvalidEntry when b is not one.
func (in *AppendInput) UnmarshalJSON(b []byte) error {
	var w appendInputJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidJSON("append input", err)
	}
	*in = AppendInput{Checkpoint: w.Checkpoint, Writer: w.Writer}
	if w.ExpectedHead != nil {
		in.ExpectedHead = *w.ExpectedHead
	}
	return nil
}

// forkInputJSON is a ForkInput on the wire (SandboxCheckpointForkInput).
type forkInputJSON struct {
	SourceThreadID          string `json:"sourceThreadId"`
	SourceCheckpointID      string `json:"sourceCheckpointId"`
	DestinationThreadID     string `json:"destinationThreadId"`
	DestinationCheckpointID string `json:"destinationCheckpointId"`
	CreatedAt               millis `json:"createdAt"`
	Writer                  Writer `json:"writer"`
}

// MarshalJSON writes in as the contract's SandboxCheckpointForkInput,
// createdAt in epoch milliseconds (0 for the store's clock).
func (in ForkInput) MarshalJSON() ([]byte, error) {
	return json.Marshal(forkInputJSON{SourceThreadID: in.SourceThreadID, SourceCheckpointID: in.SourceCheckpointID,
		DestinationThreadID: in.DestinationThreadID, DestinationCheckpointID: in.DestinationCheckpointID,
		CreatedAt: millis(in.CreatedAt), Writer: in.Writer})
}

// UnmarshalJSON reads a SandboxCheckpointForkInput. It returns an error
// wrapping ErrInvalidEntry when b is not one.
func (in *ForkInput) UnmarshalJSON(b []byte) error {
	var w forkInputJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return invalidJSON("fork input", err)
	}
	*in = ForkInput{SourceThreadID: w.SourceThreadID, SourceCheckpointID: w.SourceCheckpointID,
		DestinationThreadID: w.DestinationThreadID, DestinationCheckpointID: w.DestinationCheckpointID,
		CreatedAt: time.Time(w.CreatedAt), Writer: w.Writer}
	return nil
}

// MarshalJSON writes l's data as the contract's SandboxCheckpointWriterLease
// does: the writer's threadId, ownerToken and fence, expiresAt in epoch
// milliseconds and renewAfterMs. A lease does not decode: only its store
// hands one out.
func (l *Lease) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Writer
		ExpiresAt    millis `json:"expiresAt"`
		RenewAfterMs int64  `json:"renewAfterMs"`
	}{l.Writer, millis(l.ExpiresAt()), l.RenewAfter.Milliseconds()})
}
