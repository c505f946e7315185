package api

import (
	"crypto/sha256"
	"errors"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// LimitAuthFailures slows key guessing: it counts the /v1 requests that
// authentication refuses (401) per client address, and once an address has
// used up Config.AuthFailureLimit failures (a token bucket refilled at that
// many a minute) it answers 429 too_many_auth_failures with Retry-After
// before looking at the key at all.
//
// A refused address is refused for every key this process has not verified
// in the last AuthCacheTTL: verifying a new key while refusing wrong ones
// would answer the one question guessing asks, only with 429 for "no". Keys
// it verified recently (the authenticator's cache holds only keys that
// verified, so this reveals nothing) pass, so a merchant already at work
// behind the same address (a NAT, a proxy) goes on. Successful
// authentications never count. docs/api.md, "Authentication and rate
// limits".
func (s *Server) LimitAuthFailures(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		addr := clientAddress(c.Request())
		if wait, blocked := s.authFailures.blocked(addr, s.cfg.Now()); blocked {
			apiKey, ok := bearerToken(c.Request().Header.Values("Authorization"))
			if !ok || !s.auth.verifiedRecently(apiKey) {
				p := NewProblem(CodeTooManyAuthFailures, "too many failed authentications from this address; nothing was looked at or stored")
				p.RetryAfter = max(1, int(math.Ceil(wait.Seconds())))
				return p
			}
		}
		err := next(c)
		if p := (*Problem)(nil); errors.As(err, &p) && p.Code == CodeUnauthorized {
			s.authFailures.fail(addr, s.cfg.Now())
		}
		return err
	}
}

// clientAddress is who a request came from, for counting its failures: the
// connection's peer, never a header such as X-Forwarded-For, which the
// client writes itself. IPv6 addresses count by their /64, the block one
// host is usually given, so that a host cannot step around the limit by
// changing its address.
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// authFailureLimiter is a token bucket of failures per client address, in
// this process.
type authFailureLimiter struct {
	perMinute int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	// sincePrune counts new buckets since full ones were last dropped.
	sincePrune int
}

// pruneEvery is how many new addresses are let in between two sweeps for
// buckets that have refilled (addresses with no recent failure), so that a
// stream of addresses cannot grow the map without bound.
const pruneEvery = 1024

func newAuthFailureLimiter(perMinute int) *authFailureLimiter {
	return &authFailureLimiter{perMinute: perMinute, buckets: map[string]*rate.Limiter{}}
}

// blocked reports whether addr has used up its failures, and how long until
// it has one again.
func (l *authFailureLimiter) blocked(addr string, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[addr]
	if !ok {
		return 0, false
	}
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(b.Limit()) * float64(time.Second)), true
}

// fail takes one failure from addr's bucket.
func (l *authFailureLimiter) fail(addr string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[addr]
	if !ok {
		if l.sincePrune++; l.sincePrune >= pruneEvery {
			l.sincePrune = 0
			for a, other := range l.buckets {
				if other.TokensAt(now) >= float64(other.Burst()) {
					delete(l.buckets, a)
				}
			}
		}
		b = rate.NewLimiter(rate.Limit(float64(l.perMinute)/60), l.perMinute)
		l.buckets[addr] = b
	}
	b.AllowN(now, 1)
}

// verifiedRecently reports whether apiKey verified within the cache's TTL.
// It never asks the database.
func (a *authenticator) verifiedRecently(apiKey string) bool {
	sum := sha256.Sum256([]byte(apiKey))
	a.mu.Lock()
	defer a.mu.Unlock()
	cached, ok := a.verified[sum]
	return ok && time.Now().Before(cached.expires)
}
