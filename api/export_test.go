package api

// ContainsPAN is containsPAN, for the tests of package api_test that look
// for card numbers in what the API logged or answered.
var ContainsPAN = containsPAN

// RedactCardNumbers is redactCardNumbers, for its own test.
var RedactCardNumbers = redactCardNumbers
