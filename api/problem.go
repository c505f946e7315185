package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/accept"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// Code is the stable, machine-readable name of a problem. Clients branch on
// it; titles and details are for people and may change.
type Code string

// The problem codes. docs/api.md and api/openapi.yaml list them too, and a
// test keeps the three in step.
const (
	CodeBodyTooLarge                Code = "body_too_large"
	CodeCaptureExceedsAuthorization Code = "capture_exceeds_authorization"
	CodeCaptureNotSupported         Code = "capture_not_supported"
	CodeCardNumberDetected          Code = "card_number_detected"
	CodeChargeNotCapturable         Code = "charge_not_capturable"
	CodeChargeNotInReview           Code = "charge_not_in_review"
	CodeChargeNotRefundable         Code = "charge_not_refundable"
	CodeChargeNotUnknown            Code = "charge_not_unknown"
	CodeDatabaseUnavailable         Code = "database_unavailable"
	CodeDraining                    Code = "draining"
	CodeDuplicateMember             Code = "duplicate_member"
	CodeEndpointLimitReached        Code = "endpoint_limit_reached"
	CodeEvidenceMismatch            Code = "evidence_mismatch"
	CodeForbidden                   Code = "forbidden"
	CodeHeadersTooLarge             Code = "headers_too_large"
	CodeIdempotencyKeyInvalid       Code = "idempotency_key_invalid"
	CodeIdempotencyKeyMissing       Code = "idempotency_key_missing"
	CodeIdempotencyKeyReused        Code = "idempotency_key_reused"
	CodeIncompleteBody              Code = "incomplete_body"
	CodeInternal                    Code = "internal_error"
	CodeInvalidField                Code = "invalid_field"
	CodeInvalidJSON                 Code = "invalid_json"
	CodeInvalidParameter            Code = "invalid_parameter"
	CodeInvalidSignature            Code = "invalid_signature"
	CodeInvalidUTF8                 Code = "invalid_utf8"
	CodeKeyWindowPassed             Code = "key_window_passed"
	CodeMethodNotAllowed            Code = "method_not_allowed"
	CodeMissingField                Code = "missing_field"
	CodeNoRoute                     Code = "no_route"
	CodeNotFound                    Code = "not_found"
	CodeNotReady                    Code = "not_ready"
	CodeOperationInProgress         Code = "operation_in_progress"
	CodeProviderUnavailable         Code = "provider_unavailable"
	CodeRateLimited                 Code = "rate_limited"
	CodeReconcileTooSoon            Code = "reconcile_too_soon"
	CodeRefundExceedsCharge         Code = "refund_exceeds_charge"
	CodeRequestInProgress           Code = "request_in_progress"
	CodeTooManyAuthFailures         Code = "too_many_auth_failures"
	CodeUnauthorized                Code = "unauthorized"
	CodeUnknownField                Code = "unknown_field"
	CodeUnsupportedEncoding         Code = "unsupported_content_encoding"
	CodeUnsupportedMediaType        Code = "unsupported_media_type"
)

