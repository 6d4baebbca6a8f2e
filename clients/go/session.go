package fencing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgtype"
	"github.com/jackc/pgx/v4"
)

// SessionOptions configure a session (Client.NewSession).
type SessionOptions struct {
	TTL       time.Duration // default 10 s
	Holder    string        // the holder of every lease in it; default DefaultHolder()
	Heartbeat time.Duration // between renewals; default TTL/3
	// OnLost is called once, with a reason, on a goroutine of its own, when
	// the session (and so every lease in it) is lost; never after Close.
	OnLost func(reason string)
}

// Session is one keepalive for many leases (pg_fencing 1.8), as an etcd
// lease is for its keys: one renewal (fencing_session_renew) renews the
// session and with it every lease in it; its loss is every lease's,
// reported once. Mutex, Semaphore and Election take their leases in a
// session.
//
// The client's heartbeat renews it, together with the client's other
// sessions and leases, on the heartbeat's one connection (keepalive.go).
// The session itself has one connection, which short statements take turns
// on: its open, a try, a release, the close, and the join, polls and leave
// of a wait in line. Every wait -- for an exclusive lease, a shared lease or
// a permit, and LockAll's for each of its locks -- is a place in the lock's
// line (pg_fencing 1.10, line.go): short statements on that connection,
// nothing held on the server between them. Only a wait the line cannot hold
// (a second shared lease or permit of a lock where the session has a place:
// CALL fencing_await) gets a connection of its own for its length, so that
// it holds up nothing else in the session.
type Session struct {
	client *Client
	id     int64
	holder string
	beat   *keepalive

	work   chan *pgx.Conn // holds the shared connection while nobody uses it; nil inside once closed by pgx
	mu     sync.Mutex
	closed bool
	places map[string]int // the session's places in each lock's line: waiting, or kept by a lease taken through it
}

// NewSession opens a session at once (fencing_session_open).
func (c *Client) NewSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	ttl := opts.TTL
	if ttl == 0 {
		ttl = defaultTTL
	}
	holder := opts.Holder
	if holder == "" {
		holder = DefaultHolder()
	}
	beat, err := newKeepalive("session", ttl, opts.Heartbeat, "the session ended, or was closed", opts.OnLost)
	if err != nil {
		return nil, err
	}
	s := &Session{client: c, holder: holder, beat: beat, work: make(chan *pgx.Conn, 1)}
	workConn, err := c.connect(ctx, "pg_fencing session "+holder)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	if err := workConn.QueryRow(ctx, "SELECT fencing_session_open($1, $2::interval)",
		holder, interval(ttl)).Scan(&s.id); err != nil {
		closeQuietly(workConn)
		return nil, fmt.Errorf("pg_fencing: opening a session for %q: %w", holder, err)
	}
	s.work <- workConn
	beat.begin(sent, c.beats, renewal{session: s.id, ttl: ttl})
	return s, nil
}

// ID is the session's id (fencing_sessions.session_id).
func (s *Session) ID() int64 { return s.id }

// Holder is the holder of every lease in the session.
func (s *Session) Holder() string { return s.holder }

// Err is nil while the session is held, judged on the monotonic clock;
// afterwards an error matching ErrLeaseLost that says why.
func (s *Session) Err() error {
	if reason := s.lostReason(); reason != "" {
		return lostError(s.describe(), 0, reason)
	}
	return nil
}

// lostReason is "" while the session is held, else why not.
func (s *Session) lostReason() string {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return "the session was closed"
	}
	return s.beat.reason()
}

// Held says whether the session, and every lease in it, can still be trusted.
func (s *Session) Held() bool { return s.Err() == nil }

// Done is closed once the session is lost (after OnLost) or closed.
func (s *Session) Done() <-chan struct{} { return s.beat.done }

func (s *Session) describe() string { return fmt.Sprintf("fencing session %d", s.id) }

