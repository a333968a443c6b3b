package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/alineo-labs/alineo/adapters"
)

func TestTranslate(t *testing.T) {
	s := &Store{}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"unique violation", context.Background(), &pgconn.PgError{Code: "23505"}, adapters.ErrConflict},
		{"admin shutdown", context.Background(), &pgconn.PgError{Code: "57P01"}, adapters.ErrUnavailable},
		{"connection failure", context.Background(), &pgconn.PgError{Code: "08006"}, adapters.ErrUnavailable},
		{"NUL in JSONB", context.Background(), &pgconn.PgError{Code: "22P05"}, adapters.ErrInvalidEntry},
		{"refused", context.Background(), &net.OpError{Op: "dial", Err: errors.New("connection refused")}, adapters.ErrUnavailable},
		{"eof", context.Background(), fmt.Errorf("read: %w", io.ErrUnexpectedEOF), adapters.ErrUnavailable},
		{"canceled", canceled, errors.New("whatever the driver said"), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := s.translate(tt.ctx, "op", tt.err)
			if !errors.Is(got, tt.want) {
				t.Fatalf("translate = %v, want one wrapping %v", got, tt.want)
			}
			if !errors.Is(got, tt.err) && tt.want != context.Canceled {
				t.Fatalf("translate = %v lost the cause %v", got, tt.err)
			}
		})
	}
	if err := s.translate(context.Background(), "op", &pgconn.PgError{Code: "42601"}); errors.Is(err, adapters.ErrUnavailable) || errors.Is(err, adapters.ErrConflict) {
		t.Fatalf("syntax error translated to %v, want neither sentinel", err)
	}
	s.closed = true
	if err := s.translate(context.Background(), "op", errors.New("closed pool")); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
}
