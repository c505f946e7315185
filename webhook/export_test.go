package webhook

// Row is a registry row as the tests read it.
type Row struct {
	Prefix, Name, RFC string
	// Reach is "refused", "reachable" or "embeds".
	Reach string
}

// Registries are the two special-purpose tables, IPv4 then IPv6.
func Registries() []Row {
	var rows []Row
	for _, table := range [][]special{specialIPv4, specialIPv6} {
		for _, r := range table {
			rows = append(rows, Row{Prefix: r.Prefix.String(), Name: r.Name, RFC: r.RFC, Reach: [...]string{"refused", "reachable", "embeds"}[r.reach]})
		}
	}
	return rows
}
