package twicewatermill

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/harness/queue"
)

// brokerTable is the at-least-once broker's state: one row per published
// message, acked once a delivery's ack arrives.
const brokerTable = "twice_watermill_messages"

// broker is an at-least-once Pub/Sub as queue.Queue: it hands a message
// out until it is acked, and never after.
type broker struct {
	name string
}

// Schema is the broker's table.
func (b *broker) Schema() queue.Schema {
	return queue.Schema{Name: "twicewatermill: the modelled broker's table", SQL: `CREATE TABLE ` + brokerTable + ` (
		id bigint PRIMARY KEY,
		acked boolean NOT NULL DEFAULT false,
		deliveries int NOT NULL DEFAULT 0)`}
}

// Rules: the broker's table is its own; a message not acked is handed out
// again after the default visibility timeout.
func (b *broker) Rules() queue.Rules {
	return queue.Rules{Tables: []string{brokerTable}, JobTable: brokerTable, JobIDColumn: "id"}
}

// Enqueue is the producer's Publish.
func (b *broker) Enqueue(ctx context.Context, op queue.Op) (queue.Enqueued, error) {
	var id int64
	if err := op.Conn.QueryRow(ctx, `INSERT INTO `+brokerTable+` (id) VALUES ($1) RETURNING id`, op.Job).Scan(&id); err != nil {
		return queue.Enqueued{}, fmt.Errorf("publishing the message: %w", err)
	}
	return queue.Enqueued{JobID: strconv.FormatInt(id, 10)}, nil
}

// Fetch hands the message out unless it was acked.
func (b *broker) Fetch(ctx context.Context, op queue.Op) (queue.Fetched, error) {
	id, err := jobNumber(op.JobID)
	if err != nil {
		return queue.Fetched{}, err
	}
	var n int
	err = op.Conn.QueryRow(ctx, `UPDATE `+brokerTable+` SET deliveries = deliveries + 1 WHERE id = $1 AND NOT acked RETURNING deliveries`, id).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return queue.Fetched{Done: true, Reason: fmt.Sprintf("message %s was acked", MessageUUID(b.name, op.JobID))}, nil
	}
	if err != nil {
		return queue.Fetched{}, fmt.Errorf("fetching message %d: %w", id, err)
	}
	return queue.Fetched{Delivered: true, Attempt: n}, nil
}

// Ack records the handler's success.
func (b *broker) Ack(ctx context.Context, op queue.Op) (queue.Settled, error) {
	id, err := jobNumber(op.JobID)
	if err != nil {
		return queue.Settled{}, err
	}
	if _, err := op.Conn.Exec(ctx, `UPDATE `+brokerTable+` SET acked = true WHERE id = $1`, id); err != nil {
		return queue.Settled{}, fmt.Errorf("acking message %d: %w", id, err)
	}
	return queue.Settled{Outcome: queue.Completed}, nil
}

// Nack leaves the message to be handed out again: the process gave up
// resending it after Redeliveries nacks.
func (b *broker) Nack(context.Context, queue.Op, error) (queue.Settled, error) {
	return queue.Settled{Outcome: queue.Retry, Detail: "nacked; the broker resends it"}, nil
}
