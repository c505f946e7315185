package adyen

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/psp"
)

const (
	// DefaultName is the provider's name on charges.
	DefaultName = "adyen"

	// DefaultBaseURL is Adyen's test Checkout API, version 71. A live
	// account's URL has its own prefix, so there is no live default.
	DefaultBaseURL = "https://checkout-test.adyen.com/v71"

	// DefaultReturnURL is sent as returnUrl, which the description
	// requires of every payment. A stored card charged as ContAuth has no
	// shopper to send anywhere, so Adyen never redirects to it; .invalid
	// is a name reserved never to resolve (RFC 2606), so if it ever did,
	// the shopper would land nowhere rather than on someone's site.
	DefaultReturnURL = "https://chargeflow.invalid/return"

	// DefaultKeyWindow is how long the adapter declares that Adyen
	// de-duplicates an idempotency key: seven days, the minimum Adyen
	// documented when keys were introduced. Its documentation now says
	// 31; the smaller promise is declared, so a change back costs nothing.
	DefaultKeyWindow = 7 * 24 * time.Hour

	// MaxKeyLength is Adyen's limit on an Idempotency-Key.
	MaxKeyLength = 64

	// MetadataTenantKey holds a charge's tenant tag in the payment's
	// metadata (Adyen allows keys of 20 characters at most).
	MetadataTenantKey = "chargeflow_tenant"

	// DefaultHoldWindow is how long the adapter declares that Adyen holds
	// a card authorisation for a later capture: seven days
	// (psp.DefaultHoldWindow). Adyen itself lets an authorisation expire
	// after 28 days (12 for Cartes Bancaires), but the card schemes' own
	// validity of a merchant-initiated authorisation can be as short as
	// seven days, and a capture after it may fail at the scheme
	// (CAPTURE_FAILED) days after Adyen reported it captured; the smaller
	// promise is declared, as for the key window (docs/provider.md, "The
	// Adyen adapter").
	DefaultHoldWindow = psp.DefaultHoldWindow
)

// Config configures an Adapter.
type Config struct {
	// Name names the provider on charges: the account this adapter
	// charges. Defaults to DefaultName.
	Name string

	// BaseURL is the Checkout API's base URL, with its version, such as
	// "https://checkout-test.adyen.com/v71": a charge is a POST to
	// BaseURL + "/payments". Defaults to DefaultBaseURL.
	BaseURL string

	// APIKey authenticates every request (X-API-Key). Required: a call
	// without one is refused before anything is sent. It never appears in
	// errors, spans or logs.
	APIKey string

	// MerchantAccount is the merchant account every payment and refund is
	// made on. Required, like APIKey.
	MerchantAccount string

	// ReturnURL is sent as returnUrl. Defaults to DefaultReturnURL.
	ReturnURL string

	// Timeout bounds each call, from dialing to the last byte. Defaults to
	// psp.DefaultTimeout.
	Timeout time.Duration

	// HTTPClient makes the calls; the adapter uses a shallow copy that
	// never follows redirects (psp.NewHTTPClient), and sends each request
	// once (psp.RoundTrip). Defaults to a client on psp.NewTransport.
	HTTPClient *http.Client

	// KeyWindow is how long Adyen de-duplicates an idempotency key, as
	// declared in Capabilities. Defaults to DefaultKeyWindow.
	KeyWindow time.Duration

	// HoldWindow is how long Adyen holds an authorisation sent to be
	// captured later, as declared in Capabilities: an account whose
	// payments are all pre-authorisations, or whose schemes hold longer,
	// may declare more. Defaults to DefaultHoldWindow.
	HoldWindow time.Duration

	// TracerProvider and MeterProvider record each call as psp.Client's
	// calls are recorded (psp.Telemetry). Nil records nothing.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// Adapter is the psp.Provider, psp.Refunder and psp.Capturer for Adyen's
// Checkout API. It is safe for concurrent use.
type Adapter struct {
	name            string
	baseURL         string
	apiKey          string
	merchantAccount string
	returnURL       string
	timeout         time.Duration
	keyWindow       time.Duration
	holdWindow      time.Duration
	httpClient      *http.Client
	telemetry       psp.Telemetry
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
	return &Adapter{
		name:            cmp.Or(cfg.Name, DefaultName),
		baseURL:         baseURL,
		apiKey:          cfg.APIKey,
		merchantAccount: cfg.MerchantAccount,
		returnURL:       cmp.Or(cfg.ReturnURL, DefaultReturnURL),
		timeout:         cmp.Or(cfg.Timeout, psp.DefaultTimeout),
		keyWindow:       cmp.Or(cfg.KeyWindow, DefaultKeyWindow),
		holdWindow:      cmp.Or(cfg.HoldWindow, DefaultHoldWindow),
		httpClient:      psp.NewHTTPClient(cfg.HTTPClient),
		telemetry:       psp.NewTelemetry(cfg.TracerProvider, cfg.MeterProvider, baseURL),
	}
}

// Timeout is how long one call may take: the system's call timeout.
func (a *Adapter) Timeout() time.Duration { return a.timeout }

// Capabilities are Adyen's: no lookup at all, but a re-send with the same
// key inside the key window is answered with the first request's result
// (psp.LookupByResend), so the caller learns a lost answer by sending the
// row's own request again. Consistency is Strong only because the field
// needs a value: with LookupByResend no lookup is ever made, and nothing
// reads it. Refunds, signed notifications (ParseNotifications), and
// authorisations captured or cancelled later (Capture, Cancel), held for
// the hold window.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:            a.name,
		KeyWindow:       a.keyWindow,
		Lookup:          psp.LookupByResend,
		Consistency:     psp.Strong,
		ByProviderID:    false,
		Refunds:         true,
		Notifications:   true,
		SeparateCapture: true,
		HoldWindow:      a.holdWindow,
	}
}

