package stripe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/psp"
)

const (
	// Name is the provider's name on charges.
	Name = "stripe"

	// DefaultBaseURL is Stripe's API.
	DefaultBaseURL = "https://api.stripe.com"

	// KeyWindow is how long Stripe promises to remember an idempotency key:
	// it documents that keys may be pruned once at least 24 hours old.
	KeyWindow = 24 * time.Hour

	// DefaultClockSkew is how far Stripe's clock may be from ours: a
	// lookup's created-time window is widened by it on both sides. See the
	// package doc for why ten seconds is generous, and what too small and
	// too large a skew would cost.
	DefaultClockSkew = 10 * time.Second

	// DefaultPageSize is Stripe's largest list page.
	DefaultPageSize = 100

	// DefaultMaxPages bounds one lookup's scan (or list of refunds); a
	// longer one is an unknown outcome, never a not-found.
	DefaultMaxPages = 50

	// maxKeyLength is Stripe's limit on an idempotency key.
	maxKeyLength = 255
)

// Config configures an Adapter.
type Config struct {
	// Name is the provider's name on the charges sent through the adapter:
	// a provider account's (docs/routing.md). Defaults to Name.
	Name string

	// BaseURL is Stripe's API base URL. Defaults to DefaultBaseURL.
	BaseURL string

	// APIKey is the secret key requests authenticate with. Required: a
	// call without one is refused before anything is sent. It never
	// appears in errors, spans or logs.
	APIKey string

	// Timeout bounds each call, from dialing to the last byte: a charge, a
	// refund, a retrieve, one page of a lookup's scan or of a charge's
	// refunds. Defaults to psp.DefaultTimeout.
	Timeout time.Duration

	// ClockSkew widens a lookup by reference's created-time window on both
	// sides. Defaults to DefaultClockSkew.
	ClockSkew time.Duration

	// ApplyDelay is how long after a request's timeout Stripe may still
	// execute it: the reconciler's --max-apply-delay. It widens the window
	// after the last send, on top of Timeout.
	ApplyDelay time.Duration

	// PageSize and MaxPages shape a lookup by reference's scan, and a
	// refund lookup's list of the charge's refunds. Default DefaultPageSize
	// and DefaultMaxPages.
	PageSize int64
	MaxPages int

	// HoldWindow is how long Stripe holds an authorization sent to be
	// captured later, as declared in Capabilities: seven days for online
	// card payments (psp.DefaultHoldWindow, the default), two for in-person
	// ones; an account of the latter declares its own.
	HoldWindow time.Duration

	// HTTPClient makes the calls; the adapter uses a shallow copy whose
	// transport sends each request at most once and which never follows
	// redirects. Defaults to a client with its own connection pool.
	HTTPClient *http.Client

	// TracerProvider and MeterProvider record each call as psp.Client's
	// calls are recorded (psp.Telemetry). Nil records nothing.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Adapter is the psp.Provider for Stripe. It is safe for concurrent use.
type Adapter struct {
	name       string
	client     *stripego.Client
	backend    stripego.Backend
	apiKey     string
	timeout    time.Duration
	clockSkew  time.Duration
	applyDelay time.Duration
	pageSize   int64
	maxPages   int
	holdWindow time.Duration
	telemetry  psp.Telemetry
}

// Adapter is a psp.Provider, a psp.Refunder and a psp.Capturer.
var (
	_ psp.Provider = (*Adapter)(nil)
	_ psp.Refunder = (*Adapter)(nil)
	_ psp.Capturer = (*Adapter)(nil)
)

// New returns an Adapter for cfg, with zero fields set to their defaults.
func New(cfg Config) *Adapter {
	baseURL := strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	backends := stripego.NewBackendsWithConfig(&stripego.BackendConfig{
		URL:        stripego.String(baseURL),
		HTTPClient: newHTTPClient(cfg.HTTPClient),
		// stripe-go would retry connection errors, 409s and 5xx with the
		// same key; retries are the caller's, after it recorded the attempt.
		MaxNetworkRetries: stripego.Int64(0),
		// stripe-go logs error bodies, which quote the PaymentIntent and its
		// payment method.
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	return &Adapter{
		name:       cmp.Or(cfg.Name, Name),
		client:     stripego.NewClient(cfg.APIKey, stripego.WithBackends(backends)),
		backend:    backends.API,
		apiKey:     cfg.APIKey,
		timeout:    cmp.Or(cfg.Timeout, psp.DefaultTimeout),
		clockSkew:  cmp.Or(cfg.ClockSkew, DefaultClockSkew),
		applyDelay: cfg.ApplyDelay,
		pageSize:   cmp.Or(cfg.PageSize, DefaultPageSize),
		maxPages:   cmp.Or(cfg.MaxPages, DefaultMaxPages),
		holdWindow: cmp.Or(cfg.HoldWindow, psp.DefaultHoldWindow),
		telemetry:  psp.NewTelemetry(cfg.TracerProvider, cfg.MeterProvider, baseURL),
	}
}

// Timeout is how long one call may take: the system's call timeout.
func (a *Adapter) Timeout() time.Duration { return a.timeout }

// Capabilities are Stripe's: a 24-hour key window, a strongly consistent
// lookup by reference (search finds, the list endpoint proves not-found;
// see the package doc), a strong retrieve by PaymentIntent id, refunds,
// signed events (ParseNotification), and authorizations captured or
// canceled later, held Config.HoldWindow (seven days by default,
// Stripe's for online card payments).
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:            a.name,
		KeyWindow:       KeyWindow,
		Lookup:          psp.LookupByReference,
		Consistency:     psp.Strong,
		ByProviderID:    true,
		Refunds:         true,
		Notifications:   true,
		SeparateCapture: true,
		HoldWindow:      a.holdWindow,
	}
}

// Charge creates and confirms one PaymentIntent for req, with req.Key as
// its Idempotency-Key and req.Reference (and req.Tag, the tenant) in its
// metadata, and classifies the
// answer (classify). A decline is a Charge with psp.StatusFailed and a nil
// error; every error is a *psp.Error of kind ErrNotApplied or
// ErrUnknownOutcome, with the intent's id as ProviderID when the answer
// named one without settling it. Exactly one request is sent.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	return traced(ctx, a, psp.OpCharge, psp.Telemetry.End, func(ctx context.Context, header http.Header, _ trace.Span) (psp.Charge, error) {
		return a.charge(ctx, req, header)
	})
}

