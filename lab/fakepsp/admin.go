package fakepsp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chargeflow/chargeflow/psp"
)

// maxScheduleBytes bounds a POST /_admin/faults body.
const maxScheduleBytes = 1 << 20

// maxAdminErrorBytes bounds how much of a refused admin call's body goes into
// the error: enough for the provider's reason, not a whole page from some
// other server at the wrong address.
const maxAdminErrorBytes = 4 << 10

// LedgerResponse is the body of GET /_admin/ledger.
type LedgerResponse struct {
	// Charges are in the order they were applied, each with its refunds
	// and its capture or cancel, as it stands now; never nil.
	Charges []LedgerEntry `json:"charges"`
}

// FetchLedger reads GET /_admin/ledger from the fake provider at baseURL:
// the charges that moved money (a charge captured later once captured), or
// with includeDeclines every charge it applied (declined, held and
// released ones too), each with its refunds and its capture or cancel. It
// is how tests, the scenario checker and the benchmark read the ground
// truth.
func FetchLedger(ctx context.Context, baseURL string, includeDeclines bool) ([]LedgerEntry, error) {
	path := "/_admin/ledger"
	if includeDeclines {
		path += "?all=true"
	}
	var body LedgerResponse
	if err := getAdmin(ctx, baseURL, path, "ledger", &body); err != nil {
		return nil, err
	}
	return body.Charges, nil
}

// FetchRefunds reads the refunds of the fake provider at baseURL from GET
// /_admin/ledger: every refund on disk, grouped by charge in the order the
// charges were applied and, for each charge, in the order its refunds were.
// Refunds are only ever of charges that moved money, so the declines are
// not fetched.
func FetchRefunds(ctx context.Context, baseURL string) ([]RefundEntry, error) {
	charges, err := FetchLedger(ctx, baseURL, false)
	if err != nil {
		return nil, err
	}
	refunds := []RefundEntry{}
	for _, charge := range charges {
		refunds = append(refunds, charge.Refunds...)
	}
	return refunds, nil
}

// FetchOperations reads the captures and cancels of the fake provider at
// baseURL from GET /_admin/ledger?all=true: every one on disk, in the
// order their charges were applied (a charge has at most one). A hold
// that expired had none: its charge says canceled, hold_expired.
func FetchOperations(ctx context.Context, baseURL string) ([]OperationEntry, error) {
	charges, err := FetchLedger(ctx, baseURL, true)
	if err != nil {
		return nil, err
	}
	operations := []OperationEntry{}
	for _, charge := range charges {
		operations = append(operations, charge.Operations...)
	}
	return operations, nil
}

// FetchFaults reads GET /_admin/faults from the fake provider at baseURL: the
// schedule in force and how often each fault fired since it was set. The
// scenario runner reads it to count the faults a run exercised.
func FetchFaults(ctx context.Context, baseURL string) (FaultState, error) {
	var state FaultState
	err := getAdmin(ctx, baseURL, "/_admin/faults", "faults", &state)
	return state, err
}

// FetchNotifications reads GET /_admin/notifications from the fake
// provider at baseURL: how many notifications it made, sent, gave up on,
// still has to send, and how many each notification fault acted on. A
// scenario reads it to count them, and to wait for Pending to reach zero.
func FetchNotifications(ctx context.Context, baseURL string) (NotificationStats, error) {
	var stats NotificationStats
	err := getAdmin(ctx, baseURL, "/_admin/notifications", "notifications", &stats)
	return stats, err
}

// getAdmin decodes the answer to GET path of the fake provider at baseURL
// into v; what names it in errors ("fetch ledger", "decode ledger").
func getAdmin(ctx context.Context, baseURL, path, what string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, adminURL(baseURL, path), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return adminStatusError("fetch "+what, resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", what, err)
	}
	return nil
}

