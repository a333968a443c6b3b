package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/testenv"
)

func query(t *testing.T, dsn, q string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var s string
	err = conn.QueryRow(ctx, q).Scan(&s)
	return s, err
}

func TestPostgresGivesFreshDatabases(t *testing.T) {
	// The only test of this package on the shared cluster: stop it afterwards
	// (packages with several such tests call StopPostgres from TestMain).
	t.Cleanup(testenv.StopPostgres)
	a, b := testenv.Postgres(t), testenv.Postgres(t)
	if a == b {
		t.Fatalf("two calls returned the same DSN %s", a)
	}
	for _, dsn := range []string{a, b} {
		n, err := query(t, dsn, `SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'`)
		if err != nil || n != "0" {
			t.Fatalf("tables in a fresh database = %s, %v; want 0", n, err)
		}
	}
	if _, err := query(t, a, `SELECT 'x' FROM (SELECT 1) s WHERE false`); err != pgx.ErrNoRows {
		t.Fatalf("query = %v, want ErrNoRows", err)
	}
}

func TestPostgresServerStopStart(t *testing.T) {
	srv := testenv.PostgresServer(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE k (v text); INSERT INTO k VALUES ('kept')`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := query(t, srv.DSN(), `SELECT 'x'`); err == nil {
		t.Fatal("query on a stopped server succeeded")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := query(t, srv.DSN(), `SELECT v FROM k`); err != nil || v != "kept" {
		t.Fatalf("after restart: %q, %v; want kept", v, err)
	}
}
