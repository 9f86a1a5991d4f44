package wireproxy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runtwice/twice/internal/wireproxy"
)

// The harness gives each delivery a proxy and the handler its DSN. Here the
// delivery crashes just before its third step reaches the server.
func Example() {
	ctx := context.Background()
	p, err := wireproxy.Listen(wireproxy.Config{
		Label:    "d1",
		Upstream: "postgres://postgres@127.0.0.1:5432/twice_run1_s1?sslmode=disable",
		Hooks: wireproxy.Hooks{
			Before: func(ctx context.Context, s wireproxy.Step) wireproxy.Action {
				if s.Index == 3 {
					return wireproxy.Crash
				}
				return wireproxy.Forward
			},
			After: func(s wireproxy.Step, err error) {
				fmt.Printf("step %d done (commit point: %v): %v\n", s.Index, s.CommitPoint, err)
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	pool, err := pgxpool.New(ctx, p.DSN())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_ = runHandler(ctx, pool) // sees an error at step 3; its result is ignored
	fmt.Println(p.Dead())     // the delivery is dead: its connections are refused
}

func runHandler(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "UPDATE items SET note = 'x' WHERE id = 1")
	return err
}
