package drivers

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Customer is a row of customers, as GORM maps it.
type Customer struct {
	ID     int64 `gorm:"primaryKey;autoIncrement:false"`
	Points int
}

// LedgerEntry is a row of points_ledger, as GORM maps it.
type LedgerEntry struct {
	OrderID    int64 `gorm:"primaryKey;autoIncrement:false"`
	CustomerID int64
	Points     int
}

// TableName is points_ledger, for GORM.
func (LedgerEntry) TableName() string { return "points_ledger" }

// GormWithLedger rewards the order once, with GORM.
func GormWithLedger(ctx context.Context, db *gorm.DB, customerID, orderID int64) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Clauses(clause.OnConflict{DoNothing: true}).
			Create(&LedgerEntry{OrderID: orderID, CustomerID: customerID, Points: Points})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		return tx.Model(&Customer{ID: customerID}).UpdateColumn("points", gorm.Expr("points + ?", Points)).Error
	})
}

// GormIncrement adds the points on every delivery, with GORM.
func GormIncrement(ctx context.Context, db *gorm.DB, customerID, orderID int64) error {
	return db.WithContext(ctx).Model(&Customer{ID: customerID}).UpdateColumn("points", gorm.Expr("points + ?", Points)).Error
}
