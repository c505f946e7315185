package fakepsp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// The calls a Rule can apply to.
const (
	// OnCharge makes a rule apply to POST /v1/charges, or under the Stripe
	// protocol to POST /v1/payment_intents.
	OnCharge = "charge"

	// OnRefund makes a rule apply to POST /v1/refunds, under either
	// protocol. Every fault a charge can suffer, a refund can too.
	OnRefund = "refund"

	// OnCapture and OnCancel make a rule apply to a capture and a cancel of
	// a charge captured later (POST /v1/charges/{id}/capture and /cancel,
	// or Stripe's POST /v1/payment_intents/{id}/capture and /cancel).
	// Every fault a charge can suffer, they can too.
	OnCapture = "capture"
	OnCancel  = "cancel"

	// OnLookup makes a rule apply to the reads: GET
	// /v1/charges/by-key/{key} and GET /v1/refunds/by-key/{key}, or under
	// the Stripe protocol the PaymentIntent search, retrieve and list and
	// the refund retrieve and list (lookup_lag only to the search and the
	// by-key lookups; see docs/provider.md).
	OnLookup = "lookup"

	// OnNotification makes a rule apply to the notification the provider
	// sends of a charge, refund, capture or cancel it applied
	// (Config.Notifications), under any protocol; its key_prefix is matched
	// against that operation's idempotency key. The faults are the
	// sender's own (below).
	OnNotification = "notification"
)

// The faults a Rule can inject. Each rule's MS is the fault's duration; the
// comment of each fault says what it delays, holds or hides. What a comment
// says of a charge, a rule on OnRefund does to a refund.
const (
	// FaultLatency delays the answer by MS, then handles the call normally.
	// A charge or refund is applied even if the client gave up while
	// waiting, as a real provider would. Under Stripe's key rules the delay
	// is the request executing, so its key is locked meanwhile (409 to
	// another request with it). Valid for charges, refunds and lookups.
	FaultLatency = "latency"

	// FaultDropBeforeApply holds the connection for MS (or until the client
	// hangs up), then closes it without an answer. Nothing is applied.
	FaultDropBeforeApply = "drop_before_apply"

	// FaultApplyThenTimeout applies the charge, holds the connection for MS
	// (or until the client hangs up), then closes it without an answer.
	FaultApplyThenTimeout = "apply_then_timeout"

	// FaultApplyThenReset applies the charge, then resets the TCP connection
	// (SO_LINGER 0, so the client gets an RST) without an answer.
	FaultApplyThenReset = "apply_then_reset"

	// FaultErrorBeforeApply answers 500 without applying anything. Under
	// Stripe's key rules the request had started executing, so for a new key
	// the 500 is saved and every later POST with the key replays it.
	FaultErrorBeforeApply = "error_before_apply"

	// FaultErrorAfterApply applies the charge and answers 500. The charge
	// remembers it: every later POST with its key replays that 500, while
	// lookups show the charge.
	FaultErrorAfterApply = "error_after_apply"

	// FaultNotProcessed answers 429 with Retry-After without applying
	// anything.
	FaultNotProcessed = "not_processed"

	// FaultDelayedApply never answers: it holds the connection until the
	// client hangs up or MS passes, then closes it, and applies the charge MS
	// after the request arrived. Until then a lookup says not found and
	// another POST with the key gets 409 idempotency_key_in_use.
	FaultDelayedApply = "delayed_apply"

	// FaultKeyExpiry applies the charge but remembers its key only for MS:
	// afterwards a POST with the key applies a new charge and lookups say not
	// found, like a real provider's 24-hour key window.
	FaultKeyExpiry = "key_expiry"

	// FaultUnavailable makes a lookup answer 503, or, with MS > 0, hold the
	// connection for MS and then close it without an answer (a timeout).
	FaultUnavailable = "unavailable"

	// FaultLookupLag makes a lookup by key report a charge or refund applied
	// less than MS ago as not found (404 charge_not_found,
	// refund_not_found), like an eventually consistent read. Under the Stripe
	// protocol it hides such a PaymentIntent from the search alone: Stripe's
	// search index lags, its retrieves and lists (of refunds too) do not.
	FaultLookupLag = "lookup_lag"
)

// The faults of a notification ("on": "notification"; docs/provider.md).
// Each acts on one notification as it is made, before it is queued.
const (
	// FaultDuplicate sends the notification twice: two deliveries of the
	// same body, the same event id, each signed when sent and retried on
	// its own.
	FaultDuplicate = "duplicate"

	// FaultReorder holds the notification back until the next one is
	// queued, and sends it right after that one: the receiver gets them
	// out of order. With MS > 0 it is sent anyway once MS passed without a
	// next one; with MS 0 it waits for one (or is lost when the provider
	// closes).
	FaultReorder = "reorder"

	// FaultDelay queues the notification MS from now; those made meanwhile
	// overtake it.
	FaultDelay = "delay"

	// FaultDrop never sends the notification, as a provider that lost it
	// would not.
	FaultDrop = "drop"

	// FaultForge sends, instead of the notification, a forgery that must
	// fail verification, once and never retried: the provider's first
	// forgery is the genuine body signed with a wrong secret, its next the
	// genuine signature over a body whose amount was altered, and so on in
	// turn.
	FaultForge = "forge"
)

