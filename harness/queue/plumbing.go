package queue

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Autocommit is conn as the pgx.Tx a queue library's transactional
// functions take (gue's EnqueueTx, River's driver), with no transaction
// around it: each statement commits on its own, as on the pool the
// library uses in production, and costs no BEGIN and COMMIT round trips.
// An adapter hands it the connection Enqueue, Fetch, Ack and Nack get
// (Op.Conn). Its Commit and Rollback return ErrAutocommit.
func Autocommit(conn *pgx.Conn) pgx.Tx { return autocommit{conn} }

// ErrAutocommit is what Autocommit's Commit and Rollback return.
var ErrAutocommit = errors.New("queue: the queue's statements run on the harness's connection without a transaction: there is nothing to commit or roll back")

type autocommit struct{ *harnessConn }

// harnessConn names the embedded connection apart from pgx.Tx's Conn.
type harnessConn = pgx.Conn

func (a autocommit) Commit(context.Context) error   { return ErrAutocommit }
func (a autocommit) Rollback(context.Context) error { return ErrAutocommit }
func (a autocommit) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }
func (a autocommit) Conn() *pgx.Conn                { return a.harnessConn }

// ValuesFirst is ctx, for its deadline and cancellation, with the values
// of values looked up first: a delivery's context that also carries what
// the queue library put in its own (asynq's task metadata, a Watermill
// subscriber's transaction), for the production handler that reads them.
func ValuesFirst(ctx, values context.Context) context.Context {
	return valuesFirst{Context: ctx, values: values}
}

type valuesFirst struct {
	context.Context
	values context.Context
}

func (c valuesFirst) Value(key any) any {
	if v := c.values.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// Pool is a pool on the database conn is connected to, with conn's
// connection settings, of at most maxConns connections (0 keeps
// pgxpool's default): for a queue library that takes a pool where an
// adapter holds Op.Conn (gue's client, River's driver and migrator). Its
// connections are not the harness's: their statements are not steps. It
// connects only when used; the caller closes it.
func Pool(ctx context.Context, conn *pgx.Conn, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(conn.Config().ConnString())
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
