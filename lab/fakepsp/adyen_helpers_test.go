package fakepsp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp/adyen/checkoutspec"
)

// The credentials the Adyen tests use: any API key will do, and any
// merchant account.
const (
	adyenAPIKey     = "AQE_test_fakepsp_api_key"
	merchantAccount = "ChargeflowECOM"
)

// expectHeader marks a request a test sends knowing that Adyen's
// description refuses it (expectInvalid) or has no such route
// (expectOffDescription). Every other request must be one Adyen accepts.
const (
	expectHeader         = "X-Test-Expect"
	expectInvalid        = "invalid-request"
	expectOffDescription = "off-description"
)

// pspReferencePattern is the shape of Adyen's pspReference.
var pspReferencePattern = regexp.MustCompile(`^[A-Z0-9]{16}$`)

// adyenBundle is a provider speaking the Adyen protocol, with a client
// whose every exchange is recorded and, when the test ends, checked
// against Adyen's published description: every request the test sends
// (but those marked) and every answer the fake gives.
type adyenBundle struct {
	*testBundle
	recorder *checkoutspec.Recorder
}

// setupAdyen starts a provider for cfg speaking the Adyen protocol.
func setupAdyen(t *testing.T, cfg fakepsp.Config) *adyenBundle {
	t.Helper()

	cfg.Protocol = fakepsp.ProtocolAdyen
	b := &adyenBundle{testBundle: setup(t, cfg)}
	b.recorder = &checkoutspec.Recorder{Next: b.http.Transport}
	t.Cleanup(func() { checkExchanges(t, b.recorder.Exchanges()) })
	return b
}

// checkExchanges holds every recorded exchange to Adyen's description. A
// request must be valid unless marked; an answer must be one the
// description allows for its route and status, but for the statuses it
// lists for no route, 404 (no such route) and 429 (not_processed), whose
// body must still be a ServiceError.
func checkExchanges(t *testing.T, exchanges []checkoutspec.Exchange) {
	t.Helper()

	spec, err := checkoutspec.Load()
	require.NoError(t, err)
	require.NotEmpty(t, exchanges, "the test made no exchange to check")
	for _, e := range exchanges {
		what := fmt.Sprintf("%s %s %s", e.Method, e.Path, e.Body)
		requestErr := spec.ValidateRequest(e)
		switch e.Header.Get(expectHeader) {
		case "":
			require.NoError(t, requestErr, "a request Adyen would accept: %s", what)
		case expectInvalid:
			require.Error(t, requestErr, "a request Adyen's description refuses: %s", what)
		case expectOffDescription:
			require.ErrorContains(t, requestErr, "not in adyen's checkout v71 description", what)
		}
		if e.Status == 0 {
			continue // no answer: a dropped connection
		}
		answer := fmt.Sprintf("%s → %d %s", what, e.Status, e.ResponseBody)
		if e.Status == http.StatusNotFound || e.Status == http.StatusTooManyRequests {
			require.Error(t, spec.ValidateResponse(e), "a status the description lists for no route: %s", answer)
			var body any
			require.NoError(t, json.Unmarshal(e.ResponseBody, &body), answer)
			require.NoError(t, spec.Doc.Components.Schemas["ServiceError"].Value.VisitJSON(body), answer)
			continue
		}
		require.NoError(t, spec.ValidateResponse(e), "an answer Adyen's description allows: %s", answer)
	}
}

// client returns a client whose exchanges are recorded, giving up after
// timeout (0: never).
func (b *adyenBundle) client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: b.recorder, Timeout: timeout}
}

