package fencing

// The line (pg_fencing 1.10): every wait in a session -- for an exclusive
// lease, a shared lease or a permit of a semaphore -- is a place the
// database keeps, instead of a statement that runs for the whole wait (CALL
// fencing_await) and holds a server connection meanwhile.
//
//	join   SELECT place, token FROM fencing_line_join(session, lock, wait, payload, kind, permits)
//	poll   SELECT state, token FROM fencing_line_poll(ARRAY[place])
//	leave  SELECT fencing_line_leave(place)
//
// Each is one short statement outside any transaction block, on the
// session's shared connection, so between them a waiting candidate holds
// no transaction, no snapshot and -- through a transaction-pooling PgBouncer
// -- no server connection: it costs the server one row of fencing_line. The
// place takes its lease itself when it joins or polls in its turn: exclusive
// places first, in arrival order; a shared place once no exclusive place
// waits and the exclusive lease has ended; a semaphore's free permits to
// its permit places in arrival order. Nobody outside the line is granted
// what a waiting place is owed meanwhile. A place is polled every
// LineOptions.Poll (0.5 s without a listener), and at once when the
// client's listener, if it has one, hears its number on the channel
// fencing_line.
//
// The server keeps one place per session and lock: a second wait for a
// shared lease or a permit of a lock where the session has a place (one
// waiting, or kept by a lease taken through it) cannot be a place, and is
// CALL fencing_await in the session (Session.awaitInSession), holding a
// connection for its length, as before the line. So is the wait of a lease
// of its own (Client.Acquire with a Wait, acquire.go). Session.LockAll
// waits for its locks one at a time, each a place in its line.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// LineChannel is the channel pg_fencing NOTIFYs, with the number of the
// lock's first waiting place, at the commit of every change that may free
// a lock (pg_fencing 1.10).
const LineChannel = "fencing_line"

const (
	// DefaultLinePoll is the time between two polls of a waiting place
	// without a listener.
	DefaultLinePoll = 500 * time.Millisecond
	// DefaultLinePollListening is that time while a listener LISTENs: a
	// notification wakes the place sooner, the poll is the safety net for a
	// notification lost or sent while the listener was reconnecting.
	DefaultLinePollListening = 2 * time.Second
	// lineListenStartup is how long a wait gives the listener to LISTEN
	// before it joins (it polls on the timer alone until then).
	lineListenStartup = 2 * time.Second
	// lineHeardKept is how many place numbers heard lately are remembered,
	// so that one heard between a join and the watch of its place counts.
	lineHeardKept = 4096
	// lineLastPollAhead is how long before the end of a wait with a
	// deadline (ctx's, or the wait's own) its place is polled a last time,
	// however long the poll period -- or the join's round trip before it,
	// if that is longer: a wait shorter than the period, or a candidate that
	// comes back with such waits (200 ms attempts in a loop), takes its turn
	// when its place is first, instead of holding the line up and leaving
	// the lock free when it leaves. Before the deadline, so that the poll is
	// not cancelled with ctx (nor reaches the server after the place's own
	// end, for a wait of its own); it runs under a context of its own,
	// bounded by giveBackTimeout, so that one queued behind others in a
	// transaction pooler is answered rather than lost.
	lineLastPollAhead = 20 * time.Millisecond
)

// LineOptions configure how a client's waits in line (every wait in a
// session: Session.Lock, LockShared and LockAll, Mutex.Lock,
// Semaphore.Acquire, Election.Campaign) learn that their turn may have come: Client.WithLine.
type LineOptions struct {
	// Listen: one connection of the client's own LISTENs on fencing_line for
	// all its waits, open while some wait uses it, and a place whose number
	// it hears polls at once. Only for a connection string that reaches the
	// server itself (or a session-pooling pooler): through a
	// transaction-pooling PgBouncer a LISTEN stays on whichever server
	// connection ran it, and its notifications are lost, so it is off by
	// default and the waits poll on the timer alone.
	Listen bool
	// ListenConnString, when set, is the listener's connection string (and
	// implies Listen): say the server's own address while everything else
	// goes through a transaction pooler. "" is the client's own.
	ListenConnString string
	// Poll is the time between two polls of a waiting place: default
	// DefaultLinePoll (0.5 s), or DefaultLinePollListening (2 s) while a
	// listener LISTENs.
	Poll time.Duration
}

