package adyen

import (
	"fmt"
	"net/http"
)

// The answers the tests' servers give, each in the shape Adyen's
// description of Checkout v71 gives it; TestAnswersAreAdyens validates
// every one the description covers (checkoutspec.Spec.ValidateResponse),
// so the adapter is tested against answers Adyen could really give.

const (
	// testPSP is the payment's pspReference in the answers, testRefundPSP
	// a refund's, testCapturePSP a capture's and testCancelPSP a cancel's.
	testPSP        = "8816118280275544"
	testRefundPSP  = "993617894906488A"
	testCapturePSP = "993617894906501C"
	testCancelPSP  = "993617894906502D"
)

// paymentJSON is a PaymentResponse of result code result for our charge
// ch_1 of 10.00 EUR; extra is spliced in as more properties.
func paymentJSON(result, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"pspReference":%q,"resultCode":%q,"merchantReference":"ch_1","amount":{"currency":"EUR","value":1000}%s}`,
		testPSP, result, extra)
}

// refusedJSON is a Refused PaymentResponse with the refusal code and
// Adyen's text for it; the text carries a canary, which no error may
// quote.
func refusedJSON(result, code, text string) string {
	return paymentJSON(result, fmt.Sprintf(`"refusalReasonCode":%q,"refusalReason":%q`, code, text+" pm_canary"))
}

// errorJSON is Adyen's ServiceError; its message carries a canary.
func errorJSON(status int, code, typ string) string {
	return fmt.Sprintf(`{"status":%d,"errorCode":%q,"message":"Adyen's message, quoting pm_canary","errorType":%q,"pspReference":"8516091485743033"}`,
		status, code, typ)
}

// An answer a test server gives: its status and body, and whether the
// description covers its status for the route (it lists no 409 or 429, and
// a proxy's page is not Adyen's).
type answer struct {
	status int
	body   string
	inSpec bool
}

var (
	answerAuthorised     = answer{http.StatusOK, paymentJSON("Authorised", `"additionalData":{"authCode":"044925"}`), true}
	answerRefused        = answer{http.StatusOK, refusedJSON("Refused", "12", "Not enough balance"), true}
	answerRefusedOther   = answer{http.StatusOK, refusedJSON("Refused", "20", "FRAUD"), true}
	answerCancelled      = answer{http.StatusOK, refusedJSON("Cancelled", "15", "Cancelled"), true}
	answerError          = answer{http.StatusOK, refusedJSON("Error", "4", "Acquirer Error"), true}
	answerPending        = answer{http.StatusOK, fmt.Sprintf(`{"pspReference":%q,"resultCode":"Pending","merchantReference":"ch_1"}`, testPSP), true}
	answerReceived       = answer{http.StatusOK, fmt.Sprintf(`{"pspReference":%q,"resultCode":"Received","merchantReference":"ch_1"}`, testPSP), true}
	answerChallenge      = answer{http.StatusOK, fmt.Sprintf(`{"pspReference":%q,"resultCode":"ChallengeShopper","merchantReference":"ch_1"}`, testPSP), true}
	answerNoAmount       = answer{http.StatusOK, fmt.Sprintf(`{"pspReference":%q,"resultCode":"Authorised","merchantReference":"ch_1"}`, testPSP), true}
	answer400            = answer{http.StatusBadRequest, errorJSON(400, "702", "validation"), true}
	answer401            = answer{http.StatusUnauthorized, errorJSON(401, "000", "security"), true}
	answer403            = answer{http.StatusForbidden, errorJSON(403, "901", "security"), true}
	answer422Validation  = answer{http.StatusUnprocessableEntity, errorJSON(422, "14_030", "validation"), true}
	answer422InProgress  = answer{http.StatusUnprocessableEntity, errorJSON(422, "704", "validation"), true}
	answer422Other       = answer{http.StatusUnprocessableEntity, errorJSON(422, "905_1", "configuration"), true}
	answer409InProgress  = answer{http.StatusConflict, errorJSON(409, "704", "validation"), false}
	answer429            = answer{http.StatusTooManyRequests, errorJSON(429, "100", "validation"), false}
	answer500            = answer{http.StatusInternalServerError, errorJSON(500, "905", "configuration"), true}
	answer502Proxy       = answer{http.StatusBadGateway, "<html>bad gateway</html>", false}
	answerRefundReceived = answer{http.StatusCreated, fmt.Sprintf(`{"merchantAccount":"ChargeflowTest","paymentPspReference":%q,`+
		`"reference":"re_1","pspReference":%q,"status":"received","amount":{"currency":"EUR","value":400}}`, testPSP, testRefundPSP), true}
	answerCaptureReceived = answer{http.StatusCreated, fmt.Sprintf(`{"merchantAccount":"ChargeflowTest","paymentPspReference":%q,`+
		`"reference":"cp_1","pspReference":%q,"status":"received","amount":{"currency":"EUR","value":600}}`, testPSP, testCapturePSP), true}
	answerCancelReceived = answer{http.StatusCreated, fmt.Sprintf(`{"merchantAccount":"ChargeflowTest","paymentPspReference":%q,`+
		`"reference":"cx_1","pspReference":%q,"status":"received"}`, testPSP, testCancelPSP), true}
)

// paymentAnswers, refundAnswers, captureAnswers and cancelAnswers are
// every answer above, by the call it answers, for TestAnswersAreAdyens.
var (
	paymentAnswers = []answer{answerAuthorised, answerRefused, answerRefusedOther, answerCancelled, answerError,
		answerPending, answerReceived, answerChallenge, answerNoAmount,
		answer400, answer401, answer403, answer422Validation, answer422InProgress, answer422Other,
		answer409InProgress, answer429, answer500, answer502Proxy}
	refundAnswers = []answer{answerRefundReceived, answer400, answer401, answer403, answer422Validation,
		answer422InProgress, answer422Other, answer500}
	captureAnswers = []answer{answerCaptureReceived, answer400, answer401, answer403, answer422Validation,
		answer422InProgress, answer422Other, answer500}
	cancelAnswers = []answer{answerCancelReceived, answer400, answer401, answer403, answer422Validation,
		answer422InProgress, answer422Other, answer500}
)
