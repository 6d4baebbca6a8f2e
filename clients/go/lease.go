package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// LeaseOptions configure a lease of its own (Client.Acquire).
type LeaseOptions struct {
	Kind    Kind   // Exclusive (default), Shared or Permit
	Permits int    // the semaphore's number of permits, for Permit only
	Holder  string // the application's label; default DefaultHolder()
	// TTL: the server ends the lease TTL after the last renewal (default 10 s).
	TTL time.Duration
	// Wait for a busy lock this long (CALL fencing_await); 0 makes one
	// attempt, WaitForever waits until ctx ends.
	Wait      time.Duration
	Payload   string        // JSON text published with an exclusive lease (fencing_leases.payload)
	Heartbeat time.Duration // between renewals; default TTL/3
	// OnLost is called once, with a reason, on a goroutine of its own, when
	// the lease is lost while held; never after Release.
	OnLost func(reason string)
}

const defaultTTL = 10 * time.Second

// Lease is a lease of its own, renewed by the client's heartbeat (with the
// client's other leases and sessions, keepalive.go) until Release. It keeps
// no connection: it is taken on one that is closed once it is granted, and
// released on a short one of its own.
type Lease struct {
	client *Client
	req    request
	token  Token
	beat   *keepalive

	mu       sync.Mutex // guards released
	released bool
}

// Acquire takes a lease of name: ErrLockTimeout when it stays busy; the
// context's error when ctx ends first (the wait ends on the server too).
func (c *Client) Acquire(ctx context.Context, name string, opts LeaseOptions) (*Lease, error) {
	r := request{lockName: name, kind: opts.Kind, permits: opts.Permits, payload: opts.Payload,
		holder: opts.Holder, ttl: opts.TTL}
	if r.kind == "" {
		r.kind = Exclusive
	}
	if r.holder == "" {
		r.holder = DefaultHolder()
	}
	if r.ttl == 0 {
		r.ttl = defaultTTL
	}
	if err := r.check(); err != nil {
		return nil, err
	}
	beat, err := newKeepalive("lease", r.ttl, opts.Heartbeat,
		"the lease expired, was released, revoked or taken over", opts.OnLost)
	if err != nil {
		return nil, err
	}
	conn, err := c.connect(ctx, "pg_fencing lease "+r.holder)
	if err != nil {
		return nil, err
	}
	defer closeQuietly(conn)
	l := &Lease{client: c, req: r, beat: beat}
	token, sent, err := acquire(ctx, c, conn, r, opts.Wait)
	if err != nil {
		return nil, err
	}
	l.token = token
	// A wait can outlast much of the ttl: the server started the lease when
	// it granted it. One renewal right away gives a send time close to the
	// grant.
	if time.Since(sent) > beat.margin {
		sent = time.Now()
		renewCtx, cancel := context.WithTimeout(ctx, r.ttl)
		var ok bool
		err := conn.QueryRow(renewCtx, "SELECT fencing_renew($1, $2::fencing_token, $3::interval)",
			r.lockName, token, interval(r.ttl)).Scan(&ok)
		cancel()
		if err != nil || !ok {
			l.released = true
			if !conn.IsClosed() {
				_, _ = l.releaseOn(ctx, conn)
			} else {
				_, _ = l.releaseOnItsOwn(ctx)
			}
			if err == nil {
				err = fmt.Errorf("%w: %s was granted (token %d) but ended before it could be renewed; ttl too short?",
					ErrLeaseLost, r.describe(), token)
			}
			return nil, err
		}
	}
	beat.begin(sent, c.beats, renewal{lockName: r.lockName, token: token, ttl: r.ttl})
	return l, nil
}

// Token is the fencing token of the grant.
func (l *Lease) Token() Token { return l.token }

// LockName is the name of the lock.
func (l *Lease) LockName() string { return l.req.lockName }

// Holder is the label the lease was taken with.
func (l *Lease) Holder() string { return l.req.holder }

// Err is nil while the lease is held, judged on the monotonic clock;
// afterwards an error matching ErrLeaseLost that says why.
func (l *Lease) Err() error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return lostError(l.req.describe(), l.token, "released")
	}
	if reason := l.beat.reason(); reason != "" {
		return lostError(l.req.describe(), l.token, reason)
	}
	return nil
}

// Held says whether the lease can still be trusted. It cannot close the
// window between the check and the write: the token and the table's guard
// (fencing_protect) do.
func (l *Lease) Held() bool { return l.Err() == nil }

// Done is closed once the lease is lost (after OnLost) or released.
func (l *Lease) Done() <-chan struct{} { return l.beat.done }

// Exec runs a fenced write (FencedExec) under the lease: ErrLeaseLost
// without sending anything once the lease is known lost.
func (l *Lease) Exec(ctx context.Context, db Beginner, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	return fencedExec(ctx, l, db, sql, args)
}

// Release gives the lock back: whether it was still ours on the server.
// Later calls return false.
func (l *Lease) Release(ctx context.Context) (bool, error) {
	return l.release(ctx)
}

func (l *Lease) release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return false, nil
	}
	l.released = true
	l.mu.Unlock()
	l.beat.stop()
	return l.releaseOnItsOwn(ctx)
}

// releaseOnItsOwn releases the lease on a short connection of its own: the
// heartbeat's renews others, and may be in a round (or gone).
func (l *Lease) releaseOnItsOwn(ctx context.Context) (bool, error) {
	conn, err := l.client.connect(ctx, "pg_fencing lease "+l.req.holder)
	if err != nil {
		return false, fmt.Errorf("pg_fencing: releasing %s (token %d): %w", l.req.describe(), l.token, err)
	}
	defer closeQuietly(conn)
	return l.releaseOn(ctx, conn)
}

func (l *Lease) releaseOn(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var ours bool
	err := conn.QueryRow(ctx, "SELECT fencing_release($1, $2::fencing_token)", l.req.lockName, l.token).Scan(&ours)
	if err != nil {
		return false, fmt.Errorf("pg_fencing: releasing %s (token %d): %w", l.req.describe(), l.token, err)
	}
	return ours, nil
}

func (l *Lease) String() string {
	state := "held"
	if !l.Held() {
		state = "not held"
	}
	return fmt.Sprintf("<Lease %s holder=%q token=%d %s>", l.req.describe(), l.req.holder, l.token, state)
}
