package webhook

import (
	"net/netip"
)

// Which addresses a delivery may reach (docs/webhooks.md, "Which addresses"):
// only those the IANA special-purpose registries say are globally
// reachable. The two tables below are those registries (IPv4 and IPv6
// Special-Purpose Address Registries, RFC 6890 and the RFCs each row
// names), with their "Globally Reachable" column, plus the few rows the
// registries leave to others (multicast, the deprecated IPv6 forms, the
// IPv6 space outside global unicast). An address is judged by the most
// specific row that holds it: 192.0.0.9 (reachable) inside 192.0.0.0/24
// (not). The rows whose address carries an IPv4 address — IPv4-mapped,
// the NAT64 well-known prefix, 6to4, Teredo — say nothing by themselves
// (the registry's "N/A", or an address that is its IPv4 address to the
// dialer): the IPv4 addresses inside are unwrapped and each must be
// reachable. TestSpecialPurposeRegistries tests every row.

// reach is what a row says of its addresses as a delivery's destination.
type reach int

const (
	// refused: Globally Reachable is False, or N/A for a block that is no
	// unicast destination.
	refused reach = iota
	// reachable: Globally Reachable is True.
	reachable
	// embeds: the address carries IPv4 addresses, and is reachable when
	// every one of them is (unwrap).
	embeds
)

// special is one row of a registry.
type special struct {
	Prefix netip.Prefix
	Name   string
	RFC    string
	reach  reach
	// unwrap returns the IPv4 addresses an embeds row's address carries.
	unwrap func(netip.Addr) []netip.Addr
}

func row(prefix, name, rfc string, r reach) special {
	return special{Prefix: netip.MustParsePrefix(prefix), Name: name, RFC: rfc, reach: r}
}

func embedding(prefix, name, rfc string, unwrap func(netip.Addr) []netip.Addr) special {
	return special{Prefix: netip.MustParsePrefix(prefix), Name: name, RFC: rfc, reach: embeds, unwrap: unwrap}
}

// specialIPv4 is the IANA IPv4 Special-Purpose Address Registry, and the
// rest of the IPv4 space.
var specialIPv4 = []special{
	row("0.0.0.0/0", "unicast space allocated to the regional registries (IANA IPv4 Address Space Registry)", "RFC 7249", reachable),
	row("0.0.0.0/8", "\"This network\"", "RFC 791, §3.2", refused),
	row("0.0.0.0/32", "\"This host on this network\"", "RFC 1122, §3.2.1.3", refused),
	row("10.0.0.0/8", "Private-Use", "RFC 1918", refused),
	row("100.64.0.0/10", "Shared Address Space", "RFC 6598", refused),
	row("127.0.0.0/8", "Loopback", "RFC 1122, §3.2.1.3", refused),
	row("169.254.0.0/16", "Link Local", "RFC 3927", refused),
	row("172.16.0.0/12", "Private-Use", "RFC 1918", refused),
	row("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890, §2.1", refused),
	row("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", refused),
	row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", refused),
	row("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", reachable),
	row("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", reachable),
	row("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 §2.2", refused),
	row("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 §2.2", refused),
	row("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", refused),
	row("192.31.196.0/24", "AS112-v4", "RFC 7535", reachable),
	row("192.52.193.0/24", "AMT", "RFC 7450", reachable),
	row("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", refused),
	row("192.168.0.0/16", "Private-Use", "RFC 1918", refused),
	row("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", reachable),
	row("198.18.0.0/15", "Benchmarking", "RFC 2544", refused),
	row("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", refused),
	row("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", refused),
	row("224.0.0.0/4", "Multicast (IPv4 Multicast Address Space Registry)", "RFC 5771", refused),
	row("240.0.0.0/4", "Reserved", "RFC 1112, §4", refused),
	row("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 §7", refused),
}

