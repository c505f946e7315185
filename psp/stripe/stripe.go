package stripe

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"chargeflow/psp"
)

const (
	// Name is the provider's name on charges.
	Name = "stripe"

	// DefaultBaseURL is Stripe's API.
	DefaultBaseURL = "https://api.stripe.com"

	// KeyWindow is how long Stripe promises to remember an idempotency key:
	// it documents that keys may be pruned once at least 24 hours old.
	KeyWindow = 24 * time.Hour

	// DefaultCreatedSlack widens a lookup's created-time window on both
	// sides; see the package doc. internal/app adds the call timeout and
	// the reconciler's apply delay to it.
	DefaultCreatedSlack = 10 * time.Minute

	// DefaultPageSize is Stripe's largest list page.
	DefaultPageSize = 100

	// DefaultMaxPages bounds one lookup's scan; a longer one is an unknown
	// outcome, never a not-found.
	DefaultMaxPages = 50

	// maxKeyLength is Stripe's limit on an idempotency key.
	maxKeyLength = 255
)

// Config configures an Adapter.
type Config struct {
	// BaseURL is Stripe's API base URL. Defaults to DefaultBaseURL.
	BaseURL string

	// APIKey is the secret key requests authenticate with. Required: a
	// call without one is refused before anything is sent. It never
	// appears in errors, spans or logs.
	APIKey string

	// Timeout bounds each call, from dialing to the last byte: a charge, a
	// retrieve, one page of a lookup's scan. Defaults to psp.DefaultTimeout.
	Timeout time.Duration

	// CreatedSlack widens a lookup by reference's created-time window on
	// both sides. Defaults to DefaultCreatedSlack.
	CreatedSlack time.Duration

	// PageSize and MaxPages shape a lookup by reference's scan. Default
	// DefaultPageSize and DefaultMaxPages.
	PageSize int64
	MaxPages int

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
	client       *stripego.Client
	backend      stripego.Backend
	apiKey       string
	timeout      time.Duration
	createdSlack time.Duration
	pageSize     int64
	maxPages     int
	telemetry    psp.Telemetry
}

// Adapter is a psp.Provider.
var _ psp.Provider = (*Adapter)(nil)

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
		client:       stripego.NewClient(cfg.APIKey, stripego.WithBackends(backends)),
		backend:      backends.API,
		apiKey:       cfg.APIKey,
		timeout:      cmp.Or(cfg.Timeout, psp.DefaultTimeout),
		createdSlack: cmp.Or(cfg.CreatedSlack, DefaultCreatedSlack),
		pageSize:     cmp.Or(cfg.PageSize, DefaultPageSize),
		maxPages:     cmp.Or(cfg.MaxPages, DefaultMaxPages),
		telemetry:    psp.NewTelemetry(cfg.TracerProvider, cfg.MeterProvider, baseURL),
	}
}

// Timeout is how long one call may take: the system's call timeout.
func (a *Adapter) Timeout() time.Duration { return a.timeout }

// Capabilities are Stripe's: a 24-hour key window, a strongly consistent
// lookup by reference (the list endpoint, not search; see the package
// doc) and a strong retrieve by PaymentIntent id.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:         Name,
		KeyWindow:    KeyWindow,
		Lookup:       psp.LookupByReference,
		Consistency:  psp.Strong,
		ByProviderID: true,
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
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, psp.OpCharge, header)
	answer, err := a.charge(ctx, req, header)
	a.telemetry.End(ctx, span, psp.OpCharge, start, answer, err)
	return answer, err
}

func (a *Adapter) charge(ctx context.Context, req psp.ChargeRequest, header http.Header) (psp.Charge, error) {
	refuse := func(why string) (psp.Charge, error) {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New(why)}
	}
	switch {
	case a.apiKey == "":
		return refuse("no Stripe API key configured")
	case strings.TrimSpace(req.Key) == "":
		return refuse("empty idempotency key")
	case len(req.Key) > maxKeyLength:
		return refuse("idempotency key longer than 255 characters")
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
	params.IdempotencyKey = stripego.String(req.Key)
	params.AddMetadata(MetadataKey, req.Reference)
	if req.Tag != "" {
		params.AddMetadata(MetadataTenantKey, req.Tag)
	}

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, obs := observe(ctx, header)
	pi, err := a.client.V1PaymentIntents.Create(ctx, params)
	at := obs.attempt(opCharge, err)
	if err == nil {
		at.intent = pi
	}
	return classify(at)
}

