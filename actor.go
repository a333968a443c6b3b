package alineo

import (
	"context"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/alineo-labs/alineo/events"
)

// Who caused an entry is recorded on it (events.Entry.Actor). A handle's
// entries carry one actor, chosen when the handle is made (Sandbox, Resume,
// Fork, Connect): the actor WithActor put in that call's ctx, else the
// parent's for a fork, else Options.Actor, else the process's user@host.

type actorKey struct{}

// WithActor returns a copy of ctx naming actor as who causes what the
// handles made under it (Client.Sandbox, Resume, Connect, Sandbox.Fork)
// record: every entry they write carries it (events.Entry.Actor). A service
// acting for its users sets it per request, as the job executors do
// ("alice via executor-3"). It must be a valid actor (events.ValidateActor),
// else those calls fail with an *OptionError.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf returns the actor WithActor put in ctx, "" for none.
func actorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// checkActorOf returns an *OptionError when ctx names an invalid actor.
func checkActorOf(ctx context.Context) error {
	if err := events.ValidateActor(actorOf(ctx)); err != nil {
		return &OptionError{Field: "actor (WithActor)", Reason: err.Error()}
	}
	return nil
}

// DefaultActor returns the actor of a Client whose Options.Actor is empty:
// the process's user name and host name, "user@host". Either part falls back
// to the uid or "localhost" when it cannot be known; characters an actor may
// not hold are dropped and the result is cut to events.MaxActorLen.
var DefaultActor = sync.OnceValue(func() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = "uid" + strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	a := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name+"@"+host, ""))
	for len(a) > events.MaxActorLen {
		_, n := lastRune(a)
		a = a[:len(a)-n]
	}
	return a
})

func lastRune(s string) (rune, int) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return rune(s[i]), len(s) - i
		}
	}
	return 0, len(s)
}