// Close stops the session's renewals and closes it (fencing_session_close),
// releasing every lease in it: how many. Later calls return 0. The close
// goes on the session's connection, which a wait in line (on another
// goroutine, say) holds for one short statement at a time: it does not
// queue behind the wait, and the wait, which watches Done, ends at once
// (ErrLeaseLost).
func (s *Session) Close(ctx context.Context) (int, error) {
	s.beat.stop()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, nil
	}
	s.closed = true
	s.mu.Unlock()
	var released int
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		defer closeQuietly(conn)
		return conn.QueryRow(ctx, "SELECT fencing_session_close($1::bigint)", s.id).Scan(&released)
	})
	if err != nil {
		return 0, fmt.Errorf("pg_fencing: closing %s: %w", s.describe(), err)
	}
	return released, nil
}

// Lock takes lock name in the session, waiting in the lock's line until
// ctx ends (ErrLeaseLost, without sending, once the session is lost).
func (s *Session) Lock(ctx context.Context, name string) (*SessionLease, error) {
	return s.acquire(ctx, request{lockName: name, kind: Exclusive}, WaitForever)
}

// TryLock takes lock name in the session if it is free: ErrLockTimeout if not.
func (s *Session) TryLock(ctx context.Context, name string) (*SessionLease, error) {
	return s.acquire(ctx, request{lockName: name, kind: Exclusive}, 0)
}

// LockShared takes a shared lease of lock name in the session, beside other
// shared holders, waiting in the lock's line until ctx ends: it waits while
// an exclusive lease lives or a place for one waits (exclusive first). Each
// call takes a lease of its own; one wait at a time per lock in a session.
func (s *Session) LockShared(ctx context.Context, name string) (*SessionLease, error) {
	return s.acquire(ctx, request{lockName: name, kind: Shared}, WaitForever)
}

// TryLockShared takes a shared lease of lock name in the session if no
// exclusive lease (nor a place waiting for one) is in the way:
// ErrLockTimeout if one is.
func (s *Session) TryLockShared(ctx context.Context, name string) (*SessionLease, error) {
	return s.acquire(ctx, request{lockName: name, kind: Shared}, 0)
}

// LockAll takes every one of names or none, waiting up to wait (0: one
// attempt; WaitForever: until ctx ends): a lease per name, in the order
// given (a name given twice, the same lease twice); ErrLockTimeout when
// not all could be had. It never deadlocks with another session's LockAll.
//
// Without a wait it is one statement, fencing_session_acquire_all, which
// takes every lock or none at once. With a wait it waits in line, holding
// no server connection, snapshot or transaction between its short
// statements: one lock at a time, in the byte order of the distinct names
// (the order fencing_session_acquire_all takes them in, so two LockAlls
// with overlapping sets cannot wait for each other), each as Lock waits,
// for the time left. A lock taken while it waits for the next is the
// session's meanwhile, and others see it held: all or none holds for the
// result, not for every instant. When one is not had by the deadline, or
// ctx ends, or an error stops it, every lease it took is given back and
// every place it had left (a lock the session held before the call stays
// held).
func (s *Session) LockAll(ctx context.Context, names []string, wait time.Duration) ([]*SessionLease, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	if wait > 0 && lineable(names) {
		return s.lockAllInLine(ctx, names, wait)
	}
	var tokens pgtype.Int8Array
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return inReadCommitted(ctx, conn, func(tx pgx.Tx) error {
			// Without a wait: it never sleeps (and refuses bad names at once).
			return tx.QueryRow(ctx, "SELECT fencing_session_acquire_all($1::bigint, $2::text[])::bigint[]",
				s.id, names).Scan(&tokens)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pg_fencing: taking %q in %s: %w", names, s.describe(), mapGuardError(err))
	}
	if tokens.Status != pgtype.Present {
		return nil, fmt.Errorf("%w: not all of %q could be had", ErrLockTimeout, names)
	}
	if len(tokens.Elements) != len(names) {
		return nil, fmt.Errorf("pg_fencing: %d tokens for %d locks", len(tokens.Elements), len(names))
	}
	leases := make([]*SessionLease, len(names))
	for i, name := range names {
		leases[i] = &SessionLease{session: s, req: request{lockName: name, kind: Exclusive, session: s.id},
			token: Token(tokens.Elements[i].Int)}
	}
	return leases, nil
}

// lineable: names the line can wait for, one by one; the server's one
// statement refuses the others (none, an empty name) with its own error.
func lineable(names []string) bool {
	for _, name := range names {
		if name == "" {
			return false
		}
	}
	return len(names) > 0
}

// lockAllInLine is LockAll's wait: each distinct name in byte order, as a
// place in its line (waitInLine) for the time left of the whole wait; on
// any failure, what it took is given back (giveBackAll).
func (s *Session) lockAllInLine(ctx context.Context, names []string, wait time.Duration) ([]*SessionLease, error) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted) // byte order, as strcmp: the server's order (COLLATE "C")
	var distinct []string
	for i, name := range sorted {
		if i == 0 || name != sorted[i-1] {
			distinct = append(distinct, name)
		}
	}
	var end time.Time
	if wait != WaitForever {
		end = time.Now().Add(wait)
	}
	taken := make(map[string]*SessionLease, len(distinct))
	var order []*SessionLease // as taken, for the give-back
	for _, name := range distinct {
		left := WaitForever
		if !end.IsZero() {
			// At least a millisecond: the last ones get one look at their
			// turn (a free lock is taken) rather than none.
			if left = time.Until(end); left < time.Millisecond {
				left = time.Millisecond
			}
		}
		lease, err := s.waitInLine(ctx, request{lockName: name, kind: Exclusive, session: s.id}, left)
		if err != nil {
			switch {
			case errors.Is(err, ErrLockTimeout):
				err = fmt.Errorf("%w: not all of %q could be had (waited %v; lock %q stayed busy)", ErrLockTimeout, names, wait, name)
			case ctx.Err() != nil:
				err = fmt.Errorf("pg_fencing: taking %q in %s: %w", names, s.describe(), ctx.Err())
			}
			if notGivenBack := s.giveBackAll(order); notGivenBack != nil {
				err = fmt.Errorf("%w; a lease taken meanwhile was not given back (%v): it lasts until the session ends",
					err, notGivenBack)
			}
			return nil, err
		}
		taken[name] = lease
		order = append(order, lease)
	}
	leases := make([]*SessionLease, len(names))
	for i, name := range names {
		leases[i] = taken[name]
	}
	return leases, nil
}

