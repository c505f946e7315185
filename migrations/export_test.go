package migrations

// BeforeBaseline is the migration history the baseline took the place of.
var BeforeBaseline = beforeBaseline
