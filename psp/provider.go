package psp

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Provider is a payment provider as the worker, the reconciler and the
// operator API need it: one charge attempt, one lookup, and the
// capabilities that decide what a lookup can prove. Each provider is an
// adapter: Client speaks chargeflow's own protocol (the bundled fake's),
// psp/stripe speaks Stripe's. Every adapter classifies its provider's
// answers into the same four classes (see the package doc): a charge, a
// decline (a Charge with StatusFailed), ErrNotApplied or ErrUnknownOutcome,
// with ErrNotFound for a lookup that proved no charge exists.
type Provider interface {
	// Charge makes exactly one attempt with req.Key as the provider's
	// idempotency key.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)
	// Find looks a charge up by the best means the provider offers for q:
	// its own id when q.ProviderID is known, else what Capabilities.Lookup
	// says. It returns ErrNotFound only when the provider proved that no
	// charge matches (how much that proves is the Capabilities' to say).
	Find(ctx context.Context, q LookupRequest) (Charge, error)
	// Capabilities says what the provider promises.
	Capabilities() Capabilities
	// Timeout is how long one call may take: the system's call timeout.
	Timeout() time.Duration
}

// LookupBy says how a charge whose provider id we do not hold can be found.
type LookupBy string

const (
	// LookupByKey finds a charge by the idempotency key it was sent with
	// (the bundled fake).
	LookupByKey LookupBy = "provider_key"
	// LookupByReference finds a charge by our reference stored with it at
	// the provider (Stripe: the charge id in the PaymentIntent's metadata).
	LookupByReference LookupBy = "reference"
	// LookupByResend means the provider offers no lookup of what it
	// applied: a lost answer is learned by sending the same request again
	// with the same idempotency key inside the key window, which the
	// provider answers with the first request's result, or refuses while
	// the first is still in flight (Adyen). The caller makes that re-send
	// through Charge (or Refunder.Refund) with the row's own request; the
	// adapter's Find is never asked.
	LookupByResend LookupBy = "resend"
	// LookupNone means the provider offers no lookup: an unknown outcome
	// can only be settled by a person.
	LookupNone LookupBy = "none"
)

// Consistency says whether a lookup sees every charge the provider applied.
type Consistency string

const (
	// Strong: a charge is visible to the lookup as soon as it is applied.
	Strong Consistency = "strong"
	// Eventual: a charge may stay invisible for up to LagBound after it is
	// applied, so a not-found proves nothing until then.
	Eventual Consistency = "eventual"
)

// Capabilities are what a provider promises, declared by its adapter. The
// reconciler's decisions follow from them (reconciler.Decide,
// docs/provider.md "What a lookup proves").
type Capabilities struct {
	// Name names the provider on charges ("fakepsp", "stripe").
	Name string
	// KeyWindow is how long the provider de-duplicates an idempotency key
	// after its first use: a request re-sent with the same key inside it
	// cannot charge twice. Zero means the provider never de-duplicates.
	KeyWindow time.Duration
	// Lookup is how a charge can be found without its provider id, and
	// Consistency how complete that lookup is; LagBound bounds an eventual
	// lookup's delay.
	Lookup      LookupBy
	Consistency Consistency
	LagBound    time.Duration
	// ByProviderID says a charge can be retrieved, strongly, by the id the
	// provider gave it, once an answer has told us that id.
	ByProviderID bool
	// Refunds says the provider can refund a charge through the adapter.
	Refunds bool
	// Notifications says the provider sends signed notifications of what
	// it applied, which the adapter's package verifies and reads into
	// evidence (ParseNotification, pspstripe.ParseNotification;
	// docs/notifications.md). The provider must still be set up to send
	// them to us (the fake: --webhook-url; Stripe: a webhook endpoint).
	Notifications bool
	// SeparateCapture says the provider can authorize a charge and capture
	// or release it later (ChargeRequest.CaptureLater); the adapter then
	// implements Capturer. A provider without it is never sent a charge
	// to capture later: the API refuses one (docs/capture.md).
	SeparateCapture bool
	// HoldWindow is how long the provider holds an authorization before
	// it releases it on its own; zero with SeparateCapture means
	// DefaultHoldWindow.
	HoldWindow time.Duration
}

// Hold is how long the provider holds an authorization (HoldWindow, or
// DefaultHoldWindow when it names none).
func (c Capabilities) Hold() time.Duration {
	if c.HoldWindow > 0 {
		return c.HoldWindow
	}
	return DefaultHoldWindow
}

// LookupRequest is what the caller knows about a charge it looks up.
type LookupRequest struct {
	// Key is the provider idempotency key every attempt was sent with.
	Key string
	// Reference is our charge id, stored with the charge at the provider.
	Reference string
	// ProviderID is the provider's id for the charge, when an earlier
	// answer told us; empty otherwise.
	ProviderID string
	// FirstSent and LastSent bound when attempts were sent, so a lookup by
	// reference can search the provider's records of that time only.
	FirstSent time.Time
	LastSent  time.Time
	// Charge is, for a refund's lookup (Refunder.FindRefund), the
	// provider's id of the charge refunded; empty for a charge's.
	Charge string
	// Sends, when the caller knows them, are the times each attempt was
	// sent, oldest first, between FirstSent and LastSent: a lookup by
	// reference can then search around each rather than the whole span,
	// which a crashed worker's rescue can stretch to minutes.
	Sends []time.Time
}

// Registry finds the adapter of the provider a row was sent to, by the
// name the row carries (its provider account's, or the processes' own
// provider's: docs/routing.md). The worker, the reconciler, an operator's
// resolution and the notifications receiver each ask it per row.
type Registry interface {
	// Provider is the adapter named name, or an error wrapping
	// ErrNoSuchProvider when this process cannot call it (no such account,
	// or its credentials are missing from this process's environment).
	Provider(ctx context.Context, name string) (Provider, error)
	// Names lists every provider this process can call, its own first.
	Names(ctx context.Context) ([]string, error)
}

// ErrNoSuchProvider is a Registry's answer for a name it cannot call.
var ErrNoSuchProvider = errors.New("psp: no such provider here")

// Single is the Registry of one provider: a process whose every row goes to
// the provider it was started with.
func Single(p Provider) Registry { return single{p} }

type single struct{ p Provider }

func (s single) Provider(_ context.Context, name string) (Provider, error) {
	if name != s.p.Capabilities().Name {
		return nil, fmt.Errorf("%w: %q (this process calls %q)", ErrNoSuchProvider, name, s.p.Capabilities().Name)
	}
	return s.p, nil
}

func (s single) Names(context.Context) ([]string, error) {
	return []string{s.p.Capabilities().Name}, nil
}