// traced makes one call of op (call, which sends header with each of its
// requests) inside the call's span, and records what it proved with end:
// psp.Telemetry's, as for every adapter.
func traced[T any](ctx context.Context, a *Adapter, op psp.Op,
	end func(psp.Telemetry, context.Context, trace.Span, psp.Op, time.Time, T, error),
	call func(context.Context, http.Header, trace.Span) (T, error),
) (T, error) {
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, op, header)
	got, err := call(ctx, header, span)
	end(a.telemetry, ctx, span, op, start, got, err)
	return got, err
}

func (a *Adapter) charge(ctx context.Context, req psp.ChargeRequest, header http.Header) (psp.Charge, error) {
	if err := a.checkSend(req.Key); err != nil {
		return psp.Charge{}, err
	}

	params := &stripego.PaymentIntentCreateParams{
		Amount:        stripego.Int64(req.Amount),
		Currency:      stripego.String(strings.ToLower(req.Currency)),
		PaymentMethod: stripego.String(req.PaymentMethod),
		Confirm:       stripego.Bool(true),
		// The charge is confirmed server-side with no customer present to
		// follow a redirect: without this, Stripe asks for a return_url.
		AutomaticPaymentMethods: &stripego.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled:        stripego.Bool(true),
			AllowRedirects: stripego.String("never"),
		},
	}
	if req.CaptureLater {
		// Authorized only: requires_capture until Capture or Cancel.
		params.CaptureMethod = stripego.String(string(stripego.PaymentIntentCaptureMethodManual))
	}
	params.IdempotencyKey = stripego.String(req.Key)
	params.AddMetadata(MetadataKey, req.Reference)
	if req.Tag != "" {
		params.AddMetadata(MetadataTenantKey, req.Tag)
	}

	got, err := once(ctx, a, opCharge, header, func(ctx context.Context) (*stripego.PaymentIntent, error) {
		return a.client.V1PaymentIntents.Create(ctx, params)
	}, setIntent)
	return got.charge, err
}

// once makes the one request of o that send makes through stripe-go,
// bounded by the call timeout and observed beneath stripe-go (with header
// added to it), and classifies it; set files what stripe-go returned in
// the attempt.
func once[T any](ctx context.Context, a *Adapter, o op, header http.Header, send func(context.Context) (T, error), set func(*attempt, T)) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, obs := observe(ctx, header)
	got, err := send(ctx)
	at := obs.attempt(o, err)
	if err == nil {
		set(&at, got)
	}
	return classify(at)
}

