package checkpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Reason says why a checkpoint was written.
type Reason string

// The reasons of the contract.
const (
	ReasonAutomatic Reason = "automatic"
	ReasonNamed     Reason = "named"
	ReasonForkRoot  Reason = "fork-root"
)

// Kind is the kind of a file entry. The contract has file and dir; symlink and
// whiteout are additions a filesystem snapshot needs.
type Kind string

// Entry kinds.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
	// KindWhiteout records a path deleted in an overlay upper layer (a 0/0
	// character device there). Restoring it onto the lower layer deletes the path.
	KindWhiteout Kind = "whiteout"
)

// Entry is one path of a filesystem snapshot (the contract's
// SandboxSnapshotEntry; its JSON is the contract's, see MarshalJSON). Path is
// relative, slash-separated and clean. The fields after Size are additions,
// left out of the JSON when empty.
type Entry struct {
	Path string // path
	Kind Kind   // kind
	// BlobKey names a file's content in the blob store (blobKey).
	BlobKey string
	// Size is a file's size in bytes (size).
	Size int64
	// Mode holds the permission bits plus setuid, setgid and sticky (07777).
	Mode uint32 // mode
	// ModTime is the modification time in Unix nanoseconds (0 = unknown).
	ModTime int64 // mtime
	// Target is a symlink's target, as stored in the link.
	Target string // target
	// Opaque marks an overlay opaque directory: nothing of the lower layer below it shows.
	Opaque bool // opaque
	// UID and GID are the owner, restored when the restoring process may chown.
	UID int // uid
	GID int // gid
	// Holes are the ranges of a sparse file that hold no data, in order,
	// neither overlapping nor touching, within Size (at most MaxHoles). The
	// file's blob holds the rest, its data ranges one after the other: Size
	// minus the holes' lengths bytes. A restore leaves the holes unwritten.
	Holes []Extent // holes
}

// Extent is a byte range of a file.
type Extent struct {
	Offset int64 `json:"off"`
	Length int64 `json:"len"`
}

// MaxHoles bounds the holes of one Entry.
const MaxHoles = 4096

// DataSize is the bytes of e's content that are not holes: the size of a
// file entry's blob.
func (e Entry) DataSize() int64 {
	n := e.Size
	for _, h := range e.Holes {
		n -= h.Length
	}
	return n
}

// Artifact is a named blob attached to a checkpoint (the contract's
// SandboxSnapshotArtifact; its JSON is the contract's, createdAt in epoch
// milliseconds).
type Artifact struct {
	ArtifactID string    // artifactId
	Name       string    // name
	MimeType   string    // mimeType
	Size       int64     // size
	BlobKey    string    // blobKey
	CreatedAt  time.Time // createdAt; stores keep milliseconds (TruncateTime)
}

// Checkpoint is one node of a thread's lineage (the contract's
// SandboxCheckpoint). Its JSON is the contract's document: see MarshalJSON
// and UnmarshalJSON, and the member each field is in the comments.
type Checkpoint struct {
	ID       string // id
	ThreadID string // threadId
	// ParentID is the previous checkpoint of the thread; "" for the first one
	// and for a fork-root (parentCheckpointId, null when "").
	ParentID string
	// CreatedAt is set to the store's clock when zero. Stores keep
	// milliseconds, the contract's precision (createdAt, epoch milliseconds).
	CreatedAt time.Time
	Reason    Reason // reason
	// Label names a checkpoint; optional (label).
	Label string
	// SourceRunID is the run that wrote the checkpoint; optional (sourceRunId).
	SourceRunID string
	// ForkedFrom is the source checkpoint's id on a fork-root (an addition,
	// forkedFrom, left out when empty).
	ForkedFrom string
	Files      []Entry    // files
	Artifacts  []Artifact // artifacts
	// Conversation is the contract's ModelMessage list, kept as opaque JSON:
	// an array, or empty for none (conversation, [] when empty).
	Conversation json.RawMessage
}

// Clone returns a deep copy of c, so stores never share slices with callers.
func (c *Checkpoint) Clone() *Checkpoint {
	if c == nil {
		return nil
	}
	d := *c
	d.Files = append([]Entry(nil), c.Files...)
	for i := range d.Files {
		if d.Files[i].Holes != nil {
			d.Files[i].Holes = append([]Extent(nil), d.Files[i].Holes...)
		}
	}
	d.Artifacts = append([]Artifact(nil), c.Artifacts...)
	if c.Conversation != nil {
		d.Conversation = append(json.RawMessage(nil), c.Conversation...)
	}
	return &d
}

