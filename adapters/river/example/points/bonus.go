package points

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// BonusArgs asks for an account's signup bonus. RequestedAt is when the
// signup handler asked, stamped on every request, as an API handler
// stamps what it enqueues.
type BonusArgs struct {
	AccountID   int64     `json:"account_id"`
	RequestedAt time.Time `json:"requested_at"`
}

// Kind is River's name for the job.
func (BonusArgs) Kind() string { return "signup_bonus" }

// KeyedBonusArgs is BonusArgs whose unique key is the account alone
// (River's unique tag): the request's time is carried, not compared.
type KeyedBonusArgs struct {
	AccountID   int64     `json:"account_id" river:"unique"`
	RequestedAt time.Time `json:"requested_at"`
}

// Kind is River's name for the job.
func (KeyedBonusArgs) Kind() string { return "signup_bonus_keyed" }

// GrantBonus is the producer: the signup handler calls it in its
// transaction, with the clock it reads (time.Now in production). It
// inserts the bonus unique by its args, meaning a retried request to be
// a duplicate; but the args hold the request's time, so a retry seconds
// later is a job of its own, and the bonus is paid twice.
func GrantBonus(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, now func() time.Time, accountID int64) error {
	_, err := client.InsertTx(ctx, tx, BonusArgs{AccountID: accountID, RequestedAt: now()},
		&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	return err
}

// GrantKeyedBonus is GrantBonus with the unique key on the account: a
// retry finds the first job and River skips it.
func GrantKeyedBonus(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, now func() time.Time, accountID int64) error {
	_, err := client.InsertTx(ctx, tx, KeyedBonusArgs{AccountID: accountID, RequestedAt: now()},
		&river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
	return err
}

// BonusWorker adds 100 points to the account once per job: it records
// the job in bonus_paid, adds the points only when that insert inserted,
// and completes the job, in one transaction. A redelivered job pays
// nothing; a second job for the same signup pays again.
type BonusWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	Pool    *pgxpool.Pool
	Account func(T) int64
}

// Work pays the bonus.
func (w *BonusWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO bonus_paid (job_id) VALUES ($1) ON CONFLICT DO NOTHING`, job.ID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if _, err := tx.Exec(ctx, `UPDATE accounts SET points = points + 100 WHERE id = $1`, w.Account(job.Args)); err != nil {
				return err
			}
		}
		_, err = river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}
