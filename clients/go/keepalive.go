package fencing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// keepalive is the clock of one lease or session: when it was last renewed,
// when it is due again, and whether it is still held. The client's
// heartbeat (below) renews it, with every other lease and session of the
// client, and tells it the answers.
//
// Held is judged on the monotonic clock (time.Now carries its reading),
// conservatively: it is lost once the send time of the last successful
// acquire, open or renewal, plus ttl, minus a safety margin, has passed --
// whether or not the heartbeat's goroutine ran meanwhile (the process may
// have been stopped, SIGSTOP or a long pause). The server starts the ttl
// when it runs the request, after the client sent it, so this deadline is
// never later than the server's end (clock rates aside).
//
// onLost is called once, on a goroutine of its own (so that a slow one
// holds up no other lease's renewal), never after stop; it may call stop
// (through Release or Close).
type keepalive struct {
	what    string // "lease" or "session", for messages
	ttl     time.Duration
	margin  time.Duration
	period  time.Duration
	refused string // why a renewal answered false
	onLost  func(reason string)

	beat *heartbeat // renews it, from begin on
	item renewal    // what the heartbeat sends for it

	mu         sync.Mutex
	validFrom  time.Time
	stopped    bool
	lostReason string

	done     chan struct{} // closed once lost (after onLost) or stopped
	doneOnce sync.Once
}

// renewal is what one keepalive's renewal sends: a session's
// (fencing_session_renew) when session is non-zero, else a lease's
// (fencing_renew of lockName and token).
type renewal struct {
	session  int64
	lockName string
	token    Token
	ttl      time.Duration
}

// safetyMargin is how long before the computed end the client stops
// trusting a lease: ttl/10, at least 50 ms, at most ttl/2.
func safetyMargin(ttl time.Duration) time.Duration {
	margin := ttl / 10
	if margin < 50*time.Millisecond {
		margin = 50 * time.Millisecond
	}
	if margin > ttl/2 {
		margin = ttl / 2
	}
	return margin
}

func newKeepalive(what string, ttl, period time.Duration, refused string, onLost func(string)) (*keepalive, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("pg_fencing: ttl must be positive, got %v", ttl)
	}
	margin := safetyMargin(ttl)
	if period == 0 {
		period = ttl / 3
	}
	if period <= 0 || period >= ttl-margin {
		return nil, fmt.Errorf("pg_fencing: heartbeat must be positive and shorter than ttl minus the safety margin (%v), got %v",
			ttl-margin, period)
	}
	return &keepalive{what: what, ttl: ttl, margin: margin, period: period, refused: refused,
		onLost: onLost, done: make(chan struct{})}, nil
}

// begin records the send time of the grant and hands the keepalive to the
// client's heartbeat.
func (k *keepalive) begin(sent time.Time, beat *heartbeat, item renewal) {
	k.mu.Lock()
	k.validFrom = sent
	k.mu.Unlock()
	k.beat, k.item = beat, item
	beat.add(k)
}

func (k *keepalive) renewed(sent time.Time) {
	k.mu.Lock()
	if sent.After(k.validFrom) {
		k.validFrom = sent
	}
	k.mu.Unlock()
}

// times are the keepalive's next renewal and its safe deadline.
func (k *keepalive) times() (due, deadline time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validFrom.Add(k.period), k.validFrom.Add(k.ttl - k.margin)
}

func (k *keepalive) deadline() time.Time {
	_, deadline := k.times()
	return deadline
}

// reason is "" while held, else why not.
func (k *keepalive) reason() string {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostReason != "" {
		return k.lostReason
	}
	if !now.Before(k.validFrom.Add(k.ttl - k.margin)) {
		// The heartbeat has not judged it since the deadline passed (the
		// process was paused, say); it reports the same when it does.
		return "not renewed within ttl minus the safety margin"
	}
	return ""
}

// markLost records the loss and reports it, once, unless stopped: onLost on
// a goroutine of its own, then Done.
func (k *keepalive) markLost(reason string) {
	k.mu.Lock()
	if k.stopped || k.lostReason != "" {
		k.mu.Unlock()
		return
	}
	k.lostReason = reason
	k.mu.Unlock()
	go func() {
		defer k.closeDone()
		if k.onLost != nil {
			k.onLost(reason)
		}
	}()
}

func (k *keepalive) closeDone() { k.doneOnce.Do(func() { close(k.done) }) }

// stop ends the renewals; no onLost from then on (one already under way may
// be the caller). False if stopped already. It does not wait for a renewal
// in flight: its answer is not applied (markLost sees stopped), and what
// the caller sends next (a release, a close) goes on another connection.
func (k *keepalive) stop() bool {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return false
	}
	k.stopped = true
	k.mu.Unlock()
	if k.beat != nil {
		k.beat.remove(k)
	}
	k.closeDone()
	return true
}

