package bus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/internal/streammsg"
)

// LastMsg returns the last message on subject (wildcards allowed) as the
// stream leader holds it. Unlike jetstream.Stream's GetLastMsgForSubject,
// which turns into a direct get answered by any replica, possibly a stale
// one, once the stream allows direct gets, it always asks the leader: the
// fence and last-sequence reads depend on it. It returns
// jetstream.ErrMsgNotFound when the subject holds no message. A request
// whose ctx has no deadline is bounded by 10 s. Safe for concurrent use.
func (b *Bus) LastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	return streammsg.Last(ctx, b.nc, jetstream.DefaultAPIPrefix, b.cfg.Stream, subject)
}

// Msg returns the message at stream sequence seq as the stream leader holds
// it (see LastMsg); jetstream.ErrMsgNotFound when there is none.
func (b *Bus) Msg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	return streammsg.Get(ctx, b.nc, jetstream.DefaultAPIPrefix, b.cfg.Stream, streammsg.Request{Seq: seq})
}