// noLookup is the answer of Find and FindRefund: Adyen's Checkout API has
// no lookup of a payment or a refund, so a lookup proves nothing. It is
// never psp.ErrNotFound.
func noLookup(what string) error {
	return &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "no_lookup",
		Err: errors.New("adyen's checkout API has no lookup of a " + what + ": send the same request with the same key again, or wait for the notification")}
}

// Find answers every lookup with an unknown outcome (no_lookup), never
// psp.ErrNotFound: Adyen has no lookup of a payment (Capabilities says
// psp.LookupByResend, and the caller re-sends through Charge instead).
// Nothing is sent.
func (a *Adapter) Find(context.Context, psp.LookupRequest) (psp.Charge, error) {
	return psp.Charge{}, noLookup("payment")
}

// FindRefund answers as Find does: Adyen has no lookup of a refund either.
func (a *Adapter) FindRefund(context.Context, psp.LookupRequest) (psp.Refund, error) {
	return psp.Refund{}, noLookup("refund")
}

// paymentBody is the body of POST /payments: a stored card charged as
// an unscheduled card-on-file payment, without a shopper present.
type paymentBody struct {
	AdditionalData           map[string]string `json:"additionalData,omitempty"`
	Amount                   amount            `json:"amount"`
	MerchantAccount          string            `json:"merchantAccount"`
	Reference                string            `json:"reference"`
	PaymentMethod            storedCard        `json:"paymentMethod"`
	ShopperReference         string            `json:"shopperReference,omitempty"`
	ShopperInteraction       string            `json:"shopperInteraction"`
	RecurringProcessingModel string            `json:"recurringProcessingModel"`
	ReturnURL                string            `json:"returnUrl"`
	Metadata                 map[string]string `json:"metadata,omitempty"`
}

// storedCard is a CardDetails naming a stored payment method.
type storedCard struct {
	Type                  string `json:"type"`
	StoredPaymentMethodID string `json:"storedPaymentMethodId"`
}

// manualCapture is the additionalData that asks Adyen to authorise a
// payment only (AdditionalDataCommon.manualCapture): it is captured by a
// later POST /payments/{pspReference}/captures, or released by a cancel
// or by its expiry, whatever the merchant account's capture delay.
var manualCapture = map[string]string{"manualCapture": "true"}

// Charge sends one payment (POST /payments) for req, with req.Key as its
// Idempotency-Key, req.Reference (our charge id) as its reference and
// req.Tag (the tenant) as its shopperReference and in its metadata, and
// classifies the answer (classify). A decline is a Charge with
// psp.StatusFailed and a nil error; every error is a *psp.Error of kind
// ErrNotApplied or ErrUnknownOutcome, with the payment's pspReference as
// ProviderID when the answer named one without settling it. Exactly one
// request is sent.
//
// A charge to be captured later (req.CaptureLater) is sent for manual
// capture (additionalData manualCapture "true"), and its Authorised is
// psp.StatusRequiresCapture: Adyen holds the money until Capture or
// Cancel, or until the authorisation expires.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, psp.OpCharge, header)
	charge, err := a.charge(ctx, req, header)
	a.telemetry.End(ctx, span, psp.OpCharge, start, charge, err)
	return charge, err
}

