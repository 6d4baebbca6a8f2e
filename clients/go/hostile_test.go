package fencing

// A deployment's roles: the application's clients log in as an
// unprivileged role that has been granted the use of its locks, and another
// role -- a second application, or an attacker holding its credentials --
// logs in beside it. The server refuses that role everything on the
// application's locks, and answers it about the application's session as
// about one that does not exist (1.9); the client must neither weaken that
// nor hand out anything that helps.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// loginRole creates a LOGIN role for this test run, with the password the
// test's own connections use (PGPASSWORD; none when it is unset), and drops
// it when the test ends.
func loginRole(t *testing.T, admin *pgx.Conn, name string) {
	t.Helper()
	var create string
	if password := os.Getenv("PGPASSWORD"); password != "" {
		create = queryValue[string](t, admin, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)", name, password)
	} else {
		create = queryValue[string](t, admin, "SELECT format('CREATE ROLE %I LOGIN', $1::text)", name)
	}
	mustExec(t, admin, create)
	t.Cleanup(func() {
		role := pgx.Identifier{name}.Sanitize()
		mustExec(t, admin, "DROP OWNED BY "+role)
		mustExec(t, admin, "DROP ROLE "+role)
	})
}

// asRole is a client and a plain connection logging in as role; every other
// setting comes from the PG* variables.
func asRole(t *testing.T, role string) (*Client, *pgx.Conn) {
	t.Helper()
	conninfo := "user=" + role // the roles' names are [a-z0-9_]: nothing to quote
	client, err := New(conninfo)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, conninfo)
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if user := queryValue[string](t, conn, "SELECT current_user::text"); user != role {
		t.Fatalf("connected as %s, not %s", user, role)
	}
	return client, conn
}

// refused fails the test unless err is the server's refusal with sqlstate.
func refused(t *testing.T, what string, err error, sqlstate string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstate {
		t.Errorf("%s: want SQLSTATE %s, got %v", what, sqlstate, err)
	}
}

// noSuchSession fails the test unless err is the server's answer for an
// acquire in a session that does not exist: 55Z05 naming the session id,
// never a token, NULL or 42501 (to another role, a session of the
// application's is no session at all).
func noSuchSession(t *testing.T, what string, err error, id int64) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != SQLStateSessionEnded ||
		pgErr.Message != fmt.Sprintf("fencing session %d does not exist or has ended", id) {
		t.Errorf("%s: want SQLSTATE 55Z05, as for a session that does not exist, got %v", what, err)
	}
}

// sessionState is a session as the superuser sees it: whether it is live,
// the seconds until it ends, the leases in it; found false once it is gone.
func sessionState(t *testing.T, admin *pgx.Conn, id int64) (live bool, left float64, leases int, found bool) {
	t.Helper()
	err := admin.QueryRow(context.Background(), "SELECT live, extract(epoch FROM expires_at - clock_timestamp())::float8, leases::int "+
		"FROM fencing_sessions WHERE session_id = $1", id).Scan(&live, &left, &leases)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, 0, false
	}
	if err != nil {
		t.Fatalf("reading fencing session %d: %v", id, err)
	}
	return live, left, leases, true
}

