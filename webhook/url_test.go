package webhook_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/webhook"
)

// registry is the test's own copy of the IANA IPv4 and IPv6 Special-Purpose
// Address Registries ("Globally Reachable"), with the rows the registries
// leave to others; TestSpecialPurposeRegistries checks that the code's
// tables hold exactly these rows, and every address of them as listed.
var registry = map[string]string{
	// IPv4.
	"0.0.0.0/0": "reachable", "0.0.0.0/8": "refused", "0.0.0.0/32": "refused", "10.0.0.0/8": "refused",
	"100.64.0.0/10": "refused", "127.0.0.0/8": "refused", "169.254.0.0/16": "refused", "172.16.0.0/12": "refused",
	"192.0.0.0/24": "refused", "192.0.0.0/29": "refused", "192.0.0.8/32": "refused", "192.0.0.9/32": "reachable",
	"192.0.0.10/32": "reachable", "192.0.0.170/32": "refused", "192.0.0.171/32": "refused", "192.0.2.0/24": "refused",
	"192.31.196.0/24": "reachable", "192.52.193.0/24": "reachable", "192.88.99.0/24": "refused", "192.168.0.0/16": "refused",
	"192.175.48.0/24": "reachable", "198.18.0.0/15": "refused", "198.51.100.0/24": "refused", "203.0.113.0/24": "refused",
	"224.0.0.0/4": "refused", "240.0.0.0/4": "refused", "255.255.255.255/32": "refused",
	// IPv6.
	"::/0": "refused", "2000::/3": "reachable", "::/128": "refused", "::1/128": "refused", "::/96": "refused",
	"::ffff:0.0.0.0/96": "embeds", "::ffff:0:0:0/96": "refused", "64:ff9b::/96": "embeds", "64:ff9b:1::/48": "refused",
	"100::/64": "refused", "100:0:0:1::/64": "refused", "2001::/23": "refused", "2001::/32": "embeds",
	"2001:1::1/128": "reachable", "2001:1::2/128": "reachable", "2001:1::3/128": "reachable", "2001:2::/48": "refused",
	"2001:3::/32": "reachable", "2001:4:112::/48": "reachable", "2001:10::/28": "refused", "2001:20::/28": "reachable",
	"2001:30::/28": "reachable", "2001:db8::/32": "refused", "2002::/16": "embeds", "2620:4f:8000::/48": "reachable",
	"3fff::/20": "refused", "5f00::/16": "refused", "fc00::/7": "refused", "fe80::/10": "refused", "fec0::/10": "refused",
	"ff00::/8": "refused",
}

