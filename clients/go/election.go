package fencing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Channel is the LISTEN channel of pg_fencing's announcements.
const Channel = "fencing_events"

// Leader is the live holder of a lock's exclusive lease.
type Leader struct {
	Holder  string
	Token   Token
	Payload string // JSON text as the server prints it; "" for none
}

func (l *Leader) String() string {
	return fmt.Sprintf("<Leader holder=%q token=%d payload=%s>", l.Holder, l.Token, l.Payload)
}

// The live lease and how long it has to run by the server's clock, so that
// the client's clock and the server's never meet.
const readLeaderSQL = "SELECT holder, token::bigint, coalesce(payload::text, ''), " +
	"ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint " +
	"FROM fencing_leases WHERE lock_name = $1 AND state = 'live'"

// readLeader is the live leader (nil: none) and the time its lease has left.
func readLeader(ctx context.Context, conn *pgx.Conn, name string) (*Leader, time.Duration, error) {
	var leader Leader
	var token, leftMs int64
	err := conn.QueryRow(ctx, readLeaderSQL, name).Scan(&leader.Holder, &token, &leader.Payload, &leftMs)
	if err == pgx.ErrNoRows {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	leader.Token = Token(token)
	return &leader, time.Duration(leftMs) * time.Millisecond, nil
}

// Leader is the live holder of name's exclusive lease as the database sees
// it now, or nil.
func (c *Client) Leader(ctx context.Context, name string) (*Leader, error) {
	conn, err := c.connect(ctx, "pg_fencing leader")
	if err != nil {
		return nil, err
	}
	defer closeQuietly(conn)
	leader, _, err := readLeader(ctx, conn, name)
	if err != nil {
		return nil, fmt.Errorf("pg_fencing: reading the leader of %q: %w", name, err)
	}
	return leader, nil
}

// DefaultReread is how often Observe reads the leader without a notification.
const DefaultReread = 5 * time.Second

// Observe sends name's leader now (nil for none), then each change of
// (holder, token) -- a renewal or a proclamation is no change -- until ctx
// ends or an error that no reconnect can mend stops it; then it closes the
// channel. It is NewObserver(ctx, name, reread).Changes(): use NewObserver
// to learn which error stopped it.
func (c *Client) Observe(ctx context.Context, name string, reread time.Duration) <-chan *Leader {
	return c.NewObserver(ctx, name, reread).Changes()
}

// Observer follows the leader of one lock; Client.NewObserver and
// Election.NewObserver make it. Range over Changes, then ask Err why it
// closed, as with a bufio.Scanner or sql.Rows.
type Observer struct {
	changes chan *Leader

	mu  sync.Mutex
	err error
}

// Changes sends the leader now (nil for none), then each change of
// (holder, token), and is closed when the observer stops.
func (o *Observer) Changes() <-chan *Leader { return o.changes }

// Err is the error that stopped the observer once Changes is closed: one a
// reconnect cannot mend (a wrong password, 28P01; a missing extension or
// privilege, 42P01, 42883, 42501; ...), which errors.As finds as the
// server's *pgconn.PgError. nil while Changes is open, and when the
// observer stopped because its context ended.
func (o *Observer) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// NewObserver starts following name's leader, until ctx ends or an error
// that no reconnect can mend (see Observer.Err).
//
// What it sends is always read from the view fencing_leases, never taken
// from a notification: LISTEN fencing_events only makes it read sooner. A
// forged notification (any role may NOTIFY on any channel), a lost one, or
// none at all for a lock whose owner did not turn announcements on changes
// nothing; it also reads when the live lease is due to end by the server's
// clock, and every reread (0: DefaultReread). A connection that broke, or
// was refused for a reason that may pass (no SQLSTATE, class 08 or 53,
// 57P0x), is made again (at once, then after 0.1 s, doubling up to 5 s),
// with LISTEN before the read so that no change slips between.
func (c *Client) NewObserver(ctx context.Context, name string, reread time.Duration) *Observer {
	if reread <= 0 {
		reread = DefaultReread
	}
	o := &Observer{changes: make(chan *Leader)}
	go func() {
		err := c.observe(ctx, name, reread, o.changes)
		o.mu.Lock()
		o.err = err // before the close: whoever sees Changes closed sees it
		o.mu.Unlock()
		close(o.changes)
	}()
	return o
}

// observe sends to changes until ctx ends (nil) or an error that no
// reconnect can mend (that error).
func (c *Client) observe(ctx context.Context, name string, reread time.Duration, changes chan<- *Leader) error {
	var conn *pgx.Conn
	defer func() { closeQuietly(conn) }()
	var last *Leader
	reported := false
	failures := 0
	for ctx.Err() == nil {
		leader, left, err := func() (*Leader, time.Duration, error) {
			if conn == nil {
				var err error
				if conn, err = c.connect(ctx, "pg_fencing observe"); err != nil {
					return nil, 0, err
				}
				if _, err = conn.Exec(ctx, "LISTEN "+Channel); err != nil {
					return nil, 0, err
				}
			}
			return readLeader(ctx, conn, name)
		}()
		if err != nil {
			closeQuietly(conn)
			conn = nil
			if ctx.Err() != nil {
				return nil // the error was the context's (a cancelled statement, say)
			}
			if !mayMend(err) {
				return fmt.Errorf("pg_fencing: observing the leader of %q: %w", name, err)
			}
			failures++
			if !sleepCtx(ctx, reconnectDelay(failures)) {
				return nil
			}
			continue
		}
		failures = 0
		if !reported || changed(last, leader) {
			select {
			case changes <- leader:
			case <-ctx.Done():
				return nil
			}
			last, reported = leader, true
		}
		wake := reread
		if leader != nil && left+10*time.Millisecond < wake {
			wake = left + 10*time.Millisecond
		}
		waitCtx, cancel := context.WithTimeout(ctx, wake)
		// A notification is a hint only: what counts is the read it causes.
		_, _ = conn.WaitForNotification(waitCtx)
		cancel()
		if conn.IsClosed() {
			conn = nil // broken (pgx closed it): made again, LISTEN first
		}
	}
	return nil
}

// mayMend says whether the observer should connect again after err. A
// broken or refused connection may mend by itself: no SQLSTATE (a socket
// error, an unexpected end, a closed connection), class 08 (connection
// exception), 57P0x (the server shutting down or starting up), class 53
// (too many connections, out of memory or disk). Anything else -- a wrong
// password (28P01), a database or extension that is not there, a privilege
// missing (42501) -- would fail the same way at every attempt, and stops
// the observer instead of being retried in silence. The same rule as the
// other pg_fencing clients.
func mayMend(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true
	}
	for _, prefix := range []string{"08", "53", "57P0"} {
		if strings.HasPrefix(pgErr.Code, prefix) {
			return true
		}
	}
	return false
}

