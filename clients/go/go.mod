module github.com/pg-fencing/pg_fencing/clients/go

go 1.19

require (
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgtype v1.10.0
	github.com/jackc/pgx/v4 v4.15.0
)