// BlobKeys returns every blob key c references, once per reference: one per
// file entry and one per artifact. This is how reference counts are counted.
func (c *Checkpoint) BlobKeys() []string {
	var keys []string
	for _, e := range c.Files {
		if e.Kind == KindFile {
			keys = append(keys, e.BlobKey)
		}
	}
	for _, a := range c.Artifacts {
		keys = append(keys, a.BlobKey)
	}
	return keys
}

// MaxIDLen is the longest id a store accepts, in bytes.
const MaxIDLen = 256

// ValidateID returns an error wrapping ErrInvalidID unless id is usable as a
// checkpoint or thread id: 1 to MaxIDLen bytes of valid UTF-8 with no
// whitespace, control characters, slashes or backslashes (ids appear in URL
// paths), and not "." or "..".
func ValidateID(what, id string) error {
	switch {
	case id == "":
		return errorf(CodeInvalidID, "%s is empty", what)
	case len(id) > MaxIDLen:
		return errorf(CodeInvalidID, "%s is longer than %d bytes", what, MaxIDLen)
	case !utf8.ValidString(id):
		return errorf(CodeInvalidID, "%s %q is not valid UTF-8", what, id)
	case id == "." || id == "..":
		return errorf(CodeInvalidID, "%s %q is reserved", what, id)
	}
	for _, r := range id {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == '/' || r == '\\' {
			return errorf(CodeInvalidID, "%s %q contains %q", what, id, r)
		}
	}
	return nil
}

// ValidatePath returns an error wrapping ErrInvalidEntry unless p is a
// relative, clean, slash-separated path inside the snapshot root: not empty,
// not ".", no leading "/", no ".." element, no NUL, valid UTF-8.
func ValidatePath(p string) error {
	switch {
	case p == "" || p == ".":
		return errorf(CodeInvalidEntry, "empty path")
	case !utf8.ValidString(p):
		return errorf(CodeInvalidEntry, "path %q is not valid UTF-8", p)
	case strings.IndexByte(p, 0) >= 0:
		return errorf(CodeInvalidEntry, "path %q contains NUL", p)
	case strings.HasPrefix(p, "/"):
		return errorf(CodeInvalidEntry, "path %q is absolute", p)
	case p == ".." || strings.HasPrefix(p, "../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../"):
		return errorf(CodeInvalidEntry, "path %q escapes the root", p)
	case path.Clean(p) != p:
		return errorf(CodeInvalidEntry, "path %q is not clean (want %q)", p, path.Clean(p))
	}
	return nil
}

// ValidateBlobKey returns an error wrapping ErrInvalidEntry unless key is a
// plausible blob key: non-empty, at most MaxIDLen bytes, printable ASCII with
// no spaces or slashes.
func ValidateBlobKey(key string) error {
	if key == "" || len(key) > MaxIDLen {
		return errorf(CodeInvalidEntry, "blob key %q: want 1 to %d bytes", key, MaxIDLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == '/' || c == '\\' {
			return errorf(CodeInvalidEntry, "blob key %q contains %q", key, c)
		}
	}
	return nil
}

// ValidateEntries returns an error wrapping ErrInvalidEntry unless every entry
// is valid on its own (path, kind and the fields that kind needs, no negative
// size, mode within 07777), no path appears twice, and no entry lies below a
// path that is not a directory in the same list (a symlink "a" and a file
// "a/b" would let a restore write through the link).
func ValidateEntries(entries []Entry) error {
	kinds := make(map[string]Kind, len(entries))
	for i, e := range entries {
		if err := ValidatePath(e.Path); err != nil {
			return errorf(CodeInvalidEntry, "files[%d]: %s", i, err.(*Error).Message)
		}
		if _, dup := kinds[e.Path]; dup {
			return errorf(CodeInvalidEntry, "files[%d]: duplicate path %q", i, e.Path)
		}
		kinds[e.Path] = e.Kind
		if problem := entryProblem(e); problem != "" {
			return errorf(CodeInvalidEntry, "files[%d] %q: %s", i, e.Path, problem)
		}
	}
	for i, e := range entries {
		for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
			if k, ok := kinds[dir]; ok && k != KindDir {
				return errorf(CodeInvalidEntry, "files[%d] %q: lies below %q, a %s", i, e.Path, dir, k)
			}
		}
	}
	return nil
}

// entryProblem says what is wrong with e on its own, but for its path; "" if
// nothing is.
func entryProblem(e Entry) string {
	switch {
	case e.Mode&^07777 != 0:
		return fmt.Sprintf("mode %o has bits outside 07777", e.Mode)
	case e.Size < 0:
		return fmt.Sprintf("negative size %d", e.Size)
	case e.UID < 0 || e.GID < 0:
		return "negative owner"
	}
	return kindProblem(e)
}