// SetFaults replaces the fault schedule of the fake provider at baseURL
// through POST /_admin/faults, which also reseeds its random source and
// resets the fired counters. It is how tests and the scenario runner change
// the faults of a provider they reach only over HTTP, for instance one
// running in another process. A schedule the provider refuses is an error
// carrying the provider's reason.
func SetFaults(ctx context.Context, baseURL string, schedule Schedule) error {
	body, err := json.Marshal(schedule)
	if err != nil {
		return fmt.Errorf("encode faults: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, adminURL(baseURL, "/_admin/faults"), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set faults: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return adminStatusError("set faults", resp)
	}
	// Drain the answer (the new state) so the connection can be reused.
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// adminURL joins the provider's base URL, with or without a trailing slash,
// and an admin path.
func adminURL(baseURL, path string) string {
	return strings.TrimRight(baseURL, "/") + path
}

// adminStatusError reports an admin call answered with a status other than
// 200, with the start of the body: the provider puts its reason there (an
// invalid schedule names the rule at fault), which a bare status would lose.
func adminStatusError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAdminErrorBytes))
	if body = bytes.TrimSpace(body); len(body) == 0 {
		return fmt.Errorf("%s: status %d", op, resp.StatusCode)
	}
	return fmt.Errorf("%s: status %d: %s", op, resp.StatusCode, body)
}

// Audit is the body of GET /_admin/audit: what an auditor checks an
// orchestrator against. Only charges that moved money (status succeeded:
// a charge captured later once captured, for what was captured) count, and
// refunds, which all moved money back.
type Audit struct {
	// Charges is the number of charges that moved money.
	Charges int `json:"charges"`

	// Declines is the number of declined charges, which moved nothing.
	Declines int `json:"declines"`

	// Held is the number of charges authorized to be captured later and
	// still held (requires_capture), which moved nothing yet.
	Held int `json:"held"`

	// Captures and Cancels count the captures and cancels applied, and
	// HoldsExpired the holds the provider released itself once their
	// window passed (canceled, hold_expired). A captured charge counts in
	// Charges and Totals too, for what was captured.
	Captures     int `json:"captures"`
	Cancels      int `json:"cancels"`
	HoldsExpired int `json:"holds_expired"`

	// Keys is the number of idempotency keys with at least one charge that
	// moved money.
	Keys int `json:"keys"`

	// ChargesPerKey maps a number of money-moving charges ("1", "2", …) to
	// how many keys have that many. Anything beyond "1" is a double charge.
	ChargesPerKey map[string]int `json:"charges_per_key"`

	// Duplicates lists every key with more than one money-moving charge, in
	// the order the keys were first charged; never nil.
	Duplicates []DuplicateKey `json:"duplicates"`

	// Refunds is the number of refunds.
	Refunds int `json:"refunds"`

	// RefundsPerReference maps a number of refunds ("1", "2", …) to how
	// many of our refund references have that many. Anything beyond "1" is
	// a refund applied twice.
	RefundsPerReference map[string]int `json:"refunds_per_reference"`

	// DuplicateRefunds lists every reference with more than one refund, in
	// the order the references were first refunded; never nil. The
	// provider cannot prevent these when its key de-duplication is off or a
	// key expired: each refund on its own fits what was left of the charge.
	DuplicateRefunds []DuplicateRefund `json:"duplicate_refunds"`

	// OverRefunded lists every charge whose refunds add up to more than its
	// amount, in ledger order; never nil. The provider refuses any refund
	// beyond what is left, dedupe off or not, so only a ledger written by
	// something else can have one: the count says that it did not happen.
	OverRefunded []OverRefund `json:"over_refunded"`

	// Totals sums money-moving charges and refunds per tenant tag and
	// currency, sorted by tag then currency; never nil.
	Totals []Total `json:"totals"`
}

// DuplicateRefund is one of our refund references that was refunded more
// than once.
type DuplicateRefund struct {
	// Reference is our refund id.
	Reference string `json:"reference"`

	// Refunds are the reference's refunds, in the order they were applied.
	Refunds []RefundEntry `json:"refunds"`
}

// OverRefund is a charge refunded beyond its amount.
type OverRefund struct {
	// Charge is the charge, with its refunds.
	Charge LedgerEntry `json:"charge"`

	// Refunded is the sum of its refunds, more than Charge.Amount.
	Refunded int64 `json:"refunded"`
}

// DuplicateKey is an idempotency key that moved money more than once.
type DuplicateKey struct {
	// IdempotencyKey is the provider key.
	IdempotencyKey string `json:"idempotency_key"`

	// Charges are the key's money-moving charges, in order.
	Charges []LedgerEntry `json:"charges"`
}

// Total is the money moved for one tenant tag in one currency.
type Total struct {
	// TenantTag is the tenant tag of the charges and refunds (X-Tenant-Tag,
	// metadata chargeflow_tenant), "" when absent.
	TenantTag string `json:"tenant_tag"`

	// Currency is the ISO 4217 code.
	Currency string `json:"currency"`

	// Charges is the number of money-moving charges.
	Charges int `json:"charges"`

	// Amount is their sum in the currency's minor unit: of a charge
	// captured later, what was captured.
	Amount int64 `json:"amount"`

	// Refunds is the number of refunds, filed under their own tenant tag.
	Refunds int `json:"refunds"`

	// Refunded is their sum in the currency's minor unit.
	Refunded int64 `json:"refunded"`
}

