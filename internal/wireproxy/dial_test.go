package wireproxy_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/wireproxy"
)

// dialThrough connects to p in the process (Proxy.Dial), with dsn's other
// settings.
func dialThrough(t testing.TB, p *wireproxy.Proxy) (*pgx.Conn, error) {
	t.Helper()
	cfg, err := pgx.ParseConfig(p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) { return p.Dial(ctx) }
	return pgx.ConnectConfig(context.Background(), cfg)
}

// A connection dialled in the process is a connection of the delivery
// like one on the listener: its statements are steps, a batch larger than
// the pipe's buffer goes through, Kill cuts it, later ones are refused,
// and Dial fails once the proxy is closed.
func TestDial(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	var rec recorder
	p := listen(t, "d1", dsn, rec.hooks())
	c, err := dialThrough(t, p)
	if err != nil {
		t.Fatalf("connecting through Dial: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 80); err != nil {
		t.Fatal(err)
	}
	// 2000 statements of 1 kB each: the batch and its replies are each
	// one step's round trip, larger than the pipe's buffer.
	var batch pgx.Batch
	for i := range 2000 {
		batch.Queue("SELECT $1::int, repeat('x', 1000)", i)
	}
	if err := c.SendBatch(ctx, &batch).Close(); err != nil {
		t.Fatalf("a large batch through Dial: %v", err)
	}
	if n := count(t, connect(t, dsn), "SELECT count(*) FROM items WHERE id = 80"); n != 1 {
		t.Errorf("count of the row inserted through Dial = %d, want 1", n)
	}
	if got := len(rec.steps()); got != 2 {
		t.Errorf("%d steps through Dial, want 2 (the insert and the batch)", got)
	}
	p.Kill()
	if _, err := c.Exec(ctx, "INSERT INTO items (id) VALUES ($1)", 81); err == nil {
		t.Error("a statement through Dial succeeded after Kill")
	}
	_, err = dialThrough(t, p)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "08004" {
		t.Errorf("connecting through Dial after Kill: err = %v, want SQLSTATE 08004 (refused)", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Dial(ctx); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Dial after Close: err = %v, want net.ErrClosed", err)
	}
}

// A message the server sends on its own (a notification here; a
// ParameterStatus or a NoticeResponse alike) to a connection dialled in
// the process whose client is not reading waits in the pipe for the
// client, as it would in a socket's buffer: the relay goes back to
// waiting for the client, so Release gives the backend back rather than
// cut it, and the client still reads the message.
func TestDialServerMessageOnIdleConnection(t *testing.T) {
	ctx := context.Background()
	dsn := newDatabase(t)
	b := newBackends(t)
	p1 := listenShared(t, "d1", dsn, b, wireproxy.Hooks{})
	cfg, err := pgx.ParseConfig(p1.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var client net.Conn
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := p1.Dial(ctx)
		client = c
		return c, err
	}
	c1, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close(ctx)
	pid := backendPID(t, c1)
	exec(t, c1, "LISTEN twice_idle")
	exec(t, connect(t, dsn), "NOTIFY twice_idle, 'while idle'")
	eventually(t, "the notification reaching the client's end of the pipe", func() bool { return wireproxy.Buffered(client) > 0 })

	p1.Release()
	if s := b.Stats(); s.Kept != 1 || s.Idle != 1 {
		t.Errorf("after Release: %+v, want the backend kept", s)
	}
	n, err := c1.WaitForNotification(ctx)
	if err != nil || n.Channel != "twice_idle" || n.Payload != "while idle" {
		t.Errorf("WaitForNotification after Release = %+v, %v; want the notification sent while idle", n, err)
	}
	p2 := listenShared(t, "d2", dsn, b, wireproxy.Hooks{})
	if got := backendPID(t, connect(t, p2.DSN())); got != pid {
		t.Errorf("the next delivery got backend %d, want the kept %d", got, pid)
	}
}
