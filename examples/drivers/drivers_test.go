package drivers_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "github.com/lib/pq"              // database/sql driver "postgres"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/runtwice/twice/examples/drivers"
	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

const customerID, orderID = 77, 9812

// A job as the drivers package writes it, on the handle T its driver
// opens.
type job[T any] func(ctx context.Context, db T, customerID, orderID int64) error

// A driver opens its handle for one delivery, the way a production worker
// would open it from a DSN (or takes the one the Delivery has), and says
// how to close it.
type opener[T any] func(ctx context.Context, d *harness.Delivery) (db T, closeDB func(), err error)

// handler runs j on the handle open gives the delivery.
func handler[T any](open opener[T], j job[T]) harness.Handler {
	return func(ctx context.Context, d *harness.Delivery) error {
		db, closeDB, err := open(ctx, d)
		if err != nil {
			return err
		}
		defer closeDB()
		return j(ctx, db, customerID, orderID)
	}
}

func noClose() {}

func pgxConnect(ctx context.Context, d *harness.Delivery) (drivers.PgxDB, func(), error) {
	conn, err := pgx.Connect(ctx, d.DSN)
	if err != nil {
		return nil, nil, err
	}
	return conn, func() { _ = conn.Close(context.WithoutCancel(ctx)) }, nil
}

func pgxpoolNew(ctx context.Context, d *harness.Delivery) (*pgxpool.Pool, func(), error) {
	pool, err := pgxpool.New(ctx, d.DSN)
	if err != nil {
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

func deliveryDB(_ context.Context, d *harness.Delivery) (*pgxpool.Pool, func(), error) {
	return d.DB, noClose, nil
}

// sqlOpen opens database/sql's driver on the delivery's DSN: "pgx" (pgx's
// stdlib) or "postgres" (lib/pq).
func sqlOpen(driverName string) opener[*sql.DB] {
	return func(_ context.Context, d *harness.Delivery) (*sql.DB, func(), error) {
		db, err := sql.Open(driverName, d.DSN)
		if err != nil {
			return nil, nil, err
		}
		return db, func() { _ = db.Close() }, nil
	}
}

// deliverySQL is the *sql.DB the harness opens and closes.
func deliverySQL(_ context.Context, d *harness.Delivery) (*sql.DB, func(), error) {
	db, err := d.SQL()
	return db, noClose, err
}

// gormConfig is a new *gorm.Config for every gorm.Open: GORM keeps the
// one it is given and writes its connection pool into it, so deliveries
// sharing one would send their statements on each other's connections.
func gormConfig() *gorm.Config { return &gorm.Config{Logger: logger.Discard} }

func gormOpen(_ context.Context, d *harness.Delivery) (*gorm.DB, func(), error) {
	db, err := gorm.Open(postgres.Open(d.DSN), gormConfig())
	if err != nil {
		return nil, nil, err
	}
	return db, closeGorm(db), nil
}

func gormOnDeliverySQL(_ context.Context, d *harness.Delivery) (*gorm.DB, func(), error) {
	sqlDB, err := d.SQL()
	if err != nil {
		return nil, nil, err
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), gormConfig())
	return db, noClose, err
}

func closeGorm(db *gorm.DB) func() {
	return func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}
}

// bunPgdriver is bun on its own driver, connected with the DSN.
func bunPgdriver(_ context.Context, d *harness.Delivery) (*bun.DB, func(), error) {
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(d.DSN))), pgdialect.New())
	return db, func() { _ = db.Close() }, nil
}

// bunPgdialect is bun's dialect over pgx's stdlib, on Delivery.SQL.
func bunPgdialect(_ context.Context, d *harness.Delivery) (*bun.DB, func(), error) {
	sqlDB, err := d.SQL()
	if err != nil {
		return nil, nil, err
	}
	return bun.NewDB(sqlDB, pgdialect.New()), noClose, nil
}

type matrixRow struct {
	name                  string
	withLedger, increment harness.Handler
}

func newRow[T any](name string, open opener[T], withLedger, increment job[T]) matrixRow {
	return matrixRow{name: name, withLedger: handler(open, withLedger), increment: handler(open, increment)}
}

