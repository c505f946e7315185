package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The minimal design is what a user who needs "charge at most once" would
// otherwise build, and the second baseline of the accept line: an HTTP
// handler (Echo, as the API's) that reads the request and, in one
// transaction, inserts one River job whose unique key is the idempotency
// key — River's idempotent-email example, made a charge. It has no charge
// row, no idempotency record with a stored answer, no audit trail, no
// replay, no events: what it lacks is what chargeflow is for, and the
// ratio says what our schema costs beside it. It runs in the benchmark's
// process (the raw baseline does too); its jobs go to a queue no worker
// reads.

// minimalQueue is the queue of the minimal design's jobs: no worker of
// ours fetches from it.
const minimalQueue = "bench_minimal"

// minimalCharge is the minimal design's job: the charge request, unique
// by its idempotency key alone.
type minimalCharge struct {
	Key           string            `json:"key" river:"unique"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Description   string            `json:"description"`
	Metadata      map[string]string `json:"metadata"`
}

func (minimalCharge) Kind() string { return "bench.minimal_charge" }

func (minimalCharge) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: minimalQueue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// startMinimal serves the minimal design on loopback against pool. The
// returned client posts to it as apiClient posts to the API.
func startMinimal(pool *pgxpool.Pool, keyPrefix string, connections int) (*apiClient, func(context.Context) error, error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{SkipUnknownJobCheck: true})
	if err != nil {
		return nil, nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/charges", func(c echo.Context) error {
		key := c.Request().Header.Get("Idempotency-Key")
		if key == "" {
			return c.JSON(http.StatusBadRequest, map[string]string{"code": "idempotency_key_missing"})
		}
		args := minimalCharge{Key: key}
		if err := json.NewDecoder(c.Request().Body).Decode(&args); err != nil {
			return c.JSON(http.StatusBadRequest, map[string]string{"code": "invalid_json"})
		}
		ctx := c.Request().Context()
		var res *riverInsert
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			inserted, err := client.InsertTx(ctx, tx, args, nil)
			if err == nil {
				res = &riverInsert{ID: inserted.Job.ID, Duplicate: inserted.UniqueSkippedAsDuplicate}
			}
			return err
		})
		if err != nil {
			return c.JSON(http.StatusInternalServerError, map[string]string{"code": "internal"})
		}
		status := http.StatusCreated
		if res.Duplicate {
			status = http.StatusOK
		}
		return c.JSON(status, map[string]any{"id": res.ID, "status": "accepted"})
	})
	url, stop, err := serveLoopback(e, true)
	if err != nil {
		return nil, nil, err
	}
	return &apiClient{baseURL: url, apiKey: "none", keyPrefix: keyPrefix, http: newKeepAlive(connections)}, stop, nil
}

// riverInsert is what the minimal design answers with.
type riverInsert struct {
	ID        int64
	Duplicate bool
}

// errMinimalDuplicate is a fresh key the minimal design took for a replay.
var errMinimalDuplicate = errors.New("minimal design: a fresh key was a duplicate")

// minimalAccept is one new charge through the minimal design.
func minimalAccept(c *apiClient) op {
	return func(ctx context.Context, seq int64) error {
		a, err := c.post(ctx, c.key(seq), false)
		if err != nil {
			return err
		}
		if a.status == http.StatusOK {
			return errMinimalDuplicate
		}
		if a.status != http.StatusCreated {
			return fmt.Errorf("minimal design answered %d: %.200s", a.status, a.body)
		}
		return nil
	}
}
