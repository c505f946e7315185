package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Sign is the Standard Webhooks signature of one delivery: "v1," and the
// base64 of HMAC-SHA256 over "id.timestamp.body", keyed with the bytes the
// secret's base64 (after "whsec_") encodes. id is the event's id, the same
// on every retry; timestamp is Unix seconds (docs/webhooks.md, "Deliveries").
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		return "", errors.New("webhook: a secret is whsec_ and base64")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}