func TestAnotherRoleCannotTouchTheApplicationsLeasesSessionsElectionOrTable(t *testing.T) {
	ctx, admin, prefix := testCtx(t), connectDB(t), uniqueName(t)
	appRole, mallory := prefix+"_app", prefix+"_mallory"
	jobs, part, leaderLock, table := prefix+"/jobs", prefix+"/part", prefix+"/leader", prefix+"_orders"
	hers := prefix + "/hers" // a lock mallory may use: in the application's session only the session stands in her way
	loginRole(t, admin, appRole)
	loginRole(t, admin, mallory)

	// The operator's set-up: the locks exist (a superuser creates them, so
	// they are its own) and the application's role may use them; the table
	// is guarded under the jobs lock, and both roles may write it -- only
	// the guard stands between mallory and the rows.
	for _, lock := range []string{jobs, part, leaderLock} {
		mustExec(t, admin, "SELECT fencing_create_lock($1)", lock)
		mustExec(t, admin, "SELECT fencing_grant_lock($1, quote_ident($2)::regrole)", lock, appRole)
	}
	mustExec(t, admin, "SELECT fencing_create_lock($1)", hers)
	mustExec(t, admin, "SELECT fencing_grant_lock($1, quote_ident($2)::regrole)", hers, mallory)
	mustExec(t, admin, "SELECT fencing_set_announce($1, true)", leaderLock)
	protectedTable(t, admin, table, jobs)
	mustExec(t, admin, fmt.Sprintf("GRANT SELECT, UPDATE ON %s TO %s, %s", pgx.Identifier{table}.Sanitize(),
		pgx.Identifier{appRole}.Sanitize(), pgx.Identifier{mallory}.Sanitize()))
	defer mustExec(t, admin, "DROP TABLE "+pgx.Identifier{table}.Sanitize())
	update := fmt.Sprintf("UPDATE %s SET token = $1, v = $2 WHERE id = 1", pgx.Identifier{table}.Sanitize())

	// The application: a lease, a session with a mutex, and a leader.
	app, appDB := asRole(t, appRole)
	lease, err := app.Acquire(ctx, jobs, LeaseOptions{TTL: 5 * time.Second, Holder: "app"})
	if err != nil {
		t.Fatalf("the application's lease: %v", err)
	}
	defer lease.Release(ctx)
	if _, err := lease.Exec(ctx, appDB, update, lease.Token(), "app"); err != nil {
		t.Fatalf("the application's write: %v", err)
	}
	session, err := app.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	mutex := NewMutex(session, part)
	if _, err := mutex.Lock(ctx); err != nil {
		t.Fatalf("the application's mutex: %v", err)
	}
	election := NewElection(session, leaderLock)
	leaderLease, err := election.Campaign(ctx, `{"addr": "app"}`)
	if err != nil {
		t.Fatalf("the application's campaign: %v", err)
	}
	observeCtx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	seen := collect(app.Observe(observeCtx, leaderLock, time.Minute))
	if !eventually(5*time.Second, seen.lastIs("app")) {
		t.Fatalf("the application's observer reported %v", seen.snapshot())
	}

	// Mallory, with a client of her own.
	evil, evilDB := asRole(t, mallory)
	if _, err := evil.Acquire(ctx, jobs, LeaseOptions{TTL: 5 * time.Second}); errors.Is(err, ErrLockTimeout) {
		t.Errorf("taking the lock: busy instead of refused: %v", err)
	} else {
		refused(t, "taking the lock", err, "42501")
	}
	_, err = evil.Acquire(ctx, jobs, LeaseOptions{TTL: 5 * time.Second, Wait: 2 * time.Second, Holder: "app"})
	refused(t, "waiting for the lock, as holder app", err, "42501")
	for _, attack := range []struct{ what, sql string }{
		{"releasing the lease by its token", "SELECT fencing_release($1, $2::fencing_token)"},
		{"renewing the lease by its token", "SELECT fencing_renew($1, $2::fencing_token, '1 hour')"},
	} {
		_, err := evilDB.Exec(ctx, attack.sql, jobs, lease.Token())
		refused(t, attack.what, err, "42501")
	}
	_, err = evilDB.Exec(ctx, "SELECT fencing_revoke($1, 'mallory')", jobs)
	refused(t, "revoking the lease", err, "42501")

	// The application's session answers her exactly as an id she made up
	// (1.9, issue 42): a close closes nothing (0), a renewal renews nothing
	// (false), an acquire in it -- even of a lock she may use -- is refused
	// with 55Z05. She can neither tell its id from a made-up one nor close,
	// prolong or join it.
	live, _, sessionLeases, found := sessionState(t, admin, session.ID())
	if !found || !live || sessionLeases != 2 {
		t.Fatalf("the application's session before the attacks: found %v, live %v, %d leases", found, live, sessionLeases)
	}
	var random [8]byte
	if _, err := rand.Read(random[:]); err != nil {
		t.Fatal(err)
	}
	madeUp := int64(binary.BigEndian.Uint64(random[:])>>3) + 1<<61
	if _, _, _, found := sessionState(t, admin, madeUp); found {
		t.Fatalf("a made-up session id that exists: %d", madeUp)
	}
	if n := queryValue[int](t, evilDB, "SELECT count(*)::int FROM fencing_sessions WHERE session_id = $1", session.ID()); n != 0 {
		t.Errorf("mallory sees the application's session")
	}
	for _, id := range []int64{session.ID(), madeUp} {
		which := "the application's session"
		if id == madeUp {
			which = "a made-up session"
		}
		var closed int
		if err := evilDB.QueryRow(ctx, "SELECT fencing_session_close($1::bigint)", id).Scan(&closed); err != nil || closed != 0 {
			t.Errorf("closing %s: %d, %v; want 0", which, closed, err)
		}
		// A renewal that took would end the session within a millisecond,
		// or keep it an hour: looked at at once, before the application's
		// heartbeat (every third of its ttl of 5 s) renews it.
		for _, ttl := range []string{"1 millisecond", "1 hour"} {
			var renewed bool
			if err := evilDB.QueryRow(ctx, "SELECT fencing_session_renew($1::bigint, $2::interval)", id, ttl).Scan(&renewed); err != nil || renewed {
				t.Errorf("renewing %s for %s: %v, %v; want false", which, ttl, renewed, err)
			}
			if id == session.ID() {
				if live, left, _, _ := sessionState(t, admin, id); !live || left <= 0.5 || left > 5.5 {
					t.Errorf("the application's session after a renewal for %s by mallory: live %v, %.3f s left", ttl, live, left)
				}
			}
		}
		for _, attack := range []struct {
			what, sql string
			args      []interface{}
		}{
			{"acquiring", "SELECT fencing_session_acquire($1::bigint, $2)", []interface{}{id, hers}},
			{"acquiring shared", "SELECT fencing_session_acquire($1::bigint, $2, kind => 'shared')", []interface{}{id, hers}},
			{"acquiring all", "SELECT fencing_session_acquire_all($1::bigint, $2::text[])", []interface{}{id, []string{hers}}},
			{"acquiring all, waiting", "SELECT fencing_session_acquire_all($1::bigint, $2::text[], '1 s')", []interface{}{id, []string{hers}}},
			{"waiting (CALL fencing_await)", "CALL fencing_await($2, session => $1::bigint, wait => '30 s')", []interface{}{id, hers}},
		} {
			// Refused at once, the wait at its first attempt.
			attackCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := evilDB.Exec(attackCtx, attack.sql, attack.args...)
			cancel()
			noSuchSession(t, attack.what+" in "+which, err, id)
		}
	}
	if live, left, leases, _ := sessionState(t, admin, session.ID()); !live || left <= 0.5 || left > 5.5 || leases != sessionLeases {
		t.Errorf("the application's session after the attacks: live %v, %.3f s left, %d leases (want %d)", live, left, leases, sessionLeases)
	}
	if n := queryValue[int](t, admin, "SELECT count(*)::int FROM fencing_leases WHERE lock_name = $1", hers); n != 0 {
		t.Errorf("%d leases of mallory's lock were granted", n)
	}
	// The same calls in a session of her own do what they say: what she
	// was refused is the application's session.
	ownSession, err := evil.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ownSession.Close(ctx)
	if renewed := queryValue[bool](t, evilDB, "SELECT fencing_session_renew($1::bigint, '5 s')", ownSession.ID()); !renewed {
		t.Errorf("renewing her own session: false")
	}
	if token := queryValue[*int64](t, evilDB, "SELECT fencing_session_acquire($1::bigint, $2)::bigint", ownSession.ID(), hers); token == nil {
		t.Errorf("acquiring her own lock in her own session: NULL")
	}
	if closed := queryValue[int](t, evilDB, "SELECT fencing_session_close($1::bigint)", ownSession.ID()); closed != 1 {
		t.Errorf("closing her own session: %d, want 1", closed)
	}

	// Her own session is hers to open, but no lock of the application's
	// may be taken in it.
	evilSession, err := evil.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer evilSession.Close(ctx)
	_, err = NewMutex(evilSession, part).TryLock(ctx)
	refused(t, "taking the mutex", err, "42501")
	evilElection := NewElection(evilSession, leaderLock)
	if err := evilElection.Proclaim(ctx, `{"addr": "mallory"}`); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("proclaiming without leading: %v", err)
	}
	campaignCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = evilElection.Campaign(campaignCtx, `{"addr": "mallory"}`)
	cancel()
	refused(t, "campaigning", err, "42501")
	_, err = evilDB.Exec(ctx, `SELECT fencing_acquire($1, 'app', '10 s', payload => '{"addr": "mallory"}')`, leaderLock)
	refused(t, "proclaiming as holder app", err, "42501")
	if leader, err := evil.Leader(ctx, leaderLock); err != nil || leader != nil {
		t.Errorf("mallory reads the leader: %+v, %v", leader, err)
	}
	forged, _ := json.Marshal(map[string]interface{}{"lock_name": leaderLock, "event": "granted", "holder": "mallory", "token": leaderLease.Token() + 1})
	if _, err := evilDB.Exec(ctx, "SELECT pg_notify('fencing_events', $1)", string(forged)); err != nil {
		t.Fatal(err)
	}

	// The table: with a token above any grant, and with the application's
	// own. Mallory may not present tokens for the lock at all.
	_, err = FencedExec(ctx, evilDB, update, lease.Token()+10_000_000_000, "mallory")
	refused(t, "writing with a forged higher token", err, "42501")
	_, err = FencedExec(ctx, evilDB, update, lease.Token(), "mallory")
	refused(t, "writing with the application's token", err, "42501")
	// A role that may use the lock, writing with a token the database never
	// handed out (forged, or a bug): 55Z03.
	_, err = FencedExec(ctx, appDB, update, lease.Token()+10_000_000_000, "forged")
	if !errors.Is(err, ErrNeverGrantedToken) {
		t.Errorf("the application's role writing with a forged higher token: %v", err)
	}

	// Nothing changed for the application.
	if err := lease.Err(); err != nil {
		t.Fatalf("the lease after the attacks: %v", err)
	}
	var state string
	var token int64
	if err := appDB.QueryRow(ctx, "SELECT state, token::bigint FROM fencing_leases WHERE lock_name = $1 AND live", jobs).
		Scan(&state, &token); err != nil || state != "live" || Token(token) != lease.Token() {
		t.Fatalf("the lease on the server: %s %d, %v", state, token, err)
	}
	if !session.Held() || !mutex.IsOwner() || !election.IsLeader() {
		t.Fatalf("after the attacks: session %v, mutex %v, leader %v", session.Err(), mutex.IsOwner(), election.IsLeader())
	}
	if leader, err := election.Leader(ctx); err != nil || leader == nil || leader.Holder != "app" ||
		leader.Token != leaderLease.Token() || leader.Payload != `{"addr": "app"}` {
		t.Fatalf("the leader after the attacks: %+v, %v", leader, err)
	}
	if _, err := lease.Exec(ctx, appDB, update, lease.Token(), "app again"); err != nil {
		t.Fatalf("the application's write after the attacks: %v", err)
	}
	if v := queryValue[string](t, admin, fmt.Sprintf("SELECT v FROM %s WHERE id = 1", pgx.Identifier{table}.Sanitize())); v != "app again" {
		t.Fatalf("the row: %q", v)
	}
	time.Sleep(200 * time.Millisecond) // time for the forged notification to be (wrongly) acted on
	stopObserving()
	select {
	case <-seen.done:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe did not close its channel when its context ended")
	}
	if got := seen.snapshot(); len(got) != 1 {
		t.Fatalf("the application's observer after mallory's notification: %v", got)
	}

	// The application lets go of everything it holds, by its own role.
	if ours, err := lease.Release(ctx); !ours || err != nil {
		t.Fatalf("release: %v, %v", ours, err)
	}
	if err := mutex.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := election.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := session.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
