package fencing

// The line's listener (Client.WithLine): new API, so not in line_test.go,
// whose tests run against the package as it was before the line too.

import (
	"context"
	"testing"
	"time"
)

// A waiter whose client LISTENs on fencing_line polls when it hears its
// place's number: it gets a freed lock at once though its timer would poll
// only after a minute. A forged number makes it poll, and changes nothing.
// The listener's connection is the client's only one beside its sessions',
// and goes when no wait uses it.
func TestAListeningWaitIsWokenByItsPlacesNumber(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	if _, err := client.WithLine(LineOptions{Poll: -time.Second}); err == nil {
		t.Fatal("a negative poll period was taken")
	}
	listening, err := client.WithLine(LineOptions{Listen: true, Poll: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	holderSession, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holderSession.Close(ctx)
	holder := NewMutex(holderSession, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiterSession, err := listening.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "waiter-" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer waiterSession.Close(ctx)
	waiter := NewMutex(waiterSession, name)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	result := lockInBackground(waitCtx, waiter)
	if !eventually(5*time.Second, func() bool { return placeOf(t, db, waiterSession) != 0 }) {
		t.Fatal("the waiter has no place in line")
	}
	place := placeOf(t, db, waiterSession)
	listeners := func() int64 {
		return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_fencing line listener' "+
			"AND query = 'LISTEN fencing_line'")
	}
	if n := listeners(); n != 1 {
		t.Fatalf("%d connections LISTEN on fencing_line for the waiter, want 1", n)
	}
	polls := func() int64 {
		return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "+
			"AND query LIKE '%fencing_line_poll%'", "pg_fencing session waiter-"+name)
	}
	if polls() != 0 {
		t.Fatal("the waiter polled before a minute passed or its number was heard")
	}
	mustExec(t, db, "SELECT pg_notify('fencing_line', $1::bigint::text)", place)
	if !eventually(3*time.Second, func() bool { return polls() == 1 }) {
		t.Fatal("the waiter did not poll when it heard its number")
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case r := <-result:
		t.Fatalf("a forged number ended the wait: %v, %v", r.token, r.err)
	default:
	}
	freed := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-result:
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("granted %v after the release", r.at.Sub(freed).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release's notification")
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, func() bool { return listeners() == 0 }) {
		t.Fatal("the listener's connection stays with no wait to serve")
	}
	if err := listening.LineListenerErr(); err != nil {
		t.Fatal(err)
	}
}