// WithLine is a client like c (the same connection configuration, and c's
// heartbeat, which renews the leases and sessions of both) whose waits in
// line follow opts. c itself is unchanged; sessions made by the new client
// use its options.
func (c *Client) WithLine(opts LineOptions) (*Client, error) {
	if opts.Poll < 0 {
		return nil, fmt.Errorf("pg_fencing: the line's poll period must not be negative, got %v", opts.Poll)
	}
	n := &Client{config: c.config, beats: c.beats, line: opts}
	if opts.Listen || opts.ListenConnString != "" {
		config := c.config
		if opts.ListenConnString != "" {
			parsed, err := pgx.ParseConfig(opts.ListenConnString)
			if err != nil {
				return nil, fmt.Errorf("pg_fencing: bad connection string for the line's listener: %w", err)
			}
			withoutNamedStatements(parsed)
			config = parsed
		}
		n.listener = &lineListener{config: config}
	}
	return n, nil
}

// linePoll is the time between two polls of a waiting place.
func (c *Client) linePoll(listening bool) time.Duration {
	switch {
	case c.line.Poll > 0:
		return c.line.Poll
	case listening:
		return DefaultLinePollListening
	}
	return DefaultLinePoll
}

// LineListenerErr is the error that stopped the client's listener on
// fencing_line, one no reconnect can mend (a refused login, say): its waits
// poll on the timer alone until a later wait starts the listener again. nil
// while it listens, and for a client without one.
func (c *Client) LineListenerErr() error {
	if c.listener == nil {
		return nil
	}
	c.listener.mu.Lock()
	defer c.listener.mu.Unlock()
	return c.listener.err
}

// waitInLine is a wait in the session, of any kind, as a place in the
// lock's line: ErrLockTimeout once wait has passed, ctx's error when it
// ends first; its place is polled a last time just before the earlier of
// the two (lineLastPollAhead). Either way the place is left
// (fencing_line_leave), which gives back a lease it had taken meanwhile;
// and when a statement's answer was lost (ctx ended while it ran, or the
// connection broke), whatever it may have been granted is given back too,
// as acquire does for CALL fencing_await.
func (s *Session) waitInLine(ctx context.Context, r request, wait time.Duration) (*SessionLease, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if wait < 0 {
		return nil, fmt.Errorf("pg_fencing: wait must not be negative, got %v", wait)
	}
	if !s.takePlace(r.lockName, r.kind) {
		return s.awaitInSession(ctx, r, wait)
	}
	w := &lineWait{s: s, r: r}
	if wait != WaitForever {
		w.end = time.Now().Add(wait)
	}
	token, place, err := w.run(ctx)
	if w.watch != nil {
		w.watch.close()
	}
	if err != nil || token == nil || place == 0 {
		s.forgetPlace(r.lockName) // no place kept: none taken, or given up
	}
	if err != nil || token == nil {
		notGivenBack := w.giveUp()
		switch {
		case err == nil:
			err = busyError(r, wait)
		case ctx.Err() != nil:
			err = fmt.Errorf("pg_fencing: waiting in line for %s: %w", r.describe(), ctx.Err())
		case !errors.Is(err, ErrLeaseLost) && !errors.Is(err, errHeldThroughLine):
			err = fmt.Errorf("pg_fencing: waiting in line for %s: %w", r.describe(), mapGuardError(err))
		}
		if notGivenBack != nil {
			err = fmt.Errorf("%w; a grant the wait may have had was not given back (%v): it lasts until the session ends",
				err, notGivenBack)
		}
		return nil, err
	}
	return &SessionLease{session: s, req: r, token: *token, place: place}, nil
}

