package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The refusals of an endpoint URL, each with fixed wording: a merchant
// reads them (400 invalid_field), so they never quote a resolver, an
// address a name resolved to, or Go's error text, and a name that does not
// exist is refused in the same words as one that resolves to a private
// address (docs/webhooks.md, "Endpoints"). What caused one is logged, never
// answered (URLError.Unwrap).
var (
	ErrURLNotHTTP        = errors.New("the url must be an absolute http or https URL")
	ErrURLCredentials    = errors.New("the url must not carry credentials")
	ErrURLFragment       = errors.New("the url must not have a fragment or whitespace")
	ErrPortNotAllowed    = errors.New("the url's port is not one webhooks are delivered to")
	ErrAddressNotAllowed = errors.New("the url's address is not a public internet address")
	ErrHostNotAllowed    = errors.New("the url's host does not resolve to public internet addresses only")
)

// DefaultPorts are the ports deliveries go to unless an operator allows
// others (--webhook-ports): HTTP's, HTTPS's and the common alternative
// HTTPS port. Any other port is refused at creation and at connection, so
// endpoints cannot make deliveries into a probe of other services' ports.
var DefaultPorts = []uint16{80, 443, 8443}

// CheckPorts refuses a list of ports that is empty but not nil (nil is
// DefaultPorts), or names port 0.
func CheckPorts(ports []uint16) error {
	if ports != nil && len(ports) == 0 {
		return errors.New("webhook ports: the list is empty")
	}
	if slices.Contains(ports, 0) {
		return errors.New("webhook ports: 0 is not a port")
	}
	return nil
}

// Policy is which endpoint URLs are taken and which addresses deliveries
// may reach.
type Policy struct {
	// AllowPrivate lifts the address and port rules: for tests and a
	// laptop, whose receivers listen on loopback, on any port
	// (--webhooks-allow-private).
	AllowPrivate bool
	// Ports are the ports allowed; nil is DefaultPorts.
	Ports []uint16
}

func (p Policy) ports() []uint16 {
	if p.Ports == nil {
		return DefaultPorts
	}
	return p.Ports
}

// PortList spells ports as "80, 443 and 8443".
func PortList(ports []uint16) string {
	s := make([]string, len(ports))
	for i, port := range ports {
		s[i] = strconv.Itoa(int(port))
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// URLError is a refused URL: Error is the fixed wording a merchant may
// read (one of the Err variables above, or for a port, that and the ports
// allowed), Unwrap what caused it, for the logs.
type URLError struct {
	reason error
	detail string
	cause  error
}

func (e *URLError) Error() string {
	if e.detail != "" {
		return e.detail
	}
	return e.reason.Error()
}

// Is matches the reason: errors.Is(err, ErrHostNotAllowed).
func (e *URLError) Is(target error) bool { return target == e.reason }

// Unwrap is the cause, for the logs only.
func (e *URLError) Unwrap() error { return e.cause }

func refuse(reason, cause error) *URLError { return &URLError{reason: reason, cause: cause} }

// CheckURL refuses an endpoint URL that is not an absolute http(s) URL
// without credentials, fragment or whitespace; unless p.AllowPrivate, one
// on a port p does not allow, or whose host is an address, or resolves
// (with lookup) to any address, that is not Global. A host is an IP address
// or a DNS name, whose last label starts with a letter as every top-level
// domain does (a Unicode one included): "127.1" or "2130706433" is neither, and some resolvers read
// them as addresses.
func (p Policy) CheckURL(ctx context.Context, raw string, lookup func(context.Context, string) ([]netip.Addr, error)) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "" || u.Opaque != "":
		return refuse(ErrURLNotHTTP, nil)
	case u.User != nil:
		return refuse(ErrURLCredentials, nil)
	case u.Fragment != "" || strings.ContainsAny(raw, " \t\r\n#"):
		return refuse(ErrURLFragment, nil)
	case p.AllowPrivate:
		return nil
	}
	port := uint16(443)
	if u.Scheme == "http" {
		port = 80
	}
	if s := u.Port(); s != "" {
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			return refuse(ErrURLNotHTTP, err)
		}
		port = uint16(n)
	}
	if !slices.Contains(p.ports(), port) {
		return &URLError{reason: ErrPortNotAllowed, detail: fmt.Sprintf("%s: use %s", ErrPortNotAllowed, PortList(p.ports()))}
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !Global(ip) {
			return refuse(ErrAddressNotAllowed, fmt.Errorf("address %s", ip))
		}
		return nil
	}
	name := strings.TrimSuffix(host, ".")
	if last := name[strings.LastIndexByte(name, '.')+1:]; last == "" || !isLetter(last[0]) {
		return refuse(ErrHostNotAllowed, errors.New("not a DNS name"))
	}
	addrs, err := lookup(ctx, name)
	if err != nil {
		// The cause is logged: the resolver's own words, without the
		// name, which is the merchant's.
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			err = fmt.Errorf("lookup: %s (server %s)", dnsErr.Err, dnsErr.Server)
		}
		return refuse(ErrHostNotAllowed, err)
	}
	if len(addrs) == 0 {
		return refuse(ErrHostNotAllowed, errors.New("no addresses"))
	}
	for _, ip := range addrs {
		if !Global(ip) {
			return refuse(ErrHostNotAllowed, fmt.Errorf("resolves to %s", ip))
		}
	}
	return nil
}

// isLetter: an ASCII letter, or the first byte of a non-ASCII one (an
// internationalized top-level domain written in Unicode).
func isLetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80 }

// LookupHost resolves a host with the system's resolver.
func LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Control is a net.Dialer Control that refuses a connection to an address
// that is not Global, or to a port p does not allow: checking the URL when
// the endpoint is created is not enough, since its name may resolve
// elsewhere by the time of a delivery (DNS rebinding), and Control sees the
// address actually dialed, whatever the name resolved to. It is nil when
// p.AllowPrivate.
func (p Policy) Control() func(network, address string, c syscall.RawConn) error {
	if p.AllowPrivate {
		return nil
	}
	ports := p.ports()
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refuse(ErrAddressNotAllowed, err)
		}
		if !Global(ap.Addr()) {
			return refuse(ErrAddressNotAllowed, fmt.Errorf("address %s", ap.Addr()))
		}
		if !slices.Contains(ports, ap.Port()) {
			return refuse(ErrPortNotAllowed, fmt.Errorf("port %d", ap.Port()))
		}
		return nil
	}
}
