package api

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/alineo-labs/alineo/events"
)

// Role is what a user may do. Each role may do everything the ones before it
// may:
//   - RoleRead: the dashboard, the listings and details, the SSE feed;
//   - RoleWrite: also submit, cancel and retry jobs, and delete sandboxes;
//   - RoleAdmin: also the executors view (GET /v1/executors, /ui/executors),
//     which shows the fleet's hosts and what each runs.
type Role int

// The roles, in increasing order of rights.
const (
	RoleRead Role = iota + 1
	RoleWrite
	RoleAdmin
)

// String returns the role's name in a token file: read, write or admin.
func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleWrite:
		return "write"
	case RoleAdmin:
		return "admin"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole parses a role name of a token file.
func ParseRole(s string) (Role, bool) {
	switch s {
	case "read":
		return RoleRead, true
	case "write":
		return RoleWrite, true
	case "admin":
		return RoleAdmin, true
	}
	return 0, false
}

// User is who a request is made by: a token's name and role.
type User struct {
	Name string
	Role Role
}

// Can reports whether u has at least role r.
func (u User) Can(r Role) bool { return u.Role >= r }

// AdminName is the name of the user the single Config.Token (--token)
// authenticates: one admin.
const AdminName = "admin"

// AnonymousName is the user of a request to a server without tokens: the
// API is open, and every request is an admin's.
const AnonymousName = "anonymous"

// HashPrefix starts every token hash of a token file.
const HashPrefix = "sha256:"

// HashToken returns the hash a token file stores for token: "sha256:" and
// the SHA-256 of the token in lowercase hex. The same as
//
//	printf %s "$TOKEN" | sha256sum | sed 's/^/sha256:/; s/ .*//'
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return HashPrefix + hex.EncodeToString(sum[:])
}

// Token is one line of a token file: a user and the hash of its token.
type Token struct {
	User
	Hash [sha256.Size]byte
}

// ParseTokens reads a token file: one token per line, as three fields
// separated by spaces or tabs,
//
//	# name   role   hash
//	alice    write  sha256:1ec1c26b50d5d3c58d9583181af8076655fe00756bf7285940ba3670f99fcba0
//	ci-bot   read   sha256:…
//
// name is the user's name, recorded as the actor of what it does (at most
// events.MaxActorLen bytes of UTF-8, no spaces); role is read, write or admin;
// hash is HashToken of the token, never the token itself. Blank lines and lines
// starting with # are skipped. Names and hashes must be unique. An error is a
// *TokenFileError (wrapping ErrInvalidTokens) naming the line; it never quotes
// a hash.
func ParseTokens(r io.Reader) ([]Token, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	var out []Token
	names := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		t, reason := parseTokenLine(text)
		if reason != "" {
			return nil, &TokenFileError{Line: line, Reason: reason}
		}
		if first, ok := names[t.Name]; ok {
			return nil, &TokenFileError{Line: line, Reason: fmt.Sprintf("user %q is on line %d already", t.Name, first)}
		}
		if first, ok := hashes[t.Hash]; ok {
			return nil, &TokenFileError{Line: line, Reason: fmt.Sprintf("the token of line %d again: each user needs a token of its own", first)}
		}
		names[t.Name], hashes[t.Hash] = line, line
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, &TokenFileError{Line: line + 1, Reason: "cannot be read", Err: err}
	}
	return out, nil
}

// parseTokenLine parses one non-blank, non-comment line; reason is "" when it
// is valid.
func parseTokenLine(text string) (t Token, reason string) {
	f := strings.Fields(text)
	if len(f) != 3 {
		return t, fmt.Sprintf("has %d fields, want 3: name role sha256:<hex>", len(f))
	}
	t.Name = f[0]
	if err := events.ValidateActor(t.Name); err != nil {
		return t, "user name " + err.(*events.ValidationError).Reason
	}
	role, ok := ParseRole(f[1])
	if !ok {
		return t, fmt.Sprintf("role %q is not one of read, write, admin", f[1])
	}
	t.Role = role
	h, ok := strings.CutPrefix(f[2], HashPrefix)
	if !ok {
		return t, "the token must be stored hashed, as sha256:<64 hex digits> (api hash-token)"
	}
	if len(h) != hex.EncodedLen(sha256.Size) {
		return t, fmt.Sprintf("hash has %d hex digits, want %d", len(h), hex.EncodedLen(sha256.Size))
	}
	if _, err := hex.Decode(t.Hash[:], []byte(h)); err != nil {
		return t, "hash is not hexadecimal"
	}
	return t, ""
}

// Users is the set of tokens the server accepts. Safe for concurrent use:
// Replace swaps the whole set at once (a reload), and a request sees either
// the old set or the new one.
type Users struct {
	tokens atomic.Pointer[[]Token]
}

// NewUsers returns the set ts.
func NewUsers(ts []Token) *Users {
	u := &Users{}
	u.Replace(ts)
	return u
}

// Replace makes ts the accepted tokens.
func (u *Users) Replace(ts []Token) {
	ts = append([]Token(nil), ts...)
	u.tokens.Store(&ts)
}

// Len returns the number of tokens.
func (u *Users) Len() int {
	if u == nil {
		return 0
	}
	return len(*u.tokens.Load())
}

// Lookup returns the user whose token is token. It compares the token's hash
// with every stored hash in constant time, all of them whatever matches, so
// its timing tells nothing of which, or whether one, did.
func (u *Users) Lookup(token string) (User, bool) {
	if u == nil || token == "" {
		return User{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var found User
	match := 0
	for _, t := range *u.tokens.Load() {
		eq := subtle.ConstantTimeCompare(sum[:], t.Hash[:])
		if eq == 1 {
			found = t.User
		}
		match |= eq
	}
	return found, match == 1
}

type userKey struct{}

// withUser returns ctx carrying the request's user.
func withUser(ctx context.Context, u User) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the user a request handled by Server was authenticated
// as, and whether there is one.
func UserFrom(ctx context.Context) (User, bool) {
	u, ok := ctx.Value(userKey{}).(User)
	return u, ok
}
