package fencing

// One heartbeat per client (issue 43): every session, election and lease a
// Client makes is renewed on one connection, in one statement per round.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// lossLog counts each item's OnLost calls and keeps their reasons.
type lossLog struct {
	mu      sync.Mutex
	reasons map[string][]string
}

func (l *lossLog) onLost(who string) func(string) {
	return func(reason string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.reasons == nil {
			l.reasons = make(map[string][]string)
		}
		l.reasons[who] = append(l.reasons[who], reason)
	}
}

func (l *lossLog) snapshot() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	copied := make(map[string][]string, len(l.reasons))
	for who, reasons := range l.reasons {
		copied[who] = append([]string(nil), reasons...)
	}
	return copied
}

// 20 sessions (one of them campaigning in an election) and three leases of
// their own (exclusive, a permit, shared), ttl 1 s, from one client: for 3.5 s (several ttls) the server sees
// one connection of the client's that renews -- its heartbeat's, always the
// same backend, idle between rounds without a snapshot -- and no more
// connections than one per session plus the heartbeat's; everything stays
// held, on the server too. Before, each session and lease renewed on a
// connection of its own: 23 of them.
// heartbeatBackends: how many backends the client's heartbeat connection
// has (0 or 1), and the pid of one.
func heartbeatBackends(ctx context.Context, t *testing.T, admin *pgx.Conn, client *Client) (n int64, pid int32) {
	t.Helper()
	if err := admin.QueryRow(ctx, "SELECT count(*), coalesce(min(pid), 0) FROM pg_stat_activity WHERE application_name = $1",
		client.beats.name).Scan(&n, &pid); err != nil {
		t.Fatal(err)
	}
	return n, pid
}

// oneHeartbeatBackend waits for the heartbeat's connection to be there, and
// gives its pid.
func oneHeartbeatBackend(t *testing.T, heartbeat func() (int64, int32)) int32 {
	t.Helper()
	var pid int32
	if !eventually(2*time.Second, func() bool { n, p := heartbeat(); pid = p; return n == 1 }) {
		t.Fatal("no heartbeat connection")
	}
	return pid
}

