package intent

import (
	"encoding/json"
	"fmt"
	"time"
)

// snapshotRow is a row of charges as Postgres's to_jsonb writes it: the
// events trigger keeps one per event (events_on_moves), so that an event
// says what the row was when the move that caused it happened.
type snapshotRow struct {
	TenantID         string            `json:"tenant_id"`
	ID               string            `json:"id"`
	State            State             `json:"state"`
	Kind             Kind              `json:"kind"`
	ParentID         *string           `json:"parent_id"`
	Reason           *string           `json:"reason"`
	AmountReserved   int64             `json:"amount_reserved"`
	AmountRefunded   int64             `json:"amount_refunded"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	PaymentMethod    *string           `json:"payment_method"`
	Description      *string           `json:"description"`
	Metadata         map[string]string `json:"metadata"`
	Provider         string            `json:"provider"`
	ProviderKey      string            `json:"provider_key"`
	ProviderChargeID *string           `json:"provider_charge_id"`
	FailureCode      *string           `json:"failure_code"`
	ReviewReason     *string           `json:"review_reason"`
	Attempts         int               `json:"attempts"`
	FirstAttemptAt   *time.Time        `json:"first_attempt_at"`
	LastAttemptAt    *time.Time        `json:"last_attempt_at"`
	CreatedAt        time.Time         `json:"created_at"`
	UpdatedAt        time.Time         `json:"updated_at"`
	CaptureLater     bool              `json:"capture_later"`
	AmountCaptured   *int64            `json:"amount_captured"`
}

// FromSnapshot reads a row of charges that Postgres encoded with to_jsonb.
// Only what the API shows of a charge, a refund, a capture or a cancel is
// read; the reconciler's bookkeeping is left zero.
func FromSnapshot(snapshot []byte) (Charge, error) {
	var r snapshotRow
	if err := json.Unmarshal(snapshot, &r); err != nil {
		return Charge{}, fmt.Errorf("decode charge snapshot: %w", err)
	}
	str := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	var captured int64
	if r.AmountCaptured != nil {
		captured = *r.AmountCaptured
	}
	return Charge{
		TenantID: r.TenantID, ID: r.ID, State: r.State, Kind: r.Kind, ParentID: str(r.ParentID), Reason: str(r.Reason),
		AmountReserved: r.AmountReserved, AmountRefunded: r.AmountRefunded, Amount: r.Amount, Currency: r.Currency,
		PaymentMethod: str(r.PaymentMethod), Description: r.Description, Metadata: r.Metadata, Provider: r.Provider,
		ProviderKey: r.ProviderKey, ProviderChargeID: str(r.ProviderChargeID), FailureCode: str(r.FailureCode),
		ReviewReason: str(r.ReviewReason), Attempts: r.Attempts, FirstAttemptAt: r.FirstAttemptAt,
		LastAttemptAt: r.LastAttemptAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		CaptureLater: r.CaptureLater, AmountCaptured: captured,
	}, nil
}