// send POSTs body (JSON-encoded unless a string) to path through client
// with the API key, the key (none when empty) and header, and returns what
// the transport did: the faults that drop connections leave no answer.
func (b *adyenBundle) send(t *testing.T, client *http.Client, path, key string, body any, header http.Header) (response, error) {
	t.Helper()

	data, ok := body.(string)
	if !ok {
		encoded, err := json.Marshal(body)
		require.NoError(t, err)
		data = string(encoded)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+path, bytes.NewReader([]byte(data)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", adyenAPIKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for name, values := range header {
		req.Header[name] = values
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: answer}, nil
}

// post is send through a client without a timeout, requiring an answer.
func (b *adyenBundle) post(t *testing.T, path, key string, body any, header http.Header) response {
	t.Helper()

	resp, err := b.send(t, b.client(0), path, key, body, header)
	require.NoError(t, err)
	return resp
}

// payment is the payment request chargeflow's Adyen adapter sends, for our
// charge reference, paid with the stored payment method, for the tenant.
func payment(reference, method string) map[string]any {
	return map[string]any{
		"amount":                   map[string]any{"currency": "EUR", "value": 1000},
		"merchantAccount":          merchantAccount,
		"reference":                reference,
		"paymentMethod":            map[string]any{"type": "scheme", "storedPaymentMethodId": method},
		"shopperReference":         "tn_shopper",
		"shopperInteraction":       "ContAuth",
		"recurringProcessingModel": "UnscheduledCardOnFile",
		"returnUrl":                "https://chargeflow.example/return",
		"metadata":                 map[string]any{fakepsp.AdyenMetadataTenant: "tn_tenant"},
	}
}

// with returns a copy of body with field set to value, or removed when
// value is nil.
func with(body map[string]any, field string, value any) map[string]any {
	changed := maps.Clone(body)
	if value == nil {
		delete(changed, field)
	} else {
		changed[field] = value
	}
	return changed
}

// paymentResponse is Adyen's PaymentResponse.
type paymentResponse struct {
	PSPReference      string       `json:"pspReference"`
	ResultCode        string       `json:"resultCode"`
	Amount            amountObject `json:"amount"`
	MerchantReference string       `json:"merchantReference"`
	RefusalReason     string       `json:"refusalReason"`
	RefusalReasonCode string       `json:"refusalReasonCode"`
}

// amountObject is Adyen's Amount.
type amountObject struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// pay POSTs a payment under key and requires a 200, the key echoed.
func (b *adyenBundle) pay(t *testing.T, key string, body map[string]any) paymentResponse {
	t.Helper()

	resp := b.post(t, "/v71/payments", key, body, nil)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.Equal(t, key, resp.header.Get("Idempotency-Key"), "Adyen echoes the key")
	var answer paymentResponse
	require.NoError(t, json.Unmarshal(resp.body, &answer))
	require.Regexp(t, pspReferencePattern, answer.PSPReference)
	return answer
}

// authorise pays with Visa for the reference "ch_" + key, requiring it to
// be authorised.
func (b *adyenBundle) authorise(t *testing.T, key string) paymentResponse {
	t.Helper()

	answer := b.pay(t, key, payment("ch_"+key, fakepsp.PaymentMethodVisa))
	require.Equal(t, "Authorised", answer.ResultCode)
	return answer
}

// serviceError is Adyen's ServiceError.
type serviceError struct {
	Status    int    `json:"status"`
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
	ErrorType string `json:"errorType"`
}

// requireServiceError requires resp to be a ServiceError of status, code
// and type, its status repeated in the body, and returns it.
func requireServiceError(t *testing.T, resp response, status int, code, errorType string) serviceError {
	t.Helper()

	require.Equal(t, status, resp.status, "body: %s", resp.body)
	var e serviceError
	require.NoError(t, json.Unmarshal(resp.body, &e), "body: %s", resp.body)
	require.Equal(t, serviceError{Status: status, ErrorCode: code, ErrorType: errorType, Message: e.Message}, e)
	require.NotEmpty(t, e.Message)
	return e
}

// refundRequest is the refund request chargeflow's Adyen adapter sends:
// amount of the payment's, for our refund reference.
func refundRequest(reference string, amount int64) map[string]any {
	return map[string]any{
		"amount":          map[string]any{"currency": "EUR", "value": amount},
		"merchantAccount": merchantAccount,
		"reference":       reference,
	}
}

// refundPath is the refunds route of the payment pspReference.
func refundPath(pspReference string) string {
	return "/v71/payments/" + pspReference + "/refunds"
}

// refundResponse is Adyen's PaymentRefundResponse.
type refundResponse struct {
	MerchantAccount     string       `json:"merchantAccount"`
	PaymentPSPReference string       `json:"paymentPspReference"`
	PSPReference        string       `json:"pspReference"`
	Reference           string       `json:"reference"`
	Status              string       `json:"status"`
	Amount              amountObject `json:"amount"`
}

// refundPayment asks for a refund of amount of the payment under key, for
// the reference "re_" + key, and requires it acknowledged.
func (b *adyenBundle) refundPayment(t *testing.T, key, pspReference string, amount int64) refundResponse {
	t.Helper()

	resp := b.post(t, refundPath(pspReference), key, refundRequest("re_"+key, amount), nil)
	return requireAcknowledged(t, resp, pspReference, "re_"+key, amount)
}

// requireAcknowledged requires resp to be the 201 "received" of a refund
// of amount of the payment, for reference, and returns it.
func requireAcknowledged(t *testing.T, resp response, pspReference, reference string, amount int64) refundResponse {
	t.Helper()

	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	var answer refundResponse
	require.NoError(t, json.Unmarshal(resp.body, &answer))
	require.Regexp(t, pspReferencePattern, answer.PSPReference)
	require.Equal(t, refundResponse{MerchantAccount: merchantAccount, PaymentPSPReference: pspReference,
		PSPReference: answer.PSPReference, Reference: reference, Status: "received",
		Amount: amountObject{Currency: "EUR", Value: amount}}, answer)
	return answer
}

// faultsFired returns how often each fault fired.
func (b *adyenBundle) faultsFired(t *testing.T) map[string]int {
	t.Helper()

	state, err := fakepsp.FetchFaults(t.Context(), b.url)
	require.NoError(t, err)
	return state.Fired
}

// ledgerReferences returns the references of every charge in the ledger,
// declines included, in order.
func (b *adyenBundle) ledgerReferences(t *testing.T) []string {
	t.Helper()

	var references []string
	for _, entry := range b.ledger(t, true) {
		references = append(references, entry.Reference)
	}
	return slices.Clip(references)
}

// race sends n requests at once through a client without a timeout, the
// ith to the path, under the key and with the body request(i) gives, and
// counts their answers by status, 0 for none.
func (b *adyenBundle) race(t *testing.T, n int, request func(i int) (path, key string, body any)) map[int]int {
	t.Helper()

	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path, key, body := request(i)
			resp, err := b.send(t, b.client(0), path, key, body, nil)
			if err != nil {
				statuses <- 0
				return
			}
			statuses <- resp.status
		})
	}
	wg.Wait()
	close(statuses)
	counts := make(map[int]int)
	for status := range statuses {
		counts[status]++
	}
	return counts
}