func setIntent(at *attempt, pi *stripego.PaymentIntent) { at.intent = pi }

func setRefund(at *attempt, r *stripego.Refund) { at.refund = r }

// checkSend refuses, as not applied, a charge or refund that must not be
// sent: without an API key it cannot be, and without a usable idempotency
// key it could be applied twice.
func (a *Adapter) checkSend(key string) error {
	refuse := func(why string) error {
		return &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New(why)}
	}
	switch {
	case a.apiKey == "":
		return refuse("no Stripe API key configured")
	case strings.TrimSpace(key) == "":
		return refuse("empty idempotency key")
	case len(key) > maxKeyLength:
		return refuse("idempotency key longer than 255 characters")
	default:
		return nil
	}
}

// Refund creates one Refund of req.Amount of the PaymentIntent req.Charge,
// with req.Key as its Idempotency-Key and req.Reference (and req.Tag, the
// tenant) in its metadata, and classifies the answer (classify): a
// psp.Refund, succeeded or failed (Stripe's refusals of the refund for the
// charge's state are a failed refund without an ID, see
// psp.RefundRequest.Refused), or a *psp.Error of kind ErrNotApplied or
// ErrUnknownOutcome, with the refund's id as ProviderID when the answer
// named a refund still pending. Exactly one request is sent.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	return traced(ctx, a, psp.OpRefund, psp.Telemetry.EndRefund, func(ctx context.Context, header http.Header, _ trace.Span) (psp.Refund, error) {
		return a.refund(ctx, req, header)
	})
}

func (a *Adapter) refund(ctx context.Context, req psp.RefundRequest, header http.Header) (psp.Refund, error) {
	if err := a.checkSend(req.Key); err != nil {
		return psp.Refund{}, err
	}
	// Without a PaymentIntent Stripe would refuse the request; without an
	// amount it would refund all that is left of the charge.
	switch {
	case req.Charge == "":
		return psp.Refund{}, &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New("no charge to refund")}
	case req.Amount <= 0:
		return psp.Refund{}, &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New("refund amount not positive")}
	}

	params := &stripego.RefundCreateParams{
		PaymentIntent: stripego.String(req.Charge),
		Amount:        stripego.Int64(req.Amount),
	}
	if req.Reason != "" {
		params.Reason = stripego.String(req.Reason)
	}
	params.IdempotencyKey = stripego.String(req.Key)
	params.AddMetadata(MetadataRefundKey, req.Reference)
	if req.Tag != "" {
		params.AddMetadata(MetadataTenantKey, req.Tag)
	}

	got, err := once(ctx, a, opRefund, header, func(ctx context.Context) (*stripego.Refund, error) {
		return a.client.V1Refunds.Create(ctx, params)
	}, setRefund)
	if err == nil && got.refund.ID == "" {
		return req.Refused(got.refund.FailureCode), nil
	}
	return got.refund, err
}

// Capture captures req.Amount of the PaymentIntent req.Charge, created
// with capture_method manual, with req.Key as its Idempotency-Key (POST
// /v1/payment_intents/{id}/capture, amount_to_capture), and classifies the
// answer (classify): the intent as the capture left it (succeeded,
// AmountCaptured its amount_received), Stripe's refusal for the intent's
// state or the amount (req.Refused with Stripe's code:
// payment_intent_unexpected_state, amount_too_large), or a *psp.Error of
// kind ErrNotApplied or ErrUnknownOutcome. Exactly one request is sent.
func (a *Adapter) Capture(ctx context.Context, req psp.OperationRequest) (psp.Charge, error) {
	return traced(ctx, a, psp.OpCapture, psp.Telemetry.End, func(ctx context.Context, header http.Header, _ trace.Span) (psp.Charge, error) {
		if err := a.checkOperation(req, true); err != nil {
			return psp.Charge{}, err
		}
		params := &stripego.PaymentIntentCaptureParams{AmountToCapture: stripego.Int64(req.Amount)}
		params.IdempotencyKey = stripego.String(req.Key)
		return a.operate(ctx, opCapture, req, header, func(ctx context.Context) (*stripego.PaymentIntent, error) {
			return a.client.V1PaymentIntents.Capture(ctx, req.Charge, params)
		})
	})
}

