package streammsg

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Request is nats-server's JSApiMsgGetRequest, the fields this module uses:
// the body of a STREAM.MSG.GET request (the leader) and of a DIRECT.GET one
// (any replica).
type Request struct {
	Seq       uint64 `json:"seq,omitempty"`
	LastFor   string `json:"last_by_subj,omitempty"`
	NextFor   string `json:"next_by_subj,omitempty"`
	Batch     int    `json:"batch,omitempty"`
	MaxBytes  int    `json:"max_bytes,omitempty"`
	UpToSeq   uint64 `json:"up_to_seq,omitempty"`
	NoHeaders bool   `json:"no_hdr,omitempty"`
}

// response is nats-server's JSApiMsgGetResponse.
type response struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
}

// APIPrefix returns the prefix of js's API subjects ("$JS.API." by default,
// "$JS.<domain>.API." with a domain), ending with a dot.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		if !strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	}
	return jetstream.DefaultAPIPrefix
}

// Last returns the last message on subject (wildcards allowed) of stream as
// its leader holds it; a ctx without a deadline is bounded by
// DefaultTimeout. It returns jetstream.ErrMsgNotFound when the subject
// holds no message, the server's *jetstream.APIError for other refusals, and
// nats.go's errors (nats.ErrNoResponders, ctx's) as they are.
func Last(ctx context.Context, nc *nats.Conn, apiPrefix, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return Get(ctx, nc, apiPrefix, stream, Request{LastFor: subject})
}

// DefaultTimeout bounds a request whose ctx has no deadline.
const DefaultTimeout = 10 * time.Second

// Get sends req (a sequence, or a subject's last message) to the stream
// leader's STREAM.MSG.GET API and returns the message, with the errors of
// Last.
func Get(ctx context.Context, nc *nats.Conn, apiPrefix, stream string, req Request) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, apiPrefix+"STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp response
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("decode message get response: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	sm := resp.Message
	var hdr nats.Header
	if len(sm.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(sm.Header); err != nil {
			return nil, fmt.Errorf("decode message headers: %w", err)
		}
	}
	return &jetstream.RawStreamMsg{Subject: sm.Subject, Sequence: sm.Sequence, Header: hdr, Data: sm.Data, Time: sm.Time}, nil
}
