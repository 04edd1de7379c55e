package verify

// Internal functions the external tests check directly.
var (
	SameReply      = sameReply
	NormalizeError = normalizeError
)

var ExpandPlaceholders = expand
