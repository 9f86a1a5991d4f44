package servertest_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/execute"
	"github.com/runtwice/twice/internal/pgserver"
)

// The connection that asks the server about locks outlives its check,
// one per server, unless it is in a transaction or the server ended its
// session meanwhile: then the next check connects anew.
func TestAdminConnParkedForTheNextCheck(t *testing.T) {
	ctx := t.Context()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, srv.ConnString(""))
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	var p execute.AdminParking
	cs := srv.ConnString("")

	first, second := connect(), connect()
	p.Park(ctx, cs, first)
	p.Park(ctx, cs, second)
	if !second.IsClosed() {
		t.Errorf("a second connection parked beside the first was kept, want it closed")
	}
	if got := p.Take(ctx, cs); got != first {
		t.Errorf("Take = %p, want the parked connection %p", got, first)
	}
	if got := p.Take(ctx, cs); got != nil {
		t.Errorf("Take after the parked connection was taken = %p, want nil", got)
	}

	if _, err := first.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	p.Park(ctx, cs, first)
	if !first.IsClosed() {
		t.Errorf("a connection left in a transaction was parked, want it closed")
	}

	ended, killer := connect(), connect()
	defer func() { _ = killer.Close(ctx) }()
	p.Park(ctx, cs, ended)
	if _, err := killer.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(ended.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	if got := p.Take(ctx, cs); got != nil {
		t.Errorf("Take handed out a connection whose session the server ended")
	}
}
