package opsplane

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/operator"
)

// Signing in to the operator's page (docs/architecture.md, "Operators"):
// the operator's token is presented once, to POST /ops/sign-in, and the
// browser then carries a session id in a cookie that only /ops/ receives
// (HttpOnly, SameSite=Strict, Secure over TLS). Sessions live in Postgres
// (operator.StartSession), so every API process knows every session. The
// JSON API never reads the cookie: /ops/v1 takes bearer tokens only, so a
// browser's ambient credentials cannot reach it.
//
// Every form carries a CSRF token, HMAC-SHA256 keyed by the session id:
// only a page served to that session can know it, and it needs neither a
// column nor a key shared between processes.

const (
	// sessionCookieName is the cookie that carries the session id.
	sessionCookieName = "chargeflow_ops"
	// sessionKey is where signedIn leaves the session on the request.
	sessionKey = "chargeflow.session"
	// formKey is where readForm leaves the parsed form.
	formKey = "chargeflow.form"

	signInPath = "/ops/sign-in"
)

// pageSignInForm shows the sign-in form.
func (p *Plane) pageSignInForm(c echo.Context) error {
	return p.renderSignIn(c, http.StatusOK, "")
}

func (p *Plane) renderSignIn(c echo.Context, status int, message string) error {
	return p.render(c, status, "sign-in", struct {
		pageBase
		Error string
	}{p.pageBase(c, "Sign in"), message})
}

// pageSignIn checks an operator token with operator.Authenticate and starts
// a session. A token that is not an operator's — a merchant's API key, a
// revoked operator's, a typo — is 401 with the form again and no cookie.
// The token is never logged, whether it worked or not.
func (p *Plane) pageSignIn(c echo.Context) error {
	form, err := readForm(c, p.api.MaxBodyBytes())
	if err != nil {
		return err
	}
	// Failed sign-ins count against the address as failed bearer
	// authentications do (api.Server.AuthFailureWait), so tokens cannot be
	// guessed here faster than on the API.
	if wait, blocked := p.api.AuthFailureWait(c.Request()); blocked {
		pr := api.NewProblem(api.CodeTooManyAuthFailures, "")
		pr.RetryAfter = max(1, int(math.Ceil(wait.Seconds())))
		api.LogProblem(c, pr)
		c.Response().Header().Set("Retry-After", strconv.Itoa(pr.RetryAfter))
		return p.renderSignIn(c, http.StatusTooManyRequests,
			fmt.Sprintf("Too many failed sign-ins from this address; try again in %d seconds.", pr.RetryAfter))
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	op, err := operator.Authenticate(ctx, p.cfg.DB, strings.TrimSpace(form.Get("token")))
	if errors.Is(err, operator.ErrUnauthenticated) {
		p.api.AuthFailed(c.Request())
		api.LogProblem(c, api.NewProblem(api.CodeUnauthorized, ""))
		return p.renderSignIn(c, http.StatusUnauthorized,
			"That is not a valid operator token. Operator tokens start with cfo_; a merchant's API key does not sign in here.")
	}
	if err != nil {
		return err
	}
	api.LogOperator(c, op.ID)
	session, err := operator.StartSession(ctx, p.cfg.DB, op, p.cfg.SessionTTL)
	if err != nil {
		return err
	}
	c.SetCookie(p.sessionCookie(c, session.ID, session.ExpiresAt))
	return c.Redirect(http.StatusSeeOther, "/ops/")
}

// pageSignOut ends the session everywhere and clears the cookie.
func (p *Plane) pageSignOut(c echo.Context) error {
	session, _ := sessionOf(c)
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	if err := operator.EndSession(ctx, p.cfg.DB, session.ID); err != nil {
		return err
	}
	c.SetCookie(p.sessionCookie(c, "", time.Time{}))
	return c.Redirect(http.StatusSeeOther, signInPath)
}

// sessionCookie is the session's cookie, or with no value the one that
// deletes it. Secure whenever the request came over TLS, and always with
// Config.SecureCookie (TLS ending at a proxy in front of the API).
func (p *Plane) sessionCookie(c echo.Context, value string, expires time.Time) *http.Cookie {
	cookie := &http.Cookie{
		Name: sessionCookieName, Value: value, Path: "/ops/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: p.cfg.SecureCookie || c.Request().TLS != nil,
	}
	if value == "" {
		cookie.MaxAge = -1
		return cookie
	}
	cookie.Expires = expires
	cookie.MaxAge = max(1, int(time.Until(expires).Seconds()))
	return cookie
}

// signedIn is the middleware of every page but the sign-in form: a live
// session, whose operator is then the request's as if it had sent the
// token. Without one a GET goes to the sign-in form and anything else is
// 401.
func (p *Plane) signedIn(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		var session operator.Session
		cookie, err := c.Cookie(sessionCookieName)
		if err == nil {
			ctx, cancel := p.api.DBContext(c)
			session, err = operator.FindSession(ctx, p.cfg.DB, cookie.Value)
			cancel()
		}
		if errors.Is(err, http.ErrNoCookie) || errors.Is(err, operator.ErrUnauthenticated) {
			switch c.Request().Method {
			case http.MethodGet, http.MethodHead:
				return c.Redirect(http.StatusSeeOther, signInPath)
			}
			return api.NewProblem(api.CodeUnauthorized, "sign in at "+signInPath+" first")
		}
		if err != nil {
			return err
		}
		c.Set(sessionKey, session)
		c.Set(operatorKey, session.Operator)
		api.LogOperator(c, session.Operator.ID)
		return next(c)
	}
}

