// Package points is production River job code: workers that award an
// order's loyalty points and ship orders. It never imports twice; its
// tests check it with twice's River adapter.
package points

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Schema is the tables the workers use.
const Schema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, points bigint NOT NULL);
CREATE TABLE orders (
	id bigint PRIMARY KEY,
	account_id bigint NOT NULL REFERENCES accounts,
	points bigint NOT NULL,
	shipped boolean NOT NULL DEFAULT false
);
CREATE TABLE ledger (id bigserial PRIMARY KEY, order_id bigint NOT NULL, points bigint NOT NULL);
CREATE TABLE bonus_paid (job_id bigint PRIMARY KEY);
INSERT INTO accounts VALUES (1, 120);
INSERT INTO orders VALUES (9812, 1, 50);
`

// RewardArgs asks for an order's points to be added to its account.
type RewardArgs struct {
	OrderID int64 `json:"order_id"`
}

// Kind is River's name for the job.
func (RewardArgs) Kind() string { return "reward_order" }

// RewardWorker adds the order's points and completes the job in the same
// transaction, so a crash or a lost reply never awards twice. River
// cancels an attempt's context at its timeout (AttemptTimeout, else the
// client's JobTimeout) and rescues a job still running once that timeout
// and the rescuer's hour have passed. With Detached the worker runs its
// transaction on a context River cannot cancel, so a rescued job's second
// attempt overlaps the first. JobCompleteTx does not check the attempt,
// so both commit their points unless the worker rolls back an attempt that
// is no longer the job's current one (GuardCurrent).
type RewardWorker struct {
	river.WorkerDefaults[RewardArgs]
	Pool  *pgxpool.Pool
	Guard Guard
	// AttemptTimeout is the worker's Timeout: 0 for the client's
	// JobTimeout, -1 for none (River then never rescues the job).
	AttemptTimeout time.Duration
	// Detached runs the award on context.WithoutCancel(ctx).
	Detached bool
}

// Guard is how RewardWorker makes sure only the job's current attempt
// awards the points.
type Guard int

// Guards, the last one right.
const (
	// NoGuard trusts JobCompleteTx, which does not check the attempt.
	NoGuard Guard = iota
	// GuardAttemptErr rolls back and fails when the row JobCompleteTx
	// returns shows another attempt. Wrong: after its error River's
	// completer marks the job retryable under the newer attempt, whose
	// JobCompleteTx then finds the job not running, returns it anyway,
	// and commits; a third attempt awards again.
	GuardAttemptErr
	// GuardAttemptNil rolls back and returns nil when the row shows
	// another attempt. Wrong: River's completer then marks the job
	// completed, although the newer attempt may die before it awards.
	GuardAttemptNil
	// GuardCurrent rolls back and fails unless the row shows this attempt
	// and the state JobCompleteTx set, completed.
	GuardCurrent
)

// Timeout is AttemptTimeout.
func (w *RewardWorker) Timeout(*river.Job[RewardArgs]) time.Duration { return w.AttemptTimeout }

// Work awards the points.
func (w *RewardWorker) Work(ctx context.Context, job *river.Job[RewardArgs]) error {
	if w.Detached {
		ctx = context.WithoutCancel(ctx)
	}
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `
		UPDATE accounts SET points = accounts.points + o.points
		FROM orders o WHERE o.id = $1 AND accounts.id = o.account_id`, job.Args.OrderID); err != nil {
		return fmt.Errorf("awarding order %d: %w", job.Args.OrderID, err)
	}
	after, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
	if err != nil {
		return fmt.Errorf("completing job %d: %w", job.ID, err)
	}
	stale := fmt.Errorf("job %d: attempt %d is no longer current (the job is %s at attempt %d); rolled back",
		job.ID, job.Attempt, after.State, after.Attempt)
	switch {
	case w.Guard == GuardAttemptErr && after.Attempt != job.Attempt:
		return stale
	case w.Guard == GuardAttemptNil && after.Attempt != job.Attempt:
		return nil
	case w.Guard == GuardCurrent && (after.Attempt != job.Attempt || after.State != rivertype.JobStateCompleted):
		// A newer attempt took the job (the rescuer handed it out again)
		// or River's completer already moved it on: roll back and fail,
		// so River retries the job.
		return stale
	}
	return tx.Commit(ctx)
}

// LedgerArgs asks for an order's points to be written to the ledger.
type LedgerArgs struct {
	OrderID int64 `json:"order_id"`
}

// Kind is River's name for the job.
func (LedgerArgs) Kind() string { return "ledger_order" }

// LedgerWorker writes the ledger line in autocommit and leaves completion
// to River's completer: if the worker dies after Work returned and before
// the completer ran, River hands the job out again and the line is
// written twice.
type LedgerWorker struct {
	river.WorkerDefaults[LedgerArgs]
	Pool *pgxpool.Pool
}

// Work writes the line.
func (w *LedgerWorker) Work(ctx context.Context, job *river.Job[LedgerArgs]) error {
	_, err := w.Pool.Exec(ctx, `INSERT INTO ledger (order_id, points) SELECT id, points FROM orders WHERE id = $1`, job.Args.OrderID)
	return err
}

// ShipArgs asks for an order to be shipped.
type ShipArgs struct {
	OrderID int64 `json:"order_id"`
}

// Kind is River's name for the job.
func (ShipArgs) Kind() string { return "ship_order" }

// NotifyArgs is the child job ShipWorker inserts: tell the customer.
type NotifyArgs struct {
	OrderID int64 `json:"order_id"`
}

// Kind is River's name for the job.
func (NotifyArgs) Kind() string { return "notify_shipped" }

// ShipWorker marks the order shipped and inserts a notification job in
// the same transaction. With Unique, the child is inserted with
// UniqueOpts by args, so a second run of the job (a producer that
// enqueued it twice) does not notify twice.
type ShipWorker struct {
	river.WorkerDefaults[ShipArgs]
	Pool   *pgxpool.Pool
	Unique bool
}

// Work ships the order.
func (w *ShipWorker) Work(ctx context.Context, job *river.Job[ShipArgs]) error {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `UPDATE orders SET shipped = true WHERE id = $1`, job.Args.OrderID); err != nil {
		return err
	}
	var opts *river.InsertOpts
	if w.Unique {
		opts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	if _, err := client.InsertTx(ctx, tx, NotifyArgs(job.Args), opts); err != nil {
		return fmt.Errorf("inserting the notification: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// ReminderArgs asks for a reminder to be recorded once DueAt has come.
type ReminderArgs struct {
	OrderID int64     `json:"order_id"`
	DueAt   time.Time `json:"due_at"`
}

// Kind is River's name for the job.
func (ReminderArgs) Kind() string { return "order_reminder" }

// ReminderWorker snoozes until the reminder is due, then records it once.
type ReminderWorker struct {
	river.WorkerDefaults[ReminderArgs]
	Pool *pgxpool.Pool
	Now  func() time.Time
}

// Work records the reminder, or snoozes until it is due.
func (w *ReminderWorker) Work(ctx context.Context, job *river.Job[ReminderArgs]) error {
	if wait := job.Args.DueAt.Sub(w.Now()); wait > 0 {
		return river.JobSnooze(wait)
	}
	_, err := w.Pool.Exec(ctx, `
		INSERT INTO ledger (order_id, points)
		SELECT $1, 0 WHERE NOT EXISTS (SELECT 1 FROM ledger WHERE order_id = $1)`, job.Args.OrderID)
	return err
}