// specialIPv6 is the IANA IPv6 Special-Purpose Address Registry, the
// deprecated forms that carry an IPv4 address, and the rest of the IPv6
// space: only 2000::/3 is global unicast.
var specialIPv6 = []special{
	row("::/0", "outside global unicast (IANA IPv6 Address Space Registry)", "RFC 4291, §2.4", refused),
	row("2000::/3", "Global Unicast (IANA IPv6 Address Space Registry)", "RFC 4291, §2.4", reachable),
	row("::/128", "Unspecified Address", "RFC 4291", refused),
	row("::1/128", "Loopback Address", "RFC 4291", refused),
	row("::/96", "IPv4-Compatible IPv6 Address (deprecated)", "RFC 4291, §2.5.5.1", refused),
	embedding("::ffff:0:0/96", "IPv4-mapped Address: to the dialer, the IPv4 address itself", "RFC 4291", last32),
	row("::ffff:0:0:0/96", "IPv4-translated Address", "RFC 2765, §2.1", refused),
	embedding("64:ff9b::/96", "IPv4-IPv6 Translation (NAT64 well-known prefix)", "RFC 6052", last32),
	row("64:ff9b:1::/48", "IPv4-IPv6 Translation (local use)", "RFC 8215", refused),
	row("100::/64", "Discard-Only Address Block", "RFC 6666", refused),
	row("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", refused),
	row("2001::/23", "IETF Protocol Assignments", "RFC 2928", refused),
	embedding("2001::/32", "TEREDO", "RFC 4380, RFC 8190", teredo),
	row("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", reachable),
	row("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", reachable),
	row("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", reachable),
	row("2001:2::/48", "Benchmarking", "RFC 5180", refused),
	row("2001:3::/32", "AMT", "RFC 7450", reachable),
	row("2001:4:112::/48", "AS112-v6", "RFC 7535", reachable),
	row("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", refused),
	row("2001:20::/28", "ORCHIDv2", "RFC 7343", reachable),
	row("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", reachable),
	row("2001:db8::/32", "Documentation", "RFC 3849", refused),
	embedding("2002::/16", "6to4", "RFC 3056", sixToFour),
	row("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", reachable),
	row("3fff::/20", "Documentation", "RFC 9637", refused),
	row("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", refused),
	row("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", refused),
	row("fe80::/10", "Link-Local Unicast", "RFC 4291", refused),
	row("fec0::/10", "Site-Local Unicast (deprecated)", "RFC 3879", refused),
	row("ff00::/8", "Multicast", "RFC 4291, §2.7", refused),
}

// last32 is the IPv4 address in an address's last 32 bits: IPv4-mapped,
// and the NAT64 well-known prefix (RFC 6052, §2.2, for a /96).
func last32(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
}

// sixToFour is the IPv4 address of a 6to4 address, bits 16 to 47 (RFC
// 3056, §2).
func sixToFour(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
}

// teredo is a Teredo address's server (bits 32 to 63) and client (the last
// 32 bits, every bit inverted) IPv4 addresses (RFC 4380, §4).
func teredo(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
	return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
}

// rowOf is the most specific row of the table that holds ip. Each table's
// first row holds every address of its family.
func rowOf(table []special, ip netip.Addr) special {
	best := table[0]
	for _, r := range table[1:] {
		if r.Prefix.Contains(ip) && r.Prefix.Bits() > best.Prefix.Bits() {
			best = r
		}
	}
	return best
}

// Global reports whether a delivery may reach ip: the special-purpose
// registries say it is globally reachable, and so is every IPv4 address it
// carries. An address with a zone (fe80::1%eth0) never is.
func Global(ip netip.Addr) bool {
	if !ip.IsValid() || ip.Zone() != "" {
		return false
	}
	table := specialIPv6
	if ip.Is4() {
		table = specialIPv4
	}
	r := rowOf(table, ip)
	switch r.reach {
	case reachable:
		return true
	case embeds:
		for _, inner := range r.unwrap(ip) {
			if !Global(inner) {
				return false
			}
		}
		return true
	}
	return false
}
