// Package twicenats checks NATS JetStream consumers
// (github.com/nats-io/nats.go/jetstream) that write to PostgreSQL with
// twice, on an embedded nats-server (github.com/nats-io/nats-server/v2)
// that runs in the test process: no network, not even loopback.
//
//	func TestCredit(t *testing.T) {
//		harness.Check(t, twicenats.Job("credit", twicenats.Spec{
//			Stream:   jetstream.StreamConfig{Name: "LEDGER", Subjects: []string{"ledger.>"}},
//			Consumer: jetstream.ConsumerConfig{Durable: "crediter", AckWait: 5 * time.Minute},
//			Subject:  "ledger.credit", Data: credit, MsgID: "credit-9812",
//		}, func(d *harness.Delivery) jetstream.MessageHandler { return ledger.Inbox{DB: d.DB}.Handle }),
//			harness.Config{Setup: []harness.Setup{harness.SQL(ledger.Schema)}})
//	}
//
// # What is real
//
// Each scenario gets a stream and a pull consumer of its own on the
// server, made from the production StreamConfig and ConsumerConfig (under
// a per-scenario name and subject prefix; the handler sees the production
// subject and stream name). The message is published with the real
// client (jetstream.PublishMsg, with Nats-Msg-Id when Spec.MsgID is set),
// so the stream's own duplicate window refuses a producer's copy. Every
// delivery is pulled from the consumer with the real client
// (Consumer.Fetch, what Consume and a pull loop do), so the handler gets
// the server's jetstream.Msg: its data, headers and metadata
// (NumDelivered, sequences) are the server's. The handler's answers go
// to the server through that message: Ack (sent as DoubleAck, so the
// server has applied it before the harness's next operation), Nak,
// NakWithDelay, Term, TermWithReason, InProgress.
//
// # What is modelled: the server's timers
//
// AckWait, BackOff and NakWithDelay's delay run on the server's wall
// clock, and a check runs on the harness clock, which jumps (a
// redelivery 5 minutes later takes no time). So the consumer the server
// runs has an AckWait of 24h and no BackOff: its own timer never fires.
// The adapter keeps the production timing (BackOff overriding AckWait,
// as the server does: the first redelivery comes BackOff[0] after a
// delivery, the n-th BackOff[n-1]; a Nak'd message at once;
// NakWithDelay(d) after d, plus BackOff[n-1]-BackOff[0] with BackOff, as
// the server dates it; InProgress restarts the wait) and, when the
// harness clock reaches a redelivery, sends the server a Nak on the
// message's reply subject, so the server itself redelivers it (with its
// own NumDelivered, and MaxDeliver enforced by the server). Rules.Redeliver
// is the first redelivery's time, so the visibility-timeout fault comes
// at BackOff[0] when BackOff is set. conformance_test.go holds the model
// to the server's own timers and normalisation.
//
// A late producer copy (past the stream's duplicate window on the harness
// clock) is published once the server has forgotten the Nats-Msg-Id: the
// window is shortened to its minimum (100ms) and the server's own purge
// awaited.
//
// # Acks
//
// A MessageHandler answers by calling methods on the message; it returns
// nothing. An answer the handler gives and then goes on (a statement on
// d.DB after it, or another delivery is handed the message while it
// still runs) was on the wire before it went on: it is sent at once. The
// handler's last answer, after its last statement, is the delivery's ack:
// crash-before-ack and lost-ack withhold it. Statements are counted on
// d.DB (a pgx tracer on the delivery's own DSN); a handler that writes
// through d.SQL() or its own pool on d.DSN has its answer taken as its
// last. When the message is handed out again while the handler still
// runs (visibility-timeout, concurrent-delivery), whether the handler
// has answered by then is timing: the scenario records a race
// (result.SettledBeside) and runs again, and one whose runs differ is
// flaky, not a pass.
//
// What each fault means for JetStream:
//
//   - crash-before-ack, lost-ack: the final Ack never reaches the server;
//     it delivers the message again after AckWait (BackOff[0]).
//   - crash-mid-job: the worker dies before step k; an Ack sent before it
//     (ack before the write) stands, and the message is never delivered
//     again.
//   - ambiguous-commit: the handler's own error path answers (Nak: at
//     once; nothing: after AckWait).
//   - visibility-timeout: the message is delivered again BackOff[0] (or
//     AckWait) after the first delivery started, while it still runs; both
//     acks reach the server, which takes the first.
//   - concurrent-delivery: the server hands an unacked message to no
//     second consumer before its AckWait: "not delivered".
//   - producer-retry: with Spec.MsgID the stream refuses the copy inside
//     its duplicate window ("not delivered"); without, the copy is a
//     message of its own, with a new stream sequence. With Spec.Publish
//     the producer's own code publishes each copy at the copy's time,
//     with the Nats-Msg-Id it builds.
//   - redrive: the message comes back after its wait if the server still
//     holds it unacked; an acked or terminated one, or one past
//     MaxDeliver, is not delivered.
//   - MaxDeliver: a delivery that is not acked when the server has
//     delivered the message MaxDeliver times is Discarded: the check
//     reports the job as not completed.
//
// README.md in this directory (github.com/runtwice/twice/adapters/nats) has
// the versions this adapter is tested on, its example and what each
// fault found there, and how to use it from a clone.
package twicenats