// codeInfo is the one table that maps a code to its HTTP status and title.
var codeInfo = map[Code]struct {
	status int
	title  string
}{
	CodeBodyTooLarge:                {http.StatusRequestEntityTooLarge, "Request body too large"},
	CodeCaptureExceedsAuthorization: {http.StatusUnprocessableEntity, "Capture exceeds the authorization"},
	CodeCaptureNotSupported:         {http.StatusUnprocessableEntity, "Provider cannot capture later"},
	CodeCardNumberDetected:          {http.StatusBadRequest, "Raw card number in request"},
	CodeChargeNotCapturable:         {http.StatusConflict, "Charge is not held for capture"},
	CodeChargeNotInReview:           {http.StatusConflict, "Charge is not in needs_review"},
	CodeChargeNotRefundable:         {http.StatusConflict, "Charge cannot be refunded"},
	CodeChargeNotUnknown:            {http.StatusConflict, "Charge is not unknown"},
	CodeDatabaseUnavailable:         {http.StatusServiceUnavailable, "Database unavailable"},
	CodeDraining:                    {http.StatusServiceUnavailable, "Shutting down"},
	CodeDuplicateMember:             {http.StatusBadRequest, "Duplicate JSON member"},
	CodeEndpointLimitReached:        {http.StatusConflict, "Webhook endpoint limit reached"},
	CodeEvidenceMismatch:            {http.StatusConflict, "The provider's records contradict the resolution"},
	CodeForbidden:                   {http.StatusForbidden, "Forbidden"},
	CodeHeadersTooLarge:             {http.StatusRequestHeaderFieldsTooLarge, "Request header fields too large"},
	CodeIdempotencyKeyInvalid:       {http.StatusBadRequest, "Invalid Idempotency-Key"},
	CodeIdempotencyKeyMissing:       {http.StatusBadRequest, "Missing Idempotency-Key"},
	CodeIdempotencyKeyReused:        {http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request"},
	CodeIncompleteBody:              {http.StatusBadRequest, "Request body incomplete"},
	CodeInternal:                    {http.StatusInternalServerError, "Internal error"},
	CodeInvalidField:                {http.StatusBadRequest, "Invalid field"},
	CodeInvalidJSON:                 {http.StatusBadRequest, "Invalid JSON"},
	CodeInvalidParameter:            {http.StatusBadRequest, "Invalid query parameter"},
	CodeInvalidSignature:            {http.StatusBadRequest, "Notification refused"},
	CodeInvalidUTF8:                 {http.StatusBadRequest, "Invalid UTF-8"},
	CodeKeyWindowPassed:             {http.StatusConflict, "The provider's idempotency key window has passed"},
	CodeMethodNotAllowed:            {http.StatusMethodNotAllowed, "Method not allowed"},
	CodeMissingField:                {http.StatusBadRequest, "Missing field"},
	CodeNoRoute:                     {http.StatusUnprocessableEntity, "No provider account takes the charge"},
	CodeNotFound:                    {http.StatusNotFound, "Not found"},
	CodeNotReady:                    {http.StatusServiceUnavailable, "Not ready"},
	CodeOperationInProgress:         {http.StatusConflict, "Another capture or cancel is in flight"},
	CodeProviderUnavailable:         {http.StatusServiceUnavailable, "Provider unavailable"},
	CodeRateLimited:                 {http.StatusTooManyRequests, "Rate limit exceeded"},
	CodeReconcileTooSoon:            {http.StatusTooManyRequests, "Looked up too recently"},
	CodeRefundExceedsCharge:         {http.StatusConflict, "Refunds would exceed the charge"},
	CodeRequestInProgress:           {http.StatusConflict, "Request in progress"},
	CodeTooManyAuthFailures:         {http.StatusTooManyRequests, "Too many failed authentications"},
	CodeUnauthorized:                {http.StatusUnauthorized, "Unauthorized"},
	CodeUnknownField:                {http.StatusBadRequest, "Unknown field"},
	CodeUnsupportedEncoding:         {http.StatusUnsupportedMediaType, "Unsupported content encoding"},
	CodeUnsupportedMediaType:        {http.StatusUnsupportedMediaType, "Unsupported media type"},
}

// Codes lists every problem code.
func Codes() []Code {
	codes := make([]Code, 0, len(codeInfo))
	for c := range codeInfo {
		codes = append(codes, c)
	}
	return codes
}

// Problem is an RFC 9457 problem document, and the one error type handlers
// return for anything the client should see.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   Code   `json:"code"`
	Detail string `json:"detail,omitempty"`
	// Field names the offending body member or query parameter, as a path
	// such as "metadata.order".
	Field string `json:"field,omitempty"`

	// RetryAfter, in seconds, is sent as the Retry-After header when > 0.
	RetryAfter int `json:"-"`
	// Cause is the underlying error, logged but never sent.
	Cause error `json:"-"`
}

func (p *Problem) Error() string {
	if p.Detail != "" {
		return string(p.Code) + ": " + p.Detail
	}
	return string(p.Code)
}

// Unwrap returns the underlying cause, for logs and errors.Is.
func (p *Problem) Unwrap() error { return p.Cause }

