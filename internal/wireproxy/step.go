package wireproxy

import "context"

// Step is one round trip of a delivery that executes SQL.
type Step struct {
	// Delivery is Config.Label of the proxy.
	Delivery string
	// Index counts the delivery's steps from 1, across all its connections,
	// in the order they reached the proxy.
	Index int
	// Conn numbers the delivery's connections from 1 in the order they were
	// accepted (including cancel requests and refused ones).
	Conn int
	// PID is the server backend the step runs on.
	PID uint32
	// SQL is the query text; the statements of a batch that executes several
	// are joined with ";\n".
	SQL string
	// CommitPoint is set when the step makes something durable: a COMMIT of
	// an open transaction, or a statement outside a transaction block
	// (autocommit) that wrote. A lost reply to such a step is an ambiguous
	// commit. Hooks.Before sees what the SQL text shows (a COMMIT, an
	// INSERT, a CALL); Hooks.After also sees what the server said about a
	// statement whose text cannot tell (a SELECT of a function that
	// inserts): see commitprobe.go.
	CommitPoint bool
	// InTransaction is set when the step starts inside an explicit
	// transaction (which a crash at this step rolls back).
	InTransaction bool
	// Local is set when every statement of the step touches nothing
	// another session can see or wait for (see the package's Local).
	Local bool
	// Unholdable says why the step cannot be held (Hold), or is empty
	// when it can: it runs inside a transaction block, it begins or ends
	// one itself, or one of its statements cannot run inside one
	// (VACUUM, CREATE INDEX CONCURRENTLY).
	Unholdable string
}

// Action is the harness's decision about a step.
type Action int

const (
	// Forward lets the step reach the server and its reply the client.
	Forward Action = iota
	// Crash keeps the step from the server and kills the delivery, as if its
	// worker died just before sending it.
	Crash
	// Ambiguous forwards the step, waits for the server's whole reply, drops
	// it and cuts the step's connection: the step is applied but the
	// handler only sees its connection drop, as in a network failure. The
	// delivery lives on: its other connections stay, and it may connect
	// again and retry.
	Ambiguous
	// Hold forwards a step that runs outside a transaction block
	// (autocommit) inside a transaction the proxy opens around it, and
	// holds that transaction's commit and the step's reply until
	// Proxy.Commit: other sessions meanwhile run on snapshots taken
	// before the step committed, and wait for the locks it took, as they
	// would while it was still running. The client then gets the
	// statement's own reply, or the commit's error in place of it, as in
	// autocommit. Hooks.Held says when the statement has run; Hooks.After
	// comes after the commit. A step with Unholdable set is forwarded
	// as with Forward; so is one whose statement fails (the transaction
	// rolls back at once, and nothing is held).
	Hold
)

func (a Action) String() string {
	switch a {
	case Forward:
		return "forward"
	case Crash:
		return "crash"
	case Ambiguous:
		return "ambiguous"
	case Hold:
		return "hold"
	}
	return "Action(?)"
}

// Hooks let the harness steer a delivery's steps. All are optional. Each
// connection calls them from its own goroutines, so calls for different
// connections of a delivery may run at the same time. Hooks may call
// Proxy.Kill but not Proxy.Close, which waits for them.
type Hooks struct {
	// Before is called for every step before it is forwarded, on the
	// goroutine of the step's connection (so holding one connection never
	// holds another). It may block as long as the scheduler holds the step,
	// but must return once ctx is done: ctx ends when the delivery is killed
	// or the proxy closed, and the step is then dropped whatever Before
	// returns.
	Before func(ctx context.Context, s Step) Action
	// After is called once for every step Before let through (Forward or
	// Ambiguous), when its reply has arrived in full (before the client
	// sees it), or when the connection ended first. err is the server's
	// error for the step (a *pgconn.PgError), a connection error, or nil.
	// s.CommitPoint is final here (the server's answer included). After
	// must not block: it runs on the connection's reading goroutine.
	After func(s Step, err error)
	// Held is called for a step Before held (Hold) once its statement has
	// run, before its transaction commits: the step now waits for
	// Proxy.Commit. It is not called when the statement failed. It must
	// not block.
	Held func(s Step)
	// Refused is called when a connection is refused because the delivery
	// is dead (after Kill, or a Crash), with the reason. It must not block.
	Refused func(why error)
}
