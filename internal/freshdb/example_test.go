package freshdb_test

import (
	"context"
	"fmt"
	"testing/fstest"

	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

func Example() {
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	steps, err := freshdb.FromFS(fstest.MapFS{
		"migrations/001_customers.sql": {Data: []byte("CREATE TABLE customers (id serial PRIMARY KEY, points int);")},
		"migrations/002_seed.sql":      {Data: []byte("INSERT INTO customers (points) VALUES (10);")},
	}, "migrations")
	if err != nil {
		fmt.Println(err)
		return
	}
	tpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		fmt.Println(err)
		return
	}
	db, err := tpl.Fresh(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Drop(ctx)
	fmt.Println("connect with", db.ConnString)
}
