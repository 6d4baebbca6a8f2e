// Package fencing is the Go client of pg_fencing, the PostgreSQL extension
// whose fencing tokens the database itself enforces: leases, mutexes,
// semaphores, sessions and leader election, on pgx v4.
//
//	client, _ := fencing.New("") // the PG* variables
//	lease, err := client.Acquire(ctx, "nightly-report", fencing.LeaseOptions{TTL: 10 * time.Second, Wait: 30 * time.Second})
//	if err != nil { return err }
//	defer lease.Release(ctx)
//	_, err = lease.Exec(ctx, db, "UPDATE reports SET token = $1, body = $2 WHERE id = 7", lease.Token(), body)
//
// The write bounces with an error matching ErrStaleToken once another
// holder has taken over, and Exec returns ErrLeaseLost without sending
// anything once the lease is known lost. Sessions (Client.NewSession) give
// one renewal to many leases, as an etcd session does, and Mutex,
// Semaphore and Election take their leases in one.
//
// Connections: one heartbeat per Client renews every lease and session it
// makes, on one connection of its own (open while there is something to
// renew), one statement per round for all that are due; each session has
// one connection for its short statements; a lease of its own has one while
// it is acquired and a short one for its release; each observer has one;
// and Client.WithLine can add one that LISTENs. Make one Client per process
// and share it.
//
// Every wait ends when its context does, on the server too. A session's
// wait, of every kind (Session.Lock, LockShared and LockAll, Mutex.Lock,
// Semaphore.Acquire, Election.Campaign), is a place in the lock's line
// (pg_fencing 1.10): one row on the server,
// polled in short statements, left when the context ends; it holds no
// server connection between polls, so a fleet of candidates can wait behind
// a transaction-pooling PgBouncer (Client.WithLine can add a LISTENing
// connection that wakes a place when its turn may have come): a waiting
// candidate costs a row of fencing_line, a poll every 0.5 s and its
// session's share of the client's renewal statement. The wait of
// a lease of its own (Client.Acquire) is CALL fencing_await, which pgx asks the server to cancel when the
// context ends, and which holds no snapshot while it sleeps.
package fencing
