// Package bounces records the bounce notifications an email provider
// posts: "message 7001 bounced". The provider retries its webhook, and
// the job queue may run two deliveries of one notification at once.
//
// Record guards its insert with WHERE NOT EXISTS in the same statement.
// Run one after the other the guard holds, but two deliveries whose
// statements overlap both take their snapshot before either has
// committed, both see no bounce, and both insert: the message counts two
// bounces and is suppressed after one. RecordUnique lets a unique
// constraint decide (ON CONFLICT DO NOTHING): the second insert waits for
// the first to commit and then does nothing.
package bounces

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is what the jobs need of a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Schema is a sent message and the bounces recorded for messages; a
// message with two bounces or more is suppressed.
const Schema = `
CREATE TABLE messages (
  id     bigint PRIMARY KEY,
  status text   NOT NULL DEFAULT 'sent'
);
CREATE TABLE bounces (
  message_id bigint NOT NULL REFERENCES messages,
  reason     text   NOT NULL
);
INSERT INTO messages (id) VALUES (7001);
`

// SchemaUnique is Schema with at most one bounce per message.
const SchemaUnique = Schema + `
ALTER TABLE bounces ADD UNIQUE (message_id);
`

// Record records the bounce of message unless one is recorded, then sets
// the message's status from the bounces it has.
func Record(ctx context.Context, db DBTX, message int64, reason string) error {
	if _, err := db.Exec(ctx, `
INSERT INTO bounces (message_id, reason)
SELECT $1, $2
WHERE NOT EXISTS (SELECT 1 FROM bounces WHERE message_id = $1)`, message, reason); err != nil {
		return err
	}
	return setStatus(ctx, db, message)
}

// RecordUnique records the bounce of message once, by the unique
// constraint of SchemaUnique, then sets the message's status.
func RecordUnique(ctx context.Context, db DBTX, message int64, reason string) error {
	if _, err := db.Exec(ctx, `
INSERT INTO bounces (message_id, reason) VALUES ($1, $2)
ON CONFLICT (message_id) DO NOTHING`, message, reason); err != nil {
		return err
	}
	return setStatus(ctx, db, message)
}

func setStatus(ctx context.Context, db DBTX, message int64) error {
	_, err := db.Exec(ctx, `
UPDATE messages SET status = CASE
  WHEN (SELECT count(*) FROM bounces WHERE message_id = $1) >= 2 THEN 'suppressed'
  ELSE 'bounced' END
WHERE id = $1`, message)
	return err
}