// reconnectDelay: after the first failure at once, then 0.1 s, doubling up to 5 s.
func reconnectDelay(failures int) time.Duration {
	if failures <= 1 {
		return 0
	}
	delay := 100 * time.Millisecond << (failures - 2)
	if failures > 8 || delay > 5*time.Second {
		delay = 5 * time.Second
	}
	return delay
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func changed(last, now *Leader) bool {
	if last == nil || now == nil {
		return last != now
	}
	return last.Holder != now.Holder || last.Token != now.Token
}

// Election is leader election on one lock, in a session, as etcd's
// concurrency.Election: the leader is whoever holds the lock's live
// exclusive lease, with the session's holder as its name.
type Election struct {
	session *Session
	name    string

	mu    sync.Mutex
	lease *SessionLease
}

// NewElection makes an election on lock name for candidates in s.
func NewElection(s *Session, name string) *Election { return &Election{session: s, name: name} }

// Campaign waits until this candidate leads, or ctx ends, and returns its
// lease; a leader campaigning again gets its lease back (and publishes the
// new payload). payload (JSON text, "" for none) is published in fencing_leases.
// The wait is a place in the lock's line (pg_fencing 1.10): a follower
// waiting for hours is one row of fencing_line, polled in short statements
// (every 0.5 s, or when the client's listener hears its number), holding no
// snapshot, no transaction and, behind a transaction pooler, no server
// connection between them; at ctx's end the place is left (a grant made
// meanwhile given back). Candidates lead in the order they joined.
func (e *Election) Campaign(ctx context.Context, payload string) (*SessionLease, error) {
	// Always asked of the server, even when this candidate thinks it leads:
	// its lease may have been revoked while the session lived on, and only
	// the server knows. The session's live lease gives its token back.
	// Not under e.mu: IsLeader answers at once during a campaign.
	lease, err := e.session.acquire(ctx, request{lockName: e.name, kind: Exclusive, payload: payload}, WaitForever)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	keepPlace(lease, e.lease)
	e.lease = lease
	e.mu.Unlock()
	return lease, nil
}

// Proclaim publishes a new payload as the live leader: the acquire by the
// live holder replaces it and keeps the token. ErrLeaseLost unless this
// candidate leads, also when the server had ended its lease (revoked, or
// taken over): from then on it no longer leads.
func (e *Election) Proclaim(ctx context.Context, payload string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease == nil {
		return lostError(fmt.Sprintf("leadership of %q", e.name), 0, "not the leader")
	}
	if err := e.lease.Err(); err != nil {
		return err
	}
	lost := func(reason string) error {
		err := lostError(fmt.Sprintf("leadership of %q", e.name), e.lease.token, reason)
		e.lease = nil // no longer leading: IsLeader says so, Resign has nothing to do
		return err
	}
	again, err := e.session.acquire(ctx, request{lockName: e.name, kind: Exclusive, payload: payload}, 0)
	if errors.Is(err, ErrLockTimeout) {
		// Ours ended on the server (revoked, say) and another holds the lock.
		return lost("another holder has the lock")
	}
	if err != nil {
		return err
	}
	if again.token != e.lease.token {
		// Ours had ended: that was a new grant, not a proclamation.
		_, _ = again.Release(ctx)
		return lost("it ended before the proclamation")
	}
	return nil
}

// IsLeader says whether this candidate leads now (its session held).
func (e *Election) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lease != nil && e.lease.Held()
}

// Leader is the live leader as the database sees it now, or nil.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	return e.session.client.Leader(ctx, e.name)
}

// Observe sends the leader now, then each change, until ctx ends or an
// error that no reconnect can mend (Client.Observe, with DefaultReread).
func (e *Election) Observe(ctx context.Context) <-chan *Leader {
	return e.NewObserver(ctx).Changes()
}

// NewObserver follows the leader, telling why it stopped
// (Client.NewObserver, with DefaultReread).
func (e *Election) NewObserver(ctx context.Context) *Observer {
	return e.session.client.NewObserver(ctx, e.name, 0)
}

// Resign gives leadership up (fencing_release). Nothing to do when not
// leading; an error matching ErrLeaseLost if the server no longer had it
// as ours.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	lease := e.lease
	e.lease = nil
	e.mu.Unlock()
	if lease == nil {
		return nil
	}
	ours, err := lease.Release(ctx)
	if err != nil {
		return err
	}
	if !ours {
		return lostError(fmt.Sprintf("leadership of %q", e.name), lease.token, "it had ended before the resignation")
	}
	return nil
}
