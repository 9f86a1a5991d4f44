package harness_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/faults"
	"github.com/runtwice/twice/harness"
	"github.com/runtwice/twice/harness/result"
	"github.com/runtwice/twice/internal/recordtb"
)

// CheckRegistered runs each sample and fails naming every registered
// kind without one, every sample of a kind not registered, a sample with
// no kind, and a registry with nothing in it.
func TestCheckRegisteredNamesWhatNoSampleChecks(t *testing.T) {
	cfg := counterConfig()
	cfg.Faults = []faults.Fault{faults.RunTwice()}
	set := harness.Sample{Kind: "set", Job: harness.Job{Name: "set", Handler: exec(`UPDATE counters SET n = 5`)}}
	hit := harness.Sample{Kind: "hit", Job: harness.Job{Name: "hit", Handler: exec(`UPDATE counters SET n = n + 1`)}, ExpectFinding: "adds a hit per delivery"}

	for _, tc := range []struct {
		name    string
		kinds   []string
		samples []harness.Sample
		want    []string
	}{
		{"one without a sample", []string{"set", "hit", "reset"}, []harness.Sample{set, hit},
			[]string{"[twice] the test registry registers 1 kind that no sample checks: reset;"}},
		{"every one sampled", []string{"set", "hit"}, []harness.Sample{set, hit}, nil},
		{"a sample not registered", []string{"set"}, []harness.Sample{set, hit},
			[]string{"[twice] samples check 1 kind the test registry does not hold: hit;"}},
		{"a sample with no kind", []string{"set"}, []harness.Sample{set, {Job: hit.Job}},
			[]string{`[twice] a sample job "hit" names no kind`}},
		{"nothing registered", nil, []harness.Sample{set},
			[]string{"[twice] the test registry holds no kind of work, so checking what it registers would check nothing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := recordtb.New(t)
			var results []*harness.Result
			rec.Run(func(tb testing.TB) {
				results = harness.CheckRegistered(tb, "test registry", tc.kinds, cfg, tc.samples...)
			})
			errs := rec.Errors()
			require.Len(t, errs, len(tc.want), "%s", strings.Join(errs, "\n"))
			for i, w := range tc.want {
				assert.Contains(t, errs[i], w)
			}
			if len(tc.kinds) > 0 {
				require.Len(t, results, len(tc.samples))
				if tc.samples[0].Kind == "set" && results[0] != nil {
					assert.Equal(t, result.OutcomeIdempotent, results[0].Outcome)
				}
			}
		})
	}
}
