package queue_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runtwice/twice/harness/queue"
)

type key string

// The library's values come first, the delivery's after them, and the
// delivery's cancellation reaches the handler.
func TestValuesFirst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), key("both"), "delivery"))
	ctx = context.WithValue(ctx, key("delivery"), "delivery")
	values := context.WithValue(context.WithValue(context.Background(), key("both"), "library"), key("library"), "library")
	got := queue.ValuesFirst(ctx, values)
	require.Equal(t, "library", got.Value(key("both")))
	require.Equal(t, "library", got.Value(key("library")))
	require.Equal(t, "delivery", got.Value(key("delivery")))
	require.Nil(t, got.Value(key("neither")))
	require.NoError(t, got.Err())
	cancel()
	<-got.Done()
	require.ErrorIs(t, got.Err(), context.Canceled)
}

// Autocommit has no transaction to end: Commit and Rollback say so.
func TestAutocommitHasNothingToCommit(t *testing.T) {
	tx := queue.Autocommit(nil)
	require.ErrorIs(t, tx.Commit(t.Context()), queue.ErrAutocommit)
	require.ErrorIs(t, tx.Rollback(t.Context()), queue.ErrAutocommit)
	require.Nil(t, tx.Conn())
}
