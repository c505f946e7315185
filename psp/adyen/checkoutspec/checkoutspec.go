// Package checkoutspec holds Adyen's published OpenAPI description of the
// Checkout API v71, and checks requests and answers against it with
// kin-openapi, for tests: the Adyen adapter's every request shape, and every
// answer the fake provider gives in Adyen's protocol (docs/provider.md,
// "Adyen's description in the tests").
//
// The description is the file Adyen publishes in its repository
// Adyen/adyen-openapi, json/CheckoutService-v71.json, MIT-licensed (LICENSE
// beside it), kept here unchanged so that a checkout anywhere has it with
// no download: SHA256 pins it, and Load fails, naming the file and how to
// restore it, when it is missing or differs.
package checkoutspec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// File is the description's name in this package's folder.
const File = "CheckoutService-v71.json"

// SHA256 is the description's digest: the file at commit
// 74fabab0628019206b77c4823776b726345a035d of Adyen/adyen-openapi (git blob
// 555f1bbdc6dc33d8f7af5d54a0a2e223fb5430f9).
const SHA256 = "9e426ae2bf007b148c393c5f163bbb0abe54959172b4d85676aedbd178b2b0b0"

// Upstream is where the description is published, at the pinned commit.
const Upstream = "https://github.com/Adyen/adyen-openapi/blob/74fabab0628019206b77c4823776b726345a035d/json/CheckoutService-v71.json"

// host is the origin requests are matched under: the description's server
// is Adyen's test endpoint, and a test's request goes to a loopback server,
// so Validate matches every request by its path and method only.
const host = "http://checkout.adyen.test"

// Path is the description's path on this machine.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), File)
}

// Spec is the loaded description, ready to check requests and answers.
type Spec struct {
	Doc    *openapi3.T
	router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Spec
	loadErr  error
)

// Load reads and checks the description once per process. Its error says
// plainly what is missing and how to get it.
func Load() (*Spec, error) {
	loadOnce.Do(func() { loaded, loadErr = load(Path()) })
	return loaded, loadErr
}

func load(path string) (*Spec, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("adyen's checkout v71 description is missing at %s: restore it from git, or download %s there", path, Upstream)
	}
	if err != nil {
		return nil, fmt.Errorf("read adyen's checkout v71 description: %w", err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != SHA256 {
		return nil, fmt.Errorf("%s is not the pinned description (sha256 %x, want %s): restore it from git, or download %s", path, sum, SHA256, Upstream)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load adyen's checkout v71 description: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("adyen's checkout v71 description does not validate: %w", err)
	}
	doc.Servers = openapi3.Servers{{URL: host + "/v71"}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route adyen's checkout v71 description: %w", err)
	}
	return &Spec{Doc: doc, router: router}, nil
}

// Exchange is one request and, when it was answered, the answer, as a test
// recorded them. Paths are the API's own: "/v71/payments", wherever the
// server was.
type Exchange struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte

	// Status is zero for a request checked on its own.
	Status         int
	ResponseHeader http.Header
	ResponseBody   []byte
}

// ValidateRequest checks a request against the description: its route,
// parameters, headers and body (the description's security schemes are
// taken as met: the tests check authentication themselves).
func (s *Spec) ValidateRequest(e Exchange) error {
	in, err := s.input(e)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// ValidateResponse checks an answer against the description of its
// request's route and status: its content type and body.
func (s *Spec) ValidateResponse(e Exchange) error {
	in, err := s.input(e)
	if err != nil {
		return err
	}
	header := e.ResponseHeader
	if header == nil {
		header = http.Header{}
	}
	return openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 e.Status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(e.ResponseBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	})
}

// input finds e's route in the description.
func (s *Spec) input(e Exchange) (*openapi3filter.RequestValidationInput, error) {
	path, query, _ := strings.Cut(e.Path, "?")
	u, err := url.Parse(host + path)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", e.Path, err)
	}
	u.RawQuery = query
	req, err := http.NewRequest(e.Method, u.String(), bytes.NewReader(e.Body))
	if err != nil {
		return nil, err
	}
	req.Header = e.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not in adyen's checkout v71 description: %w", e.Method, path, err)
	}
	return &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}, nil
}

// Recorder is an http.RoundTripper that records every exchange made
// through it, for a test to validate afterwards.
type Recorder struct {
	Next http.RoundTripper

	mu        sync.Mutex
	exchanges []Exchange
}

// RoundTrip records req and its answer (the status zero when none came).
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	e := Exchange{Method: req.Method, Path: req.URL.RequestURI(), Header: req.Header.Clone(), Body: body}
	next := r.Next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err == nil {
		answer, readErr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if readErr != nil {
			resp, err = nil, readErr
		} else {
			resp.Body = io.NopCloser(bytes.NewReader(answer))
			e.Status, e.ResponseHeader, e.ResponseBody = resp.StatusCode, resp.Header.Clone(), answer
		}
	}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, e)
	r.mu.Unlock()
	return resp, err
}

// Exchanges returns what was recorded so far.
func (r *Recorder) Exchanges() []Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Exchange(nil), r.exchanges...)
}
