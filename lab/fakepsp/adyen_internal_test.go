package fakepsp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The signature of a notification item is Adyen's: the known answer is
// the one Adyen's Go library (adyen-go-api-library, hmacvalidator) tests
// its own signing with.
func TestAdyenHMACKnownAnswer(t *testing.T) {
	t.Parallel()

	item := adyenNotificationRequestItem{
		PSPReference: "pspReference", OriginalReference: "originalReference", MerchantAccountCode: "merchantAccount",
		MerchantReference: "reference", Amount: adyenAmount{Currency: "EUR", Value: 1000}, EventCode: "EVENT", Success: "true",
	}
	require.Equal(t, "pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true", string(item.signedData()))
	require.Equal(t, "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc=",
		adyenHMAC("DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00", item.signedData()))

	// An absent originalReference is an empty field.
	item.OriginalReference = ""
	require.Equal(t, "pspReference::merchantAccount:reference:1000:EUR:EVENT:true", string(item.signedData()))
}
