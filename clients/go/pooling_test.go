package fencing

import (
	"testing"

	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"
)

// cacheMode is how connections of config send statements with arguments:
// "prepare" (named statements), "describe", "none" (no cache) or "simple".
func cacheMode(config *pgx.ConnConfig) string {
	switch {
	case config.PreferSimpleProtocol:
		return "simple"
	case config.BuildStatementCache == nil:
		return "none"
	case config.BuildStatementCache(nil).Mode() == stmtcache.ModeDescribe:
		return "describe"
	default:
		return "prepare"
	}
}

// Behind a transaction-pooling PgBouncer a named prepared statement (pgx's
// default "lrupsc_N_M") outlives the transaction on a server connection
// that other clients then get (42P05 from the second one on).
func TestTheClientMakesNoNamedPreparedStatementsUnlessAsked(t *testing.T) {
	for connString, want := range map[string]string{
		"":                                          "describe",
		"application_name=x":                        "describe",
		"statement_cache_mode=prepare":              "prepare",
		"statement_cache_capacity=100":              "prepare",
		"statement_cache_capacity=0":                "none",
		"prefer_simple_protocol=true":               "simple",
		"statement_cache_mode=describe":             "describe",
		"postgres:///?application_name=x":           "describe",
		"postgres:///?statement_cache_mode=prepare": "prepare",
	} {
		client, err := New(connString)
		if err != nil {
			t.Fatalf("New(%q): %v", connString, err)
		}
		if got := cacheMode(client.config); got != want {
			t.Errorf("New(%q): statements sent in the %q mode, want %q", connString, got, want)
		}
		config, err := pgx.ParseConfig(connString)
		if err != nil {
			t.Fatal(err)
		}
		parsed := cacheMode(config)
		if got := cacheMode(NewFromConfig(config).config); got != want {
			t.Errorf("NewFromConfig(%q): statements sent in the %q mode, want %q", connString, got, want)
		}
		if cacheMode(config) != parsed {
			t.Errorf("NewFromConfig(%q) changed the caller's config", connString)
		}
	}

	// On the server: a statement run again and again on one of the client's
	// connections (the observer's read, the heartbeat's renewal) leaves no
	// prepared statement there.
	ctx := testCtx(t)
	conn, err := newClient(t).connect(ctx, "pg_fencing test")
	if err != nil {
		t.Fatal(err)
	}
	defer closeQuietly(conn)
	for i := 0; i < 3; i++ {
		if _, _, err := readLeader(ctx, conn, "go_no_such_lock"); err != nil {
			t.Fatal(err)
		}
	}
	var prepared int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 {
		t.Errorf("%d named prepared statements on the client's connection, want none", prepared)
	}
}