// errHeldThroughLine: a join answered a shared lease or permit the session
// already held, taken through the place it has in the lock's line.
var errHeldThroughLine = errors.New("pg_fencing: the session holds a lease of the lock taken through its place in line")

// lineWait is one wait in line.
type lineWait struct {
	s   *Session
	r   request
	end time.Time // zero: until ctx ends

	before      []int64   // the session's live leases of the lock before the wait
	beforeKnown bool      // before was read
	place       int64     // 0 until a join answered
	joinSent    bool      // a join was sent (its answer may have been lost)
	lost        *pgx.Conn // the connection a statement's answer was lost with
	watch       *lineWatch
	once        bool // exec sends once, not again on a new connection (the last poll)
}

// exec runs fn on the session's shared connection, noting the connection
// when pgx closed it under fn (the answer lost: ctx ended while the
// statement ran, or the network failed). Every statement of a wait in line
// may be sent again (a join answers the place the session has, a poll the
// token of a grant while it lives, the read and the attempt change nothing
// the session held), so one that failed with its connection, for a reason
// that may pass (mayMend: a terminated backend, a broken network, a server
// starting up), is sent again on a new connection, at once, then after 0.1
// s doubling up to 5 s, while the session is held and the wait lasts: the
// place is kept by the database, not by the connection.
func (w *lineWait) exec(ctx context.Context, fn func(*pgx.Conn) error) error {
	for failures := 1; ; failures++ {
		if lost := w.s.Err(); lost != nil {
			return lost // closed or lost: nothing to send in it (and no connection to make again)
		}
		var used *pgx.Conn
		err := w.s.withConn(ctx, func(conn *pgx.Conn) error {
			used = conn
			return fn(conn)
		})
		if err == nil {
			w.lost = nil // sent again and answered: nothing unknown is left
			return nil
		}
		broken := used == nil || used.IsClosed()
		if used != nil && used.IsClosed() && w.lost == nil {
			w.lost = used
		}
		if ctx.Err() != nil || !broken || !mayMend(err) || w.left() == 0 || w.once {
			return err
		}
		delay := reconnectDelay(failures)
		if left := w.left(); left >= 0 && left < delay {
			delay = left
		}
		if !sleepCtx(ctx, delay) {
			return ctx.Err()
		}
	}
}

// left is the time the wait has left, or -1 for a wait until ctx ends.
func (w *lineWait) left() time.Duration {
	if w.end.IsZero() {
		return -1
	}
	if left := time.Until(w.end); left > 0 {
		return left
	}
	return 0
}

// lastPoll is when the wait polls its place a last time (zero: never, a
// wait without a deadline): lineLastPollAhead, or the join's round trip if
// longer, before the earlier of its own end and ctx's deadline.
func (w *lineWait) lastPoll(ctx context.Context, joinTook time.Duration) time.Time {
	end := w.end
	if deadline, ok := ctx.Deadline(); ok && (end.IsZero() || deadline.Before(end)) {
		end = deadline
	}
	if end.IsZero() {
		return end
	}
	ahead := lineLastPollAhead
	if joinTook > ahead {
		ahead = joinTook
	}
	return end.Add(-ahead)
}

// ranOut ends a wait whose last poll (or join) found it still waiting: at
// once when its own end comes first (a nil token: ErrLockTimeout), else at
// ctx's deadline (ctx's error; sooner if ctx is cancelled or the session
// ends). giveUp then leaves the place.
func (w *lineWait) ranOut(ctx context.Context) (*Token, int64, error) {
	if deadline, ok := ctx.Deadline(); ok && (w.end.IsZero() || deadline.Before(w.end)) {
		select {
		case <-ctx.Done():
			return nil, w.place, ctx.Err()
		case <-w.s.Done():
			return nil, w.place, w.s.Err()
		}
	}
	return nil, w.place, nil
}