// Cancel releases the PaymentIntent req.Charge, with req.Key as its
// Idempotency-Key (POST /v1/payment_intents/{id}/cancel), and classifies
// the answer as Capture does: the intent canceled, Stripe's refusal, or a
// *psp.Error.
func (a *Adapter) Cancel(ctx context.Context, req psp.OperationRequest) (psp.Charge, error) {
	return traced(ctx, a, psp.OpCancel, psp.Telemetry.End, func(ctx context.Context, header http.Header, _ trace.Span) (psp.Charge, error) {
		if err := a.checkOperation(req, false); err != nil {
			return psp.Charge{}, err
		}
		params := &stripego.PaymentIntentCancelParams{}
		params.IdempotencyKey = stripego.String(req.Key)
		return a.operate(ctx, opCancel, req, header, func(ctx context.Context) (*stripego.PaymentIntent, error) {
			return a.client.V1PaymentIntents.Cancel(ctx, req.Charge, params)
		})
	})
}

// checkOperation refuses, as not applied, a capture or cancel that must
// not be sent: one checkSend refuses, one naming no intent, or a capture
// of no money (Stripe would capture all that is capturable).
func (a *Adapter) checkOperation(req psp.OperationRequest, capture bool) error {
	if err := a.checkSend(req.Key); err != nil {
		return err
	}
	switch {
	case req.Charge == "":
		return &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New("no authorized charge")}
	case capture && req.Amount <= 0:
		return &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New("capture amount not positive")}
	}
	return nil
}

// operate makes the one request of a capture or cancel (o) of req that
// send makes; a refusal answers with what req asked for.
func (a *Adapter) operate(ctx context.Context, o op, req psp.OperationRequest, header http.Header,
	send func(context.Context) (*stripego.PaymentIntent, error)) (psp.Charge, error) {
	got, err := once(ctx, a, o, header, send, setIntent)
	if err == nil && got.charge.ID == "" {
		return req.Refused(got.charge.DeclineCode), nil
	}
	return got.charge, err
}

// FindRefund looks a refund up: by q.ProviderID when an earlier answer
// named the refund (a retrieve; 404 resource_missing is psp.ErrNotFound),
// else among the refunds of the PaymentIntent q.Charge, listed page by page
// (GET /v1/refunds?payment_intent=…, strongly consistent), by q.Reference
// in their metadata: none is psp.ErrNotFound, one is that refund, more are
// an unknown outcome (multiple_matches). Each request is one call bounded
// by Timeout; the list reads at most MaxPages pages. Every failure is a
// *psp.Error of kind ErrUnknownOutcome.
func (a *Adapter) FindRefund(ctx context.Context, q psp.LookupRequest) (psp.Refund, error) {
	return traced(ctx, a, psp.OpRefundLookup, psp.Telemetry.EndRefund, func(ctx context.Context, header http.Header, span trace.Span) (psp.Refund, error) {
		return a.findRefund(ctx, q, header, span)
	})
}

func (a *Adapter) findRefund(ctx context.Context, q psp.LookupRequest, header http.Header, span trace.Span) (psp.Refund, error) {
	switch {
	case a.apiKey == "":
		return psp.Refund{}, lookupRefused("no Stripe API key configured")
	case q.ProviderID == "" && (q.Charge == "" || q.Reference == ""):
		return psp.Refund{}, lookupRefused("a refund lookup needs the refund's id, or the charge and the reference")
	}

	if q.ProviderID != "" {
		span.SetAttributes(attribute.String("psp.lookup.by", "provider_id"))
		got, err := once(ctx, a, opRefundRetrieve, header, func(ctx context.Context) (*stripego.Refund, error) {
			return a.client.V1Refunds.Retrieve(ctx, q.ProviderID, nil)
		}, setRefund)
		return got.refund, err
	}

	span.SetAttributes(attribute.String("psp.lookup.by", string(psp.LookupByReference)))
	pages := 0
	refunds, err := readAll[stripego.Refund](ctx, a, opRefundList, "/v1/refunds", func(startingAfter string) any {
		params := &stripego.RefundListParams{PaymentIntent: stripego.String(q.Charge)}
		a.pageParams(&params.ListParams, startingAfter)
		return params
	}, header, span, &pages)
	if err != nil {
		return psp.Refund{}, err
	}
	return matchRefund(refunds, q.Reference)
}

