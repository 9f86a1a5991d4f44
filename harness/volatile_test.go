package harness_test

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
)

const docsSchema = `
CREATE TABLE docs (id int PRIMARY KEY, payload jsonb NOT NULL);
INSERT INTO docs VALUES (1, '{"n": 0, "meta": {"token": null, "attempt": 0}}');
`

func runDocs(t *testing.T, job harness.Job, sched string, tweak func(*harness.Config)) *harness.Result {
	t.Helper()
	s, err := faults.Parse(sched)
	require.NoError(t, err)
	cfg := harness.Config{
		Setup:  []harness.Setup{harness.SQL(docsSchema), harness.SQL(counterSchema)},
		Faults: []faults.Fault{faults.Replay(s)},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	res, err := harness.Run(t.Context(), job, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { res.DropDatabases(context.Background()) })
	require.Len(t, res.Scenarios, 1)
	return res
}

// One key of a jsonb document holds a random UUID: only that key is
// volatile, so a counter in the same document that the job increments on
// every delivery is still compared, and found.
func TestVolatileJSONPath(t *testing.T) {
	job := harness.Job{Name: "docs", Handler: exec(`
UPDATE docs SET payload = jsonb_set(jsonb_set(payload,
  '{n}', to_jsonb((payload->>'n')::int + 1)),
  '{meta,token}', to_jsonb(gen_random_uuid()::text))
WHERE id = 1`)}
	res := runDocs(t, job, "j1a1w1 > j1a2w2", nil)
	assert.Equal(t, []string{"docs.payload.meta.token"}, res.Volatile)
	sc := res.Scenarios[0]
	assert.Equal(t, result.NotIdempotent, sc.Verdict)
	require.Len(t, sc.StateDiff, 1)
	assert.Contains(t, sc.StateDiff[0].Diff, `"n":`)
	assert.NotContains(t, sc.StateDiff[0].Diff, `"token"`, "the volatile key is left out of the printed rows too")
}

// IgnoreColumns takes a path into a json document: the attempt a handler
// stamps into it is left out, the rest still compared.
func TestIgnoreColumnsPath(t *testing.T) {
	job := harness.Job{Name: "docs", Handler: exec(`
UPDATE docs SET payload = jsonb_set(jsonb_set(payload, '{n}', '1'), '{meta,attempt}', to_jsonb($1::int))
WHERE id = 1`, func(d *harness.Delivery) any { return d.Attempt })}
	res := runDocs(t, job, "j1a1w1 > j1a2w2", nil)
	assert.Equal(t, result.NotIdempotent, res.Scenarios[0].Verdict, "the attempt differs unless ignored")
	res = runDocs(t, job, "j1a1w1 > j1a2w2", func(c *harness.Config) { c.IgnoreColumns = []string{"docs.payload.meta.attempt"} })
	assert.Equal(t, result.Idempotent, res.Scenarios[0].Verdict, "%v", res.Scenarios[0].Problems)
}

// An effect payload the same: a random request ID inside it is volatile
// by itself, and a count next to it that a redelivery raises is found.
func TestVolatileEffectPath(t *testing.T) {
	job := harness.Job{Name: "webhook", Handler: func(ctx context.Context, d *harness.Delivery) error {
		var n int
		if err := d.DB.QueryRow(ctx, `UPDATE counters SET n = n + 1 RETURNING n`).Scan(&n); err != nil {
			return err
		}
		payload := map[string]any{"event": "hit", "meta": map[string]any{"request_id": rand.Text(), "n": n}}
		return d.Effect(ctx, "webhook", "", payload, func(context.Context) error { return nil })
	}}
	// The first delivery dies before its webhook: the redelivery sends
	// the only one, with the count raised twice.
	res := runDocs(t, job, "j1a1w1!crash:2 > +30s j1a2w2", nil)
	assert.Equal(t, []string{"webhook.meta.request_id"}, res.VolatileEffects)
	sc := res.Scenarios[0]
	require.NotNil(t, sc.EffectDiff, "the count inside the payload is compared")
	assert.Equal(t, 1, sc.EffectDiff.Missing)
	assert.Equal(t, 1, sc.EffectDiff.Extra)
	text := sc.EffectDiff.String()
	assert.Contains(t, text, `meta={"n":2}`)
	assert.Contains(t, text, "volatile effect fields, left out: webhook.meta.request_id")
}
