package fencing

// A deployment's roles: the application's clients log in as an
// unprivileged role that has been granted the use of its locks, and another
// role -- a second application, or an attacker holding its credentials --
// logs in beside it. The server refuses that role everything on the
// application's locks; the client must neither weaken that nor hand out
// anything that helps.

import (
	"context"
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

func TestAnotherRoleCannotTouchTheApplicationsLeasesSessionsElectionOrTable(t *testing.T) {
	ctx, admin, prefix := testCtx(t), connectDB(t), uniqueName(t)
	appRole, mallory := prefix+"_app", prefix+"_mallory"
	jobs, part, leaderLock, table := prefix+"/jobs", prefix+"/part", prefix+"/leader", prefix+"_orders"
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
	for _, attack := range []struct{ what, sql string }{
		{"closing the application's session", "SELECT fencing_session_close($1::bigint)"},
		{"renewing the application's session", "SELECT fencing_session_renew($1::bigint, '1 hour')"},
	} {
		_, err := evilDB.Exec(ctx, attack.sql, session.ID())
		refused(t, attack.what, err, "42501")
	}
	_, err = evilDB.Exec(ctx, "SELECT fencing_session_acquire($1::bigint, $2)", session.ID(), jobs)
	refused(t, "acquiring in the application's session", err, "42501")

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
