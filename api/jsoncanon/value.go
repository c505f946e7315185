package jsoncanon

import "strconv"

// Kind identifies which JSON type a Value holds and so which of its fields
// carries the value.
type Kind uint8

const (
	// Null is the literal null. It is the zero Kind, so the zero Value is
	// null.
	Null Kind = iota
	// Bool is true or false, held in Value.Bool.
	Bool
	// Number is a number, held in Value.Number as the literal was written.
	Number
	// String is a string, held unescaped in Value.String.
	String
	// Array is an array, held in Value.Elems.
	Array
	// Object is an object, held in Value.Members.
	Object
)

// String returns the JSON name of the kind, such as "object".
func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case Bool:
		return "bool"
	case Number:
		return "number"
	case String:
		return "string"
	case Array:
		return "array"
	case Object:
		return "object"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one parsed JSON value. Kind says which other field is meaningful.
//
// Values returned by Parse share memory with one copy of the input, so a
// small Value kept from a large body keeps the whole body alive.
type Value struct {
	// Kind is the JSON type of the value.
	Kind Kind
	// Bool is the value of a Bool.
	Bool bool
	// Number is the literal of a Number exactly as written, such as "1000",
	// "1.50", "1e3" or "-0". It is kept as text so that callers can insist on
	// a particular form (an integer amount, say) and so that no precision is
	// lost before canonicalization decides what the number means.
	Number string
	// String is the unescaped value of a String, always valid UTF-8 when it
	// comes from Parse.
	String string
	// Members are the members of an Object in source order. Parse guarantees
	// that their names are distinct.
	Members []Member
	// Elems are the elements of an Array.
	Elems []Value
}

// Member is one name/value pair of an object.
type Member struct {
	// Name is the unescaped member name.
	Name string
	// Value is the member's value.
	Value Value
}

// Member returns the value of the object member called name and whether
// there is one. It returns false for a Value that is not an object.
func (v Value) Member(name string) (Value, bool) {
	for i := range v.Members {
		if v.Members[i].Name == name {
			return v.Members[i].Value, true
		}
	}
	return Value{}, false
}
