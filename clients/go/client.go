package fencing

import (
	"context"
	"crypto/rand"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

// Client makes leases, sessions and observers from one configuration (and
// so as one role, which renewals and releases require). Every lease and
// session it makes -- and every Mutex, Semaphore and Election in those
// sessions -- is renewed by the client's one heartbeat, on one connection
// of its own, opened while there is something to renew (keepalive.go); a
// client made by WithLine shares it. The other connections: each session's
// one for its short statements, a lease's while it is being acquired (its
// CALL fencing_await too) and for its release, each observer's, and
// optionally the line's listener (WithLine). Make one Client per process
// and share it: each Client has a heartbeat of its own.
type Client struct {
	config   *pgx.ConnConfig
	beats    *heartbeat    // renews every lease and session the client makes
	line     LineOptions   // how waits in line learn their turn (WithLine)
	listener *lineListener // LISTENs on fencing_line for them; nil: they poll
}

// New parses connString as pgx does; "" takes everything from the PG*
// environment variables. Unless connString chooses how pgx sends
// statements (statement_cache_mode, statement_cache_capacity or
// prefer_simple_protocol), the client's connections make no named prepared
// statements, so that connString may name a transaction-pooling PgBouncer:
// see withoutNamedStatements.
func New(connString string) (*Client, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pg_fencing: bad connection string: %w", err)
	}
	withoutNamedStatements(config)
	return &Client{config: config, beats: newHeartbeat(config)}, nil
}

// NewFromConfig uses a configuration the caller parsed (TLS, dialer, ...),
// as New does its own: without named prepared statements unless the
// connection string it was parsed from (config.ConnString()) names
// statement_cache_mode, statement_cache_capacity or prefer_simple_protocol.
// A config with PreferSimpleProtocol set, or with no statement cache at
// all (BuildStatementCache nil), is used as it is.
func NewFromConfig(config *pgx.ConnConfig) *Client {
	config = config.Copy()
	withoutNamedStatements(config)
	return &Client{config: config, beats: newHeartbeat(config)}
}

// statementOptions are the keys of a connection string by which the user
// chooses how pgx sends statements; naming any of them keeps pgx's choice.
var statementOptions = []string{"statement_cache_mode", "statement_cache_capacity", "prefer_simple_protocol"}

// withoutNamedStatements replaces pgx's default statement cache, which
// prepares each statement as a named statement ("lrupsc_N_M") living as
// long as the server's session, by its "describe" mode (512 entries, as
// pgx's default). Behind a transaction-pooling PgBouncer a named statement
// stays on a server connection that other clients then get: the next
// connection there to prepare its first statement fails with 42P05
// (prepared statement "lrupsc_1_0" already exists), and one whose next
// transaction runs elsewhere with 26000 (does not exist).
//
// pgx v4 has no QueryExecModeExec (v5's): its choices are
//   - "describe": the first run of a statement on a connection describes it
//     as the unnamed statement (Parse, Describe, Sync), and the cache keeps
//     the server's parameter types; every run then sends Parse, Bind,
//     Describe, Execute and Sync of the unnamed statement together, so they
//     reach one server connection in one go. The arguments are encoded for
//     the parameter types the server gave, exactly as in the prepare mode:
//     a Token as text for a fencing_token parameter (pgx has no binary form
//     of that type), the intervals as the text "N milliseconds".
//   - no cache (statement_cache_capacity=0): pgx prepares the unnamed
//     statement, waits for the answer and binds it in a second exchange;
//     outside a transaction a pooler may give the second one another server
//     connection, with another unnamed statement or none. Not safe.
//   - prefer_simple_protocol: pgx writes the values into the SQL text
//     itself, without the server's types; it would work, but changes how
//     every argument is sent, for nothing that describe mode lacks.
//
// So: "describe", unless the user chose.
func withoutNamedStatements(config *pgx.ConnConfig) {
	if config.PreferSimpleProtocol || config.BuildStatementCache == nil {
		return // the user's choice, named or set in code; neither makes named statements
	}
	// pgx.ParseConfig removes the keys it reads; pgconn's keeps them among
	// the runtime parameters, read from the string, PGSERVICE's file and all.
	if parsed, err := pgconn.ParseConfig(config.ConnString()); err == nil {
		for _, key := range statementOptions {
			if _, named := parsed.RuntimeParams[key]; named {
				return
			}
		}
	}
	config.BuildStatementCache = func(conn *pgconn.PgConn) stmtcache.Cache {
		return stmtcache.New(conn, stmtcache.ModeDescribe, 512)
	}
}

// connect opens a connection of the client's own, named in
// pg_stat_activity.application_name.
func (c *Client) connect(ctx context.Context, applicationName string) (*pgx.Conn, error) {
	return connectConfig(ctx, c.config, applicationName)
}

func connectConfig(ctx context.Context, config *pgx.ConnConfig, applicationName string) (*pgx.Conn, error) {
	config = config.Copy()
	if len(applicationName) > 63 {
		applicationName = applicationName[:63]
	}
	config.RuntimeParams["application_name"] = applicationName
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("pg_fencing: connecting: %w", err)
	}
	return conn, nil
}

// Token is a fencing token. Pass it as the argument of a write: pgx sends
// it as text, which the server casts to fencing_token (a type pgx has no
// binary form for) or to bigint alike.
type Token int64

// EncodeText makes a Token a pgx argument for any integer-like column.
func (t Token) EncodeText(_ *pgtype.ConnInfo, buf []byte) ([]byte, error) {
	return strconv.AppendInt(buf, int64(t), 10), nil
}

// Value makes a Token a database/sql argument.
func (t Token) Value() (driver.Value, error) { return int64(t), nil }

func (t Token) String() string { return strconv.FormatInt(int64(t), 10) }

func parseToken(text string) (Token, error) {
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pg_fencing: the server sent %q as a token: %w", text, err)
	}
	return Token(n), nil
}

// interval is the text the SQL casts to interval: "1500 milliseconds".
func interval(d time.Duration) string {
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	return strconv.FormatInt(ms, 10) + " milliseconds"
}

// DefaultHolder is host:pid:random, new at each call, so that two leases of
// one process never share a grant.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), randomHex(4))
}

// randomHex is n random bytes in hexadecimal.
func randomHex(n int) string {
	random := make([]byte, n)
	_, _ = rand.Read(random)
	return hex.EncodeToString(random)
}
