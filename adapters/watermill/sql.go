package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/queue"
)

// SQL delivers the message through watermill-sql (v4.1.2) on the
// scenario's database, with its default PostgreSQL schema and offsets
// adapters: the producer publishes it into the topic's table, and each
// delivery is one poll of a real wsql.Subscriber on the delivery's
// connections, for consumerGroup. The subscriber hands the message out in
// its transaction (wsql.TxFromContext), and after the handler's ack it
// writes the consumer group's offset and commits, in that same
// transaction: a handler that writes through it commits its work and the
// ack at once; one that writes on its own connection does not.
//
// The subscriber's own statements (its offsets row, the select, the
// offset update, the commit) are steps of the delivery, so faults fall
// between them as they would in production. The messages and offsets
// tables are left out of the comparison.
func SQL(topic, consumerGroup string) Option {
	return func(o *options) { o.sql = &sqlTopic{topic: topic, group: consumerGroup} }
}

// sqlTopic is the watermill-sql topic and consumer group a job uses.
type sqlTopic struct {
	topic, group string
}

var (
	sqlSchema  = wsql.DefaultPostgreSQLSchema{}
	sqlOffsets = wsql.DefaultPostgreSQLOffsetsAdapter{}
)

// table is an adapter's quoted table name without its quotes, as the
// comparison names tables.
func table(quoted string) string { return strings.Trim(quoted, `"`) }

// sqlQueue is watermill-sql's topic table and offsets as queue.Queue.
type sqlQueue struct {
	job *jobSpec
	t   sqlTopic
}

// Schema is the topic's messages and offsets tables, made by
// watermill-sql's own schema adapters as AutoInitializeSchema makes them.
func (q *sqlQueue) Schema() queue.Schema {
	topic := q.t.topic
	return queue.Schema{Name: fmt.Sprintf("twicewatermill: watermill-sql's tables of topic %q", topic),
		Apply: func(ctx context.Context, conn *pgx.Conn) error {
			messages, err := sqlSchema.SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams{Topic: topic})
			if err != nil {
				return err
			}
			offsets, err := sqlOffsets.SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams{Topic: topic})
			if err != nil {
				return err
			}
			for _, query := range append(messages, offsets...) {
				if _, err := conn.Exec(ctx, query.Query, query.Args...); err != nil {
					return fmt.Errorf("creating watermill-sql's tables of topic %q: %w", topic, err)
				}
			}
			return nil
		}}
}

// Rules: the topic's tables are the queue's; an unacked message is polled
// again at once; scenarios run one at a time.
func (q *sqlQueue) Rules() queue.Rules {
	return queue.Rules{
		// A message not acked is polled again by the next subscriber at
		// once: its transaction rolled back with the process.
		Redeliver: time.Second,
		Tables:    []string{table(sqlSchema.MessagesTable(q.t.topic)), table(sqlOffsets.MessagesOffsetsTable(q.t.topic))},
		// The subscriber reads only messages older than every transaction
		// open on the server (pg_snapshot_xmin): another scenario's open
		// transaction would hide this one's message.
		OneScenarioAtATime: true,
	}
}

// Enqueue publishes the message with watermill-sql's Publisher, into the
// tables Schema made.
func (q *sqlQueue) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	db := wsql.BeginnerFromPgx(op.Conn)
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: sqlSchema}, nil)
	if err != nil {
		return queue.Enqueued{}, err
	}
	id := strconv.Itoa(op.Job)
	msg, err := q.job.message(op.Job, op.Now)
	if errors.Is(err, errNotPublished) {
		return queue.Enqueued{Duplicate: true, Reason: err.Error()}, nil
	}
	if err != nil {
		return queue.Enqueued{}, err
	}
	if msg.UUID != MessageUUID(q.job.name, id) {
		return queue.Enqueued{}, fmt.Errorf("twicewatermill: job %q: with SQL, the producer's message %d must carry MessageUUID(%q, %q), not %s", q.job.name, op.Job, q.job.name, id, msg.UUID)
	}
	if err := pub.Publish(q.t.topic, msg); err != nil {
		return queue.Enqueued{}, fmt.Errorf("publishing to topic %q: %w", q.t.topic, err)
	}
	return queue.Enqueued{JobID: id}, nil
}

// acked reads the message's offset and the consumer group's.
func (q *sqlQueue) acked(ctx context.Context, op queue.Op) (offset, acked int64, err error) {
	err = op.Conn.QueryRow(ctx, `SELECT m."offset", coalesce((SELECT offset_acked FROM `+sqlOffsets.MessagesOffsetsTable(q.t.topic)+` WHERE consumer_group = $2), 0)
		FROM `+sqlSchema.MessagesTable(q.t.topic)+` m WHERE m.uuid = $1`, MessageUUID(q.job.name, op.JobID), q.t.group).Scan(&offset, &acked)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the offsets of message %s: %w", op.JobID, err)
	}
	return offset, acked, nil
}

// Fetch hands the message out unless the consumer group's offset is past
// it. Which message a subscriber takes is its own: the oldest not acked.
func (q *sqlQueue) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	offset, acked, err := q.acked(ctx, op)
	if err != nil {
		return queue.Fetched{}, err
	}
	if acked >= offset {
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("consumer group %q's offset is %d, at or past message %s (offset %d)", q.t.group, acked, op.JobID, offset)}, nil
	}
	return queue.Fetched{Delivered: true}, nil
}