// faultTargets returns the calls a fault applies to, and whether the fault
// exists at all. A refund is executed by the same pipeline as a charge
// (execute.go), so every fault of a charge is one of a refund too.
func faultTargets(fault string) ([]string, bool) {
	switch fault {
	case FaultLatency:
		return []string{OnCharge, OnRefund, OnCapture, OnCancel, OnLookup}, true
	case FaultDropBeforeApply, FaultApplyThenTimeout, FaultApplyThenReset, FaultErrorBeforeApply,
		FaultErrorAfterApply, FaultNotProcessed, FaultDelayedApply, FaultKeyExpiry:
		return []string{OnCharge, OnRefund, OnCapture, OnCancel}, true
	case FaultUnavailable, FaultLookupLag:
		return []string{OnLookup}, true
	case FaultDuplicate, FaultReorder, FaultDelay, FaultDrop, FaultForge:
		return []string{OnNotification}, true
	default:
		return nil, false
	}
}

// maxFaultMS bounds a rule's duration, so a typo cannot hold connections for
// days.
const maxFaultMS = 3_600_000

// ErrInvalidSchedule is wrapped by every error that rejects a Schedule.
var ErrInvalidSchedule = errors.New("fakepsp: invalid fault schedule")

// Schedule is the fault injection configuration: which faults fire, how
// often, and on which keys. It is given at start in Config.Faults and
// replaced at run time through POST /_admin/faults.
//
// For every call, the rules whose On matches the call and whose KeyPrefix
// matches the key are checked in order; each such rule draws one number from
// the schedule's random source, and the first rule whose draw is below its P
// fires. At most one fault fires per call. Because the source is seeded with
// Seed and every matching rule draws exactly once, the same sequence of calls
// against the same schedule fires the same faults.
type Schedule struct {
	// Seed seeds the random source. Replacing the schedule reseeds it.
	Seed int64 `json:"seed"`

	// Dedupe, when set, switches the provider's own idempotency key
	// de-duplication on or off. With it off every POST applies a new charge,
	// so only the orchestrator stands between a retry and a double charge.
	// When nil, Config.Dedupe applies.
	Dedupe *bool `json:"dedupe,omitempty"`

	// Rules are checked in order; the first that fires applies.
	Rules []Rule `json:"rules"`
}

// Rule is one fault with its probability.
type Rule struct {
	// On is OnCharge, OnRefund, OnCapture, OnCancel, OnLookup or
	// OnNotification.
	On string `json:"on"`

	// Fault is one of the Fault constants, valid for On.
	Fault string `json:"fault"`

	// P is the probability, in [0, 1], that the rule fires for a matching
	// call.
	P float64 `json:"p"`

	// MS is the fault's duration in milliseconds; see each Fault constant.
	MS int `json:"ms"`

	// KeyPrefix, when not empty, restricts the rule to idempotency keys that
	// start with it. A Stripe read carries no key, so there a lookup rule's
	// prefix is matched against our reference the read is about: our charge
	// id (metadata chargeflow_charge) for a PaymentIntent and for the
	// refunds of one, our refund id (metadata chargeflow_refund) for a
	// retrieved refund, "" for a list of no single charge. A notification
	// rule's prefix is matched against the idempotency key of the charge
	// or refund notified.
	KeyPrefix string `json:"key_prefix,omitempty"`
}

// ParseSchedule parses and validates a Schedule. It is strict: unknown
// fields, trailing data, a rule without "p", an unknown fault, a fault on the
// wrong call, a probability outside [0, 1] or a negative duration are errors
// wrapping ErrInvalidSchedule.
func ParseSchedule(data []byte) (Schedule, error) {
	// Decode through mirror types whose P is a pointer, so that a rule that
	// forgot "p" is an error rather than a rule that never fires.
	type strictRule struct {
		On        string   `json:"on"`
		Fault     string   `json:"fault"`
		P         *float64 `json:"p"`
		MS        int      `json:"ms"`
		KeyPrefix string   `json:"key_prefix"`
	}
	var parsed struct {
		Seed   int64        `json:"seed"`
		Dedupe *bool        `json:"dedupe"`
		Rules  []strictRule `json:"rules"`
	}

	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&parsed); err != nil {
		return Schedule{}, fmt.Errorf("%w: %w", ErrInvalidSchedule, err)
	}
	if _, err := decoder.Token(); !errors.Is(err, io.EOF) {
		return Schedule{}, fmt.Errorf("%w: data after the schedule object", ErrInvalidSchedule)
	}

	schedule := Schedule{Seed: parsed.Seed, Dedupe: parsed.Dedupe, Rules: make([]Rule, 0, len(parsed.Rules))}
	for i, rule := range parsed.Rules {
		if rule.P == nil {
			return Schedule{}, fmt.Errorf("%w: rule %d (%s): \"p\" is required", ErrInvalidSchedule, i, rule.Fault)
		}
		schedule.Rules = append(schedule.Rules, Rule{On: rule.On, Fault: rule.Fault, P: *rule.P, MS: rule.MS, KeyPrefix: rule.KeyPrefix})
	}
	return schedule, schedule.Validate()
}

