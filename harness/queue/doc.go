// Package queue is the interface between twice's harness and a job queue:
// what a queue adapter implements so that a check runs the job as the
// queue runs it, and the harness's own Model of a queue for jobs without
// one.
//
// A queue's bookkeeping belongs to the queue, not to the handler's steps.
// The harness enqueues the job through Queue.Enqueue, hands each delivery
// out through Fetch, and records how it ended through Ack or Nack, on its
// own connection to the scenario's database, outside the wire proxy: none
// of it is a fault point, crash-before-ack and lost-ack withhold the Ack,
// and a delivery the queue refuses (a duplicate producer copy, a job still
// held by another attempt) is reported as not delivered. Rules says when
// the queue hands a job out again and when it cancels a delivery; they are
// the check's only queue timing.
//
// # The queue's schema
//
// A queue carries its schema (Queue.Schema): the harness applies it to the
// template database before the job's own Config.Setup, in harness.Check,
// harness.Run and harness.Explore alike, so an adapter's Job is checked
// with no adapter-specific setup:
//
//	res, err := harness.Run(ctx, twiceriver.Job("reward-order", args, newWorker),
//		harness.Config{Setup: []harness.Setup{harness.SQL(points.Schema)}})
//
// Schema says only what the scenario's PostgreSQL database needs. A queue
// whose own storage is elsewhere (Redis, a broker) returns the zero Schema
// and keeps that storage itself, fresh for every scenario (see
// Queue.Enqueue).
//
// # Writing an adapter
//
// An adapter's Job returns a harness.Job whose Queue is its Queue and
// whose Handler (or NewWorker) runs the production handler with what
// Fetch handed out (harness.Delivery.Queued). The package imports nothing
// of twice's, so an adapter depends on the harness only for harness.Job
// and harness.Delivery. The plumbing every adapter of a PostgreSQL or
// in-process queue needed is here: Autocommit, the harness's connection
// as the pgx.Tx a library's transactional functions take; ValuesFirst,
// the delivery's context carrying the values the library put in its own;
// and Pool, a pool on the scenario's database for a library that wants
// one. An adapter that runs the producer's own code for an enqueue calls
// it with RunProducer and picks what the check follows with FollowOne.
// The conformance suite, queuetest, holds an adapter to this package's
// promises.
package queue