// run is the wait: the token and the place once granted, a nil token when
// the wait ran out.
func (w *lineWait) run(ctx context.Context) (*Token, int64, error) {
	s, r := w.s, w.r
	// What the session holds of the lock already, to tell a grant the wait
	// may have lost from it. A session that holds an exclusive lease gets
	// its token back (and publishes the payload) from one acquire, as CALL
	// fencing_await would at its first attempt; it must not join the line
	// behind others that wait for the lock it holds. (A shared lease or a
	// permit held already is no reason not to wait for another.)
	err := w.exec(ctx, func(conn *pgx.Conn) error {
		grants, args := r.liveGrants()
		return conn.QueryRow(ctx, "SELECT coalesce(array_agg(token::bigint), '{}') FROM ("+grants+") AS g", args...).Scan(&w.before)
	})
	if err != nil {
		return nil, 0, err
	}
	w.beforeKnown = true
	if len(w.before) > 0 && r.kind == Exclusive {
		var granted *string
		err := w.exec(ctx, func(conn *pgx.Conn) error {
			sql, args := r.attempt()
			return inReadCommitted(ctx, conn, func(tx pgx.Tx) error { return tx.QueryRow(ctx, sql, args...).Scan(&granted) })
		})
		if err != nil {
			return nil, 0, err
		}
		if granted != nil {
			token, err := parseToken(*granted)
			return &token, 0, err
		}
		// It ended meanwhile: wait in line as anyone.
	}
	if s.client.listener != nil {
		// Listening before the join, so that the number of the new place
		// is heard from the moment it exists.
		w.watch = s.client.listener.watch(ctx)
	}
	for {
		joining := time.Now()
		token, err := w.join(ctx)
		if err == nil && token != nil && r.kind != Exclusive && w.held(*token) {
			// The place the session has holds this lease already: not a
			// new one (Session.takePlace keeps such a wait out of the line;
			// this is the server's word for it). Left as it is (a leave
			// would give the lease back).
			place := w.place
			w.place = 0
			return nil, 0, fmt.Errorf("%w: %s holds %s with token %d through place %d; release it first, "+
				"or wait for another in another session", errHeldThroughLine, s.describe(), r.describe(), *token, place)
		}
		if err != nil || token != nil {
			return token, w.place, err
		}
		last := w.lastPoll(ctx, time.Since(joining))
		if w.watch != nil {
			w.watch.follow(w.place)
		}
		for {
			listening := w.watch != nil && w.watch.listening()
			period := s.client.linePoll(listening)
			if !last.IsZero() {
				until := time.Until(last)
				if until <= 0 {
					// The join, or the last poll, was just made.
					return w.ranOut(ctx)
				}
				if until < period {
					period = until
				}
			}
			if period > 0 {
				var wake <-chan struct{}
				if w.watch != nil {
					wake = w.watch.wake
				}
				timer := time.NewTimer(period)
				select {
				case <-ctx.Done():
				case <-wake:
				case <-s.Done(): // lost or closed
				case <-timer.C:
				}
				timer.Stop()
			}
			if err := ctx.Err(); err != nil {
				return nil, w.place, err
			}
			if err := s.Err(); err != nil {
				return nil, w.place, err
			}
			final := !last.IsZero() && !time.Now().Before(last)
			pollCtx, cancel := ctx, context.CancelFunc(func() {})
			if final {
				// Its own context: not cancelled at ctx's deadline, even
				// when it waits behind other statements in a pooler.
				pollCtx, cancel = context.WithTimeout(context.Background(), giveBackTimeout)
				w.once = true
			}
			state, token, err := w.poll(pollCtx)
			cancel()
			w.once = false
			if err != nil {
				return nil, w.place, err
			}
			if state == "granted" {
				return token, w.place, nil
			}
			if final {
				return w.ranOut(ctx) // waiting, or gone at the end of its wait
			}
			if state == "gone" {
				// The place ended without a grant the wait knows of: the
				// session ended (the join says so, 55Z05), or the place was
				// left (by another wait of the session for the same lock).
				// Joined anew, at the back, for the time left.
				if err := s.Err(); err != nil {
					return nil, 0, err
				}
				w.place = 0
				break
			}
		}
	}
}

