package batch_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/internal/batch"
)

// TestRequestsMadeDuringABatchShareTheNext holds a first batch in flight
// while ten requests queue: they run as batches of at most max, each
// request gets its own answer, and a lone request ran at once, alone.
func TestRequestsMadeDuringABatchShareTheNext(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := batch.New(4, func(_ context.Context, items []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(items))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-hold
		}
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 10
		}
		return out, nil
	})
	ctx := context.Background()
	first := make(chan int, 1)
	go func() {
		r, err := b.Do(ctx, 1)
		require.NoError(t, err)
		first <- r
	}()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 }, 5e9, 1e6)
	var wg sync.WaitGroup
	for i := 2; i <= 11; i++ {
		wg.Go(func() {
			r, err := b.Do(ctx, i)
			require.NoError(t, err)
			require.Equal(t, i*10, r)
		})
	}
	require.Eventually(t, func() bool { return b.Queued() == 10 }, 5e9, 1e6)
	close(hold)
	wg.Wait()
	require.Equal(t, 10, <-first)
	require.Equal(t, []int{1, 4, 4, 2}, sizes)
	require.True(t, b.Idle())
}

// TestABatchsErrorIsEveryRequestsError checks that a failed batch fails
// each of its requests, and that the next request runs.
func TestABatchsErrorIsEveryRequestsError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	fail := true
	b := batch.New(8, func(_ context.Context, items []int) ([]int, error) {
		if fail {
			fail = false
			return nil, boom
		}
		return items, nil
	})
	_, err := b.Do(context.Background(), 1)
	require.ErrorIs(t, err, boom)
	r, err := b.Do(context.Background(), 2)
	require.NoError(t, err)
	require.Equal(t, 2, r)
	require.True(t, b.Idle())
}
