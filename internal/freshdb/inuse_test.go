package freshdb_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/freshdb"
)

// A pool a setup kept (a package variable) reconnects to the template
// after its steps ended: no database can be copied from it then. That is
// the user's code, named as such with a hint, not "internal" (issue 27).
func TestTemplateInUseIsTheUsersError(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	tpl, err := freshdb.Prepare(ctx, srv, []freshdb.Step{{Name: "schema", SQL: "-- " + randomHex(t, 8) + "\nCREATE TABLE a (id int);"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(srv.ConnString(tpl.Name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "kept-pool"
	kept, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Fresh(ctx)
	kept.Close(ctx)
	if err == nil {
		t.Fatal("Fresh succeeded with a session on the template")
	}
	msg := blame.Message(err)
	for _, want := range []string{
		"[twice] the template database " + tpl.Name + " has sessions connected to it (pid ",
		" (kept-pool, idle)", // among the sessions: on a URL server another may be listed beside it
		") after its setup steps ended",
		"use db.Pool(ctx) or db.SQL(), which the harness closes when the func returns",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Fresh error = %q\nwant it to contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "internal") || !blame.IsUser(err) {
		t.Errorf("Fresh error = %q, want it the user's, not internal", msg)
	}
}