func (a *Adapter) charge(ctx context.Context, req psp.ChargeRequest, header http.Header) (psp.Charge, error) {
	if err := a.checkSend(req.Key, req.Reference); err != nil {
		return psp.Charge{}, err
	}
	body := paymentBody{
		Amount:                   amount{Currency: req.Currency, Value: &req.Amount},
		MerchantAccount:          a.merchantAccount,
		Reference:                req.Reference,
		PaymentMethod:            storedCard{Type: "scheme", StoredPaymentMethodID: req.PaymentMethod},
		ShopperInteraction:       "ContAuth",
		RecurringProcessingModel: "UnscheduledCardOnFile",
		ReturnURL:                a.returnURL,
	}
	if req.Tag != "" {
		body.ShopperReference = req.Tag
		body.Metadata = map[string]string{MetadataTenantKey: req.Tag}
	}
	if req.CaptureLater {
		body.AdditionalData = manualCapture
	}
	charge, err := a.send(ctx, psp.OpCharge, "/payments", req.Key, body, header)
	if err == nil && req.CaptureLater && charge.Status == psp.StatusSucceeded {
		// Authorised, and not captured: manual capture holds it.
		charge.Status = psp.StatusRequiresCapture
	}
	return charge, err
}

// refundBody is the body of POST /payments/{paymentPspReference}/refunds.
type refundBody struct {
	Amount               amount `json:"amount"`
	MerchantAccount      string `json:"merchantAccount"`
	Reference            string `json:"reference"`
	MerchantRefundReason string `json:"merchantRefundReason,omitempty"`
}

// refundReasons maps our refund reasons to the description's
// merchantRefundReason values; a reason without one sends none.
var refundReasons = map[string]string{
	"requested_by_customer": "CUSTOMER REQUEST",
	"duplicate":             "DUPLICATE",
	"fraudulent":            "FRAUD",
}

// Refund sends one refund of req.Amount of the payment req.Charge (POST
// /payments/{req.Charge}/refunds) with req.Key as its Idempotency-Key and
// req.Reference (our refund id) as its reference. Adyen acknowledges a
// refund at once and settles it only in its REFUND notification, so a
// refund it received is an unknown outcome naming the refund's
// pspReference (refund_received), never a psp.Refund; errors are
// classified as a charge's. A refund without a key, a charge or a positive
// amount is refused unsent, not applied. Exactly one request is sent.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, psp.OpRefund, header)
	err := a.refund(ctx, req, header)
	a.telemetry.EndRefund(ctx, span, psp.OpRefund, start, psp.Refund{}, err)
	return psp.Refund{}, err
}

func (a *Adapter) refund(ctx context.Context, req psp.RefundRequest, header http.Header) error {
	if err := a.checkSend(req.Key, req.Reference); err != nil {
		return err
	}
	switch {
	case req.Charge == "":
		return notSent("no payment to refund")
	case req.Amount <= 0:
		// Adyen requires an amount; a refund of nothing names no money.
		return notSent("refund amount not positive")
	}
	body := refundBody{
		Amount:               amount{Currency: req.Currency, Value: &req.Amount},
		MerchantAccount:      a.merchantAccount,
		Reference:            req.Reference,
		MerchantRefundReason: refundReasons[req.Reason],
	}
	_, err := a.send(ctx, psp.OpRefund, "/payments/"+url.PathEscape(req.Charge)+"/refunds", req.Key, body, header)
	return err
}

// notSent is the not-applied error of a request refused before sending.
func notSent(why string) error {
	return &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: errors.New(why)}
}

// checkSend refuses, as not applied, a charge or modification that must
// not be sent: without an API key or a merchant account it cannot be,
// without a usable idempotency key it could be applied twice, and without
// our reference its answer and notification could not be matched to the
// row.
func (a *Adapter) checkSend(key, reference string) error {
	switch {
	case a.apiKey == "":
		return notSent("no Adyen API key configured")
	case a.merchantAccount == "":
		return notSent("no Adyen merchant account configured")
	case strings.TrimSpace(key) == "":
		return notSent("empty idempotency key")
	case len(key) > MaxKeyLength:
		return notSent("idempotency key longer than 64 characters")
	case reference == "":
		return notSent("no reference")
	default:
		return nil
	}
}

// send POSTs body as JSON to path, with key as its Idempotency-Key and
// header (the trace context) added, exactly once (psp.RoundTrip) under the
// call timeout, and classifies the answer as an answer to op.
func (a *Adapter) send(ctx context.Context, op psp.Op, path, key string, body any, header http.Header) (psp.Charge, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	payload, err := json.Marshal(body)
	if err != nil {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, a.baseURL+path, bytes.NewReader(payload))
	if err != nil {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	for name, values := range header {
		httpReq.Header[name] = values
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("User-Agent", "chargeflow-psp/1")
	httpReq.Header.Set("Idempotency-Key", key)
	httpReq.Header.Set("X-API-Key", a.apiKey)
	return classify(psp.RoundTrip(a.httpClient, httpReq, op))
}