var matrix = []matrixRow{
	newRow("pgx.Connect", pgxConnect, drivers.PgxWithLedger, drivers.PgxIncrement),
	newRow("pgxpool.New", pgxpoolNew, pgxJob(drivers.PgxWithLedger), pgxJob(drivers.PgxIncrement)),
	newRow("Delivery.DB", deliveryDB, pgxJob(drivers.PgxWithLedger), pgxJob(drivers.PgxIncrement)),
	newRow("database-sql-pgx-stdlib", sqlOpen("pgx"), drivers.SQLWithLedger, drivers.SQLIncrement),
	newRow("database-sql-Delivery.SQL", deliverySQL, drivers.SQLWithLedger, drivers.SQLIncrement),
	newRow("lib-pq", sqlOpen("postgres"), drivers.SQLWithLedger, drivers.SQLIncrement),
	newRow("gorm", gormOpen, drivers.GormWithLedger, drivers.GormIncrement),
	newRow("gorm-Delivery.SQL", gormOnDeliverySQL, drivers.GormWithLedger, drivers.GormIncrement),
	newRow("bun-pgdriver", bunPgdriver, drivers.BunWithLedger, drivers.BunIncrement),
	newRow("bun-pgdialect-Delivery.SQL", bunPgdialect, drivers.BunWithLedger, drivers.BunIncrement),
	newRow("sqlc-pgx-pgxpool.New", pgxpoolNew, drivers.SqlcPgxWithLedger, drivers.SqlcPgxIncrement),
	newRow("sqlc-database-sql-Delivery.SQL", deliverySQL, drivers.SqlcStdWithLedger, drivers.SqlcStdIncrement),
	newRow("sqlc-database-sql-lib-pq", sqlOpen("postgres"), drivers.SqlcStdWithLedger, drivers.SqlcStdIncrement),
}

// pgxJob narrows a job on drivers.PgxDB to a pool.
func pgxJob(j job[drivers.PgxDB]) job[*pgxpool.Pool] {
	return func(ctx context.Context, db *pgxpool.Pool, customerID, orderID int64) error {
		return j(ctx, db, customerID, orderID)
	}
}

// config checks the faults that show a driver works with the harness: a
// redelivery, a crash before each statement (the server rolls back what
// the driver began and the driver's connection is cut), a COMMIT whose
// reply never reaches the driver, and two deliveries whose statements
// interleave and wait on each other's locks. The examples run the whole
// default matrix; here it would cost minutes for no new driver behaviour.
var config = harness.Config{
	Setup:  []harness.Setup{harness.SQL(drivers.Schema)},
	Faults: []faults.Fault{faults.RunTwice(), faults.CrashAtEveryStep(), faults.AmbiguousCommits(), faults.ConcurrentDelivery()},
}

// TestDriverMatrix: through every driver, twice passes the job that
// rewards an order once and finds the one that adds points on every
// delivery, so each driver's statements reach it as steps, crashes and
// interleavings included.
func TestDriverMatrix(t *testing.T) {
	for _, row := range matrix {
		t.Run(row.name, func(t *testing.T) {
			t.Run("with-ledger", func(t *testing.T) {
				res := harness.Check(t, harness.Job{Name: row.name + "-with-ledger", Handler: row.withLedger}, config)
				if res == nil {
					return // Check said why
				}
				if res.Outcome != result.OutcomeIdempotent {
					t.Errorf("Outcome = %s, want %s", res.Outcome, result.OutcomeIdempotent)
				}
				wantSteps(t, res, "insert into points_ledger", "update customers")
				waits := 0
				for _, s := range res.Scenarios {
					waits += s.LockWaits
				}
				// One shard of a split run (twice report -shard) may be
				// dealt no concurrent delivery.
				if waits == 0 && res.Shard == nil {
					t.Errorf("no concurrent delivery waited on the other's ledger row: the driver's statements were not interleaved")
				}
			})
			t.Run("increment", func(t *testing.T) {
				cfg := config
				cfg.ExpectFinding = "adds the points on every delivery"
				cfg.ExpectPattern = result.IncrementWithoutRecord
				res := harness.Check(t, harness.Job{Name: row.name + "-increment", Handler: row.increment}, cfg)
				if res == nil {
					return // Check said why
				}
				if res.Outcome != result.OutcomeExpectedFinding && res.Shard == nil {
					t.Errorf("Outcome = %s, want %s", res.Outcome, result.OutcomeExpectedFinding)
				}
				wantSteps(t, res, "update customers")
				for _, s := range res.Scenarios {
					if s.Fault == faults.NameRunTwice && len(s.StateDiff) == 0 {
						t.Errorf("run-twice (%s): no state difference; the second delivery's points were not seen", s.Schedule)
					}
				}
			})
		})
	}
}

// wantSteps fails unless the clean run's steps include each statement,
// compared in lower case without identifier quotes (GORM and bun quote).
func wantSteps(t *testing.T, res *harness.Result, statements ...string) {
	t.Helper()
	var seen []string
	for _, s := range res.Steps {
		seen = append(seen, strings.ToLower(strings.ReplaceAll(s.SQL, `"`, "")))
	}
	for _, want := range statements {
		found := false
		for _, s := range seen {
			found = found || strings.Contains(s, want)
		}
		if !found {
			t.Errorf("the clean run's steps %q have no %q", seen, want)
		}
	}
}
