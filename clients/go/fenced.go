package fencing

import (
	"context"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Beginner is what a fenced write runs on: a *pgx.Conn, a pgx.Tx (the write
// then runs in a savepoint) or a pool (*pgxpool.Pool).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// FencedExec runs one write in a transaction of its own (a savepoint inside
// one already open) and returns its command tag. The guard's refusals come
// back as a *GuardError matching ErrStaleToken (55Z01), ErrMissingToken
// (55Z02), ErrNeverGrantedToken (55Z03) or ErrLeaseEnded (55Z04, at
// COMMIT); the connection stays usable. Other errors come back unchanged.
func FencedExec(ctx context.Context, db Beginner, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, mapGuardError(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, mapGuardError(err)
	}
	return tag, nil
}

// holding is what every lease kind answers: Err is nil while it is held.
type holding interface {
	Err() error
}

// fencedExec is Exec of every lease: ErrLeaseLost without sending anything
// when the lease is known lost, else FencedExec (whose guard refuses the
// write if the lease was lost after the check: a pause no client can see).
func fencedExec(ctx context.Context, lease holding, db Beginner, sql string, args []interface{}) (pgconn.CommandTag, error) {
	if err := lease.Err(); err != nil {
		return nil, err
	}
	return FencedExec(ctx, db, sql, args...)
}