// giveBackAll releases the leases a LockAll that failed took through the
// line, leaving their places, within giveBackTimeout whatever ctx was. A
// lease the session held before the call (waitInLine answers it without a
// place) is not the call's to give back. Nothing to do once the session is
// lost or closed: its leases and places went, or go, with it.
func (s *Session) giveBackAll(leases []*SessionLease) error {
	if s.lostReason() != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	var first error
	for _, lease := range leases {
		if lease.place == 0 {
			continue
		}
		if _, err := lease.Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// acquire takes a lock of any kind in the session: one attempt for a wait
// of 0, else a place in the lock's line (waitInLine; CALL fencing_await
// for a second shared lease or permit of a lock where the session has a
// place, which the line cannot hold).
func (s *Session) acquire(ctx context.Context, r request, wait time.Duration) (*SessionLease, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	r.session = s.id
	if wait != 0 {
		return s.waitInLine(ctx, r, wait)
	}
	var token Token
	err := s.withConn(ctx, func(conn *pgx.Conn) (err error) {
		token, _, err = acquire(ctx, s.client, conn, r, 0)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &SessionLease{session: s, req: r, token: token}, nil
}

// takePlace counts a wait's place in lock name's line: false (nothing
// counted) for a shared lease or a permit when the session has a place
// there already. The server keeps one place per session and lock, and a
// join again answers that place and its lease: for an exclusive lease the
// one the session would be given again anyway, but a second shared lease
// or permit is another lease.
func (s *Session) takePlace(name string, kind Kind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kind != Exclusive && s.places[name] > 0 {
		return false
	}
	if s.places == nil {
		s.places = make(map[string]int)
	}
	s.places[name]++
	return true
}

// forgetPlace: a place counted by takePlace left (its wait ended without a
// lease, or its lease was released).
func (s *Session) forgetPlace(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.places[name] <= 1 {
		delete(s.places, name)
	} else {
		s.places[name]--
	}
}

// awaitInSession is a wait the line cannot hold (a second shared lease or
// permit of a lock where the session has a place): CALL fencing_await in
// the session, on a connection of its own for its length.
func (s *Session) awaitInSession(ctx context.Context, r request, wait time.Duration) (*SessionLease, error) {
	var token Token
	err := s.onConn(ctx, true, func(conn *pgx.Conn) (err error) {
		token, _, err = acquire(ctx, s.client, conn, r, wait)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &SessionLease{session: s, req: r, token: token}, nil
}

// release is fencing_release of one lease in the session; for one taken
// through the line (place non-zero), the place is left in the same
// statement (the server keeps it while the lease lives), after the release
// so that the release's answer is the lease's own.
func (s *Session) release(ctx context.Context, r request, token Token, place int64) (bool, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false, nil
	}
	var ours bool
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		if place != 0 {
			var left bool
			return conn.QueryRow(ctx, "SELECT fencing_release($1, $2::fencing_token), fencing_line_leave($3::bigint)",
				r.lockName, token, place).Scan(&ours, &left)
		}
		return conn.QueryRow(ctx, "SELECT fencing_release($1, $2::fencing_token)", r.lockName, token).Scan(&ours)
	})
	if err != nil {
		return false, fmt.Errorf("pg_fencing: releasing %s (token %d) in %s: %w", r.describe(), token, s.describe(), err)
	}
	return ours, nil
}

// onConn runs fn on a connection of its own for a statement that may wait,
// so that it holds up nothing else in the session, else on the shared one.
func (s *Session) onConn(ctx context.Context, mayWait bool, fn func(*pgx.Conn) error) error {
	if !mayWait {
		return s.withConn(ctx, fn)
	}
	conn, err := s.client.connect(ctx, "pg_fencing session "+s.holder)
	if err != nil {
		return err
	}
	defer closeQuietly(conn)
	return fn(conn)
}

// withConn lends the shared connection to fn, waiting for it no longer
// than ctx allows, and makes it again if pgx closed it (a statement whose
// context ended).
func (s *Session) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	var conn *pgx.Conn
	select {
	case conn = <-s.work:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { s.work <- conn }()
	if conn == nil || conn.IsClosed() {
		var err error
		if conn, err = s.client.connect(ctx, "pg_fencing session "+s.holder); err != nil {
			conn = nil
			return err
		}
	}
	return fn(conn)
}

func (s *Session) String() string {
	state := "held"
	if !s.Held() {
		state = "not held"
	}
	return fmt.Sprintf("<Session %d holder=%q %s>", s.id, s.holder, state)
}

// SessionLease is a lease in a session: its own token, the session's end.
type SessionLease struct {
	session *Session
	req     request
	token   Token
	place   int64 // its place in the lock's line, when taken through it; else 0

	mu       sync.Mutex
	released bool
}

// Token is the fencing token of the grant.
func (l *SessionLease) Token() Token { return l.token }

// LockName is the name of the lock.
func (l *SessionLease) LockName() string { return l.req.lockName }

// Session is the session the lease is in.
func (l *SessionLease) Session() *Session { return l.session }

// Err is nil while the lease is held: not released, and the session held.
func (l *SessionLease) Err() error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	what := fmt.Sprintf("%s in %s", l.req.describe(), l.session.describe())
	if released {
		return lostError(what, l.token, "released")
	}
	if reason := l.session.lostReason(); reason != "" {
		return lostError(what, l.token, reason)
	}
	return nil
}

// Held says whether the lease can still be trusted.
func (l *SessionLease) Held() bool { return l.Err() == nil }

// Exec runs a fenced write (FencedExec) under the lease: ErrLeaseLost
// without sending anything once the lease is known lost.
func (l *SessionLease) Exec(ctx context.Context, db Beginner, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	return fencedExec(ctx, l, db, sql, args)
}

// Release takes this lease out of the session (fencing_release); the
// session lives on. Whether it was still ours; later calls return false.
func (l *SessionLease) Release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return false, nil
	}
	l.released = true
	l.mu.Unlock()
	if l.place != 0 {
		l.session.forgetPlace(l.req.lockName)
	}
	return l.session.release(ctx, l.req, l.token, l.place)
}

func (l *SessionLease) String() string {
	state := "held"
	if !l.Held() {
		state = "not held"
	}
	return fmt.Sprintf("<SessionLease %s in %s token=%d %s>", l.req.describe(), l.session.describe(), l.token, state)
}

func closeQuietly(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