// held says whether token is one the session held before the wait.
func (w *lineWait) held(token Token) bool {
	for _, t := range w.before {
		if t == int64(token) {
			return true
		}
	}
	return false
}

// joinSQL is fencing_line_join of r's lock, kind and permits: $1 the
// session, $2 the lock, $3 the wait, $4 the payload, $5 the kind, $6 the
// permits.
const joinSQL = "fencing_line_join($1::bigint, $2, $3::interval, $4::jsonb, $5, $6::integer)"

// join is fencing_line_join for the time left: the token when the place
// took the lease at once.
func (w *lineWait) join(ctx context.Context) (*Token, error) {
	var waitArg interface{}
	if left := w.left(); left >= 0 {
		waitArg = interval(left)
	}
	var granted *string
	err := w.exec(ctx, func(conn *pgx.Conn) error {
		w.joinSent = true
		return conn.QueryRow(ctx, "SELECT place, token::text FROM "+joinSQL,
			w.s.id, w.r.lockName, waitArg, nullable(w.r.payload), string(w.r.kind), nullable(w.r.permits)).Scan(&w.place, &granted)
	})
	if err != nil || granted == nil {
		return nil, err
	}
	token, err := parseToken(*granted)
	return &token, err
}

// poll is fencing_line_poll of the place: waiting, granted (with the token)
// or gone.
func (w *lineWait) poll(ctx context.Context) (string, *Token, error) {
	var state string
	var granted *string
	err := w.exec(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT state, token::text FROM fencing_line_poll(ARRAY[$1::bigint])", w.place).
			Scan(&state, &granted)
	})
	if err != nil {
		return "", nil, err
	}
	if state != "granted" {
		return state, nil, nil
	}
	if granted == nil {
		return "", nil, fmt.Errorf("pg_fencing: place %d in the line of %s granted without a token", w.place, w.r.describe())
	}
	token, err := parseToken(*granted)
	return state, &token, err
}

// giveUp leaves the place of a wait that ends without its grant (ran out,
// ctx ended, an error): fencing_line_leave, which gives back a lease the
// place had taken. When an answer was lost, it first waits for the backend
// that ran the statement to stop (as giveBack does), leaves the place even
// if its number never arrived (joined again, the same place, then left),
// and releases every live lease of the lock in the session that was not
// there before the wait. On the shared connection (made again if pgx
// closed it), within giveBackTimeout whatever ctx was. nil when nothing may
// be left behind.
func (w *lineWait) giveUp() error {
	leave := w.place != 0 || (w.lost != nil && w.joinSent)
	release := w.lost != nil && w.beforeKnown // a lost before-read granted nothing
	if !leave && !release || w.s.lostReason() != "" {
		// A session closed took its places and leases with it; one lost
		// (not renewed in time) ends on the server by itself.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	leavePlace := func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT fencing_line_leave($1::bigint)", w.place)
		return err
	}
	// A place whose number is known is left first, whatever follows, so
	// that the line moves on even when the wait for a lost statement's
	// backend fails (pgx's cancel request held up in a pooler, say). A poll
	// whose answer was lost finds no place if it runs after the leave (a
	// poll makes none); a grant it made before is given back by the leave,
	// and one by a poll that began before the leave, by the release below.
	left := false
	if w.place != 0 {
		err := w.s.withConn(ctx, leavePlace)
		if w.lost == nil {
			return err
		}
		left = err == nil
	}
	if w.lost != nil {
		if err := waitForBackend(ctx, w.s.client, w.lost); err != nil {
			return err
		}
	}
	return w.s.withConn(ctx, func(conn *pgx.Conn) error {
		if w.place != 0 {
			if !left {
				if err := leavePlace(conn); err != nil {
					return err
				}
			}
		} else if w.joinSent {
			// The join's answer was lost: joined again (the same place if
			// the first join committed) and left.
			// Not a place whose lease the session held before the wait.
			_, err := conn.Exec(ctx, "SELECT fencing_line_leave(place) FROM "+joinSQL+
				" WHERE token IS NULL OR token::bigint <> ALL (coalesce($7::bigint[], '{}'))",
				w.s.id, w.r.lockName, nil, nullable(w.r.payload), string(w.r.kind), nullable(w.r.permits), w.before)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == SQLStateSessionEnded {
				return nil // the session ended, and every lease in it
			}
			if err != nil {
				return err
			}
		}
		if !release {
			return nil
		}
		grants, args := w.r.liveGrants()
		_, err := conn.Exec(ctx, "SELECT fencing_release(lock_name, token) FROM ("+grants+") AS g "+
			"WHERE token::bigint <> ALL (coalesce($3::bigint[], '{}'))", append(args, w.before)...)
		return err
	})
}

