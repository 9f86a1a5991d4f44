package harness_test

import (
	"context"
	"net"
	"net/url"
	"testing"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
)

// Delivery.DSN is a postgres:// URL on 127.0.0.1, the one form every
// common driver reads alike: bun's pgdriver dials a host=/dir socket
// directory as if it were the socket. examples/drivers checks each driver
// on it; this keeps the form.
func TestDeliveryDSNIsLoopbackURL(t *testing.T) {
	var dsn string
	job := harness.Job{Name: "dsn", Handler: func(ctx context.Context, d *harness.Delivery) error {
		dsn = d.DSN
		_, err := d.DB.Exec(ctx, `UPDATE customers SET points = 170 WHERE id = 77`)
		return err
	}}
	res, err := harness.Run(t.Context(), job, harness.Config{
		Setup:  []harness.Setup{harness.SQL(`CREATE TABLE customers (id bigint PRIMARY KEY, points int NOT NULL); INSERT INTO customers VALUES (77, 120);`)},
		Faults: []faults.Fault{faults.RunTwice()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.DropDatabases(context.Background()) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("Delivery.DSN %q is not a URL: %v", dsn, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if u.Scheme != "postgres" || err != nil || host != "127.0.0.1" || port == "" || u.User.Username() == "" || len(u.Path) < 2 {
		t.Errorf("Delivery.DSN = %q, want postgres://user@127.0.0.1:port/database", dsn)
	}
	if _, ok := u.User.Password(); ok {
		t.Errorf("Delivery.DSN = %q carries a password; the proxy asks for none", dsn)
	}
	if q := u.Query(); len(q) != 1 || q.Get("sslmode") != "disable" {
		t.Errorf("Delivery.DSN = %q has query %v, want only sslmode=disable (a host= would send bun's pgdriver to a unix socket)", dsn, q)
	}
}
