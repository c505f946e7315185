package fakepsp

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

func TestLedgerGroupCommit(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	ledger, records, err := openLedger(path, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Empty(t, records)

	// Hold the flusher inside its first flush, so that the appends made
	// meanwhile can only join the next batch.
	entered := make(chan struct{}, 16)
	release := make(chan struct{})
	ledger.beforeFlush = func() {
		entered <- struct{}{}
		<-release
	}
	ledger.start()

	record := func(i int) ledgerRecord {
		return ledgerRecord{
			LedgerEntry: LedgerEntry{
				ID: fmt.Sprintf("py_%03d", i), IdempotencyKey: fmt.Sprintf("pk_%03d", i), Reference: "ch",
				Amount: 100, Currency: "USD", Status: psp.StatusSucceeded, CreatedAt: time.Unix(0, 0).UTC(),
			},
			RequestHash: "h",
		}
	}

	first, err := ledger.append(record(0))
	require.NoError(t, err)
	<-entered
	require.False(t, first.durable(), "the first batch is still being flushed")

	var second *commitBatch
	for i := 1; i < 50; i++ {
		batch, err := ledger.append(record(i))
		require.NoError(t, err)
		if second == nil {
			second = batch
		}
		require.Same(t, second, batch, "appends during a flush share the next batch")
	}
	require.NotSame(t, first, second)

	close(release)
	require.NoError(t, first.wait())
	require.NoError(t, second.wait())
	require.Equal(t, int64(2), ledger.flushes.Load(), "50 records, 2 fsyncs")
	require.NoError(t, ledger.close())

	reopened, records, err := openLedger(path, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	reopened.start()
	t.Cleanup(func() { require.NoError(t, reopened.close()) })
	require.Len(t, records, 50)
	for i, r := range records {
		require.Equal(t, record(i), r)
	}
}

func TestLedgerRefusesAppendsAfterClose(t *testing.T) {
	t.Parallel()

	ledger, _, err := openLedger(filepath.Join(t.TempDir(), "ledger.jsonl"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ledger.start()
	require.NoError(t, ledger.close())
	require.NoError(t, ledger.close())

	_, err = ledger.append(ledgerRecord{})
	require.ErrorIs(t, err, ErrClosed)
}
