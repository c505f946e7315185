package jsoncanon_test

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
)

func ExampleCanonical() {
	a, err := jsoncanon.Canonical([]byte(`{"currency": "USD", "amount": 1000, "metadata": {"order": "A-1"}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	b, err := jsoncanon.Canonical([]byte(`{"amount":1e3,"metadata":{"order":"A\u002d1"},"currency":"USD"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(a))
	fmt.Println(sha256.Sum256(a) == sha256.Sum256(b))
	// Output:
	// {"amount":1000,"currency":"USD","metadata":{"order":"A-1"}}
	// true
}

func ExampleParse() {
	_, err := jsoncanon.Parse([]byte(`{"amount":1000,"metadata":{"order":"A-1","order":"B-2"}}`))
	fmt.Println(errors.Is(err, jsoncanon.ErrDuplicateMember))

	var syntaxErr *jsoncanon.SyntaxError
	if errors.As(err, &syntaxErr) {
		fmt.Println(syntaxErr.Path, syntaxErr.Offset)
	}
	// Output:
	// true
	// metadata.order 41
}
