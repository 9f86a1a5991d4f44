// Package assert is twice's oracle: it snapshots every user table of a
// PostgreSQL database and compares a scenario's snapshot with the snapshot
// of one clean run, printing differences as go-cmp does, (-once +twice);
// and it judges the effects that left the database (emails, payments) by
// the policy of their kind.
//
// # Snapshots
//
// [TakeSnapshot] reads every ordinary and partitioned table outside the
// system schemas and the schema "twice", which the harness keeps for
// itself. Values are plain Go data (see [Snapshot]) so a snapshot can be
// written as JSON. A [Snapshotter] snapshots many databases of one schema
// (the copies of a template): it reads the catalog once and each snapshot
// in one round trip, and reads the catalog again when a handler's DDL
// changed it.
//
// # No false alarms
//
// Two runs of a correct handler do not leave byte-identical databases, so
// the comparison leaves out what is noise:
//
//   - Sequence-drawn values (serial, identity, a nextval default) and the
//     foreign keys pointing at them compare by rank: on each side the
//     column's smallest value is #1, the next #2, and so on. A rolled-back
//     attempt burns sequence values; ranks do not see the gap. Sequence
//     positions themselves are not state and are never compared.
//   - A value drawn from a sequence some other way (an explicit nextval
//     in the INSERT, a number inside text: 'X-' || nextval('doc_seq'))
//     compares raw, so a burnt value shows ("X-2" for "X-1"). The diff
//     then explains itself: [TableDiff].Gaps names the column and the
//     sequence the scenario advanced further than the clean run, learnt
//     from the sequences' positions in each [Snapshot] and the differing
//     digits. [Options].SequenceColumns compares such a column by rank.
//   - Columns whose values differ between two clean runs, such as now()
//     or gen_random_uuid(), are volatile: [VolatileColumns] finds them,
//     [Options].Volatile leaves them out, and [StateError] names them.
//     Inside json/jsonb columns only the differing paths are volatile
//     ("docs.payload.meta.token"), and the rest of the document compares.
//   - Rows compare as a multiset: their order does not matter.
//
// Users can also leave out tables and columns and pass go-cmp options.
//
// # Effects
//
// An [Effect] is one call to something outside the database, as the
// harness's fakes record it: its kind, payload, idempotency key, result,
// and the delivery and attempt that made it. [DiffEffects] compares a
// scenario's effects with the clean run's by kind and payload (the key,
// result, time and attribution print but do not count), under a [Policy]
// per kind:
//
//   - ExactlyOnce (the default): the same effects, as many times.
//   - AtLeastOnce (the seed's receipts): a missing effect is always a
//     finding; a duplicate is tolerated only where the scenario made it
//     unavoidable (deliveries overlapped, or a delivery died between an
//     effect and its durable record), never after clean completed runs.
//   - AtMostOnce: the mirror; a duplicate is always a finding.
//   - Repeatable: harmless to repeat at the provider (cancelling a
//     subscription): any number of copies is fine, a missing one is not.
//   - AckRecorded: at-least-once with the queue's ack as the only record
//     (a digest mailed with nothing in the database): a duplicate from a
//     redelivery of the same job, one delivery after another, is
//     tolerated; one from a producer's copy or an overlapping delivery
//     is not.
//
// [VolatileEffects] finds payload fields that differ between two clean
// runs, as [VolatileColumns] does for tables, down to the path inside a
// nested field ("webhook.meta.request_id").
//
// # Limits
//
//   - Ranks follow the order of the raw values, so a scenario that inserts
//     the same rows in another order (two concurrent deliveries) numbers
//     them differently and shows a difference.
//   - A deleted and re-inserted row with the same content compares equal
//     to the original, as its rank is the same.
//   - Only columns whose default calls nextval, identity columns and
//     Options.SequenceColumns count as sequence-drawn: values a handler
//     takes with an explicit nextval in its INSERT compare raw, and only
//     a difference that is exactly such a gap is explained (the same text
//     around the digits, each number 1 to N values further on, N being how
//     much further the sequence stands than after the clean run).
//   - A column of a composite foreign key is renumbered through the matching
//     referenced column, one column at a time.
//   - A volatile column is left out entirely: when it is a key (a random
//     UUID), the foreign keys pointing at it are compared raw and are
//     volatile too, so the link between the rows is not checked.
//   - A jsonb JSON null and an SQL NULL both read as nil.
//   - DiffState expects the Go types TakeSnapshot gives; a snapshot that
//     went through JSON has float64 where int64 was.
//   - Views, materialized views, foreign tables and tables owned by
//     extensions are left out.
//   - CmpOptions that equate rows whose values differ are honoured by
//     trying row pairs with go-cmp, which is skipped past 250,000 pairs in
//     one table; use IgnoreColumns for columns that differ in every row.
//
// # Example
//
//	ref1, _ := assert.TakeSnapshot(ctx, conn) // after one clean run
//	ref2, _ := assert.TakeSnapshot(ctx, conn2) // after another, on a fresh database
//	got, _ := assert.TakeSnapshot(ctx, conn3)  // after the scenario
//	assert.StateEqual(t, ref1, got, assert.Options{
//		Label:    "run-twice",
//		Volatile: assert.VolatileColumns(ref1, ref2),
//	})
package assert
