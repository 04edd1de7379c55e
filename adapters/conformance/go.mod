module github.com/sluice-go/sluice/adapters/conformance

go 1.25.0

replace github.com/sluice-go/sluice => ../..
