package gen

// The package's helpers under the exported names its tests (package
// gen_test) use.
var (
	GoName      = deriveGoName
	Initialisms = sortedInitialisms
	OutputPath  = outputPath
	SHA1        = scriptSHA1
)

// GenVersion is genVersion.
const GenVersion = genVersion
