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

	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

// Client makes leases, sessions and observers, each on connections of its
// own from one configuration (and so as one role, which renewals and
// releases require).
type Client struct {
	config *pgx.ConnConfig
}

// New parses connString as pgx does; "" takes everything from the PG*
// environment variables.
func New(connString string) (*Client, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pg_fencing: bad connection string: %w", err)
	}
	return &Client{config: config}, nil
}

// NewFromConfig uses a configuration the caller parsed (TLS, dialer, ...).
func NewFromConfig(config *pgx.ConnConfig) *Client {
	return &Client{config: config.Copy()}
}

// connect opens a connection of the client's own, named in
// pg_stat_activity.application_name.
func (c *Client) connect(ctx context.Context, applicationName string) (*pgx.Conn, error) {
	config := c.config.Copy()
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
	random := make([]byte, 4)
	_, _ = rand.Read(random)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(random))
}
