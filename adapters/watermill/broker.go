package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness/queue"
)

// The at-least-once broker's state: one row per published message and one
// per delivery of it, each settled on its own.
const (
	brokerTable     = "twice_watermill_messages"
	deliveriesTable = "twice_watermill_deliveries"
)

// broker is an at-least-once Pub/Sub as queue.Queue. Each delivery of a
// message settles on its own, as a broker's delivery tag or lease does: an
// ack settles that delivery, a nack puts the message back to be handed out
// again, and a delivery never settled (its process died, its ack was lost)
// is taken over by the next hand-out. A message is done once no copy of it
// is queued and no delivery holds it, so a copy that fails beside one that
// succeeded is handed out again, not forgotten.
type broker struct {
	job *jobSpec
}

// Schema is the broker's tables.
func (b *broker) Schema() queue.Schema {
	return queue.Schema{Name: "twicewatermill: the modelled broker's tables", SQL: `CREATE TABLE ` + brokerTable + ` (
		id bigint PRIMARY KEY,
		uuid text NOT NULL,
		payload bytea NOT NULL,
		metadata jsonb NOT NULL,
		published_at timestamptz NOT NULL,
		queued int NOT NULL DEFAULT 1);
	CREATE TABLE ` + deliveriesTable + ` (
		message_id bigint NOT NULL REFERENCES ` + brokerTable + `,
		n int NOT NULL,
		state text NOT NULL CHECK (state IN ('held', 'taken-over', 'acked', 'nacked')),
		PRIMARY KEY (message_id, n))`}
}

// Rules: the broker's tables are its own; a message not acked is handed
// out again after the default visibility timeout.
func (b *broker) Rules() queue.Rules {
	return queue.Rules{Tables: []string{brokerTable, deliveriesTable}, JobTable: brokerTable, JobIDColumn: "id", Dedup: b.job.opts.dedup}
}

// Enqueue is the producer's Publish of copy op.Job, built at op.Now.
func (b *broker) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	msg, err := b.job.message(op.Job, op.Now)
	if errors.Is(err, errNotPublished) {
		return queue.Enqueued{Duplicate: true, Reason: err.Error()}, nil
	}
	if err != nil {
		return queue.Enqueued{}, err
	}
	if b.job.opts.dedup != 0 {
		var first int64
		// A negative window never ends: every earlier message counts.
		since := time.Time{}
		window := "for ever"
		if b.job.opts.dedup > 0 {
			since = op.Now.Add(-b.job.opts.dedup)
			window = "within its " + b.job.opts.dedup.String() + " window"
		}
		err := op.Conn.QueryRow(ctx, `SELECT id FROM `+brokerTable+` WHERE uuid = $1 AND published_at > $2 ORDER BY id LIMIT 1`,
			msg.UUID, since).Scan(&first)
		switch {
		case err == nil:
			return queue.Enqueued{Duplicate: true, Reason: fmt.Sprintf("the broker dropped message %s as a duplicate of job %d's, published %s", msg.UUID, first, window)}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return queue.Enqueued{}, fmt.Errorf("looking for a duplicate of message %s: %w", msg.UUID, err)
		}
	}
	if _, err := op.Conn.Exec(ctx, `INSERT INTO `+brokerTable+` (id, uuid, payload, metadata, published_at) VALUES ($1, $2, $3, $4, $5)`,
		op.Job, msg.UUID, []byte(msg.Payload), map[string]string(msg.Metadata), op.Now); err != nil {
		return queue.Enqueued{}, fmt.Errorf("publishing the message: %w", err)
	}
	return queue.Enqueued{JobID: strconv.Itoa(op.Job)}, nil
}

// Fetch hands the message out: a queued copy first, else the lease of a
// delivery that never settled; none of either means the message is done.
func (b *broker) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	id, err := jobNumber(op.JobID)
	if err != nil {
		return queue.Fetched{}, err
	}
	tx, err := op.Conn.Begin(ctx)
	if err != nil {
		return queue.Fetched{}, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	m := &queuedMessage{}
	var metadata map[string]string
	var queued int
	if err := tx.QueryRow(ctx, `SELECT uuid, payload, metadata, queued FROM `+brokerTable+` WHERE id = $1 FOR UPDATE`, id).
		Scan(&m.UUID, &m.Payload, &metadata, &queued); err != nil {
		return queue.Fetched{}, fmt.Errorf("fetching message %d: %w", id, err)
	}
	m.Metadata = message.Metadata(metadata)
	if queued > 0 {
		if _, err := tx.Exec(ctx, `UPDATE `+brokerTable+` SET queued = queued - 1 WHERE id = $1`, id); err != nil {
			return queue.Fetched{}, err
		}
	} else {
		tag, err := tx.Exec(ctx, `UPDATE `+deliveriesTable+` SET state = 'taken-over'
			WHERE message_id = $1 AND n = (SELECT min(n) FROM `+deliveriesTable+` WHERE message_id = $1 AND state = 'held')`, id)
		if err != nil {
			return queue.Fetched{}, err
		}
		if tag.RowsAffected() == 0 {
			return queue.Fetched{Done: true, Reason: fmt.Sprintf("message %s was acked", m.UUID)}, nil
		}
	}
	if err := tx.QueryRow(ctx, `INSERT INTO `+deliveriesTable+` (message_id, n, state)
		SELECT $1, coalesce(max(n), 0) + 1, 'held' FROM `+deliveriesTable+` WHERE message_id = $1 RETURNING n`, id).Scan(&m.delivery); err != nil {
		return queue.Fetched{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return queue.Fetched{}, err
	}
	return queue.Fetched{Delivered: true, Attempt: m.delivery, Job: m}, nil
}

// settle records how delivery op.Queued ended.
func (b *broker) settle(ctx context.Context, op queue.Op, state string) error {
	id, err := jobNumber(op.JobID)
	if err != nil {
		return err
	}
	m, ok := op.Queued.(*queuedMessage)
	if !ok {
		return fmt.Errorf("settling message %d: internal: the delivery carries %T", id, op.Queued)
	}
	if _, err := op.Conn.Exec(ctx, `UPDATE `+deliveriesTable+` SET state = $3 WHERE message_id = $1 AND n = $2`, id, m.delivery, state); err != nil {
		return fmt.Errorf("settling delivery %d of message %d: %w", m.delivery, id, err)
	}
	if state == "nacked" {
		if _, err := op.Conn.Exec(ctx, `UPDATE `+brokerTable+` SET queued = queued + 1 WHERE id = $1`, id); err != nil {
			return fmt.Errorf("requeueing message %d: %w", id, err)
		}
	}
	return nil
}

// Ack settles the delivery; the message is done unless another copy is
// queued or held.
func (b *broker) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	if err := b.settle(ctx, op, "acked"); err != nil {
		return queue.Settled{}, err
	}
	return queue.Settled{Outcome: queue.Completed, Detail: b.job.retryNote()}, nil
}

// Nack puts the message back: the process gave up resending it after
// Redeliveries nacks.
func (b *broker) Nack(ctx context.Context, op queue.Op, _ error) (queue.Settled, error) {
	if err := b.settle(ctx, op, "nacked"); err != nil {
		return queue.Settled{}, err
	}
	return queue.Settled{Outcome: queue.Retry, Detail: join("nacked; the broker resends it", b.job.retryNote())}, nil
}

func join(a, b string) string {
	if b == "" {
		return a
	}
	return a + "; " + b
}