// sessionOf returns the session signedIn put on the request.
func sessionOf(c echo.Context) (operator.Session, bool) {
	session, ok := c.Get(sessionKey).(operator.Session)
	return session, ok
}

// csrfToken is the CSRF token of a session's forms.
func csrfToken(sessionID string) string {
	mac := hmac.New(sha256.New, []byte(sessionID))
	mac.Write([]byte("chargeflow ops csrf v1"))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// checkCSRF refuses a form whose csrf field is not the session's token:
// 403, nothing changed. It runs after signedIn.
func (p *Plane) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		form, err := readForm(c, p.api.MaxBodyBytes())
		if err != nil {
			return err
		}
		session, ok := sessionOf(c)
		got := form["csrf"]
		if !ok || len(got) != 1 || !hmac.Equal([]byte(got[0]), []byte(csrfToken(session.ID))) {
			return api.NewProblem(api.CodeForbidden, "this form's CSRF token is not your session's; reload the page and try again")
		}
		return next(c)
	}
}

// sameOrigin refuses a state-changing request that a browser says came
// from another origin (Sec-Fetch-Site, or Origin against Host), whatever
// it carries: the first line against cross-site forgery, before the CSRF
// token, and the only one for River's job UI, whose scripts cannot send
// our token.
func (p *Plane) sameOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := p.crossOrigin.Check(c.Request()); err != nil {
			return api.NewProblem(api.CodeForbidden, "a cross-origin request cannot change anything here")
		}
		return next(c)
	}
}

// readForm reads an application/x-www-form-urlencoded body of at most
// limit bytes, once per request.
func readForm(c echo.Context, limit int64) (url.Values, error) {
	if form, ok := c.Get(formKey).(url.Values); ok {
		return form, nil
	}
	mediaType, _, err := mime.ParseMediaType(c.Request().Header.Get("Content-Type"))
	if err != nil || mediaType != "application/x-www-form-urlencoded" {
		return nil, api.NewProblem(api.CodeUnsupportedMediaType, "send the page's form (application/x-www-form-urlencoded)")
	}
	body, err := api.ReadLimited(c, limit)
	if err != nil {
		return nil, err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, api.NewProblem(api.CodeInvalidField, "the form could not be read")
	}
	c.Set(formKey, form)
	return form, nil
}

// formOf returns the form checkCSRF read.
func formOf(c echo.Context) url.Values {
	form, _ := c.Get(formKey).(url.Values)
	return form
}