// NewProblem builds a Problem for a code.
func NewProblem(code Code, detail string) *Problem {
	info, ok := codeInfo[code]
	if !ok {
		info = codeInfo[CodeInternal]
		code = CodeInternal
	}
	return &Problem{
		Type:   "https://chargeflow.dev/problems/" + string(code),
		Title:  info.title,
		Status: info.status,
		Code:   code,
		Detail: detail,
	}
}

// FieldProblem builds a Problem for a code that names the offending body
// member or query parameter.
func FieldProblem(code Code, field, detail string) *Problem {
	p := NewProblem(code, detail)
	p.Field = field
	return p
}

// ProblemFor maps any error a handler returns to the problem the client
// gets. It is the only place errors become HTTP statuses.
func ProblemFor(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return NewProblem(CodeNotFound, "no such route")
		case http.StatusMethodNotAllowed:
			return NewProblem(CodeMethodNotAllowed, "")
		case http.StatusRequestEntityTooLarge:
			return NewProblem(CodeBodyTooLarge, "")
		}
	}
	switch {
	case errors.Is(err, intent.ErrNotFound):
		return NewProblem(CodeNotFound, "no such charge")
	case errors.Is(err, accept.ErrBusy):
		p := NewProblem(CodeDatabaseUnavailable, "the database was too busy to take this request in time; nothing was stored, retry with the same Idempotency-Key")
		p.RetryAfter = 1
		p.Cause = err
		return p
	case lockTimeout(err):
		p := NewProblem(CodeRequestInProgress, "a request with this Idempotency-Key is still being processed; retry shortly")
		p.RetryAfter = 1
		p.Cause = err
		return p
	case errors.Is(err, pg.ErrCommitUnconfirmed):
		p := NewProblem(CodeDatabaseUnavailable, "the database stored this request, but its standby did not confirm it, so a failover may lose it. "+
			"Retry with the same Idempotency-Key: the stored answer is returned once the standby has it, and the request is stored again if it was lost")
		p.RetryAfter = 1
		p.Cause = err
		return p
	case errors.Is(err, intent.ErrOutcomeUnknown):
		p := NewProblem(CodeDatabaseUnavailable, "the database did not answer in time: whether this request was stored is unknown. "+
			"Retry with the same Idempotency-Key: it returns the stored answer if it was, and stores it if it was not")
		p.RetryAfter = 1
		p.Cause = err
		return p
	case databaseUnavailable(err):
		p := NewProblem(CodeDatabaseUnavailable, "the database is unavailable; nothing was stored, retry with the same Idempotency-Key")
		p.RetryAfter = 1
		p.Cause = err
		return p
	}
	p = NewProblem(CodeInternal, "")
	p.Cause = err
	return p
}

// lockTimeout reports whether a statement gave up waiting for a lock: for
// the accept path, another transaction still holds the same idempotency key.
func lockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// databaseUnavailable reports whether err means Postgres could not be reached
// or could not serve the request (rather than refusing it). Nothing was
// stored, or the commit's outcome is unknown; either way the client's retry
// with the same key is safe.
func databaseUnavailable(err error) bool {
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			pgErr.Code == "57P01", // admin_shutdown
			pgErr.Code == "57P02", // crash_shutdown
			pgErr.Code == "57P03", // cannot_connect_now
			pgErr.Code == "53300", // too_many_connections
			pgErr.Code == "57014", // query_canceled (our statement timeout)
			pgErr.Code == "55000": // database does not allow connections
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}

// writeProblem sends p as application/problem+json. The field and detail
// can carry parts of the request (a member name, a parameter name, a JSON
// path), so card numbers are cut out of them here, for every problem.
func writeProblem(c echo.Context, p *Problem) error {
	p.Field, p.Detail = redactCardNumbers(p.Field), redactCardNumbers(p.Detail)
	h := c.Response().Header()
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="github.com/chargeflow/chargeflow"`)
	}
	body, err := encodeJSON(p)
	if err != nil {
		return err
	}
	return c.Blob(p.Status, "application/problem+json", body)
}