// Find looks a charge up: by q.ProviderID when an earlier answer named the
// PaymentIntent (a retrieve; 404 resource_missing is psp.ErrNotFound),
// else by q.Reference: a search on its metadata, and when the search finds
// nothing, a scan of the intents created around the charge's sends (see
// the package doc). It returns psp.ErrNotFound only after a complete scan
// found no match; every failure is a *psp.Error of kind ErrUnknownOutcome.
// Each request (the retrieve, the search, each page of a scan) is one call
// bounded by Timeout; a scan reads at most MaxPages of them. Bounding the
// whole scan by one call's timeout would make a busy window time out every
// lookup, for ever.
func (a *Adapter) Find(ctx context.Context, q psp.LookupRequest) (psp.Charge, error) {
	return traced(ctx, a, psp.OpLookup, psp.Telemetry.End, func(ctx context.Context, header http.Header, span trace.Span) (psp.Charge, error) {
		return a.find(ctx, q, header, span)
	})
}

// lookupRefused is the error of a lookup that is not made: an unknown
// outcome, since a lookup that was not made proves nothing.
func lookupRefused(why string) error {
	return &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "invalid_request", Err: errors.New(why)}
}

func (a *Adapter) find(ctx context.Context, q psp.LookupRequest, header http.Header, span trace.Span) (psp.Charge, error) {
	switch {
	case a.apiKey == "":
		return psp.Charge{}, lookupRefused("no Stripe API key configured")
	case q.ProviderID == "" && q.Reference == "":
		return psp.Charge{}, lookupRefused("neither a provider id nor a reference")
	case q.ProviderID == "" && (q.FirstSent.IsZero() || q.LastSent.IsZero()):
		return psp.Charge{}, lookupRefused("a lookup by reference needs the times the charge was sent")
	}

	if q.ProviderID != "" {
		span.SetAttributes(attribute.String("psp.lookup.by", "provider_id"))
		return a.retrieve(ctx, q.ProviderID, header)
	}
	span.SetAttributes(attribute.String("psp.lookup.by", string(psp.LookupByReference)))
	hits, err := a.search(ctx, q.Reference, header)
	if err != nil {
		return psp.Charge{}, err
	}
	span.SetAttributes(attribute.Int("psp.lookup.search_hits", len(hits)))
	switch len(hits) {
	case 0:
		// Search is eventually consistent: no hit proves nothing.
		return a.scan(ctx, q, header, span)
	case 1:
		// The search proved the intent exists; its state is the
		// retrieve's, which is consistent where the search's copy may lag.
		found, err := a.retrieve(ctx, hits[0].ID, header)
		if err == nil && found.Reference != q.Reference {
			return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "reference_mismatch", ProviderID: hits[0].ID,
				Err: fmt.Errorf("payment intent %s was found by its reference but no longer carries it", hits[0].ID)}
		}
		if errors.Is(err, psp.ErrNotFound) {
			// Found by search, missing by id: nothing is proven.
			return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "search_hit_missing", ProviderID: hits[0].ID,
				Err: fmt.Errorf("payment intent %s was found by search but not by id", hits[0].ID)}
		}
		return found, err
	default:
		return matchReference(hits, q.Reference)
	}
}

// search asks Stripe's search for the intents whose metadata holds
// reference, and returns those that do (a search is trusted for what it
// finds, checked all the same). More than a page of hits is as many as a
// page: two are already a double charge for a person to look at.
func (a *Adapter) search(ctx context.Context, reference string, header http.Header) ([]*stripego.PaymentIntent, error) {
	params := &stripego.PaymentIntentSearchParams{}
	params.Query = searchQuery(reference)
	params.Limit = stripego.Int64(searchLimit)
	found, err := readPage[stripego.PaymentIntent](ctx, a, opSearch, "/v1/payment_intents/search", params, header)
	if err != nil {
		return nil, err
	}
	var hits []*stripego.PaymentIntent
	for _, pi := range found.Data {
		if pi.Metadata[MetadataKey] == reference {
			hits = append(hits, pi)
		}
	}
	return hits, nil
}

// searchLimit is the search page the adapter reads: one hit is the
// answer, and any more are a double charge.
const searchLimit = 10

// searchQuery is Stripe's search query for a metadata value: the value
// quoted, with quotes and backslashes escaped.
func searchQuery(reference string) string {
	escaped := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(reference)
	return "metadata['" + MetadataKey + "']:'" + escaped + "'"
}

// retrieve gets one PaymentIntent by id.
func (a *Adapter) retrieve(ctx context.Context, id string, header http.Header) (psp.Charge, error) {
	got, err := once(ctx, a, opRetrieve, header, func(ctx context.Context) (*stripego.PaymentIntent, error) {
		return a.client.V1PaymentIntents.Retrieve(ctx, id, nil)
	}, setIntent)
	return got.charge, err
}