// Find looks a charge up: by q.ProviderID when an earlier answer named the
// PaymentIntent (a retrieve; 404 resource_missing is psp.ErrNotFound),
// else by q.Reference, listing the intents created around the charge's
// sends and matching their metadata (see the package doc). It returns
// psp.ErrNotFound only after a complete scan found no match; every failure
// is a *psp.Error of kind ErrUnknownOutcome. Each request (the retrieve,
// each page of a scan) is one call bounded by Timeout; a scan reads at most
// MaxPages of them. Bounding the whole scan by one call's timeout would make
// a busy window time out every lookup, for ever.
func (a *Adapter) Find(ctx context.Context, q psp.LookupRequest) (psp.Charge, error) {
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, psp.OpLookup, header)
	answer, err := a.find(ctx, q, header, span)
	a.telemetry.End(ctx, span, psp.OpLookup, start, answer, err)
	return answer, err
}

func (a *Adapter) find(ctx context.Context, q psp.LookupRequest, header http.Header, span trace.Span) (psp.Charge, error) {
	refuse := func(why string) (psp.Charge, error) {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "invalid_request", Err: errors.New(why)}
	}
	switch {
	case a.apiKey == "":
		return refuse("no Stripe API key configured")
	case q.ProviderID == "" && q.Reference == "":
		return refuse("neither a provider id nor a reference")
	case q.ProviderID == "" && (q.FirstSent.IsZero() || q.LastSent.IsZero()):
		return refuse("a lookup by reference needs the times the charge was sent")
	}

	if q.ProviderID != "" {
		span.SetAttributes(attribute.String("psp.lookup.by", "provider_id"))
		return a.retrieve(ctx, q.ProviderID, header)
	}
	span.SetAttributes(attribute.String("psp.lookup.by", string(psp.LookupByReference)))
	return a.scan(ctx, q, header, span)
}

// retrieve gets one PaymentIntent by id.
func (a *Adapter) retrieve(ctx context.Context, id string, header http.Header) (psp.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, obs := observe(ctx, header)
	pi, err := a.client.V1PaymentIntents.Retrieve(ctx, id, nil)
	at := obs.attempt(opRetrieve, err)
	if err == nil {
		at.intent = pi
	}
	return classify(at)
}

// scan lists the PaymentIntents created in the charge's window, newest
// first, page by page with starting_after, and matches their metadata
// against q.Reference once every page has been read (matchReference).
func (a *Adapter) scan(ctx context.Context, q psp.LookupRequest, header http.Header, span trace.Span) (psp.Charge, error) {
	from, to := q.FirstSent, q.LastSent
	if to.Before(from) {
		from, to = to, from
	}
	// created is in whole seconds: round the window outwards.
	until := to.Add(a.createdSlack)
	created := &stripego.RangeQueryParams{
		GreaterThanOrEqual: from.Add(-a.createdSlack).Unix(),
		LesserThanOrEqual:  until.Unix(),
	}
	if until.Nanosecond() > 0 {
		created.LesserThanOrEqual++
	}

	var intents []*stripego.PaymentIntent
	startingAfter := ""
	for pages := 1; ; pages++ {
		span.SetAttributes(attribute.Int("psp.lookup.pages", pages))
		page, err := a.listPage(ctx, created, startingAfter, header)
		if err != nil {
			return psp.Charge{}, err
		}
		intents = append(intents, page.Data...)
		if !page.HasMore {
			return matchReference(intents, q.Reference)
		}
		if pages >= a.maxPages {
			return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "scan_too_long",
				Err: errors.New("more payment intents in the created window than the scan may read")}
		}
		startingAfter = page.Data[len(page.Data)-1].ID
	}
}

// listPage reads one page of GET /v1/payment_intents through stripe-go's
// backend (its iterator hides has_more), and classifies it.
func (a *Adapter) listPage(ctx context.Context, created *stripego.RangeQueryParams, startingAfter string, header http.Header) (*intentPage, error) {
	params := &stripego.PaymentIntentListParams{CreatedRange: created}
	params.Limit = stripego.Int64(a.pageSize)
	if startingAfter != "" {
		params.StartingAfter = stripego.String(startingAfter)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, obs := observe(ctx, header)
	params.Context = ctx
	values := &form.Values{}
	form.AppendTo(values, params)

	page := &intentPage{}
	err := a.backend.CallRaw(http.MethodGet, "/v1/payment_intents", a.apiKey, []byte(values.Encode()), params.GetParams(), page)
	at := obs.attempt(opList, err)
	if err == nil {
		at.page = page
	}
	if _, err := classify(at); err != nil {
		return nil, err
	}
	return page, nil
}
