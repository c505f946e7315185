package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/chargeflow/chargeflow/tenant"
)

const tenantKey = "chargeflow.tenant"

// authenticate is the middleware for every /v1 route: a valid bearer key,
// then the tenant's rate limit. Both refusals store nothing.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		t, err := Bearer(s, c, "API key", s.auth.authenticate, tenant.ErrUnauthenticated)
		if err != nil {
			return err
		}
		c.Set(logTenantKey, t.ID) // before the limit: its 429s name the tenant too
		if wait, ok := s.limiter.allow(t, s.cfg.Now()); !ok {
			p := NewProblem(CodeRateLimited, "this tenant is over its request rate; nothing was stored")
			p.RetryAfter = int(math.Ceil(wait.Seconds()))
			return p
		}
		c.Set(tenantKey, t)
		return next(c)
	}
}

// Bearer verifies a request's bearer credential (what names it in the
// answer): a missing one, or one verify refuses with refused, is 401 and
// says what to send; any other error is the caller's.
func Bearer[T any](s *Server, c echo.Context, what string, verify func(context.Context, string) (T, error), refused error) (T, error) {
	credential, ok := bearerToken(c.Request().Header.Values("Authorization"))
	if !ok {
		var zero T
		return zero, NewProblem(CodeUnauthorized, "send Authorization: Bearer <"+what+">")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	v, err := verify(ctx, credential)
	if errors.Is(err, refused) {
		return v, NewProblem(CodeUnauthorized, "the "+what+" is not valid")
	}
	return v, err
}

// tenantOf returns the tenant authenticate put on the request.
func tenantOf(c echo.Context) tenant.Tenant {
	t, _ := c.Get(tenantKey).(tenant.Tenant)
	return t
}

// bearerToken extracts the key from exactly one Authorization header.
func bearerToken(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticator verifies API keys and remembers verified ones for a short
// while, so that the accept path does not pay a database round trip for
// authentication. Only keys that verified are cached, by their sha256, so
// guessing cannot fill the cache.
type authenticator struct {
	db  tenant.DB
	ttl time.Duration

	mu       sync.Mutex
	verified map[[32]byte]cachedTenant
}

type cachedTenant struct {
	tenant  tenant.Tenant
	expires time.Time
}

func newAuthenticator(db tenant.DB, ttl time.Duration) *authenticator {
	return &authenticator{db: db, ttl: ttl, verified: map[[32]byte]cachedTenant{}}
}

func (a *authenticator) authenticate(ctx context.Context, apiKey string) (tenant.Tenant, error) {
	sum := sha256.Sum256([]byte(apiKey))
	now := time.Now()
	a.mu.Lock()
	cached, ok := a.verified[sum]
	a.mu.Unlock()
	if ok && now.Before(cached.expires) {
		return cached.tenant, nil
	}
	t, err := tenant.Authenticate(ctx, a.db, apiKey)
	if err != nil {
		return tenant.Tenant{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, v := range a.verified { // keep the map small: drop what expired
		if now.After(v.expires) {
			delete(a.verified, k)
		}
	}
	a.verified[sum] = cachedTenant{tenant: t, expires: now.Add(a.ttl)}
	return t, nil
}

// tenantLimiter is a token bucket per tenant, in this process.
type tenantLimiter struct {
	rate  float64
	burst int

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

func newTenantLimiter(perSecond float64, burst int) *tenantLimiter {
	return &tenantLimiter{rate: perSecond, burst: burst, limiters: map[string]*rate.Limiter{}}
}

// allow takes a token for the tenant, or says how long until one is free.
func (l *tenantLimiter) allow(t tenant.Tenant, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	lim, ok := l.limiters[t.ID]
	if !ok {
		perSecond, burst := l.rate, l.burst
		if t.RateLimit > 0 {
			perSecond, burst = float64(t.RateLimit), 2*t.RateLimit
		}
		lim = rate.NewLimiter(rate.Limit(perSecond), burst)
		l.limiters[t.ID] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, false
	}
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return max(wait, time.Second), false
	}
	return 0, true
}
