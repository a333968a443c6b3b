package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/streammsg"
)

// The names the bus uses by default (package bus, which this package does
// not import: the auditor's CLI links no NATS server).
const (
	DefaultStream = "ALINEO_LEDGER"
	headerName    = "Alineo-Name"
)

// Stream is a Scanner over the bus's ledger stream: it reads the ledger
// subjects with an ordered consumer, in stream order (append order), up to
// the last message when the scan began.
type Stream struct {
	JS     jetstream.JetStream
	Stream string // default DefaultStream
	Prefix string // subject prefix; default events.DefaultSubjectPrefix
}

// ScanLedger implements Scanner.
func (s Stream) ScanLedger(ctx context.Context, sandboxID string, since, until int64, fn func(events.Entry) error) error {
	name, prefix := s.Stream, s.Prefix
	if name == "" {
		name = DefaultStream
	}
	if prefix == "" {
		prefix = events.DefaultSubjectPrefix
	}
	filter := prefix + ".>"
	if sandboxID != "" {
		var err error
		if filter, err = events.SandboxSubject(prefix, sandboxID); err != nil {
			return err
		}
	}
	st, err := s.JS.Stream(ctx, name)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", name, err)
	}
	// The leader's last message: the stream allows direct gets, which
	// GetLastMsgForSubject would send to any replica, possibly a stale one.
	lastMsg, err := streammsg.Last(ctx, s.JS.Conn(), streammsg.APIPrefix(s.JS), name, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("last message on %s: %w", filter, err)
	}
	last := lastMsg.Sequence
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return fmt.Errorf("ordered consumer on %s: %w", filter, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("read %s: %w", filter, err)
	}
	defer msgs.Stop()
	for {
		nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := msgs.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return nil // nothing more arrives: the messages up to last were removed
			}
			return fmt.Errorf("read %s: %w", filter, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", filter, err)
		}
		var e events.Entry
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			return fmt.Errorf("decode message %d: %w", md.Sequence.Stream, err)
		}
		e.Seq = md.Sequence.Stream
		if e.Name == "" {
			e.Name, _ = url.PathUnescape(m.Headers().Get(headerName))
		}
		if (since == 0 || e.Ts >= since) && (until == 0 || e.Ts <= until) {
			if err := fn(e); err != nil {
				return err
			}
		}
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}

// Connect returns a Stream over the NATS server at url, and a function
// closing its connection.
func Connect(url string) (Stream, func(), error) {
	nc, err := nats.Connect(url, nats.Name("alineo ledger"))
	if err != nil {
		return Stream{}, nil, fmt.Errorf("connect %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return Stream{}, nil, err
	}
	return Stream{JS: js}, nc.Close, nil
}