// lineListener is a client's one connection LISTENing on fencing_line, in
// a goroutine of its own, open while some wait uses it. It wakes a wait
// whose place number it hears. A broken connection is made again (the waits
// poll meanwhile, and once more after it, in case their number went by); an
// error no reconnect can mend stops it (the waits go on polling).
type lineListener struct {
	config *pgx.ConnConfig
	board  lineBoard

	mu    sync.Mutex
	users int
	run   *listenRun // the goroutine now, nil when none
	err   error      // what stopped the last one, if no reconnect could mend it
}

// listenRun is one life of the listener's goroutine.
type listenRun struct {
	ctx       context.Context
	cancel    context.CancelFunc
	on        atomic.Bool   // LISTEN in effect on a live connection
	listening chan struct{} // closed once LISTEN first took effect
	done      chan struct{} // closed when the goroutine ends
}

// watch is one wait's use of the listener, once LISTEN is in effect
// (lineListenStartup at most): a number heard from then on reaches it.
func (l *lineListener) watch(ctx context.Context) *lineWatch {
	l.mu.Lock()
	l.users++
	run := l.run
	if run == nil {
		runCtx, cancel := context.WithCancel(context.Background())
		run = &listenRun{ctx: runCtx, cancel: cancel, listening: make(chan struct{}), done: make(chan struct{})}
		l.run = run
		go l.listen(run)
	}
	l.mu.Unlock()
	timer := time.NewTimer(lineListenStartup)
	select {
	case <-run.listening:
	case <-run.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	return &lineWatch{listener: l, run: run, wake: make(chan struct{}, 1), since: l.board.mark()}
}

func (l *lineListener) release(run *listenRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.users--
	if l.users == 0 && l.run == run {
		run.cancel()
		l.run = nil
	}
}

func (l *lineListener) listen(run *listenRun) {
	defer close(run.done)
	var conn *pgx.Conn
	defer func() { closeQuietly(conn) }()
	failures := 0
	for run.ctx.Err() == nil {
		if conn == nil {
			c, err := connectConfig(run.ctx, l.config, "pg_fencing line listener")
			if err == nil {
				if _, err = c.Exec(run.ctx, "LISTEN "+LineChannel); err != nil {
					closeQuietly(c)
				}
			}
			if err != nil {
				if run.ctx.Err() != nil {
					return
				}
				if !mayMend(err) {
					l.mu.Lock()
					l.err = fmt.Errorf("pg_fencing: listening on %s: %w", LineChannel, err)
					if l.run == run {
						l.run = nil // the next wait starts another
					}
					l.mu.Unlock()
					return
				}
				failures++
				delay := reconnectDelay(failures)
				if delay < 100*time.Millisecond {
					delay = 100 * time.Millisecond
				}
				sleepCtx(run.ctx, delay)
				continue
			}
			conn, failures = c, 0
			l.mu.Lock()
			l.err = nil
			l.mu.Unlock()
			if !run.on.Swap(true) {
				select {
				case <-run.listening:
				default:
					close(run.listening)
				}
			}
			l.board.wakeAll() // deaf for a while: every place polls, in case its number went by
		}
		n, err := conn.WaitForNotification(run.ctx)
		if err != nil {
			run.on.Store(false)
			closeQuietly(conn)
			conn = nil
			continue
		}
		if n.Channel == LineChannel {
			l.board.heard(n.Payload)
		}
	}
}

// lineWatch is one wait's wake-up: wake receives when its place is heard.
type lineWatch struct {
	listener *lineListener
	run      *listenRun
	wake     chan struct{}
	since    uint64
	place    int64
}

func (w *lineWatch) follow(place int64) {
	if place == w.place {
		return
	}
	if w.place != 0 {
		w.listener.board.unfollow(w.place, w.wake)
	}
	w.place = place
	w.listener.board.follow(place, w.since, w.wake)
}

// listening says whether the listener LISTENs now.
func (w *lineWatch) listening() bool { return w.run.on.Load() }

func (w *lineWatch) close() {
	if w.place != 0 {
		w.listener.board.unfollow(w.place, w.wake)
		w.place = 0
	}
	w.listener.release(w.run)
}

// lineBoard is which place numbers are waited for, each with its wake-ups,
// and the numbers heard lately, so that a number heard between a join and
// the follow of the place it returned is not missed.
type lineBoard struct {
	mu     sync.Mutex
	seq    uint64
	recent []heardPlace // the last lineHeardKept at least, oldest first
	wakes  map[int64]map[chan struct{}]struct{}
}

type heardPlace struct {
	seq   uint64
	place int64
}

// mark is a point in what was heard: follow(place, mark, ...) also wakes
// for the place heard after it.
func (b *lineBoard) mark() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq
}

