package fencing

// Regression tests of bugs found in review.

import (
	"context"
	"errors"
	"testing"
	"time"
)

// OnLost is where an application cleans up, and releasing the lost lease
// (or closing the lost session) is the obvious cleanup. It runs on the
// heartbeat's goroutine, which Release and Close stop: they must not wait
// for that goroutine to finish while it is the one calling them.
func TestOnLostMayReleaseTheLeaseAndCloseTheSession(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	released := make(chan error, 1)
	var lease *Lease
	ready := make(chan struct{})
	lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: 3 * time.Second, Heartbeat: 200 * time.Millisecond,
		OnLost: func(string) {
			<-ready
			_, err := lease.Release(ctx)
			released <- err
		}})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	defer lease.Release(ctx)
	mustExec(t, db, "SELECT fencing_revoke($1, 'test')", name)
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release from OnLost: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Release called from OnLost did not return: it waits for its own goroutine")
	}

	closed := make(chan error, 1)
	var session *Session
	sessionReady := make(chan struct{})
	session, err = client.NewSession(ctx, SessionOptions{TTL: 3 * time.Second, Heartbeat: 200 * time.Millisecond,
		OnLost: func(string) {
			<-sessionReady
			_, err := session.Close(ctx)
			closed <- err
		}})
	if err != nil {
		t.Fatal(err)
	}
	close(sessionReady)
	defer session.Close(ctx)
	mustExec(t, db, "SELECT fencing_session_close($1::bigint)", session.ID())
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from OnLost: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close called from OnLost did not return: it waits for its own goroutine")
	}
	select {
	case <-session.Done():
	case <-time.After(time.Second):
		t.Fatal("Done is not closed after the loss")
	}
}

// A leader whose lease the server ended (revoked, say) while its session
// lived on does not know it until it acts. Proclaim is such an act: when
// another candidate holds the lock by then, that is a lost leadership
// (ErrLeaseLost), not a busy lock, and the candidate no longer leads.
func TestProclaimAfterATakeoverIsLeaseLost(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	session, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "first"})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	election := NewElection(session, name)
	lease, err := election.Campaign(ctx, `{"n": 1}`)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "SELECT fencing_revoke($1, 'test')", name)
	other, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "second"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := NewElection(other, name).Campaign(waitCtx, `{"n": 2}`)
	if err != nil {
		t.Fatal(err)
	}
	err = election.Proclaim(ctx, `{"n": 3}`)
	if !errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrLockTimeout) {
		t.Fatalf("proclaim after another candidate took over: %v", err)
	}
	if election.IsLeader() {
		t.Fatal("still leader after the proclamation found the lock taken")
	}
	leader, err := election.Leader(ctx)
	if err != nil || leader == nil || leader.Holder != "second" || leader.Token != next.Token() || leader.Token == lease.Token() {
		t.Fatalf("the leader after a failed proclamation: %+v, %v", leader, err)
	}
}

// A lease in a live session can still end on the server (an operator
// revokes it). A candidate that campaigns again after its writes bounced,
// or a mutex locked again, must get a new grant from the server, not the
// revoked token back from memory: that token only bounces (55Z01) forever.
func TestCampaignAndLockAgainAfterARevocationGetANewToken(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	session, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	election := NewElection(session, name+"_leader")
	first, err := election.Campaign(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := election.Campaign(ctx, ""); err != nil || again.Token() != first.Token() {
		t.Fatalf("campaigning again while leading: %v, %v", again, err)
	}
	mutex := NewMutex(session, name+"_mutex")
	locked, err := mutex.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := mutex.Lock(ctx); err != nil || again != locked {
		t.Fatalf("locking again while holding: %d, %v", again, err)
	}
	mustExec(t, db, "SELECT fencing_revoke($1, 'test')", name+"_leader")
	mustExec(t, db, "SELECT fencing_revoke($1, 'test')", name+"_mutex")
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := election.Campaign(waitCtx, "")
	if err != nil || next.Token() <= first.Token() {
		t.Fatalf("campaigning after the revocation: %v (token was %d), %v", next, first.Token(), err)
	}
	relocked, err := mutex.Lock(waitCtx)
	if err != nil || relocked <= locked {
		t.Fatalf("locking after the revocation: %d (token was %d), %v", relocked, locked, err)
	}
	if leader, err := election.Leader(ctx); err != nil || leader == nil || leader.Token != next.Token() {
		t.Fatalf("the leader: %+v, %v", leader, err)
	}
}
