package batch_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/batch"
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

// TestParallelTurns sends requests from many callers, some of which give
// up, to a Batcher that may run three batches at once: each request that
// was answered ran exactly once, with its own answer, each one that gave
// up did not run, no more than three batches ever ran at once, more than
// one did when full batches waited, and nothing is left running.
func TestParallelTurns(t *testing.T) {
	t.Parallel()
	const callers, rounds, maxItems, parallel = 64, 40, 4, 3
	var mu sync.Mutex
	ran := map[int]int{}
	var inFlight, most int
	b := batch.NewParallel(maxItems, parallel, func(_ context.Context, items []int) ([]int, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		for _, v := range items {
			ran[v]++
		}
		mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = -v
		}
		return out, nil
	})
	answered := make([][]bool, callers)
	var wg sync.WaitGroup
	for c := range callers {
		answered[c] = make([]bool, rounds)
		wg.Go(func() {
			for r := range rounds {
				item := c*rounds + r
				ctx, cancel := context.WithCancel(context.Background())
				if rand.IntN(8) == 0 {
					go func() {
						time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
						cancel()
					}()
				}
				got, err := b.Do(ctx, item)
				cancel()
				if err == nil {
					require.Equal(t, -item, got)
					answered[c][r] = true
				} else {
					require.ErrorIs(t, err, context.Canceled)
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for c := range callers {
		for r := range rounds {
			item := c*rounds + r
			if answered[c][r] {
				require.Equal(t, 1, ran[item], "item %d answered: it ran once", item)
			} else {
				require.Zero(t, ran[item], "item %d withdrawn: it did not run", item)
			}
		}
	}
	require.LessOrEqual(t, most, parallel)
	require.Greater(t, most, 1, "full batches waiting started more turns")
	require.True(t, b.Idle())
}
