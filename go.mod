module github.com/sluice-go/sluice

go 1.26.0

require (
	github.com/dave/jennifer v1.7.1
	github.com/redis/rueidis v1.0.79
	github.com/yuin/gopher-lua v1.1.2
)

require golang.org/x/sys v0.47.0 // indirect
