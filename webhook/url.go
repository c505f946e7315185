package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ErrPrivateAddress means a URL resolves to an address chargeflow will not
// send to: loopback, private, link-local, shared (CGNAT), unspecified or
// multicast. A merchant's endpoint URL would otherwise reach the network
// chargeflow runs in (SSRF). --webhooks-allow-private allows them, for
// tests and a laptop (docs/webhooks.md, "Endpoints").
var ErrPrivateAddress = errors.New("webhook: the URL resolves to a private or local address")

// cgnat is the shared address space of RFC 6598, private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// forbidden reports whether ip is an address a delivery must not reach.
func forbidden(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip) ||
		(ip.Is4() && ip.As4()[0] == 0)
}

// CheckURL refuses an endpoint URL that is not an absolute http(s) URL
// without credentials, or whose host resolves (with lookup) to an address
// forbidden says no to, unless allowPrivate.
func CheckURL(ctx context.Context, raw string, allowPrivate bool, lookup func(context.Context, string) ([]netip.Addr, error)) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Hostname() == "":
		return errors.New("the url must be an absolute http or https URL")
	case u.User != nil:
		return errors.New("the url must not carry credentials")
	case u.Fragment != "" || strings.ContainsAny(raw, " \t\r\n"):
		return errors.New("the url must not have a fragment or whitespace")
	case allowPrivate:
		return nil
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, ip)
	} else if addrs, err = lookup(ctx, host); err != nil {
		return fmt.Errorf("the url's host does not resolve: %w", err)
	}
	for _, ip := range addrs {
		if forbidden(ip) {
			return ErrPrivateAddress
		}
	}
	return nil
}

// LookupHost resolves a host with the system's resolver.
func LookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// DialControl is a net.Dialer Control that refuses to connect to a
// forbidden address: checking the URL when the endpoint is created is not
// enough, since its name may resolve elsewhere by the time of a delivery.
func DialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dial %s: %w", address, err)
	}
	if forbidden(ap.Addr()) {
		return ErrPrivateAddress
	}
	return nil
}
