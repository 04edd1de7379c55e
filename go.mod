module github.com/sluice-go/sluice

go 1.25.0

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/dave/jennifer v1.7.1
	github.com/redis/rueidis v1.0.79
	github.com/rogpeppe/go-internal v1.16.0
	github.com/yuin/gopher-lua v1.1.2
)

require (
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/tools v0.26.0 // indirect
)