// heartbeat renews every lease and session of a client (a Client, and those
// WithLine makes from it) on one connection, from one goroutine: per
// process, in the usual case of one Client, one server connection for all
// the renewals, however many sessions and leases. The connection is opened
// when the first keepalive is added and closed when the last one is gone
// (stopped or lost); the goroutine lives as long.
//
// Each keepalive keeps its own ttl, period, safe deadline and judgement
// (above). When one is due, the heartbeat sends ONE statement renewing it
// and every other that is due within half its own period (renewing early is
// safe; renewed together, their periods line up, and the next rounds renew
// them together too), and applies each row's answer to its keepalive: true,
// renewed as of the send time; false, lost ("renewal refused: ..."). The
// statement runs outside any transaction block and holds nothing between
// rounds; the client's configuration makes no named prepared statements, so
// it may go through a transaction-pooling PgBouncer.
//
// A round is bounded by the earliest safe deadline of every keepalive the
// heartbeat has -- in the round or waiting for it, and one added meanwhile
// moves the bound sooner --, so a round stuck behind a lock or a dead
// network cannot delay the report of anyone's loss: when the bound passes,
// pgx cancels the statement and closes the connection, every keepalive
// whose deadline has passed is lost ("renewal got no answer before the
// ...'s safe deadline"), and the others are renewed in the next round on a
// new connection. A round that failed otherwise (a broken connection) is a
// failed renewal for every keepalive in it, lost ("renewal failed: ..."),
// and the next round opens a new connection. An error of the server's (say
// 42501, a lock whose use was revoked from the role) in a round of several
// may be one keepalive's: each is then renewed alone, so that only its own
// error loses it.
//
// A keepalive stopped during a round (Release, Close) is out of it: its
// answer is not applied. Nothing else goes on the heartbeat's connection: a
// session's open and close, and every other short statement, on the
// session's shared work connection; a lease's release on a short connection
// of its own (the heartbeat's may be in a round, or gone with the last
// keepalive). The close of a session ends a wait in it on another goroutine
// without queueing behind it, as before, because a wait in line holds the
// work connection only for one short statement at a time.
type heartbeat struct {
	config *pgx.ConnConfig
	name   string // the connection's application_name

	mu      sync.Mutex
	items   map[*keepalive]struct{}
	running bool          // a goroutine runs (run), until items is empty
	wake    chan struct{} // a keepalive came or went: look again
	bound   time.Time     // of the round in flight; zero between rounds
	timer   *time.Timer   // ends the round in flight at bound
}

func newHeartbeat(config *pgx.ConnConfig) *heartbeat {
	return &heartbeat{config: config, name: fmt.Sprintf("pg_fencing heartbeat %d %s", os.Getpid(), randomHex(4)),
		items: make(map[*keepalive]struct{}), wake: make(chan struct{}, 1)}
}

func (h *heartbeat) add(k *keepalive) {
	deadline := k.deadline()
	h.mu.Lock()
	h.items[k] = struct{}{}
	if !h.running {
		h.running = true
		go h.run()
	} else if h.timer != nil && deadline.Before(h.bound) {
		// The round in flight may not outlast the newcomer's deadline.
		h.bound = deadline
		h.timer.Reset(time.Until(deadline))
	}
	h.mu.Unlock()
	h.poke()
}

func (h *heartbeat) remove(k *keepalive) {
	h.mu.Lock()
	delete(h.items, k)
	h.mu.Unlock()
	h.poke()
}

func (h *heartbeat) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// lose reports k's loss and forgets it.
func (h *heartbeat) lose(k *keepalive, reason string) {
	k.markLost(reason)
	h.remove(k)
}

// snapshot is every keepalive the heartbeat has, or nil when it has none:
// then the goroutine ends (and the next add starts another).
func (h *heartbeat) snapshot() []*keepalive {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.items) == 0 {
		h.running = false
		return nil
	}
	return h.listLocked()
}

// list is every keepalive the heartbeat has.
func (h *heartbeat) list() []*keepalive {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listLocked()
}

func (h *heartbeat) listLocked() []*keepalive {
	items := make([]*keepalive, 0, len(h.items))
	for k := range h.items {
		items = append(items, k)
	}
	return items
}

func (h *heartbeat) run() {
	var conn *pgx.Conn
	defer func() { closeQuietly(conn) }()
	for {
		items := h.snapshot()
		if items == nil {
			return
		}
		now := time.Now()
		var live, due []*keepalive
		next := now.Add(time.Hour)
		for _, k := range items {
			kDue, deadline := k.times()
			if !now.Before(deadline) {
				// The goroutine did not run between the due time and the
				// deadline: the process was paused, most likely.
				h.lose(k, fmt.Sprintf("not renewed before the %s's safe deadline; was the process paused?", k.what))
				continue
			}
			live = append(live, k)
			switch {
			case !now.Before(kDue.Add(-k.period / 2)):
				due = append(due, k)
				if kDue.Before(next) {
					next = kDue
				}
			case kDue.Before(next):
				next = kDue
			}
		}
		if next.After(now) {
			// None is due yet (those due within half a period wait for the
			// first one that is).
			timer := time.NewTimer(next.Sub(now))
			select {
			case <-timer.C:
			case <-h.wake:
				timer.Stop()
			}
			continue
		}
		conn = h.round(conn, live, due)
	}
}

