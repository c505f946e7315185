package api

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// MaxHeaderBytes is the most a request's line and headers may take before
// the API refuses it with 431 headers_too_large, as problem+json. The HTTP
// server's own limit (http.Server.MaxHeaderBytes, which the command sets
// to 1 MiB) must be higher: past it net/http answers 431 itself, in plain
// text, before any handler runs (docs/api.md, "Protocol").
const MaxHeaderBytes = 32 << 10

// protocol is the middleware that holds every request to HTTP's manners
// before any route sees it, so that each refusal is a problem+json like
// every other answer, and is logged and counted as one:
//
//   - request line and headers over MaxHeaderBytes: 431;
//   - a method the path does not serve: 405 with Allow (before
//     authentication: the route list is public, openapi.yaml);
//   - a Content-Encoding other than identity: 415 with Accept-Encoding:
//     identity, as the API decodes none (a compressed body read as it came
//     would be refused for its bytes, or worse, taken for what they spell);
//   - a panic below: 500 internal_error rather than a dropped connection.
func (s *Server) protocol(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				// The cause is logged (through redactLogs), never sent.
				p := NewProblem(CodeInternal, "")
				p.Cause = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
				err = p
			}
		}()
		r := c.Request()
		if headerBytes(r) > MaxHeaderBytes {
			return NewProblem(CodeHeadersTooLarge, fmt.Sprintf("the request line and headers may take at most %d bytes", MaxHeaderBytes))
		}
		if !s.served[r.Method+" "+c.Path()] {
			if allow := s.allowedMethods(r.URL.Path); len(allow) > 0 {
				c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
				return NewProblem(CodeMethodNotAllowed, "this path serves "+strings.Join(allow, ", ")+" only")
			}
		}
		if !identityOnly(r.Header.Values("Content-Encoding")) {
			c.Response().Header().Set("Accept-Encoding", "identity")
			return NewProblem(CodeUnsupportedEncoding, "the API decodes no content coding: send the body as it is, without Content-Encoding")
		}
		return next(c)
	}
}

// identityOnly reports whether the Content-Encoding values name no coding
// but identity (RFC 9110, 8.4.1): none at all, or identity however often
// and in whatever case.
func identityOnly(values []string) bool {
	for _, v := range values {
		for coding := range strings.SplitSeq(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				return false
			}
		}
	}
	return true
}

// headerBytes counts a request's line and headers as they came on the wire,
// near enough: names, values and separators.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	n += len("Host: ") + len(r.Host) + 2
	for name, values := range r.Header {
		for _, v := range values {
			n += len(name) + 2 + len(v) + 2
		}
	}
	return n
}

// indexRoutes records the routes New registered: which "METHOD template"
// pairs are served, and each template's methods, for 405's Allow.
func (s *Server) indexRoutes() {
	s.served = map[string]bool{}
	s.methods = map[string][]string{}
	for _, r := range s.echo.Routes() {
		if strings.HasPrefix(r.Method, "echo_") {
			continue // Echo's own not-found catch-alls for groups
		}
		s.served[r.Method+" "+r.Path] = true
		if !slices.Contains(s.methods[r.Path], r.Method) {
			s.methods[r.Path] = append(s.methods[r.Path], r.Method)
		}
	}
	for _, methods := range s.methods {
		slices.Sort(methods)
	}
}

// allowedMethods is the sorted methods of the route templates path
// matches; none if it matches no route.
func (s *Server) allowedMethods(path string) []string {
	var allow []string
	for template, methods := range s.methods {
		if matchTemplate(template, path) {
			for _, m := range methods {
				if !slices.Contains(allow, m) {
					allow = append(allow, m)
				}
			}
		}
	}
	slices.Sort(allow)
	return allow
}

// matchTemplate reports whether path fits an Echo route template, where a
// ":name" segment matches any non-empty segment.
func matchTemplate(template, path string) bool {
	for template != "" || path != "" {
		var t, p string
		var tok, pok bool
		t, template, tok = strings.Cut(template, "/")
		p, path, pok = strings.Cut(path, "/")
		if tok != pok {
			return false
		}
		if strings.HasPrefix(t, ":") {
			if p == "" {
				return false
			}
			continue
		}
		if t != p {
			return false
		}
	}
	return true
}
