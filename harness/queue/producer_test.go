package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness/queue"
)

// A panic in the producer's code is its error, with the stack.
func TestRunProducerPanicIsError(t *testing.T) {
	err := queue.RunProducer(t.Context(), func(context.Context, int) error { panic("boom") }, 1)
	require.ErrorContains(t, err, "panicked: boom\n")
	require.Contains(t, err.Error(), "goroutine")
	require.NoError(t, queue.RunProducer(t.Context(), func(_ context.Context, n int) error { require.Equal(t, 7, n); return nil }, 7))
}

// The check follows one of the job's kind per call: none is the
// original's error or a copy's refusal, two are an error, and what else
// the code made is named.
func TestFollowOne(t *testing.T) {
	call := queue.ProducerCall{Which: "job: the code, send 1", Job: 1, Verb: "sent", Kind: "a",
		One: "thing of kind %q", Many: "things of kind %q", Per: "thing per send", Follows: "the thing it sends"}
	name := strings.Clone
	for _, tc := range []struct {
		name    string
		job     int
		made    []string
		others  func([]string) string
		want    string
		dup     string
		wantErr string
	}{
		{name: "one", job: 1, made: []string{"b", "a"}, want: "a"},
		{name: "none", job: 1, made: []string{"b"}, wantErr: `job: the code, send 1 sent no thing of kind "a" (it sent ["b"]); the check follows the thing it sends`},
		{name: "none listed", job: 1, made: []string{"b", "c"}, others: func(k []string) string { return strings.Join(k, "+") }, wantErr: `sent no thing of kind "a" (it sent b+c);`},
		{name: "none on a copy", job: 2, dup: `the producer's code sent no thing of kind "a" on its retry`},
		{name: "two", job: 1, made: []string{"a", "a"}, wantErr: `job: the code, send 1 sent 2 things of kind "a" in one call; the check follows one thing per send of the producer`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := call
			c.Job, c.Others = tc.job, tc.others
			got, enq, err := queue.FollowOne(c, tc.made, name)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.dup != "", enq.Duplicate)
			require.Equal(t, tc.dup, enq.Reason)
			require.Equal(t, tc.want, got)
		})
	}
}