// Ledger returns the charges on disk, in order, each with its refunds and
// its capture or cancel, as they stand now: only those that moved money,
// or with includeDeclines the others too (declined, held, released). A
// charge, refund, capture or cancel whose ledger line is not yet fsynced
// is not listed.
func (s *Server) Ledger(includeDeclines bool) []LedgerEntry {
	// s.charges, s.refunds and s.operations only grow and their records do not change
	// once appended, so the slices taken under the lock are read without
	// it; a charge's own list of refunds does change, and is not read, and
	// its settlement is read atomically (holdAt).
	s.mu.Lock()
	charges, refunds, operations := s.charges, s.refunds, s.operations
	s.mu.Unlock()
	now := s.now()

	// Every capture of a charge, when the provider captures in parts (a
	// report lists only the one that settled the hold otherwise).
	operationsOf := make(map[*record][]OperationEntry)
	for _, op := range operations {
		if s.multipleCaptures && op.committed.durable() {
			operationsOf[op.charge] = append(operationsOf[op.charge], op.operationEntry())
		}
	}

	refundsOf := make(map[*record][]RefundEntry)
	for _, refund := range refunds {
		if refund.committed.durable() {
			refundsOf[refund.charge] = append(refundsOf[refund.charge], refund.refundEntry())
		}
	}
	entries := make([]LedgerEntry, 0, len(charges))
	for _, c := range charges {
		if !c.committed.durable() {
			continue
		}
		entry := c.report(c.holdAt(now, false))
		if entry.Status != psp.StatusSucceeded && !includeDeclines {
			continue
		}
		entry.Refunds = refundsOf[c]
		if ops := operationsOf[c]; len(ops) > 0 {
			entry.Operations = ops
		}
		entries = append(entries, entry)
	}
	return entries
}

// Refunds returns the refunds on disk in the order they were applied. A
// refund whose ledger line is not yet fsynced is not listed.
func (s *Server) Refunds() []RefundEntry {
	return durableEntries(s, &s.refunds, (*record).refundEntry)
}

// Operations returns the captures and cancels on disk in the order they
// were applied. One whose ledger line is not yet fsynced is not listed.
func (s *Server) Operations() []OperationEntry {
	return durableEntries(s, &s.operations, (*record).operationEntry)
}

// durableEntries reports, with entry, the records of *list (one of the
// server's lists in ledger order) whose lines are on disk. The list only
// grows and its records do not change once appended, so the slice taken
// under s.mu is read without it.
func durableEntries[T any](s *Server, list *[]*record, entry func(*record) T) []T {
	s.mu.Lock()
	records := *list
	s.mu.Unlock()

	entries := make([]T, 0, len(records))
	for _, c := range records {
		if c.committed.durable() {
			entries = append(entries, entry(c))
		}
	}
	return entries
}

