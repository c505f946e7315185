package delivery

// Describe is describe, for the tests.
var Describe = describe