// samples are a prefix's first, last and middle addresses, less those a
// more specific row of registry holds (that row tests them).
func samples(p netip.Prefix) []netip.Addr {
	first := p.Masked().Addr()
	b := first.AsSlice()
	last, middle := slices.Clone(b), slices.Clone(b)
	for i := p.Bits(); i < len(b)*8; i++ {
		last[i/8] |= 0x80 >> (i % 8)
	}
	if p.Bits() < len(b)*8 {
		middle[p.Bits()/8] |= 0x80 >> (p.Bits() % 8)
	}
	var out []netip.Addr
	for _, raw := range [][]byte{b, last, middle} {
		a, _ := netip.AddrFromSlice(raw)
		nested := false
		for other := range registry {
			o := netip.MustParsePrefix(other)
			if o.Bits() > p.Bits() && o.Addr().BitLen() == a.BitLen() && o.Contains(a) {
				nested = true
			}
		}
		if !nested && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// The ways an IPv6 address carries an IPv4 one.
func mapped(v4 netip.Addr) netip.Addr { return netip.AddrFrom16(v4.As16()) }

func compatible(v4 netip.Addr) netip.Addr {
	var b [16]byte
	copy(b[12:], v4.AsSlice())
	return netip.AddrFrom16(b)
}

func translated(v4 netip.Addr) netip.Addr { // ::ffff:0:a.b.c.d, RFC 2765
	var b [16]byte
	b[8], b[9] = 0xff, 0xff
	copy(b[12:], v4.AsSlice())
	return netip.AddrFrom16(b)
}

func nat64(v4 netip.Addr) netip.Addr { // 64:ff9b::a.b.c.d, RFC 6052
	b := netip.MustParseAddr("64:ff9b::").As16()
	copy(b[12:], v4.AsSlice())
	return netip.AddrFrom16(b)
}

func nat64Local(v4 netip.Addr) netip.Addr { // 64:ff9b:1::/48, RFC 6052 §2.2's /48 layout
	b := netip.MustParseAddr("64:ff9b:1::").As16()
	v := v4.As4()
	b[6], b[7], b[9], b[10] = v[0], v[1], v[2], v[3]
	return netip.AddrFrom16(b)
}

func sixToFour(v4 netip.Addr) netip.Addr { // 2002:aabb:ccdd::, RFC 3056
	b := netip.MustParseAddr("2002::").As16()
	copy(b[2:6], v4.AsSlice())
	b[15] = 1
	return netip.AddrFrom16(b)
}

func teredo(server, client netip.Addr) netip.Addr { // RFC 4380 §4
	b := netip.MustParseAddr("2001::").As16()
	copy(b[4:8], server.AsSlice())
	c := client.As4()
	b[10], b[11] = 0x1f, 0x90 // the obscured port
	b[12], b[13], b[14], b[15] = ^c[0], ^c[1], ^c[2], ^c[3]
	return netip.AddrFrom16(b)
}

var global4 = netip.MustParseAddr("8.8.8.8")

// Every row of both registries, each range's first, last and middle
// address; every IPv4 address refused, embedded in every IPv6 form that
// carries one, refused; the forms that may carry a reachable IPv4 address
// accept it, the others refuse even that; and a few truly global
// addresses accepted.
func TestSpecialPurposeRegistries(t *testing.T) {
	t.Parallel()
	got := map[string]string{}
	for _, r := range webhook.Registries() {
		require.NotEmpty(t, r.Name, r.Prefix)
		require.Regexp(t, `^RFC \d+`, r.RFC, "every row names its RFC: %s", r.Prefix)
		require.NotContains(t, got, r.Prefix, "one row per block")
		got[r.Prefix] = r.Reach
	}
	require.Equal(t, registry, got, "the code's tables are the registries")

	var refused4, reachable4 []netip.Addr
	for prefix, reach := range registry {
		p := netip.MustParsePrefix(prefix)
		if reach == "embeds" {
			continue
		}
		for _, a := range samples(p) {
			require.Equal(t, reach == "reachable", webhook.Global(a), "%s (%s, %s)", a, prefix, reach)
			if a.Is4() {
				require.Equal(t, reach == "reachable", webhook.Global(mapped(a)), "%s (%s, %s)", mapped(a), prefix, reach)
				if reach == "reachable" {
					reachable4 = append(reachable4, a)
				} else {
					refused4 = append(refused4, a)
				}
			}
		}
	}
	require.Greater(t, len(refused4), 40)

	carriers := map[string]func(netip.Addr) netip.Addr{
		"IPv4-mapped":   mapped,
		"NAT64 /96":     nat64,
		"6to4":          sixToFour,
		"Teredo server": func(v4 netip.Addr) netip.Addr { return teredo(v4, global4) },
		"Teredo client": func(v4 netip.Addr) netip.Addr { return teredo(global4, v4) },
	}
	never := map[string]func(netip.Addr) netip.Addr{
		"IPv4-compatible":     compatible,
		"IPv4-translated":     translated,
		"NAT64 local-use /48": nat64Local,
	}
	for _, v4 := range refused4 {
		for name, embed := range carriers {
			require.False(t, webhook.Global(embed(v4)), "%s in %s: %s", v4, name, embed(v4))
		}
		for name, embed := range never {
			require.False(t, webhook.Global(embed(v4)), "%s in %s: %s", v4, name, embed(v4))
		}
	}
	for _, v4 := range append(reachable4, global4, netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("93.184.215.14")) {
		for name, embed := range carriers {
			require.True(t, webhook.Global(embed(v4)), "%s in %s: %s", v4, name, embed(v4))
		}
		for name, embed := range never {
			require.False(t, webhook.Global(embed(v4)), "%s in %s: %s", v4, name, embed(v4))
		}
	}

	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001:81b::200e"} {
		require.True(t, webhook.Global(netip.MustParseAddr(a)), a)
	}
	for _, a := range []string{"fe80::1%eth0", "2001:4860:4860::8888%eth0"} {
		require.False(t, webhook.Global(netip.MustParseAddr(a)), "an address with a zone: %s", a)
	}
	require.False(t, webhook.Global(netip.Addr{}))
}

func resolves(addrs ...string) func(context.Context, string) ([]netip.Addr, error) {
	return func(context.Context, string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
}

func fails(err error) func(context.Context, string) ([]netip.Addr, error) {
	return func(context.Context, string) ([]netip.Addr, error) { return nil, err }
}

// A URL is refused in fixed words: the same for a name that does not exist,
// one the resolver cannot answer for and one that resolves to a private
// address, none of them quoting the resolver, an address or Go's text.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	public := resolves("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
	notFound := &net.DNSError{Err: "no such host", Name: "nowhere.example", Server: "10.255.255.53:53", IsNotFound: true}
	timeout := &net.DNSError{Err: "i/o timeout", Name: "slow.example", Server: "10.255.255.53:53", IsTimeout: true}
	for _, tc := range []struct {
		url    string
		lookup func(context.Context, string) ([]netip.Addr, error)
		want   error // nil: accepted
		// anyPolicy: refused even with AllowPrivate.
		anyPolicy bool
	}{
		{"https://merchant.example/hooks", public, nil, false},
		{"https://merchant.example./hooks", public, nil, false},
		{"http://93.184.215.14/hooks?token=x", public, nil, false},
		{"https://93.184.215.14:8443/hooks", public, nil, false},
		{"https://[2606:4700:4700::1111]/hooks", public, nil, false},
		{"http://[::ffff:93.184.215.14]/hooks", public, nil, false},
		{"https://xn--e1afmkfd.xn--p1ai/hooks", public, nil, false},
		{"https://пример.рф/hooks", public, nil, false},
		{"ftp://merchant.example/hooks", public, webhook.ErrURLNotHTTP, true},
		{"/hooks", public, webhook.ErrURLNotHTTP, true},
		{"https:merchant.example", public, webhook.ErrURLNotHTTP, true},
		{"https://user:pass@merchant.example/hooks", public, webhook.ErrURLCredentials, true},
		{"https://merchant.example/hooks#frag", public, webhook.ErrURLFragment, true},
		{"https://merchant.example/hooks#", public, webhook.ErrURLFragment, true},
		{"https://merchant.example:22/hooks", public, webhook.ErrPortNotAllowed, false},
		{"http://93.184.215.14:8080/hooks", public, webhook.ErrPortNotAllowed, false},
		{"https://merchant.example:0/hooks", public, webhook.ErrPortNotAllowed, false},
		{"http://127.0.0.1/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://[::1]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://169.254.169.254/latest/meta-data", public, webhook.ErrAddressNotAllowed, false},
		{"http://[::ffff:10.0.0.1]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://[64:ff9b::a9fe:a9fe]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://[2002:a00:1::1]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://[::a00:1]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://[fe80::1%25eth0]/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://198.18.0.1/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"http://240.0.0.1/hooks", public, webhook.ErrAddressNotAllowed, false},
		{"https://internal.example/hooks", resolves("93.184.215.14", "10.0.0.5"), webhook.ErrHostNotAllowed, false},
		{"https://rebind.example/hooks", resolves("64:ff9b::7f00:1"), webhook.ErrHostNotAllowed, false},
		{"https://nowhere.example/hooks", fails(notFound), webhook.ErrHostNotAllowed, false},
		{"https://slow.example/hooks", fails(timeout), webhook.ErrHostNotAllowed, false},
		{"https://empty.example/hooks", resolves(), webhook.ErrHostNotAllowed, false},
		{"http://127.1/hooks", public, webhook.ErrHostNotAllowed, false},
		{"http://2130706433/hooks", public, webhook.ErrHostNotAllowed, false},
		{"http://0x7f.1/hooks", public, webhook.ErrHostNotAllowed, false},
	} {
		err := webhook.Policy{}.CheckURL(t.Context(), tc.url, tc.lookup)
		if tc.want == nil {
			require.NoError(t, err, tc.url)
			continue
		}
		require.ErrorIs(t, err, tc.want, tc.url)
		if !errors.Is(tc.want, webhook.ErrPortNotAllowed) {
			require.Equal(t, tc.want.Error(), err.Error(), "fixed wording: %s", tc.url)
		}
		for _, leak := range []string{"10.255", "10.0.0", "no such host", "timeout", "127.0.0.1", "dial", "lookup"} {
			require.NotContains(t, err.Error(), leak, tc.url)
		}
		err = webhook.Policy{AllowPrivate: true}.CheckURL(t.Context(), tc.url, tc.lookup)
		if tc.anyPolicy {
			require.ErrorIs(t, err, tc.want, "refused with AllowPrivate too: %s", tc.url)
		} else {
			require.NoError(t, err, "AllowPrivate lifts the address and port rules: %s", tc.url)
		}
	}

	err := webhook.Policy{}.CheckURL(t.Context(), "https://merchant.example:22/hooks", public)
	require.Equal(t, "the url's port is not one webhooks are delivered to: use 80, 443 and 8443", err.Error())
	ports := webhook.Policy{Ports: []uint16{9443}}
	require.NoError(t, ports.CheckURL(t.Context(), "https://merchant.example:9443/hooks", public))
	require.ErrorIs(t, ports.CheckURL(t.Context(), "https://merchant.example/hooks", public), webhook.ErrPortNotAllowed,
		"an operator's list replaces the default one")
	var urlErr *webhook.URLError
	require.ErrorAs(t, webhook.Policy{}.CheckURL(t.Context(), "https://nowhere.example/", fails(notFound)), &urlErr)
	require.Equal(t, "lookup: no such host (server 10.255.255.53:53)", errors.Unwrap(urlErr).Error(),
		"the cause is kept, for the log, without the merchant's name")
}

// The dialer's Control sees the address actually dialed: a name resolving
// to loopback at delivery time (DNS rebinding) connects to nothing.
func TestControlRefusesAtConnect(t *testing.T) {
	t.Parallel()
	control := webhook.Policy{}.Control()
	for _, tc := range []struct {
		address string
		want    error
	}{
		{"93.184.215.14:443", nil},
		{"[2606:4700:4700::1111]:8443", nil},
		{"93.184.215.14:22", webhook.ErrPortNotAllowed},
		{"10.0.0.1:443", webhook.ErrAddressNotAllowed},
		{"[::ffff:127.0.0.1]:443", webhook.ErrAddressNotAllowed},
		{"[64:ff9b::a00:1]:443", webhook.ErrAddressNotAllowed},
		{"[2001:0:5db8:8888:0:1f90:f5ff:fffe]:443", webhook.ErrAddressNotAllowed}, // Teredo, client 10.0.0.1
		{"not an address", webhook.ErrAddressNotAllowed},
	} {
		err := control("tcp", tc.address, nil)
		if tc.want == nil {
			require.NoError(t, err, tc.address)
		} else {
			require.ErrorIs(t, err, tc.want, tc.address)
		}
	}
	require.Nil(t, webhook.Policy{AllowPrivate: true}.Control(), "AllowPrivate dials anything")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	d := net.Dialer{Timeout: time.Second, Control: webhook.Policy{Ports: []uint16{parsePort(t, port)}}.Control()}
	_, err = d.DialContext(t.Context(), "tcp", "localhost:"+port)
	require.ErrorIs(t, err, webhook.ErrAddressNotAllowed)
	select {
	case <-accepted:
		t.Fatal("a connection reached loopback")
	case <-time.After(100 * time.Millisecond):
	}
}

func parsePort(t *testing.T, s string) uint16 {
	t.Helper()
	ap, err := netip.ParseAddrPort("0.0.0.0:" + s)
	require.NoError(t, err)
	return ap.Port()
}

// disabled_reason says what happened, whatever the schedule.
func TestDisabledReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		attempts int
		span     time.Duration
		want     string
	}{
		{40, 31*time.Hour + 25*time.Minute, "a delivery failed all 40 of its attempts, made over 31 hours"},
		{40, 50*time.Hour + time.Minute, "a delivery failed all 40 of its attempts, made over 2 days"},
		{5, 90 * time.Millisecond, "a delivery failed all 5 of its attempts, made within a second"},
		{5, 1500 * time.Millisecond, "a delivery failed all 5 of its attempts, made over 1 second"},
		{12, 7*time.Minute + 59*time.Second, "a delivery failed all 12 of its attempts, made over 7 minutes"},
		{1, 0, "a delivery failed its only attempt"},
	} {
		got := webhook.DisabledReason(tc.attempts, tc.span)
		require.Equal(t, tc.want, got)
		require.False(t, strings.Contains(got, "day") && tc.span < 24*time.Hour, "no claim the span does not hold")
	}
}