// Audit summarises the ledger per key, per refund reference and per tenant
// tag and currency.
func (s *Server) Audit() Audit {
	audit := Audit{ChargesPerKey: make(map[string]int), Duplicates: []DuplicateKey{},
		RefundsPerReference: make(map[string]int), DuplicateRefunds: []DuplicateRefund{}, OverRefunded: []OverRefund{}, Totals: []Total{}}

	type totalKey struct{ tag, currency string }
	totals := make(map[totalKey]*Total)
	totalOf := func(tag, currency string) *Total {
		total := totals[totalKey{tag, currency}]
		if total == nil {
			total = &Total{TenantTag: tag, Currency: currency}
			totals[totalKey{tag, currency}] = total
		}
		return total
	}
	var perKey groups[LedgerEntry]
	var perReference groups[RefundEntry]

	for _, entry := range s.Ledger(true) {
		for _, operation := range entry.Operations {
			if operation.Type == kindCapture {
				audit.Captures++
			} else {
				audit.Cancels++
			}
		}
		switch {
		case entry.Status == psp.StatusRequiresCapture:
			audit.Held++
			continue
		case entry.CanceledReason == canceledHoldExpired:
			audit.HoldsExpired++
			continue
		case entry.Status == psp.StatusCanceled:
			continue
		case entry.Status != psp.StatusSucceeded:
			audit.Declines++
			continue
		}
		audit.Charges++
		perKey.add(entry.IdempotencyKey, entry)
		total := totalOf(entry.TenantTag, entry.Currency)
		total.Charges++
		total.Amount += entry.Moved()

		var refunded int64
		for _, refund := range entry.Refunds {
			audit.Refunds++
			perReference.add(refund.Reference, refund)
			refunded += refund.Amount
			total := totalOf(refund.TenantTag, refund.Currency)
			total.Refunds++
			total.Refunded += refund.Amount
		}
		if refunded > entry.Moved() {
			audit.OverRefunded = append(audit.OverRefunded, OverRefund{Charge: entry, Refunded: refunded})
		}
	}

	audit.Keys = len(perKey.order)
	perKey.count(audit.ChargesPerKey, func(key string, charges []LedgerEntry) {
		audit.Duplicates = append(audit.Duplicates, DuplicateKey{IdempotencyKey: key, Charges: charges})
	})
	perReference.count(audit.RefundsPerReference, func(reference string, refunds []RefundEntry) {
		audit.DuplicateRefunds = append(audit.DuplicateRefunds, DuplicateRefund{Reference: reference, Refunds: refunds})
	})
	for _, total := range totals {
		audit.Totals = append(audit.Totals, *total)
	}
	slices.SortFunc(audit.Totals, func(a, b Total) int {
		return cmp.Or(cmp.Compare(a.TenantTag, b.TenantTag), cmp.Compare(a.Currency, b.Currency))
	})
	return audit
}

// groups gathers items under a name (a key, a reference), keeping the order
// in which the names first came.
type groups[T any] struct {
	order []string
	of    map[string][]T
}

func (g *groups[T]) add(name string, item T) {
	if g.of == nil {
		g.of = make(map[string][]T)
	}
	if _, seen := g.of[name]; !seen {
		g.order = append(g.order, name)
	}
	g.of[name] = append(g.of[name], item)
}

// count adds to perCount how many names have each number of items ("1",
// "2", …), and passes every name with more than one to duplicate, in order.
func (g *groups[T]) count(perCount map[string]int, duplicate func(name string, items []T)) {
	for _, name := range g.order {
		items := g.of[name]
		perCount[strconv.Itoa(len(items))]++
		if len(items) > 1 {
			duplicate(name, items)
		}
	}
}

// Faults returns the fault configuration in force and how often each fault
// fired since it was set.
func (s *Server) Faults() FaultState {
	return s.faults.state()
}

// SetFaults replaces the fault schedule, reseeds the random source and resets
// the fired counters. A schedule without Dedupe restores Config.Dedupe.
func (s *Server) SetFaults(schedule Schedule) error {
	if err := schedule.Validate(); err != nil {
		return err
	}
	s.faults.set(schedule)
	s.logger.Info("fakepsp: fault schedule replaced", slog.Int64("seed", schedule.Seed), slog.Int("rules", len(schedule.Rules)))
	return nil
}

// handleLedger serves GET /_admin/ledger[?all=true].
func (s *Server) handleLedger(w http.ResponseWriter, r *http.Request) {
	includeDeclines := false
	if all := r.URL.Query().Get("all"); all != "" {
		parsed, err := strconv.ParseBool(all)
		if err != nil {
			writeParamError(w, "all", "all must be true or false")
			return
		}
		includeDeclines = parsed
	}
	writeJSON(w, http.StatusOK, LedgerResponse{Charges: s.Ledger(includeDeclines)})
}

// handleAudit serves GET /_admin/audit.
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Audit())
}

// Notifications returns what the provider's notifications came to so far;
// Enabled is false, and every count zero, when it sends none.
func (s *Server) Notifications() NotificationStats {
	if s.notifier == nil {
		return NotificationStats{}
	}
	return s.notifier.snapshot()
}

// handleNotifications serves GET /_admin/notifications.
func (s *Server) handleNotifications(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Notifications())
}

// handleGetFaults serves GET /_admin/faults.
func (s *Server) handleGetFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

// handleSetFaults serves POST /_admin/faults: the body is a Schedule, parsed
// strictly.
func (s *Server) handleSetFaults(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxScheduleBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "the schedule is larger than 1 MiB")
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request", "the request body could not be read")
		return
	}
	schedule, err := ParseSchedule(data)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_schedule", err.Error())
		return
	}
	if err := s.SetFaults(schedule); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_schedule", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.Faults())
}
