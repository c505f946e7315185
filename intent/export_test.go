package intent

// TakeCensusBelow is TakeCensus with exactLimit in place of
// ExactCountLimit, so a test reaches the estimates with a few charges.
var TakeCensusBelow = takeCensus
