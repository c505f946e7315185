// Package secret makes and checks the bearer credentials chargeflow hands
// out: tenants' API keys ("cfk_…") and operators' tokens ("cfo_…"). A
// credential is its prefix, the owner's id without the id's own prefix, an
// underscore and a 256-bit secret in lowercase base32. Naming the owner lets
// a credential be checked against that owner's hashes only; only sha256 of
// the secret is stored, and hashes are compared in constant time
// (docs/architecture.md, "A second kind of credential, not a flag on a tenant").
//
// It imports nothing of chargeflow's but internal/ids.
package secret

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"strings"

	"github.com/chargeflow/chargeflow/internal/ids"
)

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Kind is one kind of credential: its prefix, and the prefix of the ids of
// its owners.
type Kind struct {
	// Prefix starts every credential of the kind, e.g. "cfk_".
	Prefix string
	// OwnerPrefix is the id prefix of the owners, e.g. "tn".
	OwnerPrefix string
}

// Mint makes a new credential for owner (an id with OwnerPrefix) and the
// hash to store. The credential is shown once; only the hash is kept.
func (k Kind) Mint(owner string) (credential string, hash []byte) {
	var raw [32]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails (Go 1.24+).
	encoded := strings.ToLower(encoding.EncodeToString(raw[:]))
	sum := sha256.Sum256([]byte(encoded))
	return k.Prefix + strings.TrimPrefix(owner, k.OwnerPrefix+"_") + "_" + encoded, sum[:]
}

// Parse splits a credential of this kind into its owner's id and the hash of
// its secret, without any I/O. A credential of another kind, or malformed,
// is not ok.
func (k Kind) Parse(credential string) (owner string, hash []byte, ok bool) {
	rest, found := strings.CutPrefix(credential, k.Prefix)
	if !found {
		return "", nil, false
	}
	suffix, encoded, found := strings.Cut(rest, "_")
	owner = k.OwnerPrefix + "_" + suffix
	if !found || !ids.Valid(k.OwnerPrefix, owner) || len(encoded) != encoding.EncodedLen(32) {
		return "", nil, false
	}
	sum := sha256.Sum256([]byte(encoded))
	return owner, sum[:], true
}

// Matches reports, in constant time, whether presented is stored.
func Matches(stored, presented []byte) bool {
	return subtle.ConstantTimeCompare(stored, presented) == 1
}