// kindProblem says what is wrong with the fields e's kind needs or forbids; ""
// if nothing is.
func kindProblem(e Entry) string {
	switch e.Kind {
	case KindFile:
		if err := ValidateBlobKey(e.BlobKey); err != nil {
			return err.(*Error).Message
		}
		if e.Target != "" || e.Opaque {
			return "a file has no target or opaque flag"
		}
		return holesProblem(e)
	case KindDir:
		if e.BlobKey != "" || e.Size != 0 || e.Target != "" {
			return "a dir has no blob, size or target"
		}
	case KindSymlink:
		if e.Target == "" || strings.IndexByte(e.Target, 0) >= 0 || !utf8.ValidString(e.Target) {
			return "symlink target must be non-empty UTF-8 without NUL"
		}
		if e.BlobKey != "" || e.Opaque {
			return "a symlink has no blob or opaque flag"
		}
	case KindWhiteout:
		if e.BlobKey != "" || e.Size != 0 || e.Target != "" || e.Opaque {
			return "a whiteout has no blob, size, target or opaque flag"
		}
	default:
		return fmt.Sprintf("unknown kind %q", e.Kind)
	}
	if len(e.Holes) > 0 {
		return "only a file has holes"
	}
	return ""
}

// holesProblem says what is wrong with the holes of file entry e; "" if
// nothing is.
func holesProblem(e Entry) string {
	if len(e.Holes) > MaxHoles {
		return fmt.Sprintf("%d holes, more than %d", len(e.Holes), MaxHoles)
	}
	var end int64 // of the previous hole
	for i, h := range e.Holes {
		switch {
		case h.Offset < 0 || h.Length <= 0:
			return fmt.Sprintf("hole %d [%d, +%d) is empty or negative", i, h.Offset, h.Length)
		case i > 0 && h.Offset <= end:
			return fmt.Sprintf("hole %d at %d does not follow the previous one, which ends at %d", i, h.Offset, end)
		case h.Length > e.Size-h.Offset:
			return fmt.Sprintf("hole %d [%d, +%d) passes the size %d", i, h.Offset, h.Length, e.Size)
		}
		end = h.Offset + h.Length
	}
	return ""
}

// Validate checks c as Append receives it: valid ids, a known reason, valid
// entries and artifacts. It returns an *Error with CodeInvalidID or
// CodeInvalidEntry.
func (c *Checkpoint) Validate() error {
	if err := ValidateID("checkpoint id", c.ID); err != nil {
		return err
	}
	if err := ValidateID("thread id", c.ThreadID); err != nil {
		return err
	}
	if c.ParentID != "" {
		if err := ValidateID("parent checkpoint id", c.ParentID); err != nil {
			return err
		}
	}
	switch c.Reason {
	case ReasonAutomatic, ReasonNamed, ReasonForkRoot:
	default:
		return errorf(CodeInvalidEntry, "checkpoint %q: unknown reason %q", c.ID, c.Reason)
	}
	if err := ValidateEntries(c.Files); err != nil {
		return err
	}
	for i, a := range c.Artifacts {
		if a.ArtifactID == "" {
			return errorf(CodeInvalidEntry, "artifacts[%d]: empty artifact id", i)
		}
		if a.Size < 0 {
			return errorf(CodeInvalidEntry, "artifacts[%d] %q: negative size %d", i, a.ArtifactID, a.Size)
		}
		if err := ValidateBlobKey(a.BlobKey); err != nil {
			return errorf(CodeInvalidEntry, "artifacts[%d] %q: %s", i, a.ArtifactID, err.(*Error).Message)
		}
	}
	if !isNull(c.Conversation) {
		if t := bytes.TrimSpace(c.Conversation); !json.Valid(t) || t[0] != '[' {
			return errorf(CodeInvalidEntry, "checkpoint %q: conversation is not a JSON array", c.ID)
		}
	}
	return nil
}

// Stamp sets c's times as stores keep them: CreatedAt to now when it is zero,
// then CreatedAt and every artifact's CreatedAt through TruncateTime. Stores
// call it on their own copy of a checkpoint they append.
func (c *Checkpoint) Stamp(now time.Time) {
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	c.CreatedAt = TruncateTime(c.CreatedAt)
	for i := range c.Artifacts {
		c.Artifacts[i].CreatedAt = TruncateTime(c.Artifacts[i].CreatedAt)
	}
}
