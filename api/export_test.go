package api

// RedactCardNumbers is redactCardNumbers, for its own test.
var RedactCardNumbers = redactCardNumbers