func (b *lineBoard) follow(place int64, since uint64, wake chan struct{}) {
	b.mu.Lock()
	if b.wakes == nil {
		b.wakes = make(map[int64]map[chan struct{}]struct{})
	}
	if b.wakes[place] == nil {
		b.wakes[place] = make(map[chan struct{}]struct{})
	}
	b.wakes[place][wake] = struct{}{}
	missed := false
	for _, h := range b.recent {
		if h.seq > since && h.place == place {
			missed = true
		}
	}
	b.mu.Unlock()
	if missed {
		nudge(wake)
	}
}

func (b *lineBoard) unfollow(place int64, wake chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if wakes := b.wakes[place]; wakes != nil {
		delete(wakes, wake)
		if len(wakes) == 0 {
			delete(b.wakes, place)
		}
	}
}

func (b *lineBoard) heard(payload string) {
	place, err := strconv.ParseInt(payload, 10, 64)
	if err != nil {
		return // not a place number: any role may NOTIFY on any channel
	}
	b.mu.Lock()
	b.seq++
	if len(b.recent) >= 2*lineHeardKept {
		b.recent = append([]heardPlace(nil), b.recent[lineHeardKept:]...)
	}
	b.recent = append(b.recent, heardPlace{b.seq, place})
	var wakes []chan struct{}
	for wake := range b.wakes[place] {
		wakes = append(wakes, wake)
	}
	b.mu.Unlock()
	// A forged number only makes a place poll sooner: what counts is the
	// poll's answer.
	for _, wake := range wakes {
		nudge(wake)
	}
}

func (b *lineBoard) wakeAll() {
	b.mu.Lock()
	var wakes []chan struct{}
	for _, ws := range b.wakes {
		for wake := range ws {
			wakes = append(wakes, wake)
		}
	}
	b.mu.Unlock()
	for _, wake := range wakes {
		nudge(wake)
	}
}

// nudge wakes a wait without blocking; one pending wake-up is enough.
func nudge(wake chan struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}