// round renews due, bounded by the earliest deadline of all (and of any
// keepalive added meanwhile), on conn, opened if need be; it returns the
// connection for the next round, nil once it broke.
func (h *heartbeat) round(conn *pgx.Conn, all, due []*keepalive) *pgx.Conn {
	bound := all[0].deadline()
	for _, k := range all[1:] {
		if deadline := k.deadline(); deadline.Before(bound) {
			bound = deadline
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.mu.Lock()
	h.bound, h.timer = bound, time.AfterFunc(time.Until(bound), cancel)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.timer.Stop()
		h.bound, h.timer = time.Time{}, nil
		h.mu.Unlock()
	}()

	// The server's own error, on a connection that is still good: it may be
	// one keepalive's (42501 for a lock whose use was revoked, say).
	serverError := func(err error) bool {
		var pgErr *pgconn.PgError
		return ctx.Err() == nil && conn != nil && !conn.IsClosed() && errors.As(err, &pgErr)
	}
	conn, err := h.send(ctx, conn, due)
	if err != nil && len(due) > 1 && serverError(err) {
		// Each alone, so that only its own error loses it.
		for i, k := range due {
			if conn, err = h.send(ctx, conn, due[i:i+1]); err != nil && serverError(err) {
				h.lose(k, fmt.Sprintf("renewal failed: %v", err))
				err = nil
			} else if err != nil {
				due = due[i:] // this one and the rest: the failed statement's
				break
			}
		}
	}
	if err == nil {
		return conn
	}
	closeQuietly(conn) // pgx closed it already if ctx ended; never reused
	if ctx.Err() != nil {
		// No answer by the bound: the keepalives whose deadline passed are
		// lost (in the round, or waiting behind it); the others are renewed
		// in the next round, on a new connection.
		now := time.Now()
		for _, k := range h.list() {
			if !now.Before(k.deadline()) {
				h.lose(k, fmt.Sprintf("renewal got no answer before the %s's safe deadline", k.what))
			}
		}
		return nil
	}
	for _, k := range due {
		h.lose(k, fmt.Sprintf("renewal failed: %v", err))
	}
	return nil
}

// send renews due in one statement on conn, opened if need be, and applies
// the answers; it returns the connection (nil if none could be opened).
func (h *heartbeat) send(ctx context.Context, conn *pgx.Conn, due []*keepalive) (*pgx.Conn, error) {
	if conn == nil || conn.IsClosed() {
		var err error
		if conn, err = connectConfig(ctx, h.config, h.name); err != nil {
			return nil, err
		}
	}
	sent := time.Now()
	answers, err := renewAll(ctx, conn, due)
	if err != nil {
		return conn, err
	}
	for i, k := range due {
		if answers[i] != nil && *answers[i] {
			k.renewed(sent)
		} else {
			h.lose(k, "renewal refused: "+k.refused)
		}
	}
	return conn, nil
}

// renewSQL renews sessions (lock NULL: fencing_session_renew of id) and
// leases (fencing_renew of lock and token id) in one statement, one row per
// element, numbered as given.
const renewSQL = "SELECT r.n, CASE WHEN r.lock IS NULL " +
	"THEN fencing_session_renew(r.id, r.ms * interval '1 millisecond') " +
	"ELSE fencing_renew(r.lock, r.id::fencing_token, r.ms * interval '1 millisecond') END " +
	"FROM unnest($1::bigint[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(id, lock, ms, n)"

// renewAll is each keepalive's answer, in order (nil: NULL, or no row).
func renewAll(ctx context.Context, conn *pgx.Conn, due []*keepalive) ([]*bool, error) {
	ids, locks, ms := make([]int64, len(due)), make([]*string, len(due)), make([]int64, len(due))
	for i, k := range due {
		if k.item.session != 0 {
			ids[i] = k.item.session
		} else {
			lockName := k.item.lockName
			ids[i], locks[i] = int64(k.item.token), &lockName
		}
		if ms[i] = k.item.ttl.Milliseconds(); ms[i] < 1 {
			ms[i] = 1
		}
	}
	rows, err := conn.Query(ctx, renewSQL, ids, locks, ms)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	answers := make([]*bool, len(due))
	for rows.Next() {
		var n int64
		var ok *bool
		if err := rows.Scan(&n, &ok); err != nil {
			return nil, err
		}
		if n >= 1 && n <= int64(len(due)) {
			answers[n-1] = ok
		}
	}
	return answers, rows.Err()
}
