package drivers

import (
	"context"

	"github.com/uptrace/bun"
)

// bunLedgerEntry is a row of points_ledger, as bun maps it.
type bunLedgerEntry struct {
	bun.BaseModel `bun:"table:points_ledger"`
	OrderID       int64 `bun:",pk"`
	CustomerID    int64
	Points        int
}

// BunWithLedger rewards the order once, with bun.
func BunWithLedger(ctx context.Context, db *bun.DB, customerID, orderID int64) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		entry := &bunLedgerEntry{OrderID: orderID, CustomerID: customerID, Points: Points}
		res, err := tx.NewInsert().Model(entry).On("CONFLICT (order_id) DO NOTHING").Exec(ctx)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // nil: rewarded before
		}
		return bunAddPoints(ctx, tx, customerID)
	})
}

// BunIncrement adds the points on every delivery, with bun.
func BunIncrement(ctx context.Context, db *bun.DB, customerID, orderID int64) error {
	return bunAddPoints(ctx, db, customerID)
}

func bunAddPoints(ctx context.Context, db bun.IDB, customerID int64) error {
	_, err := db.NewUpdate().Table("customers").
		Set("points = points + ?", Points).
		Where("id = ?", customerID).
		Exec(ctx)
	return err
}