// Validate reports the first problem with the schedule, wrapping
// ErrInvalidSchedule.
func (s Schedule) Validate() error {
	for i, rule := range s.Rules {
		targets, known := faultTargets(rule.Fault)
		switch {
		case !slices.Contains([]string{OnCharge, OnRefund, OnCapture, OnCancel, OnLookup, OnNotification}, rule.On):
			return fmt.Errorf("%w: rule %d: \"on\" is %q, want %q, %q, %q, %q, %q or %q", ErrInvalidSchedule, i, rule.On,
				OnCharge, OnRefund, OnCapture, OnCancel, OnLookup, OnNotification)
		case !known:
			return fmt.Errorf("%w: rule %d: unknown fault %q", ErrInvalidSchedule, i, rule.Fault)
		case !slices.Contains(targets, rule.On):
			return fmt.Errorf("%w: rule %d: fault %q does not apply to %q, only to %s", ErrInvalidSchedule, i, rule.Fault, rule.On, strings.Join(targets, " and "))
		case !(rule.P >= 0 && rule.P <= 1): // also refuses NaN
			return fmt.Errorf("%w: rule %d (%s): p is %v, want a value in [0, 1]", ErrInvalidSchedule, i, rule.Fault, rule.P)
		case rule.MS < 0 || rule.MS > maxFaultMS:
			return fmt.Errorf("%w: rule %d (%s): ms is %d, want a value in [0, %d]", ErrInvalidSchedule, i, rule.Fault, rule.MS, maxFaultMS)
		}
	}
	return nil
}

// FaultState is the fault configuration in force, as GET /_admin/faults shows
// it.
type FaultState struct {
	// Seed is the current schedule's seed.
	Seed int64 `json:"seed"`

	// Dedupe is whether the provider de-duplicates idempotency keys now.
	Dedupe bool `json:"dedupe"`

	// Rules are the current schedule's rules; never nil.
	Rules []Rule `json:"rules"`

	// Fired counts, per fault name, how often a fault fired since the
	// schedule was set.
	Fired map[string]int `json:"fired"`
}

// decision is the outcome of drawing faults for one call.
type decision struct {
	// fault is the fault that fired, or "" when none did.
	fault string

	// duration is the fired rule's MS.
	duration time.Duration

	// dedupe is whether key de-duplication is on for this call.
	dedupe bool
}

// faultEngine holds the schedule in force and its seeded random source.
type faultEngine struct {
	defaultDedupe bool

	mu       sync.Mutex
	schedule Schedule
	dedupe   bool
	random   *rand.Rand
	fired    map[string]int
}

func newFaultEngine(schedule Schedule, defaultDedupe bool) *faultEngine {
	engine := &faultEngine{defaultDedupe: defaultDedupe}
	engine.set(schedule)
	return engine
}

// set replaces the schedule, reseeds the random source and resets the fired
// counters. The schedule must be valid.
func (e *faultEngine) set(schedule Schedule) {
	schedule.Rules = append([]Rule(nil), schedule.Rules...)
	dedupe := e.defaultDedupe
	if schedule.Dedupe != nil {
		dedupe = *schedule.Dedupe
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	e.schedule = schedule
	e.dedupe = dedupe
	e.random = rand.New(rand.NewPCG(uint64(schedule.Seed), 0))
	e.fired = make(map[string]int)
}

// draw decides which fault, if any, fires for one call on key. When acts is
// not nil, rules whose fault it refuses are skipped without drawing: faults
// that would mean nothing for this call (lookup_lag on a strongly consistent
// read) neither fire nor shift the draws of the others.
func (e *faultEngine) draw(on, key string, acts func(fault string) bool) decision {
	e.mu.Lock()
	defer e.mu.Unlock()

	for _, rule := range e.schedule.Rules {
		if rule.On != on || !strings.HasPrefix(key, rule.KeyPrefix) {
			continue
		}
		if acts != nil && !acts(rule.Fault) {
			continue
		}
		if e.random.Float64() < rule.P {
			e.fired[rule.Fault]++
			return decision{fault: rule.Fault, duration: time.Duration(rule.MS) * time.Millisecond, dedupe: e.dedupe}
		}
	}
	return decision{dedupe: e.dedupe}
}

// state returns a copy of the configuration in force.
func (e *faultEngine) state() FaultState {
	e.mu.Lock()
	defer e.mu.Unlock()

	rules := append([]Rule{}, e.schedule.Rules...)
	return FaultState{Seed: e.schedule.Seed, Dedupe: e.dedupe, Rules: rules, Fired: maps.Clone(e.fired)}
}