func TestOneHeartbeatConnectionRenewsEverySessionLeaseAndElection(t *testing.T) {
	const sessions = 20
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	var losses lossLog
	opened := make([]*Session, sessions)
	ids := make([]int64, sessions)
	for i := range opened {
		s, err := client.NewSession(ctx, SessionOptions{TTL: time.Second, Holder: fmt.Sprintf("%s-s%d", name, i),
			OnLost: losses.onLost(fmt.Sprintf("session %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		opened[i], ids[i] = s, s.ID()
	}
	leaderLease, err := NewElection(opened[0], name+"_leader").Campaign(ctx, `{"who": 0}`)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := client.Acquire(ctx, name+"_lease", LeaseOptions{TTL: time.Second, Holder: name + "-lease",
		OnLost: losses.onLost("lease")})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	// A permit and a shared lease of their own too (fencing_renew renews them as well).
	permit, err := client.Acquire(ctx, name+"_sem", LeaseOptions{Kind: Permit, Permits: 2, TTL: time.Second,
		Holder: name + "-permit", OnLost: losses.onLost("permit")})
	if err != nil {
		t.Fatal(err)
	}
	defer permit.Release(ctx)
	shared, err := client.Acquire(ctx, name+"_shared", LeaseOptions{Kind: Shared, TTL: time.Second,
		Holder: name + "-shared", OnLost: losses.onLost("shared")})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Release(ctx)

	// The client's connections: named for its sessions and lease (holders
	// beginning with name), and its heartbeat's.
	const ours = "(application_name LIKE 'pg_fencing % ' || $1 || '-%' OR application_name = $2)"
	// The lease's connection is closed once it is granted; its backend
	// may take a moment to leave pg_stat_activity.
	if !eventually(2*time.Second, func() bool {
		return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE "+ours, name, client.beats.name) <= sessions+1
	}) {
		t.Fatal("the client keeps more connections than one per session and the heartbeat's")
	}
	var heartbeatPid int32
	start := time.Now()
	for samples := 0; time.Since(start) < 3500*time.Millisecond; samples++ {
		var renewing, all, heartbeats, snapshots int64
		var pid *int32
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE query LIKE '%renew%'), count(*),
		            count(*) FILTER (WHERE application_name = $2),
		            count(*) FILTER (WHERE application_name = $2 AND state = 'idle' AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)),
		            min(pid) FILTER (WHERE application_name = $2)
		       FROM pg_stat_activity WHERE `+ours, name, client.beats.name).Scan(&renewing, &all, &heartbeats, &snapshots, &pid); err != nil {
			t.Fatal(err)
		}
		if renewing > 1 || heartbeats > 1 {
			t.Fatalf("sample %d: %d of the client's connections renew, %d are named for its heartbeat: want one", samples, renewing, heartbeats)
		}
		if all > sessions+1 {
			t.Fatalf("sample %d: the client has %d connections, more than one per session and the heartbeat's", samples, all)
		}
		if snapshots != 0 {
			t.Fatalf("sample %d: the heartbeat's connection holds a snapshot or a transaction between rounds", samples)
		}
		if pid != nil {
			if heartbeatPid != 0 && *pid != heartbeatPid {
				t.Fatalf("sample %d: the heartbeat's backend changed from %d to %d", samples, heartbeatPid, *pid)
			}
			heartbeatPid = *pid
		}
		time.Sleep(100 * time.Millisecond)
	}
	if heartbeatPid == 0 {
		t.Fatal("no connection of the client's heartbeat was seen")
	}
	if query := queryValue[string](t, db, "SELECT query FROM pg_stat_activity WHERE pid = $1", heartbeatPid); !strings.Contains(query, "unnest") {
		t.Fatalf("the heartbeat's last statement renews one item at a time: %s", query)
	}

	// Everything held, by the client and by the server, after 3.5 ttls.
	if lost := losses.snapshot(); len(lost) != 0 {
		t.Fatalf("losses reported: %q", lost)
	}
	for i, s := range opened {
		if !s.Held() {
			t.Fatalf("session %d is not held: %v", i, s.Err())
		}
	}
	for _, l := range []*Lease{lease, permit, shared} {
		if !l.Held() {
			t.Fatalf("a lease of its own: %v", l.Err())
		}
	}
	if !leaderLease.Held() {
		t.Fatalf("the leader's lease: %v", leaderLease.Err())
	}
	for lockName, token := range map[string]Token{name + "_sem": permit.Token(), name + "_shared": shared.Token()} {
		if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_permits WHERE lock_name = $1 AND state = 'live' AND token::bigint = $2",
			lockName, int64(token)); n != 1 {
			t.Fatalf("the permit or shared lease of %s (token %d) is not live on the server", lockName, token)
		}
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_sessions WHERE session_id = ANY($1) AND live", ids); n != sessions {
		t.Fatalf("%d of the %d sessions live on the server", n, sessions)
	}
	for lockName, token := range map[string]Token{name + "_lease": lease.Token(), name + "_leader": leaderLease.Token()} {
		if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_leases WHERE lock_name = $1 AND live AND token::bigint = $2",
			lockName, int64(token)); n != 1 {
			t.Fatalf("the lease of %s (token %d) is not live on the server", lockName, token)
		}
	}
}

// On the shared heartbeat, one item's loss is its own: among 4 sessions and
// 3 leases (ttl 1 s) of an unprivileged role's client, a session an
// operator closes, a lease revoked and a lease whose lock's use is taken
// from the role (its renewal an error, 42501, in a statement that renews
// the others too) are each reported lost once, with their own reason; the
// others live on for 2.5 s (2.5 ttls), on the same single heartbeat
// connection. Before, each item had a heartbeat connection of its own.
func TestOneLossOnTheSharedHeartbeatIsItsOwn(t *testing.T) {
	ctx, admin, prefix := testCtx(t), connectDB(t), uniqueName(t)
	role := prefix + "_app"
	loginRole(t, admin, role)
	locks := []string{prefix + "/revoked", prefix + "/forbidden", prefix + "/kept"}
	for _, lock := range locks {
		mustExec(t, admin, "SELECT fencing_create_lock($1)", lock)
		mustExec(t, admin, "SELECT fencing_grant_lock($1, quote_ident($2)::regrole)", lock, role)
	}
	client, _ := asRole(t, role)
	var losses lossLog
	var sessions []*Session
	for i := 0; i < 4; i++ {
		s, err := client.NewSession(ctx, SessionOptions{TTL: time.Second, Holder: fmt.Sprintf("%s-s%d", prefix, i),
			OnLost: losses.onLost(fmt.Sprintf("session %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		sessions = append(sessions, s)
	}
	var leases []*Lease
	for _, lock := range locks {
		lease, err := client.Acquire(ctx, lock, LeaseOptions{TTL: time.Second, Holder: prefix + "-lease",
			OnLost: losses.onLost(lock)})
		if err != nil {
			t.Fatal(err)
		}
		defer lease.Release(ctx)
		leases = append(leases, lease)
	}
	heartbeat := func() (int64, int32) { return heartbeatBackends(ctx, t, admin, client) }
	pid := oneHeartbeatBackend(t, heartbeat)

	mustExec(t, admin, "SELECT fencing_session_close($1::bigint)", sessions[1].ID())
	mustExec(t, admin, "SELECT fencing_revoke($1, 'test')", locks[0])
	mustExec(t, admin, "SELECT fencing_revoke_lock($1, quote_ident($2)::regrole)", locks[1], role)
	for what, done := range map[string]<-chan struct{}{"session 1": sessions[1].Done(), locks[0]: leases[0].Done(), locks[1]: leases[1].Done()} {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("the loss of %s was not reported", what)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	lost := losses.snapshot()
	want := map[string]string{"session 1": "renewal refused", locks[0]: "renewal refused", locks[1]: "renewal failed"}
	if len(lost) != len(want) {
		t.Fatalf("losses reported: %q", lost)
	}
	for who, reason := range want {
		if len(lost[who]) != 1 || !strings.HasPrefix(lost[who][0], reason) {
			t.Fatalf("%s: OnLost calls %q, want one %q", who, lost[who], reason)
		}
	}
	if !strings.Contains(lost[locks[1]][0], "42501") {
		t.Fatalf("%s: lost for %q, not for its renewal's own error", locks[1], lost[locks[1]][0])
	}
	for i, s := range sessions {
		if (i == 1) == s.Held() {
			t.Fatalf("session %d: held %v, %v", i, s.Held(), s.Err())
		}
	}
	if !leases[2].Held() || leases[0].Held() || leases[1].Held() {
		t.Fatalf("leases held: %v %v %v", leases[0].Held(), leases[1].Held(), leases[2].Held())
	}
	if n := queryValue[int64](t, admin, "SELECT count(*) FROM fencing_leases WHERE lock_name = $1 AND live AND token::bigint = $2",
		locks[2], int64(leases[2].Token())); n != 1 {
		t.Fatal("the kept lease is not live on the server")
	}
	if n, p := heartbeat(); n != 1 || p != pid {
		t.Fatalf("after the losses: %d heartbeat connections, backend %d (was %d)", n, p, pid)
	}
}

// A renewal stuck behind a lock (an operator's transaction holds the row of
// one session, ttl 1 s) holds up the heartbeat's round no longer than that
// session's safe deadline: the session is reported lost by then, as having
// had no answer, and the heartbeat renews the client's other session (ttl
// 6 s, not due in that round) on a new connection -- still one.
func TestAStuckRenewalLosesOnlyItsOwnItemByItsDeadline(t *testing.T) {
	ctx, client, admin, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	var losses lossLog
	session := func(who string, ttl time.Duration) *Session {
		s, err := client.NewSession(ctx, SessionOptions{TTL: ttl, Holder: name + "-" + who, OnLost: losses.onLost(who)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		return s
	}
	stuck, other := session("stuck", time.Second), session("other", 6*time.Second)
	heartbeat := func() (int64, int32) { return heartbeatBackends(ctx, t, admin, client) }
	pid := oneHeartbeatBackend(t, heartbeat)
	expiresAt := func() time.Time {
		return queryValue[time.Time](t, admin, "SELECT expires_at FROM fencing_sessions WHERE session_id = $1", other.ID())
	}
	otherEnd := expiresAt()

	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT FROM fencing_session WHERE session_id = $1 FOR UPDATE", stuck.ID()); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	select {
	case <-stuck.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the stuck session's loss was not reported")
	}
	// Its deadline is at most ttl - margin (0.9 s) after its last renewal,
	// which was before the lock.
	if waited := time.Since(locked); waited > 1200*time.Millisecond {
		t.Fatalf("the stuck session's loss was reported %v after the lock: later than its deadline", waited)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !eventually(4*time.Second, func() bool { return expiresAt().After(otherEnd) }) {
		t.Fatal("the other session was not renewed after the stuck round")
	}
	lost := losses.snapshot()
	if len(lost) != 1 || len(lost["stuck"]) != 1 || lost["stuck"][0] != "renewal got no answer before the session's safe deadline" {
		t.Fatalf("losses reported: %q", lost)
	}
	if !other.Held() {
		t.Fatalf("the other session: %v", other.Err())
	}
	if n, p := heartbeat(); n != 1 || p == pid {
		t.Fatalf("after the stuck round: %d heartbeat connections, backend %d (the stuck one was %d)", n, p, pid)
	}
}