// scan lists the PaymentIntents created around each of the charge's sends
// (windows), newest first, page by page with starting_after, and matches
// their metadata against q.Reference once every page of every window has
// been read (matchReference). MaxPages bounds the pages of all windows.
func (a *Adapter) scan(ctx context.Context, q psp.LookupRequest, header http.Header, span trace.Span) (psp.Charge, error) {
	var intents []*stripego.PaymentIntent
	pages := 0
	for _, created := range a.windows(q) {
		listed, err := readAll[stripego.PaymentIntent](ctx, a, opList, "/v1/payment_intents", func(startingAfter string) any {
			params := &stripego.PaymentIntentListParams{CreatedRange: created}
			a.pageParams(&params.ListParams, startingAfter)
			return params
		}, header, span, &pages)
		if err != nil {
			return psp.Charge{}, err
		}
		intents = append(intents, listed...)
	}
	return matchReference(intents, q.Reference)
}

// windows are the created-time ranges, in unix seconds, in which Stripe can
// have executed one of q's sends: from each send less the clock skew (Stripe
// cannot execute a request before we send it) to the send plus the call
// timeout, the apply delay and the skew. Overlapping or adjacent ranges are
// merged, so no intent is listed twice; the newest range comes first.
func (a *Adapter) windows(q psp.LookupRequest) []*stripego.RangeQueryParams {
	sends := append([]time.Time{q.FirstSent, q.LastSent}, q.Sends...)
	slices.SortFunc(sends, time.Time.Compare)
	var out []*stripego.RangeQueryParams
	for _, sent := range sends {
		// created is in whole seconds: round outwards.
		until := sent.Add(a.timeout + a.applyDelay + a.clockSkew)
		w := &stripego.RangeQueryParams{GreaterThanOrEqual: sent.Add(-a.clockSkew).Unix(), LesserThanOrEqual: until.Unix()}
		if until.Nanosecond() > 0 {
			w.LesserThanOrEqual++
		}
		if n := len(out); n > 0 && w.GreaterThanOrEqual <= out[n-1].LesserThanOrEqual+1 {
			out[n-1].LesserThanOrEqual = max(out[n-1].LesserThanOrEqual, w.LesserThanOrEqual)
			continue
		}
		out = append(out, w)
	}
	slices.Reverse(out)
	return out
}

// pageParams sets a list page's size and, after the first page, its
// cursor.
func (a *Adapter) pageParams(params *stripego.ListParams, startingAfter string) {
	params.Limit = stripego.Int64(a.pageSize)
	if startingAfter != "" {
		params.StartingAfter = stripego.String(startingAfter)
	}
}

// readAll reads every page of one list at path, newest first, page by
// page with starting_after (params builds each page's parameters from its
// cursor), and returns every item. Each page is one call bounded by the
// call timeout; *pages counts the pages of the whole lookup, which may
// read MaxPages of them: a longer one is an unknown outcome
// (scan_too_long), never a not-found.
func readAll[T any](ctx context.Context, a *Adapter, o op, path string, params func(startingAfter string) any, header http.Header, span trace.Span, pages *int) ([]*T, error) {
	var items []*T
	startingAfter := ""
	for {
		if *pages >= a.maxPages {
			return nil, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "scan_too_long",
				Err: fmt.Errorf("more than %d pages to read", a.maxPages)}
		}
		*pages++
		span.SetAttributes(attribute.Int("psp.lookup.pages", *pages))
		page, err := readPage[T](ctx, a, o, path, params(startingAfter), header)
		if err != nil {
			return nil, err
		}
		items = append(items, page.Data...)
		if !page.HasMore {
			return items, nil
		}
		startingAfter = idOf(page.Data[len(page.Data)-1])
	}
}

// readPage reads one page of a list or a search through stripe-go's
// backend (its iterators hide has_more), and classifies it.
func readPage[T any](ctx context.Context, a *Adapter, o op, path string, params any, header http.Header) (*page[T], error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, obs := observe(ctx, header)
	values := &form.Values{}
	form.AppendTo(values, params)

	read := &page[T]{}
	err := a.backend.CallRaw(http.MethodGet, path, a.apiKey, []byte(values.Encode()), &stripego.Params{Context: ctx}, read)
	at := obs.attempt(o, err)
	if err == nil {
		at.page = read
	}
	if _, err := classify(at); err != nil {
		return nil, err
	}
	return read, nil
}
