package policyfile

import _ "embed"

// Schema is the JSON Schema (draft 2020-12) of the policy file, for
// editors and CI: point yaml-language-server at it with a first line
// "# yaml-language-server: $schema=URL", or validate with any JSON Schema
// tool. Parse checks everything the schema does, and more (durations'
// ranges, references, duplicate names); docs/policies.md shows its use.
//
//go:embed schema.json
var Schema []byte
