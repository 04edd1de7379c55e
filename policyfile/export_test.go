package policyfile

// Fields maps each object of schema.json (by JSON pointer) to the fields
// the parser reads for it.
var Fields = map[string][]string{
	"#":                        configFields,
	"#/$defs/policy":           policyFields,
	"#/$defs/limit":            limitFields,
	"#/$defs/costFromRequest":  costFields,
	"#/$defs/identity/oneOf/1": identityKinds,
	"#/$defs/ip":               ipFields,
	"#/$defs/apiKey":           apiKeyFields,
	"#/$defs/named":            nameFields,
	"#/$defs/noParameters":     noFields,
	"#/$defs/tiers":            tiersFields,
	"#/$defs/limiter":          limiterFields,
}

// The parser's enumerations.
var (
	HeaderModes   = headerModes
	FailureModes  = failureModes
	ProxyHeaders  = proxyHeaders
	IdentityKinds = identityKinds
)