// Ack reads what the delivery's transaction committed: the ack is the
// offset update in it, not a call of its own.
func (q *sqlQueue) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	offset, acked, err := q.acked(ctx, op)
	if err != nil {
		return queue.Settled{}, err
	}
	if acked >= offset {
		return queue.Settled{Outcome: queue.Completed, Detail: q.job.retryNote()}, nil
	}
	return queue.Settled{Outcome: queue.Retry, After: time.Second, Detail: fmt.Sprintf("consumer group %q's offset %d is short of message %s (offset %d): its commit did not land", q.t.group, acked, op.JobID, offset)}, nil
}

// Nack: the subscriber's transaction rolled back; the next poll takes the
// message again.
func (q *sqlQueue) Nack(context.Context, queue.Op, error) (queue.Settled, error) {
	return queue.Settled{Outcome: queue.Retry, After: time.Second, Detail: join("rolled back; polled again", q.job.retryNote())}, nil
}

// deliverSQL is one poll of a watermill-sql subscriber in this process:
// every message it hands out goes through the process's router (its
// middleware and the handler), nacked messages are resent in the same
// transaction (as the subscriber does), and the delivery ends when the
// subscriber's transaction does.
func (w *worker) deliverSQL(ctx context.Context, d *harness.Delivery, p *process, h message.HandlerFunc) error {
	// The subscriber commits its poll when its context ends, even while
	// the handler still uses the transaction (a data race on the
	// connection), so its context ends only once the handler has
	// returned; the handler hears the delivery's cancellation through
	// queue.ValuesFirst.
	subCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	conn := &pollConn{pool: d.DB, ctx: subCtx, ended: make(chan error, 1)}
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(conn), wsql.SubscriberConfig{
		ConsumerGroup: w.job.opts.sql.group,
		// No AckDeadline, for the same race: past it watermill-sql
		// commits the poll under a handler still running.
		AckDeadline:    new(time.Duration),
		ResendInterval: time.Millisecond,
		SchemaAdapter:  sqlSchema,
		OffsetsAdapter: sqlOffsets,
	}, nil)
	if err != nil {
		cancel()
		return fmt.Errorf("twicewatermill: job %q: watermill-sql's subscriber: %w", w.job.name, err)
	}
	defer func() {
		cancel()
		_ = sub.Close()
	}()
	msgs, err := sub.Subscribe(subCtx, w.job.opts.sql.topic)
	if err != nil {
		return fmt.Errorf("twicewatermill: job %q: subscribing to topic %q: %w", w.job.name, w.job.opts.sql.topic, err)
	}
	tries := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			conn.die()
			return ctx.Err()
		case err := <-conn.ended:
			// The poll's transaction committed or rolled back; a commit
			// error the subscriber only logs, so the handler never hears
			// of it either.
			_ = err
			return nil
		case msg, ok := <-msgs:
			if !ok {
				return fmt.Errorf("twicewatermill: job %q: watermill-sql's subscriber stopped", w.job.name)
			}
			n := tries[msg.UUID]
			tries[msg.UUID]++
			t := &try{d: d, ctx: ctx, handler: h, n: n}
			msg.SetContext(queue.ValuesFirst(context.WithValue(ctx, tryKey{}, t), msg.Context())) // the delivery's deadline, the subscriber's transaction
			err := w.hand(ctx, p, msg, t, conn.die)
			switch {
			case err == nil:
			case n >= w.job.opts.redeliveries || ctx.Err() != nil:
				// The process gives up (or dies): its transaction rolls
				// back with the connection.
				conn.die()
				return err
			}
		}
	}
}

// pollConn is the delivery's pool as the subscriber's connection: it lets
// the subscriber run its before-subscribing transaction and one poll, and
// tells when the poll's transaction ends. A later poll waits until the
// delivery is over.
type pollConn struct {
	pool  *pgxpool.Pool
	ctx   context.Context
	ended chan error

	mu    sync.Mutex
	begun int
	dead  bool
}

// pollTx is the number of the transaction that polls: the first is
// Subscribe's offsets row.
const pollTx = 2

func (c *pollConn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	c.mu.Lock()
	c.begun++
	n := c.begun
	c.mu.Unlock()
	if n > pollTx {
		<-c.ctx.Done()
		return nil, c.ctx.Err()
	}
	tx, err := c.pool.BeginTx(ctx, opts)
	if err != nil {
		if n == pollTx {
			c.ended <- err
		}
		return nil, err
	}
	return &endTx{Tx: tx, c: c, poll: n == pollTx}, nil
}

// die makes the process's open transactions roll back, as a connection
// that dies with its process does, instead of the commit watermill-sql
// runs when its context is cancelled.
func (c *pollConn) die() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead = true
}

func (c *pollConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.pool.Exec(ctx, sql, args...)
}

func (c *pollConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return c.pool.Query(ctx, sql, args...)
}

// endTx reports the end of the poll's transaction.
type endTx struct {
	pgx.Tx
	c    *pollConn
	poll bool
	once sync.Once
}

func (t *endTx) Commit(ctx context.Context) error {
	t.c.mu.Lock()
	dead := t.c.dead
	t.c.mu.Unlock()
	var err error
	if dead {
		err = t.Tx.Rollback(context.WithoutCancel(ctx))
	} else {
		err = t.Tx.Commit(ctx)
	}
	t.end(err)
	return err
}

func (t *endTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.end(err)
	return err
}

func (t *endTx) end(err error) {
	if t.poll {
		t.once.Do(func() { t.c.ended <- err })
	}
}
